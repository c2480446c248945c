"""Collation: how a list of samples becomes a batch (``default_collate``), and how one sample is
passed through when automatic batching is off (``default_convert``), as in ``torch.utils.data``.

Batches are tinyopt Tensors that share the collated numpy arrays' memory (no copy):
``collate_arrays`` does the collation into numpy (what worker processes send), ``as_tensors``
wraps the arrays."""

from __future__ import annotations

import collections.abc
from typing import Any

import numpy as np

from tinyopt.engine.tensor import Parameter, Tensor, leaf

__all__ = ["default_collate", "default_convert"]

_COLLATE_TYPES = "numpy arrays, numbers, strings, dicts, lists or tuples"


def default_collate(batch: list[Any]) -> Any:
    """Merge a list of samples into a batch, as ``torch.utils.data.default_collate``.

    numpy arrays, numpy scalars and tinyopt Tensors are stacked along a new first axis; Python
    ``float``/``int``/``bool`` become float64/int64/bool tensors; strings stay a list; dicts are
    collated per key; tuples and lists are collated per position (a tuple sample gives a list,
    as in PyTorch; a namedtuple gives the namedtuple).  The tensors share the stacked arrays.
    """
    return as_tensors(collate_arrays(batch))


def as_tensors(data: Any, scalars: bool = False) -> Any:
    """``data`` with every numpy array (in dicts, lists, tuples) wrapped as a Tensor, no copy;
    with ``scalars``, numpy scalars too."""
    if isinstance(data, (np.ndarray, np.generic)) and data.dtype.kind not in "OUSV":
        if isinstance(data, np.ndarray):
            return leaf(data)
        return leaf(np.asarray(data)) if scalars else data
    if isinstance(data, collections.abc.Mapping):
        return {k: as_tensors(v, scalars) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(as_tensors(d, scalars) for d in data))
    if isinstance(data, (list, tuple)):
        return type(data)(as_tensors(d, scalars) for d in data)
    return data


def collate_arrays(batch: list[Any]) -> Any:
    """``default_collate`` into numpy arrays (see there)."""
    if not batch:
        raise ValueError("default_collate: the batch is empty")
    elem = batch[0]
    if isinstance(elem, Tensor):
        return np.stack([p.value if isinstance(p, Parameter) else p.numpy() for p in batch])
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
        return {key: collate_arrays([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(collate_arrays(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(s) != size for s in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [collate_arrays(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain {_COLLATE_TYPES}; found "
                    f"{type(elem).__name__}")


def default_convert(data: Any) -> Any:
    """One sample as ``DataLoader(batch_size=None)`` yields it, as PyTorch's ``default_convert``:
    numpy arrays and numpy scalars become Tensors (sharing memory), inside dicts, lists and tuples
    too; everything else (Tensors, Python numbers, strings) is unchanged."""
    return as_tensors(data, scalars=True)
