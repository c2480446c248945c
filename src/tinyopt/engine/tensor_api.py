"""The named methods of ``Tensor`` written by hand: PyTorch's tensor API where a method is more
than its function, declared where type checkers see it.

:class:`TensorMethods` is ``Tensor``'s base class.  Most methods are the function of the same
name in ``tinyopt.engine.ops`` (``x.exp()`` is ``to.exp(x)``, ``x.exp_()`` its in-place
variant): those are declared in ``engine/ops/api_table.py`` and written into
:class:`~tinyopt.engine.op_methods.OpMethods` by ``tools/gen_ops.py``.  Here are the rest:
casts, torch's deprecated overloads, methods whose signature is not their function's
(``reshape(2, 3)``, ``where(condition, other)``, ``split(split_size)``), views that rebind
this tensor, and methods that are no op at all.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tinyopt.engine import ops
from tinyopt.engine.dtypes import as_dtype
from tinyopt.engine.op_methods import OpMethods

if TYPE_CHECKING:
    from typing_extensions import Self

    from tinyopt.engine.tensor import Tensor

_Dims = Any  # an int, a tuple of ints, or None


class TensorCasts:
    """``x.float()``, ``x.long()``...: in a class of their own, so that the names ``float``,
    ``int`` and ``bool`` in the other classes' annotations still mean the builtins."""

    __slots__ = ()

    def float(self) -> Tensor:
        return ops.to(self, "float32")

    def double(self) -> Tensor:
        return ops.to(self, "float64")

    def long(self) -> Tensor:
        return ops.to(self, "int64")

    def int(self) -> Tensor:
        return ops.to(self, "int32")

    def short(self) -> Tensor:
        return ops.to(self, "int16")

    def char(self) -> Tensor:
        return ops.to(self, "int8")

    def byte(self) -> Tensor:
        return ops.to(self, "uint8")

    def bool(self) -> Tensor:
        return ops.to(self, "bool")

    def half(self) -> Tensor:
        return ops.to(self, np.dtype(np.float16))

    def bfloat16(self) -> Tensor:
        """This tensor as bfloat16 (needs ml_dtypes)."""
        return ops.to(self, as_dtype("bfloat16"))


class TensorMethods(OpMethods, TensorCasts):
    """PyTorch's tensor methods (see the module docstring)."""

    __slots__ = ()

    if TYPE_CHECKING:
        shape: tuple[int, ...]
        dtype: np.dtype
        requires_grad: bool

        def _inplace(self, build: Callable[[Tensor], Tensor], *operands: Any,
                     check_cast: bool = True) -> Self: ...

        def _rebind_view(self, build: Callable[[Tensor], Tensor]) -> Self: ...

        def dim(self) -> int: ...

    # ---- arithmetic -------------------------------------------------------------------------
    def add(self, other: Any, *deprecated: Any, alpha: Any = 1) -> Tensor:
        """self + alpha * other (also torch's deprecated ``add(alpha, other)``, with its
        warning)."""
        other, alpha = _alpha_first("add", other, deprecated, alpha)
        return ops.add(self, other, alpha=alpha)

    def sub(self, other: Any, *deprecated: Any, alpha: Any = 1) -> Tensor:
        """self - alpha * other (also the deprecated ``sub(alpha, other)``)."""
        other, alpha = _alpha_first("sub", other, deprecated, alpha)
        return ops.sub(self, other, alpha=alpha)

    subtract = sub

    # ---- comparisons and logic --------------------------------------------------------------
    def where(self, condition: Any, other: Any) -> Tensor:
        """``self`` where ``condition``, else ``other``."""
        return ops.where(condition, self, other)

    # ---- reductions -------------------------------------------------------------------------
    def norm(self, p: Any = "fro", dim: _Dims = None, keepdim: bool = False,
             dtype: Any = None) -> Tensor:
        return ops.norm(self, p, dim, keepdim, dtype=dtype)

    # ---- shape ------------------------------------------------------------------------------
    def reshape(self, *sizes: Any, shape: Any = None) -> Tensor:
        return ops.reshape(self, *_sizes("reshape", sizes, "shape", shape))

    def ravel(self) -> Tensor:
        return ops.reshape(self, -1)

    def view(self, *sizes: Any, size: Any = None) -> Tensor:
        return ops.view(self, *_sizes("view", sizes, "size", size))

    def view_as(self, other: Tensor) -> Tensor:
        return ops.view(self, other.shape)

    def reshape_as(self, other: Tensor) -> Tensor:
        return ops.reshape(self, other.shape)

    def permute(self, *sizes: Any, dims: Any = None) -> Tensor:
        return ops.permute(self, *_sizes("permute", sizes, "dims", dims))

    @property
    def T(self) -> Tensor:
        return ops.permute(self, tuple(reversed(range(self.dim()))))

    @property
    def mT(self) -> Tensor:
        if self.dim() < 2:
            if self.dim() == 0:  # (torch's deprecated identity)
                return ops.view(self, ())
            raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. "
                               "Got 1-D tensor.")
        return ops.transpose(self, -2, -1)

    def expand(self, *sizes: Any, size: Any = None) -> Tensor:
        return ops.expand(self, *_sizes("expand", sizes, "size", size))

    def expand_as(self, other: Tensor) -> Tensor:
        return ops.expand(self, other.shape)

    def split(self, split_size: Any, dim: int = 0) -> tuple[Tensor, ...]:
        return ops.split(self, split_size, dim)

    def repeat(self, *sizes: Any, repeats: Any = None) -> Tensor:
        return ops.repeat(self, *_sizes("repeat", sizes, "repeats", repeats))

    def tile(self, *sizes: Any, dims: Any = None) -> Tensor:
        sizes = _sizes("tile", sizes, "dims", dims)
        return ops.tile(self, sizes[0] if len(sizes) == 1 else sizes)

    def flip(self, *sizes: Any, dims: Any = None) -> Tensor:
        sizes = _sizes("flip", sizes, "dims", dims)
        return ops.flip(self, sizes[0] if len(sizes) == 1 else sizes)

    # ---- new tensors like this one (dtype kept unless given) --------------------------------
    def new_zeros(self, *sizes: Any, size: Any = None, dtype: Any = None, device: Any = None,
                  requires_grad: bool = False) -> Tensor:
        return ops.zeros(*_sizes("new_zeros", sizes, "size", size), dtype=dtype or self.dtype,
                         device=device, requires_grad=requires_grad)

    def new_ones(self, *sizes: Any, size: Any = None, dtype: Any = None, device: Any = None,
                 requires_grad: bool = False) -> Tensor:
        return ops.ones(*_sizes("new_ones", sizes, "size", size), dtype=dtype or self.dtype,
                        device=device, requires_grad=requires_grad)

    def new_empty(self, *sizes: Any, size: Any = None, dtype: Any = None, device: Any = None,
                  requires_grad: bool = False) -> Tensor:
        return ops.zeros(*_sizes("new_empty", sizes, "size", size), dtype=dtype or self.dtype,
                         device=device, requires_grad=requires_grad)

    def new_full(self, size: Sequence[int], fill_value: Any, *, dtype: Any = None,
                 device: Any = None, requires_grad: bool = False) -> Tensor:
        return ops.full(size, fill_value, dtype=dtype or self.dtype, device=device,
                        requires_grad=requires_grad)

    def new_tensor(self, data: Any, *, dtype: Any = None, device: Any = None,
                   requires_grad: bool = False) -> Tensor:
        return ops.tensor(data, dtype=dtype or self.dtype, device=device,
                          requires_grad=requires_grad)

    def new(self, *args: Any) -> Tensor:
        """The legacy constructor: ``x.new(2, 3)`` (uninitialized in PyTorch: zeros here) or
        ``x.new(data)``, in this tensor's dtype."""
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            return ops.tensor(args[0], dtype=self.dtype)
        return ops.zeros(*args, dtype=self.dtype)

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
        return ops.transpose(self, 0, 1)

    @property
    def mH(self) -> Tensor:
        return ops.transpose(self, -2, -1)

    def dist(self, other: Any, p: float = 2) -> Tensor:
        """The p-norm of ``self - other``."""
        return ops.vector_norm(ops.sub(self, other), p)

    # ---- in-place comparisons: 1 where true, 0 elsewhere, in this tensor's dtype ----------------
    def _compare_(self, compare: Callable[[Any, Any], Tensor], other: Any) -> Self:
        return self._inplace(lambda x: ops.to(compare(x, other), x.dtype), other, check_cast=False)

    def eq_(self, other: Any) -> Self:
        return self._compare_(ops.eq, other)

    def ne_(self, other: Any) -> Self:
        return self._compare_(ops.ne, other)

    def gt_(self, other: Any) -> Self:
        return self._compare_(ops.gt, other)

    def ge_(self, other: Any) -> Self:
        return self._compare_(ops.ge, other)

    def lt_(self, other: Any) -> Self:
        return self._compare_(ops.lt, other)

    def le_(self, other: Any) -> Self:
        return self._compare_(ops.le, other)

    def apply_(self, callable: Callable[[Any], Any]) -> Self:
        """Replace every element by ``callable(element)`` (a Python function of a number, called
        once per element: slow, as in PyTorch), in place."""
        if self.requires_grad:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        values = np.asarray(self.numpy())
        out = np.array([callable(v) for v in values.reshape(-1).tolist()], dtype=self.dtype)
        self[...] = ops.as_tensor(out.reshape(values.shape))
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
        self[tuple(ops.as_tensor(i.astype(np.int64)) for i in idx)] = fill_value
        return self

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

    def is_distributed(self) -> bool:
        """False: a tinyopt tensor lives in one process (torch's answer for a local tensor)."""
        return False

    # ---- in-place shape changes: this tensor becomes a view of its own storage ---------------
    def unsqueeze_(self, dim: int) -> Self:
        return self._rebind_view(lambda x: ops.unsqueeze(x, dim))

    def squeeze_(self, dim: _Dims = None) -> Self:
        return self._rebind_view(lambda x: ops.squeeze(x, dim))

    def t_(self) -> Self:
        return self._rebind_view(ops.t)

    def transpose_(self, dim0: int, dim1: int) -> Self:
        return self._rebind_view(lambda x: ops.transpose(x, dim0, dim1))

    def swapaxes_(self, axis0: int, axis1: int) -> Self:
        return self.transpose_(axis0, axis1)

    def swapdims_(self, dim0: int, dim1: int) -> Self:
        return self.transpose_(dim0, dim1)

    def resize_(self, *sizes: Any, size: Any = None, memory_format: Any = None) -> Self:
        """This tensor with shape ``sizes``: its first elements (in memory order) when the count
        is no larger, else those followed by zeros in new storage.  Concrete tensors only."""
        sizes = _sizes("resize_", sizes, "size", size)
        shape = tuple(int(s) for s in (sizes[0] if len(sizes) == 1 and not isinstance(
            sizes[0], (int, np.integer)) else sizes))
        if self.requires_grad:
            raise RuntimeError("cannot resize variables that require grad")
        flat = np.ascontiguousarray(self.numpy()).reshape(-1)
        n = int(np.prod(shape, dtype=np.int64))
        if n <= flat.size:
            return self._rebind_view(lambda x: ops.as_tensor(flat[:n].reshape(shape)))
        grown = np.zeros(n, self.dtype)
        grown[:flat.size] = flat
        return self._rebind_view(lambda x: ops.as_tensor(grown.reshape(shape)))

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
        return self._rebind_view(lambda x: ops.as_tensor(view))

    def to_sparse(self, sparse_dim: int | None = None) -> Any:
        """A sparse COO tensor of the nonzero entries (``tinyopt.engine.sparse``); its values are
        differentiable in this tensor."""
        from tinyopt.engine.sparse import to_sparse
        return to_sparse(self, sparse_dim)

    def to_dense(self, dtype: Any = None) -> Tensor:
        """This tensor (already dense), or a copy in ``dtype``."""
        return self if dtype is None else ops.to(self, as_dtype(dtype))

    # ---- in place (``x.op_(...)`` is ``x.copy_(x.op(...))`` with PyTorch's rules) ------------
    def add_(self, other: Any, *deprecated: Any, alpha: Any = 1) -> Self:
        """Also torch's deprecated ``add_(alpha, other)`` (makemore's ``p.data.add_(-lr, g)``)."""
        other, alpha = _alpha_first("add_", other, deprecated, alpha)
        return self._inplace(lambda x: ops.add(x, other, alpha=alpha), other)

    def sub_(self, other: Any, *deprecated: Any, alpha: Any = 1) -> Self:
        other, alpha = _alpha_first("sub_", other, deprecated, alpha)
        return self._inplace(lambda x: ops.sub(x, other, alpha=alpha), other)

    subtract_ = sub_

    # ---- random fills (the tinyopt generator, ``manual_seed``) ------------------------------
    def uniform_(self, from_: float = 0.0, to: float = 1.0, *, generator: Any = None) -> Self:
        """Fill with values uniform on [from_, to) (torch's ``from``, a Python keyword)."""
        return ops.fill_random(self, "uniform", from_, to, generator)

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Self:
        return ops.fill_random(self, "normal", mean, std, generator)

    def bernoulli_(self, p: float = 0.5, *, generator: Any = None) -> Self:
        return ops.fill_random(self, "bernoulli", p, 0.0, generator)

    def exponential_(self, lambd: float = 1.0, *, generator: Any = None) -> Self:
        return ops.fill_random(self, "exponential", lambd, 0.0, generator)

    def random_(self, from_: int = 0, to: int | None = None, *, generator: Any = None
                ) -> Self:
        return ops.fill_random(self, "integers", from_, to, generator)


def _sizes(name: str, sizes: tuple, keyword: str, value: Any) -> tuple:
    """The sizes (or dims) of ``x.view(2, 3)``, ``x.view((2, 3))`` or, with torch's keyword,
    ``x.view(size=(2, 3))``."""
    if value is None:
        return sizes
    if sizes:
        raise TypeError(f"{name}() got multiple values for argument '{keyword}'")
    return (value,)


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
