"""The checkpoint format: Python values <-> a JSON manifest plus numpy arrays.

A checkpoint ("tinyopt-checkpoint", version 1) is a manifest and arrays (``archive.py`` puts them
in a zip file).  The manifest records the format name and version, and each named entry's kind --
``"state"`` (an object's state dict), ``"generator"`` (a ``tinyopt.Generator``'s state) or
``"value"`` -- its class name and its value as JSON, where non-JSON values are tagged objects
``{"$": tag, ...}`` with tag ``array``, ``scalar``, ``tuple``, ``dict``, ``odict``, ``counter``,
``size``, ``float`` or ``tensor`` (an array refers to its ``arrays/<n>.npy`` entry, whose dtype
and shape the manifest also records; bfloat16 arrays are stored as their uint16 bits, tagged
``"as": "bfloat16"``).  Decoding checks every tag and builds only these values: no class named in
a file is ever imported.
"""

from __future__ import annotations

import collections.abc
import json
import math
import os
import re
from typing import Any

import numpy as np

from tinyopt.engine import random
from tinyopt.engine.dtypes import is_low
from tinyopt.engine.tensor import Parameter, Size, Tensor, as_tensor

FORMAT = "tinyopt-checkpoint"
VERSION = 1
_ENTRY = re.compile(r"arrays/(0|[1-9][0-9]*)\.npy")
_KINDS = ("state", "generator", "value")
# the mappings that come back as their own type (a Counter: MultiStepLR's milestones, as torch's)
_DICT_TAGS = {collections.OrderedDict: "odict", collections.Counter: "counter"}

__all__ = ["FORMAT", "VERSION", "CheckpointError", "Decoder", "Encoder", "check_manifest",
           "decode_entries", "entry_for", "make_manifest", "tensor_array"]


class CheckpointError(ValueError):
    """A checkpoint file is truncated, corrupted, foreign or does not hold what was asked for."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def tensor_array(t: Tensor) -> np.ndarray:
    """The array a Tensor saves: its storage (a graph node's computed value)."""
    return t.numpy()

class Encoder:
    """Turns a nested value into JSON, collecting its arrays (each object once) for .npy entries.

    With ``tensors=True`` a Tensor is tagged ``"tensor"`` (and comes back as a Tensor), else it is
    saved as its array."""

    def __init__(self, tensors: bool = False) -> None:
        self.tensors = tensors
        self.arrays: list[tuple[str, np.ndarray]] = []
        self.bfloat16: set[str] = set()  # entries holding bfloat16 bit patterns (as uint16)
        self._entries: dict[int, str] = {}
        self._keep: list[Any] = []  # keeps deduplicated objects alive so ids stay unique
        self._path: set[int] = set()

    def _entry(self, obj: Any, arr: np.ndarray, where: str) -> str:
        key = id(obj)
        if key in self._entries:
            return self._entries[key]
        if arr.dtype.hasobject:
            raise TypeError(f"cannot save {where}: arrays of dtype {arr.dtype} hold Python objects "
                            f"(only plain numeric, bool and string arrays can be saved)")
        name = f"arrays/{len(self.arrays)}.npy"
        if arr.dtype.name == "bfloat16":  # .npy has no bfloat16: its bits, tagged in the manifest
            arr = arr.view(np.uint16)
            self.bfloat16.add(name)
        self.arrays.append((name, arr))
        self._entries[key] = name
        self._keep.append(obj)
        return name

    def encode(self, v: Any, where: str) -> Any:
        kind = type(v)
        if v is None or kind is bool or kind is str:
            return v
        if kind is np.ndarray or isinstance(v, np.memmap):
            return {"$": "array", "entry": self._entry(v, np.asarray(v), where)}
        if isinstance(v, np.generic):
            return {"$": "scalar", "entry": self._entry(v, np.asarray(v), where)}
        if isinstance(v, Tensor):
            entry = self._entry(v, np.asarray(tensor_array(v)), where)
            if self.tensors:
                return {"$": "tensor", "entry": entry, "requires_grad": bool(v.requires_grad),
                        "parameter": isinstance(v, Parameter)}
            return {"$": "array", "entry": entry}
        if kind is int:
            return v
        if kind is Size:
            return {"$": "size", "items": [self.encode(int(n), where) for n in v]}
        if kind is float:
            if math.isfinite(v):
                return v
            return {"$": "float", "value": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
        if kind in (list, tuple, dict, collections.OrderedDict, collections.Counter):
            if id(v) in self._path:
                raise ValueError(f"cannot save {where}: it contains itself (circular reference)")
            self._path.add(id(v))
            try:
                if kind is list:
                    return [self.encode(x, f"{where}[{i}]") for i, x in enumerate(v)]
                if kind is tuple:
                    return {"$": "tuple",
                            "items": [self.encode(x, f"{where}[{i}]") for i, x in enumerate(v)]}
                return self._encode_dict(v, where)
            finally:
                self._path.discard(id(v))
        for base in (str, int, float, list, tuple, dict, collections.abc.Mapping, np.ndarray):
            if isinstance(v, base):  # a subclass would come back as its base: refuse it
                hint = ("x._asdict() or tuple(x)" if hasattr(v, "_fields") else
                        "dict(x)" if base is collections.abc.Mapping else
                        "np.asarray(x)" if base is np.ndarray else f"{base.__name__}(x)")
                raise TypeError(f"cannot save {where}: a {kind.__module__}.{kind.__qualname__} "
                                f"would load as a plain {base.__name__} (loading never imports "
                                f"a class, so that it cannot run code); save {hint} instead")
        raise TypeError(f"cannot save {where}: values of type {type(v).__module__}."
                        f"{type(v).__qualname__} are not supported (a checkpoint holds numpy "
                        f"arrays and scalars, None, bool, int, float, str, and lists, tuples and "
                        f"dicts of these)")

    def _encode_dict(self, d: dict, where: str) -> Any:
        keys = list(d.keys())
        tag = _DICT_TAGS.get(type(d), "dict")
        if tag == "dict" and all(type(k) is str for k in keys) and "$" not in d:
            return {k: self.encode(d[k], f"{where}[{k!r}]") for k in keys}
        items = []
        for k in keys:
            if not (k is None or type(k) in (bool, int, float, str, tuple)):
                raise TypeError(f"cannot save {where}: dict key {k!r} of type "
                                f"{type(k).__name__} (keys may be str, int, float, bool, None "
                                f"or tuples of these)")
            items.append([self.encode(k, f"{where} key {k!r}"), self.encode(d[k], f"{where}[{k!r}]")])
        return {"$": tag, "items": items}

class Decoder:
    """Rebuilds values from manifest JSON and the loaded arrays, checking every tag."""

    def __init__(self, path: str, arrays: dict[str, np.ndarray]):
        self.path = path
        self.arrays = arrays

    def fail(self, where: str, problem: str) -> CheckpointError:
        return CheckpointError(self.path, f"corrupted manifest at {where}: {problem}")

    def decode(self, v: Any, where: str) -> Any:
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [self.decode(x, f"{where}[{i}]") for i, x in enumerate(v)]
        if not isinstance(v, dict):
            raise self.fail(where, f"unexpected JSON value of type {type(v).__name__}")
        if "$" not in v:
            return {k: self.decode(x, f"{where}[{k!r}]") for k, x in v.items()}
        tag = v["$"]
        fields = {"array": {"entry"}, "scalar": {"entry"}, "tuple": {"items"},
                  "dict": {"items"}, "odict": {"items"}, "counter": {"items"}, "size": {"items"},
                  "float": {"value"},
                  "tensor": {"entry", "requires_grad"}}.get(tag)
        # (files written before tensors recorded "parameter" hold Parameters where requires_grad)
        optional = {"parameter"} if tag == "tensor" else set()
        if fields is None or not fields | {"$"} <= set(v) <= fields | optional | {"$"}:
            raise self.fail(where, f"unknown tagged value {json.dumps(v)[:200]}")
        if tag == "tensor":
            grad, param = v["requires_grad"], v.get("parameter", v["requires_grad"])
            if not (isinstance(grad, bool) and isinstance(param, bool)):
                raise self.fail(where, "'requires_grad' and 'parameter' of a tensor must be true "
                                       "or false")
            arr = self.decode({"$": "array", "entry": v["entry"]}, where)
            if grad and arr.dtype.kind != "f" and not is_low(arr.dtype):
                raise self.fail(where, f"a tensor of dtype {arr.dtype} cannot require grad")
            if param:
                return Parameter(arr, requires_grad=grad)
            t = as_tensor(arr)
            return t.requires_grad_() if grad else t
        if tag in ("array", "scalar"):
            entry = v["entry"]
            if not isinstance(entry, str) or entry not in self.arrays:
                raise self.fail(where, f"refers to array entry {entry!r}, which the manifest does "
                                       f"not list")
            arr = self.arrays[entry]
            if tag == "scalar":
                if arr.ndim != 0:
                    raise self.fail(where, f"scalar entry {entry} has shape {arr.shape}")
                return arr[()]
            return arr
        if tag == "float":
            values = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
            if v["value"] not in values:
                raise self.fail(where, f"bad float {v['value']!r}")
            return values[v["value"]]
        items = v["items"]
        if not isinstance(items, list):
            raise self.fail(where, f"'items' of a {tag} must be a list")
        if tag == "tuple":
            return tuple(self.decode(x, f"{where}[{i}]") for i, x in enumerate(items))
        if tag == "size":
            if not all(type(n) is int and n >= 0 for n in items):
                raise self.fail(where, "a Size holds non-negative ints")
            return Size(items)
        out = {"odict": collections.OrderedDict, "counter": collections.Counter}.get(tag, dict)()
        for i, item in enumerate(items):
            if not (isinstance(item, list) and len(item) == 2):
                raise self.fail(where, f"dict item {i} is not a [key, value] pair")
            key = self.decode(item[0], f"{where} key {i}")
            try:
                out[key] = self.decode(item[1], f"{where}[{key!r}]")
            except TypeError as e:  # an unhashable key
                raise self.fail(where, f"dict key {key!r} is not hashable") from e
        return out


def entry_for(name: str, obj: Any, encoder: Encoder) -> dict[str, Any]:
    """The manifest record of one keyword of ``save``: its kind and its encoded value."""
    if isinstance(obj, random.Generator):
        return {"kind": "generator", "value": encoder.encode(obj.get_state(), name)}
    state_dict = getattr(obj, "state_dict", None)
    if callable(state_dict) and not isinstance(obj, type):
        return {"kind": "state", "type": f"{type(obj).__module__}.{type(obj).__qualname__}",
                "value": encoder.encode(state_dict(), name)}
    return {"kind": "value", "value": encoder.encode(obj, name)}


def make_manifest(entries: dict[str, Any], encoder: Encoder) -> dict[str, Any]:
    """The manifest of ``entries`` (from :func:`entry_for`) and ``encoder``'s arrays."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "objects": entries,
        "arrays": {name: {"dtype": arr.dtype.str, "shape": list(arr.shape),
                          **({"as": "bfloat16"} if name in encoder.bfloat16 else {})}
                   for name, arr in encoder.arrays},
    }


def check_manifest(path: str, manifest: Any) -> None:
    """Refuse a manifest that is not this format's, or is newer, or is malformed."""
    def bad(problem: str) -> CheckpointError:
        return CheckpointError(path, f"corrupted manifest: {problem}")

    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        fmt = manifest.get("format") if isinstance(manifest, dict) else None
        raise CheckpointError(path, f"not a tinyopt checkpoint: manifest format is {fmt!r}, "
                                    f"expected {FORMAT!r}")
    version = manifest.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise bad(f"bad format version {version!r}")
    if version > VERSION:
        raise CheckpointError(path, f"written in checkpoint format version {version} by a newer "
                                    f"tinyopt; this tinyopt reads version {VERSION}")
    objects, arrays = manifest.get("objects"), manifest.get("arrays")
    if not isinstance(objects, dict) or not isinstance(arrays, dict):
        raise bad("'objects' and 'arrays' must be JSON objects")
    for name, info in arrays.items():
        if not _ENTRY.fullmatch(name):
            raise bad(f"bad array entry name {name!r}")
        if not (isinstance(info, dict) and isinstance(info.get("dtype"), str)
                and isinstance(info.get("shape"), list)
                and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                        for s in info["shape"])):
            raise bad(f"bad record for {name}: {json.dumps(info)[:200]}")
    for name, entry in objects.items():
        if not (isinstance(entry, dict) and entry.get("kind") in _KINDS and "value" in entry):
            raise bad(f"bad record for entry {name!r}")


def decode_entries(path: str, manifest: dict[str, Any],
                   arrays: dict[str, np.ndarray]) -> tuple[dict[str, dict], dict[str, Any]]:
    """``(records, values)`` per entry name of a checked manifest and its loaded arrays; a
    generator entry must hold a state a Generator accepts."""
    decoder = Decoder(path, arrays)
    records = manifest["objects"]
    try:
        values = {name: decoder.decode(rec["value"], name) for name, rec in records.items()}
    except RecursionError as e:
        raise CheckpointError(path, "corrupted manifest: nested too deeply") from e
    for name, rec in records.items():
        if rec["kind"] == "generator":
            try:
                random.Generator().set_state(values[name])
            except Exception as e:  # noqa: BLE001
                raise CheckpointError(path, f"corrupted generator state in entry {name!r}: "
                                            f"{e}") from e
    return records, values
