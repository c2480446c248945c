"""Flat storage: a parameter group's parameters, gradients and all optimizer state, contiguous.

For each group and each dtype in it, a :class:`FlatBuffer` lays the parameters end to end::

    data     [ p0 ........ | p1 .. | p2 ............ ]   Parameter storage (p._data) are views
    grad     [ g0 ........ | g1 .. | g2 ............ ]   Parameter gradients (p._grad) are views
    vectors  exp_avg, exp_avg_sq, ...                    one buffer per state name, same layout
    seg      [0, n0, n0 + n1, n0 + n1 + n2]              where each parameter starts
    flags    [has_grad(p0), has_grad(p1), has_grad(p2)]  kept up to date by Parameter itself
    scalars  [[step, mu_product, ...] per parameter]     per-parameter scalar state, float32
    sides    row_var [ r0 ... | r2 .. ]                  state of other shapes (Adafactor's
                                                         factors), each with its own seg

so a fused kernel updates the whole group in one call with no Python loop over parameters, and
``optimizer.state[p][name]`` are views into these buffers (0-d views for scalar state).

Start addresses are staggered: buffer ``k`` of a group starts at ``k * 640`` bytes past a 4 KiB
boundary (mod 4096).  Streams whose addresses agree in their low 12 bits make the CPU's
memory disambiguation see false store-to-load dependencies (4K aliasing); on the machine where
the optimizer issue was written, an Adam-shaped kernel over four such arrays ran at 17 GB/s
against 54 GB/s staggered.  How much it matters depends on the CPU: ``benchmarks/bench_optim.py``
measures both layouts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tinyopt.engine.tensor import Parameter
from tinyopt.kernels.optim import LOW_MODES

CHUNK = 16384
"""Elements per parallel work item of the fused kernels."""

STAGGER = 640
"""Bytes between the start offsets (mod 4 KiB) of consecutive buffers of one FlatBuffer."""

SCALAR_SLOTS = 4
"""Columns of ``FlatBuffer.scalars`` (the kernels' per-parameter scratch ``coef`` has twice as many:
the coefficients, and the next scalar state before it is stored)."""

_PAGE = 4096
_INF = float("inf")


def staggered_zeros(n: int, dtype, slot: int, stagger: int = STAGGER) -> np.ndarray:
    """A zeroed 1-d array of ``n`` elements starting at ``(slot * stagger) % 4096`` past a 4 KiB boundary.

    ``stagger=0`` gives the aliased layout (every array at the same offset), for benchmarks.
    """
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    raw = np.zeros(nbytes + 2 * _PAGE, dtype=np.uint8)
    want = (slot * stagger) % _PAGE
    off = (want - raw.ctypes.data) % _PAGE
    return raw[off:off + nbytes].view(dtype)


class FlatBuffer:
    """The parameters of one dtype in one group, with their gradients and every piece of their
    optimizer state, in flat buffers (see the module docstring).

    Args:
        params: the parameters, in group order (each appears once).
        dtype: their dtype.
        scalar_names: the per-parameter scalar state, in column order; ``"step"`` is always
            column 0 (whether or not the optimizer exposes it).

    What optimizers, DDP and ZeRO use (everything else is private):

    - ``params``, ``dtype``, ``numel``; ``seg`` (int64, ``len(params) + 1``): parameter ``j``
      occupies ``[seg[j], seg[j + 1])`` of every flat buffer.
    - ``data``, ``grad``: the flat parameter and gradient storage; each parameter's ``_data`` and
      ``_grad`` are views into them (a gradient reduction over ``grad`` is one collective per
      buffer).  ``flags`` (uint8): 1 where the parameter has a gradient (``_grad`` not None).
    - ``vectors``: state name -> flat state buffer (same layout); :meth:`add_vectors` allocates.
      ``scalars`` (float32, ``(len(params), 4)``): per-parameter scalar state, column ``k``
      named ``scalar_names[k]``; ``steps`` is column 0.
    - ``sides``: state name -> ``(flat, seg)`` for state not shaped like the parameters
      (Adafactor's row and column factors): parameter ``j``'s part is ``flat[seg[j]:seg[j+1]]``,
      shaped ``side_shapes[name][j]`` (None: it has none); :meth:`add_sides` allocates.
      ``scratch``: arrays an algorithm keeps with the buffer that are not state.
    - ``view(flat, j)``: parameter ``j``'s part of a flat buffer, shaped like the parameter;
      ``state_view(name, j)`` / ``state_views(j)``: its part of a vector or side state.
    - ``kernel_args(names)``: the arrays a fused kernel takes; ``host(values, wide)``: the
      record of named host scalars it reads.
    - ``pack()``: make the parameters' storage views into ``data``/``grad`` again (after another
      optimizer packed one of them: ``stale`` is then True; or after replacing ``data``, as
      ZeRO-1 does to make a shard of a bigger buffer the storage).

    Low precision: for float16 and bfloat16 parameters (``storage``), ``dtype`` is float32 and
    ``data`` holds their float32 master weights; ``low`` is the 16-bit flat buffer the
    parameters' storage views, which the walker's ``kernel.low[mode]`` rewrites (rounded) in the
    same pass that updates the masters; ``grad`` and ``vectors`` are float32 (a 16-bit
    parameter's gradient is float32).  ``mode`` is the kernel mode (``kernels.optim.F16`` or
    ``BF16``), 0 for float32/float64 buffers, whose ``low`` is None.
    """

    def __init__(self, params: list[Parameter], dtype: np.dtype,
                 scalar_names: tuple[str, ...] = ("step",)) -> None:
        if scalar_names[:1] != ("step",) or len(scalar_names) > SCALAR_SLOTS:
            raise ValueError(f"scalar state must start with 'step' and have at most "
                             f"{SCALAR_SLOTS} names, got {scalar_names}")
        self.params = params
        self.storage = np.dtype(dtype)
        self.mode = LOW_MODES.get(self.storage.name, 0) if self.storage.itemsize == 2 else 0
        self.dtype = np.dtype(np.float32) if self.mode else self.storage
        self.scalar_names = tuple(scalar_names)
        sizes = np.array([p.numel() for p in params], dtype=np.int64)
        self.seg = np.zeros(len(params) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.seg[1:])
        self.numel = int(self.seg[-1])
        starts = np.arange(0, self.numel, CHUNK, dtype=np.int64)
        self.chunk_seg = (np.searchsorted(self.seg, starts, side="right") - 1).astype(np.int64)
        self._slots = 0
        self.data = self._alloc()
        self.grad = self._alloc()
        self.low = (staggered_zeros(self.numel, self.storage, self._alloc_slot()) if self.mode
                    else None)
        self.flags = np.zeros(len(params), dtype=np.uint8)
        self.scalars = np.zeros((len(params), SCALAR_SLOTS), dtype=np.float32)
        self.steps = self.scalars[:, 0]
        self.coef = np.zeros((len(params), 2 * SCALAR_SLOTS), dtype=self.dtype)
        self.empty = np.zeros(0, dtype=self.dtype)
        self.sizes = sizes
        self.vectors: dict[str, np.ndarray] = {}
        self.sides: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.side_shapes: dict[str, list[tuple[int, ...] | None]] = {}
        self.scratch: dict[str, np.ndarray] = {}
        self.names: tuple[str | None, ...] = ()  # the slots of the last step
        self.started = np.zeros(len(params), dtype=bool)
        self.all_started = len(params) == 0
        self.stale = False  # set by a Parameter whose storage another optimizer took over
        self._host: dict[tuple, tuple[np.ndarray, list[int]]] = {}
        self._max = float(np.finfo(self.dtype).max)
        self._type = self.dtype.type
        self._ctype = {"float32": "float", "float64": "double"}.get(self.dtype.name, self.dtype.name)
        self._args: dict[tuple, tuple] = {}
        self.pack()
        if self.low is not None:
            self.data[...] = self.low  # the masters start as the parameters (exactly)

    # ---- layout ---------------------------------------------------------------------------------
    def pack(self) -> None:
        """Make the parameters' data and grads views into this buffer again, copying in their
        current values (they may have moved to another optimizer's buffer meanwhile)."""
        storage = self.data if self.low is None else self.low
        for j, p in enumerate(self.params):
            p._pack(self.view(storage, j), self.view(self.grad, j), self.flags, j, self)
        self.stale = False
        self._args.clear()  # ``data`` may have been replaced (ZeRO adopts a shard as storage)

    def _alloc(self) -> np.ndarray:
        return staggered_zeros(self.numel, self.dtype, self._alloc_slot())

    def _alloc_slot(self) -> int:
        self._slots += 1
        return self._slots - 1

    def view(self, flat: np.ndarray, j: int) -> np.ndarray:
        """Parameter ``j``'s part of ``flat``, shaped like the parameter."""
        return flat[self.seg[j]:self.seg[j + 1]].reshape(self.params[j].shape)

    def kernel_args(self, names: tuple[str | None, ...]) -> tuple:
        """``(p, g, s0, s1, s2, seg, chunk_seg, CHUNK, flags, S, coef)`` for a fused kernel of
        ``kernels/optim.py``, with vector state ``names`` in slots ``s0..s2`` (None: unused,
        passed empty); for a low-precision buffer, preceded by ``low`` as uint16 (the arguments
        of ``kernel.low[mode]``)."""
        args = self._args.get(names)
        if args is None:
            states = [self.vectors[n] if n is not None else self.empty for n in names]
            states += [self.empty] * (3 - len(states))
            args = (self.data, self.grad, *states, self.seg, self.chunk_seg, CHUNK, self.flags,
                    self.scalars, self.coef)
            if self.low is not None:
                args = (self.low.view(np.uint16), *args)
            self._args[names] = args
        return args

    def host(self, values: dict[str, float | np.floating], wide: tuple[str, ...] = ()) -> np.ndarray:
        """The 1-element record array a kernel reads its named host scalars from, filled with
        ``values``: the names in ``wide`` as float64, the others in this buffer's dtype (rounded
        as PyTorch converts an op's scalar argument: a finite value beyond the dtype's range
        raises instead of becoming inf)."""
        key = tuple(values)
        entry = self._host.get(key)
        if entry is None:
            rec = np.zeros(1, dtype=[(k, np.float64 if k in wide else self.dtype) for k in key])
            entry = self._host[key] = [rec, [i for i, k in enumerate(key) if k not in wide], None]
        rec, narrow, last = entry
        if values is last:  # filled from this very dict last time (a step's host dicts are not
            return rec      # changed after they are made; kernels only read the record)
        vals: tuple[Any, ...] = tuple(values.values())
        top = self._max
        for i in narrow:
            v = vals[i]
            if abs(v) > top and abs(v) != _INF:  # (NaN compares False: it stays NaN)
                raise RuntimeError(f"value cannot be converted to type {self._ctype} without "
                                   "overflow")
        rec[0] = vals
        entry[2] = values
        return rec

    def round(self, x: float) -> np.floating:
        """``x`` in this buffer's dtype, as PyTorch converts an op's scalar argument: a finite
        value beyond the dtype's range raises instead of becoming inf."""
        if abs(x) > self._max and abs(x) != _INF:  # (NaN compares False: it stays NaN)
            raise RuntimeError(f"value cannot be converted to type {self._ctype} without overflow")
        return self._type(x)

    # ---- state ----------------------------------------------------------------------------------
    def add_vectors(self, names: Iterable[str | None], init: dict[str, float]) -> list[str]:
        """Allocate the vector state buffers in ``names`` that do not exist yet, filled with their
        ``init`` value (0 unless listed); return the new names."""
        new = [name for name in names if name is not None and name not in self.vectors]
        for name in new:
            buf = self._alloc()
            value = init.get(name, 0)
            if value != 0:
                buf.fill(value)
            self.vectors[name] = buf
        if new:
            self._args.clear()
        return new

    def add_sides(self, shapes: dict[str, list[tuple[int, ...] | None]]) -> list[str]:
        """Allocate (zeroed) the state of other shapes than the parameters' that does not exist
        yet: ``shapes[name][j]`` is parameter ``j``'s shape of it (None: it has none); return
        the new names."""
        new = [name for name in shapes if name not in self.sides]
        for name in new:
            sizes = [0 if s is None else int(np.prod(s, dtype=np.int64)) for s in shapes[name]]
            seg = np.zeros(len(self.params) + 1, dtype=np.int64)
            np.cumsum(sizes, out=seg[1:])
            self.sides[name] = (staggered_zeros(int(seg[-1]), self.dtype, self._alloc_slot()), seg)
            self.side_shapes[name] = list(shapes[name])
        return new

    def state_view(self, name: str, j: int) -> np.ndarray | None:
        """Parameter ``j``'s part of state ``name`` (a vector or a side), shaped; None if it has
        none."""
        if name in self.vectors:
            return self.view(self.vectors[name], j)
        side = self.sides.get(name)
        shape = None if side is None else self.side_shapes[name][j]
        if side is None or shape is None:
            return None
        flat, seg = side
        return flat[seg[j]:seg[j + 1]].reshape(shape)

    def state_views(self, j: int) -> dict[str, np.ndarray]:
        """Parameter ``j``'s vector and side state, by name."""
        views = {name: self.view(buf, j) for name, buf in self.vectors.items()}
        for name in self.sides:
            view = self.state_view(name, j)
            if view is not None:
                views[name] = view
        return views

    def reset(self, j: int, init: dict[str, float]) -> None:
        """Put parameter ``j``'s state back to its initial values (step 0)."""
        for k, name in enumerate(self.scalar_names):
            self.scalars[j, k] = init.get(name, 0)
        for name, buf in self.vectors.items():
            buf[self.seg[j]:self.seg[j + 1]] = init.get(name, 0)
        for name, (flat, seg) in self.sides.items():
            flat[seg[j]:seg[j + 1]] = init.get(name, 0)
