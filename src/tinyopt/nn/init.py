"""Parameter initialisation, as ``torch.nn.init``: same names, signatures, defaults and formulas.

Every function fills a Parameter's ``.data`` (or a numpy array) in place and returns its argument.
Random draws come from ``tinyopt``'s global generator unless ``generator=`` is given, so
``tinyopt.manual_seed(n)`` makes initialisation reproducible::

    tinyopt.manual_seed(0)
    w = nn.Parameter(np.empty((500, 784), np.float32))
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))   # what nn.Linear does to its weight

Fans: for a weight of shape ``(out, in, *kernel)``, ``fan_in = in * prod(kernel)`` and
``fan_out = out * prod(kernel)``.

* Xavier/Glorot (Glorot & Bengio 2010, https://proceedings.mlr.press/v9/glorot10a.html):
  ``std = gain * sqrt(2 / (fan_in + fan_out))``.
* Kaiming/He (He et al. 2015, https://arxiv.org/abs/1502.01852):
  ``std = gain / sqrt(fan)`` with ``gain = calculate_gain(nonlinearity, a)``.
* The uniform variants draw from ``U(-bound, bound)`` with ``bound = sqrt(3) * std``, which has
  standard deviation ``std``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from tinyopt.engine import random as _random
from tinyopt.engine.dtypes import FLOATS, is_low
from tinyopt.engine.tensor import Parameter, Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_",
           "zeros_", "eye_", "dirac_", "sparse_", "orthogonal_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "constant", "dirac", "eye",
           "kaiming_normal", "kaiming_uniform", "normal", "orthogonal", "sparse", "uniform",
           "xavier_normal", "xavier_uniform"]

T = TypeVar("T", Parameter, np.ndarray)

_LINEAR_FNS = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
               "conv_transpose3d")


def _array(tensor: Parameter | np.ndarray) -> np.ndarray:
    """The numpy storage ``tensor`` is initialised through."""
    if isinstance(tensor, Parameter):
        return tensor.value
    if isinstance(tensor, np.ndarray):
        if not tensor.flags.writeable:
            raise ValueError("cannot initialise a read-only array")
        return tensor
    if isinstance(tensor, Tensor):
        if tensor.op != "input" or not tensor.value.flags.writeable:
            raise TypeError("nn.init functions fill a Parameter, a tensor holding values, or a "
                            f"numpy array in place; got a graph node ({tensor.op})")
        return tensor.value
    raise TypeError(f"nn.init functions expect a Parameter or numpy array, got "
                    f"{type(tensor).__name__}")


def _float_array(tensor: Parameter | np.ndarray, fn: str) -> np.ndarray:
    arr = _array(tensor)
    if arr.dtype not in FLOATS and not is_low(arr.dtype):
        raise TypeError(f"{fn}: expected a floating-point tensor, got dtype {arr.dtype}")
    return arr


def _rng(generator) -> np.random.Generator:
    if generator is None:
        return _random.default_generator.numpy
    if isinstance(generator, _random.Generator):
        return generator.numpy
    if isinstance(generator, np.random.Generator):
        return generator
    raise TypeError(f"generator must be a tinyopt.Generator, got {type(generator).__name__}")


def _fill(arr: np.ndarray, values: np.ndarray) -> None:
    np.copyto(arr, values, casting="same_kind")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (PyTorch's table).

    ========================  =========================================
    linear, conv*, sigmoid    1
    tanh                      5/3
    relu                      sqrt(2)
    leaky_relu                sqrt(2 / (1 + negative_slope^2)), slope 0.01 by default
    selu                      3/4
    ========================  =========================================
    """
    if nonlinearity in _LINEAR_FNS or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif (not isinstance(param, bool) and isinstance(param, int)) or isinstance(param, float):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Parameter | np.ndarray) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight of shape ``(out, in, *kernel)``."""
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    receptive_field = math.prod(shape[2:])
    return shape[1] * receptive_field, shape[0] * receptive_field


def _calculate_correct_fan(tensor: Parameter | np.ndarray, mode: str) -> int:
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _is_empty(arr: np.ndarray) -> bool:
    if 0 in arr.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def uniform_(tensor: T, a: float = 0.0, b: float = 1.0, generator=None) -> T:
    """Fill with draws from ``U(a, b)``."""
    arr = _float_array(tensor, "uniform_")
    if a > b:
        raise ValueError(f"uniform_ expects to return a [from, to) range, but found from={a} > "
                         f"to={b}")
    _fill(arr, _rng(generator).uniform(a, b, size=arr.shape))
    return tensor


def normal_(tensor: T, mean: float = 0.0, std: float = 1.0, generator=None) -> T:
    """Fill with draws from ``N(mean, std^2)``."""
    arr = _float_array(tensor, "normal_")
    if std < 0:
        raise ValueError(f"normal expects std >= 0.0, but found std {std}")
    _fill(arr, _rng(generator).normal(mean, std, size=arr.shape))
    return tensor


def trunc_normal_(tensor: T, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator=None) -> T:
    """Fill with draws from ``N(mean, std^2)`` truncated to ``[a, b]``: values outside are
    redrawn until they fall inside (works best when ``a <= mean <= b``)."""
    arr = _float_array(tensor, "trunc_normal_")
    if std <= 0:
        raise ValueError(f"trunc_normal_ expects std > 0, but found std {std}")
    if not a < b:
        raise ValueError(f"trunc_normal_ expects a < b, but found a={a}, b={b}")
    cdf = lambda x: 0.5 * (1 + math.erf((x - mean) / (std * math.sqrt(2))))  # noqa: E731
    accept = cdf(b) - cdf(a)
    if accept < 1e-6:
        raise ValueError(f"trunc_normal_: [a, b] = [{a}, {b}] holds only {accept:.2g} of the "
                         f"probability of N({mean}, {std}^2); move mean into [a, b]")
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The "
                      "distribution of values may be incorrect.", stacklevel=2)
    rng = _rng(generator)
    values = rng.normal(mean, std, size=arr.size)
    bad = np.flatnonzero((values < a) | (values > b))
    while bad.size:
        values[bad] = rng.normal(mean, std, size=bad.size)
        bad = bad[(values[bad] < a) | (values[bad] > b)]
    _fill(arr, values.reshape(arr.shape))
    return tensor


def constant_(tensor: T, val: float) -> T:
    """Fill with the value ``val``."""
    _array(tensor)[...] = val
    return tensor


def ones_(tensor: T) -> T:
    """Fill with ones."""
    return constant_(tensor, 1)


def zeros_(tensor: T) -> T:
    """Fill with zeros."""
    return constant_(tensor, 0)


def eye_(tensor: T) -> T:
    """Fill a 2-D tensor with the identity matrix (ones on the diagonal, zeros elsewhere)."""
    arr = _array(tensor)
    if arr.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    _fill(arr, np.eye(*arr.shape))
    return tensor


def dirac_(tensor: T, groups: int = 1) -> T:
    """Fill a 3-, 4- or 5-d convolution weight with the Dirac delta: output channel ``d`` of
    each of the ``groups`` passes its group's input channel ``d`` through unchanged (a one at the
    kernel's centre), for ``d < min(out_channels / groups, in_channels)``; zeros elsewhere."""
    arr = _array(tensor)
    if arr.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if arr.shape[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    per_group = arr.shape[0] // groups
    centre = tuple(n // 2 for n in arr.shape[2:])
    arr[...] = 0
    for g in range(groups):
        for d in range(min(per_group, arr.shape[1])):
            arr[(g * per_group + d, d) + centre] = 1
    return tensor


def sparse_(tensor: T, sparsity: float, std: float = 0.01, generator=None) -> T:
    """Fill a 2-d tensor with draws from ``N(0, std^2)`` and zero ``ceil(sparsity * rows)``
    random rows of each column (Martens 2010, https://www.cs.toronto.edu/~jmartens/docs/
    Deep_HessianFree.pdf)."""
    arr = _float_array(tensor, "sparse_")
    if arr.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = arr.shape
    zeros = int(math.ceil(sparsity * rows))
    rng = _rng(generator)
    values = rng.normal(0.0, std, size=arr.shape)
    for col in range(cols):
        values[rng.permutation(rows)[:zeros], col] = 0.0
    _fill(arr, values)
    return tensor


def orthogonal_(tensor: T, gain: float = 1.0, generator=None) -> T:
    """Fill with a (semi-)orthogonal matrix: the Q of a QR decomposition of a standard normal
    draw, sign-corrected so the distribution is uniform (Saxe et al. 2013,
    https://arxiv.org/abs/1312.6120).  Dimensions after the first are flattened."""
    arr = _float_array(tensor, "orthogonal_")
    if arr.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if arr.size == 0:
        return tensor
    rows = arr.shape[0]
    cols = arr.size // rows
    flat = _rng(generator).normal(0.0, 1.0, size=(rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    _fill(arr, (gain * q).reshape(arr.shape))
    return tensor


def xavier_uniform_(tensor: T, gain: float = 1.0, generator=None) -> T:
    """Glorot uniform: ``U(-bound, bound)``, ``bound = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: T, gain: float = 1.0, generator=None) -> T:
    """Glorot normal: ``N(0, std^2)``, ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor: T, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> T:
    """He uniform: ``U(-bound, bound)``, ``bound = gain * sqrt(3 / fan)``, with
    ``gain = calculate_gain(nonlinearity, a)`` and ``fan`` the ``mode`` fan."""
    if _is_empty(_array(tensor)):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: T, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> T:
    """He normal: ``N(0, std^2)``, ``std = gain / sqrt(fan)``."""
    if _is_empty(_array(tensor)):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    return normal_(tensor, 0.0, gain / math.sqrt(fan), generator)


def _deprecated(new: Callable[..., Any]) -> Callable[..., Any]:
    """``nn.init.normal`` and the other names without the underscore: ``new`` with PyTorch's
    FutureWarning."""
    old = new.__name__[:-1]

    def deprecated_init(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"`nn.init.{old}` is now deprecated in favor of `nn.init.{new.__name__}`.",
                      FutureWarning, stacklevel=2)
        return new(*args, **kwargs)
    deprecated_init.__name__ = deprecated_init.__qualname__ = old
    deprecated_init.__doc__ = f"Deprecated: ``{new.__name__}``, with PyTorch's FutureWarning."
    return deprecated_init


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
eye = _deprecated(eye_)
dirac = _deprecated(dirac_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
sparse = _deprecated(sparse_)
