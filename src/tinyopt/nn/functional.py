"""``tinyopt.nn.functional``: the neural-net ops as functions, with ``torch.nn.functional``'s
names, signatures and defaults.

Each function records graph nodes (see ``tinyopt.engine.ops``) and computes nothing until a
tensor is realized.  Inputs may be tinyopt Tensors or numpy arrays::

    import tinyopt.nn.functional as F
    logits = F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)   # x: numpy (B, 784)
    loss = F.cross_entropy(logits, y)                          # y: numpy int64 (B,)
    loss.backward()

``inplace=True`` is accepted where PyTorch takes it and gives the same result: a graph node never
overwrites its input, so the flag only matters to memory, which the planner already reuses.
The legacy ``size_average``/``reduce`` loss arguments map to ``reduction`` with PyTorch's warning.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from tinyopt.engine.ops import activation as _act
from tinyopt.engine.ops import distance as _dist
from tinyopt.engine.ops import elementwise as _ew
from tinyopt.engine.ops import loss as _loss
from tinyopt.engine.ops import pointwise_loss as _pw
from tinyopt.engine.ops import reduce as _reduce
from tinyopt.engine.ops.attention import scaled_dot_product_attention
from tinyopt.engine.ops.conv import avg_pool2d, conv2d, max_pool2d
from tinyopt.engine.ops.conv1d import avg_pool1d, conv1d, max_pool1d
from tinyopt.engine.ops.embedding_bag import embedding_bag
from tinyopt.engine.ops.conv_transpose import conv_transpose2d
from tinyopt.engine.ops.grid_sample import affine_grid, grid_sample
from tinyopt.engine.ops.adaptive_max_pool import (adaptive_max_pool1d, adaptive_max_pool2d,
                                                  adaptive_max_pool3d)
from tinyopt.engine.ops.patches import fold, unfold
from tinyopt.engine.ops.volume import (adaptive_avg_pool3d, avg_pool3d, conv3d, conv_transpose3d,
                                       max_pool3d)
from tinyopt.engine.ops.group_norm import group_norm, instance_norm
from tinyopt.engine.ops.linalg import linear
from tinyopt.engine.ops.loss import one_hot
from tinyopt.engine.ops.nn import batch_norm, dropout, embedding, layer_norm
from tinyopt.engine.ops.nn import dropout_mask as _dropout_mask
from tinyopt.engine.ops.resample import (adaptive_avg_pool2d, interpolate, pad, pixel_shuffle,
                                         pixel_unshuffle)
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.engine.tensor import leaf as _leaf
from tinyopt.nn import kernels_ahead

__all__ = ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
           "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "affine_grid",
           "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "batch_norm", "binary_cross_entropy", "binary_cross_entropy_with_logits", "celu",
           "conv1d", "conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d",
           "cosine_embedding_loss", "cosine_similarity", "cross_entropy", "dropout", "dropout1d",
           "dropout2d", "dropout3d", "elu", "elu_", "embedding", "embedding_bag", "fold",
           "gelu", "glu", "grid_sample", "group_norm", "hardshrink", "hardsigmoid", "hardswish",
           "hardtanh",
           "huber_loss", "instance_norm", "interpolate", "kl_div", "l1_loss", "layer_norm",
           "leaky_relu", "leaky_relu_", "linear", "log_softmax", "logsigmoid",
           "lp_pool1d", "lp_pool2d", "lp_pool3d",
           "margin_ranking_loss", "max_pool1d", "max_pool2d", "max_pool3d", "mish", "mse_loss",
           "nll_loss", "normalize", "one_hot", "pad", "pairwise_distance", "pixel_shuffle",
           "pixel_unshuffle", "prelu", "relu", "relu_", "relu6",
           "rms_norm", "scaled_dot_product_attention", "selu", "sigmoid", "silu", "smooth_l1_loss",
           "softmax", "softplus", "softshrink", "softsign", "tanh", "tanhshrink", "threshold",
           "threshold_", "triplet_margin_loss", "unfold", "upsample"]


# ---- activations ---------------------------------------------------------------------------------
def relu(input, inplace: bool = False) -> Tensor:
    """max(x, 0)."""
    return _ew.relu(input)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x if x >= 0 else negative_slope * x."""
    return _ew.leaky_relu(input, negative_slope)


def relu_(input: Tensor) -> Tensor:
    """``relu`` in place: ``input`` itself, rectified."""
    return input.relu_()


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    """``leaky_relu`` in place."""
    return input._unary_inplace(leaky_relu, negative_slope)


def glu(input, dim: int = -1) -> Tensor:
    """The gated linear unit a * sigmoid(b), a and b the two halves of ``input`` along ``dim``
    (Dauphin et al. 2016, https://arxiv.org/abs/1612.08083)."""
    x = as_tensor(input)
    if x.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    if x.shape[dim] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % x.ndim} is "
                           f"size {x.shape[dim]}")
    a, b = x.chunk(2, dim)
    return a * _ew.sigmoid(b)


def gelu(input, approximate: str = "none") -> Tensor:
    """x Phi(x) (Hendrycks & Gimpel 2016, https://arxiv.org/abs/1606.08415); ``'tanh'`` uses
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return _ew.gelu(input, approximate)


def silu(input, inplace: bool = False) -> Tensor:
    """x sigmoid(x) (Elfwing et al. 2017, https://arxiv.org/abs/1702.03118)."""
    return _ew.silu(input)


def softplus(input, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold."""
    return _ew.softplus(input, beta, threshold)


def sigmoid(input) -> Tensor:
    """1 / (1 + exp(-x))."""
    return _ew.sigmoid(input)


def tanh(input) -> Tensor:
    """The hyperbolic tangent, elementwise."""
    return _ew.tanh(input)


def _softmax_dim(name: str, ndim: int, dim: int | None) -> int:
    """PyTorch's legacy choice when ``dim`` is omitted (0 for 0-, 1- and 3-D inputs, else 1)."""
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to "
                  f"include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """exp(x_i) / sum_j exp(x_j) along ``dim``."""
    x = as_tensor(input)
    return _reduce.softmax(x, _softmax_dim("softmax", x.ndim, dim), dtype=dtype)


def log_softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """x_i - log sum_j exp(x_j) along ``dim``, computed stably."""
    x = as_tensor(input)
    return _reduce.log_softmax(x, _softmax_dim("log_softmax", x.ndim, dim), dtype=dtype)


# ---- losses ------------------------------------------------------------------------------------
def _legacy_reduction(size_average: bool | None, reduce: bool | None) -> str:
    """``reduction`` for the deprecated ``size_average``/``reduce`` pair, as PyTorch maps it."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{ret}' instead.", stacklevel=3)
    return ret


def _reduction(size_average, reduce, reduction: str) -> str:
    if size_average is not None or reduce is not None:
        return _legacy_reduction(size_average, reduce)
    return reduction


def cross_entropy(input, target, weight=None, size_average: bool | None = None,
                  ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits (N, C), (N, C, d1, ...) or (C,) against int64 class indices, or
    class probabilities (a float target of the input's shape); see
    ``tinyopt.engine.ops.loss.cross_entropy`` for the weighting and smoothing formula."""
    loss = _loss.cross_entropy(input, target, weight, ignore_index,
                               _reduction(size_average, reduce, reduction), label_smoothing)
    kernels_ahead.cross_entropy(loss)
    return loss


def nll_loss(input, target, weight=None, size_average: bool | None = None,
             ignore_index: int = -100, reduce: bool | None = None,
             reduction: str = "mean") -> Tensor:
    """-w[y] input[y] per row, for log-probabilities ``input`` and int64 class indices."""
    return _loss.nll_loss(input, target, weight, ignore_index,
                          _reduction(size_average, reduce, reduction))


def _weighted(op: str, elementwise: Tensor, input: Tensor, weight, reduction: str) -> Tensor:
    """PyTorch's weighted regression loss: sum(w * l) / sum(w) for 'mean'."""
    w = as_tensor(weight)
    if w.shape != input.shape:
        raise ValueError(f"{op}: weights and input must have the same size, got weight "
                         f"{w.shape} and input {input.shape}")
    weighted = elementwise * w.to(elementwise.dtype)
    if reduction == "none":
        return weighted
    if reduction == "sum":
        return weighted.sum()
    return weighted.sum() / w.to(elementwise.dtype).sum()


def _pointwise_loss(op: str, loss, input, target, size_average, reduce, reduction: str,
                    weight) -> Tensor:
    reduction = _reduction(size_average, reduce, reduction)
    if weight is None:
        return loss(input, target, reduction)
    _loss.check_reduction(op, reduction)
    return _weighted(op, loss(input, target, "none"), as_tensor(input), weight, reduction)


def mse_loss(input, target, size_average: bool | None = None, reduce: bool | None = None,
             reduction: str = "mean", weight=None) -> Tensor:
    """(x - y)^2, reduced; with ``weight``, 'mean' is sum(w (x-y)^2) / sum(w)."""
    return _pointwise_loss("mse_loss", _loss.mse_loss, input, target, size_average, reduce,
                           reduction, weight)


def l1_loss(input, target, size_average: bool | None = None, reduce: bool | None = None,
            reduction: str = "mean", weight=None) -> Tensor:
    """|x - y|, reduced; with ``weight``, 'mean' is sum(w |x-y|) / sum(w)."""
    return _pointwise_loss("l1_loss", _loss.l1_loss, input, target, size_average, reduce,
                           reduction, weight)


def binary_cross_entropy_with_logits(input, target, weight=None,
                                     size_average: bool | None = None,
                                     reduce: bool | None = None, reduction: str = "mean",
                                     pos_weight=None) -> Tensor:
    """-[pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], weighted by ``weight``."""
    return _loss.binary_cross_entropy_with_logits(
        input, target, weight, _reduction(size_average, reduce, reduction), pos_weight)


# ---- more activations ----------------------------------------------------------------------------
def elu(input, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x for x > 0, else alpha (exp(x) - 1) (Clevert et al. 2015, https://arxiv.org/abs/1511.07289)."""
    return _act.elu(input, alpha)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    """``elu`` in place."""
    return input._unary_inplace(elu, alpha)


def selu(input, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with alpha = 1.6733, scale = 1.0507 (Klambauer et al. 2017,
    https://arxiv.org/abs/1706.02515)."""
    return _act.selu(input)


def celu(input, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    return _act.celu(input, alpha)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """x clamped to [min_val, max_val] (the gradient passes strictly between them)."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _act.hardtanh(input, min_val, max_val)


def relu6(input, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6)."""
    return _act.hardtanh(input, 0.0, 6.0)


def hardsigmoid(input, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6 (the gradient 1/6 strictly inside (-3, 3))."""
    return _act.hardtanh(as_tensor(input) + 3.0, 0.0, 6.0) / 6.0


def hardswish(input, inplace: bool = False) -> Tensor:
    """x relu6(x + 3) / 6 (Howard et al. 2019, https://arxiv.org/abs/1905.02244): 0 up to -3, x
    from 3; PyTorch's gradient (2x + 3) / 6 strictly between."""
    x = as_tensor(input)
    return _ew.where(x <= -3.0, x * 0.0, _ew.where(x < 3.0, x * (x + 3.0) / 6.0, x))


def softsign(input) -> Tensor:
    """x / (1 + |x|)."""
    x = as_tensor(input)
    return x / (x.abs() + 1.0)


def tanhshrink(input) -> Tensor:
    """x - tanh(x)."""
    x = as_tensor(input)
    return x - _ew.tanh(x)


def _threshold(input, level: float, value: float, inplace: bool) -> Tensor:
    x = as_tensor(input)
    out = _ew.where(x <= level, value, x)
    return x.copy_(out) if inplace else out


def threshold(input, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``value`` where x <= ``threshold``, x elsewhere (NaN stays NaN); in place with
    ``inplace``."""
    return _threshold(input, threshold, value, inplace)


def threshold_(input, threshold: float, value: float) -> Tensor:
    """``threshold`` in place."""
    return _threshold(input, threshold, value, True)


def hardshrink(input, lambd: float = 0.5) -> Tensor:
    """0 where -lambd <= x <= lambd, x elsewhere."""
    x = as_tensor(input)
    return _ew.where((x >= -lambd) & (x <= lambd), x * 0.0, x)


def softshrink(input, lambd: float = 0.5) -> Tensor:
    """x - lambd above lambd, x + lambd below -lambd, 0 between (lambd >= 0)."""
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    x = as_tensor(input)  # (NaN is outside the band, as in torch's kernel: NaN, gradient 1)
    return _ew.where((x >= -lambd) & (x <= lambd), x * 0.0, x - lambd * x.sign())


def logsigmoid(input) -> Tensor:
    """log(1 / (1 + exp(-x))), computed stably."""
    return _act.log_sigmoid(input)


def mish(input, inplace: bool = False) -> Tensor:
    """x tanh(softplus(x)) (Misra 2019, https://arxiv.org/abs/1908.08681)."""
    return _act.mish(input)


def prelu(input, weight) -> Tensor:
    """x for x > 0, else weight x; ``weight`` has 1 element or one per channel (dimension 1)
    (He et al. 2015, https://arxiv.org/abs/1502.01852)."""
    return _act.prelu(input, weight)


# ---- channel dropout and pooling -----------------------------------------------------------------
def _check_p(p) -> None:
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _feature_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Zero whole channels (dimension 1 of (N, C, *)) with probability p, scale the rest by
    1 / (1 - p): one mask value per (n, c), drawn from tinyopt's generator at graph build."""
    if not training or p == 0.0 or x.numel() == 0:  # (torch's: the input itself)
        return x
    _ew.require_float("dropout", x)
    shape = x.shape[:2] + (1,) * (x.ndim - 2)
    return x * _leaf(_dropout_mask(None, shape, p, x.dtype))


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Channel-wise dropout of (N, C, L) or (C, L) inputs."""
    _check_p(p)
    x = as_tensor(input)
    if x.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {x.ndim}D input. "
                           f"Note that dropout1d exists to provide channel-wise dropout on inputs "
                           f"with 1 spatial dimension, a channel dimension, and an optional batch "
                           f"dimension (i.e. 2D or 3D inputs).")
    if x.ndim == 2:
        return _feature_dropout(x.unsqueeze(0), p, training).squeeze(0)
    return _feature_dropout(x, p, training)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Channel-wise dropout of (N, C, H, W) inputs (a 3-D input is read as (N, C, L), with
    PyTorch's warning)."""
    _check_p(p)
    x = as_tensor(input)
    if x.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {x.ndim}-D input to dropout2d, which is deprecated "
                      f"and will result in an error in a future release. To retain the behavior "
                      f"and silence this warning, please use dropout instead. Note that dropout2d "
                      f"exists to provide channel-wise dropout on inputs with 2 spatial "
                      f"dimensions, a channel dimension, and an optional batch dimension (i.e. 3D "
                      f"or 4D inputs).", stacklevel=2)
    if x.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise "
                      "1D dropout behavior is desired - input is interpreted as shape (N, C, L), "
                      "where C is the channel dim. This behavior will change in a future release "
                      "to interpret the input as one without a batch dimension, i.e. shape (C, H, "
                      "W). To maintain the 1D channel-wise dropout behavior, please switch to "
                      "using dropout1d instead.", stacklevel=2)
    if x.ndim < 2:
        raise RuntimeError(f"dropout2d: expected an input with a channel dimension, got shape "
                           f"{list(x.shape)}")
    return _feature_dropout(x, p, training)


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Channel-wise dropout of (N, C, D, H, W) or (C, D, H, W) inputs."""
    _check_p(p)
    x = as_tensor(input)
    if x.ndim not in (4, 5):
        warnings.warn(f"dropout3d: Received a {x.ndim}-D input to dropout3d, which is deprecated "
                      f"and will result in an error in a future release. To retain the behavior "
                      f"and silence this warning, please use dropout instead. Note that dropout3d "
                      f"exists to provide channel-wise dropout on inputs with 3 spatial "
                      f"dimensions, a channel dimension, and an optional batch dimension (i.e. 4D "
                      f"or 5D inputs).", stacklevel=2)
    if x.ndim != 5:  # (torch's: not batched, so channels are dimension 0)
        return _feature_dropout(x.unsqueeze(0), p, training).squeeze(0)
    return _feature_dropout(x, p, training)


def adaptive_avg_pool1d(input, output_size) -> Tensor:
    """Average pooling of (N, C, L) or (C, L) to a given length (see ``adaptive_avg_pool2d``)."""
    x = as_tensor(input)
    if x.ndim not in (2, 3):
        raise RuntimeError(f"adaptive_avg_pool1d(): Expected 2D or 3D tensor, but got "
                           f"{list(x.shape)}")
    size = output_size[0] if isinstance(output_size, (tuple, list)) else output_size
    return adaptive_avg_pool2d(x.unsqueeze(-2), (1, size)).squeeze(-2)


def _lp_pool(dims: int, input, norm_type: float, kernel_size, stride, ceil_mode: bool) -> Tensor:
    """(sum over each window of x^p)^(1/p), as torch composes it: an average pool m of x^p,
    times the window's size, to the power 1/p (torch's sign(m) relu(|m|) for m: a zero
    gradient where m = 0); p = +-inf is the max (min) of |x|."""
    max_pool, avg_pool = _POOLS[dims]
    x = as_tensor(input)
    if norm_type == math.inf:
        return max_pool(_abs(x), kernel_size, stride, 0, 1, ceil_mode)
    if norm_type == -math.inf:
        return -max_pool(-_abs(x), kernel_size, stride, 0, 1, ceil_mode)
    k = tuple(kernel_size) if isinstance(kernel_size, (tuple, list)) else (kernel_size,) * dims
    m = avg_pool(x.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return (m.sign() * relu(_abs(m))).mul(math.prod(k)).pow(1.0 / norm_type)


def _abs(x: Tensor) -> Tensor:
    """|x| as x sign(x), whose gradient g sign(x) is torch's abs's where x is 0 or NaN too (NaN
    for a NaN g: abs's own gradient kernel gives 0 there)."""
    return x * x.sign()


def lp_pool1d(input, norm_type: float, kernel_size: int, stride=None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling of (N, C, L) or (C, L): (sum_window x^p)^(1/p) (see
    ``_lp_pool``)."""
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type: float, kernel_size, stride=None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling of (N, C, H, W) or (C, H, W): (sum_window x^p)^(1/p)."""
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type: float, kernel_size, stride=None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling of (N, C, D, H, W) or (C, D, H, W): (sum_window x^p)^(1/p)."""
    return _lp_pool(3, input, norm_type, kernel_size, stride, ceil_mode)


_POOLS = {1: (max_pool1d, avg_pool1d), 2: (max_pool2d, avg_pool2d), 3: (max_pool3d, avg_pool3d)}


def upsample(input, size=None, scale_factor=None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    """Deprecated alias of ``interpolate`` (with PyTorch's warning)."""
    warnings.warn("`nn.functional.upsample` is deprecated. Use `nn.functional.interpolate` "
                  "instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


# ---- norms and distances -------------------------------------------------------------------------
def rms_norm(input, normalized_shape, weight=None, eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the trailing ``normalized_shape`` dimensions
    (``eps`` None: the dtype's machine epsilon), as ``torch.nn.functional.rms_norm``."""
    x = as_tensor(input)
    _ew.require_float("rms_norm", x)
    ns = (int(normalized_shape),) if isinstance(normalized_shape, numbers.Integral) else \
        tuple(int(s) for s in normalized_shape)
    if not ns or x.shape[x.ndim - len(ns):] != ns or len(ns) > x.ndim:
        raise RuntimeError(f"Given normalized_shape={list(ns)}, expected input with shape "
                           f"[*, {', '.join(map(str, ns))}], but got input of size"
                           f"{list(x.shape)}")
    if eps is None:
        eps = float(np.finfo(np.float32 if x.dtype.itemsize <= 4 else x.dtype).eps)
    dims = tuple(range(x.ndim - len(ns), x.ndim))
    y = x * _ew.rsqrt(_reduce.mean(x * x, dims, keepdim=True) + eps)
    return y if weight is None else y * weight


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Tensor:
    """x / max(||x||_p, eps) along ``dim``."""
    if out is not None:
        raise TypeError("normalize: out= is not supported (tinyopt ops return new tensors)")
    x = as_tensor(input)
    return x / _ew.clamp(_dist.vector_norm(x, p, dim, keepdim=True), min=eps)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) along ``dim`` (PyTorch's formulation:
    the norms are clamped without changing their gradient); x1 and x2 broadcast together."""
    a, b = _ew.promoted_operands("cosine_similarity", x1, x2)
    _ew.require_float("cosine_similarity", a, b)
    shape = _ew.broadcast_shape("cosine_similarity", a.shape, b.shape)
    a, b = a.expand(shape), b.expand(shape)
    na = _dist.clamp_min_st(_dist.vector_norm(a, 2, dim, keepdim=True), eps)
    nb = _dist.clamp_min_st(_dist.vector_norm(b, 2, dim, keepdim=True), eps)
    return ((a / na) * (b / nb)).sum(dim)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """||x1 - x2 + eps||_p over the last dimension."""
    a, b = _ew.promoted_operands("pairwise_distance", x1, x2)
    _ew.require_float("pairwise_distance", a, b)
    return _dist.vector_norm(a - b + eps, p, max(a.ndim, b.ndim) - 1, keepdim)


# ---- more losses ---------------------------------------------------------------------------------
def _reduced(loss: Tensor, reduction: str, op: str) -> Tensor:
    _loss.check_reduction(op, reduction)
    return _loss.apply_reduction(loss, reduction)


def _warn_broadcast(input, target) -> None:
    a, b = as_tensor(input), as_tensor(target)
    if a.shape != b.shape:
        warnings.warn(f"Using a target size ({list(b.shape)}) that is different to the input size "
                      f"({list(a.shape)}). This will likely lead to incorrect results due to "
                      f"broadcasting. Please ensure they have the same size.", stacklevel=3)


def binary_cross_entropy(input, target, weight=None, size_average: bool | None = None,
                         reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """-w [y log x + (1 - y) log(1 - x)] of probabilities x (logs clamped at -100, as PyTorch);
    inputs outside [0, 1] raise when the graph runs (use ``binary_cross_entropy_with_logits``
    on logits)."""
    reduction = _reduction(size_average, reduce, reduction)
    _loss.check_reduction("binary_cross_entropy", reduction)
    return _reduced(_pw.binary_cross_entropy(input, target, weight), reduction,
                    "binary_cross_entropy")


def smooth_l1_loss(input, target, size_average: bool | None = None, reduce: bool | None = None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = x - y); l1_loss for beta = 0."""
    _warn_broadcast(input, target)
    reduction = _reduction(size_average, reduce, reduction)
    _loss.check_reduction("smooth_l1_loss", reduction)
    if beta == 0.0:
        a, b = _ew.promoted_operands("smooth_l1_loss", input, target)
        return _reduced((a - b).abs(), reduction, "smooth_l1_loss")
    return _reduced(_pw.smooth_l1(input, target, beta), reduction, "smooth_l1_loss")


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0,
               weight=None) -> Tensor:
    """0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta); with ``weight`` (the input's
    shape) the weighted losses are reduced (their plain mean for 'mean', as PyTorch)."""
    _warn_broadcast(input, target)
    _loss.check_reduction("huber_loss", reduction)
    loss = _pw.huber(input, target, delta)
    if weight is not None:
        w = as_tensor(weight)
        if w.shape != as_tensor(input).shape:
            raise ValueError("Weights and input must have the same size.")
        loss = loss * w.to(loss.dtype)
    return _reduced(loss, reduction, "huber_loss")


_KL_MEAN = ("reduction: 'mean' divides the total loss by both the batch size and the support "
            "size.'batchmean' divides only by the batch size, and aligns with the KL div math "
            "definition.'mean' will be changed to behave the same as 'batchmean' in the next "
            "major release.")


def kl_div(input, target, size_average: bool | None = None, reduce: bool | None = None,
           reduction: str = "mean", log_target: bool = False) -> Tensor:
    """KL divergence of log-probabilities ``input`` from ``target`` (probabilities, or
    log-probabilities with ``log_target``): t (log t - x) summed as ``reduction`` says;
    'batchmean' divides the sum by the batch size (the mathematical KL divergence)."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    elif reduction == "mean":
        warnings.warn(_KL_MEAN, stacklevel=2)
    if reduction not in ("none", "mean", "sum", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    x = as_tensor(input)
    loss = _pw.kl_div(input, target, log_target)
    if reduction == "batchmean":
        total = loss.sum()
        return total / x.shape[0] if x.ndim else total
    return _reduced(loss, reduction, "kl_div")


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average: bool | None = None,
                        reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """max(d(a, p) - d(a, n) + margin, 0) with d the ``pairwise_distance``; with ``swap``,
    d(a, n) is replaced by min(d(a, n), d(p, n)) (Balntas et al. 2016)."""
    reduction = _reduction(size_average, reduce, reduction)
    _loss.check_reduction("triplet_margin_loss", reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    a, pos, neg = as_tensor(anchor), as_tensor(positive), as_tensor(negative)
    if not a.ndim == pos.ndim == neg.ndim:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the "
                           f"same number of dimensions, but got: anchor {a.ndim}D, positive "
                           f"{pos.ndim}D, and negative {neg.ndim}D inputs")
    d_pos = pairwise_distance(a, pos, p, eps)
    d_neg = pairwise_distance(a, neg, p, eps)
    if swap:
        d_neg = _ew.minimum(d_neg, pairwise_distance(pos, neg, p, eps))
    return _reduced(_ew.clamp(d_pos - d_neg + margin, min=0.0), reduction, "triplet_margin_loss")


def _target_where(target: Tensor, value: float, a: Tensor) -> Tensor:
    return _ew.where(_ew.eq(target, value), a, _ew.constant(0.0, a.dtype))


_COSINE_EMBEDDING_EPS = float(np.float32(1e-12))


def cosine_embedding_loss(input1, input2, target, margin: float = 0,
                          size_average: bool | None = None, reduce: bool | None = None,
                          reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) where y = 1, max(0, cos(x1, x2) - margin) where y = -1, with
    cos = <x1, x2> / sqrt((|x1|^2 + eps) (|x2|^2 + eps)) over dimension 1, with PyTorch's
    eps = float32(1e-12) (a float constant in ATen, also for float64 inputs)."""
    reduction = _reduction(size_average, reduce, reduction)
    _loss.check_reduction("cosine_embedding_loss", reduction)
    x1, x2 = _ew.promoted_operands("cosine_embedding_loss", input1, input2)
    _ew.require_float("cosine_embedding_loss", x1, x2)
    y = as_tensor(target)
    if y.ndim not in (0, 1):
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if y.ndim == 1 and not (x1.ndim == 2 and x2.ndim == 2):
        raise RuntimeError(f"1D target tensor expects 2D input tensors, but found inputs with "
                           f"sizes {list(x1.shape)} and {list(x2.shape)}.")
    if y.ndim == 0 and not (x1.ndim == 1 and x2.ndim == 1):
        raise RuntimeError(f"0D target tensor expects 1D input tensors, but found inputs with "
                           f"sizes {list(x1.shape)} and {list(x2.shape)}.")
    d = y.ndim
    prod = (x1 * x2).sum(d)
    mag1 = (x1 * x1).sum(d) + _COSINE_EMBEDDING_EPS
    mag2 = (x2 * x2).sum(d) + _COSINE_EMBEDDING_EPS
    cos = prod / (mag1 * mag2).sqrt()
    yt = y.to(cos.dtype)
    loss = _target_where(yt, 1.0, 1.0 - cos) + _target_where(yt, -1.0,
                                                             _ew.clamp(cos - margin, min=0.0))
    return _reduced(loss, reduction, "cosine_embedding_loss")


def margin_ranking_loss(input1, input2, target, margin: float = 0,
                        size_average: bool | None = None, reduce: bool | None = None,
                        reduction: str = "mean") -> Tensor:
    """max(0, -y (x1 - x2) + margin)."""
    reduction = _reduction(size_average, reduce, reduction)
    _loss.check_reduction("margin_ranking_loss", reduction)
    x1, x2, y = as_tensor(input1), as_tensor(input2), as_tensor(target)
    if not x1.ndim == x2.ndim == y.ndim:
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension "
                           f"but got sizes: input1: {list(x1.shape)}, input2: {list(x2.shape)}, "
                           f"target: {list(y.shape)} ")
    a, b = _ew.promoted_operands("margin_ranking_loss", x1, x2)
    return _reduced(_ew.clamp(-y.to(a.dtype) * (a - b) + margin, min=0.0), reduction,
                    "margin_ranking_loss")
