"""Every collective starts by checking that all ranks make the same call.

    all_reduce(float32 array of shape (3,)) on rank 0,  all_reduce(int32 ...) on rank 1
    -> RuntimeError on both ranks, before any data moves:
       Detected mismatch between collectives on ranks (collective #4): rank 0 runs
       all_reduce(float32 of shape (3,), op=SUM); rank 1 runs all_reduce(int32 of shape (3,), ...)

Before its data moves, a collective sends a fingerprint of the call (16 int64: sequence number,
kind, purpose, step, dtype, shape, reduce op, root, payload bytes) to every other rank and receives
theirs, as torch's ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` does with its ``CollectiveFingerPrint``, but
always.  The exchange gives three things at once:

- **arrival**: it completes when every rank has reached the call, so a rank that waits too long
  knows exactly which ranks did not arrive (``watchdog.wait`` raises ``DistBackendError``
  naming them); it is also a barrier;
- **agreement**: dtypes, shapes, ops and roots that differ between ranks are an error on every
  rank at once (MPI would return garbage, or hang, or abort with a raw error stack), and the
  group stays usable, since no data was sent;
- **steps**: DDP's gradient reductions carry the number of backwards the module has seen and
  ZeRO's collectives the optimizer's step count, so ranks that disagree on the step (one more
  ``step()``, a backward under ``no_sync()`` on some ranks only) are told so at the first
  collective where they part, instead of hanging at the end of the job.

It costs ``2(N-1)`` messages of 128 bytes per collective and rank (tens of microseconds on one
machine; ``benchmarks/bench_ddp.py`` measures it against a bare MPI Allreduce).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyopt.distributed import watchdog

FP_TAG = 1  # on the control communicator
FIELDS = 16
SEQ, KIND, PURPOSE, STEP, DTYPE, COUNT, OP, ROOT, NBYTES, NDIM = range(10)
DIMS = 10   # the first 6 dimensions of the shape, from here on

KINDS = ("all_reduce", "broadcast", "barrier", "all_gather_object", "broadcast_object_list",
         "gather_object", "reduce_scatter", "all_gather", "destroy_process_group")
OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
DTYPES = tuple(np.dtype(t) for t in ("bool", "int8", "uint8", "int16", "uint16", "int32",
                                     "uint32", "int64", "uint64", "float16", "float32",
                                     "float64", "complex64", "complex128"))
_DTYPE_CODE = {dt: i for i, dt in enumerate(DTYPES)}
_COMPARED = np.arange(FIELDS) != NBYTES  # the payload size may differ between ranks


class Purpose(enum.IntEnum):
    """What a collective is for: named in the messages; ``step`` fills in ``{step}``."""

    USER = 0
    DDP_MODEL = 1
    DDP_SYNC = 2
    DDP_BUFFERS = 3
    DDP_GRADS = 4
    DDP_FLAGS = 5
    ZERO_FLAGS = 6
    ZERO_GRADS = 7
    ZERO_PARAMS = 8
    ZERO_CONSOLIDATE = 9
    ZERO_LOAD = 10


LABELS = {
    Purpose.USER: "",
    Purpose.DDP_MODEL: "DistributedDataParallel's check of the model at construction",
    Purpose.DDP_SYNC: "DistributedDataParallel's broadcast of rank 0's parameters and buffers",
    Purpose.DDP_BUFFERS: "DistributedDataParallel's broadcast of rank 0's buffers at a forward",
    Purpose.DDP_GRADS: "DistributedDataParallel's gradient reduction after backward {step}",
    Purpose.DDP_FLAGS: "DistributedDataParallel's has-gradient flags after backward {step}",
    Purpose.ZERO_FLAGS: "ZeroRedundancyOptimizer.step() #{step}, has-gradient flags",
    Purpose.ZERO_GRADS: "ZeroRedundancyOptimizer.step() #{step}, gradient reduce-scatter",
    Purpose.ZERO_PARAMS: "ZeroRedundancyOptimizer.step() #{step}, parameter all-gather",
    Purpose.ZERO_CONSOLIDATE: "ZeroRedundancyOptimizer.consolidate_state_dict",
    Purpose.ZERO_LOAD: "ZeroRedundancyOptimizer.load_state_dict's check that every rank "
                       "accepts the state",
}

HINTS = {  # why ranks may disagree on the step of these
    Purpose.DDP_GRADS: "did some ranks run a backward under no_sync() alone, or one backward "
                       "more than the others?",
    Purpose.DDP_FLAGS: "did some ranks run a backward under no_sync() alone, or one backward "
                       "more than the others?",
    Purpose.ZERO_FLAGS: "did some ranks call step() once more than the others?",
    Purpose.ZERO_GRADS: "did some ranks call step() once more than the others?",
    Purpose.ZERO_PARAMS: "did some ranks call step() once more than the others?",
}


@dataclass
class Call:
    """One rank's collective call, as its fingerprint records it."""

    kind: str
    purpose: Purpose = Purpose.USER
    step: int = -1
    dtype: Any = None
    shape: Sequence[int] | None = None
    op: str | None = None
    root: int = -1
    nbytes: int = -1   # this rank's payload (may differ between ranks: pickled objects)

    def record(self, seq: int) -> np.ndarray:
        r = np.full(FIELDS, -1, dtype=np.int64)
        r[SEQ], r[KIND], r[PURPOSE], r[STEP] = seq, KINDS.index(self.kind), self.purpose, self.step
        if self.dtype is not None:
            r[DTYPE] = _DTYPE_CODE.get(np.dtype(self.dtype), len(DTYPES))
        if self.shape is not None:
            shape = tuple(int(d) for d in self.shape)
            r[COUNT], r[NDIM] = math.prod(shape), len(shape)
            r[DIMS:DIMS + min(len(shape), FIELDS - DIMS)] = shape[:FIELDS - DIMS]
        if self.op is not None:
            r[OP] = OPS.index(self.op)
        r[ROOT], r[NBYTES] = self.root, self.nbytes
        return r


def describe(r: np.ndarray) -> str:
    """A fingerprint in words: ``all_reduce(float32 of shape (3,), op=SUM) for ...``."""
    args = []
    if r[DTYPE] >= 0:
        dtype = DTYPES[r[DTYPE]].name if r[DTYPE] < len(DTYPES) else "another dtype"
        if r[NDIM] >= 0:
            dims = [str(int(d)) for d in r[DIMS:DIMS + min(int(r[NDIM]), FIELDS - DIMS)]]
            if r[NDIM] > FIELDS - DIMS:
                dims.append("...")
            shape = f"({', '.join(dims)}{',' if r[NDIM] == 1 else ''})"
            args.append(f"{dtype} of shape {shape}")
        else:
            args.append(dtype)
    elif r[NDIM] == 1:
        args.append(f"{int(r[COUNT])} entries")
    if r[OP] >= 0:
        args.append(f"op={OPS[r[OP]]}")
    if r[ROOT] >= 0:
        args.append(f"root={int(r[ROOT])}")
    text = f"{KINDS[r[KIND]]}({', '.join(args)})"
    label = LABELS[Purpose(int(r[PURPOSE]))].format(step=int(r[STEP]))
    return f"{text} for {label}" if label else text


def _mismatch(records: np.ndarray, seq: int) -> str:
    groups: dict[bytes, list[int]] = {}
    for q, r in enumerate(records):
        groups.setdefault(r[_COMPARED].tobytes(), []).append(q)
    parts = []
    for ranks in groups.values():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"
        parts.append(f"{who} runs {describe(records[ranks[0]])}")
    text = (f"Detected mismatch between collectives on ranks (collective #{seq}): "
            f"{'; '.join(parts)}.  Every rank must make the same collective calls, in the same "
            f"order, with the same dtypes, shapes, operations and roots.")
    purposes = {int(r[PURPOSE]) for r in records}
    steps = {int(r[STEP]) for r in records}
    if len(purposes) == 1 and len(steps) > 1:
        purpose = Purpose(purposes.pop())
        per_rank = ", ".join(f"rank {q}: {int(r[STEP])}" for q, r in enumerate(records))
        text += f"  The ranks disagree on the step count ({per_rank})"
        text += f": {HINTS[purpose]}" if purpose in HINTS else "."
    return text


def agree(pg: Any, call: Call, timeout: float | None = None) -> np.ndarray:
    """Exchange ``call``'s fingerprint with every rank of ``pg`` (waiting at most ``timeout``,
    default the group's); return every rank's fingerprint, one row per rank, or raise: a
    ``DistBackendError`` (a rank did not arrive or left) or a ``RuntimeError`` (the ranks made
    different calls)."""
    pg.seq += 1
    seq = pg.seq
    mine = call.record(seq)

    def what() -> str:
        return f"{describe(mine)} (collective #{seq})"
    watchdog.check_usable(pg, seq, what)
    records = np.empty((pg.size(), FIELDS), dtype=np.int64)
    records[pg.rank()] = mine
    others = [q for q in range(pg.size()) if q != pg.rank()]
    arrivals = {q: pg.control.Irecv(records[q], source=q, tag=FP_TAG) for q in others}
    sends = [pg.control.Isend(mine, dest=q, tag=FP_TAG) for q in others]
    watchdog.wait(pg, arrivals, sends, seq, what, timeout)
    if not (records == mine)[:, _COMPARED].all():
        raise RuntimeError(_mismatch(records, seq))
    return records
