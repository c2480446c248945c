"""tinyopt.amp: mixed precision, as ``torch.amp``: :class:`GradScaler` (dynamic loss scaling)
and :class:`autocast` (matmuls and convolutions in float16/bfloat16, losses in float32).

See ``docs/low_precision.md``.
"""

from tinyopt.amp.autocast_mode import (autocast, get_autocast_dtype, is_autocast_available,
                                       is_autocast_enabled)
from tinyopt.amp.grad_scaler import GradScaler, OptState

__all__ = ["GradScaler", "OptState", "autocast", "get_autocast_dtype", "is_autocast_available",
           "is_autocast_enabled"]
