"""Flat storage: a parameter group's parameters, gradients and optimizer state in contiguous buffers.

For each group and each dtype in it, a :class:`FlatBuffer` lays the parameters end to end::

    data  [ p0 ........ | p1 .. | p2 ............ ]     Parameter.data are views into it
    grad  [ g0 ........ | g1 .. | g2 ............ ]     Parameter.grad are views into it
    exp_avg, exp_avg_sq, ... (one buffer per state name, same layout)
    seg   [0, n0, n0 + n1, n0 + n1 + n2]               where each parameter starts
    flags [has_grad(p0), has_grad(p1), has_grad(p2)]   kept up to date by Parameter itself
    steps [t0, t1, t2]                                 PyTorch's per-parameter state["step"]

so a fused kernel updates the whole group in one call with no Python loop over parameters.

Start addresses are staggered: buffer ``k`` of a group starts at ``k * 640`` bytes past a 4 KiB
boundary (mod 4096).  Streams whose addresses agree in their low 12 bits make the CPU's
memory disambiguation see false store-to-load dependencies (4K aliasing); on the machine where
the optimizer issue was written, an Adam-shaped kernel over four such arrays ran at 17 GB/s
against 54 GB/s staggered.  How much it matters depends on the CPU: ``benchmarks/bench_optim.py``
measures both layouts.
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine.tensor import Parameter

CHUNK = 16384
"""Elements per parallel work item of the fused kernels."""

STAGGER = 640
"""Bytes between the start offsets (mod 4 KiB) of consecutive buffers of one FlatBuffer."""

_PAGE = 4096


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
    """The parameters of one dtype in one group, packed into flat buffers (see the module docstring).

    Args:
        params: the parameters, in group order (each appears once).
        dtype: their dtype.
    """

    def __init__(self, params: list[Parameter], dtype: np.dtype):
        self.params = params
        self.dtype = np.dtype(dtype)
        sizes = np.array([p.numel() for p in params], dtype=np.int64)
        self.seg = np.zeros(len(params) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.seg[1:])
        self.numel = int(self.seg[-1])
        starts = np.arange(0, self.numel, CHUNK, dtype=np.int64)
        self.chunk_seg = (np.searchsorted(self.seg, starts, side="right") - 1).astype(np.int64)
        self._slots = 0
        self.data = self._alloc()
        self.grad = self._alloc()
        self.flags = np.zeros(len(params), dtype=np.uint8)
        self.steps = np.zeros(len(params), dtype=np.float32)
        self.coef = np.zeros((len(params), 2), dtype=self.dtype)
        self.hp = np.zeros(8, dtype=self.dtype)
        self.empty = np.zeros(0, dtype=self.dtype)
        self.bufs: dict[str, np.ndarray] = {}
        self.started = np.zeros(len(params), dtype=bool)
        self.all_started = len(params) == 0
        self.stale = False  # set by a Parameter whose storage another optimizer took over
        self.pack()

    def pack(self) -> None:
        """Make the parameters' data and grads views into this buffer again, copying in their
        current values (they may have moved to another optimizer's buffer meanwhile)."""
        for j, p in enumerate(self.params):
            p._pack(self.view(self.data, j), self.view(self.grad, j), self.flags, j, self)
        self.stale = False

    def _alloc(self) -> np.ndarray:
        arr = staggered_zeros(self.numel, self.dtype, self._slots)
        self._slots += 1
        return arr

    def view(self, flat: np.ndarray, j: int) -> np.ndarray:
        """Parameter ``j``'s part of ``flat``, shaped like the parameter."""
        return flat[self.seg[j]:self.seg[j + 1]].reshape(self.params[j].shape)

    def ensure(self, names, init: dict[str, float]) -> list[str]:
        """Allocate the state buffers in ``names`` that do not exist yet; return the new names."""
        new = [name for name in names if name not in self.bufs]
        for name in new:
            buf = self._alloc()
            value = init.get(name, 0)
            if value != 0:
                buf.fill(value)
            self.bufs[name] = buf
        return new

    def reset(self, j: int, init: dict[str, float]) -> None:
        """Put parameter ``j``'s state back to its initial values (step 0)."""
        self.steps[j] = 0
        for name, buf in self.bufs.items():
            buf[self.seg[j]:self.seg[j + 1]] = init.get(name, 0)
