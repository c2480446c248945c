"""Flat buffers: a parameter group's gradients and all optimizer state, contiguous, and its
parameters' storage reached in place.

For each group and each dtype in it, a :class:`FlatBuffer` lays the parameters out end to end in
one index space (parameter ``j`` is ``[seg[j], seg[j + 1])``)::

    storage  p0 ........   p1 ..   p2 ............   the parameters' own arrays, wherever they
                                                     are: reached through ``slots.data_addr``
    grad     [ g0 ........ | g1 .. | g2 ............ ]   fresh gradients are written here (a
                                                         gradient the user assigned stays theirs:
                                                         ``slots.grad_addr``)
    vectors  exp_avg, exp_avg_sq, ...                    one buffer per state name, same layout
    seg      [0, n0, n0 + n1, n0 + n1 + n2]              where each parameter starts
    flags    [has_grad(p0), has_grad(p1), has_grad(p2)]  kept up to date by the slots
    scalars  [[step, mu_product, ...] per parameter]     per-parameter scalar state, float32
    sides    row_var [ r0 ... | r2 .. ]                  state of other shapes (Adafactor's
                                                         factors), each with its own seg

so a fused kernel updates the whole group in one call with no Python loop over parameters, and
``optimizer.state[p][name]`` are views into these buffers (0-d views for scalar state).  The
parameters' storage never moves (``engine/slot.py``): a user's array, shared memory or a view
taken before the optimizer was built is what the kernel updates.

Start addresses are staggered: buffer ``k`` of a group starts at ``k * 640`` bytes past the
parameters' storage (mod 4096).  Streams whose addresses agree in their low 12 bits make the CPU's
memory disambiguation see false store-to-load dependencies (4K aliasing); on the machine where
the optimizer issue was written, an Adam-shaped kernel over four such arrays ran at 17 GB/s
against 54 GB/s staggered.  How much it matters depends on the CPU: ``benchmarks/bench_optim.py``
measures both layouts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from tinyopt.engine.slot import SlotTable
from tinyopt.engine.tensor import Parameter
from tinyopt.kernels.native import address
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


def staggered_zeros(n: int, dtype, slot: int, stagger: int = STAGGER, base: int = 0) -> np.ndarray:
    """A zeroed 1-d array of ``n`` elements starting at ``(base + slot * stagger) % 4096`` past a
    4 KiB boundary.

    ``stagger=0`` gives the aliased layout (every array at the same offset), for benchmarks.
    """
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    raw = np.zeros(nbytes + 2 * _PAGE, dtype=np.uint8)
    want = (base + slot * stagger) % _PAGE
    off = (want - raw.ctypes.data) % _PAGE
    return raw[off:off + nbytes].view(dtype)


class WalkerArgs(NamedTuple):
    """The arguments of a fused walker of ``kernels/optim.py`` over a float32/float64 buffer
    (its host record follows them): by name, so a caller that changes one (the in-backward
    step masks ``flags``) says which."""
    pa: np.ndarray         # the addresses of the parameters' storage
    ga: np.ndarray         # the addresses of their gradients
    s0: np.ndarray         # the vector state slots (empty where unused)
    s1: np.ndarray
    s2: np.ndarray
    seg: np.ndarray        # the parameters' offsets in the buffer
    chunk_seg: np.ndarray  # the chunks' first parameters
    chunk: int
    flags: np.ndarray      # which parameters step (a gradient this step)
    scalars: np.ndarray    # per-parameter scalar state (step, ...)
    coef: np.ndarray       # per-parameter coefficients


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
    - ``slots``: the :class:`~tinyopt.engine.slot.SlotTable` of the parameters (``slots.slots[j]``
      is parameter ``j``'s :class:`~tinyopt.engine.slot.Slot`, ``p.slot`` while this buffer is
      its newest).  ``grad``: the flat gradient buffer, where fresh gradients are written (a
      reduction over it is one collective per buffer); ``flags`` (uint8): 1 where the parameter
      has a gradient.  A gradient the user assigned stays their array (``slots.foreign[j]``);
      :meth:`gather_grads` copies such gradients into ``grad``, :meth:`scatter_grads` back.
    - ``data``: the parameters' storage as one flat array, for algorithms that treat the group
      as one vector (LBFGS, Adafactor's kernel, ZeRO): the storage itself when the parameters
      lie end to end in one array (``adopted``), otherwise a copy that :meth:`gather_params`
      fills and :meth:`scatter_params` writes back.  The fused kernels never need it.
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

    Low precision: for float16 and bfloat16 parameters (``storage``), ``dtype`` is float32 and
    ``data`` holds their float32 master weights (always this buffer's own); ``low`` is the
    parameters' 16-bit storage as one flat array (the storage itself when ``adopted``, otherwise
    the copy :meth:`gather_params` / :meth:`scatter_params` fill and write back), which the
    walker's ``kernel.low[mode]`` rewrites (rounded, in place through the slots) in the same pass
    that updates the masters; ``grad`` and ``vectors`` are float32 (a 16-bit parameter's
    gradient is float32).  ``mode`` is the kernel mode (``kernels.optim.F16`` or ``BF16``), 0 for
    float32/float64 buffers, whose ``low`` is None.
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
        # staggered against the storage of the first parameter (the others' are anywhere)
        self._base = params[0].value.ctypes.data % _PAGE if params else 0
        self.grad = self._alloc()
        self.slots = SlotTable(self, params, self.seg, self.grad)
        self.flags = self.slots.flags
        self._layout: tuple[int, np.ndarray | None] = (-1, None)  # (slots.version, adopted)
        self._copy: np.ndarray | None = None  # the storage's flat copy when not adopted
        self._ones = np.ones(len(params), dtype=np.uint8)
        self.masters = self._alloc() if self.mode else None
        self._master_addr = (None if self.masters is None else
                             self.masters.ctypes.data + self.seg[:-1] * self.dtype.itemsize)
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
        self._host: dict[tuple, tuple[np.ndarray, list[int]]] = {}
        self._max = float(np.finfo(self.dtype).max)
        self._type = self.dtype.type
        self._ctype = {"float32": "float", "float64": "double"}.get(self.dtype.name, self.dtype.name)
        self._args: dict[tuple, tuple] = {}
        if self.masters is not None:  # the masters start as the parameters (exactly)
            for j in range(len(params)):
                self.view(self.masters, j)[...] = self.param_view(j)

    # ---- the parameters' storage ----------------------------------------------------------------
    @property
    def adopted(self) -> np.ndarray | None:
        """The parameters' storage as one flat array when they lie end to end, in order, in one
        array (a flat view of it: nothing copied), else None."""
        version, flat = self._layout
        if version != self.slots.version:
            flat = end_to_end(self.slots.data_ref)
            self._layout = (self.slots.version, flat)
        return flat

    @property
    def data(self) -> np.ndarray:
        """The float32 masters of 16-bit parameters; otherwise the parameters' storage as one
        flat array (see the class docstring)."""
        if self.masters is not None:
            return self.masters
        return self._storage_flat()

    @property
    def low(self) -> np.ndarray | None:
        """The 16-bit parameters' storage as one flat array (None for float32/float64)."""
        return self._storage_flat() if self.mode else None

    def _storage_flat(self) -> np.ndarray:
        flat = self.adopted
        if flat is not None:
            return flat
        if self._copy is None:
            self._copy = staggered_zeros(self.numel, self.storage, self._alloc_slot(),
                                         base=self._base)
        return self._copy

    def gather_params(self) -> np.ndarray:
        """The parameters' storage as one flat array, up to date (``data``, or ``low`` for
        16-bit parameters): copies it in unless ``adopted``."""
        flat = self._storage_flat()
        if flat is not self.adopted:
            address.copy_segments(_kernel_view(flat), self.slots.data_addr, self.seg, self._ones,
                                  True)
        return flat

    def scatter_params(self) -> None:
        """Write the flat copy of the storage (after :meth:`gather_params` and a change to it)
        back into the parameters' storage (nothing to do when ``adopted``)."""
        flat = self._storage_flat()
        if flat is not self.adopted:
            address.copy_segments(_kernel_view(flat), self.slots.data_addr, self.seg, self._ones,
                                  False)

    def gather_grads(self) -> np.ndarray:
        """``grad`` with every present gradient in it: gradients the user assigned (their own
        arrays) are copied into their part of ``grad`` (which is otherwise unused then)."""
        if self.slots.foreign.any():
            address.copy_segments(self.grad, self.slots.grad_addr, self.seg, self.slots.foreign,
                                  True)
        return self.grad

    def scatter_grads(self) -> None:
        """Write the parts of ``grad`` of gradients the user assigned back into their arrays
        (after :meth:`gather_grads` and a change to ``grad``: an unscale, a reduction)."""
        if self.slots.foreign.any():
            address.copy_segments(self.grad, self.slots.grad_addr, self.seg, self.slots.foreign,
                                  False)

    def param_view(self, j: int) -> np.ndarray:
        """Parameter ``j``'s storage (its own array, shaped)."""
        return self.slots.data_ref[j]

    def _alloc(self) -> np.ndarray:
        return staggered_zeros(self.numel, self.dtype, self._alloc_slot(), base=self._base)

    def _alloc_slot(self) -> int:
        self._slots += 1
        return self._slots

    def view(self, flat: np.ndarray, j: int) -> np.ndarray:
        """Parameter ``j``'s part of ``flat``, shaped like the parameter."""
        return flat[self.seg[j]:self.seg[j + 1]].reshape(self.params[j].shape)

    def kernel_args(self, names: tuple[str | None, ...]) -> tuple:
        """``(pa, ga, s0, s1, s2, seg, chunk_seg, CHUNK, flags, S, coef)`` for a fused kernel of
        ``kernels/optim.py`` (``pa``, ``ga``: the addresses of the parameters' storage and
        gradients), with vector state ``names`` in slots ``s0..s2`` (None: unused, passed
        empty); for a low-precision buffer ``(qa, masters, ga, s0, ...)``, the arguments of
        ``kernel.low[mode]`` (``qa``: the addresses of the 16-bit storage)."""
        args = self._args.get(names)
        if args is None:
            states = [self.vectors[n] if n is not None else self.empty for n in names]
            args = self.walker_args(*states)
            self._args[names] = args
        return args

    def walker_args(self, *states: np.ndarray, plain: bool = False) -> tuple:
        """:meth:`kernel_args` with the arrays ``states`` (3 or fewer: the rest passed empty; 4
        for a two-pass kernel's pass 1, ``kernels/optim_reduce.py``) in the state slots, for an
        algorithm that passes scratch there (Muon).  ``plain=True``: the arguments of the plain
        walker also for 16-bit parameters (over their masters)."""
        states = states + (self.empty,) * (3 - len(states))
        t = self.slots
        tail = (*states, self.seg, self.chunk_seg, CHUNK, self.flags, self.scalars, self.coef)
        if self.mode and plain:
            return (self._master_addr, t.grad_addr, *tail)
        if self.mode:
            return (t.data_addr, self.masters, t.grad_addr, *tail)
        if len(states) == 3:
            return WalkerArgs(t.data_addr, t.grad_addr, *tail)
        return (t.data_addr, t.grad_addr, *tail)

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


def _kernel_view(flat: np.ndarray) -> np.ndarray:
    """``flat`` as kernels take it (16-bit storage as uint16 bit patterns)."""
    return flat.view(np.uint16) if flat.dtype.itemsize == 2 and flat.dtype.kind != "u" else flat


def end_to_end(arrays: list[np.ndarray]) -> np.ndarray | None:
    """A 1-d view over ``arrays`` when they lie end to end in one allocation (C-contiguous, one
    dtype, each starting where the previous one ends), else None."""
    if not arrays:
        return None
    dtype = arrays[0].dtype
    root = arrays[0]
    while isinstance(root.base, np.ndarray):
        root = root.base
    if not root.flags.c_contiguous:
        return None
    start = arrays[0].__array_interface__["data"][0]
    pos = start
    for a in arrays:
        if a.dtype != dtype or not a.flags.c_contiguous or \
                a.__array_interface__["data"][0] != pos:
            return None
        pos += a.nbytes
    lo = root.__array_interface__["data"][0]
    if start < lo or pos > lo + root.nbytes:
        return None
    raw = root.reshape(-1).view(np.uint8)
    return raw[start - lo:pos - lo].view(dtype)
