"""The ops: each submodule defines a family, forward kernel next to backward rule.

Importing this package registers them all.  ``Tensor``'s methods (``tinyopt.engine.tensor_api``)
and the ``tinyopt.*`` functions are these functions.
"""

from __future__ import annotations

from tinyopt.engine.ops import creation, elementwise, indexing, linalg, loss, movement, reduce
from tinyopt.engine.ops import conv, nn  # noqa: F401  (conv2d/pooling; dropout/norms/embedding)
from tinyopt.engine.ops import attention, conv1d, embedding_bag, rnn  # noqa: F401  (sequences)
from tinyopt.engine.ops import (activation, conv_transpose, distance, group_norm,  # noqa: F401
                               pointwise_loss, resample)
from tinyopt.engine.ops.conv import avg_pool2d, conv2d, max_pool2d
from tinyopt.engine.ops.creation import (arange, bernoulli, empty, empty_like, eye, fill_random,
                                         full, full_like, linspace, logspace, multinomial,
                                         normal, ones, ones_like, rand, rand_like, randint,
                                         randint_like, randn, randn_like, randperm, zeros,
                                         zeros_like)
from tinyopt.engine.ops.elementwise import (abs, acos, add, addcdiv, addcmul, allclose, arccos,
                                            arcsin, arctan, asin, atan, bitwise_and,
                                            bitwise_not, bitwise_or, bitwise_xor, ceil, clamp,
                                            clamp_max, clamp_min, clip, clone, cos, cosh, div,
                                            divide, eq, equal, erf, exp, expm1, fix, floor,
                                            floor_divide, fmod, ge, gelu, greater,
                                            greater_equal, gt, hypot, isclose, isfinite, isinf,
                                            isnan, isneginf, isposinf, le, leaky_relu, lerp,
                                            less, less_equal, log, log1p, log2, log10,
                                            logaddexp, logical_and, logical_not, logical_or,
                                            logical_xor, lt, maximum, minimum, mul, multiply,
                                            nan_to_num, ne, neg, negative, not_equal, positive,
                                            pow, reciprocal, relu, remainder, round, rsqrt,
                                            sigmoid, sign, silu, sin, sinh, softplus, sqrt,
                                            square, sub, subtract, tan, tanh, to, true_divide,
                                            trunc, where, xlogy)
from tinyopt.engine.ops.indexing import getitem, masked_fill, setitem
from tinyopt.engine.ops.linalg import linear, matmul
from tinyopt.engine.ops.loss import (binary_cross_entropy_with_logits, cross_entropy, l1_loss,
                                     mse_loss, nll_loss, one_hot)
from tinyopt.engine.ops.movement import (cat, contiguous, expand, flatten, permute, reshape,
                                         squeeze, stack, t, transpose, unsqueeze, view)
from tinyopt.engine.ops.nn import batch_norm, dropout, embedding, layer_norm
from tinyopt.engine.ops.distance import vector_norm
from tinyopt.engine.ops.reduce import (all, any, argmax, argmin, log_softmax, logsumexp, max,
                                       mean, min, norm, softmax, std, sum, var)
from tinyopt.engine.tensor import as_tensor, from_numpy, tensor
