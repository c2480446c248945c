"""Fail fast: a job whose rank fails ends within seconds, with that rank's error, never hangs.

MPI itself has no timeouts: a rank that dies, exits or takes another path leaves the others
blocked in their next collective for ever.  ``init_process_group`` installs four guards:

- **uncaught exceptions** on the main thread (``sys.excepthook``) and on any other thread
  (``threading.excepthook``) print the traceback, each line prefixed with ``[rank r]``, tell the
  other ranks (a "failed" notice) and call ``MPI_Abort``: ``mpiexec`` stops every rank, on every
  host, and returns non-zero;
- **an exit hook**: a rank that exits while the group is live (``sys.exit(1)``, the end of the
  script on one rank only) tells the others at once (a small "left" notice on a control
  communicator), so a rank waiting for it raises ``DistBackendError`` instead of hanging; and when
  the exit status is known to be non-zero (``sys.exit(status)``: Python gives atexit handlers no
  other way to see it) the hook ends the job as an uncaught exception does, with that status (a
  ``sys.exit(1)`` whose SystemExit the program caught and survived still counts);
- **timeouts**: every collective waits by polling its non-blocking MPI requests, for at most the
  group's ``timeout`` (``init_process_group(timeout=...)``, 30 minutes by default as in torch),
  then raises ``DistBackendError`` naming the collective and the ranks that did not arrive;
- **a broken group stays broken**: after such an error every collective raises it again, since
  the other ranks' half-finished MPI calls cannot be taken back.

Waiting polls the MPI requests without pause, as MPICH's own blocking wait does (MPICH
progresses a large transfer only inside these calls), yields the core every 32 polls as that
wait does too (``MPIR_CVAR_POLLS_BEFORE_YIELD``: free when no other process wants the core, and
the partner's turn when one does), and looks for "left" notices and the deadline every
millisecond; after a second of waiting it sleeps between polls, a tenth of the time waited so
far, at most 10 ms, so a rank waiting long for a partner leaves its core to others.  (Sleeping
from the first milliseconds, or yielding after every poll, made the MLP's gradient all_reduce
take 0.6 and 2.9 ms instead of 0.4 ms on a loaded machine: every wake-up waits for a core.)
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn

import numpy as np

from tinyopt.distributed.errors import DistBackendError

LEAVE_TAG = 2        # on the control communicator: "rank r left after collective #s"
CHECK_EVERY = 1e-3   # seconds between looks for "left" notices and the deadline
POLLS = 32           # polls between two readings of the clock
PATIENCE = 1.0       # seconds of waiting after which the polls sleep in between
MAX_NAP = 0.01       # the longest sleep between two polls


class _Hooks:
    """The group the hooks guard and the hooks they replaced."""

    pg: Any = None
    pid = 0      # the rank's process: a child it forks has no MPI and must not use the hooks
    excepthook: Any = None
    threadhook: Any = None
    exit: Any = None
    status: Any = None   # what sys.exit was last called with (None: not called)


_hooks = _Hooks()
_SYS_EXIT = sys.exit
_yield = getattr(os, "sched_yield", lambda: None)  # (not on every platform)


def _prefixed(rank: Any, text: str) -> str:
    return "".join(f"[rank {rank}] {line}\n" for line in text.rstrip("\n").split("\n"))


def _abort(message: str, status: int = 1) -> None:
    """Print ``message`` (each line prefixed with the rank), tell the other ranks this one
    failed, and end the whole job with ``status`` (``MPI_Abort``)."""
    pg = _hooks.pg
    rank = pg.rank() if pg is not None else "?"
    sys.stderr.write(_prefixed(rank, message))
    sys.stderr.write(f"[rank {rank}] tinyopt.distributed: aborting the MPI job (exit status "
                     f"{status})\n")
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if pg is not None:
        leave(pg, status, patience=0.2)  # for launchers that would not stop the others
        # mpiexec's proxies forward our output asynchronously, and MPI_Abort makes them kill
        # every rank at once: without this pause the error above was sometimes lost (seen with
        # an exception raised on a thread).  A plain non-zero exit would forward it, but
        # stops only the ranks of this rank's machine: the ranks on other hosts lived on.
        time.sleep(0.2)
        pg.MPI.COMM_WORLD.Abort(status)
    os._exit(status)  # MPI_Abort may return once it has told the launcher


def _guarding() -> bool:
    """Whether this process is a rank of a live group (not a child the rank forked)."""
    return _hooks.pg is not None and os.getpid() == _hooks.pid


def _on_exception(kind, value, tb) -> None:
    if not _guarding():
        sys.__excepthook__(kind, value, tb)
        return
    _abort("".join(traceback.format_exception(kind, value, tb)))


def _on_thread_exception(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or not _guarding():  # a thread may end itself
        threading.__excepthook__(args)
        return
    name = args.thread.name if args.thread is not None else "a thread"
    _abort(f"Exception in thread {name}:\n" + "".join(
        traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)))


def _exit(status: Any = None) -> NoReturn:
    """``sys.exit`` while the group is live: remembers the status for the exit hook."""
    _hooks.status = status
    (_hooks.exit or _SYS_EXIT)(status)
    raise SystemExit(status)  # (not reached: both raise it)


def _exit_status() -> int:
    s = _hooks.status
    if s is None:
        return 0
    return s if isinstance(s, int) else 1  # sys.exit("message") exits with status 1


def _at_exit() -> None:
    pg = _hooks.pg
    if not _guarding():  # destroyed (every rank left together), or a forked child
        return
    status = _exit_status()
    if status != 0:
        _abort(f"exited with status {status} while the process group was live "
               f"(destroy_process_group was not called)", status)
    leave(pg, 0 if _hooks.status is not None else -1)


def install(pg: Any) -> None:
    """Guard ``pg`` (see the module docstring) until :func:`uninstall`."""
    _hooks.pg, _hooks.pid = pg, os.getpid()
    _hooks.excepthook, sys.excepthook = sys.excepthook, _on_exception
    _hooks.threadhook, threading.excepthook = threading.excepthook, _on_thread_exception
    _hooks.exit, sys.exit = sys.exit, _exit
    _hooks.status = None
    atexit.register(_at_exit)


def uninstall() -> None:
    """Put back the hooks :func:`install` replaced (each only if nobody replaced it since)."""
    if sys.excepthook is _on_exception:
        sys.excepthook = _hooks.excepthook or sys.__excepthook__
    if threading.excepthook is _on_thread_exception:
        threading.excepthook = _hooks.threadhook or threading.__excepthook__
    if sys.exit is _exit:
        sys.exit = _hooks.exit
    atexit.unregister(_at_exit)
    _hooks.pg = _hooks.excepthook = _hooks.threadhook = _hooks.exit = None


# ---- leaving ----------------------------------------------------------------------------------
def leave(pg: Any, status: int, patience: float = 1.0) -> None:
    """Tell every other rank that this one leaves after collective ``pg.seq`` with exit
    ``status`` (-1: unknown, > 0: it failed); waits at most ``patience`` seconds for the small
    messages to go out."""
    note = np.array([status, pg.seq], dtype=np.int64)
    reqs = [pg.control.Isend(note, dest=q, tag=LEAVE_TAG) for q in range(pg.size())
            if q != pg.rank()]
    deadline = time.monotonic() + patience
    while not pg.MPI.Request.Testall(reqs) and time.monotonic() < deadline:
        time.sleep(0.001)


def take_notices(pg: Any) -> None:
    """Receive the "left" notices that have arrived into ``pg.gone``: rank -> (status, seq)."""
    MPI, status = pg.MPI, pg.MPI.Status()
    while pg.control.Iprobe(source=MPI.ANY_SOURCE, tag=LEAVE_TAG, status=status):
        note = np.empty(2, dtype=np.int64)
        src = status.Get_source()
        pg.control.Recv(note, source=src, tag=LEAVE_TAG)
        pg.gone[src] = (int(note[0]), int(note[1]))


def _left(rank: int, pg: Any) -> str:
    status, seq = pg.gone[rank]
    how = "exited" if status < 0 else f"exited with status {status}"
    return f"rank {rank} left the job ({how}) after collective #{seq}"


def _gone(pg: Any, seq: int) -> list[int]:
    """The ranks that will never take part in collective ``seq``: they failed, or exited
    before it."""
    take_notices(pg)
    return sorted(q for q, (status, s) in pg.gone.items() if status > 0 or s < seq)


def fail(pg: Any, message: str) -> DistBackendError:
    """Mark ``pg`` broken by ``message`` and return the error to raise."""
    pg.broken = message
    return DistBackendError(message)


def check_usable(pg: Any, seq: int, what: Callable[[], str]) -> None:
    """Raise before collective ``seq`` if the group is broken or a rank has left it."""
    if pg.broken is not None:
        raise DistBackendError(f"the process group cannot be used after an earlier failure: "
                               f"{pg.broken}")
    gone = _gone(pg, seq)
    if gone:
        raise fail(pg, f"rank {pg.rank()} cannot run {what()}: "
                       + "; ".join(_left(q, pg) for q in gone))


def wait(pg: Any, arrivals: dict[int, Any], others: list[Any], seq: int,
         what: Callable[[], str], timeout: float | None = None) -> None:
    """Complete MPI requests within ``timeout`` seconds (default ``pg.timeout``), or raise
    ``DistBackendError``.

    ``arrivals`` maps a rank to the receive that completes when that rank reaches collective
    ``seq`` (the fingerprint exchange), ``others`` are requests without a rank (sends, a data
    transfer).  ``what()`` describes the collective for the messages.
    """
    limit = pg.timeout if timeout is None else timeout
    requests = [*arrivals.values(), *others]
    testall = pg.MPI.Request.Testall
    done = requests[0].Test if len(requests) == 1 else lambda: testall(requests)
    start = time.monotonic()
    deadline, check = start + limit, start + CHECK_EVERY
    while True:
        for _ in range(POLLS):  # the clock is read once per POLLS polls: a transfer in
            if done():         # pieces moves on at each poll of both ranks
                return
        _yield()  # as MPICH's wait does (MPIR_CVAR_POLLS_BEFORE_YIELD)
        now = time.monotonic()
        if now < check:
            continue
        check = now + CHECK_EVERY
        gone = _gone(pg, seq)
        if gone:
            raise fail(pg, f"rank {pg.rank()} waits in {what()}, but "
                           + "; ".join(_left(q, pg) for q in gone))
        if now >= deadline:
            after = timedelta(seconds=round(limit, 3))
            late = [q for q, r in arrivals.items() if not r.Test()]
            if late:
                missing = f"ranks {late} did not arrive"
            else:
                missing = "every rank arrived, but the transfer did not complete (a rank died " \
                          "or stopped during it)"
            raise fail(pg, f"rank {pg.rank()}: {what()} timed out after {after}: {missing}")
        if now - start > PATIENCE:
            time.sleep(min((now - start) * 0.1, MAX_NAP, deadline - now))
