"""SOAP's parameter update (``optim/soap.py``), rounded as PyTorch's CPU kernels round
pytorch-optimizer's ``p.add_(u, alpha=a)`` and ``p.mul_(decay)``.

``p`` (the parameter) and ``u`` (the update), 1-d, C-contiguous, one float dtype, the same
length; scalars in their dtype.  Iteration ``i`` writes only ``p[i]``.
"""

from __future__ import annotations

from tinyopt.kernels.jit import parallel_kernel, prange
from tinyopt.kernels.native.instructions import fma


@parallel_kernel(sized_by=0)
def descend_(p, u, a, decay):
    """``p <- fma(a, u, p) * decay`` in place: the step ``a = -step size`` along the update,
    rounded once (PyTorch's CPU ``add(alpha=)`` is a fused multiply-add), then the decoupled
    weight decay ``decay = 1 - lr * weight_decay`` (rounded again, as a second ``mul_``)."""
    for i in prange(p.shape[0]):
        p[i] = fma(a, u[i], p[i]) * decay
