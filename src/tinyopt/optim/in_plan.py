"""The optimizer step inside the backward plan: ``optimizer.fuse_with_backward(loss)``.

``opt.fuse_with_backward(loss)`` is ``loss.backward(); opt.step()`` -- the same parameters,
state, gradients (``p.grad`` holds this backward's gradient afterwards) and hooks, bit for bit
-- taken in ONE plan run: each parameter is stepped by the engine as soon as its gradient is
final (``engine/fused_update.py``), while the gradient is in cache; a linear layer's weight at
batch 1 is stepped in the kernel that computes its gradient (an outer product).  ``fit`` uses it
when it steps after every batch.

It takes the fused path when the step needs nothing between the backward and the update, and
otherwise runs ``loss.backward(); opt.step()`` (:func:`fusable` says which, and why not):

- a tinyopt elementwise optimizer (SGD, Adam, AdamW, Adagrad, RMSprop, Adadelta, Adamax, NAdam,
  RAdam, ASGD, Rprop) whose ``step`` is not overridden, with float32/float64 parameters;
- every gradient reset (``zero_grad()`` with ``set_to_none=True``) before the backward: an
  accumulated gradient (gradient accumulation, ``zero_grad(set_to_none=False)``) is added after
  the backward, so the step waits for it;
- no step pre-hooks (they may read or change the gradients; post-hooks run after the fused step,
  as after ``step``), no tensor hooks, post-accumulate-grad hooks or backward hooks (DDP), and a
  loss ``backward`` itself takes as one plan run (a scalar, no ``gradient``/``inputs``).

Gradient clipping needs the gradients before the step: clip, then call ``step``, as usual.  A
coefficient that overflows the dtype (PyTorch's "value cannot be converted") falls back too, so
``step`` raises it after the backward, as unfused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyopt.engine.fused_update import backward_and_update
from tinyopt.engine.tensor import Parameter, Tensor
from tinyopt.kernels.optim import _Algorithm
from tinyopt.kernels.optim_segment import for_algorithm
from tinyopt.optim.fused import FusedOptimizer
from tinyopt.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks


def fusable(opt: Any) -> str | None:
    """Why ``opt``'s step cannot run inside the backward plan now (None: it can)."""
    cls = type(opt)
    if not isinstance(opt, FusedOptimizer) or not isinstance(cls.kernel, _Algorithm):
        return "not an elementwise fused optimizer"
    if cls.step is not FusedOptimizer.step or cls._run is not FusedOptimizer._run:
        return "its step is overridden"
    if _global_optimizer_pre_hooks or opt._optimizer_step_pre_hooks:
        return "a step pre-hook is registered"
    for group, buffers, repeats in zip(opt.param_groups, opt._flat, opt._repeats):
        for fb, rep in zip(buffers, repeats):
            if fb.mode:
                return "16-bit parameters"
            if rep is not None:
                return "a parameter is listed twice"
            if fb.flags.any():
                return "a gradient was not reset"
    return None


class PlanStep:
    """The update (``engine/fused_update.py``'s protocol) that takes one step of a
    :class:`FusedOptimizer` during a backward plan run.  Made just before the run (it reads the
    hyperparameters then, as ``step`` would after the backward); :meth:`finish` after it."""

    def __init__(self, opt: FusedOptimizer) -> None:
        self.opt = opt
        self.where: dict[int, tuple[list, int]] = {}
        self.buffers: list[list] = []
        self.ran = False
        opt._follow_groups()
        for group, buffers in zip(opt.param_groups, opt._flat):
            names = opt._state_names(group)
            for fb in buffers:
                if fb.stale:  # as step: a parameter shared with another optimizer, taken back
                    fb.pack()
                if names != fb.names and fb.add_vectors(names, opt._state_init(group)):
                    opt._start(fb, np.flatnonzero(fb.started))
                fb.names = names
                host = opt._host(group, fb.round)
                kernels = for_algorithm(type(opt).kernel, opt._switches(group, host))
                entry = [fb, group, kernels, fb.kernel_args(names)[:5], fb.host(host, opt.host64),
                         np.zeros(len(fb.params), np.uint8), []]
                self.buffers.append(entry)
                for j, p in enumerate(fb.params):
                    self.where[id(p)] = (entry, j)

    # ---- the engine's protocol ------------------------------------------------------------------
    def begin(self, params: list[Parameter]) -> list[bool] | None:
        take = []
        for p in params:
            w = self.where.get(id(p))
            take.append(w is not None)
            if w is not None:
                w[0][5][w[1]] = 1
        opt = self.opt
        for fb, group, _, _, _, mask, starting in self.buffers:
            if not fb.all_started:  # as step: state starts from its initial values
                starting[:] = np.flatnonzero(~fb.started & (mask != 0)).tolist()
                init = opt._state_init(group)
                if init:
                    for j in starting:
                        fb.reset(j, init)
                given = [j for j in starting if opt._state.get(fb.params[j])]
                if given:
                    opt._start(fb, given)
        for fb, _, (coefs, *_), _, rec, mask, _ in self.buffers:
            if mask.any() and coefs(mask, fb.scalars, fb.coef, rec) >= 0:
                for entry in self.buffers:  # step raises the overflow after the backward
                    entry[5][:] = 0
                    entry[6].clear()
                return None
        self.ran = True
        return take

    def outer(self, p: Parameter, a: np.ndarray, b: np.ndarray, grad: np.ndarray) -> None:
        (fb, _, (_, _, _, outer), (pf, gf, s0, s1, s2), rec, _, _), j = self.where[id(p)]
        outer(a, b, pf, gf, s0, s1, s2, fb.seg[j], j, fb.coef, rec)

    def ready(self, p: Parameter) -> None:
        (fb, _, (_, _, segment, _), (pf, gf, s0, s1, s2), rec, _, _), j = self.where[id(p)]
        segment(pf, gf, s0, s1, s2, fb.seg[j], fb.seg[j + 1], j, fb.coef, rec)

    # ---- after the run --------------------------------------------------------------------------
    def finish(self) -> bool:
        """Complete the step (scalar state, new state entries, post-hooks) if it ran in the
        plan; False if it did not (then ``step`` must be called)."""
        if not self.ran:
            return False
        opt = self.opt
        for fb, _, (_, advance, _, _), _, rec, mask, starting in self.buffers:
            if mask.any():
                advance(mask, fb.scalars, rec)
            if starting:
                opt._start(fb, [j for j in starting if fb.steps[j] > 0])
        opt._opt_called = True
        for hook in [*opt._optimizer_step_post_hooks.values(),
                     *_global_optimizer_post_hooks.values()]:
            hook(opt, (), {})
        return True


def prepare(opt: Any) -> PlanStep | None:
    """A :class:`PlanStep` for ``opt``'s next step, or None when it must be unfused."""
    if fusable(opt) is not None:
        return None
    try:
        return PlanStep(opt)
    except Exception:  # noqa: BLE001 - step raises it, after the backward, as unfused
        return None


def fuse_with_backward(opt: Any, loss: Tensor, outputs: list[Tensor] = ()) -> list | None:
    """``loss.backward(); opt.step()`` in one plan run when possible (the module docstring);
    returns the values of ``outputs`` and the loss from that run when they were computed by it
    (None when it took the unfused path)."""
    update = prepare(opt)
    values = backward_and_update(loss, update, outputs) if update is not None else None
    if values is None:
        loss.backward()
    if update is None or not update.finish():
        opt.step()
    return values
