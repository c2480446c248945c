"""SOAP: Adam in the eigenbasis of Shampoo's preconditioner (``pytorch_optimizer.SOAP``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from tinyopt.engine.tensor import Parameter
from tinyopt.kernels import averaging, soap as kernels
from tinyopt.optim.flat import FlatBuffer
from tinyopt.optim.fused import FusedOptimizer
from tinyopt.optim.optimizer import cast_state


class SOAP(FusedOptimizer):
    r"""SOAP (Vyas et al. 2024, "SOAP: Improving and Stabilizing Shampoo using Adam",
    https://arxiv.org/abs/2409.11321) as ``pytorch_optimizer.SOAP``, with PyTorch's
    per-parameter step.

    For each dimension :math:`i` of a parameter (of at most ``max_precondition_dim``; a 1-d
    parameter only with ``precondition_1d``), Shampoo's statistic :math:`L_i \leftarrow
    \mathrm{lerp}(L_i, G_{(i)} G_{(i)}^\top, 1 - \beta_s)` (:math:`G_{(i)}` the gradient with
    axis :math:`i` first, the others flattened) and its eigenbasis :math:`Q_i`: from ``eigh`` at
    a parameter's first step (which only gathers :math:`L_i`), then refreshed every
    ``precondition_frequency`` steps by one power iteration and a QR decomposition (the
    second moment's axes reordered with the estimated eigenvalues).  With :math:`P(X) = X
    \times_i Q_i^\top` (each axis rotated into its basis) and :math:`s = t - 1`:

    .. math::
        m &\leftarrow \mathrm{lerp}(m, g, 1 - \beta_1), \qquad
        v \leftarrow \mathrm{lerp}(v, P(g)^2, 1 - \beta_2) \\
        \theta &\leftarrow \theta - \gamma\, \frac{\sqrt{1 - \beta_2^s}}{1 - \beta_1^s}\,
        P^{-1}\!\left(\frac{P(m)}{\sqrt v + \epsilon}\right), \qquad
        \theta \leftarrow \theta (1 - \gamma\lambda)

    (without ``correct_bias``, the step size is :math:`\gamma`; ``normalize_gradient`` divides
    the update by its RMS plus :math:`\epsilon`; :math:`\beta_s` = ``shampoo_beta`` or
    :math:`\beta_2`).  The rotations and eigenbases are BLAS/LAPACK products per parameter
    (numpy), the rest elementwise passes over the group's flat buffers, whose lerps and step
    round as PyTorch's CPU kernels do (fused multiply-adds): with its linear algebra, sqrt and
    mean computed as tinyopt's, pytorch-optimizer's SOAP gives the same bits.  State:
    ``step``, ``exp_avg``, ``exp_avg_sq``, and per preconditioned dimension ``GG<i>`` and
    ``Q<i>``.  ``merge_dims=True`` is not supported (ValueError).  Not elementwise.

    Example::

        opt = SOAP(model.parameters(), lr=3e-3, betas=(0.95, 0.95), precondition_frequency=10)
    """

    def __init__(self, params: Iterable, lr: float = 3e-3,
                 betas: tuple[float, float] = (0.95, 0.95), shampoo_beta: float | None = None,
                 weight_decay: float = 1e-2, precondition_frequency: int = 10,
                 max_precondition_dim: int = 10000, merge_dims: bool = False,
                 precondition_1d: bool = False, correct_bias: bool = True,
                 normalize_gradient: bool = False, eps: float = 1e-8,
                 maximize: bool = False) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), shampoo_beta=shampoo_beta,
                        weight_decay=weight_decay, precondition_frequency=precondition_frequency,
                        max_precondition_dim=max_precondition_dim, merge_dims=merge_dims,
                        precondition_1d=precondition_1d, correct_bias=correct_bias,
                        normalize_gradient=normalize_gradient, eps=eps, maximize=maximize)
        super().__init__(params, defaults)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        for k, b in enumerate(group["betas"]):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {k}: {b}")
        sb = group["shampoo_beta"]
        if sb is not None and not 0.0 <= sb < 1.0:
            raise ValueError(f"Invalid shampoo_beta value: {sb}")
        for name in ("weight_decay", "eps"):
            if not 0.0 <= group[name]:
                raise ValueError(f"Invalid {name} value: {group[name]}")
        for name in ("precondition_frequency", "max_precondition_dim"):
            if not 0 < group[name]:
                raise ValueError(f"Invalid {name} value: {group[name]}")
        if group["merge_dims"]:
            raise ValueError("tinyopt's SOAP does not merge dimensions: merge_dims must be False")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("exp_avg", "exp_avg_sq")

    def _dims(self, p: Parameter) -> list[int]:
        """The axes of ``p`` that are preconditioned."""
        group = next(g for g in self.param_groups if any(q is p for q in g["params"]))
        return _preconditioned(tuple(p.shape), group)

    def side_state(self, p: Parameter) -> dict[str, tuple[int, ...]]:
        shape = tuple(p.shape)
        sides: dict[str, tuple[int, ...]] = {}
        for i in self._dims(p):
            sides[f"GG{i}"] = sides[f"Q{i}"] = (shape[i], shape[i])
        return sides

    def _run(self, fb: FlatBuffer, group: dict[str, Any], names: tuple[str | None, ...]) -> None:
        b1, b2 = (float(b) for b in group["betas"])
        sb = group["shampoo_beta"] if group["shampoo_beta"] is not None else b2
        lr, wd, eps = float(group["lr"]), float(group["weight_decay"]), group["eps"]
        w1, w2 = fb.dtype.type(1.0 - b1), fb.dtype.type(1.0 - b2)
        fb.gather_grads()  # (a gradient the user assigned: into its part of fb.grad)
        if fb.mode:
            _take_written_copies(fb)
        for j in np.flatnonzero(fb.flags):
            j = int(j)
            p = fb.view(fb.data, j) if fb.mode else fb.param_view(j)  # (masters, or storage)
            g = fb.view(fb.grad, j)
            if group["maximize"]:
                g = -g
            m, v = fb.state_view("exp_avg", j), fb.state_view("exp_avg_sq", j)
            axes = _preconditioned(p.shape, group)
            GG = {i: fb.state_view(f"GG{i}", j) for i in axes}
            Q = {i: fb.state_view(f"Q{i}", j) for i in axes}
            fb.steps[j] += 1
            t = int(fb.steps[j])
            if t == 1:  # the statistics of the first gradient and their eigenbases; no step
                _gather(g, GG, sb)
                for i in axes:
                    Q[i][...] = _eigenbasis(GG[i])
                continue
            s = t - 1
            step_size = lr * (np.sqrt(1.0 - b2 ** s) / (1.0 - b1 ** s)
                              if group["correct_bias"] else 1.0)
            gp = _project(g, Q, p.ndim, forward=True)
            _lerp(m, g, w1)
            _lerp(v, gp * gp, w2)
            update = _project(_project(m, Q, p.ndim, forward=True) / (np.sqrt(v) + eps), Q,
                              p.ndim, forward=False)
            if group["normalize_gradient"] and update.size:
                update = update / (np.sqrt(np.mean(update * update)) + eps)
            kernels.descend_(p.reshape(-1), update.reshape(-1), fb.dtype.type(-step_size),
                             fb.dtype.type(1.0 - lr * wd))
            _gather(g, GG, sb)
            if s % group["precondition_frequency"] == 0:
                _power_iteration(GG, Q, v)
        if fb.mode:  # the 16-bit storage: the masters rounded
            fb.low[...] = fb.data.astype(fb.storage)
            fb.scatter_params()

    def _cast_loaded(self, p, key, value, label: str, scalar: bool):
        """``GG<i>``/``Q<i>`` are square matrices of axis ``i``'s size; the rest as usual."""
        matched = re.fullmatch(r"(?:GG|Q)(\d+)", key) if isinstance(key, str) else None
        if matched is None:
            return cast_state(p, key, value, label, scalar)
        i = int(matched.group(1))
        arr = np.asarray(value)
        n = p.shape[i] if i < p.ndim else -1
        if arr.dtype.kind not in "fiu" or arr.shape != (n, n):
            raise ValueError(f"load_state_dict: parameter {label} has state {key!r} of shape "
                             f"{arr.shape}, expected {(n, n)}")
        low = np.dtype(p.dtype).itemsize == 2
        return np.array(arr, dtype=np.float32 if low else p.dtype, copy=True)


def _take_written_copies(fb: FlatBuffer) -> None:
    """16-bit parameters: a master whose 16-bit copy was written since (a loaded model state,
    ``p.data[...] = x``) takes the copy, as the walkers' ``low`` variants do."""
    low = fb.gather_params()
    written = fb.data.astype(fb.storage).view(np.uint16) != low.view(np.uint16)
    fb.data[written] = low[written].astype(np.float32)


def _preconditioned(shape: tuple[int, ...], group: dict[str, Any]) -> list[int]:
    """The axes of a parameter of ``shape`` that get a preconditioner."""
    if len(shape) == 0 or (len(shape) == 1 and not group["precondition_1d"]):
        return []
    return [i for i, n in enumerate(shape) if n <= group["max_precondition_dim"]]


def _lerp(a: np.ndarray, b: np.ndarray, w) -> None:
    """``a.lerp_(b, w)`` in place, to the bit as PyTorch's CPU kernel rounds it (fused
    multiply-adds; ``a``: a C-contiguous state view)."""
    w = a.dtype.type(w)
    averaging.lerp_(a.reshape(-1), b.reshape(-1), w, w - a.dtype.type(1))


def _gather(g: np.ndarray, GG: dict[int, np.ndarray], sb: float) -> None:
    """Shampoo's statistics: ``GG[i] <- lerp(GG[i], G_(i) G_(i)^T, 1 - sb)`` per axis."""
    w = g.dtype.type(1.0 - sb)
    for i, gg in GG.items():
        other = [k for k in range(g.ndim) if k != i]
        _lerp(gg, np.tensordot(g, g, axes=(other, other)), w)


def _eigenbasis(gg: np.ndarray) -> np.ndarray:
    """The eigenvectors of ``gg``, by decreasing eigenvalue (as the reference: ``eigh`` of
    ``gg + 1e-30 I``, columns flipped)."""
    _, q = np.linalg.eigh(gg + gg.dtype.type(1e-30) * np.eye(gg.shape[0], dtype=gg.dtype))
    return np.flip(q, axis=1)


def _project(x: np.ndarray, Q: dict[int, np.ndarray], ndim: int, forward: bool) -> np.ndarray:
    """``x`` with each preconditioned axis rotated into its basis (``forward``) or back; as the
    reference, contracting axis 0 and moving it last, once per axis."""
    for i in range(ndim):
        q = Q.get(i)
        if q is None:
            x = np.moveaxis(x, 0, -1)
        else:
            x = np.tensordot(x, q, axes=([0], [0 if forward else 1]))
    return x


def _power_iteration(GG: dict[int, np.ndarray], Q: dict[int, np.ndarray], v: np.ndarray) -> None:
    """One power iteration and a QR decomposition per axis, refreshing ``Q``; the second moment
    ``v``'s axis reordered by the estimated eigenvalues (in place)."""
    for i, gg in GG.items():
        o = Q[i]
        product = gg @ o
        order = np.argsort(-(o * product).sum(axis=0), kind="stable")
        v[...] = np.take(v, order, axis=i)
        q, _ = np.linalg.qr(product[:, order].astype(np.float32))
        o[...] = q
