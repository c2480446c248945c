"""``tinyopt.nn.functional``: the neural-net ops as functions, with ``torch.nn.functional``'s
names, signatures and defaults.  Each records graph nodes; see ``tinyopt.engine.ops``."""

from __future__ import annotations

from tinyopt.engine.ops import (binary_cross_entropy_with_logits, cross_entropy, gelu, l1_loss,
                                leaky_relu, linear, log_softmax, mse_loss, nll_loss, one_hot, relu,
                                sigmoid, silu, softmax, softplus, tanh)

__all__ = ["binary_cross_entropy_with_logits", "cross_entropy", "gelu", "l1_loss", "leaky_relu",
           "linear", "log_softmax", "mse_loss", "nll_loss", "one_hot", "relu", "sigmoid", "silu",
           "softmax", "softplus", "tanh"]
