"""``tinyopt.device``: tinyopt runs on the CPU; other devices can be named but not used.

``device("cuda")`` can be made (scripts make it before checking availability), and moving
anything to it raises at once, as PyTorch built without CUDA does.
"""

from __future__ import annotations

from typing import Any

_TYPES = ("cpu", "cuda", "mps", "xpu", "meta", "hip", "xla", "ipu", "hpu", "mtia", "vulkan",
          "privateuseone")


class device:
    """A device name: ``device("cpu")``, ``device("cuda:0")``, ``device("cuda", 1)``."""

    __slots__ = ("type", "index")
    type: str  # type: ignore[misc]
    index: int | None

    def __init__(self, type: Any, index: int | None = None):
        if isinstance(type, device):
            self.type, self.index = type.type, type.index
            return
        if not isinstance(type, str):
            raise TypeError(f"device() expected a string, got {type!r}")
        name, _, idx = type.partition(":")
        if name not in _TYPES:
            raise RuntimeError(f"Expected one of {', '.join(_TYPES)} device type at start of "
                               f"device string: {type}")
        if idx:
            if index is not None:
                raise RuntimeError(f"device(): the index is given twice in {type!r} and {index}")
            if not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}'")
            index = int(idx)
        self.type = name
        self.index = index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __enter__(self) -> device:
        check_device(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


CPU = device("cpu")


# torch's CPU build refuses these with AssertionError("Torch not compiled with CUDA enabled")
_COMPILED_NAMES = {"cuda": "CUDA", "xpu": "XPU"}


class DeviceNotCompiledError(RuntimeError, AssertionError):
    """A CUDA/XPU device asked of tinyopt: an ``AssertionError`` as torch's CPU build raises
    (``Torch not compiled with CUDA enabled``), and a ``RuntimeError`` as every other
    unavailable device is."""


def check_device(dev: Any) -> None:
    """Raise if ``dev`` (None, a string, a ``device`` or an int) names a device other than the
    CPU."""
    if dev is None:
        return
    if isinstance(dev, int) and not isinstance(dev, bool):
        dev = device("cuda", dev)
    d = dev if isinstance(dev, device) else device(dev)
    if d.type != "cpu" and d.type != "meta":
        cls = DeviceNotCompiledError if d.type in _COMPILED_NAMES else RuntimeError
        lead = (f"Torch not compiled with {_COMPILED_NAMES[d.type]} enabled: "
                if d.type in _COMPILED_NAMES else "")
        raise cls(f"{lead}tinyopt runs on the CPU only: device '{d}' is not available "
                  f"(tinyopt.cuda.is_available() and tinyopt.accelerator.is_available() "
                  f"are False); use 'cpu'")
    if d.type == "meta":
        raise RuntimeError("tinyopt has no 'meta' device; tensors always hold their values")
