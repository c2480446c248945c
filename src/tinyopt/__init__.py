"""tinyopt: PyTorch's training API on a small ggml-like static-graph engine."""
from tinyopt.engine import (Generator, Parameter, Tensor, enable_grad, float32, float64,
                            get_rng_state, int64, is_grad_enabled, manual_seed, no_grad,
                            set_grad_enabled, set_rng_state, tensor)

__version__ = "0.1.0"
