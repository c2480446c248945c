"""Tensor: a node of a lazy computation graph; Parameter: a leaf that owns its storage and grad.

An op on tensors records a node (op name, sources, attributes, shape, dtype) and computes nothing.
``numpy()``, ``item()`` and ``backward()`` realize: the engine compiles the graph that reaches the
requested outputs into a plan (cached by the graph's structure) and runs it.
"""

from __future__ import annotations

import itertools
import math
import weakref

import numpy as np

from tinyopt.engine import grad_mode
from tinyopt.engine.dtypes import FLOATS, as_dtype, default_dtype_for, float32, grad_dtype, is_low

_ids = itertools.count()


class Tensor:
    """A node of the computation graph.

    Leaves hold an array (``INPUT``) or are Parameters (``PARAM``); every other node records the op
    that makes it from its sources.  Nothing is computed until a realizing call.
    """

    __slots__ = ("op", "srcs", "attrs", "shape", "dtype", "requires_grad", "name", "_value", "_id",
                 "__weakref__")
    __array_priority__ = 1000  # so ``ndarray + Tensor`` dispatches to Tensor.__radd__

    def __init__(self, op: str, srcs: tuple[Tensor, ...], attrs: tuple, shape: tuple[int, ...],
                 dtype: np.dtype, requires_grad: bool = False, name: str = "",
                 value: np.ndarray | None = None):
        self.op = op
        self.srcs = srcs
        self.attrs = attrs
        self.shape = tuple(map(int, shape))
        self.dtype = dtype
        self.requires_grad = requires_grad
        self.name = name
        self._value = value
        self._id = next(_ids)

    # ---- metadata ---------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        return self.shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    @property
    def is_leaf(self) -> bool:
        return self.op in ("input", "param")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        extra = f", name={self.name!r}" if self.name else ""
        return f"Tensor(op={self.op}, shape={self.shape}, dtype={self.dtype}{extra})"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError("Boolean value of a Tensor with more than one value is ambiguous")
        return bool(self.item())

    # ---- realization ------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """Compute this tensor and return its value as a new numpy array."""
        from tinyopt.engine.realize import realize
        return realize([self])[0]

    def item(self) -> float | int:
        """The value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise ValueError(f"item(): only one element tensors can be converted to Python scalars,"
                             f" got shape {self.shape}")
        if self._value is not None:  # already computed (a loss after backward): no copy
            return self._value.reshape(()).item()
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def backward(self, gradient=None) -> None:
        """Differentiate this scalar and add d(self)/dp into ``p.grad`` of every reachable Parameter.

        Gradients accumulate across calls, as in PyTorch, until they are reset (``zero_grad()``).
        """
        if not self.requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a "
                               "grad_fn (backward needs a graph that reaches a Parameter)")
        if gradient is None and self.numel() != 1:
            raise RuntimeError(f"grad can be implicitly created only for scalar outputs; backward() "
                               f"was called on a tensor of shape {self.shape}")
        if gradient is not None:
            g = np.asarray(gradient, dtype=self.dtype)
            if g.shape != self.shape:
                raise RuntimeError(f"backward: gradient has shape {g.shape}, expected {self.shape}")
            (self * Tensor("input", (), (), g.shape, self.dtype, value=g)).sum().backward()
            return
        from tinyopt.engine.realize import realize
        realize([], loss=self)

    def detach(self) -> Tensor:
        """A new input leaf with this tensor's value (computed now), cut from the graph."""
        return Tensor("input", (), (), self.shape, self.dtype, value=self.numpy())

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if not self.is_leaf:
            raise RuntimeError("requires_grad_ can only be changed on leaf tensors")
        self.requires_grad = requires_grad
        return self


class Parameter(Tensor):
    """A leaf tensor that requires grad and owns its storage.

    ``data`` is the parameter's numpy array and ``grad`` its gradient (a numpy array of the same
    shape, or None; float32 for a float16 or bfloat16 parameter).  Assigning an array of the same shape to either copies into the existing
    storage when the parameter is *packed* (an optimizer keeps a group's parameters, gradients and
    state in contiguous flat buffers and makes ``data`` and ``grad`` views into them), so packing is
    invisible to users.

    Packing protocol (used by ``tinyopt.optim``): ``_pack(data_view, grad_view, grad_flags, index,
    owner)`` moves the storage into the given views; ``grad_flags[index]`` is kept equal to
    ``grad is not None`` so a fused optimizer kernel knows which parameters to skip without a
    Python loop over parameters.  When a later ``_pack`` moves the storage again (a second
    optimizer over the same parameter), the previous ``owner`` gets ``owner.stale = True``: its
    views no longer hold this parameter, and it must pack it back before using them.
    """

    __slots__ = ("_data", "_grad", "_grad_view", "_grad_flags", "_grad_index", "_owner",
                 "_version")

    # Parameters compare by identity, so ``p in params`` and ``list.index`` never build graph
    # nodes; ``p.eq(x)`` still compares elementwise.
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    def __init__(self, data=None, requires_grad: bool = True, dtype=None):
        if data is None:
            arr = np.empty((0,), dtype=float32)
        elif isinstance(data, Tensor):
            arr = np.array(data.numpy())
        else:
            arr = _to_array(data, dtype)
        if dtype is not None:
            arr = arr.astype(as_dtype(dtype), copy=False)
        arr = np.asarray(arr, order="C")  # keeps 0-d (ascontiguousarray makes it 1-d)
        if requires_grad and arr.dtype not in FLOATS and not is_low(arr.dtype):
            raise RuntimeError(f"only floating point tensors can require gradients, got {arr.dtype}")
        super().__init__("param", (), (), arr.shape, arr.dtype, requires_grad=requires_grad)
        self._data = arr
        self._grad: np.ndarray | None = None
        self._grad_view: np.ndarray | None = None
        self._grad_flags: np.ndarray | None = None
        self._grad_index = 0
        self._owner = None
        self._version = 0

    def __repr__(self) -> str:
        return f"Parameter(shape={self.shape}, dtype={self.dtype})"

    # ---- data ---------------------------------------------------------------------------------
    @property
    def data(self) -> np.ndarray:
        return self._data

    @data.setter
    def data(self, value) -> None:
        if isinstance(value, Tensor):
            value = value.numpy()
        if value is self._data:  # ``p.data -= ...`` already wrote in place
            return
        arr = np.asarray(value)
        if arr.shape == self._data.shape:
            np.copyto(self._data, arr, casting="same_kind")
            return
        if self._grad_flags is not None:
            raise ValueError(f"cannot assign data of shape {arr.shape} to a parameter of shape "
                             f"{self.shape} whose storage an optimizer manages")
        self._data = np.asarray(arr, dtype=self.dtype, order="C")
        self.shape = self._data.shape
        self._grad = None

    # ---- grad ---------------------------------------------------------------------------------
    @property
    def grad(self) -> np.ndarray | None:
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if value is None:
            self._grad = None
            if self._grad_flags is not None:
                self._grad_flags[self._grad_index] = 0
            return
        if isinstance(value, Tensor):
            value = value.numpy()
        arr = np.asarray(value)
        if arr.shape != self.shape:
            raise RuntimeError(f"assigned grad has shape {arr.shape}, but the parameter has shape "
                               f"{self.shape}")
        if self._grad_view is not None:
            if arr is not self._grad_view:
                np.copyto(self._grad_view, arr, casting="same_kind")
            self._grad = self._grad_view
            self._grad_flags[self._grad_index] = 1
        else:
            gd = grad_dtype(self.dtype)
            self._grad = arr if arr.dtype == gd else arr.astype(gd)

    def _grad_dest(self) -> np.ndarray:
        """Storage a new gradient may be written into directly (marks the grad as present).

        The caller must fully overwrite the returned array.  Only valid while ``grad is None``.
        """
        if self._grad_view is not None:
            self._grad_flags[self._grad_index] = 1
            self._grad = self._grad_view
        else:
            self._grad = np.empty(self.shape, dtype=grad_dtype(self.dtype))
        return self._grad

    def _accumulate_grad(self, g: np.ndarray) -> None:
        """PyTorch's rule: the first gradient is written, later ones are added, until reset."""
        if self._grad is None:
            np.copyto(self._grad_dest(), g)
        else:
            np.add(self._grad, g, out=self._grad)

    def _pack(self, data_view: np.ndarray, grad_view: np.ndarray, grad_flags: np.ndarray,
              index: int, owner=None) -> None:
        """Move storage into ``owner``'s flat-buffer views (see the class docstring)."""
        previous = self._owner() if self._owner is not None else None
        if previous is not None and previous is not owner:
            previous.stale = True
        self._owner = weakref.ref(owner) if owner is not None else None  # no reference cycle
        np.copyto(data_view, self._data)
        self._data = data_view
        if self._grad is not None:
            np.copyto(grad_view, self._grad)
            self._grad = grad_view
        self._grad_view = grad_view
        self._grad_flags = grad_flags
        self._grad_index = index
        grad_flags[index] = self._grad is not None

    def zero_(self) -> Parameter:
        self._data[...] = 0
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Parameter:
        self.requires_grad = requires_grad
        return self

    def __deepcopy__(self, memo):
        p = Parameter(self._data.copy(), requires_grad=self.requires_grad)
        p.name = self.name
        if self._grad is not None:
            p._grad = self._grad.copy()
        memo[id(self)] = p
        return p

    def __reduce__(self):
        raise TypeError("tinyopt Parameters are not pickled; use state_dict() and tinyopt.save()")


def _to_array(data, dtype=None) -> np.ndarray:
    """``data`` as a numpy array with tinyopt's default dtype rules (float32 for Python floats)."""
    if isinstance(data, np.ndarray):
        arr = data
    elif isinstance(data, Tensor):
        arr = data.numpy()
    else:
        arr = np.asarray(data)
        if arr.dtype == np.float64 and dtype is None:
            arr = arr.astype(np.float32)
    if dtype is not None:
        return arr.astype(as_dtype(dtype), copy=False)
    return arr.astype(default_dtype_for(arr), copy=False)


def tensor(data, dtype=None, requires_grad: bool = False) -> Tensor:
    """A new input leaf holding a copy of ``data`` (array-like, Python numbers or a Tensor)."""
    arr = np.array(_to_array(data, dtype), copy=True)
    if requires_grad:
        return Parameter(arr)
    return Tensor("input", (), (), arr.shape, arr.dtype, value=arr)


def as_tensor(x, dtype=None) -> Tensor:
    """``x`` as a Tensor without copying: numpy arrays and numbers become input leaves."""
    if isinstance(x, Tensor):
        return x
    arr = _to_array(x, dtype)
    return Tensor("input", (), (), arr.shape, arr.dtype, value=arr)
