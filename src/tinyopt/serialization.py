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
works too); writing to a path is atomic, as for every tinyopt checkpoint.

Anything else -- a whole Module (``torch.save(model, "model.pt")``), an optimizer, an object of
yours -- is pickled as ``torch.save`` pickles it (``tinyopt.torch_zip``), and loading it takes
``load(f, weights_only=False)``, as in PyTorch since 2.6: unpickling can run code, so the default
(``weights_only=True``) refuses it with torch's error.  A subclass of a type the safe format
holds (a namedtuple, an ``IntEnum``, a ``defaultdict``, a masked array) is refused at save time
instead, since it would load as its base type; save ``x._asdict()``, ``dict(x)`` and so on.

Files written by ``torch.save`` load without PyTorch (``tinyopt.torch_zip``): state dicts,
optimizer state dicts, nested containers of tensors, with storage sharing and views kept, through
a loader that can only build tensors, containers and plain values (``weights_only=True``).

The keyword form ``to.save(path, model=..., optimizer=...)`` (see ``tinyopt.checkpoint``) keeps
working, and ``to.load`` of such a checkpoint returns its ``{name: state}`` dict.

File format: a tinyopt checkpoint (see ``tinyopt.checkpoint``) whose one entry, ``$object``,
holds ``obj`` (a torch-style zip for pickled objects).
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO

import numpy as np

from tinyopt import checkpoint, torch_zip
from tinyopt.checkpoint import CheckpointError, archive
from tinyopt.checkpoint.format import Encoder, UnsupportedValue
from tinyopt.engine.tensor import Parameter, Size, as_tensor
from tinyopt.torch_zip import add_safe_globals, clear_safe_globals, get_safe_globals, safe_globals

__all__ = ["add_safe_globals", "clear_safe_globals", "convert_torch_file", "get_safe_globals",
           "load", "safe_globals", "save"]

OBJECT = "$object"  # the entry that holds ``obj`` (not a Python identifier: no keyword can clash)

_TORCH_SAVE_OPTIONS = {"pickle_protocol", "_use_new_zipfile_serialization",
                       "_disable_byteorder_record"}


def save(obj: Any, f: str | os.PathLike | BinaryIO | None = None, /, **objects: Any) -> None:
    """``save(obj, f)``: write ``obj`` (a state dict, or nested dicts/lists of Tensors, arrays and
    numbers) to the path or binary file ``f``, as ``torch.save`` does but never pickling.

    ``save(path, **objects)``: the keyword checkpoint of ``tinyopt.checkpoint.save`` (modules,
    optimizers, schedulers, loaders and values by name, and the global generator).

    ``torch.save``'s ``pickle_protocol`` (and private) options are accepted and change nothing;
    ``pickle_module`` is refused.  An ``obj`` holding anything but tensors, arrays, containers
    and plain values is pickled (see the module docstring).
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
    encoder = Encoder(tensors=True)
    try:
        entries = {OBJECT: {"kind": "value", "value": encoder.encode(obj, "obj")}}
    except UnsupportedValue:  # an object the safe format has no place for: pickled, as torch does
        torch_zip.save_pickled(obj, f)
        return
    archive.write(f if hasattr(f, "write") else os.fspath(f), entries, encoder)


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
    """Read what ``save`` (or ``torch.save``) wrote: the saved object for ``save(obj, f)``, the
    ``{name: state}`` dict for a keyword checkpoint.  A tinyopt checkpoint cannot run code; a
    torch zip file is read by a loader that builds only tensors, containers and plain values
    (``weights_only=True``, the default, as in PyTorch), or, with ``weights_only=False``, by
    Python's ``pickle`` (only for files you trust: whole pickled objects need it).  ``mmap`` and
    unpickling options change nothing; ``map_location`` may only name the CPU.

    Raises ``CheckpointError`` (a ValueError) for a truncated, corrupted or foreign file and
    ``pickle.UnpicklingError`` for a torch file holding what ``weights_only`` refuses.
    """
    if pickle_module is not None:
        raise TypeError("load: tinyopt never unpickles, so pickle_module is not supported")
    _check_map_location(map_location)
    if torch_zip.is_torch_zip(f):
        return torch_zip.load(f, map_location, weights_only=weights_only is not False)
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
    """Whether ``f`` looks like a ``torch.save`` file of the legacy format (a bare pickle)."""
    try:
        if hasattr(f, "read"):
            f.seek(start)
            head = f.read(1)
            f.seek(start)
        else:
            with open(f, "rb") as fh:
                head = fh.read(1)
        return head == b"\x80"
    except (OSError, ValueError):
        return False


def _torch_file_hint(path: str) -> str:
    return (f"this file was written by torch.save in its legacy format (before PyTorch 1.6, or "
            f"with _use_new_zipfile_serialization=False), which tinyopt does not read. Re-save it "
            f"with torch.save's default format, or convert it once where PyTorch is installed: "
            f"python -c \"import tinyopt.serialization as s; s.convert_torch_file('{path}', "
            f"'{path}.tinyopt')\".")


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
