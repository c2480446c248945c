"""``nn.DataParallel``: PyTorch's single-process multi-GPU wrapper.  There is one device (the
CPU), so it runs the wrapped module as it is, with PyTorch's CPU-build behaviour: ``.module`` is
the wrapped model and state_dict keys start with ``module.``."""

from __future__ import annotations

from typing import Any

from tinyopt.engine.device import check_device
from tinyopt.nn.module import Module

__all__ = ["DataParallel"]


class DataParallel(Module):
    """Runs ``module`` (``device_ids`` and ``output_device`` may only name the CPU)."""

    def __init__(self, module: Module, device_ids: Any = None, output_device: Any = None,
                 dim: int = 0) -> None:
        super().__init__()
        for d in list(device_ids or []) + ([output_device] if output_device is not None
                                           else []):
            check_device(d)
        self.module = module
        self.device_ids: list[Any] = []
        self.output_device = None
        self.dim = dim

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)
