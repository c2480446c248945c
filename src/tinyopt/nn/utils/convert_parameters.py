"""``parameters_to_vector`` and ``vector_to_parameters``, as ``torch.nn.utils``: all parameters as
one flat vector, and back."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tinyopt.engine.ops.movement import cat
from tinyopt.engine.tensor import Parameter, Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters: Iterable[Parameter]) -> Tensor:
    """The parameters flattened and concatenated, in order: a Tensor that is differentiable with
    respect to them (as ``torch.cat([p.view(-1) for p in parameters])``)."""
    params = list(parameters)
    if not params:
        raise RuntimeError("parameters_to_vector: expected a non-empty iterable of parameters")
    return cat([p.reshape(-1) for p in params])


def vector_to_parameters(vec, parameters: Iterable[Parameter]) -> None:
    """Copy consecutive slices of the 1-D ``vec`` into the parameters' storage (no gradient);
    ``vec`` must hold exactly as many elements as the parameters together."""
    if not isinstance(vec, (Tensor, np.ndarray)):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    params = list(parameters)
    values = np.asarray(vec.data if isinstance(vec, Parameter) else
                        vec.numpy() if isinstance(vec, Tensor) else vec)
    if values.ndim != 1:
        raise RuntimeError(f"vector_to_parameters: expected a 1-D vector, got shape "
                           f"{values.shape}")
    total = sum(p.numel() for p in params)
    if values.size != total:
        raise RuntimeError(f"vector_to_parameters: the vector has {values.size} elements but the "
                           f"parameters have {total}")
    offset = 0
    for p in params:
        n = p.numel()
        np.copyto(p.value, values[offset:offset + n].reshape(p.shape), casting="same_kind")
        offset += n
