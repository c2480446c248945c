"""The named methods of ``Tensor``: PyTorch's tensor API, declared where type checkers see it.

:class:`TensorMethods` is ``Tensor``'s base class.  Each method is the function of the same name
in ``tinyopt.engine.ops`` (``x.exp()`` is ``to.exp(x)``), and each in-place variant ``x.exp_()``
is ``Tensor._inplace`` over it (PyTorch's in-place rules, see ``tensor``'s docstring).
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from typing_extensions import Self

from tinyopt.engine.dtypes import as_dtype

if TYPE_CHECKING:
    import numpy as np

    from tinyopt.engine.tensor import Tensor
# tinyopt.engine.ops, bound when it is imported (it imports Tensor).  Typed Any: the methods'
# own signatures are the contract users see.
_F: Any = None

_Dims = Any  # an int, a tuple of ints, or None


class TensorCasts:
    """``x.float()``, ``x.long()``...: in a class of their own, so that the names ``float``,
    ``int`` and ``bool`` in the other classes' annotations still mean the builtins."""

    __slots__ = ()

    def float(self) -> Tensor:
        return _F.to(self, "float32")

    def double(self) -> Tensor:
        return _F.to(self, "float64")

    def long(self) -> Tensor:
        return _F.to(self, "int64")

    def int(self) -> Tensor:
        return _F.to(self, "int32")

    def short(self) -> Tensor:
        return _F.to(self, "int16")

    def char(self) -> Tensor:
        return _F.to(self, "int8")

    def byte(self) -> Tensor:
        return _F.to(self, "uint8")

    def bool(self) -> Tensor:
        return _F.to(self, "bool")

    def half(self) -> Tensor:
        return _F.to(self, np.dtype(np.float16))

    def bfloat16(self) -> Tensor:
        """This tensor as bfloat16 (needs ml_dtypes)."""
        return _F.to(self, as_dtype("bfloat16"))


class TensorMethods(TensorCasts):
    """PyTorch's tensor methods (see the module docstring)."""

    __slots__ = ()

    if TYPE_CHECKING:
        shape: tuple[int, ...]
        dtype: np.dtype
        requires_grad: bool

        def _inplace(self, build: Callable[[Tensor], Tensor], *operands: Any,
                     check_cast: bool = True) -> Self: ...

        def _unary_inplace(self, fn: Callable[..., Tensor], *args: Any,
                           **kwargs: Any) -> Self: ...

        def _rebind_view(self, build: Callable[[Tensor], Tensor]) -> Self: ...

        def dim(self) -> int: ...

    # ---- arithmetic -------------------------------------------------------------------------
    def add(self, other: Any, *deprecated: Any, alpha: Any = 1) -> Tensor:
        """self + alpha * other (also torch's deprecated ``add(alpha, other)``, with its
        warning)."""
        other, alpha = _alpha_first("add", other, deprecated, alpha)
        return _F.add(self, other, alpha=alpha)

    def sub(self, other: Any, *deprecated: Any, alpha: Any = 1) -> Tensor:
        """self - alpha * other (also the deprecated ``sub(alpha, other)``)."""
        other, alpha = _alpha_first("sub", other, deprecated, alpha)
        return _F.sub(self, other, alpha=alpha)

    subtract = sub

    def mul(self, other: Any) -> Tensor:
        return _F.mul(self, other)

    multiply = mul

    def div(self, other: Any, *, rounding_mode: str | None = None) -> Tensor:
        return _F.div(self, other, rounding_mode=rounding_mode)

    divide = div
    true_divide = div

    def floor_divide(self, other: Any) -> Tensor:
        return _F.floor_divide(self, other)

    def remainder(self, other: Any) -> Tensor:
        return _F.remainder(self, other)

    def fmod(self, other: Any) -> Tensor:
        return _F.fmod(self, other)

    def pow(self, exponent: Any) -> Tensor:
        return _F.pow(self, exponent)

    def neg(self) -> Tensor:
        return _F.neg(self)

    negative = neg

    def abs(self) -> Tensor:
        return _F.abs(self)

    absolute = abs

    def reciprocal(self) -> Tensor:
        return _F.reciprocal(self)

    def square(self) -> Tensor:
        return _F.square(self)

    def sqrt(self) -> Tensor:
        return _F.sqrt(self)

    def rsqrt(self) -> Tensor:
        return _F.rsqrt(self)

    def exp(self) -> Tensor:
        return _F.exp(self)

    def expm1(self) -> Tensor:
        return _F.expm1(self)

    def log(self) -> Tensor:
        return _F.log(self)

    def log1p(self) -> Tensor:
        return _F.log1p(self)

    def log2(self) -> Tensor:
        return _F.log2(self)

    def log10(self) -> Tensor:
        return _F.log10(self)

    def sin(self) -> Tensor:
        return _F.sin(self)

    def cos(self) -> Tensor:
        return _F.cos(self)

    def tan(self) -> Tensor:
        return _F.tan(self)

    def sinh(self) -> Tensor:
        return _F.sinh(self)

    def cosh(self) -> Tensor:
        return _F.cosh(self)

    def asin(self) -> Tensor:
        return _F.asin(self)

    def acos(self) -> Tensor:
        return _F.acos(self)

    def atan(self) -> Tensor:
        return _F.atan(self)

    def atan2(self, other: Any) -> Tensor:
        return _F.atan2(self, other)

    def frac(self) -> Tensor:
        return _F.frac(self)

    arcsin = asin
    arccos = acos
    arctan = atan
    arctan2 = atan2

    def tanh(self) -> Tensor:
        return _F.tanh(self)

    def sigmoid(self) -> Tensor:
        return _F.sigmoid(self)

    def relu(self) -> Tensor:
        return _F.relu(self)

    def erf(self) -> Tensor:
        return _F.erf(self)

    def sign(self) -> Tensor:
        return _F.sign(self)

    def sgn(self) -> Tensor:
        return _F.sign(self)

    def floor(self) -> Tensor:
        return _F.floor(self)

    def ceil(self) -> Tensor:
        return _F.ceil(self)

    def round(self, *, decimals: int = 0) -> Tensor:
        return _F.round(self, decimals=decimals)

    def trunc(self) -> Tensor:
        return _F.trunc(self)

    fix = trunc

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:
        return _F.clamp(self, min, max)

    clip = clamp

    def clamp_min(self, min: Any) -> Tensor:
        return _F.clamp(self, min=min)

    def clamp_max(self, max: Any) -> Tensor:
        return _F.clamp(self, max=max)

    def maximum(self, other: Any) -> Tensor:
        return _F.maximum(self, other)

    def minimum(self, other: Any) -> Tensor:
        return _F.minimum(self, other)

    def lerp(self, end: Any, weight: Any) -> Tensor:
        return _F.lerp(self, end, weight)

    def addcmul(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        return _F.addcmul(self, tensor1, tensor2, value=value)

    def addcdiv(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        return _F.addcdiv(self, tensor1, tensor2, value=value)

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None,
                   neginf: float | None = None) -> Tensor:
        return _F.nan_to_num(self, nan, posinf, neginf)

    def xlogy(self, other: Any) -> Tensor:
        return _F.xlogy(self, other)

    def logaddexp(self, other: Any) -> Tensor:
        return _F.logaddexp(self, other)

    def logaddexp2(self, other: Any) -> Tensor:
        return _F.logaddexp2(self, other)

    def matmul(self, other: Any) -> Tensor:
        return _F.matmul(self, other)

    # ---- comparisons and logic --------------------------------------------------------------
    def eq(self, other: Any) -> Tensor:
        return _F.eq(self, other)

    def ne(self, other: Any) -> Tensor:
        return _F.ne(self, other)

    def lt(self, other: Any) -> Tensor:
        return _F.lt(self, other)

    def le(self, other: Any) -> Tensor:
        return _F.le(self, other)

    def gt(self, other: Any) -> Tensor:
        return _F.gt(self, other)

    def ge(self, other: Any) -> Tensor:
        return _F.ge(self, other)

    greater = gt
    greater_equal = ge
    less = lt
    less_equal = le
    not_equal = ne

    def equal(self, other: Any) -> bool:
        """True when ``other`` has this shape and the same values (``torch.equal``)."""
        return _F.equal(self, other)

    def allclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
                 equal_nan: bool = False) -> bool:
        return _F.allclose(self, other, rtol, atol, equal_nan)

    def isclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
                equal_nan: bool = False) -> Tensor:
        return _F.isclose(self, other, rtol, atol, equal_nan)

    def logical_and(self, other: Any) -> Tensor:
        return _F.logical_and(self, other)

    def logical_or(self, other: Any) -> Tensor:
        return _F.logical_or(self, other)

    def logical_xor(self, other: Any) -> Tensor:
        return _F.logical_xor(self, other)

    def logical_not(self) -> Tensor:
        return _F.logical_not(self)

    def bitwise_and(self, other: Any) -> Tensor:
        return _F.bitwise_and(self, other)

    def bitwise_or(self, other: Any) -> Tensor:
        return _F.bitwise_or(self, other)

    def bitwise_xor(self, other: Any) -> Tensor:
        return _F.bitwise_xor(self, other)

    def bitwise_not(self) -> Tensor:
        return _F.bitwise_not(self)

    def isnan(self) -> Tensor:
        return _F.isnan(self)

    def isinf(self) -> Tensor:
        return _F.isinf(self)

    def isfinite(self) -> Tensor:
        return _F.isfinite(self)

    def isposinf(self) -> Tensor:
        return _F.isposinf(self)

    def isneginf(self) -> Tensor:
        return _F.isneginf(self)

    def where(self, condition: Any, other: Any) -> Tensor:
        """``self`` where ``condition``, else ``other``."""
        return _F.where(condition, self, other)

    def masked_fill(self, mask: Any, value: Any) -> Tensor:
        return _F.masked_fill(self, mask, value)

    # ---- reductions -------------------------------------------------------------------------
    def sum(self, dim: _Dims = None, keepdim: bool = False, *, dtype: Any = None,
            keepdims: bool | None = None) -> Tensor:
        return _F.sum(self, dim, keepdim, dtype=dtype, keepdims=keepdims)

    def mean(self, dim: _Dims = None, keepdim: bool = False, *, dtype: Any = None,
             keepdims: bool | None = None) -> Tensor:
        return _F.mean(self, dim, keepdim, dtype=dtype, keepdims=keepdims)

    def var(self, dim: _Dims = None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: Any = None, keepdims: bool | None = None) -> Tensor:
        return _F.var(self, dim, unbiased, keepdim, correction=correction, keepdims=keepdims)

    def std(self, dim: _Dims = None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: Any = None, keepdims: bool | None = None) -> Tensor:
        return _F.std(self, dim, unbiased, keepdim, correction=correction, keepdims=keepdims)

    def max(self, dim: Any = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Any:
        """The largest element; with ``dim`` (an int) ``(values, indices)``; with a tensor, the
        elementwise maximum."""
        return _F.max(self, dim, keepdim, keepdims=keepdims)

    def min(self, dim: Any = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Any:
        """The smallest element; with ``dim`` (an int) ``(values, indices)``; with a tensor, the
        elementwise minimum."""
        return _F.min(self, dim, keepdim, keepdims=keepdims)

    def any(self, dim: _Dims = None, keepdim: bool = False, *,
            keepdims: bool | None = None) -> Tensor:
        return _F.any(self, dim, keepdim, keepdims=keepdims)

    def all(self, dim: _Dims = None, keepdim: bool = False, *,
            keepdims: bool | None = None) -> Tensor:
        return _F.all(self, dim, keepdim, keepdims=keepdims)

    def prod(self, dim: int | None = None, keepdim: bool = False, *, dtype: Any = None,
             keepdims: bool | None = None) -> Tensor:
        return _F.prod(self, dim, keepdim, dtype=dtype, keepdims=keepdims)

    def cumsum(self, dim: int, *, dtype: Any = None) -> Tensor:
        return _F.cumsum(self, dim, dtype=dtype)

    def cumprod(self, dim: int, *, dtype: Any = None) -> Tensor:
        return _F.cumprod(self, dim, dtype=dtype)

    def logcumsumexp(self, dim: int) -> Tensor:
        return _F.logcumsumexp(self, dim)

    def amax(self, dim: _Dims = (), keepdim: bool = False, *,
             keepdims: bool | None = None) -> Tensor:
        return _F.amax(self, dim, keepdim, keepdims=keepdims)

    def amin(self, dim: _Dims = (), keepdim: bool = False, *,
             keepdims: bool | None = None) -> Tensor:
        return _F.amin(self, dim, keepdim, keepdims=keepdims)

    def norm(self, p: Any = "fro", dim: _Dims = None, keepdim: bool = False,
             dtype: Any = None) -> Tensor:
        return _F.norm(self, p, dim, keepdim, dtype)

    def argmax(self, dim: int | None = None, keepdim: bool = False, *,
               keepdims: bool | None = None) -> Tensor:
        return _F.argmax(self, dim, keepdim, keepdims=keepdims)

    def argmin(self, dim: int | None = None, keepdim: bool = False, *,
               keepdims: bool | None = None) -> Tensor:
        return _F.argmin(self, dim, keepdim, keepdims=keepdims)

    def logsumexp(self, dim: _Dims, keepdim: bool = False, *,
                  keepdims: bool | None = None) -> Tensor:
        return _F.logsumexp(self, dim, keepdim, keepdims=keepdims)

    def softmax(self, dim: int, dtype: Any = None) -> Tensor:
        return _F.softmax(self, dim, dtype)

    def log_softmax(self, dim: int, dtype: Any = None) -> Tensor:
        return _F.log_softmax(self, dim, dtype)

    # ---- shape ------------------------------------------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        return _F.reshape(self, *shape)

    def ravel(self) -> Tensor:
        return _F.reshape(self, -1)

    def view(self, *shape: Any) -> Tensor:
        return _F.view(self, *shape)

    def view_as(self, other: Tensor) -> Tensor:
        return _F.view(self, other.shape)

    def reshape_as(self, other: Tensor) -> Tensor:
        return _F.reshape(self, other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        return _F.flatten(self, start_dim, end_dim)

    def permute(self, *dims: Any) -> Tensor:
        return _F.permute(self, *dims)

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        return _F.transpose(self, dim0, dim1)

    def t(self) -> Tensor:
        return _F.t(self)

    @property
    def T(self) -> Tensor:
        return _F.permute(self, tuple(reversed(range(self.dim()))))

    @property
    def mT(self) -> Tensor:
        if self.dim() < 2:
            if self.dim() == 0:  # (torch's deprecated identity)
                return _F.view(self, ())
            raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. "
                               "Got 1-D tensor.")
        return _F.transpose(self, -2, -1)

    def expand(self, *sizes: Any) -> Tensor:
        return _F.expand(self, *sizes)

    def expand_as(self, other: Tensor) -> Tensor:
        return _F.expand(self, other.shape)

    def squeeze(self, dim: _Dims = None) -> Tensor:
        return _F.squeeze(self, dim)

    def unsqueeze(self, dim: int) -> Tensor:
        return _F.unsqueeze(self, dim)

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        return _F.unflatten(self, dim, sizes)

    def movedim(self, source: Any, destination: Any) -> Tensor:
        return _F.movedim(self, source, destination)

    moveaxis = movedim

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        return _F.transpose(self, axis0, axis1)

    swapdims = swapaxes

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        return _F.narrow(self, dim, start, length)

    def select(self, dim: int, index: int) -> Tensor:
        return _F.select(self, dim, index)

    def split(self, split_size: Any, dim: int = 0) -> tuple[Tensor, ...]:
        return _F.split(self, split_size, dim)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        return _F.chunk(self, chunks, dim)

    def tensor_split(self, indices_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
        return _F.tensor_split(self, indices_or_sections, dim)

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        return _F.unbind(self, dim)

    def broadcast_to(self, size: Sequence[int]) -> Tensor:
        return _F.broadcast_to(self, size)

    def repeat(self, *sizes: Any) -> Tensor:
        return _F.repeat(self, *sizes)

    def tile(self, *dims: Any) -> Tensor:
        return _F.tile(self, dims[0] if len(dims) == 1 else dims)

    def repeat_interleave(self, repeats: Any, dim: int | None = None, *,
                          output_size: int | None = None) -> Tensor:
        return _F.repeat_interleave(self, repeats, dim)

    def flip(self, *dims: Any) -> Tensor:
        return _F.flip(self, dims[0] if len(dims) == 1 else dims)

    def fliplr(self) -> Tensor:
        return _F.flip(self, 1)

    def flipud(self) -> Tensor:
        return _F.flip(self, 0)

    def roll(self, shifts: Any, dims: Any = None) -> Tensor:
        return _F.roll(self, shifts, dims)

    def tril(self, diagonal: int = 0) -> Tensor:
        return _F.tril(self, diagonal)

    def triu(self, diagonal: int = 0) -> Tensor:
        return _F.triu(self, diagonal)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        return _F.diagonal(self, offset, dim1, dim2)

    def unfold(self, dimension: int, size: int, step: int) -> Tensor:
        return _F.unfold(self, dimension, size, step)

    def as_strided(self, size: Sequence[int], stride: Sequence[int],
                   storage_offset: int | None = None) -> Tensor:
        return _F.as_strided(self, size, stride, storage_offset)

    def diag(self, diagonal: int = 0) -> Tensor:
        return _F.diag(self, diagonal)

    def trace(self) -> Tensor:
        return _F.trace(self)

    # ---- new tensors like this one (dtype kept unless given) --------------------------------
    def new_zeros(self, *size: Any, dtype: Any = None, device: Any = None,
                  requires_grad: bool = False) -> Tensor:
        return _F.zeros(*size, dtype=dtype or self.dtype, device=device,
                        requires_grad=requires_grad)

    def new_ones(self, *size: Any, dtype: Any = None, device: Any = None,
                 requires_grad: bool = False) -> Tensor:
        return _F.ones(*size, dtype=dtype or self.dtype, device=device,
                       requires_grad=requires_grad)

    def new_empty(self, *size: Any, dtype: Any = None, device: Any = None,
                  requires_grad: bool = False) -> Tensor:
        return _F.zeros(*size, dtype=dtype or self.dtype, device=device,
                        requires_grad=requires_grad)

    def new_full(self, size: Sequence[int], fill_value: Any, *, dtype: Any = None,
                 device: Any = None, requires_grad: bool = False) -> Tensor:
        return _F.full(size, fill_value, dtype=dtype or self.dtype, device=device,
                       requires_grad=requires_grad)

    def new_tensor(self, data: Any, *, dtype: Any = None, device: Any = None,
                   requires_grad: bool = False) -> Tensor:
        return _F.tensor(data, dtype=dtype or self.dtype, device=device,
                         requires_grad=requires_grad)

    def new(self, *args: Any) -> Tensor:
        """The legacy constructor: ``x.new(2, 3)`` (uninitialized in PyTorch: zeros here) or
        ``x.new(data)``, in this tensor's dtype."""
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            return _F.tensor(args[0], dtype=self.dtype)
        return _F.zeros(*args, dtype=self.dtype)

    # ---- what it is -----------------------------------------------------------------------------
    @property
    def is_cpu(self) -> bool:
        return True

    @property
    def layout(self) -> Any:
        from tinyopt.engine.layout import strided
        return strided

    def data_ptr(self) -> int:
        """The address of the first element (of the computed value)."""
        return int(self.numpy().__array_interface__["data"][0])

    @property
    def is_xpu(self) -> bool:
        return False

    # ---- real tensors: the complex views are the tensor itself --------------------------------
    @property
    def real(self) -> Tensor:
        return self  # type: ignore[return-value]

    def conj(self) -> Tensor:
        return self  # type: ignore[return-value]

    @property
    def H(self) -> Tensor:
        """The (conjugate) transpose of a matrix."""
        if self.ndim != 2:
            raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                               f"{self.ndim}-D tensor. For batches of matrices, consider using "
                               f"tensor.mH")
        return _F.transpose(self, 0, 1)

    @property
    def mH(self) -> Tensor:
        return _F.transpose(self, -2, -1)

    def dist(self, other: Any, p: float = 2) -> Tensor:
        """The p-norm of ``self - other``."""
        return _F.vector_norm(_F.sub(self, other), p)

    def cross(self, other: Any, dim: int | None = None) -> Tensor:
        return _F.cross(self, other, dim)

    # ---- in-place comparisons: 1 where true, 0 elsewhere, in this tensor's dtype ----------------
    def _compare_(self, compare: Callable[[Any, Any], Tensor], other: Any) -> Self:
        return self._inplace(lambda x: _F.to(compare(x, other), x.dtype), other, check_cast=False)

    def eq_(self, other: Any) -> Self:
        return self._compare_(_F.eq, other)

    def ne_(self, other: Any) -> Self:
        return self._compare_(_F.ne, other)

    def gt_(self, other: Any) -> Self:
        return self._compare_(_F.gt, other)

    def ge_(self, other: Any) -> Self:
        return self._compare_(_F.ge, other)

    def lt_(self, other: Any) -> Self:
        return self._compare_(_F.lt, other)

    def le_(self, other: Any) -> Self:
        return self._compare_(_F.le, other)

    def apply_(self, callable: Callable[[Any], Any]) -> Self:
        """Replace every element by ``callable(element)`` (a Python function of a number, called
        once per element: slow, as in PyTorch), in place."""
        if self.requires_grad:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        values = np.asarray(self.numpy())
        out = np.array([callable(v) for v in values.reshape(-1).tolist()], dtype=self.dtype)
        self[...] = _F.as_tensor(out.reshape(values.shape))
        return self

    def fill_diagonal_(self, fill_value: Any, wrap: bool = False) -> Self:
        """Write ``fill_value`` on the main diagonal (of every 2-D slice of equal sizes; a tall
        matrix restarts the diagonal after each N + 1 rows with ``wrap``), in place."""
        if self.ndim < 2 or (self.ndim > 2 and len(set(self.shape)) != 1):
            raise RuntimeError("all dimensions of input must be of equal length")
        rows, cols = self.shape[0], self.shape[1]
        if self.ndim == 2:
            step = cols + 1
            end = rows * cols if wrap else min(rows, cols) * cols
            flat = np.arange(0, end, step)
            idx = tuple(np.unravel_index(flat[flat < rows * cols], (rows, cols)))
        else:
            idx = tuple(np.arange(self.shape[0]) for _ in range(self.ndim))
        self[tuple(_F.as_tensor(i.astype(np.int64)) for i in idx)] = fill_value
        return self

    def quantile(self, q: Any, dim: int | None = None, keepdim: bool = False, *,
                 interpolation: str = "linear") -> Tensor:
        return _F.quantile(self, q, dim, keepdim, interpolation=interpolation)

    # ---- sparse-only methods: a dense tensor refuses them, with PyTorch's words -----------------
    def to_sparse_coo(self) -> Any:
        """``to_sparse()``."""
        return self.to_sparse()

    def _sparse_only(self, name: str, kind: str = "sparse coordinate tensor") -> Any:
        raise RuntimeError(f"{name} expected {kind} layout but got Strided")

    def values(self) -> Any:
        """Refused on a dense tensor (sparse tensors have it)."""
        return self._sparse_only("values", "sparse tensor")

    def indices(self) -> Any:
        """Refused on a dense tensor (sparse tensors have it)."""
        return self._sparse_only("indices")

    def coalesce(self) -> Any:
        """Refused on a dense tensor (sparse tensors have it)."""
        return self._sparse_only("coalesce")

    def is_coalesced(self) -> Any:
        """Refused on a dense tensor (sparse tensors have it)."""
        return self._sparse_only("is_coalesced")

    def histogram(self, bins: Any = 100, *, range: Any = None, weight: Any = None,
                  density: bool = False) -> Any:
        return _F.histogram(self, bins, range=range, weight=weight, density=density)

    def histc(self, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:
        return _F.histc(self, bins, min, max)

    def diff(self, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
        return _F.diff(self, n, dim, prepend, append)

    # ---- products -----------------------------------------------------------------------------
    def mm(self, mat2: Any) -> Tensor:
        return _F.mm(self, mat2)

    def bmm(self, mat2: Any) -> Tensor:
        return _F.bmm(self, mat2)

    def mv(self, vec: Any) -> Tensor:
        return _F.mv(self, vec)

    def dot(self, other: Any) -> Tensor:
        return _F.dot(self, other)

    def outer(self, vec2: Any) -> Tensor:
        return _F.outer(self, vec2)

    ger = outer

    def inverse(self) -> Tensor:
        return _F.inverse(self)

    def inner(self, other: Any) -> Tensor:
        return _F.inner(self, other)

    def cov(self, *, correction: int = 1, fweights: Any = None, aweights: Any = None) -> Tensor:
        return _F.cov(self, correction=correction, fweights=fweights, aweights=aweights)

    def corrcoef(self) -> Tensor:
        return _F.corrcoef(self)

    def nansum(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        return _F.nansum(self, dim, keepdim, dtype=dtype)

    def nanmean(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        return _F.nanmean(self, dim, keepdim, dtype=dtype)

    def addmm(self, mat1: Any, mat2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _F.addmm(self, mat1, mat2, beta=beta, alpha=alpha)

    def addmv(self, mat: Any, vec: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _F.addmv(self, mat, vec, beta=beta, alpha=alpha)

    def baddbmm(self, batch1: Any, batch2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _F.baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def addbmm(self, batch1: Any, batch2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _F.addbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def addr(self, vec1: Any, vec2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _F.addr(self, vec1, vec2, beta=beta, alpha=alpha)

    # ---- selection ----------------------------------------------------------------------------
    def gather(self, dim: int, index: Any, *, sparse_grad: bool = False) -> Tensor:
        return _F.gather(self, dim, index)

    def take_along_dim(self, indices: Any, dim: int | None = None) -> Tensor:
        return _F.take_along_dim(self, indices, dim)

    def take(self, index: Any) -> Tensor:
        return _F.take(self, index)

    def scatter(self, dim: int, index: Any, src: Any = None, *, value: Any = None,
                reduce: str | None = None) -> Tensor:
        return _F.scatter(self, dim, index, src, value=value, reduce=reduce)

    def scatter_add(self, dim: int, index: Any, src: Any) -> Tensor:
        return _F.scatter_add(self, dim, index, src)

    def index_select(self, dim: int, index: Any) -> Tensor:
        return _F.index_select(self, dim, index)

    def index_add(self, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Tensor:
        return _F.index_add(self, dim, index, source, alpha=alpha)

    def index_fill(self, dim: int, index: Any, value: Any) -> Tensor:
        return _F.index_fill(self, dim, index, value)

    def index_copy(self, dim: int, index: Any, source: Any) -> Tensor:
        return _F.index_copy(self, dim, index, source)

    def masked_select(self, mask: Any) -> Tensor:
        return _F.masked_select(self, mask)

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
        """``(values, indices)``."""
        return _F.sort(self, dim, descending, stable)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
        return _F.argsort(self, dim, descending, stable)

    def msort(self) -> Tensor:
        return _F.msort(self)

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
        """``(values, indices)``."""
        return _F.topk(self, k, dim, largest, sorted)

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> Any:
        """``(values, indices)``."""
        return _F.kthvalue(self, k, dim, keepdim)

    def median(self, dim: int | None = None, keepdim: bool = False, *,
               keepdims: bool | None = None) -> Any:
        """The lower median, or ``(values, indices)`` along ``dim``."""
        return _F.median(self, dim, keepdim, keepdims=keepdims)

    def nonzero(self, *, as_tuple: bool = False) -> Any:
        return _F.nonzero(self, as_tuple=as_tuple)

    def argwhere(self) -> Tensor:
        return _F.argwhere(self)

    def unique(self, sorted: bool = True, return_inverse: bool = False,
               return_counts: bool = False, dim: int | None = None) -> Any:
        return _F.unique(self, sorted, return_inverse, return_counts, dim)

    def unique_consecutive(self, return_inverse: bool = False, return_counts: bool = False,
                           dim: int | None = None) -> Any:
        return _F.unique_consecutive(self, return_inverse, return_counts, dim)

    def is_distributed(self) -> bool:
        """False: a tinyopt tensor lives in one process (torch's answer for a local tensor)."""
        return False

    def bincount(self, weights: Any = None, minlength: int = 0) -> Tensor:
        return _F.bincount(self, weights, minlength)

    def count_nonzero(self, dim: _Dims = None) -> Tensor:
        return _F.count_nonzero(self, dim)

    # ---- in-place shape changes: this tensor becomes a view of its own storage ---------------
    def unsqueeze_(self, dim: int) -> Self:
        return self._rebind_view(lambda x: _F.unsqueeze(x, dim))

    def squeeze_(self, dim: _Dims = None) -> Self:
        return self._rebind_view(lambda x: _F.squeeze(x, dim))

    def t_(self) -> Self:
        return self._rebind_view(_F.t)

    def transpose_(self, dim0: int, dim1: int) -> Self:
        return self._rebind_view(lambda x: _F.transpose(x, dim0, dim1))

    swapaxes_ = transpose_
    swapdims_ = transpose_

    def resize_(self, *sizes: Any, memory_format: Any = None) -> Self:
        """This tensor with shape ``sizes``: its first elements (in memory order) when the count
        is no larger, else those followed by zeros in new storage.  Concrete tensors only."""
        shape = tuple(int(s) for s in (sizes[0] if len(sizes) == 1 and not isinstance(
            sizes[0], (int, np.integer)) else sizes))
        if self.requires_grad:
            raise RuntimeError("cannot resize variables that require grad")
        flat = np.ascontiguousarray(self.numpy()).reshape(-1)
        n = int(np.prod(shape, dtype=np.int64))
        if n <= flat.size:
            return self._rebind_view(lambda x: _F.as_tensor(flat[:n].reshape(shape)))
        grown = np.zeros(n, self.dtype)
        grown[:flat.size] = flat
        return self._rebind_view(lambda x: _F.as_tensor(grown.reshape(shape)))

    def as_strided_(self, size: Sequence[int], stride: Sequence[int],
                    storage_offset: int | None = None) -> Self:
        """This tensor as the strided view (``size``, ``stride`` in elements, from
        ``storage_offset``) of its own contiguous memory; concrete tensors only, and the view
        must lie inside that memory."""
        arr = self.numpy()
        if self.requires_grad or not arr.flags.c_contiguous:
            raise RuntimeError("as_strided_: tinyopt supports it on contiguous tensors that do "
                               "not require grad")
        size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
        off = int(storage_offset or 0)
        if len(size) != len(stride) or off < 0 or min(stride, default=0) < 0 or \
                (all(size) and off + sum((n - 1) * st for n, st in zip(size, stride))
                 >= arr.size):
            raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage "
                               f"offset {off} are out of bounds for a storage of {arr.size} "
                               f"elements")
        flat = arr.reshape(-1)
        view = np.lib.stride_tricks.as_strided(flat[off:] if all(size) else flat[:0], size,
                                               tuple(st * arr.itemsize for st in stride))
        return self._rebind_view(lambda x: _F.as_tensor(view))

    def to_sparse(self, sparse_dim: int | None = None) -> Any:
        """A sparse COO tensor of the nonzero entries (``tinyopt.engine.sparse``); its values are
        differentiable in this tensor."""
        from tinyopt.engine.sparse import to_sparse
        return to_sparse(self, sparse_dim)

    def to_dense(self, dtype: Any = None) -> Tensor:
        """This tensor (already dense), or a copy in ``dtype``."""
        return self if dtype is None else _F.to(self, as_dtype(dtype))

    # ---- in place (``x.op_(...)`` is ``x.copy_(x.op(...))`` with PyTorch's rules) ------------
    def add_(self, other: Any, *deprecated: Any, alpha: Any = 1) -> Self:
        """Also torch's deprecated ``add_(alpha, other)`` (makemore's ``p.data.add_(-lr, g)``)."""
        other, alpha = _alpha_first("add_", other, deprecated, alpha)
        return self._inplace(lambda x: _F.add(x, other, alpha=alpha), other)

    def sub_(self, other: Any, *deprecated: Any, alpha: Any = 1) -> Self:
        other, alpha = _alpha_first("sub_", other, deprecated, alpha)
        return self._inplace(lambda x: _F.sub(x, other, alpha=alpha), other)

    subtract_ = sub_

    def mul_(self, other: Any) -> Self:
        return self._inplace(lambda x: _F.mul(x, other), other)

    multiply_ = mul_

    def div_(self, other: Any, *, rounding_mode: str | None = None) -> Self:
        return self._inplace(lambda x: _F.div(x, other, rounding_mode=rounding_mode), other)

    divide_ = div_
    true_divide_ = div_

    def floor_divide_(self, other: Any) -> Self:
        return self._inplace(lambda x: _F.floor_divide(x, other), other)

    def remainder_(self, other: Any) -> Self:
        return self._inplace(lambda x: _F.remainder(x, other), other)

    def fmod_(self, other: Any) -> Self:
        return self._inplace(lambda x: _F.fmod(x, other), other)

    def frac_(self) -> Self:
        return self._unary_inplace(_F.frac)

    def atan2_(self, other: Any) -> Self:
        return self._inplace(lambda x: _F.atan2(x, other), other)

    arctan2_ = atan2_

    def pow_(self, exponent: Any) -> Self:
        return self._inplace(lambda x: _F.pow(x, exponent), exponent)

    def neg_(self) -> Self:
        return self._unary_inplace(_F.neg)

    negative_ = neg_

    def abs_(self) -> Self:
        return self._unary_inplace(_F.abs)

    absolute_ = abs_

    def reciprocal_(self) -> Self:
        return self._unary_inplace(_F.reciprocal)

    def square_(self) -> Self:
        return self._unary_inplace(_F.square)

    def sqrt_(self) -> Self:
        return self._unary_inplace(_F.sqrt)

    def rsqrt_(self) -> Self:
        return self._unary_inplace(_F.rsqrt)

    def exp_(self) -> Self:
        return self._unary_inplace(_F.exp)

    def expm1_(self) -> Self:
        return self._unary_inplace(_F.expm1)

    def log_(self) -> Self:
        return self._unary_inplace(_F.log)

    def log1p_(self) -> Self:
        return self._unary_inplace(_F.log1p)

    def log2_(self) -> Self:
        return self._unary_inplace(_F.log2)

    def log10_(self) -> Self:
        return self._unary_inplace(_F.log10)

    def sin_(self) -> Self:
        return self._unary_inplace(_F.sin)

    def cos_(self) -> Self:
        return self._unary_inplace(_F.cos)

    def tan_(self) -> Self:
        return self._unary_inplace(_F.tan)

    def tanh_(self) -> Self:
        return self._unary_inplace(_F.tanh)

    def sigmoid_(self) -> Self:
        return self._unary_inplace(_F.sigmoid)

    def relu_(self) -> Self:
        return self._unary_inplace(_F.relu)

    def erf_(self) -> Self:
        return self._unary_inplace(_F.erf)

    def sign_(self) -> Self:
        return self._unary_inplace(_F.sign)

    def floor_(self) -> Self:
        return self._unary_inplace(_F.floor)

    def ceil_(self) -> Self:
        return self._unary_inplace(_F.ceil)

    def round_(self, *, decimals: int = 0) -> Self:
        return self._inplace(lambda x: _F.round(x, decimals=decimals))

    def trunc_(self) -> Self:
        return self._unary_inplace(_F.trunc)

    fix_ = trunc_

    def clamp_(self, min: Any = None, max: Any = None) -> Self:
        return self._inplace(lambda x: _F.clamp(x, min, max), min, max)

    clip_ = clamp_

    def clamp_min_(self, min: Any) -> Self:
        return self._inplace(lambda x: _F.clamp(x, min=min), min)

    def clamp_max_(self, max: Any) -> Self:
        return self._inplace(lambda x: _F.clamp(x, max=max), max)

    def lerp_(self, end: Any, weight: Any) -> Self:
        return self._inplace(lambda x: _F.lerp(x, end, weight), end, weight)

    def addcmul_(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Self:
        return self._inplace(lambda x: _F.addcmul(x, tensor1, tensor2, value=value),
                             tensor1, tensor2)

    def addcdiv_(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Self:
        return self._inplace(lambda x: _F.addcdiv(x, tensor1, tensor2, value=value),
                             tensor1, tensor2)

    def nan_to_num_(self, nan: float = 0.0, posinf: float | None = None,
                    neginf: float | None = None) -> Self:
        return self._inplace(lambda x: _F.nan_to_num(x, nan, posinf, neginf))

    def masked_fill_(self, mask: Any, value: Any) -> Self:
        return self._inplace(lambda x: _F.masked_fill(x, mask, value), mask, value)

    def logical_not_(self) -> Self:
        return self._unary_inplace(_F.logical_not)

    def cumsum_(self, dim: int) -> Self:
        return self._inplace(lambda x: _F.cumsum(x, dim))

    def cumprod_(self, dim: int) -> Self:
        return self._inplace(lambda x: _F.cumprod(x, dim))

    def tril_(self, diagonal: int = 0) -> Self:
        return self._inplace(lambda x: _F.tril(x, diagonal))

    def triu_(self, diagonal: int = 0) -> Self:
        return self._inplace(lambda x: _F.triu(x, diagonal))

    def scatter_(self, dim: int, index: Any, src: Any = None, *, value: Any = None,
                 reduce: str | None = None) -> Self:
        return self._inplace(lambda x: _F.scatter(x, dim, index, src, value=value,
                                                  reduce=reduce), index, src)

    def scatter_add_(self, dim: int, index: Any, src: Any) -> Self:
        return self._inplace(lambda x: _F.scatter_add(x, dim, index, src), index, src)

    def index_add_(self, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Self:
        return self._inplace(lambda x: _F.index_add(x, dim, index, source, alpha=alpha),
                             index, source)

    def index_fill_(self, dim: int, index: Any, value: Any) -> Self:
        return self._inplace(lambda x: _F.index_fill(x, dim, index, value), index, value)

    def index_copy_(self, dim: int, index: Any, source: Any) -> Self:
        return self._inplace(lambda x: _F.index_copy(x, dim, index, source), index, source)

    def maximum_(self, other: Any) -> Self:
        return self._inplace(lambda x: _F.maximum(x, other), other)

    def minimum_(self, other: Any) -> Self:
        return self._inplace(lambda x: _F.minimum(x, other), other)

    # ---- random fills (the tinyopt generator, ``manual_seed``) ------------------------------
    def uniform_(self, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Self:
        return _F.fill_random(self, "uniform", a, b, generator)

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Self:
        return _F.fill_random(self, "normal", mean, std, generator)

    def bernoulli_(self, p: float = 0.5, *, generator: Any = None) -> Self:
        return _F.fill_random(self, "bernoulli", p, 0.0, generator)

    def exponential_(self, lambd: float = 1.0, *, generator: Any = None) -> Self:
        return _F.fill_random(self, "exponential", lambd, 0.0, generator)

    def random_(self, from_: int = 0, to: int | None = None, *, generator: Any = None
                ) -> Self:
        return _F.fill_random(self, "integers", from_, to, generator)


def _alpha_first(name: str, other: Any, deprecated: tuple, alpha: Any) -> tuple[Any, Any]:
    """``(other, alpha)`` of a call to ``name``: torch's deprecated overload ``name(Number alpha,
    Tensor other)`` when a second positional argument is given, with torch's warning."""
    if not deprecated:
        return other, alpha
    if len(deprecated) > 1 or not isinstance(other, numbers.Number) or alpha != 1:
        raise TypeError(f"{name}() received an invalid combination of arguments: expected "
                        f"(Tensor other, *, Number alpha) or the deprecated (Number alpha, "
                        f"Tensor other)")
    warnings.warn(f"This overload of {name} is deprecated:\n\t{name}(Number alpha, Tensor other)"
                  f"\nConsider using one of the following signatures instead:\n\t{name}(Tensor "
                  f"other, *, Number alpha = 1)", UserWarning, stacklevel=3)
    return deprecated[0], other
