"""The ops, and the Tensor methods and operators that record them.

Each submodule defines a family of ops, forward kernel next to backward rule.  Importing this
package registers them all and gives ``Tensor`` its PyTorch-style methods.
"""

from __future__ import annotations

from tinyopt.engine.ops import creation, elementwise, linalg, loss, movement, reduce
from tinyopt.engine.ops import conv, nn  # noqa: F401  (conv2d/pooling; dropout/norms/embedding)
from tinyopt.engine.ops import attention, conv1d, embedding_bag, rnn  # noqa: F401  (sequences)
from tinyopt.engine.ops.creation import arange, full, ones, rand, randn, zeros
from tinyopt.engine.ops.elementwise import (abs, add, clamp, div, eq, exp, ge, gelu, gt, le,
                                            leaky_relu, log, lt, maximum, minimum, mul, ne, neg,
                                            pow, relu, sigmoid, silu, softplus, sqrt, square, sub,
                                            tanh, to, where)
from tinyopt.engine.ops.conv import avg_pool2d, conv2d, max_pool2d
from tinyopt.engine.ops.linalg import linear, matmul
from tinyopt.engine.ops.nn import batch_norm, dropout, embedding, layer_norm
from tinyopt.engine.ops.loss import (binary_cross_entropy_with_logits, cross_entropy, l1_loss,
                                     mse_loss, nll_loss, one_hot)
from tinyopt.engine.ops.movement import (cat, contiguous, expand, flatten, getitem, permute,
                                         reshape, squeeze, stack, t, transpose, unsqueeze)
from tinyopt.engine.ops.reduce import (argmax, argmin, log_softmax, logsumexp, max, mean, min,
                                       softmax, std, sum, var)
from tinyopt.engine.tensor import Tensor

_T = Tensor


def _bind() -> None:
    rev = lambda f: (lambda self, other: f(other, self))  # noqa: E731
    methods = {
        "__add__": add, "__radd__": rev(add), "__sub__": sub, "__rsub__": rev(sub),
        "__mul__": mul, "__rmul__": rev(mul), "__truediv__": div, "__rtruediv__": rev(div),
        "__pow__": pow, "__rpow__": rev(pow), "__matmul__": matmul, "__rmatmul__": rev(matmul),
        "__neg__": neg, "__abs__": abs, "__getitem__": getitem,
        "__eq__": eq, "__ne__": ne, "__lt__": lt, "__le__": le, "__gt__": gt, "__ge__": ge,
        "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow, "matmul": matmul,
        "neg": neg, "abs": abs, "exp": exp, "log": log, "sqrt": sqrt, "square": square,
        "relu": relu, "sigmoid": sigmoid, "tanh": tanh, "clamp": clamp, "clip": clamp,
        "maximum": maximum, "minimum": minimum, "eq": eq, "ne": ne, "lt": lt, "le": le,
        "gt": gt, "ge": ge,
        "sum": sum, "mean": mean, "var": var, "std": std, "max": max, "min": min,
        "argmax": argmax, "argmin": argmin, "logsumexp": logsumexp, "softmax": softmax,
        "log_softmax": log_softmax,
        "reshape": reshape, "view": reshape, "flatten": flatten, "permute": permute,
        "transpose": transpose, "t": t, "expand": expand, "squeeze": squeeze,
        "unsqueeze": unsqueeze,
        "contiguous": contiguous, "to": to,
        "float": lambda self: to(self, "float32"), "double": lambda self: to(self, "float64"),
        "long": lambda self: to(self, "int64"),
        "expand_as": lambda self, other: expand(self, other.shape),
        "view_as": lambda self, other: reshape(self, other.shape),
        "type_as": lambda self, other: to(self, other.dtype),
    }
    for name, fn in methods.items():
        setattr(Tensor, name, fn)
    Tensor.T = property(lambda self: permute(self, tuple(reversed(range(self.ndim)))))
    Tensor.mT = property(lambda self: transpose(self, -2, -1))
    Tensor.__hash__ = lambda self: id(self)


_bind()
