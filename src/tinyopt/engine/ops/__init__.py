"""The ops: each submodule defines a family, forward kernel next to backward rule.

A submodule registers its ops when it is imported, on first use: the first ``to.exp`` (or
``x.exp()``) imports ``elementwise`` and its kernels, and ``import tinyopt`` imports none of them
(issue 14: import time).  :func:`load_all` imports every family; ``engine.op.OPS`` calls it when
asked for an op that no imported family has registered yet.  ``Tensor``'s methods
(``tinyopt.engine.op_methods``, ``tensor_api``) and the ``tinyopt.*`` functions are these
functions.  Which names each family exports, and as what, is declared once in ``ops/api_table.py``;
``tools/gen_ops.py`` writes the lists below from it.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from tinyopt.engine.lazy_exports import exports as _exports
from tinyopt.engine.lazy_exports import table as _table

# ---- written by tools/gen_ops.py from ops/api_table.py (edit the table, not this) ----
if _typing.TYPE_CHECKING:
    from tinyopt.engine.ops.conv import avg_pool2d, conv2d, max_pool2d
    from tinyopt.engine.ops.creation import (arange, bernoulli, empty, empty_like, eye,
                                             fill_random, full, full_like, linspace, logspace,
                                             multinomial, normal, ones, ones_like, rand, rand_like,
                                             randint, randint_like, randn, randn_like, randperm,
                                             scalar_tensor, zeros, zeros_like)
    from tinyopt.engine.ops.combine import block_diag, cartesian_prod, combinations
    from tinyopt.engine.ops.differences import diff
    from tinyopt.engine.ops.distance import vector_norm
    from tinyopt.engine.ops.histograms import histc, histogram
    from tinyopt.engine.ops.elementwise import (abs, acos, add, addcdiv, addcmul, allclose, arccos,
                                                arcsin, arctan, arctan2, asin, atan, atan2,
                                                bitwise_and, bitwise_not, bitwise_or, bitwise_xor,
                                                ceil, clamp, clamp_max, clamp_min, clip, clone,
                                                cos, cosh, div, divide, eq, equal, erf, exp, expm1,
                                                fix, floor, floor_divide, fmod, frac, ge, gelu,
                                                greater, greater_equal, gt, hypot, isclose,
                                                isfinite, isinf, isnan, isneginf, isposinf, le,
                                                leaky_relu, lerp, less, less_equal, log, log10,
                                                log1p, log2, logaddexp, logaddexp2, logical_and,
                                                logical_not, logical_or, logical_xor, lt, maximum,
                                                minimum, mul, multiply, nan_to_num, ne, neg,
                                                negative, not_equal, positive, pow, reciprocal,
                                                relu, remainder, round, rsqrt, sigmoid, sign, silu,
                                                sin, sinh, softplus, sqrt, square, sub, subtract,
                                                tan, tanh, to, true_divide, trunc, where, xlogy)
    from tinyopt.engine.ops.elementwise import abs as absolute
    from tinyopt.engine.ops.elementwise import sign as sgn
    from tinyopt.engine.ops.indexing import getitem, masked_fill, setitem
    from tinyopt.engine.ops.linalg import (addbmm, addmm, addmv, addr, baddbmm, bmm, dot, einsum,
                                           ger, linear, matmul, mm, mv, outer)
    from tinyopt.engine.ops.loss import (binary_cross_entropy_with_logits, cross_entropy, l1_loss,
                                         mse_loss, nll_loss, one_hot)
    from tinyopt.engine.ops.matrix_inverse import inverse
    from tinyopt.engine.ops.movement import (as_strided, atleast_1d, atleast_2d, broadcast_shapes,
                                             broadcast_tensors, broadcast_to, cat, chunk,
                                             column_stack, contiguous, diag, diagonal, expand,
                                             flatten, flip, fliplr, flipud, hstack, meshgrid,
                                             moveaxis, movedim, narrow, permute, repeat,
                                             repeat_interleave, reshape, roll, select, split,
                                             squeeze, stack, swapaxes, swapdims, t, tensor_split,
                                             tile, trace, transpose, tril, triu, unbind, unflatten,
                                             unfold, unsqueeze, view, vstack)
    from tinyopt.engine.ops.movement import cat as concat
    from tinyopt.engine.ops.movement import cat as concatenate
    from tinyopt.engine.ops.nn import batch_norm, dropout, embedding, layer_norm
    from tinyopt.engine.ops.quantiles import quantile
    from tinyopt.engine.ops.reduce import (all, amax, amin, any, argmax, argmin, count_nonzero,
                                           cumprod, cumsum, log_softmax, logcumsumexp, logsumexp,
                                           max, mean, min, norm, prod, softmax, std, sum, var)
    from tinyopt.engine.ops.selection import (argsort, argwhere, bincount, bucketize, gather,
                                              index_add, index_copy, index_fill, index_select,
                                              kthvalue, masked_select, median, msort, nanmedian,
                                              nonzero, scatter, scatter_add, searchsorted, sort,
                                              take, take_along_dim, topk, unique,
                                              unique_consecutive)
    from tinyopt.engine.ops.statistics import (corrcoef, cov, cumulative_trapezoid, nanmean,
                                               nansum, trapezoid)
    from tinyopt.engine.ops.vector_products import cdist, cross, inner, isin, std_mean, var_mean
    from tinyopt.engine.ops.windows import (bartlett_window, blackman_window, hamming_window,
                                            hann_window, kaiser_window)
    from tinyopt.engine.tensor import as_tensor, from_dlpack, from_numpy, tensor

_WHERE = _table({
    "tinyopt.engine.ops.conv": "avg_pool2d conv2d max_pool2d",
    "tinyopt.engine.ops.creation": (
        "arange bernoulli empty empty_like eye fill_random full full_like linspace logspace "
        "multinomial normal ones ones_like rand rand_like randint randint_like randn randn_like "
        "randperm scalar_tensor zeros zeros_like"),
    "tinyopt.engine.ops.combine": "block_diag cartesian_prod combinations",
    "tinyopt.engine.ops.differences": "diff",
    "tinyopt.engine.ops.distance": "vector_norm",
    "tinyopt.engine.ops.histograms": "histc histogram",
    "tinyopt.engine.ops.elementwise": (
        "abs acos add addcdiv addcmul allclose arccos arcsin arctan arctan2 asin atan atan2 "
        "bitwise_and bitwise_not bitwise_or bitwise_xor ceil clamp clamp_max clamp_min clip clone "
        "cos cosh div divide eq equal erf exp expm1 fix floor floor_divide fmod frac ge gelu "
        "greater greater_equal gt hypot isclose isfinite isinf isnan isneginf isposinf le "
        "leaky_relu lerp less less_equal log log10 log1p log2 logaddexp logaddexp2 logical_and "
        "logical_not logical_or logical_xor lt maximum minimum mul multiply nan_to_num ne neg "
        "negative not_equal positive pow reciprocal relu remainder round rsqrt sigmoid sign silu "
        "sin sinh softplus sqrt square sub subtract tan tanh to true_divide trunc where xlogy"),
    "tinyopt.engine.ops.elementwise:abs": "absolute",
    "tinyopt.engine.ops.elementwise:sign": "sgn",
    "tinyopt.engine.ops.indexing": "getitem masked_fill setitem",
    "tinyopt.engine.ops.linalg": (
        "addbmm addmm addmv addr baddbmm bmm dot einsum ger linear matmul mm mv outer"),
    "tinyopt.engine.ops.loss": (
        "binary_cross_entropy_with_logits cross_entropy l1_loss mse_loss nll_loss one_hot"),
    "tinyopt.engine.ops.matrix_inverse": "inverse",
    "tinyopt.engine.ops.movement": (
        "as_strided atleast_1d atleast_2d broadcast_shapes broadcast_tensors broadcast_to cat "
        "chunk column_stack contiguous diag diagonal expand flatten flip fliplr flipud hstack "
        "meshgrid moveaxis movedim narrow permute repeat repeat_interleave reshape roll select "
        "split squeeze stack swapaxes swapdims t tensor_split tile trace transpose tril triu "
        "unbind unflatten unfold unsqueeze view vstack"),
    "tinyopt.engine.ops.movement:cat": "concat concatenate",
    "tinyopt.engine.ops.nn": "batch_norm dropout embedding layer_norm",
    "tinyopt.engine.ops.quantiles": "quantile",
    "tinyopt.engine.ops.reduce": (
        "all amax amin any argmax argmin count_nonzero cumprod cumsum log_softmax logcumsumexp "
        "logsumexp max mean min norm prod softmax std sum var"),
    "tinyopt.engine.ops.selection": (
        "argsort argwhere bincount bucketize gather index_add index_copy index_fill index_select "
        "kthvalue masked_select median msort nanmedian nonzero scatter scatter_add searchsorted "
        "sort take take_along_dim topk unique unique_consecutive"),
    "tinyopt.engine.ops.statistics": "corrcoef cov cumulative_trapezoid nanmean nansum trapezoid",
    "tinyopt.engine.ops.vector_products": "cdist cross inner isin std_mean var_mean",
    "tinyopt.engine.ops.windows": (
        "bartlett_window blackman_window hamming_window hann_window kaiser_window"),
    "tinyopt.engine.tensor": "as_tensor from_dlpack from_numpy tensor",
})

__all__ = [  # the functions of the tensor API, re-exported as tinyopt.<name>
    "abs", "absolute", "acos", "add", "addbmm", "addcdiv", "addcmul", "addmm", "addmv", "addr",
    "all", "allclose", "amax", "amin", "any", "arange", "arccos", "arcsin", "arctan", "arctan2",
    "argmax", "argmin", "argsort", "argwhere", "as_strided", "as_tensor", "asin", "atan", "atan2",
    "atleast_1d", "atleast_2d", "baddbmm", "bartlett_window", "bernoulli", "bincount",
    "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "blackman_window", "block_diag",
    "bmm", "broadcast_shapes", "broadcast_tensors", "broadcast_to", "bucketize", "cartesian_prod",
    "cat", "cdist", "ceil", "chunk", "clamp", "clamp_max", "clamp_min", "clip", "clone",
    "column_stack", "combinations", "concat", "concatenate", "corrcoef", "cos", "cosh",
    "count_nonzero", "cov", "cross", "cumprod", "cumsum", "cumulative_trapezoid", "diag",
    "diagonal", "diff", "div", "divide", "dot", "einsum", "empty", "empty_like", "eq", "equal",
    "erf", "exp", "expm1", "eye", "fix", "flatten", "flip", "fliplr", "flipud", "floor",
    "floor_divide", "fmod", "frac", "from_dlpack", "from_numpy", "full", "full_like", "gather",
    "ge", "ger", "greater", "greater_equal", "gt", "hamming_window", "hann_window", "histc",
    "histogram", "hstack", "hypot", "index_add", "index_copy", "index_fill", "index_select",
    "inner", "inverse", "isclose", "isfinite", "isin", "isinf", "isnan", "isneginf", "isposinf",
    "kaiser_window", "kthvalue", "le", "lerp", "less", "less_equal", "linspace", "log", "log10",
    "log1p", "log2", "log_softmax", "logaddexp", "logaddexp2", "logcumsumexp", "logical_and",
    "logical_not", "logical_or", "logical_xor", "logspace", "logsumexp", "lt", "masked_fill",
    "masked_select", "matmul", "max", "maximum", "mean", "median", "meshgrid", "min", "minimum",
    "mm", "moveaxis", "movedim", "msort", "mul", "multinomial", "multiply", "mv", "nan_to_num",
    "nanmean", "nanmedian", "nansum", "narrow", "ne", "neg", "negative", "nonzero", "norm",
    "normal", "not_equal", "ones", "ones_like", "outer", "permute", "positive", "pow", "prod",
    "quantile", "rand", "rand_like", "randint", "randint_like", "randn", "randn_like", "randperm",
    "reciprocal", "relu", "remainder", "repeat_interleave", "reshape", "roll", "round", "rsqrt",
    "scalar_tensor", "scatter", "scatter_add", "searchsorted", "select", "sgn", "sigmoid", "sign",
    "sin", "sinh", "softmax", "sort", "split", "sqrt", "square", "squeeze", "stack", "std",
    "std_mean", "sub", "subtract", "sum", "swapaxes", "swapdims", "t", "take", "take_along_dim",
    "tan", "tanh", "tensor", "tensor_split", "tile", "topk", "trace", "transpose", "trapezoid",
    "tril", "triu", "true_divide", "trunc", "unbind", "unflatten", "unique", "unique_consecutive",
    "unsqueeze", "var", "var_mean", "vstack", "where", "xlogy", "zeros", "zeros_like",
]
# ---- end of what tools/gen_ops.py writes ----

__getattr__, __dir__ = _exports(__name__, globals(), _WHERE)


def load_all() -> None:
    """Import every op family (every submodule: each registers its ops)."""
    import pkgutil
    for info in pkgutil.iter_modules(__path__):
        _importlib.import_module(f"{__name__}.{info.name}")
