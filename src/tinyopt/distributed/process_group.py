"""The default process group over MPI (``torch.distributed``'s functions, backend ``"mpi"``).

    import tinyopt.distributed as dist
    dist.init_process_group("mpi")            # rank and world size come from the MPI launcher
    dist.get_rank(), dist.get_world_size()    # (0, 2) and (1, 2) under ``mpiexec -n 2``
    dist.all_reduce(arr, op=dist.ReduceOp.SUM)    # in place, every rank gets the sum
    dist.destroy_process_group()

Collectives work in place on numpy arrays (or a Parameter's storage) and go to MPI as buffers,
with no pickling and no copy when the array is contiguous.  ``*_object`` collectives pickle, as
PyTorch's do: use them only between the ranks of one job.

A Python exception that reaches the top of a rank's program would leave the other ranks blocked in
their next collective for ever (MPI has no timeouts).  ``init_process_group`` therefore installs an
exception hook that prints the traceback, prefixed with the rank, and aborts the whole job
(``MPI_Abort``): ``mpiexec`` then returns non-zero and shows the error.
"""

from __future__ import annotations

import enum
import importlib.util
import sys
import traceback
from typing import Any

import numpy as np

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
    """All ranks of the MPI job, over a private duplicate of ``MPI.COMM_WORLD`` (so a program's
    own mpi4py messages never mix with tinyopt's).  ``rank()`` and ``size()`` as in PyTorch."""

    def __init__(self, MPI) -> None:
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD.Dup()
        self._rank = self.comm.Get_rank()
        self._size = self.comm.Get_size()

    def rank(self) -> int:
        """This process's rank in the group (0 to ``size() - 1``)."""
        return self._rank

    def size(self) -> int:
        """The number of processes in the group."""
        return self._size

    def __repr__(self) -> str:
        return f"ProcessGroup(backend='mpi', rank={self._rank}, size={self._size})"

    # ---- buffer collectives used by DDP and ZeRO (contiguous arrays, no checks) ----------------
    def allreduce_(self, buf: np.ndarray, op: str = "SUM") -> None:
        """Reduce ``buf`` over the ranks, in place."""
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=getattr(self.MPI, op))

    def reduce_scatter_(self, send: np.ndarray, recv: np.ndarray, counts: list[int]) -> None:
        """Sum ``send`` over the ranks; rank r receives elements ``sum(counts[:r])`` onwards
        (``counts[r]`` of them) into ``recv``."""
        self.comm.Reduce_scatter(send, recv, counts, op=self.MPI.SUM)

    def allgather_(self, send: np.ndarray, recv: np.ndarray, counts: list[int]) -> None:
        """Rank r's ``send`` (``counts[r]`` elements) lands at offset ``sum(counts[:r])`` of
        ``recv`` on every rank."""
        displs = [0] * len(counts)
        for r in range(1, len(counts)):
            displs[r] = displs[r - 1] + counts[r - 1]
        self.comm.Allgatherv(send, [recv, (counts, displs)])


class _World:
    group: ProcessGroup | None = None
    previous_hook: Any = None


_world = _World()


class _GroupNamespace:
    """``dist.group.WORLD``: the default process group (None before ``init_process_group``)."""

    @property
    def WORLD(self) -> ProcessGroup | None:
        return _world.group


group = _GroupNamespace()
GroupMember = group


def _abort_on_exception(kind, value, tb) -> None:
    pg = _world.group
    rank = pg.rank() if pg is not None else "?"
    text = "".join(traceback.format_exception(kind, value, tb))
    sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in text.rstrip("\n").split("\n")))
    sys.stderr.write(f"[rank {rank}] tinyopt.distributed: aborting the MPI job (MPI_Abort)\n")
    sys.stderr.flush()
    if pg is not None:
        pg.MPI.COMM_WORLD.Abort(1)
    (_world.previous_hook or sys.__excepthook__)(kind, value, tb)


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout: Any = None, world_size: int = -1, rank: int = -1,
                       store: Any = None, group_name: str = "", pg_options: Any = None,
                       device_id: Any = None) -> None:
    """Initialize the default process group: every process that ``mpiexec`` started.

    Args:
        backend: ``"mpi"`` (or None); the only backend tinyopt has.
        world_size, rank: optional; when given they must agree with what the MPI launcher says
            (MPI decides both).
        init_method, store, timeout, pg_options, device_id: not supported (MPI's launcher does
            the rendezvous and MPI collectives have no timeout); giving one raises ValueError.

    Also installs the exception hook that aborts the job when a rank raises (module docstring).
    """
    if _world.group is not None:
        raise ValueError("trying to initialize the default process group twice!")
    if backend is not None and str(backend).lower() != "mpi":
        raise ValueError(f"tinyopt.distributed supports only backend='mpi' (collectives over "
                         f"mpi4py), got backend={backend!r}")
    for name, value in (("init_method", init_method), ("store", store), ("timeout", timeout),
                        ("pg_options", pg_options), ("device_id", device_id)):
        if value is not None:
            raise ValueError(f"init_process_group: {name} is not supported with the MPI backend "
                             f"(the MPI launcher finds the ranks; MPI collectives have no "
                             f"timeout), got {name}={value!r}")
    MPI = _mpi()
    pg = ProcessGroup(MPI)
    for name, given, actual in (("world_size", world_size, pg.size()), ("rank", rank, pg.rank())):
        if given is not None and given != -1 and given != actual:
            pg.comm.Free()
            raise ValueError(f"init_process_group: {name}={given} but the MPI launcher started "
                             f"this process with {name} {actual}")
    _world.group = pg
    _world.previous_hook = sys.excepthook
    sys.excepthook = _abort_on_exception


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
    """Release the default process group (``init_process_group`` may be called again)."""
    pg = _default(group)
    pg.comm.Free()
    _world.group = None
    if sys.excepthook is _abort_on_exception:
        sys.excepthook = _world.previous_hook or sys.__excepthook__
    _world.previous_hook = None


class Work:
    """The handle an ``async_op=True`` collective returns: ``wait()`` blocks until it is done."""

    def __init__(self, request: Any = None, finish: Any = None) -> None:
        self._request = request
        self._finish = finish
        self._done = request is None

    def wait(self, timeout: Any = None) -> bool:
        """Block until the collective is done (and its result written); returns True."""
        if not self._done:
            self._request.Wait()
            self._done = True
            if self._finish is not None:
                self._finish()
        return True

    def is_completed(self) -> bool:
        """Whether the collective is done, without blocking."""
        if not self._done and self._request.Test():
            self._done = True
            if self._finish is not None:
                self._finish()
        return self._done


def _storage(where: str, tensor: Any) -> np.ndarray:
    """The array a collective works on in place: a numpy array, a Parameter's storage, or the
    storage of a leaf Tensor that holds a value (``tinyopt.tensor(...)``)."""
    if isinstance(tensor, Parameter):
        return tensor._data
    if isinstance(tensor, Tensor):
        if tensor.op != "input" or tensor._value is None:
            raise TypeError(f"{where}: works in place on a numpy array, a Parameter or a leaf "
                            f"Tensor; got a Tensor that is a graph node (call .numpy() and pass "
                            f"the array)")
        tensor = tensor._value
    if isinstance(tensor, np.ndarray):
        if not tensor.flags.writeable:
            raise ValueError(f"{where}: the array is read-only; collectives write their result "
                             f"into it")
        return tensor
    raise TypeError(f"Invalid function argument. Expected parameter `tensor` of type numpy.ndarray"
                    f" or Parameter but got {type(tensor).__name__} instead.")


def _run(arr: np.ndarray, start, async_op: bool, after=None) -> Work | None:
    """Run a collective on ``arr`` (through a contiguous copy if it is not contiguous)."""
    buf = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)

    def finish() -> None:
        if after is not None:
            after(buf)
        if buf is not arr:
            arr[...] = buf
    if async_op:
        return Work(start(buf, True), finish)
    start(buf, False)
    finish()
    return None


def all_reduce(tensor: Any, op: ReduceOp = ReduceOp.SUM, group: Any = None,
               async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` over all ranks in place: every rank ends with the result.

    ``op=ReduceOp.AVG`` is the sum divided by the world size (floating point arrays only).
    With ``async_op=True`` returns a :class:`Work` whose ``wait()`` completes it.
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
    if kind == "b":  # MPI has no numpy-bool datatype: reduce the bytes (0/1) as uint8
        mpi_op = {"SUM": MPI.LOR, "PROD": MPI.LAND, "MIN": MPI.LAND, "MAX": MPI.LOR}.get(
            _MPI_OPS[op], mpi_op)

    def start(buf: np.ndarray, nonblocking: bool):
        view = buf.view(np.uint8) if kind == "b" else buf
        if nonblocking:
            return comm.Iallreduce(MPI.IN_PLACE, view, op=mpi_op)
        comm.Allreduce(MPI.IN_PLACE, view, op=mpi_op)

    after = None
    if op is ReduceOp.AVG:
        def after(buf: np.ndarray) -> None:
            np.divide(buf, pg.size(), out=buf)
    return _run(arr, start, async_op, after)


def _check_src(where: str, pg: ProcessGroup, src: Any) -> int:
    if isinstance(src, bool) or not isinstance(src, (int, np.integer)) \
            or not 0 <= src < pg.size():
        raise ValueError(f"{where}: src must be a rank in 0..{pg.size() - 1}, got {src!r}")
    return int(src)


def broadcast(tensor: Any, src: int | None = None, group: Any = None, async_op: bool = False,
              group_src: int | None = None) -> Work | None:
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank, in place."""
    pg = _default(group)
    root = _check_src("broadcast", pg, src if src is not None else group_src)
    arr = _storage("broadcast", tensor)
    comm = pg.comm

    def start(buf: np.ndarray, nonblocking: bool):
        view = buf.view(np.uint8) if buf.dtype.kind == "b" else buf
        if nonblocking:
            return comm.Ibcast(view, root=root)
        comm.Bcast(view, root=root)
    return _run(arr, start, async_op)


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None) -> Work | None:
    """Block until every rank has reached this call."""
    pg = _default(group)
    if async_op:
        return Work(pg.comm.Ibarrier())
    pg.comm.Barrier()
    return None


def all_gather_object(object_list: list[Any], obj: Any, group: Any = None) -> None:
    """Gather one picklable object from every rank: ``object_list[r]`` becomes rank r's ``obj``."""
    pg = _default(group)
    if not isinstance(object_list, list) or len(object_list) < pg.size():
        have = len(object_list) if isinstance(object_list, list) else type(object_list).__name__
        raise IndexError(f"all_gather_object: object_list must be a list of world_size "
                         f"({pg.size()}) entries, got {have}")
    object_list[:pg.size()] = pg.comm.allgather(obj)


def broadcast_object_list(object_list: list[Any], src: int | None = None, group: Any = None,
                          device: Any = None, group_src: int | None = None) -> None:
    """Replace ``object_list``'s entries on every rank by rank ``src``'s (picklable objects)."""
    pg = _default(group)
    root = _check_src("broadcast_object_list", pg, src if src is not None else
                      (group_src if group_src is not None else 0))
    if not isinstance(object_list, list):
        raise TypeError(f"broadcast_object_list: object_list must be a list, got "
                        f"{type(object_list).__name__}")
    values = pg.comm.bcast(object_list if pg.rank() == root else None, root=root)
    if len(values) != len(object_list):
        raise ValueError(f"broadcast_object_list: rank {root} sent {len(values)} objects but this "
                         f"rank's object_list has {len(object_list)} entries (every rank must "
                         f"pass a list of the same length)")
    object_list[:] = values
