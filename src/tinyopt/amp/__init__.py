"""tinyopt.amp: mixed precision, as ``torch.amp``: :class:`GradScaler` (dynamic loss scaling)
and :class:`autocast` (matmuls and convolutions in float16/bfloat16, the rest in float32).

See ``docs/low_precision.md``.
"""

from tinyopt.amp.grad_scaler import GradScaler, OptState

__all__ = ["GradScaler", "OptState"]
