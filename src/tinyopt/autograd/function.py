"""``torch.autograd.Function``: custom ops with a forward and a backward written in Python.

    class LegendrePolynomial3(Function):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return 0.5 * (5 * input ** 3 - 3 * input)

        @staticmethod
        def backward(ctx, grad_output):
            input, = ctx.saved_tensors
            return grad_output * 1.5 * (5 * input ** 2 - 1)

    y = LegendrePolynomial3.apply(a + b * x)     # differentiable, and part of the step's plan

As in PyTorch: ``forward(ctx, *args)`` (or ``forward(*args)`` with ``setup_context(ctx, inputs,
output)``) computes with tensors and returns a tensor or a tuple of tensors; ``backward(ctx,
*grad_outputs)`` returns one gradient per argument of ``forward`` (None for arguments that need
none).  ``ctx`` has ``save_for_backward``/``saved_tensors``, ``needs_input_grad``,
``mark_non_differentiable`` and ``set_materialize_grads``, and takes any attribute you set.

How it runs in a static graph (``tinyopt.engine.ops.python_function``): ``apply`` records one
graph node per output whose kernel calls your ``forward`` on the input values, and the backward
node calls your ``backward``.  Both run under ``no_grad`` on concrete tensors, at every replay of
the plan.  The backward node runs ``forward`` again on the saved inputs to rebuild ``ctx`` (as
``torch.utils.checkpoint`` recomputes), so ``forward`` should not have side effects that must
happen once.  The first call for given input shapes also runs ``forward`` once to learn the
output shapes, which must depend only on the input shapes.  Only first derivatives exist (no
double backward); ``forward`` may not write into its inputs (``mark_dirty`` is refused).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from tinyopt.engine.grad_mode import is_grad_enabled, no_grad
from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The ``ctx`` of a custom Function: what ``forward`` leaves for ``backward``."""

    def __init__(self, needs_input_grad: tuple[bool, ...] = ()):
        self.needs_input_grad = needs_input_grad
        self.to_save: tuple[Any, ...] = ()
        self.materialize_grads = True
        self._non_differentiable: list[Tensor] = []

    def save_for_backward(self, *tensors: Any) -> None:
        """Keep ``tensors`` (or None) for ``backward``'s ``ctx.saved_tensors``."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument "
                                f"{tensors.index(t)} is of type {type(t).__name__}")
        self.to_save = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        """Refused: tinyopt has no forward-mode AD."""
        raise NotImplementedError("tinyopt has no forward-mode AD: save_for_forward is not "
                                  "supported")

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return self.to_save

    def mark_non_differentiable(self, *args: Tensor) -> None:
        """Outputs that get no gradient (their ``requires_grad`` is False)."""
        self._non_differentiable.extend(args)

    def set_materialize_grads(self, value: bool) -> None:
        """With False, ``backward`` gets None (not zeros) for outputs without a gradient."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *args: Tensor) -> None:
        """Refused: forward may not write into its inputs."""
        raise NotImplementedError("custom Functions that modify their inputs in place "
                                  "(mark_dirty) are not supported by tinyopt; return a new tensor")


class Function:
    """Base class of custom differentiable ops (see the module docstring); call ``apply``."""

    def __init__(self, *args: Any, **kwargs: Any):
        if type(self).forward is not Function.forward and not isinstance(
                type(self).__dict__.get("forward"), staticmethod):
            raise RuntimeError("Legacy autograd function with non-static forward method is "
                               "deprecated. Please use new-style autograd function with static "
                               "forward method.")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Example: https://pytorch.org/docs/stable/"
                           "autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        """The op's outputs from its inputs; override it (a staticmethod)."""
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> Any:
        """Fill ``ctx`` from the inputs and output (with a ``forward`` without ctx)."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        """The gradients of the inputs from those of the outputs; override it."""
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode "
                                  "AD.")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        """Run the Function on ``args``: its outputs, differentiable through ``backward``."""
        from tinyopt.engine.ops.python_function import python_function
        grad = is_grad_enabled()
        positions = tuple(i for i, a in enumerate(args) if isinstance(a, Tensor))
        tensors = tuple(args[i] for i in positions)
        needs = tuple(grad and isinstance(a, Tensor) and a.requires_grad for a in args)
        consts = tuple(None if isinstance(a, Tensor) else a for a in args)
        call = _Call(cls, consts, tuple(sorted(kwargs.items())), positions, needs, tensors)
        outs = python_function(call, tensors)
        outs = [o.detach() if k in call.nondiff or o.dtype.kind != "f" else o
                for k, o in enumerate(outs)]
        return tuple(outs) if call.is_tuple else outs[0]


class _Call:
    """One kind of call of a Function: the class, its non-tensor arguments, which arguments
    need gradients and the output shapes (``python_function``'s call; equal calls share a
    plan)."""

    _SPECS: dict[Any, tuple] = {}  # (class, arguments' key, input shapes) -> output shapes...

    def __init__(self, cls: type, consts: tuple, kwargs: tuple, positions: tuple[int, ...],
                 needs: tuple[bool, ...], tensors: tuple[Tensor, ...]):
        self.cls, self.consts, self.kwargs = cls, consts, kwargs
        self.positions, self.needs = positions, needs
        try:
            hash((consts, kwargs))
            arg_key: Any = (consts, kwargs)
        except TypeError:  # unhashable arguments: a plan of its own for every call
            arg_key = object()
        inputs = tuple((t.shape, t.dtype.str) for t in tensors)
        self._key = (cls, arg_key, positions, needs, inputs)
        spec = self._SPECS.get(self._key)
        if spec is None:  # learn the outputs' shapes from one run on the inputs' values
            ctx, values, out = self._run(tuple(t.numpy() for t in tensors))
            outs = out if isinstance(out, tuple) else (out,)
            nondiff = tuple(k for k, o in enumerate(outs)
                            if any(o is m for m in ctx._non_differentiable))
            spec = (tuple(v.shape for v in values), tuple(v.dtype.str for v in values),
                    isinstance(out, tuple), nondiff)
            if type(arg_key) is tuple:
                self._SPECS[self._key] = spec
        self.shapes, self.dtypes, self.is_tuple, self.nondiff = spec
        floats = [t.dtype for t in tensors if t.dtype.kind == "f"]
        self.grad_dtype = np.result_type(*floats) if floats else np.dtype(np.float32)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Call) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"{self.cls.__name__}.apply"

    def _run(self, arrays: tuple[np.ndarray, ...]) -> tuple[FunctionCtx, list[np.ndarray], Any]:
        """The user's forward on ``arrays``: its ctx, its outputs' values and what it
        returned."""
        args = list(self.consts)
        for i, a in zip(self.positions, arrays):
            v = a.view()
            v.flags.writeable = False  # (the plan's buffer: forward may not write into it)
            args[i] = as_tensor(v)
        ctx = FunctionCtx(self.needs)
        kwargs = dict(self.kwargs)
        with no_grad():
            if _overrides(self.cls, "setup_context"):
                out = self.cls.forward(*args, **kwargs)
                self.cls.setup_context(ctx, tuple(args), out)
            else:
                out = self.cls.forward(ctx, *args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        values = []
        for k, o in enumerate(outs):
            if not isinstance(o, Tensor):
                raise TypeError(f"{self.cls.__name__}.forward must return tensors, but output "
                                f"{k} is a {type(o).__name__}")
            values.append(np.asarray(o.numpy()))
        return ctx, values, out

    def forward(self, arrays: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        values = self._run(arrays)[1]
        for k, v in enumerate(values):
            if v.shape != self.shapes[k]:
                raise RuntimeError(f"{self.cls.__name__}.forward returned output {k} of shape "
                                   f"{v.shape}, but {self.shapes[k]} for inputs of these shapes "
                                   f"before: tinyopt needs output shapes that depend only on "
                                   f"input shapes")
        return values

    def backward(self, k: int, g: np.ndarray, arrays: tuple[np.ndarray, ...]
                 ) -> list[np.ndarray | None]:
        ctx, values, _ = self._run(arrays)
        grads: list[Any] = [None] * len(values)
        grads[k] = as_tensor(np.asarray(g))
        if ctx.materialize_grads:
            grads = [as_tensor(np.zeros_like(v)) if gr is None else gr
                     for v, gr in zip(values, grads)]
        with no_grad():
            res = self.cls.backward(ctx, *grads)
        res = res if isinstance(res, tuple) else (res,)
        n = len(self.consts)
        if len(res) != n and not (len(res) > n and all(r is None for r in res[n:])):
            raise RuntimeError(f"function {self.cls.__name__}Backward returned an incorrect "
                               f"number of gradients (expected {n}, got {len(res)})")
        out: list[np.ndarray | None] = []
        for i, a in zip(self.positions, arrays):
            r = res[i]
            if r is None or not self.needs[i]:
                out.append(None)
                continue
            r = np.asarray(r.numpy() if isinstance(r, Tensor) else r)
            if r.shape != a.shape:
                raise RuntimeError(f"Function {self.cls.__name__}Backward returned an invalid "
                                   f"gradient at index {i} - got {list(r.shape)} but expected "
                                   f"shape compatible with {list(a.shape)}")
            out.append(r)
        return out


def _overrides(cls: type, name: str) -> bool:
    return any(name in c.__dict__ for c in cls.__mro__ if c is not Function and c is not object)


def once_differentiable(fn: Callable) -> Callable:
    """Marks a ``backward`` as not differentiable again: it runs under ``no_grad`` (tinyopt's
    backward runs there anyway, and has no double backward)."""
    @functools.wraps(fn)
    def wrapper(ctx: Any, *args: Any) -> Any:
        with no_grad():
            return fn(ctx, *args)
    return wrapper
