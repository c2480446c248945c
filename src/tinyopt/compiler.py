"""``torch.compile`` and ``torch.compiler``: tinyopt compiles every graph already.

A training step is recorded as a static graph, planned and replayed (``docs/loop.md``), which is
what ``torch.compile`` gives PyTorch, so ``compile(model)`` returns ``model`` itself and
``compile(fn)`` returns ``fn``: the plan cache does the rest.  The arguments are checked as
PyTorch checks them (a bad ``mode`` is an error here too) and otherwise change nothing::

    model = torch.compile(model)                # nanoGPT's default path
    @torch.compile(mode="max-autotune")
    def step(x): ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
_BACKENDS = ("cudagraphs", "inductor", "openxla", "tvm")  # and the debug ones:
_DEBUG_BACKENDS = ("eager", "aot_eager", "aot_eager_decomp_partition")


def compile(model: F | None = None, *, fullgraph: bool = False, dynamic: bool | None = None,
            backend: str | Callable | None = None, mode: str | None = None,
            options: dict[str, Any] | None = None, name: str | None = None,
            disable: bool = False, recompile_limit: int | None = None,
            isolate_recompiles: bool = False, shapes_spec: Any = None) -> Any:
    """``model`` (a Module or a function) unchanged, or, without it, a decorator that returns the
    function it decorates (see the module docstring)."""
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified "
                           "at the same time.")
    if mode is not None and mode not in _MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(_MODES)}")
    if isinstance(backend, str) and backend not in _BACKENDS + _DEBUG_BACKENDS:
        raise RuntimeError(f"Invalid backend: {backend!r}, see `torch._dynamo.list_backends()` "
                           f"for available backends.")
    if model is None:
        return lambda fn: compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                  mode=mode, options=options, disable=disable)
    if not callable(model):
        raise AssertionError(f"A callable function is expected, but {type(model)} is provided.")
    return model


def is_compiling() -> bool:
    """False: nothing is traced by a compiler front end (``torch.compiler.is_compiling``)."""
    return False


def disable(fn: F | None = None, recursive: bool = True, *, reason: str | None = None) -> Any:
    """``fn`` unchanged (there is no tracing to exclude it from), or a decorator."""
    if fn is None:
        return lambda f: f
    return fn


def reset() -> None:
    """Nothing to reset: compiled plans live in the plan cache (``tinyopt.engine.cache_info``)."""


def list_backends(exclude_tags: Any = ("debug", "experimental")) -> list[str]:
    """The backend names ``compile`` accepts."""
    return list(_BACKENDS)
