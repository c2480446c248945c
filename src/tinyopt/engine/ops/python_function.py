"""Ops whose forward and backward are Python functions over arrays: ``torch.autograd.Function``.

A node ``python_function`` holds, as its one attribute, a *call*: an object with

- ``forward(arrays) -> list[ndarray]``: the outputs of the user's ``forward`` for these input
  arrays (one per output);
- ``backward(k, g, arrays) -> list[ndarray | None]``: the gradient with respect to each input
  when output ``k`` has gradient ``g`` and the others none (the user's ``backward``, a
  vector-Jacobian product, so the gradients of several outputs add up);
- ``shapes``/``dtypes`` of the outputs and ``grad_dtype``, equality and a hash (the call is part
  of the plan's structural signature, so equal calls share a plan).

The node ``python_function`` computes output ``k`` (its second attribute); a Function with n
outputs is n such nodes, each running the forward (the user's code runs once per output per
step).  Its backward rule records ``python_function_grad``, which computes the gradients of all
inputs packed into one vector of ``grad_dtype``, sliced per input: inside a plan, the user's
Python runs at each replay on the plan's arrays, as its kernels do.
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.engine.op import defop, node
from tinyopt.engine.tensor import Tensor


def _forward(t):
    call, k = t.attrs

    def run(out, *ins):
        out[...] = call.forward(ins)[k]
    return run


def _grad_forward(t):
    call, k = t.attrs
    sizes = [math.prod(s.shape) for s in t.srcs[1:]]

    def run(out, g, *ins):
        grads = call.backward(k, g, ins)
        at = 0
        for n, gi in zip(sizes, grads):
            if gi is None:
                out[at:at + n] = 0
            else:
                out[at:at + n] = gi.reshape(-1)
            at += n
    return run


def _backward(t, g):
    call, k = t.attrs
    srcs = t.srcs
    total = sum(math.prod(s.shape) for s in srcs)
    packed = node("python_function_grad", (g, *srcs), (total,), call.grad_dtype, t.attrs)
    grads: list[Tensor | None] = []
    at = 0
    for s in srcs:
        n = math.prod(s.shape)
        grads.append(packed[at:at + n].reshape(s.shape).to(s.dtype) if s.requires_grad else None)
        at += n
    return tuple(grads)


defop("python_function", forward=_forward, backward=_backward)
defop("python_function_grad", forward=_grad_forward)


def python_function(call, inputs: tuple[Tensor, ...]) -> list[Tensor]:
    """The outputs of ``call`` over ``inputs`` as graph nodes (see the module docstring)."""
    return [node("python_function", inputs, tuple(shape), np.dtype(dtype), (call, k))
            for k, (shape, dtype) in enumerate(zip(call.shapes, call.dtypes))]
