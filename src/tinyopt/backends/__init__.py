"""``tinyopt.backends``: the namespaces scripts probe (``backends.mps.is_available()``) and the
flags they set (``backends.cudnn.benchmark = True``).  No GPU backend exists: availability is
False and the flags are accepted and have no effect."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

from tinyopt.backends import cudnn


def _false() -> bool:
    return False


def _true() -> bool:
    return True


mps = SimpleNamespace(is_available=_false, is_built=_false)
def _sdp_kernel(enable_flash: bool = True, enable_math: bool = True,
                enable_mem_efficient: bool = True, enable_cudnn: bool = True) -> Any:
    """The deprecated ``torch.backends.cuda.sdp_kernel(...)``: accepted, no effect (tinyopt has
    one attention kernel)."""
    return contextlib.nullcontext()


cuda = SimpleNamespace(is_built=_false, matmul=SimpleNamespace(allow_tf32=False,
                                                              allow_fp16_reduced_precision_reduction=True),
                       flash_sdp_enabled=_false, sdp_kernel=_sdp_kernel)
mkldnn = SimpleNamespace(is_available=_false, enabled=False)
openmp = SimpleNamespace(is_available=_true)
mkl = SimpleNamespace(is_available=_false)
opt_einsum = SimpleNamespace(is_available=_false, enabled=False)

__all__ = ["cuda", "cudnn", "mkl", "mkldnn", "mps", "openmp", "opt_einsum"]
