"""The engine: tensors, static graphs, autodiff and planned execution.

Ops over concrete tensors run at once; ops over Parameters (or anything that requires grad)
only record graph nodes, and realizing one runs its graph: node by node the first time
(``engine/eager.py``), and once the structure repeats as a plan it is compiled into
once (topological order, planned memory, one kernel call per node).  The ggml example,
f(x) = a*x^2 + b::

    >>> import tinyopt as to
    >>> x, a = to.Parameter([2.0]), to.Parameter([3.0])
    >>> b = to.tensor([4.0])
    >>> f = (a * x * x + b).sum()
    >>> f.backward()            # runs forward + backward (eagerly: a structure seen once)
    >>> f.item(), x.grad[0].item()     # 3*2^2 + 4 and df/dx = 2*a*x
    (16.0, 12.0)
    >>> with to.no_grad():
    ...     x.fill_(3.0)
    ...     x.grad = None
    >>> f = (a * x * x + b).sum(); f.backward()   # same structure: compiled now, new values
    >>> f.item(), x.grad[0].item()
    (31.0, 18.0)
"""
import typing as _typing

from tinyopt.engine.device import device
from tinyopt.engine.dtypes import (bool_, float32, float64, int8, int16, int32, int64,
                                   result_type, uint8)
from tinyopt.engine.grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                                      is_inference_mode_enabled, no_grad, set_grad_enabled)
from tinyopt.engine.node import Node
from tinyopt.engine.random import (Generator, default_generator, get_rng_state, manual_seed,
                                   seed, set_rng_state)
from tinyopt.engine.tensor import Parameter, Size, Tensor, as_tensor, from_numpy, tensor
from tinyopt.engine import ops
from tinyopt.engine.lazy_exports import exports as _exports
from tinyopt.engine.lazy_exports import table as _table

if _typing.TYPE_CHECKING:  # on first use (``tinyopt.engine.lazy_exports``): plans come with realize
    from tinyopt.engine.dot import to_dot
    from tinyopt.engine.plan import Plan
    from tinyopt.engine.plan_cache import CacheInfo, cache_clear, cache_info, set_cache_limit
    from tinyopt.engine.realize import get_plan

__getattr__, __dir__ = _exports(__name__, globals(), _table({
    "tinyopt.engine.dot": "to_dot",
    "tinyopt.engine.plan": "Plan",
    "tinyopt.engine.plan_cache": "CacheInfo cache_clear cache_info set_cache_limit",
    "tinyopt.engine.realize": "get_plan",
}))
