"""Utilities on parameters: gradient clipping (``torch.nn.utils``); ``rnn``: packed sequences."""

from tinyopt.nn.utils import rnn
from tinyopt.nn.utils.clip_grad import (clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_,
                                        get_total_norm)

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "rnn"]
