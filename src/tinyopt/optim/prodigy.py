"""Prodigy: Adam whose learning rate is estimated as it trains (the ``prodigyopt`` package)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyopt.kernels import optim as kernels
from tinyopt.kernels import optim_reduce
from tinyopt.optim.flat import FlatBuffer
from tinyopt.optim.fused import FusedOptimizer
from tinyopt.optim.optimizer import call_closure


class Prodigy(FusedOptimizer):
    r"""Prodigy (Mishchenko & Defazio 2023, "Prodigy: An Expeditiously Adaptive Parameter-Free
    Learner", https://arxiv.org/abs/2306.06101) as ``prodigyopt.Prodigy``: Adam whose step
    size :math:`d` (the distance to the solution) is estimated from the gradients; leave
    ``lr=1.0`` and schedule it as a multiplier.

    .. math::
        \hat\gamma_k &= d_k \gamma \;(\times \sqrt{1 - \beta_2^{k+1}} / (1 - \beta_1^{k+1})
        \text{ with use\_bias\_correction}), \qquad
        m = \beta_1 m + d_k(1 - \beta_1) g, \quad v = \beta_2 v + d_k^2 (1 - \beta_2) g^2 \\
        r_{k+1} &= \beta_3 r_k + \tfrac{d_k}{d_0}\hat\gamma_k \sum \langle g, x_0 - x\rangle,
        \qquad s = \beta_3 s + \tfrac{d_k}{d_0}\hat\gamma_k\, g, \qquad
        d_{k+1} = \min\!\Big(\max\!\big(d_k, \tfrac{c\, r_{k+1}}{\sum \lVert s\rVert_1}\big),
        d_k \cdot \text{growth\_rate}\Big) \\
        x &\leftarrow x - \hat\gamma_k \lambda x \;(\text{decoupled}) - \hat\gamma_k\,
        \frac{m}{\sqrt v + d_{k+1}\epsilon}

    with the sums over every parameter of every group (:math:`\beta_3` = ``beta3`` or
    :math:`\sqrt{\beta_2}`, :math:`c` = ``d_coef``; ``safeguard_warmup`` puts :math:`d_k` for
    :math:`\hat\gamma_k` in :math:`s`; :math:`d` grows only from :math:`d_0` while it is
    :math:`d_0`, then follows :math:`\max` of the estimates, as the reference).  Per group
    ``lr`` is the largest one or 0 (RuntimeError otherwise); :math:`d`, ``k`` and the betas are
    group 0's, as the reference keeps them (``d``, ``d_max``, ``d_numerator``, ``d_denom``,
    ``d_hat`` are written to every group).

    Steps: one kernel call per group and dtype that updates the moments and sums both terms
    (``kernels/optim_reduce.py``), then one that steps (``kernels/optim.py``).  State:
    ``step``, ``s``, ``p0``, ``exp_avg`` (beta1 > 0), ``exp_avg_sq``; ``s`` and ``p0`` are
    shaped as the parameter (the reference's are flat, and its ``p0`` of an all-zero parameter
    is a 0-d zero).  ``slice_p`` must be 1 and ``fsdp_in_use`` False.  Unlike the reference,
    ``step`` leaves ``p.grad`` as it was (with coupled weight decay the reference adds
    :math:`\lambda x` to it).  Not elementwise (ZeRO-1 cannot shard it).

    Example::

        opt = Prodigy(model.parameters(), lr=1.0, weight_decay=0.01)
    """

    kernel = optim_reduce.prodigy_collect
    host64 = ()

    def __init__(self, params: Iterable, lr: float = 1.0,
                 betas: tuple[float, float] = (0.9, 0.999), beta3: float | None = None,
                 eps: float = 1e-8, weight_decay: float = 0, decouple: bool = True,
                 use_bias_correction: bool = False, safeguard_warmup: bool = False,
                 d0: float = 1e-6, d_coef: float = 1.0, growth_rate: float = float("inf"),
                 fsdp_in_use: bool = False, slice_p: int = 1, *,
                 stochastic_rounding: bool = False) -> None:
        if not 0.0 < lr:  # (a group's lr may be 0: that group then keeps its moments)
            raise ValueError(f"Invalid learning rate: {lr}")
        defaults = dict(lr=lr, betas=tuple(betas), beta3=beta3, eps=eps,
                        weight_decay=weight_decay, d=d0, d0=d0, d_max=d0, d_numerator=0.0,
                        d_coef=d_coef, k=0, growth_rate=growth_rate,
                        use_bias_correction=use_bias_correction, decouple=decouple,
                        safeguard_warmup=safeguard_warmup, fsdp_in_use=fsdp_in_use,
                        slice_p=slice_p)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 < group["d0"]:
            raise ValueError(f"Invalid d0 value: {group['d0']}")
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if not 0.0 < group["eps"]:
            raise ValueError(f"Invalid epsilon value: {group['eps']}")
        for k, b in enumerate(group["betas"]):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {k}: {b}")
        if group["slice_p"] != 1:
            raise ValueError(f"tinyopt's Prodigy keeps s and p0 whole: slice_p must be 1, got "
                             f"{group['slice_p']}")
        if group["fsdp_in_use"]:
            raise ValueError("tinyopt's Prodigy: fsdp_in_use=True is not supported (there is no "
                             "FSDP; DDP's gradients are already reduced)")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        first = self.param_groups[0] if self.param_groups else group
        return ("exp_avg" if first["betas"][0] > 0 else None, "exp_avg_sq", "s", "p0")

    def step(self, closure: Callable[[], Any] | None = None):
        """One step: the moments and d's sums for every group, d, then the parameters."""
        loss = call_closure(closure)
        groups = self.param_groups
        g0 = groups[0]
        lr = max(g["lr"] for g in groups)
        for g in groups:
            if g["lr"] not in (lr, 0.0):
                raise RuntimeError("Setting different lr values in different parameter groups "
                                   "is only supported for values of 0")
        beta1, beta2 = g0["betas"]
        beta3 = g0["beta3"] if g0["beta3"] is not None else math.sqrt(beta2)
        k, d = g0["k"], g0["d"]
        bias = (((1 - beta2 ** (k + 1)) ** 0.5) / (1 - beta1 ** (k + 1))
                if g0["use_bias_correction"] else 1)
        dlr = d * lr * bias
        self._phase = dict(beta1=beta1, beta2=beta2, beta3=beta3, d=d, dlr=dlr, lr=lr,
                           decouple=g0["decouple"], numerator=0.0, denominator=0.0)
        super().step()  # the first pass of every buffer (``_run``), state made as usual
        ph = self._phase
        if ph["denominator"] == 0:  # no progress: as the reference, nothing else moves
            for buffers in self._flat:
                for fb in buffers:
                    fb.steps[fb.flags != 0] -= 1
            return loss
        numerator, denominator = g0["d_numerator"] * beta3 + ph["numerator"], ph["denominator"]
        d_max, d_hat = g0["d_max"], d
        if lr > 0.0:
            d_hat = g0["d_coef"] * numerator / denominator
            if d == groups[-1]["d0"]:  # (the reference's loop variable: the last group)
                d = max(d, d_hat)
            d_max = max(d_max, d_hat)
            d = min(d_max, d * g0["growth_rate"])
        for group, buffers in zip(groups, self._flat):
            group.update(d_numerator=numerator, d_denom=denominator, d=d, d_max=d_max,
                         d_hat=d_hat)
            wd = group["weight_decay"]
            host = dict(d_eps=d * group["eps"], decay_alpha=-wd * dlr, neg_dlr=-dlr,
                        neg_dlr_d=-dlr * d, weight_decay=wd)
            switches = (beta1 > 0, wd != 0 and ph["decouple"], wd != 0 and not ph["decouple"])
            names = ("exp_avg" if beta1 > 0 else None, "exp_avg_sq")
            for fb in buffers:
                if fb.flags.any():
                    self._call(kernels.prodigy[switches], group, fb, fb.kernel_args(names), host)
            group["k"] = group["k"] + 1
        return loss

    def _run(self, fb: FlatBuffer, group: dict[str, Any], names: tuple[str | None, ...]) -> None:
        """The first pass over ``fb``: moments, ``s``, ``p0``; its sums added to this step's."""
        ph = self._phase
        d, d0, beta1 = ph["d"], group["d0"], ph["beta1"]
        wd = group["weight_decay"]
        coupled = wd != 0 and not ph["decouple"]
        host = dict(b1=beta1, m_alpha=d * (1 - beta1), b2=ph["beta2"],
                    v_value=d * d * (1 - ph["beta2"]), b3=ph["beta3"],
                    s_alpha=(d / d0) * (d if group["safeguard_warmup"] else ph["dlr"]),
                    weight_decay=wd)
        kernel = self.kernel[beta1 > 0, coupled, group["lr"] > 0]
        args = fb.walker_args(*(fb.vectors[n] if n is not None else fb.empty for n in names))
        if fb.mode:
            kernel = kernel.low[fb.mode]
        sums = np.zeros((len(fb.params), 3))
        if kernel(*args, fb.host(host), sums) >= 0:
            raise RuntimeError(f"value cannot be converted to type {fb._ctype} without overflow")
        scale = (d / d0) * ph["dlr"]
        for dot, norm in sums[:, :2].tolist():  # one parameter at a time, as the reference adds
            ph["numerator"] += scale * dot
            ph["denominator"] += norm
