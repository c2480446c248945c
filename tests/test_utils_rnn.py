"""nn.utils.rnn: pack_padded_sequence / pad_packed_sequence / pad_sequence / pack_sequence and
friends against torch 2.13 (data layout, batch_sizes, sorted/unsorted indices, padding value,
batch_first, total_length, padding_side), their gradients, and errors (including the ones torch
does not raise and reads out of bounds instead)."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
from tinyopt.nn.utils.rnn import (PackedSequence, invert_permutation, pack_padded_sequence,
                                  pack_sequence, pad_packed_sequence, pad_sequence,
                                  unpack_sequence, unpad_sequence)

rng = np.random.default_rng(0)


def _tr():
    torch = pytest.importorskip("torch")
    import torch.nn.utils.rnn as tr
    return torch, tr


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("lengths, sort", [([5, 3, 3, 1], True), ([2, 5, 1, 5], False)])
def test_pack_and_pad_match_torch(batch_first, lengths, sort):
    torch, tr = _tr()
    shape = (4, 5, 3) if batch_first else (5, 4, 3)
    x = rng.standard_normal(shape)
    pt = tr.pack_padded_sequence(torch.tensor(x), lengths, batch_first, enforce_sorted=sort)
    po = pack_padded_sequence(x, lengths, batch_first, enforce_sorted=sort)
    assert isinstance(po, PackedSequence)
    np.testing.assert_array_equal(po.data.numpy(), pt.data.numpy())
    np.testing.assert_array_equal(po.batch_sizes.numpy(), pt.batch_sizes.numpy())
    for a, b in ((po.sorted_indices, pt.sorted_indices),
                 (po.unsorted_indices, pt.unsorted_indices)):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    for kw in (dict(), dict(padding_value=-1.5, total_length=7)):
        yt, lt = tr.pad_packed_sequence(pt, batch_first, **kw)
        yo, lo = pad_packed_sequence(po, batch_first, **kw)
        np.testing.assert_array_equal(yo.numpy(), yt.numpy())
        np.testing.assert_array_equal(lo.numpy(), lt.numpy())


@pytest.mark.parametrize("kw", [dict(), dict(batch_first=True, padding_value=2.0),
                                dict(padding_side="left")])
def test_pad_sequence_and_pack_sequence_match_torch(kw):
    torch, tr = _tr()
    seqs = [rng.standard_normal((n, 2)) for n in (3, 5, 1)]
    np.testing.assert_array_equal(pad_sequence(seqs, **kw).numpy(),
                                  tr.pad_sequence([torch.tensor(s) for s in seqs], **kw).numpy())
    ints = [np.arange(n) for n in (3, 2, 1)]
    p, q = pack_sequence(ints), tr.pack_sequence([torch.tensor(s) for s in ints])
    np.testing.assert_array_equal(p.data.numpy(), q.data.numpy())
    assert p.sorted_indices is None
    back = unpack_sequence(pack_sequence(seqs, enforce_sorted=False))
    for a, b in zip(back, seqs):
        np.testing.assert_array_equal(a.numpy(), b)
    padded = pad_sequence(seqs, batch_first=True)
    for a, b in zip(unpad_sequence(padded, [3, 5, 1], batch_first=True), seqs):
        np.testing.assert_array_equal(a.numpy(), b)


def test_gradients_flow_through_packing():
    lengths = [2, 4, 1]
    gradcheck(lambda x: pack_padded_sequence(x, lengths, enforce_sorted=False).data,
              rng.standard_normal((4, 3, 2)))
    packed = pack_padded_sequence(rng.standard_normal((4, 3, 2)), lengths, enforce_sorted=False)

    def unpack(d):
        return pad_packed_sequence(packed._replace(data=d), padding_value=0.5)[0]
    gradcheck(unpack, rng.standard_normal(packed.data.shape))
    gradcheck(lambda a, b: pad_sequence([a, b]), rng.standard_normal((3, 2)),
              rng.standard_normal((1, 2)))


def test_invert_permutation_and_packed_methods():
    np.testing.assert_array_equal(invert_permutation(to.tensor([2, 0, 1])).numpy(), [1, 2, 0])
    assert invert_permutation(None) is None
    p = pack_padded_sequence(rng.standard_normal((3, 2, 1)).astype(np.float32), [3, 2])
    assert p.double().data.dtype == np.float64 and p.cpu() is p and not p.is_cuda


def test_errors():
    x = rng.standard_normal((4, 3, 2))
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
        pack_padded_sequence(x, [3, 4, 1])
    with pytest.raises(RuntimeError, match="Length of all samples has to be greater than 0"):
        pack_padded_sequence(x, [3, 0, 1], enforce_sorted=False)
    # torch reads past the padded batch here; tinyopt refuses
    with pytest.raises(ValueError, match="longer than the padded input"):
        pack_padded_sequence(x, [5, 2, 1])
    with pytest.raises(ValueError, match="Expected `len\\(lengths\\)` to be equal to batch_size"):
        pack_padded_sequence(x, [3, 2])
    with pytest.raises(ValueError, match="Expected total_length to be at least"):
        pad_packed_sequence(pack_padded_sequence(x, [4, 2, 1]), total_length=2)
    with pytest.raises(RuntimeError, match="Expected iterable"):
        pad_sequence(to.tensor(x))
