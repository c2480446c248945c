"""The cautious option of Lion, Adam/AdamW and SGD (Liang et al. 2024, ``cautious=True``).

A cautious optimizer applies only the elements of its update that agree in sign with the
gradient, rescaled by ``numel / (count + 1)`` so that the update keeps about its size
(https://arxiv.org/abs/2411.16085; the rule of the authors' C-Optim and of pytorch-optimizer).
The count is a sum over the whole parameter, so a cautious group steps by a two-pass kernel
(``kernels/optim_reduce.py``) instead of its walker, and is not elementwise: ZeRO-1 must not cut
its parameters, and the step does not run inside the backward plan.
"""

from __future__ import annotations

from typing import Any


def cautious_call(opt: Any, kernel: Any, group: dict[str, Any], host: dict[str, Any]):
    """``(kernel, host)`` of ``group``'s step: its two-pass cautious kernel
    (``type(opt).cautious_kernel``, under the walker's switches) and host scalars with a ``zero``
    when ``group["cautious"]``; else as given."""
    if not group.get("cautious", False):
        return kernel, host
    return type(opt).cautious_kernel[opt.switches(group, host)], dict(host, zero=0.0)
