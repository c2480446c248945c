"""Convert optimizer state dicts between PyTorch (tensors) and tinyopt (numpy arrays).

Moving a run from PyTorch::

    sd = torch.load("optim.pt")                      # torch.optim.Adam(...).state_dict()
    opt = tinyopt.optim.Adam(model.parameters())
    opt.load_state_dict(from_torch(sd))

and back: ``torch_opt.load_state_dict(to_torch(opt.state_dict()))``.  The layouts are the same
(integer ids, ``param_groups`` with every hyperparameter, the same state keys); only the array
type differs.  PyTorch is imported only when ``to_torch`` is called: it is never a dependency.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyopt.engine.tensor import Tensor


def _is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach") and hasattr(x, "cpu")


def _to_numpy(x):
    if _is_tensor(x):
        t = x.detach().cpu()
        if t.dtype.is_floating_point and t.dtype not in _NUMPY_FLOATS():
            t = t.float()
        return t.numpy().copy()
    if isinstance(x, dict):
        return {k: _to_numpy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_to_numpy(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_to_numpy(v) for v in x)
    return x


def _NUMPY_FLOATS():  # noqa: N802 - the torch float dtypes numpy can hold
    import torch
    return (torch.float16, torch.float32, torch.float64)


def from_torch(state_dict: dict[str, Any], optimizer: Any = None) -> dict[str, Any]:
    """A copy of a ``torch.optim`` state dict with every tensor turned into a numpy array.

    ``step`` tensors become 0-d float32 arrays; bfloat16 tensors become float32.  Tensors in
    ``param_groups`` (e.g. a tensor ``lr``) become Python numbers.  With ``optimizer`` (the
    tinyopt optimizer it is for), a group saved by an older torch gets the hyperparameters it
    lacks (``maximize``, ``foreach``, ``amsgrad``...) with the values torch's ``__setstate__``
    gives them, as ``optimizer.load_state_dict`` would.
    """
    out = {k: v for k, v in state_dict.items() if k not in ("state", "param_groups")}
    out["state"] = {k: _to_numpy(v) for k, v in state_dict.get("state", {}).items()}
    groups = []
    for g in state_dict.get("param_groups", []):
        ng = {}
        for k, v in g.items():
            v = _to_numpy(v)
            if isinstance(v, np.ndarray) and v.size == 1 and k != "params":
                v = v.item()
            elif isinstance(v, tuple):
                v = tuple(x.item() if isinstance(x, np.ndarray) and x.size == 1 else x for x in v)
            ng[k] = v
        if optimizer is not None:
            optimizer._fill_legacy(ng)
        groups.append(ng)
    out["param_groups"] = groups
    return out


def to_torch(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A copy of a tinyopt state dict with every Tensor or array turned into a torch tensor.

    ``step`` stays a 0-d float32 tensor, as ``torch.optim`` keeps it.
    """
    import torch

    def conv(x):
        if isinstance(x, (np.ndarray, Tensor)):
            return torch.from_numpy(np.array(np.asarray(x), copy=True))
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        if isinstance(x, list):  # LBFGS's old_dirs, ro, al...
            return [conv(v) for v in x]
        return x

    out = {k: v for k, v in state_dict.items() if k not in ("state", "param_groups")}
    out["state"] = {k: conv(v) for k, v in state_dict.get("state", {}).items()}
    out["param_groups"] = [dict(g, params=list(g["params"])) for g in state_dict.get("param_groups", [])]
    return out
