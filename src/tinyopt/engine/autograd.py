"""``tinyopt.autograd``: backward passes, ``grad(outputs, inputs)`` and gradient hooks.

``loss.backward()`` usually takes the *fast path*: realizing the loss compiles one plan that
computes forward and backward and writes each leaf's gradient straight into its ``.grad``
storage (``realize(loss=...)``).  Everything else takes the *explicit path*: the gradient graph is
built here with :func:`tinyopt.engine.graph.backward_graph`, with a hook node wherever a tensor
has hooks (``register_hook``), and its gradient nodes are realized as ordinary outputs (one
cached plan per structure, hooks included).  The explicit path serves ``grad()``,
``backward(inputs=...)``, backward through several tensors, ``retain_grad()`` on non-leaves and
hooks on any tensor.

After a backward pass, the leaves' post-accumulate-grad hooks run, last leaves first (the order
in which a backward pass finishes them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tinyopt.engine.gc_pause import paused
from tinyopt.engine.graph import backward_graph, check_saved, toposort
from tinyopt.engine.grad_mode import enable_grad
from tinyopt.engine.op import defop, node
from tinyopt.engine.tensor import LEAF_OPS, MUTATIONS, Tensor, as_tensor, leaf


class _Watched:
    """How many tensors ever got a hook or ``retain_grad`` (0: realizations skip the search)."""
    count = 0


WATCHED = _Watched()


# ---- hook nodes ----------------------------------------------------------------------------------
def _hook_forward(t: Tensor) -> Callable:
    hooks = t.attrs[0]

    def run(out: np.ndarray, g: np.ndarray) -> None:
        value = g
        for hook in hooks:
            r = hook(leaf(value))
            if r is not None:
                r = as_tensor(r)
                if r.shape != value.shape:
                    raise RuntimeError(f"hook returned a gradient of shape {r.shape}, expected "
                                       f"{value.shape}")
                value = r.numpy()
        np.copyto(out, value, casting="unsafe")
    return run


defop("grad_hook", forward=_hook_forward)


def _hooks_of(t: Tensor) -> tuple:
    hooks = getattr(t, "_hooks", None)
    return tuple(hooks.values()) if hooks else ()


def _watched(nodes: list[Tensor]) -> bool:
    """Whether any node of the graph has hooks or retains its gradient."""
    return bool(WATCHED.count) and any(getattr(t, "_hooks", None) or
                                       getattr(t, "_retains_grad", False) for t in nodes)


def _leaf_hooked(nodes: list[Tensor]) -> bool:
    return any(t.op in LEAF_OPS and getattr(t, "_hooks", None) for t in nodes)


# ---- the two paths -------------------------------------------------------------------------------
def _as_list(x: Any) -> list:
    if x is None:
        return []
    if isinstance(x, Tensor):
        return [x]
    return list(x)


def _loss_of(tensors: list[Tensor], grads: list[Any]) -> Tensor:
    """One scalar whose gradient is the sum of each tensor's vector-Jacobian product with its
    ``grad`` (1 for a scalar without one)."""
    if len(grads) < len(tensors):
        grads = grads + [None] * (len(tensors) - len(grads))
    if len(grads) != len(tensors):
        raise RuntimeError(f"got {len(grads)} gradients for {len(tensors)} tensors")
    for i, (t, g) in enumerate(zip(tensors, grads)):
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have "
                               f"a grad_fn")
        if g is None and t.numel() != 1:
            raise RuntimeError(f"grad can be implicitly created only for scalar outputs (this "
                               f"tensor has shape {t.shape}: pass gradient=...)")
    if len(tensors) == 1 and grads[0] is None:
        return tensors[0]
    with enable_grad():
        terms = [(t * _seed(i, t, g)).sum() if g is not None else t.sum()
                 for i, (t, g) in enumerate(zip(tensors, grads))]
        total = terms[0]
        for term in terms[1:]:
            total = total + term
    return total


def _seed(i: int, t: Tensor, g: Any) -> Tensor:
    arr = np.asarray(g.numpy() if isinstance(g, Tensor) else g)
    if arr.shape != t.shape:
        raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                           f"{list(arr.shape)} and output[{i}] has a shape of {list(t.shape)}.")
    return leaf(np.array(arr, dtype=t.dtype))


@paused
def run_backward(tensors: Sequence[Tensor], grad_tensors: Sequence[Any] | None = None, *,
                 retain_graph: bool = False, inputs: Any = None,
                 create_graph: bool = False) -> None:
    """``torch.autograd.backward``: accumulate gradients of ``tensors`` into the leaves' (or
    ``inputs``') ``.grad``."""
    from tinyopt.engine.realize import realize
    if create_graph:
        raise NotImplementedError("backward(create_graph=True): higher-order gradients are not "
                                  "supported; tinyopt's autograd is first order")
    tensors = _as_list(tensors)
    if not tensors:
        raise RuntimeError("backward() needs at least one tensor")
    loss = _loss_of(tensors, _as_list(grad_tensors))
    wrt = _as_list(inputs)
    if not wrt and not WATCHED.count and not POST_HOOKS.count:
        realize([], loss=loss, retain_graph=retain_graph)
        return
    fwd = toposort([loss])
    if not wrt and not _watched(fwd):
        leaves = [t for t in fwd if t.requires_grad and t.op in ("param", "input")]
        del fwd  # (a list holding every node would make realize keep every value: graph.held)
        realize([], loss=loss, retain_graph=retain_graph)
        _post_accumulate(leaves)
        return
    _explicit(loss, wrt, retain_graph=retain_graph, accumulate=True)


@paused
def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, only_inputs: bool = True, allow_unused: bool | None = None,
         is_grads_batched: bool = False, materialize_grads: bool = False
         ) -> tuple[Tensor | None, ...]:
    """``torch.autograd.grad``: the gradients of ``outputs`` with respect to ``inputs``, returned
    (not accumulated into ``.grad``); first order only."""
    if create_graph:
        raise NotImplementedError("grad(create_graph=True): higher-order gradients are not "
                                  "supported; tinyopt's autograd is first order")
    if is_grads_batched:
        raise NotImplementedError("grad(is_grads_batched=True) is not supported")
    wrt = _as_list(inputs)
    for t in wrt:
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    loss = _loss_of(_as_list(outputs), _as_list(grad_outputs))
    values = _explicit(loss, wrt, retain_graph=bool(retain_graph), accumulate=False)
    result: list[Tensor | None] = []
    for t, v in zip(wrt, values):
        if v is None:
            if materialize_grads:
                v = np.zeros(t.shape, t.dtype)
            elif not allow_unused:
                raise RuntimeError("One of the differentiated Tensors appears to not have been "
                                   "used in the graph. Set allow_unused=True if this is the "
                                   "desired behavior.")
        result.append(None if v is None else leaf(v))
    return tuple(result)


def _explicit(loss: Tensor, wrt: list[Tensor], *, retain_graph: bool,
              accumulate: bool) -> list[np.ndarray | None]:
    """Build and realize the gradient graph of ``loss`` for ``wrt`` (every leaf that requires
    grad when empty); accumulate into ``.grad`` or return the values."""
    from tinyopt.engine.realize import backward_done, freeze_after_backward, realize
    fwd = toposort([loss])
    if fwd and MUTATIONS.last > fwd[0].node_id:
        check_saved(fwd)
    if not wrt:
        wrt = [t for t in fwd if t.op in ("param", "input") and t.requires_grad]
    retained = [t for t in fwd if getattr(t, "_retains_grad", False) and t.op not in LEAF_OPS]
    targets = list({id(t): t for t in wrt + retained}.values())
    hooked = {id(t): _hooks_of(t) for t in fwd if getattr(t, "_hooks", None)}

    def on_grad(t: Tensor, g: Tensor) -> Tensor:
        hooks = hooked.get(id(t))
        return node("grad_hook", (g,), g.shape, g.dtype, (hooks,)) if hooks else g

    grads = backward_graph(loss, fwd, targets, on_grad=on_grad)
    nodes = [grads.get(id(t)) for t in targets]
    present = [g for g in nodes if g is not None]
    values = realize([loss] + present)[1:]
    found = dict(zip(map(id, present), values))
    by_target = {id(t): (found[id(g)] if g is not None else None) for t, g in zip(targets, nodes)}
    if not retain_graph:
        freeze_after_backward(fwd, loss)
    if not accumulate:
        return [by_target[id(t)] for t in wrt]
    for t in targets:
        v = by_target[id(t)]
        if v is None:
            continue
        if t.op not in LEAF_OPS and getattr(t, "_grad", None) is None:
            t._grad = np.array(v)
        else:
            t._accumulate_grad(v)
    backward_done()
    _post_accumulate([t for t in wrt if by_target[id(t)] is not None])
    return []


class _PostHooks:
    """How many post-accumulate-grad hooks were ever registered (0: backward skips the search)."""
    count = 0


POST_HOOKS = _PostHooks()


def _post_accumulate(leaves: list[Tensor]) -> None:
    """Run ``register_post_accumulate_grad_hook`` hooks, last leaves first."""
    for p in reversed(leaves):
        hooks = getattr(p, "_post_hooks", None)
        if hooks:
            for hook in list(hooks.values()):
                hook(p)


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False, grad_variables: Any = None, inputs: Any = None) -> None:
    """``torch.autograd.backward``."""
    run_backward(_as_list(tensors), _as_list(grad_tensors if grad_tensors is not None
                                             else grad_variables),
                 retain_graph=bool(retain_graph), inputs=inputs, create_graph=create_graph)


__all__ = ["backward", "grad"]
