"""The parameter update inside the backward plan (ggml's third graph, ``gb_opt``).

``loss.backward(); optimizer.step()`` runs the plan (forward and backward, gradients into
``.grad``), then one optimizer kernel over every parameter.  :func:`backward_and_update` runs the
same plan once and lets an *update* (an object the optimizer makes; the engine knows nothing of
optimizers) step each parameter during that run, as soon as nothing later in the run reads the
parameter or writes its gradient: while its gradient is still in cache, and, for a linear
layer's weight at batch 1 (an outer product), in the kernel that computes the gradient.  The
values are those of the separate step, bit for bit: the same kernels compute the same gradients,
and the update is elementwise.

The protocol an update implements (``optim.in_plan.PlanStep`` is tinyopt's):

``begin(params, outer) -> list[bool] | None``
    ``params`` are the parameters that get a gradient in this run, ``outer[i]`` whether
    ``params[i]``'s gradient can be computed by ``outer`` below; which of them the update steps
    in the run (None: none, the run is a plain backward).  Called before anything runs.
``outer(p, a, b, grad)``
    ``p``'s gradient is ``a b^T`` (``a`` (m,), ``b`` (n,)): write it into ``grad`` (``p``'s
    gradient storage, shape (m, n)) and step ``p``.  Instead of the gradient's own kernel.
``ready(p)``
    ``p._grad`` is final and nothing later in the run reads ``p``: step it.

Each parameter the update takes gets exactly one ``outer`` or ``ready`` call per run.  If a
kernel raises after some parameters stepped, those keep their step (the error propagates; the
gradients are reset as after any failed backward).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from tinyopt.engine.tensor import Parameter, Tensor

END = -1
"""Schedule position: after the run's outputs were copied (the point that is always safe)."""


class Update(Protocol):
    def begin(self, params: list[Parameter], outer: list[bool]) -> list[bool] | None: ...
    def outer(self, p: Parameter, a: Any, b: Any, grad: Any) -> None: ...
    def ready(self, p: Parameter) -> None: ...


def backward_and_update(loss: Tensor, update: Update, outputs: list[Tensor] = ()) -> list | None:
    """``loss.backward()`` (and the values of ``outputs``, from the same run, as
    ``realize(outputs, loss=loss)``) with ``update`` stepping the parameters during the run.

    Only where ``loss.backward()`` itself is one plan run (a scalar loss, no tensor or
    post-accumulate-grad hooks, no backward hooks such as DDP's): otherwise returns None having
    run nothing, and the caller takes the unfused path."""
    from tinyopt.engine import autograd
    from tinyopt.engine.graph import toposort
    from tinyopt.engine.realize import BACKWARD_HOOKS, realize
    if not loss.requires_grad or loss.numel() != 1 or any(
            getattr(hook, "active", _always)() for hook in BACKWARD_HOOKS):
        return None
    if autograd.WATCHED.count or autograd.POST_HOOKS.count:  # (hooks somewhere: in this graph?)
        fwd = toposort([loss])
        if autograd._watched(fwd) or any(getattr(t, "_post_hooks", None) for t in fwd):
            return None
    return realize(list(outputs), loss=loss, update=update)


def _always() -> bool:
    """A backward hook acts after every backward unless it says when (``hook.active()``:
    DistributedDataParallel's, while a DDP model lives)."""
    return True


def schedule(plan) -> list[tuple[int, tuple[int, int] | None]]:
    """Per entry of ``plan.grad_outs``: the step position after which its parameter may be
    updated (:data:`END`: after the outputs are copied), and the slots ``(a, b)`` of the outer
    product its gradient is, when it may be updated in that gradient's kernel (else None).
    Computed once per plan."""
    sched = getattr(plan, "_update_schedule", None)
    if sched is not None:
        return sched
    kind, srcs, nodes = plan._kind, plan._srcs, plan.nodes
    pos, n = {}, 0
    for i, k in enumerate(kind):
        if k in ("compute", "into_grad", "view"):
            pos[i] = n
            n += 1
    late = set(plan.output_slots) | {plan.loss_slot}
    sched = []
    for k, gi, into_grad in plan.grad_outs:
        slot = plan.leaf_slots[k]
        alias = {slot}
        last = -1
        for i in range(slot + 1, len(nodes)):
            if any(s in alias for s in srcs[i]):
                if kind[i] == "view":
                    alias.add(i)
                if i in pos:
                    last = max(last, pos[i])
        grad_at = pos[gi] if into_grad else END
        if alias & late or grad_at == END:
            sched.append((END, None))
            continue
        outer = None
        g = nodes[gi]
        if last < grad_at and g.op == "linear_grad_weight" and _rows(g) == 1 \
                and g.dtype == nodes[slot].dtype:
            outer = (srcs[gi][0], srcs[gi][1])
        sched.append((max(grad_at, last), outer))
    plan._update_schedule = sched
    return sched


def _rows(g: Tensor) -> int:
    """Rows summed over by a ``linear_grad_weight`` node (its forward is ``kernels.linalg.outer``
    for one row: ``engine/ops/linalg.py``)."""
    return math.prod(g.srcs[0].shape[:-1])


class Scheduled:
    """One run's updates: which parameter steps after which plan step (``_Run.run`` drives it)."""

    def __init__(self, plan, leaves: list[Tensor], update: Update,
                 take: list[bool]) -> None:
        self.update = update
        self.after: dict[int, list[Parameter]] = {}
        self.outer: dict[int, tuple[Parameter, int, int, int]] = {}
        self.late: list[Parameter] = []
        for (k, gi, _), (at, outer), on in zip(plan.grad_outs, schedule(plan), take):
            if not on:
                continue
            p = leaves[k]
            if at == END or p._grad is not None:  # an accumulated gradient: added at the end
                self.late.append(p)
            elif outer is not None:
                self.outer[at] = (p, gi, *outer)
            else:
                self.after.setdefault(at, []).append(p)

    def run_steps(self, steps, A) -> None:
        after, outer, update = self.after, self.outer, self.update
        for n, step in enumerate(steps):
            o = outer.get(n)
            if o is None:
                step()
            else:
                p, gi, sa, sb = o
                g = A[gi]
                update.outer(p, A[sa].reshape(-1, g.shape[0])[0], A[sb].reshape(-1, g.shape[1])[0],
                             g)
            for p in after.get(n, ()):
                update.ready(p)

    def finish(self) -> None:
        for p in self.late:
            self.update.ready(p)


def begin(plan, leaves: list[Tensor], update: Update) -> Scheduled | None:
    """The updates of this run of ``plan`` (None when ``update`` takes no parameter)."""
    params = [leaves[k] for k, _, _ in plan.grad_outs]
    outer = [o is not None and p._grad is None for p, (_, o) in zip(params, schedule(plan))]
    take = update.begin(params, outer) if params else None
    if not take or not any(take):
        return None
    return Scheduled(plan, leaves, update, take)
