"""``tinyopt.distributed.optim``: ``ZeroRedundancyOptimizer`` (ZeRO-1, optimizer state sharded
over the ranks), as ``torch.distributed.optim``."""
from tinyopt.distributed.optim.zero_redundancy_optimizer import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer"]
