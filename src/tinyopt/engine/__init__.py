"""The engine: lazy tensors, static graphs, autodiff and planned execution.

Ops on tensors only record graph nodes; realizing a tensor compiles the graph once into a plan
(topological order, planned memory, one kernel call per node) and runs it.  The ggml example,
f(x) = a*x^2 + b::

    >>> import tinyopt as to
    >>> x, a = to.Parameter([2.0]), to.Parameter([3.0])
    >>> b = to.tensor([4.0])
    >>> f = (a * x * x + b).sum()
    >>> f.backward()            # builds, plans and runs forward + backward
    >>> f.item(), x.grad[0]     # 3*2^2 + 4 and df/dx = 2*a*x
    (16.0, 12.0)
    >>> x.data[:] = 3.0; x.grad = None
    >>> f = (a * x * x + b).sum(); f.backward()   # same structure: the cached plan, new values
    >>> f.item(), x.grad[0]
    (31.0, 18.0)
"""
from tinyopt.engine.dtypes import float32, float64, int64
from tinyopt.engine.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from tinyopt.engine.random import (Generator, default_generator, get_rng_state, manual_seed,
                                   set_rng_state)
from tinyopt.engine.tensor import Parameter, Tensor, as_tensor, tensor
from tinyopt.engine import ops
from tinyopt.engine.plan import (CacheInfo, Plan, cache_clear, cache_info,
                                 set_cache_limit)
from tinyopt.engine.realize import get_plan
from tinyopt.engine.dot import to_dot
