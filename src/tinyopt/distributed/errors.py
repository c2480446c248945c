"""The errors a failing distributed job raises, with ``torch.distributed``'s names and bases.

    try:
        dist.all_reduce(arr)
    except dist.DistBackendError as e:     # a rank did not arrive in time, or left the job
        print(e)   # names the collective, this rank, the ranks that did not arrive

``DistBackendError`` means the process group cannot be used any more (a collective timed out or
a rank left while others waited for it): every later collective raises it again.  Ranks that
call *different* collectives (or one collective with different dtypes, shapes, operations or
roots) get a plain ``RuntimeError`` on every rank at once, as torch's
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` gives, and the group stays usable.
"""

from __future__ import annotations


class DistError(RuntimeError):
    """Base of the errors of ``tinyopt.distributed`` (``torch.distributed.DistError``)."""


class DistBackendError(DistError):
    """A collective could not complete: a rank did not arrive within the process group's
    ``timeout``, or left the job (``torch.distributed.DistBackendError``)."""
