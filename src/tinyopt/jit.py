"""``torch.jit``: the names model code calls, for code that runs the same without TorchScript.

tinyopt has no TorchScript: a model is already recorded as a static graph and planned
(``docs/loop.md``), so ``script(m)`` and ``trace(m, x)`` return ``m`` itself, the decorators
(``ignore``, ``unused``, ``export``) return the function, and ``is_scripting()``/``is_tracing()``
are False -- the branches timm and YOLOv5 guard with them take their eager path, as under
PyTorch without scripting.  ``save``/``load`` of TorchScript archives are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

__all__ = ["Final", "TracerWarning", "annotate", "export", "ignore", "interface", "is_scripting",
           "is_tracing", "load", "save", "script", "trace", "unused"]


class TracerWarning(Warning):
    """PyTorch's category of the TorchScript tracer's warnings, for export scripts' filters
    (``warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)`` in YOLOv5 and
    segment-anything).  tinyopt has no tracer (``onnx.export`` reads the recorded graph), so
    nothing issues it."""


def script(obj: Any, optimize: None = None, _frames_up: int = 0, _rcb: Any = None,
           example_inputs: Any = None) -> Any:
    """``obj`` itself: tinyopt compiles the graph it records (see the module docstring)."""
    return obj


def trace(func: Any, example_inputs: Any = None, optimize: Any = None, check_trace: bool = True,
          check_inputs: Any = None, check_tolerance: float = 1e-05, strict: bool = True,
          _force_outplace: bool = False, _module_class: Any = None,
          _compilation_unit: Any = None, example_kwarg_inputs: Any = None,
          _store_inputs: bool = True) -> Any:
    """``func`` itself (the graph is recorded at every call and planned by structure)."""
    return func


def is_scripting() -> bool:
    """False: nothing runs as TorchScript."""
    return False


def is_tracing() -> bool:
    """False: nothing runs under the TorchScript tracer."""
    return False


def ignore(drop: Any = False, **kwargs: Any) -> Any:
    """The decorated function unchanged (as ``@torch.jit.ignore`` or ``@torch.jit.ignore(...)``)."""
    if callable(drop):
        return drop
    return lambda fn: fn


def unused(fn: Callable) -> Callable:
    """The decorated function unchanged."""
    return fn


def export(fn: Callable) -> Callable:
    """The decorated method unchanged."""
    return fn


def interface(obj: Any) -> Any:
    """The decorated class unchanged."""
    return obj


def annotate(the_type: Any, the_value: Any) -> Any:
    """``the_value`` (a type hint for the TorchScript compiler, which tinyopt has not)."""
    return the_value


def save(m: Any, f: Any, _extra_files: Any = None) -> None:
    """Refused: tinyopt has no TorchScript archives."""
    raise NotImplementedError("torch.jit.save: tinyopt has no TorchScript archives; save the "
                              "state_dict() (tinyopt.save), or export ONNX (tinyopt.onnx.export)")


def load(f: Any, map_location: Any = None, _extra_files: Any = None) -> Any:
    """Refused: tinyopt cannot run TorchScript archives."""
    raise NotImplementedError("torch.jit.load: tinyopt cannot run TorchScript archives; load a "
                              "state_dict saved with torch.save instead")


Final = Final  # (typing's, as torch.jit.Final is)
