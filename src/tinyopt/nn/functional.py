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

import warnings

from tinyopt.engine.ops import elementwise as _ew
from tinyopt.engine.ops import loss as _loss
from tinyopt.engine.ops import reduce as _reduce
from tinyopt.engine.ops.attention import scaled_dot_product_attention
from tinyopt.engine.ops.conv import avg_pool2d, conv2d, max_pool2d
from tinyopt.engine.ops.conv1d import adaptive_avg_pool1d, avg_pool1d, conv1d, max_pool1d
from tinyopt.engine.ops.embedding_bag import embedding_bag
from tinyopt.engine.ops.linalg import linear
from tinyopt.engine.ops.loss import one_hot
from tinyopt.engine.ops.nn import batch_norm, dropout, embedding, layer_norm
from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["adaptive_avg_pool1d", "avg_pool1d", "avg_pool2d", "batch_norm",
           "binary_cross_entropy_with_logits", "conv1d", "conv2d", "cross_entropy", "dropout",
           "embedding", "embedding_bag", "gelu", "l1_loss", "layer_norm", "leaky_relu", "linear",
           "log_softmax", "max_pool1d", "max_pool2d", "mse_loss", "nll_loss", "one_hot", "relu",
           "scaled_dot_product_attention", "sigmoid", "silu", "softmax", "softplus", "tanh"]


# ---- activations ---------------------------------------------------------------------------------
def relu(input, inplace: bool = False) -> Tensor:
    """max(x, 0)."""
    return _ew.relu(input)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x if x >= 0 else negative_slope * x."""
    return _ew.leaky_relu(input, negative_slope)


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
    """Cross-entropy of logits (N, C) or (N, C, d1, ...) against int64 class indices;
    see ``tinyopt.engine.ops.loss.cross_entropy`` for the weighting and smoothing formula."""
    return _loss.cross_entropy(input, target, weight, ignore_index,
                               _reduction(size_average, reduce, reduction), label_smoothing)


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
    _loss._check_reduction(op, reduction)
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
