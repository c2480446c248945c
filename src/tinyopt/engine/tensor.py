"""Tensor: a value or a node of a lazy computation graph; Parameter: a leaf that owns its storage.

Three kinds of tensors, one class:

- *Concrete* tensors hold a numpy array (``op == "input"``): what ``to.tensor``, ``to.zeros``,
  data batches, ``p.grad`` and ``p.data`` are.  An op whose sources are all concrete and which
  needs no gradient runs at once (as in eager PyTorch) and gives a concrete tensor; a view
  (``x[1:3]``, ``x.view(...)``, ``x.t()``) shares the array, so writing into it writes ``x``.
- *Parameters* (``op == "param"``) own their storage (``_data``) and gradient (``_grad``).
- *Graph nodes* record an op over sources and compute nothing: an op over a Parameter, or over a
  tensor that requires grad.  ``numpy()``, ``item()`` and ``backward()`` realize them: the engine
  compiles the graph that reaches them into a plan (cached by the graph's structure) and runs it.

After a realization, nodes that the program still holds keep their value, as they would in eager
PyTorch: ``out = model(x); loss.backward(); opt.step(); out.argmax(1)`` reads the output the loss
was computed from, not a recomputation with the updated weights.  ``backward()`` frees the graph
(its held nodes become values; backpropagating through them again raises, as in PyTorch, unless
``retain_graph=True``).

Storage is torch's (``engine/storage.py``): a view (``x[1:3]``, ``x.view(...)``, ``x.t()``,
``x.diagonal()``, ``x.detach()``...) shares its base's storage and version counter, whether
the two are concrete or graph nodes.  In-place ops (``add_``, ``x[i] = v``, ``p -= lr * g``...)
follow PyTorch's rules (``engine/inplace.py``): without autograd they write the new values into
the memory at once; with autograd the written tensor's base becomes a new graph node (a write
through a view is a ``view_scatter`` into the base) and every view of it is regenerated, while
nodes built before keep the versions they read; torch's errors guard leaves, multi-output and
``no_grad`` views, overlapping memory and values saved for backward (``engine/saved.py``).

Inside the library, storage is read and written as numpy through ``t.value`` (the engine's node
field, ``engine/node.py``: a concrete tensor's array, a Parameter's storage) and ``p._grad``; a
Parameter's storage is rebound through ``p._data`` (its slots follow); the public
``.data``/``.grad``/``.numpy()`` give Tensors and arrays sharing that storage.
"""

from __future__ import annotations

import itertools
import math
import numbers
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, SupportsIndex, overload

import numpy as np

from tinyopt.engine import arena, grad_mode, ops, shared_memory
from tinyopt.engine.device import CPU, check_device
from tinyopt.engine.device import device as _device
from tinyopt.engine.dtypes import (FLOATS, SUPPORTED, as_dtype, bool_, category, default_dtype_for,
                                   float32, grad_dtype, int64, is_low, scalar_dtype, stored_scalar,
                                   tensor_type_dtype, tensor_type_name, torch_name)
from tinyopt.engine.hooks import RemovableHandle
from tinyopt.engine.node import Node
from tinyopt.engine.row_sparse import forget_rows
from tinyopt.engine.storage import ALIAS, DATA, note_view, version_counter
from tinyopt.engine.tensor_api import TensorMethods

if TYPE_CHECKING:
    from typing_extensions import Self

    from tinyopt.engine.slot import Slot

_ids = itertools.count(1)
_new = object.__new__

LEAF_OPS = frozenset(("input", "param", "freed"))
"""Ops of graph leaves, bound per run: concrete values, Parameters, and values whose graph
``backward()`` freed."""
CONCRETE = frozenset(("input", "freed"))

_SECOND_BACKWARD = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through "
    "the graph a second time or if you need to access saved tensors after calling backward.")


class _Mutations:
    """``last``: the id given by the latest in-place modification (0 before any).  Graphs whose
    nodes are all newer skip the version check."""
    last = 0


MUTATIONS = _Mutations()


_OPERANDS: tuple[type, ...] = (numbers.Number, np.ndarray, np.generic, list, tuple)  # + Tensor


class Size(tuple):
    """``torch.Size``: what ``Tensor.size()`` returns, a tuple of ints."""

    def numel(self) -> int:
        """The number of elements of a tensor of this shape (the product of the sizes; 1 for
        ``()``)."""
        return math.prod(self)

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"


_ShapeArg = Any  # ints, or one sequence of ints (``view(2, 3)`` or ``view((2, 3))``)


class Tensor(Node, TensorMethods):
    """A tensor (see the module docstring).

    The named methods of the tensor API (math, shape, selection and their in-place variants)
    are declared in :class:`tinyopt.engine.tensor_api.TensorMethods` and, for those that are
    just their op function, written from the API table into ``engine/op_methods.py``; the
    engine's node fields (``op``, ``srcs``, ``attrs``, ``value``, ``node_id``...) are declared in
    :class:`tinyopt.engine.node.Node`; this class holds storage, realization, autograd and the
    operators.

    ``to.Tensor(2, 3)`` makes a float32 tensor of that shape (zeros), ``to.Tensor([1, 2])`` one
    from data, as ``torch.Tensor`` does; most code uses ``to.tensor``/``to.zeros``/... instead.
    """

    __slots__ = ("shape", "dtype", "requires_grad", "name", "_grad", "_base", "_hooks",
                 "_retains_grad", "_post_hooks", "__weakref__")
    __array_priority__ = 1000  # so ``ndarray + Tensor`` dispatches to Tensor.__radd__

    shape: tuple[int, ...]
    dtype: np.dtype
    requires_grad: bool
    name: str
    _grad: Any
    _base: Tensor | None              # the tensor whose storage this one views
    _hooks: dict[int, Callable[[Tensor], Tensor | None]] | None
    _retains_grad: bool
    _post_hooks: dict[int, Callable[[Tensor], None]] | None

    def __init__(self, *data: Any, dtype: Any = None, device: Any = None,
                 requires_grad: bool = False) -> None:
        check_device(device)
        if len(data) == 1 and not isinstance(data[0], numbers.Integral):
            arr = np.array(_to_array(data[0], dtype or float32), copy=True)
        else:
            arr = np.zeros(tuple(int(s) for s in data), dtype=as_dtype(dtype or float32))
        _init(self, "input", (), (), arr.shape, arr.dtype, False, arr)
        if requires_grad:
            self.requires_grad_()

    # ---- metadata ---------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """The number of dimensions (``len(shape)``)."""
        return len(self.shape)

    def dim(self) -> int:
        """The number of dimensions (``len(shape)``); ``ndimension()`` is the same."""
        return len(self.shape)

    ndimension = dim

    def numel(self) -> int:
        """The number of elements (the product of the shape); ``nelement()`` is the same."""
        return math.prod(self.shape)

    nelement = numel

    @overload
    def size(self) -> Size: ...
    @overload
    def size(self, dim: int) -> int: ...

    def size(self, dim: int | None = None) -> Size | int:
        """The shape as a ``Size``, or the size of dimension ``dim`` (negative counts from the
        end)."""
        if dim is None:
            return Size(self.shape)
        return self.shape[_dim_index("size", dim, self.ndim)]

    @property
    def device(self) -> _device:
        """Always ``device("cpu")``: tinyopt runs on the CPU."""
        return CPU

    @property
    def is_cuda(self) -> bool:
        """Always False (no GPU)."""
        return False

    is_sparse = False
    is_quantized = False
    is_meta = False

    def get_device(self) -> int:
        """-1, PyTorch's answer for a CPU tensor."""
        return -1

    def element_size(self) -> int:
        """Bytes per element of this dtype."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (``numel() * element_size()``)."""
        return self.numel() * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element of this dtype (as ``element_size()``)."""
        return self.dtype.itemsize

    def is_floating_point(self) -> bool:
        """Whether the dtype is a floating-point one (float16, bfloat16, float32, float64)."""
        return self.dtype.kind == "f" or is_low(self.dtype)  # (bfloat16's numpy kind is "V")

    def is_signed(self) -> bool:
        """False for bool, uint8 and uint16/32/64, True for every other dtype (as torch)."""
        return self.dtype.kind not in "ub"

    def is_complex(self) -> bool:
        """Always False: tinyopt has no complex dtypes."""
        return False

    def is_contiguous(self, memory_format: Any = None) -> bool:
        """Whether the elements lie in row-major order in memory (a view's in its base's, as
        torch's strides say; a graph node that is not a view is computed contiguous).  An empty
        tensor is, as in torch."""
        if 0 in self.shape:
            return True
        expected = self.dtype.itemsize
        strides = (_INPLACE or _inplace_module()).geometry(self)[1]
        for n, s in reversed(list(zip(self.shape, strides))):
            if n != 1 and s != expected:
                return False
            expected *= n
        return True

    def stride(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The strides in elements, per dimension (or of dimension ``dim``), as
        ``torch.Tensor.stride`` (a view's in its base's memory)."""
        strides = tuple(s // self.dtype.itemsize
                        for s in (_INPLACE or _inplace_module()).geometry(self)[1])
        return strides if dim is None else strides[_dim_index("stride", dim, self.ndim)]

    def storage_offset(self) -> int:
        """Where this tensor starts in its storage, in elements."""
        return (_INPLACE or _inplace_module()).geometry(self)[2] // self.dtype.itemsize

    @property
    def is_leaf(self) -> bool:
        """True for tensors that do not require grad and for those the user created (PyTorch's
        convention); False for the results of ops that record gradients."""
        return not self.requires_grad or self.op in ("input", "param")

    @property
    def grad_fn(self) -> _GradFn | None:
        """The op that made this tensor, for tensors that require grad and are not leaves."""
        if self.is_leaf:
            return None
        t = self
        while t.op == "view_scatter" and not t.attrs[1]:  # (a write autograd does not see)
            t = t.srcs[0]
        return _GradFn(t.attrs[0] if t.op == "freed" and t.attrs else t.op)

    @property
    def _version(self) -> int:
        """How many times this tensor's storage was modified in place (torch's version counter,
        shared by the base, its views and its ``detach()`` aliases)."""
        info = getattr(self, "view_info", None)
        if info is not None and info.counter is not None:
            return info.counter.version
        s = getattr(self, "shared_storage", None) or getattr(_root(self), "shared_storage", None)
        return 0 if s is None else s.version

    def _is_view(self) -> bool:
        """Whether this tensor is a view of another (torch's ``Tensor._is_view``)."""
        info = getattr(self, "view_info", None)
        return info is not None and not (info.alias and not info.steps)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __hash__(self) -> int:
        return id(self)

    def __contains__(self, element: Any) -> bool:
        return bool((self == element).any().item())

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in "iub" or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __format__(self, format_spec: str) -> str:
        if self.ndim == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __repr__(self) -> str:
        from tinyopt.engine.printing import tensor_repr
        return tensor_repr(self._printable(), self._repr_suffixes())

    def _printable(self) -> np.ndarray:
        return np.asarray(self.numpy())

    def _repr_suffixes(self) -> list[str]:
        suffixes = []
        default = float32 if self.dtype.kind == "f" else int64 if self.dtype.kind in "iu" \
            else bool_
        if self.dtype != default:
            suffixes.append(f"dtype={torch_name(self.dtype)}")
        if self.grad_fn is not None:
            suffixes.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            suffixes.append("requires_grad=True")
        return suffixes

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        arr = np.array(self.numpy())
        return (_rebuild, (arr, self.requires_grad))

    def __deepcopy__(self, memo: dict) -> Tensor:
        t = tensor(np.array(self.numpy()), requires_grad=self.requires_grad and self.is_leaf)
        memo[id(self)] = t
        return t

    # ---- realization ------------------------------------------------------------------------
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """This tensor's value as a numpy array that shares its storage (computed now if it is
        a graph node)."""
        v = self.value
        if v is not None:
            return v
        from tinyopt.engine.realize import realize
        return realize([self])[0]

    def item(self) -> int | float | bool:
        """The value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to "
                               f"Scalar")
        return self.numpy().item()  # (numpy's item() reads the one element of any shape)

    def tolist(self) -> Any:
        """The value as nested Python lists of numbers (a number for a 0-d tensor)."""
        return self.numpy().tolist()

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of this tensor's memory (no copy): ``torch.from_dlpack(t)``,
        ``torch.as_tensor(t)``, ``np.from_dlpack(t)`` share it.  A graph node is computed
        first; a tensor that requires grad is refused, as torch refuses it."""
        if self.requires_grad:
            raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
        kwargs: dict[str, Any] = {k: v for k, v in (("stream", stream), ("max_version", max_version),
                                                    ("dl_device", dl_device), ("copy", copy))
                                  if v is not None}
        return self.numpy().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # (kDLCPU, device 0)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self.numpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        return np.array(arr) if copy else arr

    # ---- autograd ---------------------------------------------------------------------------
    def backward(self, gradient: Any = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: Any = None) -> None:
        """Add d(self)/dx into ``x.grad`` of every leaf that requires grad and that ``self``
        depends on (of ``inputs`` only, when given).

        ``gradient`` is d(loss)/d(self) for a non-scalar ``self``.  Gradients accumulate across
        calls until reset (``zero_grad()``).  The graph is freed afterwards unless
        ``retain_graph=True``.
        """
        autograd, realize = _BACKWARD or _backward_modules()
        if (gradient is None and inputs is None and not create_graph and self.requires_grad
                and self.numel() == 1 and not autograd.WATCHED.count
                and not autograd.POST_HOOKS.count):  # the common case: straight to the plan
            realize([], loss=self, retain_graph=bool(retain_graph))
            return
        autograd.run_backward([self], None if gradient is None else [gradient],
                              retain_graph=bool(retain_graph or create_graph), inputs=inputs,
                              create_graph=create_graph)

    def detach(self) -> Tensor:
        """This tensor's value cut from the graph: a concrete tensor sharing its storage and
        version counter (a graph node is computed now), so writing into it writes this one."""
        if self.op == "param":
            return _Alias._of(self, ALIAS)
        t = make_node("input", (), (), self.shape, self.dtype, False, _shared_value(self))
        note_view(t, self, None, ALIAS)
        return t

    def detach_(self) -> Self:
        """Detach in place: this tensor becomes a leaf holding its current value, with
        ``requires_grad=False``."""
        if self.op not in LEAF_OPS:
            arr = self.numpy()
            _freeze(self, arr, "input")
        self.requires_grad = False
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        """Record gradients for this leaf (``x.grad`` after ``backward``)."""
        if self.op not in LEAF_OPS and not (self.requires_grad and requires_grad):
            if requires_grad or self.requires_grad:
                raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        if requires_grad and self.dtype not in FLOATS and not is_low(self.dtype):
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if self.op == "freed":
            self.op = "input"
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` after ``backward`` (leaves always
        keep theirs)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.is_leaf:
            return
        self._retains_grad = True
        from tinyopt.engine.autograd import WATCHED
        WATCHED.count += 1

    @property
    def retains_grad(self) -> bool:
        """Whether ``retain_grad()`` was called on this non-leaf tensor (its ``.grad`` is then
        kept)."""
        return getattr(self, "_retains_grad", False)

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor
        replaces the gradient (for a leaf, before it is accumulated into ``.grad``)."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        hooks = getattr(self, "_hooks", None)
        if hooks is None:
            hooks = self._hooks = {}
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        from tinyopt.engine.autograd import WATCHED  # (a leaf's too: backward takes the hooked path)
        WATCHED.count += 1
        return handle

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]
                                           ) -> RemovableHandle:
        """Call ``hook(p)`` after ``backward`` has accumulated a new gradient into ``p.grad``
        (``torch.Tensor.register_post_accumulate_grad_hook``)."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if not self.is_leaf:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        hooks = getattr(self, "_post_hooks", None)
        if hooks is None:
            hooks = self._post_hooks = {}
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        from tinyopt.engine.autograd import POST_HOOKS
        POST_HOOKS.count += 1
        return handle

    @property
    def grad(self) -> Tensor | None:
        """The gradient accumulated by ``backward`` (leaves that require grad, and non-leaves
        after ``retain_grad()``), a Tensor sharing the gradient's storage; or None."""
        g = getattr(self, "_grad", None)
        return None if g is None else _grad_tensor(self, g)

    @grad.setter
    def grad(self, value: Any) -> None:
        if value is None:
            self._grad = None
            return
        arr = _grad_array(self, value)
        self._grad = arr if arr.dtype == self.dtype else arr.astype(self.dtype)

    @grad.deleter
    def grad(self) -> None:
        self.grad = None

    @property
    def data(self) -> Tensor:
        """This tensor's value, cut from autograd, sharing the storage (``p.data.add_(x)``
        writes into ``p``) but not the version counter (torch's ``.data``)."""
        t = make_node("input", (), (), self.shape, self.dtype, False, _shared_value(self))
        note_view(t, self, None, DATA)
        return t

    @data.setter
    def data(self, value: Any) -> None:
        arr = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
        if self.op not in CONCRETE:
            raise RuntimeError("assigning .data is supported on concrete tensors and Parameters")
        self.value = np.array(arr, dtype=arr.dtype if isinstance(value, Tensor) else self.dtype)
        self.shape = self.value.shape
        self.dtype = self.value.dtype
        if getattr(self, "view_info", None) is not None:  # new memory: no longer a view of its base
            self.view_info = self._base = self.shared_storage = None
        _mark_mutated(self)

    def _grad_dest(self) -> np.ndarray:
        """Storage a new gradient may be written into directly (the caller overwrites it all)."""
        self._grad = np.empty(self.shape, dtype=grad_dtype(self.dtype))
        return self._grad

    def _accumulate_grad(self, g: np.ndarray) -> None:
        """PyTorch's rule: the first gradient is written, later ones are added, until reset."""
        if self._grad is None:
            np.copyto(self._grad_dest(), g)
        else:
            np.add(self._grad, g, out=self._grad)

    # ---- in place ---------------------------------------------------------------------------
    def _inplace(self, build: Callable[[Tensor], Tensor], *operands: Any,
                 check_cast: bool = True) -> Self:
        """Make this tensor hold ``build(self)``: an op over it (and ``operands``) of the same
        shape, with PyTorch's in-place rules (``engine/inplace.py``)."""
        (_INPLACE or _inplace_module()).write(self, build, operands, check_cast)
        return self

    def _fill_inplace(self, key: Any, value: Any) -> Tensor:
        """``self[key] = value`` (key ``...`` for all of it) for a number or an array-like; one
        value may fill memory that several elements share (torch's ``fill_``/``zero_`` of an
        expanded tensor)."""
        from tinyopt.engine.ops import indexing
        return indexing.setitem(self, key, value, overlap_ok=True)

    def __setitem__(self, key: Any, value: Any) -> None:
        from tinyopt.engine.ops import indexing
        indexing.setitem(self, key, value)

    def zero_(self) -> Self:
        """Fill with zeros in place; returns this tensor."""
        self._fill_inplace(Ellipsis, 0)
        return self

    def fill_(self, value: Any) -> Self:
        """Fill with ``value`` (a number or a 0-d tensor) in place; returns this tensor."""
        if isinstance(value, Tensor):
            if value.ndim:
                raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got "
                                   f"tensor with {value.ndim} dimensions.")
            self[...] = value  # (torch: a tensor value refuses memory several elements share)
            return self
        if isinstance(value, numbers.Number):
            stored_scalar(value, self.dtype)  # (torch's overflow error: fill_(300) of uint8)
        self._fill_inplace(Ellipsis, value)
        return self

    def copy_(self, src: Any, non_blocking: bool = False) -> Self:
        """Copy ``src`` (broadcast to this shape, cast to this dtype) into this tensor; with
        autograd the old value's gradient is zero (torch's ``CopyBackwards``)."""
        scatter = (_INPLACE or _inplace_module()).scatter
        return self._inplace(lambda x: scatter(x, ops.expand(ops.to(ops.as_tensor(src), x.dtype),
                                                             x.shape)), src, check_cast=False)

    def _unary_inplace(self, fn: Callable[..., Tensor], *args: Any, **kwargs: Any) -> Self:
        return self._inplace(lambda x: fn(x, *args, **kwargs), *args, *kwargs.values())

    def _rebind_view(self, build: Callable[[Tensor], Tensor]) -> Self:
        (_INPLACE or _inplace_module()).reshape(self, build)
        return self

    # ---- the graph API (ops defined in tinyopt.engine.ops) ----------------------------------
    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)`` or ``to(other)``: this tensor with
        that dtype (itself when nothing changes).  The only device is the CPU."""
        if not kwargs and len(args) == 1 and isinstance(args[0], np.dtype):  # internal callers
            # (``linear``'s ``bias.to(x.dtype)`` on every step: no cast, no call)
            return self if args[0] is self.dtype else ops.to(self, as_dtype(args[0]))
        dtype = kwargs.pop("dtype", None)
        dev = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        copy = kwargs.pop("copy", False)
        kwargs.pop("memory_format", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, (_device, str)) and not _is_dtype_name(a):
                dev = a
            elif a is not None:
                dtype = a
        check_device(dev)
        out = self if dtype is None else ops.to(self, as_dtype(dtype))
        return out.clone() if copy and out is self else out

    def cpu(self, *, memory_format: Any = None) -> Tensor:
        """This tensor itself (it is on the CPU already)."""
        return self

    def cuda(self, device: Any = None, non_blocking: bool = False, *,
             memory_format: Any = None) -> Tensor:
        """Raises RuntimeError: tinyopt runs on the CPU only (the message says what to use
        instead)."""
        check_device("cuda")
        return self

    def type(self, dtype: Any = None, non_blocking: bool = False) -> Any:
        """The legacy type name (``"torch.FloatTensor"``), or this tensor cast to ``dtype`` (a
        dtype or such a name)."""
        if dtype is None:
            return tensor_type_name(self.dtype)
        if isinstance(dtype, str) and tensor_type_dtype(dtype) is not None:
            return ops.to(self, tensor_type_dtype(dtype))
        if isinstance(dtype, _TensorTypeMeta):
            return ops.to(self, dtype._dtype)  # type: ignore[attr-defined]
        return ops.to(self, as_dtype(dtype))

    def type_as(self, other: Tensor) -> Tensor:
        """This tensor cast to ``other``'s dtype."""
        return ops.to(self, other.dtype)

    def clone(self, *, memory_format: Any = None) -> Tensor:
        """A copy with its own storage; gradients flow back to this tensor."""
        return ops.clone(self)

    def contiguous(self, *, memory_format: Any = None) -> Tensor:
        """This tensor if it is contiguous, else a contiguous copy (gradients flow back)."""
        return self if self.is_contiguous() else ops.contiguous(self)

    def pin_memory(self, device: Any = None) -> Tensor:
        """This tensor itself: pinned memory only matters for GPU transfers."""
        return self

    def share_memory_(self) -> Self:
        """Move this tensor's storage to shared memory (``engine/shared_memory.py``): processes
        forked afterwards write into the same memory, and spawned ones receive it by handle
        through ``tinyopt.multiprocessing``.  Nothing happens if it is shared already."""
        shared_memory.register_reductions()
        arr = self.value
        if arr is None:
            raise RuntimeError("share_memory_(): this tensor is a node of a graph, computed on "
                               "demand; call it on a leaf tensor (or on .detach().clone())")
        if shared_memory.is_shared(arr):
            return self
        if getattr(self, "_base", None) is not None:
            raise RuntimeError("share_memory_(): this tensor views another tensor's storage "
                               "(a slice, view or transpose of it); call share_memory_() on the "
                               "tensor it views, before taking views of it")
        # its whole-storage aliases (``.data``, ``detach()``) follow it; any other view of the
        # storage (or an array from .numpy()) holds the array and would keep the old memory, so
        # refuse (references: this tensor's, ``arr``, getrefcount's argument, the aliases')
        storage = getattr(self, "shared_storage", None)
        aliases = [v for v in (storage.views() if storage is not None else ())
                   if v.view_info.alias and not v.view_info.steps and v.value is not None]
        held = sum(v.value is arr or v.value.base is arr for v in aliases)
        if sys.getrefcount(arr) > 3 + held:
            raise RuntimeError("share_memory_(): views of this tensor (or other tensors or "
                               "arrays sharing its storage) are alive and would keep the old "
                               "memory; call share_memory_() before taking views of it")
        self.value = shared_memory.shared_copy(arr)
        for v in aliases:
            v.value = self.value.view()
        return self

    def is_shared(self) -> bool:
        """Whether the storage is in shared memory (``share_memory_()``)."""
        arr = self.value
        return arr is not None and shared_memory.is_shared(arr)

    def is_pinned(self, device: Any = None) -> bool:
        """Always False (no GPU, nothing is pinned)."""
        return False

    # arithmetic operators
    def __add__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.sub(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.sub(other, self)

    def __mul__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.mul(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.mul(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.div(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.div(other, self)

    def __floordiv__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.floor_divide(other, self)

    def __mod__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.remainder(self, other)

    def __rmod__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.remainder(other, self)

    def __pow__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.pow(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.pow(other, self)

    def __matmul__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.matmul(other, self)

    def __neg__(self) -> Tensor:
        return ops.neg(self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return ops.abs(self)

    def __invert__(self) -> Tensor:
        return ops.bitwise_not(self)

    def __and__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.bitwise_and(self, other)

    def __rand__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.bitwise_and(other, self)

    def __or__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.bitwise_or(self, other)

    def __ror__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.bitwise_or(other, self)

    def __xor__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.bitwise_xor(self, other)

    def __rxor__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.bitwise_xor(other, self)

    # comparisons give bool tensors
    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.eq(self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.ne(self, other)

    def __lt__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.lt(self, other)

    def __le__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.le(self, other)

    def __gt__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.gt(self, other)

    def __ge__(self, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return ops.ge(self, other)

    # in-place operators
    def __iadd__(self, other: Any) -> Self:
        return self.add_(other)

    def __isub__(self, other: Any) -> Self:
        return self.sub_(other)

    def __imul__(self, other: Any) -> Self:
        return self.mul_(other)

    def __itruediv__(self, other: Any) -> Self:
        return self.div_(other)

    def __ifloordiv__(self, other: Any) -> Self:
        return self._inplace(lambda x: ops.floor_divide(x, other), other)

    def __imod__(self, other: Any) -> Self:
        return self._inplace(lambda x: ops.remainder(x, other), other)

    def __ipow__(self, other: Any) -> Self:
        return self.pow_(other)

    def __iand__(self, other: Any) -> Self:
        return self._inplace(lambda x: ops.bitwise_and(x, other), other)

    def __ior__(self, other: Any) -> Self:
        return self._inplace(lambda x: ops.bitwise_or(x, other), other)

    def __ixor__(self, other: Any) -> Self:
        return self._inplace(lambda x: ops.bitwise_xor(x, other), other)

    def __getitem__(self, key: Any) -> Tensor:
        return ops.getitem(self, key)

    if TYPE_CHECKING:
        # ``__array_priority__`` makes numpy defer to these; declared for type checkers.
        def __array_ufunc__(self, *args: Any, **kwargs: Any) -> Any: ...


# exact types first: numbers.Number is an ABC, ~0.3 us a check on every operator
_OPERANDS = (Tensor, float, int) + _OPERANDS


def _init(t: Tensor, op: str, srcs: tuple, attrs: tuple, shape: tuple, dtype: np.dtype,
          requires_grad: bool, value: np.ndarray | None) -> None:
    t.op = op
    t.srcs = srcs
    t.attrs = attrs
    t.shape = tuple(map(int, shape))
    t.dtype = dtype
    t.requires_grad = requires_grad
    t.name = ""
    t.value = value
    t.node_id = next(_ids)
    t._grad = None


_BACKWARD: tuple | None = None  # (engine.autograd, realize.realize) once loaded
_INPLACE: Any = None  # engine.inplace once loaded (it imports this module)


def _inplace_module() -> Any:
    """``engine.inplace``, loaded on the first in-place write or view geometry."""
    global _INPLACE
    from tinyopt.engine import inplace
    _INPLACE = inplace
    return inplace


def _backward_modules() -> tuple:
    """``Tensor.backward``'s imports, once (they import this module)."""
    global _BACKWARD
    from tinyopt.engine import autograd
    from tinyopt.engine.realize import realize
    _BACKWARD = (autograd, realize)
    return _BACKWARD


def int_shape(shape) -> tuple[int, ...]:
    """``shape`` as a tuple of Python ints (numpy integers converted), itself when it is one
    already: a loop over a few dims costs a quarter of the conversion it spares (every graph
    node's shape, every view's target shape passes here)."""
    for d in shape:
        if type(d) is not int:
            return tuple(map(int, shape))
    return shape if type(shape) is tuple else tuple(shape)


def make_node(op: str, srcs: tuple, attrs: tuple, shape: tuple, dtype: np.dtype,
              requires_grad: bool = False, value: np.ndarray | None = None) -> Tensor:
    """A new tensor (graph node or concrete leaf) without going through the user constructor
    (``_init`` inlined: every graph node is made here).  ``engine.op.node`` records an op's node
    with its checks; this is for the engine's own rewrites (fusion, plan specs)."""
    shape = int_shape(shape)
    t = _new(Tensor)
    t.op = op
    t.srcs = srcs
    t.attrs = attrs
    t.shape = shape
    t.dtype = dtype
    t.requires_grad = requires_grad
    t.name = ""
    t.value = value
    t.node_id = next(_ids)
    t._grad = None
    # set, not left unset: ``getattr(t, "_base", None)`` on an unset slot raises and catches
    # an AttributeError (~0.15 us), and the engine asks these of every node it sorts or views
    t._base = t.view_info = t.shared_storage = None
    return t


def leaf(arr: np.ndarray) -> Tensor:
    """A concrete tensor holding ``arr`` itself (no copy)."""
    return make_node("input", (), (), arr.shape, arr.dtype, False, arr)


class _GradFn:
    """What ``t.grad_fn`` gives: the name of the op that made ``t`` (``MulBackward0``)."""

    __slots__ = ("op",)

    def __init__(self, op: str):
        self.op = op

    def name(self) -> str:
        if self.op == "view_scatter":
            return "CopySlices"  # (torch's name for a write through a view)
        return "".join(p.capitalize() for p in self.op.split("_")) + "Backward0"

    def __repr__(self) -> str:
        return f"<{self.name()} object>"


def _rebuild(arr: np.ndarray, requires_grad: bool) -> Tensor:
    return tensor(arr, requires_grad=requires_grad)


# ---- storage and in-place machinery ----------------------------------------------------------
def _root(t: Tensor) -> Tensor:
    """The tensor owning the storage ``t`` views (itself when it owns it)."""
    base = getattr(t, "_base", None)
    return t if base is None else base


def _shared_value(t: Tensor) -> np.ndarray:
    """``t``'s value, as a view of its base's memory when it is a view of concrete memory (an
    alias of it then shares that memory too); a graph node is computed."""
    base = getattr(t, "_base", None)
    if getattr(t, "view_info", None) is not None and base is not None and base.op in LEAF_OPS:
        return (_INPLACE or _inplace_module()).alias_value(t)
    return t.numpy()


def _mark_mutated(t: Tensor) -> None:
    """Record a write into ``t``'s memory (see ``graph.check_versions``) and bump its storage's
    version (a ``.data`` alias counts its own)."""
    stamp = next(_ids)
    root = _root(t)
    root.write_stamp = stamp
    version_counter(t).bump(stamp)
    if root is not t:
        t.write_stamp = stamp
    MUTATIONS.last = stamp


def _freeze(t: Tensor, value: np.ndarray, op: str) -> None:
    """Turn node ``t`` into a leaf holding ``value``: ``"input"`` (a concrete tensor) or
    ``"freed"`` (a value whose graph backward freed)."""
    t.attrs = (t.op,) if op == "freed" else ()  # grad_fn's name
    t.op = op
    t.srcs = ()
    t.value = value


def _check_result(t: Tensor, new: Tensor, check_cast: bool) -> None:
    if new.shape != t.shape:
        raise RuntimeError(f"output with shape {list(t.shape)} doesn't match the broadcast shape "
                           f"{list(new.shape)}")
    if check_cast and category(new.dtype) > category(t.dtype):
        raise RuntimeError(f"result type {_type_word(new.dtype)} can't be cast to the desired "
                           f"output type {_type_word(t.dtype)}")


def _type_word(d: np.dtype) -> str:
    return {"float32": "Float", "float64": "Double", "int64": "Long", "int32": "Int",
            "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}[d.name]


def _grad_array(t: Tensor, value: Any) -> np.ndarray:
    """``value`` (a Tensor or array-like) checked as a gradient for ``t``."""
    if isinstance(value, Tensor):
        value = value.numpy()
    arr = np.asarray(value)
    if arr.shape != t.shape:
        raise RuntimeError(f"assigned grad has data of a different size: the tensor has shape "
                           f"{t.shape}, the gradient {arr.shape}")
    return arr


def _grad_tensor(owner: Tensor, g: np.ndarray) -> Tensor:
    """The Tensor ``owner.grad`` returns for gradient storage ``g`` (one per storage array, so
    ``p.grad`` is the same object until the storage changes)."""
    cached = getattr(owner, "_grad_t", None) if isinstance(owner, Parameter) else None
    if cached is not None and cached.value is g:
        return cached
    t = leaf(g)
    if isinstance(owner, Parameter):
        owner._grad_t = t
    return t


class _Alias(Tensor):
    """A concrete tensor whose storage is another tensor's: ``p.data``, ``p.detach()``.  It
    follows the owner's storage when an optimizer moves it."""

    __slots__ = ("_owner_ref",)
    _owner_ref: Tensor

    @staticmethod
    def _of(owner: Tensor, alias: str = "") -> Tensor:
        """An alias of Parameter ``owner``: a user's (``alias``: ``ALIAS`` for ``detach()``,
        ``DATA`` for ``.data``), recorded as a view of its storage, or (``""``) the library's own
        short-lived window for computing a plain write."""
        t = _new(_Alias)
        _init(t, "input", (), (), owner.shape, owner.dtype, False, None)
        t._owner_ref = owner
        if not alias:
            t._base = owner
        else:
            note_view(t, owner, None, alias)
        return t

    @property  # type: ignore[override]
    def value(self) -> np.ndarray:
        """(:class:`~tinyopt.engine.node.Node`'s ``value``) the owner's storage."""
        return self._owner_ref.value

    @value.setter
    def value(self, value: np.ndarray | None) -> None:
        if value is not None:
            raise AttributeError("the storage of an alias is its owner's")

    def share_memory_(self) -> Self:
        self._owner_ref.share_memory_()  # (the storage is the owner's: it follows)
        return self


# ---- Parameter --------------------------------------------------------------------------------
class Parameter(Tensor):
    """A leaf tensor that requires grad (``torch.nn.Parameter``).

    ``Parameter(t)`` of a Tensor shares ``t``'s storage, as in torch (``nn.Parameter(
    to.from_numpy(arr))`` is ``arr``'s memory; a non-contiguous ``t`` is copied); of an array or
    other data (``Parameter(np.empty(shape))``, as the layers make theirs), it holds a copy, as
    ``to.tensor`` does, placed end to end with the previous one (``engine/arena.py``).  The
    storage never moves: an optimizer steps it where it is, and a numpy array taken from ``p``
    (``p.detach().numpy()``) stays in sync.  ``p.data`` and ``p.grad`` are Tensors sharing the parameter's
    storage and gradient; assigning a same-shaped value to ``p.data`` copies into the storage.
    Inside the library the storage is ``p.value`` (rebound through ``p._data``) and the gradient
    ``p._grad`` (numpy).

    Slots (``engine/slot.py``): the flat buffers of optimizers and DDP hold the parameter in a
    :class:`~tinyopt.engine.slot.Slot` (``p.slot``: the newest); every change of ``_data`` or
    ``_grad`` reaches all of them at once, and a fresh gradient (``backward`` into a None
    ``grad``) is written into the newest slot's part of its flat gradient buffer.  A gradient
    assigned as a Tensor (``p.grad = t``) is that tensor (``p.grad is t``), as in torch.
    """

    __slots__ = ("_arr", "_g", "_slots", "_grad_t")
    _grad_t: Tensor | None

    # Parameters compare by identity, so ``p in params`` and ``list.index`` never build graph
    # nodes; ``p.eq(x)`` still compares elementwise.
    __eq__ = object.__eq__  # type: ignore[assignment]
    __ne__ = object.__ne__  # type: ignore[assignment]
    __hash__ = object.__hash__

    def __init__(self, data: Any = None, requires_grad: bool = True, dtype: Any = None):
        if data is None:
            arr = np.empty((0,), dtype=float32)
        elif isinstance(data, Tensor):
            arr = data.detach().numpy()  # (its storage, as torch's Parameter(t))
        else:  # a copy, as ``to.tensor``, in the arena: end to end with the previous one
            src = _to_array(data, dtype)
            arr = arena.empty(src.shape, src.dtype)
            np.copyto(arr, src)
        if dtype is not None:
            arr = arr.astype(as_dtype(dtype), copy=False)
        arr = np.asarray(arr, order="C")  # keeps 0-d (ascontiguousarray makes it 1-d)
        if requires_grad and arr.dtype not in FLOATS and not is_low(arr.dtype):
            raise RuntimeError(f"Only Tensors of floating point dtype can require gradients, "
                               f"got {arr.dtype}")
        self._slots: tuple = ()
        self._g = None
        _init(self, "param", (), (), arr.shape, arr.dtype, bool(requires_grad), None)
        self._arr = arr
        self._grad_t = None

    # ---- storage and slots ----------------------------------------------------------------------
    @property
    def _data(self) -> np.ndarray:
        return self._arr

    @_data.setter
    def _data(self, arr: np.ndarray) -> None:
        slots = self._live_slots() if self._slots else ()
        for slot in slots:
            slot.check_data(arr)
        self._arr = arr
        for slot in slots:
            slot.bind_data(arr)

    @property  # type: ignore[override]
    def value(self) -> np.ndarray:
        """(:class:`~tinyopt.engine.node.Node`'s ``value``) the parameter's storage, its
        ``_data``; the engine's writes of a new array rebind ``_data`` (the slots follow)."""
        return self._arr

    @value.setter
    def value(self, value: np.ndarray | None) -> None:
        if value is not None:
            self._data = value

    @property  # type: ignore[override]
    def _grad(self) -> np.ndarray | None:
        return self._g

    @_grad.setter
    def _grad(self, g: np.ndarray | None) -> None:
        self._g = g
        for ref in self._slots:
            slot = ref()
            if slot is not None:
                slot.bind_grad(g)

    @property
    def slot(self) -> Slot | None:
        """The newest slot that holds this parameter in a live flat buffer (an optimizer's, or
        DDP's), or None (``engine/slot.py``)."""
        for ref in reversed(self._slots):
            slot = ref()
            if slot is not None and slot.owner is not None:
                return slot
        return None

    def _live_slots(self) -> list[Slot]:
        return [s for s in (ref() for ref in self._slots)
                if s is not None and s.owner is not None]

    def _attach_slot(self, slot: Slot) -> None:
        """Called by a new :class:`~tinyopt.engine.slot.SlotTable` for its slot of this
        parameter: bind the storage and gradient as they are (nothing moves)."""
        slot.check_data(self._arr)
        self._slots = tuple(ref for ref in self._slots if ref() is not None) + (weakref.ref(slot),)
        slot.bind_data(self._arr)
        slot.bind_grad(self._g)

    def _printable(self) -> np.ndarray:
        return self._data

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def _repr_suffixes(self) -> list[str]:
        suffixes = super()._repr_suffixes()
        if not self.requires_grad:
            suffixes.append("requires_grad=False")
        return suffixes

    # ---- data ---------------------------------------------------------------------------------
    @property
    def data(self) -> Tensor:
        """The parameter's value as a Tensor sharing its storage, cut from autograd."""
        return _Alias._of(self, DATA)

    @data.setter
    def data(self, value: Any) -> None:
        if isinstance(value, Tensor):
            value = value.numpy()
        if value is self._data:  # ``p.data -= ...`` already wrote in place
            return
        arr = np.asarray(value)
        if arr.shape == self._data.shape:
            np.copyto(self._data, arr, casting="same_kind")
            _mark_mutated(self)
            return
        if self.slot is not None:
            raise ValueError(f"cannot assign data of shape {arr.shape} to a parameter of shape "
                             f"{self.shape} whose storage an optimizer manages")
        self._data = np.asarray(arr, dtype=self.dtype, order="C")
        self.shape = self._data.shape
        self._grad = None
        _mark_mutated(self)

    def set_(self, source: Tensor | None = None, storage_offset: int = 0, size: Any = None,
             stride: Any = None) -> Self:
        """Make ``source``'s storage this parameter's (``torch.Tensor.set_``: nothing is copied;
        under ``no_grad``).  The slots holding the parameter follow.  Only ``source``: no
        ``storage_offset``, ``size`` or ``stride``."""
        if not isinstance(source, Tensor) or storage_offset or size is not None \
                or stride is not None:
            raise NotImplementedError("Parameter.set_ takes a source tensor only (no "
                                      "storage_offset, size or stride)")
        if self.requires_grad and grad_mode.is_grad_enabled():
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        arr = source.detach().numpy()
        if arr.dtype != self.dtype or not arr.flags.c_contiguous:
            raise RuntimeError(f"set_: the source must be a contiguous {torch_name(self.dtype)} "
                               f"tensor, got {torch_name(arr.dtype)}")
        if arr.shape != self.shape and self.slot is not None:
            raise ValueError(f"cannot assign data of shape {arr.shape} to a parameter of shape "
                             f"{self.shape} whose storage an optimizer manages")
        if arr.shape != self.shape:
            self._grad = None
        self._data = arr
        self.shape = arr.shape
        _mark_mutated(self)
        return self

    # ---- grad ---------------------------------------------------------------------------------
    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient as a Tensor sharing its storage, or None."""
        g = self._g
        return None if g is None else _grad_tensor(self, g)

    @grad.setter
    def grad(self, value: Any) -> None:
        forget_rows(self)  # a new gradient (or none) has no rows looked up yet
        if value is None:
            self._grad = None
            return
        arr = _grad_array(self, value)
        gd = grad_dtype(self.dtype)  # float32 for a 16-bit parameter
        if isinstance(value, Tensor) and arr.dtype == gd and arr.flags.c_contiguous:
            self._grad = arr  # that tensor is the gradient (``p.grad is value``), as in torch
            self._grad_t = value
            return
        slot = self.slot if self._slots else None
        if slot is not None:  # (an array: its values, in the flat gradient buffer)
            if arr is not slot.grad_view:
                np.copyto(slot.grad_view, arr, casting="same_kind")
            self._grad = slot.grad_view
        else:
            self._grad = arr if arr.dtype == gd else arr.astype(gd)

    def _grad_dest(self) -> np.ndarray:
        """Storage a new gradient may be written into directly (marks the grad as present).

        The caller must fully overwrite the returned array.  Only valid while ``grad is None``.
        """
        slot = self.slot if self._slots else None
        if slot is not None:
            self._grad = slot.grad_view
        else:
            self._grad = np.empty(self.shape, dtype=grad_dtype(self.dtype))
        return self._g

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        if requires_grad and self.dtype not in FLOATS and not is_low(self.dtype):
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self.requires_grad = bool(requires_grad)
        return self

    def __deepcopy__(self, memo: dict) -> Parameter:
        p = Parameter(self._data, requires_grad=self.requires_grad)  # (a copy, in the arena)
        p.name = self.name
        if self._grad is not None:
            p._grad = self._grad.copy()
        memo[id(self)] = p
        return p

    def share_memory_(self) -> Self:
        """Move the storage to shared memory (see ``Tensor.share_memory_``); the optimizers that
        hold this parameter step it there from now on, and ``p.data``/``p.detach()`` follow."""
        shared_memory.register_reductions()
        if not shared_memory.is_shared(self._arr):
            self._data = shared_memory.shared_copy(self._arr)
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        # as torch's: the data (a Tensor sharing the storage: by handle through
        # ``tinyopt.multiprocessing`` when it is shared, else by value), requires_grad, the name
        return (_rebuild_parameter, (leaf(self._arr), self.requires_grad, self.name))


shared_memory.set_tensor_types(leaf, (Tensor, _Alias))


def _rebuild_parameter(data: Tensor, requires_grad: bool, name: str) -> Parameter:
    p = Parameter(data, requires_grad=requires_grad)
    p.name = name
    return p


# ---- making tensors ---------------------------------------------------------------------------
def _is_dtype_name(a: Any) -> bool:
    if not isinstance(a, str):
        return False
    if a == "bfloat16":  # (a dtype even where ml_dtypes is missing: as_dtype says so)
        return True
    try:
        as_dtype(a)
    except TypeError:
        return False
    return True


def _to_array(data: Any, dtype: Any = None) -> np.ndarray:
    """``data`` as a numpy array with PyTorch's dtype rules (float32 for Python floats, int64 for
    ints, bool for bools); no copy when it already is one of the right dtype."""
    if isinstance(data, np.ndarray):
        arr = data
    elif isinstance(data, Tensor):
        arr = data.numpy()
    elif isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flat(data)):
        arr = np.asarray([_to_array(x) for x in data]) if data else np.zeros(0, float32)
    else:
        arr = np.asarray(data)
        if not isinstance(data, np.generic) and (dtype is None or as_dtype(dtype) != np.uint64) \
                and _int_overflow(data, arr):
            raise ValueError("Overflow when unpacking long long")
        if arr.dtype == np.float64 and not isinstance(data, np.generic):
            arr = arr.astype(np.float32)  # Python floats: the default dtype
        elif arr.size == 0 and arr.dtype == np.float64:
            arr = arr.astype(np.float32)
    if dtype is not None:
        return arr.astype(as_dtype(dtype), copy=False)
    return arr.astype(default_dtype_for(arr), copy=False)


def _int_overflow(data: Any, arr: np.ndarray) -> bool:
    """Whether Python data holds an int outside int64 (numpy made it uint64, objects, or floats
    beside negative ints), which torch refuses."""
    if type(data) is int:
        return not -2**63 <= data < 2**63
    if not isinstance(data, (list, tuple)) or arr.dtype.kind not in "uOf" or not arr.size:
        return False
    if arr.dtype.kind != "O" and float(np.abs(arr).max()) < 2.0**63:
        return False
    return any(type(v) is int and not -2**63 <= v < 2**63 for v in _flat(data))


def _flat(data: Any) -> Iterator[Any]:
    for x in data:
        if isinstance(x, (list, tuple)):
            yield from _flat(x)
        else:
            yield x


def tensor(data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False,
           pin_memory: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (array-like, Python numbers or a Tensor)."""
    check_device(device)
    if dtype is None and type(data) is list and data and all(type(x) is float for x in data):
        arr = np.array(data, dtype=float32)  # ``[float(r)]`` in a loop: what _to_array makes
    else:
        arr = np.array(_to_array(data, dtype), copy=True)
    t = leaf(arr)
    if requires_grad:
        t.requires_grad_()
    return t


def as_tensor(data: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``data`` as a Tensor without copying: numpy arrays and numbers become concrete
    tensors."""
    if isinstance(data, Tensor):
        if dtype is not None and as_dtype(dtype) != data.dtype:
            return ops.to(data, as_dtype(dtype))
        return data
    if device is not None:
        check_device(device)
    if isinstance(data, np.ndarray):
        if dtype is None and data.dtype in SUPPORTED:  # (a batch, on every step: no astype call)
            return make_node("input", (), (), data.shape, data.dtype, False, data)
        return leaf(_to_array(data, dtype))
    if dtype is None and isinstance(data, numbers.Number):
        return leaf(np.array(data, dtype=scalar_dtype(data)))
    return leaf(_to_array(data, dtype))


def from_numpy(arr: np.ndarray) -> Tensor:
    """A Tensor sharing ``arr``'s memory (writes to either show in both)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(arr).__name__})")
    if arr.dtype not in SUPPORTED and arr.dtype != np.float16:
        raise TypeError(f"can't convert np.ndarray of type numpy.{arr.dtype.type.__name__}. The "
                        f"only supported types are: float64, float32, float16, int64, int32, "
                        f"int16, int8, uint64, uint32, uint16, uint8, and bool (tinyopt has no "
                        f"complex dtypes).")
    return _user_leaf(arr)


def from_dlpack(ext_tensor: Any) -> Tensor:
    """A Tensor sharing the memory of ``ext_tensor`` (writes to either show in both): any CPU
    object with ``__dlpack__`` (a torch tensor, a numpy array, a tinyopt tensor), or a bare DLPack
    capsule (``torch.utils.dlpack.to_dlpack``; numpy reads those as read-only memory)."""
    if type(ext_tensor).__name__ == "PyCapsule":  # (numpy imports a bare capsule read-only)
        ext_tensor = _Capsule(ext_tensor)
    arr = np.from_dlpack(ext_tensor)
    if arr.dtype not in SUPPORTED:
        raise TypeError(f"from_dlpack: unsupported dtype {arr.dtype}")
    return _user_leaf(arr)


# The empty arrays a user handed over (``from_numpy``, ``from_dlpack``), by id: torch keeps
# their strides (numpy's, 0 along an empty dimension), where an empty tensor tinyopt made
# has contiguous ones whatever its array's (``inplace.geometry``).
USER_EMPTY_ARRAYS: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def _user_leaf(arr: np.ndarray) -> Tensor:
    if not arr.size:
        USER_EMPTY_ARRAYS[id(arr)] = arr
    return leaf(arr)


class _Capsule:
    """A bare DLPack capsule as numpy's ``from_dlpack`` wants it (an object that exports it)."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def _dim_index(op: str, d: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {d})")
    return d % n


# ---- legacy tensor types (``torch.FloatTensor([1, 2])``, ``x.type(torch.LongTensor)``) --------
class _TensorTypeMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Tensor) and obj.dtype == cls._dtype  # type: ignore[attr-defined]


def _tensor_type(name: str, dtype: np.dtype) -> type:
    def new(cls: type, *data: Any) -> Tensor:
        return Tensor(*data, dtype=dtype)
    return _TensorTypeMeta(name, (), {"__new__": new, "_dtype": dtype,
                                      "__doc__": f"``{name}(data)`` or ``{name}(*size)``: a "
                                                 f"{dtype} tensor (PyTorch's legacy type)."})


FloatTensor = _tensor_type("FloatTensor", np.dtype(np.float32))
DoubleTensor = _tensor_type("DoubleTensor", np.dtype(np.float64))
LongTensor = _tensor_type("LongTensor", np.dtype(np.int64))
IntTensor = _tensor_type("IntTensor", np.dtype(np.int32))
ShortTensor = _tensor_type("ShortTensor", np.dtype(np.int16))
CharTensor = _tensor_type("CharTensor", np.dtype(np.int8))
ByteTensor = _tensor_type("ByteTensor", np.dtype(np.uint8))
BoolTensor = _tensor_type("BoolTensor", np.dtype(np.bool_))


def is_tensor(obj: Any) -> bool:
    """Whether ``obj`` is a tinyopt Tensor (Parameters included)."""
    return isinstance(obj, Tensor)
