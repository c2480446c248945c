"""Schedule-Free SGD, AdamW and RAdam (the ``schedulefree`` package's optimizers)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyopt.kernels import optim as kernels
from tinyopt.optim.adam import check_adam_hyperparameters
from tinyopt.optim.fused import FusedOptimizer
from tinyopt.optim.optimizer import call_closure

_NOT_TRAINING = ("Optimizer was not in train mode when step is called. Please insert .train() and "
                 ".eval() calls on the optimizer. See documentation for details.")


_METHOD = r"""
    The Schedule-Free method (Defazio et al. 2024, https://arxiv.org/abs/2405.15682):
    an interpolation y between the base iterate z and its weighted average x, where the
    gradient is taken; no learning-rate schedule.  With :math:`c_{k+1} = w_{k+1} / \sum_{i \le
    k+1} w_i`, :math:`w_k = k^r \gamma_{\max}^{p}` (:math:`p` = ``weight_lr_power``,
    :math:`\gamma_{\max}` the largest lr so far) and momentum :math:`\beta`:

    .. math::
        y_k &= (1 - \beta) z_k + \beta x_k, \qquad z_{k+1} = z_k - \gamma_k u_k(y_k), \qquad
        x_{k+1} = (1 - c_{k+1}) x_k + c_{k+1} z_{k+1}

    with :math:`u` the gradient plus :math:`\lambda y` (SGD) or the gradient over Adam's
    :math:`\sqrt{v / (1 - \beta_2^{k+1})} + \epsilon`, plus :math:`\lambda y` (AdamW, RAdam).
    The parameters hold y, and z is state: y is updated in place (``schedulefree`` writes it as
    :math:`y \leftarrow \mathrm{lerp}(y, z, c_{k+1}) + \gamma(\beta(1 - c_{k+1}) - 1) u`).

    **Call** ``optimizer.train()`` **before training and** ``optimizer.eval()`` **before
    evaluating or saving**: ``eval()`` moves the parameters to x, ``train()`` back to y
    (:math:`p \leftarrow \mathrm{lerp}(p, z, 1 - 1/\beta)` and :math:`\mathrm{lerp}(p, z, 1 -
    \beta)`), and ``step()`` out of train mode raises.  BatchNorm: its running statistics were
    gathered at y, not at x; before evaluating, run a few training batches through the model
    in ``model.train()`` mode under ``tinyopt.no_grad()`` after ``optimizer.eval()`` to recompute
    them at x (the ``schedulefree`` README's advice).

    The group's step ``k``, ``weight_sum``, ``lr_max``, ``scheduled_lr`` and ``train_mode`` live
    in ``param_groups`` (and the state dict) as the reference keeps them; ``state[p]`` holds
    ``z`` (and ``exp_avg_sq``).  Unlike the reference, ``step`` leaves ``p.grad`` as it was (the
    reference divides it in place).  Elementwise: ZeRO-1 may cut a parameter (call ``train()``/
    ``eval()`` on the ZeroRedundancyOptimizer's ``optim``).
    """


class _ScheduleFree(FusedOptimizer):
    """What the three Schedule-Free optimizers share (see ``_METHOD``)."""

    kernel = kernels.schedule_free
    scalar_state = ()  # (S[j, 0] counts steps: the first copies y into z; no "step" is saved)
    host64 = ()
    _adaptive = True

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("z", "exp_avg_sq") if self._adaptive else ("z",)

    def _beta(self, group: dict[str, Any]) -> float:
        return float(group["betas"][0])

    def _scheduled_lr(self, group: dict[str, Any]) -> tuple[float, float]:
        """This step's lr and the Adam-phase flag (RAdam's; 1 for the others)."""
        k, warmup = group["k"], group["warmup_steps"]
        return group["lr"] * ((k + 1) / warmup if k < warmup else 1.0), 1.0

    def step(self, closure: Callable[[], Any] | None = None):
        """One step (one fused kernel call per group and dtype); raises unless in train mode."""
        if not self.param_groups[0]["train_mode"]:
            raise RuntimeError(_NOT_TRAINING)
        loss = call_closure(closure)
        for group in self.param_groups:  # the group's weight of this step, as the reference
            k = group["k"]
            lr = group["scheduled_lr"] = self._scheduled_lr(group)[0]
            lr_max = group["lr_max"] = max(lr, group["lr_max"])
            weight = ((k + 1) ** group["r"]) * (lr_max ** group["weight_lr_power"])
            group["weight_sum"] = group["weight_sum"] + weight
        super().step()
        for group in self.param_groups:
            group["k"] = group["k"] + 1
        return loss

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        # (a function of the group's values, updated by ``step``: see FusedOptimizer._run)
        k, lr_max, weight_sum = group["k"], group["lr_max"], group["weight_sum"]
        weight = ((k + 1) ** group["r"]) * (lr_max ** group["weight_lr_power"])
        try:
            ckp1 = weight / weight_sum
        except ZeroDivisionError:
            ckp1 = 0
        lr, adam = self._scheduled_lr(group)
        beta = self._beta(group)
        b2 = float(group["betas"][1]) if self._adaptive else 0.0
        w = r(ckp1)
        return dict(bc2=1 - b2 ** (k + 1), b2=b2, one_minus_b2=1 - b2,
                    eps=group.get("eps", 0.0), weight_decay=group["weight_decay"], ckp1=w,
                    ckp1_c=1 - w, y_alpha=lr * (beta * (1 - ckp1) - 1), neg_lr=-lr, adam=adam)

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (self._adaptive, isinstance(self, RAdamScheduleFree),
                bool(group["weight_decay"] != 0), bool(abs(host["ckp1"]) < 0.5))

    # ---- train / eval ---------------------------------------------------------------------------
    def train(self) -> None:
        """Move the parameters with state from x to y (where ``step`` takes gradients)."""
        self._swap(True, lambda beta: 1 - beta)

    def eval(self) -> None:
        """Move the parameters with state from y to x (where the model is evaluated and saved)."""
        self._swap(False, lambda beta: 1 - 1 / beta)

    def _swap(self, to_train: bool, weight: Callable[[float], float]) -> None:
        self._follow_groups()
        for group, buffers in zip(self.param_groups, self._flat):
            if bool(group["train_mode"]) == to_train:
                continue
            names = self.state_names(group)
            w = weight(self._beta(group))
            for fb in buffers:
                if not fb.started.any():
                    continue
                if names != fb.names and fb.add_vectors(names, {}):
                    self._start(fb, np.flatnonzero(fb.started))
                fb.names = names
                args = fb.kernel_args(names)
                # the parameters with state, not those with a gradient
                args = (*args[:-3], fb.started.view(np.uint8), *args[-2:])
                ww = fb.round(w)
                self._call(kernels.schedule_free_swap[bool(abs(ww) < 0.5)], group, fb, args,
                           dict(w=ww, w_c=1 - ww))
            group["train_mode"] = to_train


class SGDScheduleFree(_ScheduleFree):
    r"""Schedule-Free SGD (Defazio et al. 2024, https://arxiv.org/abs/2405.15682) as
    ``schedulefree.SGDScheduleFree``: :math:`u = g + \lambda y`.

    State: ``z``.  Group keys besides the hyperparameters: ``k``, ``train_mode``,
    ``weight_sum``, ``lr_max``, ``scheduled_lr``.  ``warmup_steps``: a linear warmup of lr over
    that many steps.  ``foreach`` is accepted and ignored.

    Example::

        opt = SGDScheduleFree(model.parameters(), lr=1.0, momentum=0.9, warmup_steps=100)
        opt.train()   # before training; opt.eval() before evaluating or saving
    """
    __doc__ = (__doc__ or "") + _METHOD

    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter
    _adaptive = False

    def __init__(self, params: Iterable, lr: float = 1.0, momentum: float = 0.9,
                 weight_decay: float = 0, warmup_steps: int = 0, r: float = 0.0,
                 weight_lr_power: float = 2, foreach: bool | None = None, *,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, momentum=momentum, r=r, k=0, warmup_steps=warmup_steps,
                        train_mode=False, weight_sum=0.0, lr_max=-1.0, scheduled_lr=0.0,
                        weight_lr_power=weight_lr_power, weight_decay=weight_decay,
                        foreach=foreach)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if group["lr"] < 0.0:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if group["weight_decay"] < 0.0:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")
        if group["momentum"] <= 0 or group["momentum"] >= 1:
            raise ValueError(f"Momentum must be between 0 and 1 exclusive: {group['momentum']}")
        _check_schedule(group)

    def _beta(self, group: dict[str, Any]) -> float:
        return float(group["momentum"])


class AdamWScheduleFree(_ScheduleFree):
    r"""Schedule-Free AdamW (Defazio et al. 2024, https://arxiv.org/abs/2405.15682;
    the AlgoPerf 2024 winner) as ``schedulefree.AdamWScheduleFree``:
    :math:`v_{k+1} = \beta_2 v_k + (1 - \beta_2) g^2`, :math:`u = g / (\sqrt{v_{k+1} / (1 -
    \beta_2^{k+1})} + \epsilon) + \lambda y`; :math:`\beta` is ``betas[0]``.

    State: ``z``, ``exp_avg_sq``.  Group keys besides the hyperparameters: ``k``,
    ``train_mode``, ``weight_sum``, ``lr_max``, ``scheduled_lr``.  ``warmup_steps``: a linear
    warmup of lr over that many steps.  ``foreach`` is accepted and ignored.

    Example::

        opt = AdamWScheduleFree(model.parameters(), lr=2.5e-3, warmup_steps=1000)
        opt.train()   # before training; opt.eval() before evaluating or saving
    """
    __doc__ = (__doc__ or "") + _METHOD

    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter

    def __init__(self, params: Iterable, lr: float = 0.0025,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, warmup_steps: int = 0, r: float = 0.0,
                 weight_lr_power: float = 2.0, foreach: bool | None = None, *,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, r=r, k=0, warmup_steps=warmup_steps,
                        train_mode=False, weight_sum=0.0, lr_max=-1.0, scheduled_lr=0.0,
                        weight_lr_power=weight_lr_power, weight_decay=weight_decay,
                        foreach=foreach)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        check_adam_hyperparameters(group["lr"], group["eps"], group["betas"],
                                   group["weight_decay"])
        _check_schedule(group)


class RAdamScheduleFree(_ScheduleFree):
    r"""Schedule-Free RAdam (Defazio et al. 2024, https://arxiv.org/abs/2405.15682;
    Liu et al. 2019, https://arxiv.org/abs/1908.03265) as ``schedulefree.RAdamScheduleFree``:
    no warmup, RAdam's rectification instead.  With :math:`\rho_\infty = 2/(1 - \beta_2) - 1`,
    :math:`\rho_t = \rho_\infty - 2t\beta_2^t / (1 - \beta_2^t)`, :math:`t = k + 1`: while
    :math:`\rho_t > 4`, lr is :math:`\gamma r_t` (RAdam's :math:`r_t`) and the step is AdamW's
    above; before, the step is SGD's with lr 0 (``silent_sgd_phase=True``, the default: only
    :math:`v` advances) or :math:`\gamma`.

    State: ``z``, ``exp_avg_sq``.  Group keys besides the hyperparameters: ``k``,
    ``train_mode``, ``weight_sum``, ``lr_max``, ``scheduled_lr``.  ``foreach`` is accepted and
    ignored.

    Example::

        opt = RAdamScheduleFree(model.parameters(), lr=2.5e-3)
        opt.train()   # before training; opt.eval() before evaluating or saving
    """
    __doc__ = (__doc__ or "") + _METHOD

    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter

    def __init__(self, params: Iterable, lr: float = 0.0025,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, r: float = 0.0, weight_lr_power: float = 2.0,
                 foreach: bool | None = None, silent_sgd_phase: bool = True, *,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, r=r, k=0, train_mode=False,
                        weight_sum=0.0, lr_max=-1.0, scheduled_lr=0.0,
                        weight_lr_power=weight_lr_power, weight_decay=weight_decay,
                        foreach=foreach, silent_sgd_phase=silent_sgd_phase)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        check_adam_hyperparameters(group["lr"], group["eps"], group["betas"],
                                   group["weight_decay"])

    def _scheduled_lr(self, group: dict[str, Any]) -> tuple[float, float]:
        t = group["k"] + 1
        b2 = group["betas"][1]
        b2t = b2 ** t
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * b2t / (1 - b2t)
        if rho_t > 4.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
        else:
            rect = float(not group["silent_sgd_phase"])
        return group["lr"] * rect, float(rho_t > 4.0)


def _check_schedule(group: dict[str, Any]) -> None:
    if group["warmup_steps"] < 0:
        raise ValueError(f"Invalid warmup_steps value: {group['warmup_steps']}")
