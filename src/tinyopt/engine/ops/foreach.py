"""``torch._foreach_*``: an op over lists of tensors, element by element of the lists (what
optimizer code written for PyTorch's "foreach" path calls, e.g. timm's Lion and Adan).

``_foreach_add(xs, other, alpha=1)`` is ``tuple(x.add(o, alpha=alpha) for x, o in zip(xs, others))``
where ``other`` is a number, a tensor or a list (one per tensor); each in-place variant
(``_foreach_add_``) updates the tensors of ``xs`` in place and returns None, as PyTorch's.
tinyopt's own optimizers step whole flat buffers in one kernel instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tinyopt.engine.tensor import Tensor, as_tensor

# (the op families load on first call: ``import tinyopt`` reads this module's ``__all__``)

__all__ = ["_foreach_abs", "_foreach_add", "_foreach_add_", "_foreach_addcdiv",
           "_foreach_addcdiv_", "_foreach_addcmul", "_foreach_addcmul_", "_foreach_div",
           "_foreach_div_", "_foreach_exp", "_foreach_lerp", "_foreach_lerp_",
           "_foreach_maximum", "_foreach_maximum_", "_foreach_minimum", "_foreach_mul",
           "_foreach_mul_", "_foreach_neg", "_foreach_neg_", "_foreach_norm",
           "_foreach_reciprocal", "_foreach_reciprocal_", "_foreach_sign", "_foreach_sqrt",
           "_foreach_sqrt_", "_foreach_sub", "_foreach_sub_", "_foreach_zero_"]


def _each(other: Any, n: int) -> list[Any]:
    """``other`` for each of ``n`` tensors: the list's items, or the same number or tensor."""
    if isinstance(other, (list, tuple)):
        if len(other) != n:
            raise RuntimeError(f"Tensor lists must have the same number of tensors, got {n} and "
                               f"{len(other)}")
        return list(other)
    return [other] * n


def _map(fn: Callable[..., Tensor], xs: Sequence[Tensor], *others: Any) -> tuple[Tensor, ...]:
    columns = [_each(o, len(xs)) for o in others]
    return tuple(fn(as_tensor(x), *(c[i] for c in columns)) for i, x in enumerate(xs))


def _update(xs: Sequence[Tensor], values: tuple[Tensor, ...]) -> None:
    for x, v in zip(xs, values):
        x.copy_(v)


def _foreach_add(self: Sequence[Tensor], other: Any, *, alpha: Any = 1) -> tuple[Tensor, ...]:
    return _map(lambda x, o: x.add(o, alpha=alpha), self, other)


def _foreach_add_(self: Sequence[Tensor], other: Any, *, alpha: Any = 1) -> None:
    _update(self, _foreach_add(self, other, alpha=alpha))


def _foreach_sub(self: Sequence[Tensor], other: Any, *, alpha: Any = 1) -> tuple[Tensor, ...]:
    return _map(lambda x, o: x.sub(o, alpha=alpha), self, other)


def _foreach_sub_(self: Sequence[Tensor], other: Any, *, alpha: Any = 1) -> None:
    _update(self, _foreach_sub(self, other, alpha=alpha))


def _foreach_mul(self: Sequence[Tensor], other: Any) -> tuple[Tensor, ...]:
    return _map(lambda x, o: x * o, self, other)


def _foreach_mul_(self: Sequence[Tensor], other: Any) -> None:
    _update(self, _foreach_mul(self, other))


def _foreach_div(self: Sequence[Tensor], other: Any) -> tuple[Tensor, ...]:
    return _map(lambda x, o: x / o, self, other)


def _foreach_div_(self: Sequence[Tensor], other: Any) -> None:
    _update(self, _foreach_div(self, other))


def _foreach_addcmul(self: Sequence[Tensor], tensor1: Any, tensor2: Any,
                     value: Any = 1) -> tuple[Tensor, ...]:
    return _map(lambda x, a, b, v: x.addcmul(a, b, value=v), self, tensor1, tensor2, value)


def _foreach_addcmul_(self: Sequence[Tensor], tensor1: Any, tensor2: Any,
                      value: Any = 1) -> None:
    _update(self, _foreach_addcmul(self, tensor1, tensor2, value))


def _foreach_addcdiv(self: Sequence[Tensor], tensor1: Any, tensor2: Any,
                     value: Any = 1) -> tuple[Tensor, ...]:
    return _map(lambda x, a, b, v: x.addcdiv(a, b, value=v), self, tensor1, tensor2, value)


def _foreach_addcdiv_(self: Sequence[Tensor], tensor1: Any, tensor2: Any,
                      value: Any = 1) -> None:
    _update(self, _foreach_addcdiv(self, tensor1, tensor2, value))


def _foreach_lerp(self: Sequence[Tensor], tensors1: Any, weight: Any) -> tuple[Tensor, ...]:
    return _map(lambda x, e, w: x.lerp(e, w), self, tensors1, weight)


def _foreach_lerp_(self: Sequence[Tensor], tensors1: Any, weight: Any) -> None:
    _update(self, _foreach_lerp(self, tensors1, weight))


def _foreach_maximum(self: Sequence[Tensor], other: Any) -> tuple[Tensor, ...]:
    from tinyopt.engine.ops.elementwise import maximum
    return _map(maximum, self, other)


def _foreach_maximum_(self: Sequence[Tensor], other: Any) -> None:
    _update(self, _foreach_maximum(self, other))


def _foreach_minimum(self: Sequence[Tensor], other: Any) -> tuple[Tensor, ...]:
    from tinyopt.engine.ops.elementwise import minimum
    return _map(minimum, self, other)


def _foreach_sqrt(self: Sequence[Tensor]) -> tuple[Tensor, ...]:
    return _map(lambda x: x.sqrt(), self)


def _foreach_sqrt_(self: Sequence[Tensor]) -> None:
    _update(self, _foreach_sqrt(self))


def _foreach_neg(self: Sequence[Tensor]) -> tuple[Tensor, ...]:
    return _map(lambda x: -x, self)


def _foreach_neg_(self: Sequence[Tensor]) -> None:
    _update(self, _foreach_neg(self))


def _foreach_reciprocal(self: Sequence[Tensor]) -> tuple[Tensor, ...]:
    return _map(lambda x: x.reciprocal(), self)


def _foreach_reciprocal_(self: Sequence[Tensor]) -> None:
    _update(self, _foreach_reciprocal(self))


def _foreach_abs(self: Sequence[Tensor]) -> tuple[Tensor, ...]:
    return _map(lambda x: x.abs(), self)


def _foreach_exp(self: Sequence[Tensor]) -> tuple[Tensor, ...]:
    return _map(lambda x: x.exp(), self)


def _foreach_sign(self: Sequence[Tensor]) -> tuple[Tensor, ...]:
    return _map(lambda x: x.sign(), self)


def _foreach_zero_(self: Sequence[Tensor]) -> None:
    for x in self:
        x.zero_()


def _foreach_norm(self: Sequence[Tensor], ord: float = 2, dtype: Any = None) -> tuple[Tensor, ...]:
    """The ``ord``-norm of each tensor (over all its elements)."""
    from tinyopt.engine.ops.distance import vector_norm
    return _map(lambda x: vector_norm(x, ord, dtype=dtype), self)
