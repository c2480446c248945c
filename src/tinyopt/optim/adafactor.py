"""Adafactor: factored second moments for matrices (``torch.optim.Adafactor``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tinyopt.engine.tensor import Parameter
from tinyopt.kernels import adafactor as kernels
from tinyopt.optim.flat import FlatBuffer
from tinyopt.optim.fused import FusedOptimizer
from tinyopt.optim.optimizer import cast_state


class Adafactor(FusedOptimizer):
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
    machine epsilon of the group's first parameter with a gradient, as PyTorch's.

    State: ``step`` (0-d float32), ``row_var`` and ``col_var``, or ``variance``, all in the
    group's flat buffers (the factors in side layouts of their own).  One kernel call per group
    and dtype (``kernels/adafactor.py``), parallel over items of rows (a big matrix is cut into
    several; fixed by the shapes, so the results do not depend on the threads): the norms of a
    parameter and of its update decide its step size.  float16/bfloat16 parameters get float32 master weights
    and state, as every fused optimizer (``docs/low_precision.md``).  ``foreach`` is accepted
    and ignored.  An empty parameter with a gradient raises PyTorch's ZeroDivisionError (its RMS
    divides by ``sqrt(numel)``), before anything changes.

    Example::

        opt = Adafactor(model.parameters(), lr=1e-2)
    """

    def __init__(self, params: Iterable, lr: float = 1e-2, beta2_decay: float = -0.8,
                 eps: tuple[float | None, float] = (None, 1e-3), d: float = 1.0,
                 weight_decay: float = 0.0, *, foreach: bool | None = None,
                 maximize: bool = False) -> None:
        defaults = dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d,
                        weight_decay=weight_decay, foreach=foreach, maximize=maximize)
        super().__init__(params, defaults)

    def validate(self, group: dict[str, Any]) -> None:
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

    def side_state(self, p: Parameter) -> dict[str, tuple[int, ...]]:
        shape = tuple(p.shape)
        if len(shape) > 1:
            return {"row_var": shape[:-1] + (1,), "col_var": shape[:-2] + (1,) + shape[-1:]}
        return {"variance": shape}

    def _run(self, fb: FlatBuffer, group: dict[str, Any], names: tuple[str | None, ...]) -> None:
        """One kernel call for ``fb`` (see ``kernels/adafactor.py``)."""
        if not fb.flags.any():
            return
        if fb.flags[fb.sizes == 0].any():  # torch: ||p|| / sqrt(numel) with numel 0
            raise ZeroDivisionError("float division by zero")
        eps1, eps2 = group["eps"]
        if eps1 is None:  # torch: the machine epsilon of the first parameter with a gradient
            first = next(p for p in group["params"] if p.grad is not None)
            eps1 = _machine_eps(np.dtype(first.dtype))
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        host = fb.host(dict(lr=lr, beta2_decay=float(group["beta2_decay"]), eps2=float(eps2),
                            d=float(group["d"]), top=fb._max, eps1=eps1, eps1_sq=eps1 * eps1,
                            decay=1.0 - lr * wd, one=1.0, kept=kernels.KEPT_ELEMENTS),
                        _WIDE)
        # float32 buffers with eps1^2 a normal float32: V_hat's division by the row mean as a
        # float64 product, the same bits (kernels/adafactor.py)
        recip = fb.dtype == np.float32 and float(np.float32(eps1 * eps1)) >= _F32_TINY
        kernel = kernels.adafactor[bool(group["maximize"]), wd != 0, fb.mode, recip]
        fb.gather_params()  # (the kernel takes the group as one flat vector)
        fb.gather_grads()
        kernel(*_arguments(fb), host)
        fb.scatter_params()
        if fb.scratch["bad"].any():
            fb.scratch["bad"][:] = 0
            raise RuntimeError(f"value cannot be converted to type {fb._ctype} without overflow")

    # ---- state dict -----------------------------------------------------------------------------
    def _cast_loaded(self, p, key, value, label: str, scalar: bool):
        """``row_var``/``col_var`` are shaped as the factors of ``p``; the rest as usual."""
        shapes = {}
        if p.ndim > 1:
            shapes = {"row_var": tuple(p.shape[:-1]) + (1,),
                      "col_var": tuple(p.shape[:-2]) + (1,) + tuple(p.shape[-1:])}
        if key not in shapes:
            return cast_state(p, key, value, label, scalar)
        arr = np.asarray(value)
        if arr.dtype.kind not in "fiu" or arr.shape != shapes[key]:
            raise ValueError(f"load_state_dict: parameter {label} has state {key!r} of shape "
                             f"{arr.shape}, expected {shapes[key]}")
        low = np.dtype(p.dtype).itemsize == 2  # (16-bit parameters: float32 state)
        return np.array(arr, dtype=np.float32 if low else p.dtype, copy=True)

    def _check_loaded_state(self, state, groups, labels) -> None:
        super()._check_loaded_state(state, groups, labels)
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
                other = [k for k in ("row_var", "col_var", "variance")
                         if k not in need and st.get(k) is not None]
                if other:
                    raise ValueError(f"load_state_dict: parameter {labels.get(id(p), '?')} of "
                                     f"{p.ndim} dimensions has state {other[0]!r} (Adafactor "
                                     f"keeps {list(need)})")


_F32_TINY = float(np.finfo(np.float32).tiny)  # 2^-126, the smallest normal float32
# float64 host scalars; the others: the buffer dtype
_WIDE = ("lr", "beta2_decay", "eps2", "d", "top", "kept")


def _machine_eps(dtype: np.dtype) -> float:
    """``torch.finfo(dtype).eps`` (numpy's finfo does not know bfloat16)."""
    return 2.0 ** -7 if dtype.name == "bfloat16" else float(np.finfo(dtype).eps)


def _arguments(fb: FlatBuffer) -> tuple:
    """The kernel's arguments for ``fb``, its side layouts, work items and scratch (made on
    first use)."""
    if "dims" not in fb.scratch:
        dims = np.zeros((len(fb.params), 3), dtype=np.int64)
        for j, p in enumerate(fb.params):
            if p.ndim > 1:
                dims[j] = (int(np.prod(p.shape[:-2], dtype=np.int64)), p.shape[-2], p.shape[-1])
        dims5, items, iseg, pseg, bseg, (ncp, nmeans) = kernels.layout(dims)
        fb.scratch.update(dims=dims5, items=items, iseg=iseg, pseg=pseg, bseg=bseg,
                          cpart=np.zeros(ncp), means=np.zeros(nmeans),
                          lanes=np.zeros((len(items), 2 * kernels.LANES)),
                          icoef=np.zeros((len(items), 2), fb.dtype),
                          bad=np.zeros(len(fb.params), dtype=np.uint8))
    sc = fb.scratch
    empty = np.zeros(0, fb.dtype), np.zeros(len(fb.params) + 1, np.int64)
    row, rseg = fb.sides.get("row_var", empty)
    col, cseg = fb.sides.get("col_var", empty)
    var, vseg = fb.sides.get("variance", empty)
    q = fb.low.view(np.uint16) if fb.low is not None else np.zeros(0, np.uint16)
    return (q, fb.data, fb.grad, row, col, var, sc["cpart"], sc["means"], sc["lanes"],
            sc["icoef"], fb.seg, rseg, cseg, vseg, sc["pseg"], sc["bseg"], sc["dims"],
            sc["items"], sc["iseg"], fb.flags, fb.scalars, fb.coef, sc["bad"])
