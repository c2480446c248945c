"""``tinyopt.nn.parallel``: PyTorch's home of ``DistributedDataParallel`` (defined beside the
process group, in ``tinyopt.distributed.ddp``; importing it does not import mpi4py)."""
from tinyopt.distributed.ddp import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
