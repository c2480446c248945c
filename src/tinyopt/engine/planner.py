"""The memory planner: one arena, buffers reused once their last consumer has run (as ggml-alloc).

Walks the nodes in execution order.  A computed node gets a block of the arena (first fit in a free
list, 64-byte aligned); a view node gets none and shares its source's block, whose lifetime is
extended to the view's last use; an elementwise node may write in place into its first source's
block when that block is dead afterwards.  Blocks of nodes whose values are needed later (requested
outputs, activations the backward pass reads) stay alive simply because they still have consumers.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

ALIGN = 64


@dataclass(frozen=True, slots=True)
class Block:
    """Arena bytes ``[offset, offset + nbytes)`` live from step ``first`` to step ``last``."""
    offset: int
    nbytes: int
    first: int
    last: int


@dataclass(slots=True)
class MemoryPlan:
    root: list[int | None]        # per node: index of the node whose block holds its value
    # per root node: its block as a plain tuple (offset, nbytes, first, last), which the garbage
    # collector stops tracking (a cached plan of thousands of nodes holds hundreds of blocks)
    spans: dict[int, tuple[int, int, int, int]]
    arena_bytes: int              # the planned peak

    @property
    def blocks(self) -> dict[int, Block]:
        """The blocks per root node, as :class:`Block` records (made anew: for inspection)."""
        return {r: Block(*span) for r, span in self.spans.items()}


class _FreeList:
    def __init__(self) -> None:
        self.free: list[tuple[int, int]] = []   # sorted (offset, size)
        self.top = 0

    def alloc(self, size: int) -> int:
        size = max(ALIGN, -(-size // ALIGN) * ALIGN)
        for k, (off, sz) in enumerate(self.free):
            if sz >= size:
                if sz == size:
                    del self.free[k]
                else:
                    self.free[k] = (off + size, sz - size)
                return off
        # Grow the arena, reusing a free block that touches the top.
        if self.free and self.free[-1][0] + self.free[-1][1] == self.top:
            off = self.free.pop()[0]
        else:
            off = self.top
        self.top = off + size
        return off

    def release(self, off: int, size: int) -> None:
        # insert in order and merge with the neighbours only (the free list stays sorted and
        # merged): a sort and a full merge per release made planning quadratic, 45 ms of a
        # 2400-node plan's compile
        size = max(ALIGN, -(-size // ALIGN) * ALIGN)
        free = self.free
        k = bisect.bisect(free, (off, size))
        if k < len(free) and off + size == free[k][0]:  # joins the next block
            size += free.pop(k)[1]
        if k and free[k - 1][0] + free[k - 1][1] == off:  # joins the previous block
            free[k - 1] = (free[k - 1][0], free[k - 1][1] + size)
        else:
            free.insert(k, (off, size))


def plan_memory(srcs: list[tuple[int, ...]], nbytes: list[int], kind: list[str],
                inplace: list[bool], keep: set[int]) -> MemoryPlan:
    """Assign arena blocks.

    ``srcs[i]`` are node i's source indices, ``nbytes[i]`` its size, ``kind[i]`` one of
    ``"leaf"`` (storage bound at run time), ``"into_grad"`` (a gradient computed into its
    parameter's gradient storage, outside the arena), ``"view"`` (shares source 0's storage) or
    ``"compute"``; ``inplace[i]`` whether node i may overwrite source 0; ``keep`` the nodes whose
    value must survive to the end of the run.
    """
    n = len(srcs)
    last_read = [-1] * n  # per node: its last consumer (n: kept to the end)
    for i, ss in enumerate(srcs):
        for s in ss:
            last_read[s] = i
    for k in keep:
        last_read[k] = n
    root: list[int | None] = [None] * n
    lu: dict[int, int] = {}  # per open root: the last use of any node sharing its block
    first: dict[int, int] = {}
    spans: dict[int, tuple[int, int, int, int]] = {}
    offsets: dict[int, int] = {}
    fl = _FreeList()

    def close(r: int) -> None:
        spans[r] = (offsets.pop(r), nbytes[r], first[r], lu[r])
        fl.release(spans[r][0], nbytes[r])

    for i in range(n):
        if kind[i] == "view":
            r = root[srcs[i][0]]
            root[i] = r
            if r is not None and r in lu:
                lu[r] = max(lu[r], last_read[i])
        elif kind[i] == "compute":
            s0 = srcs[i][0] if srcs[i] else None
            r0 = root[s0] if s0 is not None else None
            if (inplace[i] and r0 is not None and r0 in offsets and nbytes[r0] == nbytes[i]
                    and lu[r0] == i and srcs[i].count(s0) == 1
                    and all(root[s] != r0 for s in srcs[i][1:])):
                root[i] = r0
                lu[r0] = max(lu[r0], last_read[i])
            else:
                root[i] = i
                lu[i] = last_read[i]
                first[i] = i
                offsets[i] = fl.alloc(nbytes[i])
        # Free every block whose last consumer is this node (or that nobody reads).
        for r in {root[s] for s in srcs[i]} | {root[i]}:
            if r is not None and r in offsets and lu[r] <= i:
                close(r)
    for r in list(offsets):
        close(r)
    return MemoryPlan(root, spans, fl.top)
