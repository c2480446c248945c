"""Utilities on parameters (``torch.nn.utils``): gradient clipping, and parameters as one vector;
``rnn``: packed sequences for the recurrent layers; ``sparse_grad``: a sparse Embedding's gradient
as (rows, values); ``parametrize``/``parametrizations``: tensors computed from others
(``weight_norm``, ``spectral_norm``), and the deprecated hook-based ``weight_norm``."""

from tinyopt.engine.row_sparse import sparse_grad
from tinyopt.nn.utils import parametrizations, parametrize, rnn
from tinyopt.nn.utils.clip_grad import (clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_,
                                        get_total_norm)
from tinyopt.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from tinyopt.nn.utils.weight_norm import remove_weight_norm, weight_norm

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters", "rnn", "sparse_grad", "parametrize",
           "parametrizations", "weight_norm", "remove_weight_norm"]
