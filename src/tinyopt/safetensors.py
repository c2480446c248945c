"""Model state as safetensors files, the format of Hugging Face's hub: ``safetensors.torch``'s
functions, for tinyopt tensors (``pip install 'tinyopt[safetensors]'``)::

    from tinyopt.safetensors import load_file, load_model, save_file, save_model

    save_file(model.state_dict(), "model.safetensors", metadata={"format": "pt"})
    model.load_state_dict(load_file("model.safetensors"))
    save_model(model, "model.safetensors")          # the same two steps, as safetensors.torch
    missing, unexpected = load_model(model, "model.safetensors")

A file written here is read by ``safetensors.torch.load_file`` (PyTorch), ``safetensors.numpy``,
JAX and the Rust crate, and files they write are read here: float16/32/64, bfloat16 (through
ml_dtypes), int8/16/32/64, uint8 and bool tensors; other dtypes (float8, uint16-64, complex) are
refused with their names.  The file holds only tensors, a flat ``{name: tensor}`` dict and
optional ``{str: str}`` metadata, so loading one can never run code.  Writing to a path is
atomic, as for every tinyopt checkpoint.

The format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length,
a JSON header ``{name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}``, then the
raw little-endian bytes of every tensor.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from tinyopt.checkpoint.archive import write_atomically
from tinyopt.checkpoint.format import tensor_array
from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["load", "load_file", "load_model", "save", "save_file", "save_model"]

INSTALL = ("tinyopt.safetensors needs the safetensors package: pip install "
           "'tinyopt[safetensors]' (or pip install safetensors)")

# the safetensors dtype names tinyopt reads, and their numpy dtypes (BF16: ml_dtypes')
_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
           "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_NAMES = {"float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
          "bool"}


def _safetensors() -> Any:
    try:
        import safetensors
        import safetensors.numpy
    except ImportError as e:
        raise ImportError(INSTALL) from e
    return safetensors


def _arrays(tensors: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``tensors`` as C-contiguous numpy arrays, every entry checked before anything is written."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"save_file: tensors must be a dict of str -> Tensor, got "
                        f"{type(tensors).__name__}")
    out = {}
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"save_file: tensor names must be str, got {name!r}")
        if isinstance(t, Tensor):
            arr = tensor_array(t)
        elif isinstance(t, np.ndarray):
            arr = t
        else:
            raise TypeError(f"save_file: {name!r} is a {type(t).__name__}, not a Tensor (a "
                            f"safetensors file holds tensors only; put other values in "
                            f"metadata as strings)")
        if arr.dtype.name not in _NAMES:
            raise TypeError(f"save_file: {name!r} has dtype {arr.dtype}, which tinyopt does not "
                            f"write to safetensors")
        out[name] = arr if arr.flags.c_contiguous else arr.copy(order="C")  # (0-d stays 0-d)
    return out


def _check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError(f"save_file: metadata must be a dict of str -> str, got {metadata!r}")
    return dict(metadata)


def save(tensors: Mapping[str, Tensor | np.ndarray],
         metadata: Mapping[str, str] | None = None) -> bytes:
    """The safetensors file of ``tensors`` (``{name: Tensor}``) as bytes; ``metadata`` is an
    optional ``{str: str}`` dict stored in the header."""
    st = _safetensors()
    return st.numpy.save(_arrays(tensors), metadata=_check_metadata(metadata))


def save_file(tensors: Mapping[str, Tensor | np.ndarray], filename: str | os.PathLike,
              metadata: Mapping[str, str] | None = None) -> None:
    """Write ``tensors`` (``{name: Tensor}``, e.g. a ``state_dict()``) to the safetensors file
    ``filename``, atomically.  Unsupported values raise ``TypeError`` before the file is
    touched."""
    data = save(tensors, metadata)
    write_atomically(os.fspath(filename), lambda f: f.write(data))


def load(data: bytes) -> dict[str, Tensor]:
    """The tensors of a safetensors file given as bytes, by name (see :func:`load_file`)."""
    st = _safetensors()
    try:
        entries = st.deserialize(bytes(data))
    except Exception as e:  # the package's SafetensorError: a header that does not parse
        raise ValueError(f"not a valid safetensors file: {e}") from e
    arrays = {}
    for name, entry in entries:
        code = entry["dtype"]
        if code == "BF16":
            from tinyopt.engine.dtypes import bfloat16
            dtype = np.dtype(bfloat16())
        elif code in _DTYPES:
            dtype = np.dtype(_DTYPES[code])
        else:
            raise TypeError(f"safetensors: tensor {name!r} has dtype {code}, which tinyopt does "
                            f"not support (it reads {', '.join(sorted(_DTYPES) + ['BF16'])})")
        raw = entry["data"]
        arrays[name] = np.frombuffer(bytearray(raw) if isinstance(raw, bytes) else raw,
                                     dtype=dtype.newbyteorder("<")).astype(dtype, copy=False) \
            .reshape(entry["shape"])
    return {name: as_tensor(arr) for name, arr in arrays.items()}


def load_file(filename: str | os.PathLike, device: str = "cpu") -> dict[str, Tensor]:
    """The tensors of the safetensors file ``filename``, by name
    (``safetensors.torch.load_file``).  A tensor of a dtype tinyopt does not support raises
    ``TypeError`` naming it, and nothing is returned."""
    if str(device) != "cpu":
        raise ValueError(f"load_file: tinyopt runs on the CPU only, got device={device!r}")
    with open(filename, "rb") as f:
        data = f.read()
    try:
        return load(data)
    except ValueError as e:
        raise ValueError(f"{os.fspath(filename)}: {e}") from e


def save_model(model: Any, filename: str | os.PathLike,
               metadata: Mapping[str, str] | None = None) -> None:
    """``save_file(model.state_dict(), filename, metadata)``."""
    save_file(model.state_dict(), filename, metadata)


def load_model(model: Any, filename: str | os.PathLike, strict: bool = True,
               device: str = "cpu") -> tuple[list[str], list[str]]:
    """Load the safetensors file ``filename`` into ``model`` (``model.load_state_dict``); returns
    the (missing, unexpected) keys, as ``safetensors.torch.load_model``.  With ``strict`` a
    mismatch raises and leaves the model as it was."""
    result = model.load_state_dict(load_file(filename, device), strict=strict)
    return list(result.missing_keys), list(result.unexpected_keys)
