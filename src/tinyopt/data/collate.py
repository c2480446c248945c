"""Collation: how a list of samples becomes a batch (``default_collate``), and how one sample is
passed through when automatic batching is off (``default_convert``), as in ``torch.utils.data``."""

from __future__ import annotations

import collections.abc
from typing import Any

import numpy as np

from tinyopt.engine.tensor import Parameter, Tensor

__all__ = ["default_collate", "default_convert"]

_COLLATE_TYPES = "numpy arrays, numbers, strings, dicts, lists or tuples"


def default_collate(batch: list[Any]) -> Any:
    """Merge a list of samples into a batch, as ``torch.utils.data.default_collate`` but into numpy.

    numpy arrays, numpy scalars and tinyopt Tensors are stacked along a new first axis; Python
    ``float``/``int``/``bool`` become float64/int64/bool arrays; strings stay a list; dicts are
    collated per key; tuples and lists are collated per position (a tuple sample gives a list,
    as in PyTorch; a namedtuple gives the namedtuple).
    """
    if not batch:
        raise ValueError("default_collate: the batch is empty")
    elem = batch[0]
    if isinstance(elem, Tensor):
        return np.stack([p._data if isinstance(p, Parameter) else p.numpy() for p in batch])
    if isinstance(elem, (np.ndarray, np.generic)):
        if elem.dtype.kind in "OUSV":
            if elem.dtype.kind in "US" and isinstance(elem, np.generic):
                return list(batch)
            raise TypeError(f"default_collate: batch must contain {_COLLATE_TYPES}; found an "
                            f"array of dtype {elem.dtype}")
        return np.stack(batch)
    if isinstance(elem, bool):
        return np.array(batch, dtype=np.bool_)
    if isinstance(elem, int):
        return np.array(batch, dtype=np.int64)
    if isinstance(elem, float):
        return np.array(batch, dtype=np.float64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(s) != size for s in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain {_COLLATE_TYPES}; found "
                    f"{type(elem).__name__}")


def default_convert(data: Any) -> Any:
    """One sample as ``DataLoader(batch_size=None)`` yields it: Tensors as numpy arrays, inside
    dicts, lists and tuples too; everything else unchanged."""
    if isinstance(data, Tensor):
        return data._data if isinstance(data, Parameter) else data.numpy()
    if isinstance(data, collections.abc.Mapping):
        return {k: default_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, (list, tuple)):
        return type(data)(default_convert(d) for d in data)
    return data
