"""Variable-length batches for the recurrent layers, as ``torch.nn.utils.rnn``.

A :class:`PackedSequence` holds the steps of B sequences of different lengths without padding:
``data`` stacks, for t = 0, 1, ..., the t-th step of every sequence that is longer than t, longest
sequence first; ``batch_sizes[t]`` says how many that is.  ``sorted_indices`` maps that order to
the batch order (``None`` when the batch was already sorted by decreasing length)::

    padded = ...                                   # (T, B, *) with sequences of lengths [3, 5, 2]
    packed = pack_padded_sequence(padded, [3, 5, 2], enforce_sorted=False)
    out, h_n = nn.GRU(8, 16)(packed)               # h_n: each sequence's state at its last step
    y, lengths = pad_packed_sequence(out)          # (5, 3, 16), padding zero; lengths [3, 5, 2]

The recurrent layers run a packed batch as one padded batch in which each row stops at its own
length (see ``engine/ops/rnn.py``); the packing and unpacking here are one gather or scatter of
rows each (index arrays bound per run, so a new batch of the same shapes reuses the plan).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from tinyopt.engine.ops.movement import cat
from tinyopt.engine.ops.rnn import gather_rows, scatter_rows
from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
           "unpad_sequence", "pack_sequence", "unpack_sequence", "invert_permutation"]


def _ints(x) -> np.ndarray:
    """``x`` (a list, a numpy array or a tensor) as a 1-D numpy int64 array."""
    if isinstance(x, Tensor):
        x = x.numpy()
    return np.asarray(x).astype(np.int64, copy=False).reshape(-1)


def _int_tensor(a: np.ndarray) -> Tensor:
    return as_tensor(np.ascontiguousarray(a, dtype=np.int64))


class PackedSequence(NamedTuple):
    """The steps of a batch of sequences without their padding (see the module docstring).

    ``data`` (sum of lengths, *) a Tensor; ``batch_sizes`` (T,) int64; ``sorted_indices`` and
    ``unsorted_indices`` (B,) int64 or None.  The index tensors are input leaves (their values are
    known when the graph is built)."""

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def to(self, *args, **kwargs) -> PackedSequence:
        """``data.to(...)`` (a dtype; the only device is the CPU), the indices unchanged."""
        data = self.data.to(*args, **kwargs) if args or kwargs else self.data
        return self._replace(data=data)

    def cpu(self) -> PackedSequence:
        """This packed sequence itself (everything is on the CPU)."""
        return self

    def float(self) -> PackedSequence:
        """A copy whose ``data`` is float32 (the batch sizes and indices unchanged)."""
        return self._replace(data=self.data.to(np.float32))

    def double(self) -> PackedSequence:
        """A copy whose ``data`` is float64 (the batch sizes and indices unchanged)."""
        return self._replace(data=self.data.to(np.float64))

    def long(self) -> PackedSequence:
        """A copy whose ``data`` is int64 (the batch sizes and indices unchanged)."""
        return self._replace(data=self.data.to(np.int64))

    @property
    def is_cuda(self) -> bool:
        """Always False (no GPU)."""
        return False

    def is_pinned(self) -> bool:
        """Always False (no GPU, nothing is pinned)."""
        return False

    # ---- the layout, for the recurrent layers ----------------------------------------------
    def _batch_sizes(self) -> np.ndarray:
        return _ints(self.batch_sizes)

    def _order(self) -> np.ndarray:
        """sorted position i -> batch row."""
        B = int(self._batch_sizes()[0])
        return np.arange(B) if self.sorted_indices is None else _ints(self.sorted_indices)

    def _lengths(self) -> np.ndarray:
        """Each batch row's length, in batch order."""
        bs = self._batch_sizes()
        sorted_lengths = (bs[None, :] > np.arange(int(bs[0]))[:, None]).sum(1)
        lengths = np.empty_like(sorted_lengths)
        lengths[self._order()] = sorted_lengths
        return lengths

    def _positions(self, batch_first: bool = False, T: int | None = None) -> np.ndarray:
        """For each row of ``data``, its flat position in a padded (T, B) (or (B, T)) batch."""
        bs = self._batch_sizes()
        order = self._order()
        T = len(bs) if T is None else T
        B = int(bs[0])
        t = np.repeat(np.arange(len(bs)), bs)
        b = order[np.concatenate([np.arange(n) for n in bs])]
        return b * T + t if batch_first else t * B + b


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The inverse of a permutation of 0..n-1 (None stays None)."""
    if permutation is None:
        return None
    p = _ints(permutation)
    inv = np.empty_like(p)
    inv[p] = np.arange(len(p))
    return _int_tensor(inv)


def _packed_layout(lengths: np.ndarray, enforce_sorted: bool
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    if len(lengths) and lengths.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element "
                           "in 'lengths' that is <= 0")
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                               "`enforce_sorted` is True. You can pass `enforce_sorted=False` "
                               "to pack_padded_sequence and/or pack_sequence to sidestep this "
                               "requirement if you do not need ONNX exportability.")
        order = None
        sorted_lengths = lengths
    else:
        order = np.argsort(-lengths, kind="stable")
        sorted_lengths = lengths[order]
    T = int(sorted_lengths[0])
    batch_sizes = (sorted_lengths[None, :] > np.arange(T)[:, None]).sum(1)
    return batch_sizes, order


def pack_padded_sequence(input, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch (T, B, *) (or (B, T, *) with ``batch_first``) of sequences of the
    given ``lengths``; with ``enforce_sorted`` the lengths must be in decreasing order."""
    x = as_tensor(input)
    lengths = _ints(lengths)
    if x.ndim < 2:
        raise ValueError(f"pack_padded_sequence: expected an input of at least 2 dimensions "
                         f"(T, B, *), got shape {x.shape}")
    T, B = (x.shape[1], x.shape[0]) if batch_first else x.shape[:2]
    if len(lengths) != B:
        raise ValueError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                         f"{len(lengths)} (batch_size={B})")
    if len(lengths) and lengths.max() > T:
        raise ValueError(f"pack_padded_sequence: a length of {int(lengths.max())} is longer than "
                         f"the padded input ({T} steps, shape {x.shape})")
    batch_sizes, order = _packed_layout(lengths, enforce_sorted)
    packed = PackedSequence(x, _int_tensor(batch_sizes),
                            None if order is None else _int_tensor(order),
                            None if order is None else invert_permutation(_int_tensor(order)))
    pos = packed._positions(batch_first, T)
    data = gather_rows(x.reshape((T * B,) + x.shape[2:]), pos)
    return packed._replace(data=data)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length: int | None = None
                        ) -> tuple[Tensor, Tensor]:
    """The inverse of :func:`pack_padded_sequence`: ``(padded, lengths)`` with the batch in its
    original order, padding ``padding_value``, and ``total_length`` steps if given."""
    bs = sequence._batch_sizes()
    T = len(bs)
    if total_length is not None:
        if total_length < T:
            raise ValueError(f"Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {T}")
        T = int(total_length)
    B = int(bs[0])
    data = as_tensor(sequence.data)
    rest = data.shape[1:]
    pos = sequence._positions(batch_first, T)
    padded = scatter_rows(data, pos, T * B)
    if padding_value != 0:
        fill = np.full((T * B,) + rest, padding_value, dtype=data.dtype)
        fill[pos] = 0
        padded = padded + as_tensor(fill)
    shape = ((B, T) if batch_first else (T, B)) + rest
    return padded.reshape(shape), _int_tensor(sequence._lengths())


def pad_sequence(sequences: Sequence[Tensor] | Iterable[Tensor], batch_first: bool = False,
                 padding_value: float = 0.0, padding_side: str = "right") -> Tensor:
    """Stack sequences (L_i, *) into one padded batch (T, B, *) (or (B, T, *)), T = max L_i."""
    if isinstance(sequences, Tensor) or not isinstance(sequences, Iterable):
        raise RuntimeError(f"pad_sequence: Expected iterable for input sequences, but got arg of "
                           f"type: {type(sequences)}")
    seqs = [as_tensor(s) for s in sequences]
    if not seqs:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got "
                         f"{padding_side}.")
    rest = seqs[0].shape[1:]
    for s in seqs:
        if s.ndim == 0 or s.shape[1:] != rest:
            raise RuntimeError(f"pad_sequence: every sequence must have shape (L, "
                               f"{', '.join(map(str, rest))}), got {s.shape}")
    lengths = np.array([s.shape[0] for s in seqs], dtype=np.int64)
    T, B = int(lengths.max()), len(seqs)
    t = np.concatenate([np.arange(n) for n in lengths])
    if padding_side == "left":
        t = t + np.repeat(T - lengths, lengths)
    b = np.repeat(np.arange(B), lengths)
    pos = b * T + t if batch_first else t * B + b
    padded = scatter_rows(cat(seqs, 0) if B > 1 else seqs[0], pos, T * B)
    if padding_value != 0:
        fill = np.full((T * B,) + rest, padding_value, dtype=padded.dtype)
        fill[pos] = 0
        padded = padded + as_tensor(fill)
    return padded.reshape(((B, T) if batch_first else (T, B)) + rest)


def unpad_sequence(padded_sequences, lengths, batch_first: bool = False) -> list[Tensor]:
    """The sequences of a padded batch as a list, each cut to its length."""
    x = as_tensor(padded_sequences)
    lengths = _ints(lengths)
    return [x[b, :int(n)] if batch_first else x[:int(n), b] for b, n in enumerate(lengths)]


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """``pack_padded_sequence(pad_sequence(sequences), lengths)``."""
    lengths = [as_tensor(s).shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The sequences of a PackedSequence as a list of tensors (L_i, *), in batch order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
