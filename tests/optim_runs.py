"""Runs of an optimizer beside a reference, for the optimizers PyTorch does not ship (issue 31).

Every run: parameters of several shapes (a 0-d one and an empty one among them) in two groups
with different options, some gradients None on some steps (parameter 1 every third step,
parameter 3 for the first five), the first group's lr halved at step ``steps // 2``.  The
reference is either a numpy implementation of the published update (one parameter at a time,
``Ref``) or the reference package's torch optimizer, driven with the same gradients.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np

from tinyopt import Parameter

SHAPES = [(3, 4), (5,), (2, 3, 2), (), (0,), (7,)]
GROUP_OF = [0, 0, 1, 1, 0, 1]


def group_of(i: int) -> int:
    """The group of parameter ``i`` (for other shape lists too)."""
    return GROUP_OF[i % len(GROUP_OF)]


def grads(seed: int, dtype, steps: int, shapes=SHAPES,
          none: bool = True) -> list[list[np.ndarray | None]]:
    """Each step's gradients; with ``none``, parameter 1's None every third step and parameter
    3's for the first five (``none=False`` for a reference that counts steps per group)."""
    rng = np.random.default_rng(seed)
    return [[None if none and ((i == 1 and t % 3 == 0) or (i == 3 and t < 5))
             else rng.standard_normal(s).astype(dtype) for i, s in enumerate(shapes)]
            for t in range(steps)]


def initial(dtype, seed: int = 1, shapes=SHAPES) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def groups(params: list, o1: dict) -> list[dict]:
    gs = [{"params": [p for i, p in enumerate(params) if group_of(i) == k]} for k in (0, 1)]
    gs[1].update(o1)
    return gs


def make(cls, o0: dict, o1: dict, dtype, seed: int = 1, shapes=SHAPES):
    """tinyopt parameters and ``cls(groups, **o0)`` with the second group's options ``o1``."""
    params = [Parameter(a) for a in initial(dtype, seed, shapes)]
    return params, cls(groups(params, o1), **o0)


def run(opt, params, gs, steps, each: Callable | None = None) -> None:
    """Step ``opt`` through ``steps`` (indices into ``gs``), halving group 0's lr halfway
    (step ``len(gs) // 2``); ``each(opt, t)`` before every step."""
    for t in steps:
        for p, g in zip(params, gs[t]):
            p.grad = g
        if t == len(gs) // 2:
            opt.param_groups[0]["lr"] *= 0.5
        if each is not None:
            each(opt, t)
        opt.step()


def run_reference(fn: Callable, opt, params, gs) -> tuple[list[np.ndarray], list[dict]]:
    """The numpy reference ``fn(p, g, state, hyper) -> p`` (one parameter at a time) driven as
    :func:`run` drives ``opt`` (whose groups give the hyperparameters; call before stepping it).
    Returns the parameters and their states."""
    hyper = [dict(opt.param_groups[group_of(i)]) for i in range(len(params))]
    ps = [p.data.numpy().copy() for p in params]
    states: list[dict] = [{} for _ in params]
    for t in range(len(gs)):
        if t == len(gs) // 2:
            for i, h in enumerate(hyper):
                if group_of(i) == 0:
                    h["lr"] *= 0.5
        for i, g in enumerate(gs[t]):
            if g is not None:
                ps[i] = fn(ps[i], g, states[i], hyper[i])
    return ps, states


def assert_state_close(opt, params, states: list[dict], dtype, rtol: float | None = None) -> None:
    """``opt.state`` holds exactly the reference's keys, with close values (no entry where the
    reference has none)."""
    for i, p in enumerate(params):
        st = opt.state.get(p, {})
        assert set(st) == set(states[i]), (i, set(st), set(states[i]))
        keys = sorted(states[i])
        assert_close([np.asarray(st[k]) for k in keys], [states[i][k] for k in keys], dtype, rtol,
                     what=f"param {i} state")


def run_torch(torch, topt, tparams, gs, steps, each: Callable | None = None) -> None:
    """As :func:`run`, for a torch optimizer, on one torch thread: on the shared 2-core test
    machine, each of torch's parallel regions over these small tensors waited milliseconds for
    a descheduled thread (Lamb against pytorch-optimizer took 4.4 s a case on 2 threads, 0.14 s
    on one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for t in steps:
            for p, g in zip(tparams, gs[t]):
                p.grad = None if g is None else torch.from_numpy(g.copy())
            if t == len(gs) // 2:
                topt.param_groups[0]["lr"] *= 0.5
            if each is not None:
                each(topt, t)
            topt.step()
    finally:
        torch.set_num_threads(threads)


def torch_twin(torch, ref_cls, o0: dict, o1: dict, params: list):
    """The reference package's optimizer over torch copies of ``params``."""
    tparams = [torch.nn.Parameter(torch.from_numpy(p.data.numpy().copy())) for p in params]
    return tparams, ref_cls(groups(tparams, o1), **o0)


def assert_close(ours: list, theirs: list, dtype, rtol: float | None = None,
                 what: str = "param") -> float:
    """Every array of ``ours`` within ``rtol`` (1e-6 for float32, 1e-12 for float64, relative,
    with an absolute floor of the same size) of ``theirs``; returns the largest relative
    difference."""
    rtol = rtol or (1e-6 if dtype == np.float32 else 1e-12)
    worst = 0.0
    for i, (a, b) in enumerate(zip(ours, theirs)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, err_msg=f"{what} {i}")
        if a.size:
            worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1.0))))
    return worst


def matches_reference(cls, ref_fn: Callable, o0: dict, o1: dict, dtype, steps: int,
                      shapes=SHAPES) -> tuple:
    """``cls`` and the numpy reference ``ref_fn`` (one parameter at a time) through ``steps``
    steps: parameters and state close (:func:`assert_close`).  Returns ``(params, opt)``."""
    params, opt = make(cls, o0, o1, dtype, shapes=shapes)
    gs = grads(7, dtype, steps, shapes)
    ref, states = run_reference(ref_fn, opt, params, gs)
    run(opt, params, gs, range(steps))
    assert_close([p.data for p in params], ref, dtype)
    assert_state_close(opt, params, states, dtype)
    return params, opt


def matches_package(torch, cls, ref_cls, o0: dict, o1: dict, dtype, steps: int, shapes=SHAPES,
                    none: bool = True, setup: Callable | None = None) -> tuple:
    """``cls`` and the reference package's ``ref_cls`` through ``steps`` steps of the same
    gradients (``none=False``: every parameter has one at every step, for a package that counts
    steps per group; ``setup(topt)`` first): parameters close.  Returns ``(params, opt,
    tparams, topt)``."""
    params, opt = make(cls, o0, o1, dtype, shapes=shapes)
    tparams, topt = torch_twin(torch, ref_cls, o0, o1, params)
    if setup is not None:
        setup(topt)
    gs = grads(11, dtype, steps, shapes, none=none)
    run(opt, params, gs, range(steps))
    run_torch(torch, topt, tparams, gs, range(steps))
    assert_close([p.data for p in params], [p.detach().numpy() for p in tparams], dtype)
    return params, opt, tparams, topt


def state_dict_halfway(cls, o0: dict, o1: dict, steps: int, each: Callable | None = None):
    """A state dict saved halfway and loaded into a fresh optimizer continues bit for bit."""
    gs = grads(3, np.float32, steps)
    params, opt = make(cls, o0, o1, np.float32)
    run(opt, params, gs, range(steps // 2 - 3), each)
    sd = opt.state_dict()
    saved = [p.data.numpy().copy() for p in params]
    run(opt, params, gs, range(steps // 2 - 3, steps), each)
    params2, opt2 = make(cls, o0, o1, np.float32, seed=99)
    for p, s in zip(params2, saved):
        p.data = s
    opt2.load_state_dict(copy.deepcopy(sd))
    run(opt2, params2, gs, range(steps // 2 - 3, steps), each)
    for p, q in zip(params, params2):
        np.testing.assert_array_equal(p.data, q.data)
    sd1, sd2 = opt.state_dict(), opt2.state_dict()
    assert sd1["param_groups"] == sd2["param_groups"]
    assert sd1["state"].keys() == sd2["state"].keys()
    for k in sd1["state"]:
        assert sd1["state"][k].keys() == sd2["state"][k].keys()
        for name, v in sd1["state"][k].items():
            np.testing.assert_array_equal(v, sd2["state"][k][name])
