"""``tinyopt.save(obj, f)`` and ``tinyopt.load(f)``: ``torch.save``/``torch.load`` as PyTorch users
write them, in tinyopt's safe checkpoint format (never pickle)::

    to.save(model.state_dict(), "model.pt")
    model.load_state_dict(to.load("model.pt"))
    to.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 7}, "ckpt.pt")
    ckpt = to.load("ckpt.pt", map_location="cpu")        # {"model": ..., "optim": ..., "epoch": 7}

``obj`` may be a state dict or any nesting of dicts, lists and tuples of Tensors, numpy arrays,
numbers, strings, bools and None (what ``torch.save(model.state_dict(), f)`` users save); it
comes back as it was saved: Tensors as Tensors (a Parameter as a Parameter), numpy arrays as numpy
arrays, tuples as tuples, key types intact.  ``f`` is a path or a binary file object (``io.BytesIO``
works too); writing to a path is atomic, as for every tinyopt checkpoint.  Modules, optimizers
and other objects are not pickled: save their ``state_dict()``.

The keyword form ``to.save(path, model=..., optimizer=...)`` (see ``tinyopt.checkpoint``) keeps
working, and ``to.load`` of such a checkpoint returns its ``{name: state}`` dict.  A file written
by ``torch.save`` (a zip of pickles) is refused with the one-line conversion, which runs where
PyTorch is installed: ``convert_torch_file("model.pt", "model.tinyopt")``.

File format: a tinyopt checkpoint (see ``tinyopt.checkpoint``) whose one entry, ``$object``,
holds ``obj``.
"""

from __future__ import annotations

import os
import zipfile
from typing import Any, BinaryIO

import numpy as np

from tinyopt import checkpoint
from tinyopt.checkpoint import CheckpointError, archive
from tinyopt.checkpoint.format import Encoder
from tinyopt.engine.tensor import Parameter, Size, as_tensor

__all__ = ["convert_torch_file", "load", "save"]

OBJECT = "$object"  # the entry that holds ``obj`` (not a Python identifier: no keyword can clash)

_TORCH_SAVE_OPTIONS = {"pickle_protocol", "_use_new_zipfile_serialization",
                       "_disable_byteorder_record"}


def save(obj: Any, f: str | os.PathLike | BinaryIO | None = None, /, **objects: Any) -> None:
    """``save(obj, f)``: write ``obj`` (a state dict, or nested dicts/lists of Tensors, arrays and
    numbers) to the path or binary file ``f``, as ``torch.save`` does but never pickling.

    ``save(path, **objects)``: the keyword checkpoint of ``tinyopt.checkpoint.save`` (modules,
    optimizers, schedulers, loaders and values by name, and the global generator).

    ``torch.save``'s ``pickle_protocol`` (and private) options are accepted and change nothing;
    ``pickle_module`` is refused.  Unsupported values raise ``TypeError`` before ``f`` is touched.
    """
    if f is None:
        checkpoint.save(obj, **objects)
        return
    if "pickle_module" in objects:
        raise TypeError("save: tinyopt never pickles, so pickle_module is not supported")
    unknown = set(objects) - _TORCH_SAVE_OPTIONS
    if unknown:
        raise TypeError(f"save(obj, f) got unexpected keyword arguments {sorted(unknown)} (the "
                        f"keyword form is save(path, name=object, ...))")
    _refuse_objects(obj, "obj")
    encoder = Encoder(tensors=True)
    entries = {OBJECT: {"kind": "value", "value": encoder.encode(obj, "obj")}}
    archive.write(f if hasattr(f, "write") else os.fspath(f), entries, encoder)


def _refuse_objects(v: Any, where: str) -> None:
    """A clear error for the objects ``torch.save`` would pickle and tinyopt will not."""
    if isinstance(v, dict):
        for k, x in v.items():
            _refuse_objects(x, f"{where}[{k!r}]")
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _refuse_objects(x, f"{where}[{i}]")
    elif callable(getattr(v, "state_dict", None)) and not isinstance(v, type):
        raise TypeError(f"save: {where} is a {type(v).__name__} object; tinyopt never pickles "
                        f"objects (torch.save would). Save its state instead: "
                        f"save({where}.state_dict(), f), and restore it with "
                        f"load_state_dict(tinyopt.load(f))")


def _check_map_location(map_location: Any) -> None:
    """Everything lives on the CPU: accept the spellings of "cpu" and reject other devices."""
    def cpu(d: Any) -> bool:
        return str(d).split(":")[0] == "cpu"

    if map_location is None or callable(map_location):
        return  # a function of (storage, location): everything is on the CPU already
    if isinstance(map_location, dict):
        bad = [v for v in map_location.values() if not cpu(v)]
    else:
        bad = [] if cpu(map_location) else [map_location]
    if bad:
        raise ValueError(f"load: tinyopt runs on the CPU only; map_location asks for {bad[0]!r}")


def load(f: str | os.PathLike | BinaryIO, map_location: Any = None, pickle_module: Any = None, *,
         weights_only: bool | None = None, mmap: bool | None = None,
         **pickle_load_args: Any) -> Any:
    """Read what ``save`` wrote: the saved object for ``save(obj, f)``, the ``{name: state}``
    dict for a keyword checkpoint.  Nothing in the file can run code, so ``weights_only`` (either
    value), ``mmap`` and unpickling options change nothing; ``map_location`` may only name the CPU.

    Raises ``CheckpointError`` (a ValueError) for a truncated, corrupted or foreign file; for a
    file written by ``torch.save``, with the command that converts it.
    """
    if pickle_module is not None:
        raise TypeError("load: tinyopt never unpickles, so pickle_module is not supported")
    _check_map_location(map_location)
    start = f.tell() if hasattr(f, "read") else 0
    try:
        records, values = archive.read(f)
    except CheckpointError as e:
        if _written_by_torch(f, start):
            raise CheckpointError(e.path, _torch_file_hint(e.path)) from e
        raise
    if set(records) == {OBJECT}:
        return values[OBJECT]
    return values


def _written_by_torch(f: Any, start: int) -> bool:
    """Whether ``f`` looks like a ``torch.save`` file: a zip with ``<name>/data.pkl``, or a bare
    pickle (the legacy format)."""
    try:
        if hasattr(f, "read"):
            f.seek(start)
            head = f.read(4)
            f.seek(start)
            src = f
        else:
            with open(f, "rb") as fh:
                head = fh.read(4)
            src = os.fspath(f)
        if head[:1] == b"\x80":
            return True
        if head != b"PK\x03\x04":
            return False
        with zipfile.ZipFile(src) as zf:
            return any(n.endswith("/data.pkl") for n in zf.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def _torch_file_hint(path: str) -> str:
    return (f"this file was written by torch.save (pickles, which tinyopt never loads because "
            f"unpickling can run code). Convert it once where PyTorch is installed: "
            f"python -c \"import tinyopt.serialization as s; s.convert_torch_file('{path}', "
            f"'{path}.tinyopt')\", then tinyopt.load('{path}.tinyopt'). An optimizer state dict "
            f"inside is converted as tinyopt.optim.torch_compat.from_torch does.")


def _from_torch(v: Any) -> Any:
    """A torch-loaded value with tensors as tinyopt Tensors (bfloat16 as float32; a Parameter as a
    Parameter, requires_grad kept), ``torch.Size`` as ``Size``, an OrderedDict as one and
    optimizer state dicts in tinyopt's layout."""
    import torch

    from tinyopt.optim.torch_compat import from_torch

    if type(v).__module__.startswith("torch") and hasattr(v, "detach"):
        t = v.detach().cpu()
        if t.dtype.is_floating_point and t.element_size() == 2 and str(t.dtype) != "torch.float16":
            t = t.float()
        arr = np.array(t.numpy(), copy=True)
        if isinstance(v, torch.nn.Parameter):
            return Parameter(arr, requires_grad=v.requires_grad)
        out = as_tensor(arr)
        return out.requires_grad_() if v.requires_grad else out
    if isinstance(v, dict):
        if "state" in v and "param_groups" in v:
            return from_torch(v)
        return type(v)((k, _from_torch(x)) for k, x in v.items())
    if isinstance(v, torch.Size):
        return Size(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_from_torch(x) for x in v)
    return v


def convert_torch_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Convert a ``torch.save`` file into a tinyopt one (needs PyTorch; loads with
    ``weights_only=True``, so the torch file runs no code either)::

        python -c "import tinyopt.serialization as s; s.convert_torch_file('m.pt', 'm.tinyopt')"

    Tensors become tinyopt Tensors (bfloat16 as float32), optimizer state dicts are converted with
    ``tinyopt.optim.torch_compat.from_torch``; ``tinyopt.load(dst)`` then gives the object back.
    """
    import torch

    save(_from_torch(torch.load(src, map_location="cpu", weights_only=True)), dst)
