"""The engine: lazy tensors, static graphs, autodiff and planned execution."""
from tinyopt.engine.dtypes import float32, float64, int64
from tinyopt.engine.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from tinyopt.engine.tensor import Parameter, Tensor, as_tensor, tensor
from tinyopt.engine.random import Generator, default_generator, get_rng_state, manual_seed, set_rng_state
