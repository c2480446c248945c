"""The ``Tensor`` methods that are op functions: ``x.exp()`` is ``ops.exp(x)`` and
``x.exp_()`` writes it into ``x`` (PyTorch's in-place rules, ``engine/inplace.py``).

Written by ``tools/gen_ops.py`` from ``engine/ops/api_table.py``, with each function's own
signature (``self`` for its first parameter): edit the table or the function, then run
``python tools/gen_ops.py`` (``tests/test_ops_api_table.py`` checks that this file is current).
Methods that are not just their function are written by hand in ``engine/tensor_api.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinyopt.engine import ops

if TYPE_CHECKING:
    from collections.abc import Callable

    from typing_extensions import Self

    from tinyopt.engine.ops.histograms import HistogramResult
    from tinyopt.engine.ops.reduce import MaxMin
    from tinyopt.engine.tensor import Tensor


class OpMethods:
    """The op methods of ``Tensor`` (a base class of ``tensor_api.TensorMethods``)."""

    __slots__ = ()

    if TYPE_CHECKING:
        def _unary_inplace(self, fn: Callable[..., Tensor], *args: Any,
                           **kwargs: Any) -> Self: ...

    # ---- ops.differences ------------------------------------------------------------------------
    def diff(self, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
        """See ``tinyopt.diff``."""
        return ops.diff(self, n, dim, prepend, append)

    # ---- ops.histograms -------------------------------------------------------------------------
    def histc(self, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:
        """See ``tinyopt.histc``."""
        return ops.histc(self, bins, min, max)

    def histogram(self, bins: Any = 100, *, range: tuple[float, float] | None = None,
                  weight: Any = None, density: bool = False) -> HistogramResult:
        """See ``tinyopt.histogram``."""
        return ops.histogram(self, bins, range=range, weight=weight, density=density)

    # ---- ops.elementwise ------------------------------------------------------------------------
    def abs(self) -> Tensor:
        """See ``tinyopt.abs``."""
        return ops.abs(self)

    def abs_(self) -> Self:
        """``abs``, in place."""
        return self._unary_inplace(ops.abs)

    def absolute(self) -> Tensor:
        """See ``tinyopt.absolute``."""
        return ops.absolute(self)

    def absolute_(self) -> Self:
        """``absolute``, in place."""
        return self._unary_inplace(ops.absolute)

    def acos(self) -> Tensor:
        """See ``tinyopt.acos``."""
        return ops.acos(self)

    def acos_(self) -> Self:
        """``acos``, in place."""
        return self._unary_inplace(ops.acos)

    def addcdiv(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        """See ``tinyopt.addcdiv``."""
        return ops.addcdiv(self, tensor1, tensor2, value=value)

    def addcdiv_(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Self:
        """``addcdiv``, in place."""
        return self._unary_inplace(ops.addcdiv, tensor1, tensor2, value=value)

    def addcmul(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        """See ``tinyopt.addcmul``."""
        return ops.addcmul(self, tensor1, tensor2, value=value)

    def addcmul_(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Self:
        """``addcmul``, in place."""
        return self._unary_inplace(ops.addcmul, tensor1, tensor2, value=value)

    def allclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
                 equal_nan: bool = False) -> bool:
        """See ``tinyopt.allclose``."""
        return ops.allclose(self, other, rtol, atol, equal_nan)

    def arccos(self) -> Tensor:
        """See ``tinyopt.arccos``."""
        return ops.arccos(self)

    def arccos_(self) -> Self:
        """``arccos``, in place."""
        return self._unary_inplace(ops.arccos)

    def arcsin(self) -> Tensor:
        """See ``tinyopt.arcsin``."""
        return ops.arcsin(self)

    def arcsin_(self) -> Self:
        """``arcsin``, in place."""
        return self._unary_inplace(ops.arcsin)

    def arctan(self) -> Tensor:
        """See ``tinyopt.arctan``."""
        return ops.arctan(self)

    def arctan_(self) -> Self:
        """``arctan``, in place."""
        return self._unary_inplace(ops.arctan)

    def arctan2(self, other: Any) -> Tensor:
        """See ``tinyopt.arctan2``."""
        return ops.arctan2(self, other)

    def arctan2_(self, other: Any) -> Self:
        """``arctan2``, in place."""
        return self._unary_inplace(ops.arctan2, other)

    def asin(self) -> Tensor:
        """See ``tinyopt.asin``."""
        return ops.asin(self)

    def asin_(self) -> Self:
        """``asin``, in place."""
        return self._unary_inplace(ops.asin)

    def atan(self) -> Tensor:
        """See ``tinyopt.atan``."""
        return ops.atan(self)

    def atan_(self) -> Self:
        """``atan``, in place."""
        return self._unary_inplace(ops.atan)

    def atan2(self, other: Any) -> Tensor:
        """See ``tinyopt.atan2``."""
        return ops.atan2(self, other)

    def atan2_(self, other: Any) -> Self:
        """``atan2``, in place."""
        return self._unary_inplace(ops.atan2, other)

    def bitwise_and(self, other: Any) -> Tensor:
        """See ``tinyopt.bitwise_and``."""
        return ops.bitwise_and(self, other)

    def bitwise_not(self) -> Tensor:
        """See ``tinyopt.bitwise_not``."""
        return ops.bitwise_not(self)

    def bitwise_or(self, other: Any) -> Tensor:
        """See ``tinyopt.bitwise_or``."""
        return ops.bitwise_or(self, other)

    def bitwise_xor(self, other: Any) -> Tensor:
        """See ``tinyopt.bitwise_xor``."""
        return ops.bitwise_xor(self, other)

    def ceil(self) -> Tensor:
        """See ``tinyopt.ceil``."""
        return ops.ceil(self)

    def ceil_(self) -> Self:
        """``ceil``, in place."""
        return self._unary_inplace(ops.ceil)

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:
        """See ``tinyopt.clamp``."""
        return ops.clamp(self, min, max)

    def clamp_(self, min: Any = None, max: Any = None) -> Self:
        """``clamp``, in place."""
        return self._unary_inplace(ops.clamp, min, max)

    def clamp_max(self, max: Any) -> Tensor:
        """See ``tinyopt.clamp_max``."""
        return ops.clamp_max(self, max)

    def clamp_max_(self, max: Any) -> Self:
        """``clamp_max``, in place."""
        return self._unary_inplace(ops.clamp_max, max)

    def clamp_min(self, min: Any) -> Tensor:
        """See ``tinyopt.clamp_min``."""
        return ops.clamp_min(self, min)

    def clamp_min_(self, min: Any) -> Self:
        """``clamp_min``, in place."""
        return self._unary_inplace(ops.clamp_min, min)

    def clip(self, min: Any = None, max: Any = None) -> Tensor:
        """See ``tinyopt.clip``."""
        return ops.clip(self, min, max)

    def clip_(self, min: Any = None, max: Any = None) -> Self:
        """``clip``, in place."""
        return self._unary_inplace(ops.clip, min, max)

    def cos(self) -> Tensor:
        """See ``tinyopt.cos``."""
        return ops.cos(self)

    def cos_(self) -> Self:
        """``cos``, in place."""
        return self._unary_inplace(ops.cos)

    def cosh(self) -> Tensor:
        """See ``tinyopt.cosh``."""
        return ops.cosh(self)

    def cosh_(self) -> Self:
        """``cosh``, in place."""
        return self._unary_inplace(ops.cosh)

    def div(self, other: Any, *, rounding_mode: str | None = None) -> Tensor:
        """See ``tinyopt.div``."""
        return ops.div(self, other, rounding_mode=rounding_mode)

    def div_(self, other: Any, *, rounding_mode: str | None = None) -> Self:
        """``div``, in place."""
        return self._unary_inplace(ops.div, other, rounding_mode=rounding_mode)

    def divide(self, other: Any, *, rounding_mode: str | None = None) -> Tensor:
        """See ``tinyopt.divide``."""
        return ops.divide(self, other, rounding_mode=rounding_mode)

    def divide_(self, other: Any, *, rounding_mode: str | None = None) -> Self:
        """``divide``, in place."""
        return self._unary_inplace(ops.divide, other, rounding_mode=rounding_mode)

    def eq(self, other: Any) -> Tensor:
        """See ``tinyopt.eq``."""
        return ops.eq(self, other)

    def equal(self, other: Any) -> bool:
        """See ``tinyopt.equal``."""
        return ops.equal(self, other)

    def erf(self) -> Tensor:
        """See ``tinyopt.erf``."""
        return ops.erf(self)

    def erf_(self) -> Self:
        """``erf``, in place."""
        return self._unary_inplace(ops.erf)

    def exp(self) -> Tensor:
        """See ``tinyopt.exp``."""
        return ops.exp(self)

    def exp_(self) -> Self:
        """``exp``, in place."""
        return self._unary_inplace(ops.exp)

    def expm1(self) -> Tensor:
        """See ``tinyopt.expm1``."""
        return ops.expm1(self)

    def expm1_(self) -> Self:
        """``expm1``, in place."""
        return self._unary_inplace(ops.expm1)

    def fix(self) -> Tensor:
        """See ``tinyopt.fix``."""
        return ops.fix(self)

    def fix_(self) -> Self:
        """``fix``, in place."""
        return self._unary_inplace(ops.fix)

    def floor(self) -> Tensor:
        """See ``tinyopt.floor``."""
        return ops.floor(self)

    def floor_(self) -> Self:
        """``floor``, in place."""
        return self._unary_inplace(ops.floor)

    def floor_divide(self, other: Any) -> Tensor:
        """See ``tinyopt.floor_divide``."""
        return ops.floor_divide(self, other)

    def floor_divide_(self, other: Any) -> Self:
        """``floor_divide``, in place."""
        return self._unary_inplace(ops.floor_divide, other)

    def fmod(self, other: Any) -> Tensor:
        """See ``tinyopt.fmod``."""
        return ops.fmod(self, other)

    def fmod_(self, other: Any) -> Self:
        """``fmod``, in place."""
        return self._unary_inplace(ops.fmod, other)

    def frac(self) -> Tensor:
        """See ``tinyopt.frac``."""
        return ops.frac(self)

    def frac_(self) -> Self:
        """``frac``, in place."""
        return self._unary_inplace(ops.frac)

    def ge(self, other: Any) -> Tensor:
        """See ``tinyopt.ge``."""
        return ops.ge(self, other)

    def greater(self, other: Any) -> Tensor:
        """See ``tinyopt.greater``."""
        return ops.greater(self, other)

    def greater_equal(self, other: Any) -> Tensor:
        """See ``tinyopt.greater_equal``."""
        return ops.greater_equal(self, other)

    def gt(self, other: Any) -> Tensor:
        """See ``tinyopt.gt``."""
        return ops.gt(self, other)

    def isclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
                equal_nan: bool = False) -> Tensor:
        """See ``tinyopt.isclose``."""
        return ops.isclose(self, other, rtol, atol, equal_nan)

    def isfinite(self) -> Tensor:
        """See ``tinyopt.isfinite``."""
        return ops.isfinite(self)

    def isinf(self) -> Tensor:
        """See ``tinyopt.isinf``."""
        return ops.isinf(self)

    def isnan(self) -> Tensor:
        """See ``tinyopt.isnan``."""
        return ops.isnan(self)

    def isneginf(self) -> Tensor:
        """See ``tinyopt.isneginf``."""
        return ops.isneginf(self)

    def isposinf(self) -> Tensor:
        """See ``tinyopt.isposinf``."""
        return ops.isposinf(self)

    def le(self, other: Any) -> Tensor:
        """See ``tinyopt.le``."""
        return ops.le(self, other)

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """See ``tinyopt.lerp``."""
        return ops.lerp(self, end, weight)

    def lerp_(self, end: Any, weight: Any) -> Self:
        """``lerp``, in place."""
        return self._unary_inplace(ops.lerp, end, weight)

    def less(self, other: Any) -> Tensor:
        """See ``tinyopt.less``."""
        return ops.less(self, other)

    def less_equal(self, other: Any) -> Tensor:
        """See ``tinyopt.less_equal``."""
        return ops.less_equal(self, other)

    def log(self) -> Tensor:
        """See ``tinyopt.log``."""
        return ops.log(self)

    def log_(self) -> Self:
        """``log``, in place."""
        return self._unary_inplace(ops.log)

    def log1p(self) -> Tensor:
        """See ``tinyopt.log1p``."""
        return ops.log1p(self)

    def log1p_(self) -> Self:
        """``log1p``, in place."""
        return self._unary_inplace(ops.log1p)

    def log2(self) -> Tensor:
        """See ``tinyopt.log2``."""
        return ops.log2(self)

    def log2_(self) -> Self:
        """``log2``, in place."""
        return self._unary_inplace(ops.log2)

    def log10(self) -> Tensor:
        """See ``tinyopt.log10``."""
        return ops.log10(self)

    def log10_(self) -> Self:
        """``log10``, in place."""
        return self._unary_inplace(ops.log10)

    def logaddexp(self, other: Any) -> Tensor:
        """See ``tinyopt.logaddexp``."""
        return ops.logaddexp(self, other)

    def logaddexp2(self, other: Any) -> Tensor:
        """See ``tinyopt.logaddexp2``."""
        return ops.logaddexp2(self, other)

    def logical_and(self, other: Any) -> Tensor:
        """See ``tinyopt.logical_and``."""
        return ops.logical_and(self, other)

    def logical_not(self) -> Tensor:
        """See ``tinyopt.logical_not``."""
        return ops.logical_not(self)

    def logical_not_(self) -> Self:
        """``logical_not``, in place."""
        return self._unary_inplace(ops.logical_not)

    def logical_or(self, other: Any) -> Tensor:
        """See ``tinyopt.logical_or``."""
        return ops.logical_or(self, other)

    def logical_xor(self, other: Any) -> Tensor:
        """See ``tinyopt.logical_xor``."""
        return ops.logical_xor(self, other)

    def lt(self, other: Any) -> Tensor:
        """See ``tinyopt.lt``."""
        return ops.lt(self, other)

    def maximum(self, other: Any) -> Tensor:
        """See ``tinyopt.maximum``."""
        return ops.maximum(self, other)

    def maximum_(self, other: Any) -> Self:
        """``maximum``, in place."""
        return self._unary_inplace(ops.maximum, other)

    def minimum(self, other: Any) -> Tensor:
        """See ``tinyopt.minimum``."""
        return ops.minimum(self, other)

    def minimum_(self, other: Any) -> Self:
        """``minimum``, in place."""
        return self._unary_inplace(ops.minimum, other)

    def mul(self, other: Any) -> Tensor:
        """See ``tinyopt.mul``."""
        return ops.mul(self, other)

    def mul_(self, other: Any) -> Self:
        """``mul``, in place."""
        return self._unary_inplace(ops.mul, other)

    def multiply(self, other: Any) -> Tensor:
        """See ``tinyopt.multiply``."""
        return ops.multiply(self, other)

    def multiply_(self, other: Any) -> Self:
        """``multiply``, in place."""
        return self._unary_inplace(ops.multiply, other)

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None,
                   neginf: float | None = None) -> Tensor:
        """See ``tinyopt.nan_to_num``."""
        return ops.nan_to_num(self, nan, posinf, neginf)

    def nan_to_num_(self, nan: float = 0.0, posinf: float | None = None,
                    neginf: float | None = None) -> Self:
        """``nan_to_num``, in place."""
        return self._unary_inplace(ops.nan_to_num, nan, posinf, neginf)

    def ne(self, other: Any) -> Tensor:
        """See ``tinyopt.ne``."""
        return ops.ne(self, other)

    def neg(self) -> Tensor:
        """See ``tinyopt.neg``."""
        return ops.neg(self)

    def neg_(self) -> Self:
        """``neg``, in place."""
        return self._unary_inplace(ops.neg)

    def negative(self) -> Tensor:
        """See ``tinyopt.negative``."""
        return ops.negative(self)

    def negative_(self) -> Self:
        """``negative``, in place."""
        return self._unary_inplace(ops.negative)

    def not_equal(self, other: Any) -> Tensor:
        """See ``tinyopt.not_equal``."""
        return ops.not_equal(self, other)

    def pow(self, exponent: Any) -> Tensor:
        """See ``tinyopt.pow``."""
        return ops.pow(self, exponent)

    def pow_(self, exponent: Any) -> Self:
        """``pow``, in place."""
        return self._unary_inplace(ops.pow, exponent)

    def reciprocal(self) -> Tensor:
        """See ``tinyopt.reciprocal``."""
        return ops.reciprocal(self)

    def reciprocal_(self) -> Self:
        """``reciprocal``, in place."""
        return self._unary_inplace(ops.reciprocal)

    def relu(self) -> Tensor:
        """See ``tinyopt.relu``."""
        return ops.relu(self)

    def relu_(self) -> Self:
        """``relu``, in place."""
        return self._unary_inplace(ops.relu)

    def remainder(self, other: Any) -> Tensor:
        """See ``tinyopt.remainder``."""
        return ops.remainder(self, other)

    def remainder_(self, other: Any) -> Self:
        """``remainder``, in place."""
        return self._unary_inplace(ops.remainder, other)

    def round(self, *, decimals: int = 0) -> Tensor:
        """See ``tinyopt.round``."""
        return ops.round(self, decimals=decimals)

    def round_(self, *, decimals: int = 0) -> Self:
        """``round``, in place."""
        return self._unary_inplace(ops.round, decimals=decimals)

    def rsqrt(self) -> Tensor:
        """See ``tinyopt.rsqrt``."""
        return ops.rsqrt(self)

    def rsqrt_(self) -> Self:
        """``rsqrt``, in place."""
        return self._unary_inplace(ops.rsqrt)

    def sigmoid(self) -> Tensor:
        """See ``tinyopt.sigmoid``."""
        return ops.sigmoid(self)

    def sigmoid_(self) -> Self:
        """``sigmoid``, in place."""
        return self._unary_inplace(ops.sigmoid)

    def sign(self) -> Tensor:
        """See ``tinyopt.sign``."""
        return ops.sign(self)

    def sign_(self) -> Self:
        """``sign``, in place."""
        return self._unary_inplace(ops.sign)

    def sgn(self) -> Tensor:
        """See ``tinyopt.sgn``."""
        return ops.sgn(self)

    def sin(self) -> Tensor:
        """See ``tinyopt.sin``."""
        return ops.sin(self)

    def sin_(self) -> Self:
        """``sin``, in place."""
        return self._unary_inplace(ops.sin)

    def sinh(self) -> Tensor:
        """See ``tinyopt.sinh``."""
        return ops.sinh(self)

    def sinh_(self) -> Self:
        """``sinh``, in place."""
        return self._unary_inplace(ops.sinh)

    def sqrt(self) -> Tensor:
        """See ``tinyopt.sqrt``."""
        return ops.sqrt(self)

    def sqrt_(self) -> Self:
        """``sqrt``, in place."""
        return self._unary_inplace(ops.sqrt)

    def square(self) -> Tensor:
        """See ``tinyopt.square``."""
        return ops.square(self)

    def square_(self) -> Self:
        """``square``, in place."""
        return self._unary_inplace(ops.square)

    def tan(self) -> Tensor:
        """See ``tinyopt.tan``."""
        return ops.tan(self)

    def tan_(self) -> Self:
        """``tan``, in place."""
        return self._unary_inplace(ops.tan)

    def tanh(self) -> Tensor:
        """See ``tinyopt.tanh``."""
        return ops.tanh(self)

    def tanh_(self) -> Self:
        """``tanh``, in place."""
        return self._unary_inplace(ops.tanh)

    def true_divide(self, other: Any) -> Tensor:
        """See ``tinyopt.true_divide``."""
        return ops.true_divide(self, other)

    def true_divide_(self, other: Any) -> Self:
        """``true_divide``, in place."""
        return self._unary_inplace(ops.true_divide, other)

    def trunc(self) -> Tensor:
        """See ``tinyopt.trunc``."""
        return ops.trunc(self)

    def trunc_(self) -> Self:
        """``trunc``, in place."""
        return self._unary_inplace(ops.trunc)

    def xlogy(self, other: Any) -> Tensor:
        """See ``tinyopt.xlogy``."""
        return ops.xlogy(self, other)

    # ---- ops.indexing ---------------------------------------------------------------------------
    def masked_fill(self, mask: Any, value: Any) -> Tensor:
        """See ``tinyopt.masked_fill``."""
        return ops.masked_fill(self, mask, value)

    def masked_fill_(self, mask: Any, value: Any) -> Self:
        """``masked_fill``, in place."""
        return self._unary_inplace(ops.masked_fill, mask, value)

    # ---- ops.linalg -----------------------------------------------------------------------------
    def addbmm(self, batch1: Any, batch2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """See ``tinyopt.addbmm``."""
        return ops.addbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def addmm(self, mat1: Any, mat2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """See ``tinyopt.addmm``."""
        return ops.addmm(self, mat1, mat2, beta=beta, alpha=alpha)

    def addmv(self, mat: Any, vec: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """See ``tinyopt.addmv``."""
        return ops.addmv(self, mat, vec, beta=beta, alpha=alpha)

    def addr(self, vec1: Any, vec2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """See ``tinyopt.addr``."""
        return ops.addr(self, vec1, vec2, beta=beta, alpha=alpha)

    def baddbmm(self, batch1: Any, batch2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """See ``tinyopt.baddbmm``."""
        return ops.baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def bmm(self, mat2: Any) -> Tensor:
        """See ``tinyopt.bmm``."""
        return ops.bmm(self, mat2)

    def dot(self, tensor: Any) -> Tensor:
        """See ``tinyopt.dot``."""
        return ops.dot(self, tensor)

    def ger(self, vec2: Any) -> Tensor:
        """See ``tinyopt.ger``."""
        return ops.ger(self, vec2)

    def matmul(self, other: Any) -> Tensor:
        """See ``tinyopt.matmul``."""
        return ops.matmul(self, other)

    def mm(self, mat2: Any) -> Tensor:
        """See ``tinyopt.mm``."""
        return ops.mm(self, mat2)

    def mv(self, vec: Any) -> Tensor:
        """See ``tinyopt.mv``."""
        return ops.mv(self, vec)

    def outer(self, vec2: Any) -> Tensor:
        """See ``tinyopt.outer``."""
        return ops.outer(self, vec2)

    # ---- ops.matrix_inverse ---------------------------------------------------------------------
    def inverse(self) -> Tensor:
        """See ``tinyopt.inverse``."""
        return ops.inverse(self)

    # ---- ops.movement ---------------------------------------------------------------------------
    def as_strided(self, size: Any, stride: Any, storage_offset: int | None = None) -> Tensor:
        """See ``tinyopt.as_strided``."""
        return ops.as_strided(self, size, stride, storage_offset)

    def broadcast_to(self, size: Any) -> Tensor:
        """See ``tinyopt.broadcast_to``."""
        return ops.broadcast_to(self, size)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """See ``tinyopt.chunk``."""
        return ops.chunk(self, chunks, dim)

    def diag(self, diagonal: int = 0) -> Tensor:
        """See ``tinyopt.diag``."""
        return ops.diag(self, diagonal)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """See ``tinyopt.diagonal``."""
        return ops.diagonal(self, offset, dim1, dim2)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """See ``tinyopt.flatten``."""
        return ops.flatten(self, start_dim, end_dim)

    def fliplr(self) -> Tensor:
        """See ``tinyopt.fliplr``."""
        return ops.fliplr(self)

    def flipud(self) -> Tensor:
        """See ``tinyopt.flipud``."""
        return ops.flipud(self)

    def moveaxis(self, source: Any, destination: Any) -> Tensor:
        """See ``tinyopt.moveaxis``."""
        return ops.moveaxis(self, source, destination)

    def movedim(self, source: Any, destination: Any) -> Tensor:
        """See ``tinyopt.movedim``."""
        return ops.movedim(self, source, destination)

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """See ``tinyopt.narrow``."""
        return ops.narrow(self, dim, start, length)

    def repeat_interleave(self, repeats: Any, dim: int | None = None, *,
                          output_size: Any = None) -> Tensor:
        """See ``tinyopt.repeat_interleave``."""
        return ops.repeat_interleave(self, repeats, dim, output_size=output_size)

    def roll(self, shifts: Any, dims: Any = None) -> Tensor:
        """See ``tinyopt.roll``."""
        return ops.roll(self, shifts, dims)

    def select(self, dim: int, index: int) -> Tensor:
        """See ``tinyopt.select``."""
        return ops.select(self, dim, index)

    def squeeze(self, dim: int | tuple[int, ...] | None = None) -> Tensor:
        """See ``tinyopt.squeeze``."""
        return ops.squeeze(self, dim)

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        """See ``tinyopt.swapaxes``."""
        return ops.swapaxes(self, axis0, axis1)

    def swapdims(self, dim0: int, dim1: int) -> Tensor:
        """See ``tinyopt.swapdims``."""
        return ops.swapdims(self, dim0, dim1)

    def t(self) -> Tensor:
        """See ``tinyopt.t``."""
        return ops.t(self)

    def tensor_split(self, indices_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
        """See ``tinyopt.tensor_split``."""
        return ops.tensor_split(self, indices_or_sections, dim)

    def trace(self) -> Tensor:
        """See ``tinyopt.trace``."""
        return ops.trace(self)

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """See ``tinyopt.transpose``."""
        return ops.transpose(self, dim0, dim1)

    def tril(self, diagonal: int = 0) -> Tensor:
        """See ``tinyopt.tril``."""
        return ops.tril(self, diagonal)

    def tril_(self, diagonal: int = 0) -> Self:
        """``tril``, in place."""
        return self._unary_inplace(ops.tril, diagonal)

    def triu(self, diagonal: int = 0) -> Tensor:
        """See ``tinyopt.triu``."""
        return ops.triu(self, diagonal)

    def triu_(self, diagonal: int = 0) -> Self:
        """``triu``, in place."""
        return self._unary_inplace(ops.triu, diagonal)

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        """See ``tinyopt.unbind``."""
        return ops.unbind(self, dim)

    def unflatten(self, dim: int, sizes: Any) -> Tensor:
        """See ``tinyopt.unflatten``."""
        return ops.unflatten(self, dim, sizes)

    def unfold(self, dimension: int, size: int, step: int) -> Tensor:
        """See ``tinyopt.engine.ops.unfold``."""
        return ops.unfold(self, dimension, size, step)

    def unsqueeze(self, dim: int) -> Tensor:
        """See ``tinyopt.unsqueeze``."""
        return ops.unsqueeze(self, dim)

    # ---- ops.quantiles --------------------------------------------------------------------------
    def quantile(self, q: Any, dim: int | None = None, keepdim: bool = False, *,
                 interpolation: str = "linear") -> Tensor:
        """See ``tinyopt.quantile``."""
        return ops.quantile(self, q, dim, keepdim, interpolation=interpolation)

    # ---- ops.reduce -----------------------------------------------------------------------------
    def all(self, dim: Any = None, keepdim: bool = False, *,
            keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.all``."""
        return ops.all(self, dim, keepdim, keepdims=keepdims)

    def amax(self, dim: Any = (), keepdim: bool = False, *,
             keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.amax``."""
        return ops.amax(self, dim, keepdim, keepdims=keepdims)

    def amin(self, dim: Any = (), keepdim: bool = False, *,
             keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.amin``."""
        return ops.amin(self, dim, keepdim, keepdims=keepdims)

    def any(self, dim: Any = None, keepdim: bool = False, *,
            keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.any``."""
        return ops.any(self, dim, keepdim, keepdims=keepdims)

    def argmax(self, dim: int | None = None, keepdim: bool = False, *,
               keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.argmax``."""
        return ops.argmax(self, dim, keepdim, keepdims=keepdims)

    def argmin(self, dim: int | None = None, keepdim: bool = False, *,
               keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.argmin``."""
        return ops.argmin(self, dim, keepdim, keepdims=keepdims)

    def count_nonzero(self, dim: Any = None) -> Tensor:
        """See ``tinyopt.count_nonzero``."""
        return ops.count_nonzero(self, dim)

    def cumprod(self, dim: int, *, dtype: Any = None) -> Tensor:
        """See ``tinyopt.cumprod``."""
        return ops.cumprod(self, dim, dtype=dtype)

    def cumprod_(self, dim: int, *, dtype: Any = None) -> Self:
        """``cumprod``, in place."""
        return self._unary_inplace(ops.cumprod, dim, dtype=dtype)

    def cumsum(self, dim: int, *, dtype: Any = None) -> Tensor:
        """See ``tinyopt.cumsum``."""
        return ops.cumsum(self, dim, dtype=dtype)

    def cumsum_(self, dim: int, *, dtype: Any = None) -> Self:
        """``cumsum``, in place."""
        return self._unary_inplace(ops.cumsum, dim, dtype=dtype)

    def log_softmax(self, dim: int, dtype: Any = None) -> Tensor:
        """See ``tinyopt.log_softmax``."""
        return ops.log_softmax(self, dim, dtype)

    def logcumsumexp(self, dim: int) -> Tensor:
        """See ``tinyopt.logcumsumexp``."""
        return ops.logcumsumexp(self, dim)

    def logsumexp(self, dim: Any, keepdim: bool = False, *,
                  keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.logsumexp``."""
        return ops.logsumexp(self, dim, keepdim, keepdims=keepdims)

    def max(self, dim: Any = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Any:
        """See ``tinyopt.max``."""
        return ops.max(self, dim, keepdim, keepdims=keepdims)

    def mean(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None,
             keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.mean``."""
        return ops.mean(self, dim, keepdim, dtype=dtype, keepdims=keepdims)

    def min(self, dim: Any = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Any:
        """See ``tinyopt.min``."""
        return ops.min(self, dim, keepdim, keepdims=keepdims)

    def prod(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None,
             keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.prod``."""
        return ops.prod(self, dim, keepdim, dtype=dtype, keepdims=keepdims)

    def softmax(self, dim: int, dtype: Any = None) -> Tensor:
        """See ``tinyopt.softmax``."""
        return ops.softmax(self, dim, dtype)

    def std(self, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: float | None = None, keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.std``."""
        return ops.std(self, dim, unbiased, keepdim, correction=correction, keepdims=keepdims)

    def sum(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None,
            keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.sum``."""
        return ops.sum(self, dim, keepdim, dtype=dtype, keepdims=keepdims)

    def var(self, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: float | None = None, keepdims: bool | None = None) -> Tensor:
        """See ``tinyopt.var``."""
        return ops.var(self, dim, unbiased, keepdim, correction=correction, keepdims=keepdims)

    # ---- ops.selection --------------------------------------------------------------------------
    def argsort(self, dim: int = -1, descending: bool = False, *, stable: bool = False) -> Tensor:
        """See ``tinyopt.argsort``."""
        return ops.argsort(self, dim, descending, stable=stable)

    def argwhere(self) -> Tensor:
        """See ``tinyopt.argwhere``."""
        return ops.argwhere(self)

    def bincount(self, weights: Any = None, minlength: int = 0) -> Tensor:
        """See ``tinyopt.bincount``."""
        return ops.bincount(self, weights, minlength)

    def gather(self, dim: int, index: Any, *, sparse_grad: bool = False) -> Tensor:
        """See ``tinyopt.gather``."""
        return ops.gather(self, dim, index, sparse_grad=sparse_grad)

    def index_add(self, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Tensor:
        """See ``tinyopt.index_add``."""
        return ops.index_add(self, dim, index, source, alpha=alpha)

    def index_add_(self, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Self:
        """``index_add``, in place."""
        return self._unary_inplace(ops.index_add, dim, index, source, alpha=alpha)

    def index_copy(self, dim: int, index: Any, source: Any) -> Tensor:
        """See ``tinyopt.index_copy``."""
        return ops.index_copy(self, dim, index, source)

    def index_copy_(self, dim: int, index: Any, source: Any) -> Self:
        """``index_copy``, in place."""
        return self._unary_inplace(ops.index_copy, dim, index, source)

    def index_fill(self, dim: int, index: Any, value: Any) -> Tensor:
        """See ``tinyopt.index_fill``."""
        return ops.index_fill(self, dim, index, value)

    def index_fill_(self, dim: int, index: Any, value: Any) -> Self:
        """``index_fill``, in place."""
        return self._unary_inplace(ops.index_fill, dim, index, value)

    def index_select(self, dim: int, index: Any) -> Tensor:
        """See ``tinyopt.index_select``."""
        return ops.index_select(self, dim, index)

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> MaxMin:
        """See ``tinyopt.kthvalue``."""
        return ops.kthvalue(self, k, dim, keepdim)

    def masked_select(self, mask: Any) -> Tensor:
        """See ``tinyopt.masked_select``."""
        return ops.masked_select(self, mask)

    def median(self, dim: int | None = None, keepdim: bool = False, *,
               keepdims: bool | None = None) -> Any:
        """See ``tinyopt.median``."""
        return ops.median(self, dim, keepdim, keepdims=keepdims)

    def msort(self) -> Tensor:
        """See ``tinyopt.msort``."""
        return ops.msort(self)

    def nanmedian(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """See ``tinyopt.nanmedian``."""
        return ops.nanmedian(self, dim, keepdim)

    def nonzero(self, *, as_tuple: bool = False) -> Any:
        """See ``tinyopt.nonzero``."""
        return ops.nonzero(self, as_tuple=as_tuple)

    def scatter(self, dim: int, index: Any, src: Any = None, *, value: Any = None,
                reduce: str | None = None) -> Tensor:
        """See ``tinyopt.scatter``."""
        return ops.scatter(self, dim, index, src, value=value, reduce=reduce)

    def scatter_(self, dim: int, index: Any, src: Any = None, *, value: Any = None,
                 reduce: str | None = None) -> Self:
        """``scatter``, in place."""
        return self._unary_inplace(ops.scatter, dim, index, src, value=value, reduce=reduce)

    def scatter_add(self, dim: int, index: Any, src: Any) -> Tensor:
        """See ``tinyopt.scatter_add``."""
        return ops.scatter_add(self, dim, index, src)

    def scatter_add_(self, dim: int, index: Any, src: Any) -> Self:
        """``scatter_add``, in place."""
        return self._unary_inplace(ops.scatter_add, dim, index, src)

    def sort(self, dim: int = -1, descending: bool = False, *, stable: bool = False) -> MaxMin:
        """See ``tinyopt.sort``."""
        return ops.sort(self, dim, descending, stable=stable)

    def take(self, index: Any) -> Tensor:
        """See ``tinyopt.take``."""
        return ops.take(self, index)

    def take_along_dim(self, indices: Any, dim: int | None = None) -> Tensor:
        """See ``tinyopt.take_along_dim``."""
        return ops.take_along_dim(self, indices, dim)

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> MaxMin:
        """See ``tinyopt.topk``."""
        return ops.topk(self, k, dim, largest, sorted)

    def unique(self, sorted: bool = True, return_inverse: bool = False,
               return_counts: bool = False, dim: int | None = None) -> Any:
        """See ``tinyopt.unique``."""
        return ops.unique(self, sorted, return_inverse, return_counts, dim)

    def unique_consecutive(self, return_inverse: bool = False, return_counts: bool = False,
                           dim: int | None = None) -> Any:
        """See ``tinyopt.unique_consecutive``."""
        return ops.unique_consecutive(self, return_inverse, return_counts, dim)

    # ---- ops.statistics -------------------------------------------------------------------------
    def corrcoef(self) -> Tensor:
        """See ``tinyopt.corrcoef``."""
        return ops.corrcoef(self)

    def cov(self, *, correction: int = 1, fweights: Any = None, aweights: Any = None) -> Tensor:
        """See ``tinyopt.cov``."""
        return ops.cov(self, correction=correction, fweights=fweights, aweights=aweights)

    def nanmean(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        """See ``tinyopt.nanmean``."""
        return ops.nanmean(self, dim, keepdim, dtype=dtype)

    def nansum(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        """See ``tinyopt.nansum``."""
        return ops.nansum(self, dim, keepdim, dtype=dtype)

    # ---- ops.vector_products --------------------------------------------------------------------
    def cross(self, other: Any, dim: int | None = None) -> Tensor:
        """See ``tinyopt.cross``."""
        return ops.cross(self, other, dim)

    def inner(self, other: Any) -> Tensor:
        """See ``tinyopt.inner``."""
        return ops.inner(self, other)
