"""The optimizer step inside the backward plan: ``optimizer.fuse_with_backward(loss)``.

``opt.fuse_with_backward(loss)`` is ``loss.backward(); opt.step()`` -- the same parameters,
state, gradients (``p.grad`` holds this backward's gradient afterwards) and hooks, bit for bit
-- taken in ONE plan run: each parameter is stepped by the engine as soon as its gradient is
final (``engine/update_in_plan.py``); a large linear weight at batch 1 is stepped in the kernel
that computes its gradient (an outer product), the others in one walker call after the run.
``fit`` uses it when it steps after every batch.  It is taken only with a parameter of
``OUTER_MIN`` elements or more: below, the separate step is as fast (see ``OUTER_MIN``).

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

from tinyopt.engine.update_in_plan import backward_and_update
from tinyopt.engine.row_sparse import row_sparse_params
from tinyopt.engine.tensor import Parameter, Tensor
from tinyopt.kernels.linalg import outer as outer_product
from tinyopt.kernels.optim_in_plan import for_algorithm
from tinyopt.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks


def fusable(opt: Any) -> str | None:
    """Why ``opt``'s step cannot run inside the backward plan now (None: it can)."""
    refusal = getattr(opt, "in_plan_refusal", None)  # (FusedOptimizer's: its class's reasons)
    reason = "not an elementwise fused optimizer" if refusal is None else refusal()
    if reason is not None:
        return reason
    if _global_optimizer_pre_hooks or opt._optimizer_step_pre_hooks:
        return "a step pre-hook is registered"
    if any(group.get("cautious", False) for group in opt.param_groups):
        return "a cautious group (its mask counts over whole parameters: two passes)"
    if any(id(p) in opt._ids for p in row_sparse_params()):  # step checks them (torch's errors)
        return "a row-sparse gradient (nn.Embedding(sparse=True))"
    for group, buffers, repeats in zip(opt.param_groups, opt._flat, opt._repeats):
        for fb, rep in zip(buffers, repeats):
            if fb.mode:
                return "16-bit parameters"
            if rep is not None:
                return "a parameter is listed twice"
            if fb.flags.any():
                return "a gradient was not reset"
    return None


OUTER_MIN = 1 << 20
"""Parameters of at least this many elements step in their gradient's outer-product kernel;
smaller ones with the rest, in one walker call after the run; without such a parameter in the
plan, the step is not taken in the plan at all (``step`` after it).  Why: the fused kernel saves
the gradient's round trip through memory, which pays when the state no longer fits the caches
(2048 x 2048 float32 Adam, one thread: 6.5 ms against 7.4 ms for the outer product, then the
step); within them Adam is bound by its divisions, and the 784-500-10 MLP's first weight
(392k) stepped no faster in its gradient's kernel (``kernels/optim_in_plan.py``)."""


class _Buffer:
    """What a step does to one flat buffer: its kernels, arguments and host record, which of its
    parameters get a gradient in this run (``mask``) and which stepped in the plan (``done``)."""

    __slots__ = ("fb", "group", "kernels", "walker", "args", "rec", "mask", "done", "starting")

    def __init__(self, fb, group, kernels, walker, args, rec) -> None:
        self.fb, self.group, self.kernels, self.walker = fb, group, kernels, walker
        self.args, self.rec = args, rec
        n = len(fb.params)
        self.mask = np.zeros(n, np.uint8)
        self.done = np.zeros(n, np.uint8)
        self.starting: np.ndarray | None = None


class PlanStep:
    """The update (``engine/update_in_plan.py``'s protocol) that takes one step of a
    ``FusedOptimizer`` during a backward plan run.  Made just before the run (it reads the
    hyperparameters then, as ``step`` would after the backward); :meth:`finish` after it.

    Large parameters whose gradient is an outer product step in its kernel (``outer``); the
    others step after the run in one walker call per buffer, restricted to them (the walker of
    ``step``, with the parameters that already stepped masked out).
    """

    def __init__(self, opt: Any) -> None:
        self.opt = opt
        self.buffers: list[_Buffer] = []
        self.ran = False
        opt._follow_groups()
        where = _layout(opt)[0]
        for group, buffers in zip(opt.param_groups, opt._flat):
            for fb in buffers:  # the buffer's step prepared as ``step`` prepares it
                step = opt.prepare_step(fb, group, opt._use_state_names(fb, group))
                self.buffers.append(_Buffer(fb, group, for_algorithm(opt.kernel, step.switches),
                                            step.kernel, step.args,
                                            fb.host(step.host, opt.host64)))
        self.where = {pid: (self.buffers[b], j) for pid, (b, j) in where.items()}

    # ---- the engine's protocol ------------------------------------------------------------------
    def begin(self, params: list[Parameter], outer: list[bool]) -> list[bool] | None:
        if not any(o and p.numel() >= OUTER_MIN for p, o in zip(params, outer)):
            return None  # nothing to step in a gradient's kernel: the separate step is as fast
        take = []
        for p in params:
            w = self.where.get(id(p))
            take.append(w is not None)
            if w is not None:
                w[0].mask[w[1]] = 1
        for b in self.buffers:  # as step: state starts from its initial values
            b.starting = self.opt._begin_state(b.fb, b.group, b.mask)
        for b in self.buffers:
            if b.mask.any() and b.kernels[0](b.mask, b.fb.scalars, b.fb.coef, b.rec) >= 0:
                for other in self.buffers:  # step raises the overflow, after the backward
                    other.mask[:] = 0
                    other.starting = None
                return None
        self.ran = True
        return take

    def outer(self, p: Parameter, a: np.ndarray, b: np.ndarray, grad: np.ndarray) -> None:
        buf, j = self.where[id(p)]
        fb = buf.fb
        lo, hi = int(fb.seg[j]), int(fb.seg[j + 1])
        if hi - lo < OUTER_MIN:  # small: stepped after the run
            outer_product(a, b, grad)  # the gradient's own kernel
            return
        # the parameter's storage and gradient where they are, its part of the state
        args = buf.args
        s0, s1, s2 = (s[lo:hi] if s.size else s for s in (args.s0, args.s1, args.s2))
        buf.kernels[3](a, b, fb.param_view(j).reshape(-1), grad.reshape(-1), s0, s1, s2, 0, j,
                       fb.coef, buf.rec)
        buf.done[j] = 1

    def ready(self, p: Parameter) -> None:
        pass  # stepped after the run, with the other small ones

    # ---- after the run --------------------------------------------------------------------------
    def finish(self) -> bool:
        """Complete the step (the parameters not stepped in the plan, scalar state, new state
        entries, post-hooks) if it ran in the plan; False if it did not (then ``step`` must be
        called)."""
        if not self.ran:
            return False
        opt = self.opt
        for b in self.buffers:
            fb = b.fb
            if b.done.any():
                b.kernels[1](b.done, fb.scalars, b.rec)
                rest = b.mask & ~b.done
            else:
                rest = b.mask
            if rest.any():
                if b.walker(*b.args._replace(flags=rest), b.rec) >= 0:  # (checked in begin)
                    raise RuntimeError(f"value cannot be converted to type {fb._ctype} without "
                                       "overflow")
            opt._finish_state(fb, b.starting)
        opt._opt_called = True
        for hook in [*opt._optimizer_step_post_hooks.values(),
                     *_global_optimizer_post_hooks.values()]:
            hook(opt, (), {})
        return True


def _layout(opt: Any) -> tuple[dict[int, tuple[int, int]], int]:
    """``id(p) -> (buffer number, index in it)`` over ``opt``'s flat buffers, and the size of
    its largest parameter (kept until the buffers are replaced)."""
    key = [fb for buffers in opt._flat for fb in buffers]
    cached = opt.__dict__.get("_in_plan_layout")
    if cached is not None and len(cached[0]) == len(key) and all(
            a is b for a, b in zip(cached[0], key)):  # (the buffers themselves: ids are reused)
        return cached[1]
    where, k, largest = {}, 0, 0
    for buffers in opt._flat:
        for fb in buffers:
            for j, p in enumerate(fb.params):
                where[id(p)] = (k, j)
            if len(fb.params):
                largest = max(largest, int(np.diff(fb.seg).max()))
            k += 1
    opt.__dict__["_in_plan_layout"] = (key, (where, largest))
    return where, largest


def prepare(opt: Any) -> PlanStep | None:
    """A :class:`PlanStep` for ``opt``'s next step, or None when it must be (or may as well
    be) unfused: without a parameter of ``OUTER_MIN`` elements, nothing would step in a
    gradient's kernel."""
    if fusable(opt) is not None or _layout(opt)[1] < OUTER_MIN:
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
