"""Adafactor: factored second moments for matrices (``torch.optim.Adafactor``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyopt.optim.optimizer import Optimizer, _cast_state


def _lerp(a: np.ndarray, b: np.ndarray, w: float) -> None:
    """``a.lerp_(b, w)`` in place, with PyTorch's two formulas (``w`` in ``a``'s dtype)."""
    w = a.dtype.type(w)
    if abs(w) < 0.5:
        a += w * (b - a)
    else:
        a[...] = b - (b - a) * (1 - w)


class Adafactor(Optimizer):
    r"""Adafactor (Shazeer & Stern 2018, https://arxiv.org/abs/1804.04235) as
    ``torch.optim.Adafactor``: PyTorch's variant, with ``lr`` capping the relative step and
    scaling the decoupled weight decay, and :math:`\epsilon_1` applied to the estimate.

    .. math::
        \hat\beta_{2,t} &= 1 - t^{\tau}, \qquad \rho_t = \min(\gamma, 1/\sqrt t), \qquad
        \alpha_t = \max(\epsilon_2, \mathrm{RMS}(\theta_{t-1}))\,\rho_t, \qquad
        \theta \leftarrow \theta(1 - \gamma\lambda) \\
        R_t &= \mathrm{lerp}(R_{t-1}, \mathrm{mean}_{-1}(G^2), 1 - \hat\beta_{2,t}), \quad
        C_t = \mathrm{lerp}(C_{t-1}, \mathrm{mean}_{-2}(G^2), 1 - \hat\beta_{2,t}), \quad
        \hat V_t = \frac{R_t C_t}{\max(\mathrm{mean}_{-2}(R_t), \epsilon_1)}
        \quad (\ge 2\text{-d; else } \hat V_t = \mathrm{lerp}(\hat V_{t-1}, G^2, \cdot)) \\
        U_t &= G / \sqrt{\max(\hat V_t, \epsilon_1^2)}, \qquad
        \theta_t = \theta - \frac{\alpha_t}{\max(1, \mathrm{RMS}(U_t)/d)}\, U_t

    A parameter of 2 or more dimensions keeps the row and column factors over its last two
    dimensions (``row_var`` shaped ``(..., n, 1)``, ``col_var`` ``(..., 1, m)``), sublinear
    memory; others keep ``variance``.  ``eps=(None, 1e-3)``: :math:`\epsilon_1` None means the
    dtype's machine epsilon.

    State: ``step`` (0-d float32), ``row_var`` and ``col_var``, or ``variance``.  ``foreach`` is
    accepted and ignored.  Not fused yet: each parameter is updated by a few numpy passes (its
    norms decide its step size), as PyTorch's for-loop implementation.

    Example::

        opt = Adafactor(model.parameters(), lr=1e-2)
    """

    def __init__(self, params: Iterable, lr: float = 1e-2, beta2_decay: float = -0.8,
                 eps: tuple[float | None, float] = (None, 1e-3), d: float = 1.0,
                 weight_decay: float = 0.0, *, foreach: bool | None = None,
                 maximize: bool = False) -> None:
        defaults = dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d,
                        weight_decay=weight_decay, foreach=foreach, maximize=maximize)
        self._validate(defaults)
        super().__init__(params, defaults)

    @staticmethod
    def _validate(group: dict[str, Any]) -> None:
        lr, eps = group["lr"], group["eps"]
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= group["beta2_decay"]:
            raise ValueError(f"beta2_decay should be <= 0 but is: {group['beta2_decay']}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= group["d"]:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {group['d']}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"weight_decay should be >= 0 but is: {group['weight_decay']}")

    def _check_group(self, group: dict[str, Any]) -> None:
        for p in group["params"]:
            dt = np.dtype(p.dtype)
            if dt.kind != "f" or dt.itemsize < 4:
                raise TypeError(f"Adafactor: tinyopt optimizes float32 and float64 parameters "
                                f"with Adafactor, got {dt}")
        self._validate(group)

    def step(self, closure: Callable[[], Any] | None = None):
        """Perform one optimization step (``closure``: optional, re-evaluates and returns the
        loss)."""
        loss = self._call_closure(closure)
        for group in self.param_groups:
            lr, d, wd = float(group["lr"]), group["d"], group["weight_decay"]
            eps1, eps2 = group["eps"]
            for p in group["params"]:
                if p._grad is None:
                    continue
                self._update(p, group, lr, d, wd, eps1, eps2)
        return loss

    def _update(self, p, group, lr, d, wd, eps1, eps2) -> None:
        theta, grad = p._data, p._grad
        if group["maximize"]:
            grad = -grad
        if eps1 is None:
            eps1 = float(np.finfo(theta.dtype).eps)
        st = self.state[p]
        if not st:
            st["step"] = np.array(0.0, dtype=np.float32)
            if grad.ndim > 1:
                st["row_var"] = np.zeros(grad.shape[:-1] + (1,), dtype=grad.dtype)
                st["col_var"] = np.zeros(grad.shape[:-2] + (1,) + grad.shape[-1:],
                                         dtype=grad.dtype)
            else:
                st["variance"] = np.zeros_like(grad)
        st["step"] = np.array(st["step"] + np.float32(1), dtype=np.float32)  # (float32, as torch)
        t = float(st["step"])
        one_minus_beta2_t = t ** group["beta2_decay"]
        rho_t = min(lr, 1 / (t ** 0.5))
        alpha = max(eps2, float(np.linalg.norm(theta.reshape(-1))) / (theta.size ** 0.5)) * rho_t
        if wd != 0:
            theta *= theta.dtype.type(1 - lr * wd)
        with np.errstate(divide="ignore", invalid="ignore"):
            if grad.ndim > 1:
                row_var, col_var = st["row_var"], st["col_var"]
                # PyTorch's (||g||_row)^2 / m, not mean(g^2): the same value, rounded its way
                sq = grad * grad
                _lerp(row_var, np.sqrt(sq.sum(axis=-1, keepdims=True)) ** 2 / grad.shape[-1],
                      one_minus_beta2_t)
                _lerp(col_var, np.sqrt(sq.sum(axis=-2, keepdims=True)) ** 2 / grad.shape[-2],
                      one_minus_beta2_t)
                var = row_var @ col_var
                var /= np.maximum(row_var.mean(axis=-2, keepdims=True), var.dtype.type(eps1))
            else:
                _lerp(st["variance"], grad * grad, one_minus_beta2_t)
                var = st["variance"].copy()
            update = 1 / np.sqrt(np.maximum(var, var.dtype.type(eps1 * eps1)))
            update *= grad
        denom = max(1.0, float(np.linalg.norm(update.reshape(-1))) / ((update.size ** 0.5) * d))
        theta += theta.dtype.type(-alpha / denom) * update

    # ---- state dict -----------------------------------------------------------------------------
    def _cast_loaded(self, p, key, value, label: str, scalar: bool):
        """``row_var``/``col_var`` are shaped as the factors of ``p``; the rest as usual."""
        shapes = {}
        if p.ndim > 1:
            shapes = {"row_var": tuple(p.shape[:-1]) + (1,),
                      "col_var": tuple(p.shape[:-2]) + (1,) + tuple(p.shape[-1:])}
        if key not in shapes:
            return _cast_state(p, key, value, label, scalar)
        arr = np.asarray(value)
        if arr.dtype.kind not in "fiu" or arr.shape != shapes[key]:
            raise ValueError(f"load_state_dict: parameter {label} has state {key!r} of shape "
                             f"{arr.shape}, expected {shapes[key]}")
        return np.array(arr, dtype=p.dtype, copy=True)

    def _check_loaded_state(self, state, groups, labels) -> None:
        for group in groups:
            for p in group["params"]:
                st = state.get(p)
                if not st:
                    continue
                need = ("step", "row_var", "col_var") if p.ndim > 1 else ("step", "variance")
                missing = [k for k in need if st.get(k) is None]
                if missing:
                    raise ValueError(f"load_state_dict: parameter {labels.get(id(p), '?')} has "
                                     f"no state {missing[0]!r} (Adafactor keeps {list(need)})")
