"""``torch.utils.checkpoint``: activation checkpointing, with PyTorch's API and gradients.

    y = checkpoint(block, x, use_reentrant=False)
    y = checkpoint_sequential(model.layers, 2, x, use_reentrant=False)

The result and every gradient are exactly those of calling ``block(x)``.  What checkpointing buys
in PyTorch -- dropping a block's activations after the forward pass and recomputing them in the
backward -- is in tinyopt a choice of the memory planner for the whole step's static graph; this
function records the block as it is (no second forward at backward time), so its memory is that of
the plain call.  A block's random draws (dropout) therefore happen once, as with
``preserve_rng_state=True``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["checkpoint", "checkpoint_sequential"]

_REENTRANT_WARNING = (
    "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Starting in "
    "PyTorch 2.9, calling checkpoint without use_reentrant will raise an exception. "
    "use_reentrant=False is recommended, but if you need to preserve the current default "
    "behavior, you can pass use_reentrant=True. Refer to docs for more details on the "
    "differences between the two variants.")


def noop_context_fn() -> tuple[Any, Any]:
    import contextlib
    return contextlib.nullcontext(), contextlib.nullcontext()


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None,
               context_fn: Callable[[], tuple[Any, Any]] = noop_context_fn,
               determinism_check: str = "default", debug: bool = False, early_stop: bool = True,
               **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``, differentiable as that call (see the module docstring);
    ``preserve_rng_state`` is accepted among ``kwargs`` as in PyTorch."""
    if use_reentrant is None:
        warnings.warn(_REENTRANT_WARNING, UserWarning, stacklevel=2)
    kwargs.pop("preserve_rng_state", None)
    if use_reentrant and kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    forward_ctx, _ = context_fn()
    with forward_ctx:
        return function(*args, **kwargs)


def checkpoint_sequential(functions: Any, segments: int, input: Any,
                          use_reentrant: bool | None = None, **kwargs: Any) -> Any:
    """Run ``functions`` (a Sequential or a list of modules) on ``input`` in ``segments``
    checkpointed pieces: the same values and gradients as running them in turn."""
    if use_reentrant is None:
        warnings.warn(_REENTRANT_WARNING, UserWarning, stacklevel=2)
    kwargs.pop("preserve_rng_state", None)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    fns: Iterable[Any] = functions.children() if hasattr(functions, "children") else functions
    for fn in fns:
        input = fn(input)
    return input
