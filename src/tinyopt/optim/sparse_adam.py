"""SparseAdam (``torch.optim.SparseAdam``): Adam over the rows of a row-sparse gradient only."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyopt.engine.row_sparse import is_row_sparse, row_mask
from tinyopt.engine.tensor import Parameter, Tensor
from tinyopt.kernels import row_sparse as kernels
from tinyopt.optim.adam import check_adam_hyperparameters
from tinyopt.optim.optimizer import Optimizer, call_closure

_DENSE = "SparseAdam does not support dense gradients, please consider Adam instead"


class SparseAdam(Optimizer):
    r"""The lazy Adam of ``torch.optim.SparseAdam``: only the rows of a parameter that its
    row-sparse gradient holds (the rows an ``nn.Embedding(..., sparse=True)`` looked up since
    ``zero_grad``) have their moments and values updated; every other row is left as it is.

    .. math::
        m_r &\leftarrow \beta_1 m_r + (1 - \beta_1) g_r, \qquad
        v_r \leftarrow \beta_2 v_r + (1 - \beta_2) g_r^2 \\
        \theta_r &\leftarrow \theta_r - \gamma \frac{\sqrt{1 - \beta_2^t}}{1 - \beta_1^t}
        \frac{m_r}{\sqrt{v_r} + \epsilon}
        \quad\text{for each row } r \text{ looked up} \;(g \to -g \text{ if maximize})

    (Kingma & Ba, https://arxiv.org/abs/1412.6980.)  ``t`` is the parameter's ``step``, counted
    at every ``step()`` in which it has a gradient, even one with no rows.  State: ``step`` (an
    int, as torch), ``exp_avg``, ``exp_avg_sq``.  A dense gradient raises torch's RuntimeError.

    Example::

        emb = nn.Embedding(50000, 64, sparse=True)
        opt = optim.SparseAdam(emb.parameters(), lr=1e-3)
    """

    def __init__(self, params: Iterable, lr: float | Tensor = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 maximize: bool = False) -> None:
        if isinstance(lr, (Tensor, np.ndarray)) and np.asarray(lr).size != 1:
            raise ValueError("Tensor lr must be 1-element")
        check_adam_hyperparameters(lr, eps, betas, positive=True)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, maximize=maximize))

    def step(self, closure: Callable[[], Any] | None = None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss."""
        loss = call_closure(closure)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            todo = []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if not is_row_sparse(p):
                    raise RuntimeError(_DENSE)
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = np.zeros_like(p.value)
                    state["exp_avg_sq"] = np.zeros_like(p.value)
                state["step"] += 1
                todo.append((p, state))
            lr = float(np.asarray(group["lr"]))
            for p, state in todo:
                self._update(p, state, lr, beta1, beta2, group["eps"], group["maximize"])
        return loss

    @staticmethod
    def _update(p: Parameter, state: dict, lr: float, beta1: float, beta2: float, eps: float,
                maximize: bool) -> None:
        data = p.value
        if data.dtype not in (np.float32, np.float64) or p._grad.dtype != data.dtype:
            raise NotImplementedError(f"SparseAdam: parameters of dtype {data.dtype} are not "
                                      "supported (float32 and float64 are)")
        step = state["step"]
        step_size = lr * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
        V = data.shape[0]
        f = data.dtype.type  # the scalars in the parameter's dtype, as torch's tensor-scalar ops
        g, mask = p._grad.reshape(V, -1), row_mask(p)
        bad = np.empty(-(-V // kernels.ROWS_PER_CHUNK), np.int64)
        uint = np.uint32 if g.dtype == np.float32 else np.uint64
        kernels.dense_rows(mask, g.view(uint), uint(np.iinfo(uint).max >> 1), bad)
        if (bad >= 0).any():  # a dense contribution: torch's error, nothing updated
            raise RuntimeError(_DENSE)
        kernels.sparse_adam(data.reshape(V, -1), g, state["exp_avg"].reshape(V, -1),
                            state["exp_avg_sq"].reshape(V, -1), np.flatnonzero(mask),
                            f(1 - beta1), f(1 - beta2), f(eps), f(step_size), bool(maximize))

    # ---- state dicts: step is an int, as torch's ------------------------------------------------
    def _check_loaded_state(self, state: dict, groups: list[dict], labels: dict[int, str]) -> None:
        for p, s in state.items():
            if isinstance(p, Parameter) and s and not {"step", "exp_avg", "exp_avg_sq"} <= set(s):
                raise ValueError(f"load_state_dict: parameter {labels[id(p)]} has state keys "
                                 f"{sorted(s)}, expected 'step', 'exp_avg' and 'exp_avg_sq'")

    def _set_state(self, state, groups: list[dict]) -> None:
        for p, s in state.items():
            if isinstance(p, Parameter) and "step" in s:
                s["step"] = int(s["step"])
        super()._set_state(state, groups)
