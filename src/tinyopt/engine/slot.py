"""Slots: where a group of parameters' storage and gradients are, for one kernel call over all.

An optimizer steps a whole parameter group in one kernel call, and a data-parallel wrapper
reduces a whole group's gradients in one collective.  Both need the group laid out as one flat
index space: parameter ``j`` occupies ``[seg[j], seg[j + 1])``.  They do *not* need the
parameters' storage moved there, and it never is: a parameter's storage stays the array it has
(the user's ``from_numpy`` array, shared memory, a view another program holds), and the kernel
reaches it through a table of addresses (``kernels/native/address.py``), the way ggml binds a tensor to
a buffer without copying it (``ggml_backend_tensor_alloc``; ``tensor->buffer`` is public).

A :class:`SlotTable` is that table for one flat buffer, made (and owned) by whoever owns the
buffer (``optim.flat.FlatBuffer``)::

    table = SlotTable(owner, params, seg, grad)   # grad: the flat gradient buffer
    table.data_addr[j]   address of parameter j's storage (kept up to date)
    table.grad_addr[j]   address of its gradient: its slot of ``grad`` or an array of its own
    table.flags[j]       1 while it has a gradient (``p.grad is not None``)
    table.slots[j]       its :class:`Slot`: ``p.slot`` while this table is its newest

A parameter knows its slots (a parameter may be in several tables: two optimizers, DDP's
buckets), and every change of its storage or gradient reaches them all at once, so a table is
never out of date.  A fresh gradient (``backward`` writing into ``p.grad`` when it is None) is
written into the newest slot's part of the flat gradient buffer (``Slot.grad_view``), so the
gradients of a group are usually one flat array: one collective, one unscale pass.  A gradient
the user assigned (``p.grad = t``) stays the user's tensor, and the table points at it.

The table keeps every array whose address it holds alive, and admits only C-contiguous arrays
of its dtype and of the parameter's size, so a kernel reading ``seg[j + 1] - seg[j]`` elements
from an address never reads outside an array.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from tinyopt.engine.dtypes import grad_dtype

if TYPE_CHECKING:
    from tinyopt.engine.tensor import Parameter


class Slot:
    """Parameter ``index`` of a :class:`SlotTable`: what DDP, ZeRO, GradScaler and the
    optimizers use instead of the parameter's internals.

    - ``owner``: the object that made the table (an optimizer's ``FlatBuffer``), or None once
      it is gone; ``index``: the parameter's place in it (``owner.seg[index]`` ...).
    - ``param``: the parameter; ``data``: its storage (the array it has, wherever it is).
    - ``grad_view``: its part of the table's flat gradient buffer, shaped like the parameter.
      :meth:`use_grad_view` makes that the parameter's gradient, as it is (a collective or a
      kernel wrote the values there).

    A slot holds its table weakly (the table holds its slots): an optimizer that is dropped is
    freed at once, with no reference cycle.
    """

    __slots__ = ("_table", "index", "grad_view", "__weakref__")

    def __init__(self, table: SlotTable, index: int, grad_view: np.ndarray) -> None:
        self._table = weakref.ref(table)
        self.index = index
        self.grad_view = grad_view

    @property
    def table(self) -> SlotTable | None:
        return self._table()

    @property
    def owner(self) -> Any:
        table = self._table()
        return None if table is None else table.owner()

    @property
    def param(self) -> Parameter:
        return self._table().params[self.index]

    @property
    def data(self) -> np.ndarray:
        """The parameter's storage."""
        return self._table().data_ref[self.index]

    def use_grad_view(self) -> np.ndarray:
        """Make :attr:`grad_view` (its values as they are) the parameter's gradient; return it."""
        self.param._grad = self.grad_view
        return self.grad_view

    # ---- what the parameter tells its slots (``Parameter._data`` / ``_grad`` setters) ----------
    def check_data(self, arr: np.ndarray) -> None:
        table = self._table()
        if table is not None:
            table.check_data(self.index, arr)

    def bind_data(self, arr: np.ndarray) -> None:
        table = self._table()
        if table is not None:
            table.bind_data(self.index, arr)

    def bind_grad(self, arr: np.ndarray | None) -> None:
        table = self._table()
        if table is not None:
            table.bind_grad(self.index, arr)

    def __repr__(self) -> str:
        return f"Slot({self.index} of {type(self.owner).__name__})"


class SlotTable:
    """The address table of one flat buffer (see the module docstring).

    Args:
        owner: the object that owns the flat buffer (held weakly: a slot does not keep an
            optimizer alive).
        params: the parameters, each once, all of one dtype.
        seg: int64, ``len(params) + 1``: parameter ``j`` is ``[seg[j], seg[j + 1])``.
        grad: the flat gradient buffer, 1-d C-contiguous of ``seg[-1]`` elements of the
            parameters' gradient dtype (float32 for 16-bit parameters).
    """

    def __init__(self, owner: Any, params: list[Parameter], seg: np.ndarray,
                 grad: np.ndarray) -> None:
        n = len(params)
        self.owner = weakref.ref(owner)
        self.params = params
        self.seg = seg
        self.grad = grad
        self.dtype = np.dtype(params[0].dtype) if params else grad.dtype
        self.grad_dtype = np.dtype(grad_dtype(self.dtype))
        if grad.dtype != self.grad_dtype or grad.ndim != 1 or grad.size != int(seg[-1]) \
                or not grad.flags.c_contiguous:
            raise ValueError("SlotTable: the gradient buffer must be 1-d, C-contiguous, of "
                             f"{seg[-1]} elements of {self.grad_dtype}")
        self.flags = np.zeros(n, dtype=np.uint8)
        self.foreign = np.zeros(n, dtype=np.uint8)  # 1: a gradient that is not its grad_view
        self.data_addr = np.zeros(n, dtype=np.int64)
        self.grad_addr = np.zeros(n, dtype=np.int64)
        self.data_ref: list[np.ndarray | None] = [None] * n
        self.grad_ref: list[np.ndarray | None] = [None] * n
        self.version = 0  # counts storage rebinds (what a cached layout of the storage checks)
        base = grad.ctypes.data
        self._own = [base + int(lo) * grad.itemsize for lo in seg[:-1]]  # the grad_views'
        self.grad_addr[:] = self._own
        self.slots = [Slot(self, j, grad[seg[j]:seg[j + 1]].reshape(p.shape))
                      for j, p in enumerate(params)]
        for slot, p in zip(self.slots, params):
            p._attach_slot(slot)

    def check_data(self, j: int, arr: np.ndarray) -> None:
        """Raise unless ``arr`` can be parameter ``j``'s storage in this table."""
        _check(arr, self.dtype, int(self.seg[j + 1] - self.seg[j]), "storage", self.params[j])

    def bind_data(self, j: int, arr: np.ndarray) -> None:
        """Parameter ``j``'s storage is now ``arr`` (checked by :meth:`check_data`)."""
        self.data_ref[j] = arr
        self.data_addr[j] = arr.ctypes.data if arr.size else 0
        self.version += 1

    def bind_grad(self, j: int, arr: np.ndarray | None) -> None:
        """Parameter ``j``'s gradient is now ``arr`` (None: it has none)."""
        if arr is None or arr is self.slots[j].grad_view:  # (every step: kept short)
            if self.grad_ref[j] is not None:  # it was an array of its own until now
                self.grad_addr[j] = self._own[j]
                self.grad_ref[j] = None
                self.foreign[j] = 0
            self.flags[j] = arr is not None
            return
        _check(arr, self.grad_dtype, int(self.seg[j + 1] - self.seg[j]), "gradient",
               self.params[j])
        self.grad_ref[j] = arr
        self.grad_addr[j] = arr.ctypes.data if arr.size else self._own[j]
        self.foreign[j] = 1
        self.flags[j] = 1


def _check(arr: Any, dtype: np.dtype, size: int, what: str, p: Any) -> None:
    if isinstance(arr, np.ndarray) and not arr.flags.writeable and what == "storage":
        raise RuntimeError(f"a parameter of shape {tuple(p.shape)} has read-only storage: an "
                           f"optimizer cannot update it (make its array writeable, or copy it)")
    if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.size != size \
            or not arr.flags.c_contiguous:
        got = (f"{arr.dtype} {arr.shape}{'' if arr.flags.c_contiguous else ' non-contiguous'}"
               if isinstance(arr, np.ndarray) else type(arr).__name__)
        raise RuntimeError(f"the {what} of a parameter of shape {tuple(p.shape)} whose slots an "
                           f"optimizer or DDP holds must be a C-contiguous {dtype} array of "
                           f"{size} elements, got {got}")
