"""The default process group over MPI (``torch.distributed``'s functions, backend ``"mpi"``).

    import tinyopt.distributed as dist
    dist.init_process_group("mpi")            # rank and world size come from the MPI launcher
    dist.get_rank(), dist.get_world_size()    # (0, 2) and (1, 2) under ``mpiexec -n 2``
    dist.all_reduce(arr, op=dist.ReduceOp.SUM)    # in place, every rank gets the sum
    dist.destroy_process_group()

Collectives work in place on numpy arrays (or a Parameter's storage) and go to MPI as buffers,
with no pickling and no copy when the array is contiguous.  ``*_object`` collectives pickle, as
PyTorch's do: use them only between the ranks of one job.

Every collective first exchanges a fingerprint of the call with every rank (``fingerprint``):
ranks that call different collectives, or one with different dtypes, shapes, ops or roots, get a
``RuntimeError`` before any data moves, and a rank that waits longer than the group's ``timeout``
(``init_process_group(timeout=timedelta(...))``, 30 minutes by default) raises
``DistBackendError`` naming the ranks that did not arrive.  ``init_process_group`` also installs
the guards of ``watchdog``: an uncaught exception on any thread ends the whole job (``mpiexec``
returns non-zero and shows the error, prefixed with the rank), and a rank that exits while the
group is live tells the others, which raise instead of hanging.
"""

from __future__ import annotations

import enum
import importlib.util
import pickle
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np

from tinyopt.distributed import watchdog
from tinyopt.distributed.fingerprint import NBYTES, Call, Purpose, agree, describe
from tinyopt.engine.tensor import Parameter, Tensor

INSTALL = ("tinyopt.distributed needs mpi4py and an MPI library: pip install 'tinyopt[mpi]' "
           "(or: pip install mpi4py mpich), then launch with: mpiexec -n 2 python your_script.py")


def _mpi():
    """The ``mpi4py.MPI`` module (importing it initializes MPI), or a clear error."""
    try:
        from mpi4py import MPI
    except ImportError as e:  # mpi4py missing, or present without an MPI library to load
        raise RuntimeError(f"{INSTALL} ({type(e).__name__}: {e})") from e
    return MPI


def is_available() -> bool:
    """Whether the distributed package can be used here (mpi4py is installed)."""
    return importlib.util.find_spec("mpi4py") is not None


class ReduceOp(enum.Enum):
    """Reduction of ``all_reduce``: SUM, AVG (floating point only), PRODUCT, MIN, MAX and the
    bitwise BAND, BOR, BXOR (integer and bool arrays)."""

    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    BAND = 5
    BOR = 6
    BXOR = 7


_MPI_OPS = {ReduceOp.SUM: "SUM", ReduceOp.AVG: "SUM", ReduceOp.PRODUCT: "PROD",
            ReduceOp.MIN: "MIN", ReduceOp.MAX: "MAX", ReduceOp.BAND: "BAND", ReduceOp.BOR: "BOR",
            ReduceOp.BXOR: "BXOR"}


class ProcessGroup:
    """All ranks of the MPI job, over two private duplicates of ``MPI.COMM_WORLD`` (so a
    program's own mpi4py messages never mix with tinyopt's): ``comm`` carries the data,
    ``control`` the fingerprints and "left" notices.  ``rank()`` and ``size()`` as in PyTorch;
    ``timeout`` is in seconds.

    The buffer collectives below are what DDP and ZeRO use (contiguous arrays, checked across
    the ranks like every collective, with a ``purpose`` and ``step`` for the messages)."""

    def __init__(self, MPI, timeout: float) -> None:
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD.Dup()
        self.control = MPI.COMM_WORLD.Dup()
        self._rank = self.comm.Get_rank()
        self._size = self.comm.Get_size()
        self.timeout = timeout
        self.seq = 0                               # collectives started on this rank
        self.gone: dict[int, tuple[int, int]] = {}  # rank -> (exit status, its last collective)
        self.broken: str | None = None             # why the group cannot be used any more

    def rank(self) -> int:
        """This process's rank in the group (0 to ``size() - 1``)."""
        return self._rank

    def size(self) -> int:
        """The number of processes in the group."""
        return self._size

    def __repr__(self) -> str:
        return f"ProcessGroup(backend='mpi', rank={self._rank}, size={self._size})"

    def free(self) -> None:
        """Free the group's two MPI communicators (``destroy_process_group`` calls it)."""
        self.comm.Free()
        self.control.Free()

    # ---- running a collective: agree, start, wait -----------------------------------------------
    def start(self, call: Call, begin: Callable[[np.ndarray], Any],
              finish: Callable[[], None] | None = None) -> Work:
        """Check ``call`` across the ranks, then start its transfer: ``begin(fingerprints)``
        (every rank's, one row each) returns the MPI request; ``finish`` runs when the transfer
        is complete."""
        records = agree(self, call)
        seq = self.seq
        work = Work(self, begin(records), seq, lambda: f"{describe(records[self._rank])} "
                                                       f"(collective #{seq})", finish)
        work._records = records
        return work

    def run(self, call: Call, begin: Callable[[np.ndarray], Any]) -> np.ndarray:
        """``start`` and wait; returns every rank's fingerprint."""
        work = self.start(call, begin)
        work.wait()
        return work._records

    # ---- buffer collectives used by DDP and ZeRO -------------------------------------------------
    def allreduce_(self, buf: np.ndarray, op: str = "SUM", *, purpose: Purpose = Purpose.USER,
                   step: int = -1) -> None:
        """Reduce ``buf`` over the ranks, in place (``op``: "SUM" or "MAX")."""
        self.run(Call("all_reduce", purpose, step, buf.dtype, buf.shape, op),
                 lambda _: self.comm.Iallreduce(self.MPI.IN_PLACE, buf,
                                                op=getattr(self.MPI, op)))

    def bcast_(self, buf: np.ndarray, root: int, *, purpose: Purpose = Purpose.USER,
               step: int = -1) -> None:
        """Overwrite ``buf`` with rank ``root``'s."""
        self.run(Call("broadcast", purpose, step, buf.dtype, buf.shape, root=root),
                 lambda _: self.comm.Ibcast(buf, root=root))

    def reduce_scatter_(self, send: np.ndarray, recv: np.ndarray, counts: list[int], *,
                        purpose: Purpose = Purpose.USER, step: int = -1) -> None:
        """Sum ``send`` over the ranks; rank r receives elements ``sum(counts[:r])`` onwards
        (``counts[r]`` of them) into ``recv``."""
        self.run(Call("reduce_scatter", purpose, step, send.dtype, send.shape, "SUM"),
                 lambda _: self.comm.Ireduce_scatter(send, recv, counts, op=self.MPI.SUM))

    def allgather_(self, buf: np.ndarray, counts: list[int], *,
                   purpose: Purpose = Purpose.USER, step: int = -1) -> None:
        """In place: rank r's elements ``sum(counts[:r])`` onwards (``counts[r]`` of them) land
        at the same place of ``buf`` on every rank."""
        self.run(Call("all_gather", purpose, step, buf.dtype, buf.shape),
                 lambda _: self.comm.Iallgatherv(self.MPI.IN_PLACE, [buf, _layout(counts)]))

    # ---- pickled objects -------------------------------------------------------------------------
    def allgather_bytes(self, data: bytes, *, purpose: Purpose = Purpose.USER) -> list[bytes]:
        """Every rank's ``data``, in rank order (the fingerprints carry the sizes)."""
        out = _Gathered()

        def begin(records: np.ndarray):
            return self.comm.Iallgatherv(np.frombuffer(data, dtype=np.uint8), out.spec(records))
        return out.parts(self.run(Call("all_gather_object", purpose, nbytes=len(data)), begin))

    def gather_bytes(self, data: bytes, root: int, *,
                     purpose: Purpose = Purpose.USER) -> list[bytes] | None:
        """Every rank's ``data`` on rank ``root`` (None elsewhere)."""
        out = _Gathered()

        def begin(records: np.ndarray):
            return self.comm.Igatherv(np.frombuffer(data, dtype=np.uint8),
                                      out.spec(records) if self._rank == root else None,
                                      root=root)
        records = self.run(Call("gather_object", purpose, root=root, nbytes=len(data)), begin)
        return out.parts(records) if self._rank == root else None


def _layout(counts: list[int]) -> tuple[list[int], list[int]]:
    """``(counts, displacements)`` of pieces laid end to end."""
    return counts, np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()


class _Gathered:
    """The receive buffer of a byte gather, sized from the fingerprints' payload sizes."""

    buf: np.ndarray

    def spec(self, records: np.ndarray) -> list[Any]:
        counts = records[:, NBYTES].tolist()
        self.buf = np.empty(sum(counts), dtype=np.uint8)
        return [self.buf, _layout(counts)]

    def parts(self, records: np.ndarray) -> list[bytes]:
        ends = np.cumsum(records[:, NBYTES])
        return [self.buf[e - n:e].tobytes() for e, n in zip(ends, records[:, NBYTES])]


class _World:
    group: ProcessGroup | None = None


_world = _World()


class _GroupNamespace:
    """``dist.group.WORLD``: the default process group (None before ``init_process_group``)."""

    @property
    def WORLD(self) -> ProcessGroup | None:
        return _world.group


group = _GroupNamespace()
GroupMember = group
default_pg_timeout = timedelta(minutes=30)


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout: timedelta | None = None, world_size: int = -1, rank: int = -1,
                       store: Any = None, group_name: str = "", pg_options: Any = None,
                       device_id: Any = None) -> None:
    """Initialize the default process group: every process that ``mpiexec`` started.

    Args:
        backend: ``"mpi"`` (or None); the only backend tinyopt has.
        timeout: how long a collective waits for the other ranks (a ``datetime.timedelta``;
            default ``default_pg_timeout``, 30 minutes, as in torch) before it raises
            ``DistBackendError`` naming the ranks that did not arrive.
        world_size, rank: optional; when given they must agree with what the MPI launcher says
            (MPI decides both).
        init_method, store, pg_options, device_id: not supported (MPI's launcher does the
            rendezvous); giving one raises ValueError.

    Also installs the guards that end the whole job when a rank fails (``watchdog``).
    """
    if _world.group is not None:
        raise ValueError("trying to initialize the default process group twice!")
    if backend is not None and str(backend).lower() != "mpi":
        raise ValueError(f"tinyopt.distributed supports only backend='mpi' (collectives over "
                         f"mpi4py), got backend={backend!r}")
    for name, value in (("init_method", init_method), ("store", store),
                        ("pg_options", pg_options), ("device_id", device_id)):
        if value is not None:
            raise ValueError(f"init_process_group: {name} is not supported with the MPI backend "
                             f"(the MPI launcher finds the ranks), got {name}={value!r}")
    if timeout is None:
        timeout = default_pg_timeout
    if not isinstance(timeout, timedelta):
        raise TypeError(f"Expected timeout argument to be of type datetime.timedelta, got "
                        f"{timeout}")
    if timeout.total_seconds() <= 0:
        raise ValueError(f"init_process_group: timeout must be positive, got {timeout}")
    MPI = _mpi()
    pg = ProcessGroup(MPI, timeout.total_seconds())
    for name, given, actual in (("world_size", world_size, pg.size()), ("rank", rank, pg.rank())):
        if given is not None and given != -1 and given != actual:
            pg.free()
            raise ValueError(f"init_process_group: {name}={given} but the MPI launcher started "
                             f"this process with {name} {actual}")
    _world.group = pg
    watchdog.install(pg)


def is_initialized() -> bool:
    """Whether the default process group has been initialized."""
    return _world.group is not None


def is_mpi_available() -> bool:
    """Whether the MPI backend can be used (mpi4py is installed)."""
    return is_available()


def _default(group: Any = None) -> ProcessGroup:
    pg = _world.group
    if pg is None:
        raise ValueError("Default process group has not been initialized, please make sure to "
                         "call init_process_group.")
    if group is not None and group is not pg:
        raise ValueError(f"tinyopt.distributed has only the default process group (WORLD); got "
                         f"group={group!r}")
    return pg


def get_backend(group: Any = None) -> str:
    """The backend of the default process group: ``"mpi"`` (raises if none is initialized)."""
    _default(group)
    return "mpi"


def get_rank(group: Any = None) -> int:
    """This process's rank in the default group (0 .. world size - 1)."""
    return _default(group).rank()


def get_world_size(group: Any = None) -> int:
    """The number of processes in the default group."""
    return _default(group).size()


def destroy_process_group(group: Any = None) -> None:
    """Release the default process group (``init_process_group`` may be called again).

    Like ``MPI_Comm_free`` it is collective: every rank calls it, and it returns once all have
    (so a rank still in a collective, e.g. taking one more step, gets a clear error)."""
    pg = _default(group)
    if pg.broken is None:
        agree(pg, Call("destroy_process_group"))
    pg.free()
    _world.group = None
    watchdog.uninstall()


class Work:
    """The handle an ``async_op=True`` collective returns: ``wait()`` blocks until it is done
    (at most ``timeout``, default the group's, then ``DistBackendError``)."""

    def __init__(self, pg: ProcessGroup | None, request: Any, seq: int = 0,
                 what: Callable[[], str] = str, finish: Callable[[], None] | None = None) -> None:
        self._pg = pg
        self._request = request
        self._seq = seq
        self._what = what
        self._finish = finish
        self._done = request is None
        self._records: Any = None  # every rank's fingerprint of the call

    def _complete(self) -> None:
        self._done = True
        if self._finish is not None:
            self._finish()

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until the collective is done and its result written (at most ``timeout``, default
        the group's, then ``DistBackendError``); returns True."""
        if not self._done:
            seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else None
            watchdog.wait(self._pg, {}, [self._request], self._seq, self._what, seconds)
            self._complete()
        return True

    def is_completed(self) -> bool:
        """Whether the collective is done, without blocking."""
        if not self._done and self._request.Test():
            self._complete()
        return self._done


def _storage(where: str, tensor: Any) -> np.ndarray:
    """The array a collective works on in place: a numpy array, a Parameter's storage, or the
    storage of a leaf Tensor that holds a value (``tinyopt.tensor(...)``)."""
    if isinstance(tensor, Parameter):
        return tensor.value
    if isinstance(tensor, Tensor):
        if tensor.op != "input" or tensor.value is None:
            raise TypeError(f"{where}: works in place on a numpy array, a Parameter or a leaf "
                            f"Tensor; got a Tensor that is a graph node (call .numpy() and pass "
                            f"the array)")
        tensor = tensor.value
    if isinstance(tensor, np.ndarray):
        if not tensor.flags.writeable:
            raise ValueError(f"{where}: the array is read-only; collectives write their result "
                             f"into it")
        return tensor
    raise TypeError(f"Invalid function argument. Expected parameter `tensor` of type numpy.ndarray"
                    f" or Parameter but got {type(tensor).__name__} instead.")


def _run(pg: ProcessGroup, call: Call, arr: np.ndarray, begin, async_op: bool,
         after=None) -> Work | None:
    """Run a collective on ``arr`` (through a contiguous copy if it is not contiguous)."""
    buf = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
    view = buf.view(np.uint8) if buf.dtype.kind == "b" else buf  # MPI has no numpy-bool type

    def finish() -> None:
        if after is not None:
            after(buf)
        if buf is not arr:
            arr[...] = buf
    work = pg.start(call, lambda _: begin(view), finish)
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(tensor: Any, op: ReduceOp = ReduceOp.SUM, group: Any = None,
               async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` over all ranks in place: every rank ends with the result.

    ``op=ReduceOp.AVG`` is the sum divided by the world size (floating point arrays only).
    With ``async_op=True`` returns a :class:`Work` whose ``wait()`` completes it (the call
    returns once every rank has reached it: the check of the arguments needs them all).  Every
    rank must pass the same dtype, shape and op (else RuntimeError on every rank, before any
    data moves).
    """
    pg = _default(group)
    arr = _storage("all_reduce", tensor)
    if not isinstance(op, ReduceOp):
        raise TypeError(f"all_reduce: op must be a ReduceOp, got {op!r}")
    kind = arr.dtype.kind
    if kind not in "biuf":
        raise TypeError(f"all_reduce: unsupported dtype {arr.dtype}")
    if op is ReduceOp.AVG and kind != "f":
        raise TypeError(f"all_reduce: ReduceOp.AVG needs a floating point array, got {arr.dtype}")
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and kind == "f":
        raise TypeError(f"all_reduce: {op.name} needs an integer or bool array, got {arr.dtype}")
    MPI, comm = pg.MPI, pg.comm
    mpi_op = getattr(MPI, _MPI_OPS[op])
    if kind == "b":  # reduce the bytes (0/1) as uint8
        mpi_op = {"SUM": MPI.LOR, "PROD": MPI.LAND, "MIN": MPI.LAND, "MAX": MPI.LOR}.get(
            _MPI_OPS[op], mpi_op)
    after = None
    if op is ReduceOp.AVG:
        def after(buf: np.ndarray) -> None:
            np.divide(buf, pg.size(), out=buf)
    return _run(pg, Call("all_reduce", dtype=arr.dtype, shape=arr.shape, op=op.name), arr,
                lambda view: comm.Iallreduce(MPI.IN_PLACE, view, op=mpi_op), async_op, after)


def _check_src(where: str, pg: ProcessGroup, src: Any) -> int:
    if isinstance(src, bool) or not isinstance(src, (int, np.integer)) \
            or not 0 <= src < pg.size():
        raise ValueError(f"{where}: src must be a rank in 0..{pg.size() - 1}, got {src!r}")
    return int(src)


def broadcast(tensor: Any, src: int | None = None, group: Any = None, async_op: bool = False,
              group_src: int | None = None) -> Work | None:
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank, in place (every rank must
    pass the same ``src``, dtype and shape)."""
    pg = _default(group)
    root = _check_src("broadcast", pg, src if src is not None else group_src)
    arr = _storage("broadcast", tensor)
    return _run(pg, Call("broadcast", dtype=arr.dtype, shape=arr.shape, root=root), arr,
                lambda view: pg.comm.Ibcast(view, root=root), async_op)


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None) -> Work | None:
    """Block until every rank has reached this call (the fingerprint exchange is the barrier)."""
    agree(_default(group), Call("barrier"))
    return Work(None, None) if async_op else None


def all_gather_object(object_list: list[Any], obj: Any, group: Any = None) -> None:
    """Gather one picklable object from every rank: ``object_list[r]`` becomes rank r's ``obj``."""
    pg = _default(group)
    if not isinstance(object_list, list) or len(object_list) < pg.size():
        have = len(object_list) if isinstance(object_list, list) else type(object_list).__name__
        raise IndexError(f"all_gather_object: object_list must be a list of world_size "
                         f"({pg.size()}) entries, got {have}")
    every = pg.allgather_bytes(pickle.dumps(obj))
    object_list[:pg.size()] = [pickle.loads(b) for b in every]


def broadcast_object_list(object_list: list[Any], src: int | None = None, group: Any = None,
                          device: Any = None, group_src: int | None = None) -> None:
    """Replace ``object_list``'s entries on every rank by rank ``src``'s (picklable objects;
    every rank passes a list of the same length)."""
    pg = _default(group)
    root = _check_src("broadcast_object_list", pg, src if src is not None else
                      (group_src if group_src is not None else 0))
    if not isinstance(object_list, list):
        raise TypeError(f"broadcast_object_list: object_list must be a list, got "
                        f"{type(object_list).__name__}")
    data = pickle.dumps(object_list) if pg.rank() == root else b""
    out: list[np.ndarray] = []

    def begin(records: np.ndarray):
        out.append(np.frombuffer(data, dtype=np.uint8).copy() if pg.rank() == root else
                   np.empty(int(records[root, NBYTES]), dtype=np.uint8))
        return pg.comm.Ibcast(out[0], root=root)
    pg.run(Call("broadcast_object_list", shape=(len(object_list),), root=root,
                nbytes=len(data)), begin)
    object_list[:] = pickle.loads(out[0].tobytes())
