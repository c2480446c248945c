"""``Linear`` (y = x W^T + b) and ``Identity``, as ``torch.nn``."""

from __future__ import annotations

import math

import numpy as np

from tinyopt.engine.dtypes import FLOATS, is_low
from tinyopt.engine.ops.linalg import linear
from tinyopt.engine.tensor import Parameter, Tensor, as_tensor
from tinyopt.nn import init, kernels_ahead
from tinyopt.nn.layers._factory import param_dtype
from tinyopt.nn.module import Module


class Identity(Module):
    """Returns its input unchanged; accepts and ignores any constructor arguments."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input) -> Tensor:
        return as_tensor(input)


class Linear(Module):
    """Affine map ``y = x W^T + b`` over the last dimension: x (..., in) -> y (..., out).

    ``weight`` (out_features, in_features) and ``bias`` (out_features,) start as PyTorch's:
    ``kaiming_uniform_(W, a=sqrt(5))``, i.e. ``U(-1/sqrt(in), 1/sqrt(in))``, and
    ``b ~ U(-1/sqrt(in), 1/sqrt(in))`` (He et al. 2015, https://arxiv.org/abs/1502.01852).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
                raise ValueError(f"Linear: {name} must be a non-negative int, got {v!r}")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.weight = Parameter(np.empty((self.out_features, self.in_features), dtype=dt))
        if bias:
            self.bias = Parameter(np.empty((self.out_features,), dtype=dt))
            kernels_ahead.at_build(self, kernels_ahead.linear, dt, self.out_features)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the weight and bias again from their initial distributions (see the class
        docstring)."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input) -> Tensor:
        kernels_ahead.called(self)
        dtype = input.dtype if isinstance(input, (Tensor, np.ndarray)) else as_tensor(input).dtype
        if dtype not in FLOATS and np.dtype(dtype).kind not in "fc" and not is_low(
                np.dtype(dtype)):  # ints, bools
            raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got "
                               f"{_TORCH_NAMES.get(np.dtype(dtype).name, dtype)} and "
                               f"{_TORCH_NAMES.get(self.weight.dtype.name, self.weight.dtype)}")
        return linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


# PyTorch's names of dtypes in its error messages
_TORCH_NAMES = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int",
                "int64": "Long", "float16": "Half", "bfloat16": "BFloat16", "float32": "Float",
                "float64": "Double"}
