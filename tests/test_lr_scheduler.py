"""tinyopt.optim.lr_scheduler: values against PyTorch at every step, hand-computed values (no torch
needed), state_dict round trips (through JSON, and to/from PyTorch), validation errors, warnings."""

from __future__ import annotations

import copy
import json
import math
import warnings

import numpy as np
import pytest

from tinyopt import Parameter
from tinyopt.optim import SGD, Adam
from tinyopt.optim import lr_scheduler as L
from tinyopt.optim.optimizer import Optimizer

# Most tests step schedulers without stepping the optimizer; PyTorch (and tinyopt) warn about that.
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")

LRS = [0.1, 0.05, 0.3]


class PlainOpt(Optimizer):
    """An optimizer with neither momentum nor betas (for cycle_momentum errors)."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

    def step(self, closure=None):
        return None


def make_opt(kind: str = "sgd", lrs: list[float] = LRS):
    groups = [{"params": [Parameter(np.zeros(2))], "lr": lr} for lr in lrs]
    if kind == "adam":
        return Adam(groups, lr=0.1, betas=(0.9, 0.99))
    return SGD(groups, lr=0.1, momentum=0.9)


def make_torch_opt(torch, kind: str = "sgd", lrs: list[float] = LRS):
    groups = [{"params": [torch.nn.Parameter(torch.zeros(2))], "lr": lr} for lr in lrs]
    if kind == "adam":
        return torch.optim.Adam(groups, lr=0.1, betas=(0.9, 0.99))
    return torch.optim.SGD(groups, lr=0.1, momentum=0.9)


def plateau_metric(t: int) -> float:
    return [1.0, 0.9, 0.9, 0.95, 0.9, 0.8, 0.85, 0.85, 0.85, 0.7][t % 10] + 0.01 * (t // 10)


# id -> (factory(module, optimizer), steps, optimizer kind, is ReduceLROnPlateau)
CASES = {
    "lambda": (lambda M, o: M.LambdaLR(o, lambda e: 0.95 ** e), 40, "sgd", False),
    "lambda_list": (lambda M, o: M.LambdaLR(
        o, [lambda e: 0.9 ** e, lambda e: 1 / (e + 1), lambda e: e // 3 + 1]), 30, "sgd", False),
    "multiplicative": (lambda M, o: M.MultiplicativeLR(o, lambda e: 0.97), 40, "sgd", False),
    "step": (lambda M, o: M.StepLR(o, 7, gamma=0.5), 40, "sgd", False),
    "multistep": (lambda M, o: M.MultiStepLR(o, [5, 12, 12, 30], gamma=0.3), 40, "sgd", False),
    "constant": (lambda M, o: M.ConstantLR(o, factor=0.25, total_iters=9), 20, "sgd", False),
    "linear": (lambda M, o: M.LinearLR(o, 0.1, 0.9, 13), 25, "sgd", False),
    "exponential": (lambda M, o: M.ExponentialLR(o, 0.93), 40, "sgd", False),
    "cosine": (lambda M, o: M.CosineAnnealingLR(o, T_max=17, eta_min=1e-3), 90, "sgd", False),
    "cosine_warm": (lambda M, o: M.CosineAnnealingWarmRestarts(o, 5, T_mult=2, eta_min=1e-3),
                    60, "sgd", False),
    "poly": (lambda M, o: M.PolynomialLR(o, total_iters=20, power=2.0), 30, "sgd", False),
    "onecycle_cos": (lambda M, o: M.OneCycleLR(o, [1.0, 0.5, 2.0], total_steps=60), 60, "sgd",
                     False),
    "onecycle_linear_3phase_adam": (lambda M, o: M.OneCycleLR(
        o, 1.0, epochs=5, steps_per_epoch=8, pct_start=0.25, anneal_strategy="linear",
        three_phase=True), 40, "adam", False),
    "onecycle_no_momentum": (lambda M, o: M.OneCycleLR(
        o, 0.8, total_steps=30, cycle_momentum=False, div_factor=10.0, final_div_factor=100.0),
        30, "sgd", False),
    "cyclic_triangular": (lambda M, o: M.CyclicLR(
        o, [0.01, 0.02, 0.03], [0.1, 0.2, 0.3], step_size_up=4, step_size_down=6), 45, "sgd",
        False),
    "cyclic_triangular2_adam": (lambda M, o: M.CyclicLR(
        o, 0.01, 0.1, step_size_up=5, mode="triangular2"), 45, "adam", False),
    "cyclic_exp_range": (lambda M, o: M.CyclicLR(
        o, 0.01, 0.1, step_size_up=3, mode="exp_range", gamma=0.97, base_momentum=[0.7, 0.8, 0.85],
        max_momentum=0.95), 45, "sgd", False),
    "cyclic_scale_fn": (lambda M, o: M.CyclicLR(
        o, 0.01, 0.1, step_size_up=3, scale_fn=lambda x: 0.5 ** x, scale_mode="iterations",
        cycle_momentum=False), 20, "sgd", False),
    "sequential": (lambda M, o: M.SequentialLR(
        o, [M.LinearLR(o, 0.1, total_iters=5), M.CosineAnnealingLR(o, 20),
            M.ExponentialLR(o, 0.9)], milestones=[5, 25]), 40, "sgd", False),
    "chained": (lambda M, o: M.ChainedScheduler(
        [M.ConstantLR(o, 0.5, 4), M.ExponentialLR(o, 0.95), M.StepLR(o, 6)]), 30, "sgd", False),
    "sequential_of_chained": (lambda M, o: M.SequentialLR(
        o, [M.ChainedScheduler([M.LinearLR(o, 0.2, total_iters=4), M.ExponentialLR(o, 0.9)]),
            M.StepLR(o, 3)], milestones=[8]), 25, "sgd", False),
    "plateau_min_rel": (lambda M, o: M.ReduceLROnPlateau(o, patience=1), 40, "sgd", True),
    "plateau_max_abs": (lambda M, o: M.ReduceLROnPlateau(
        o, mode="max", factor=0.5, patience=0, threshold=0.02, threshold_mode="abs", cooldown=2,
        min_lr=[0.0, 0.01, 0.02]), 40, "sgd", True),
}


def advance(sched, is_plateau: bool, t: int) -> None:
    if is_plateau:
        sched.step(plateau_metric(t))
    else:
        sched.step()


def snapshot(opt) -> list[tuple]:
    """Everything a scheduler may write into the groups: lr and momentum / beta1."""
    out = []
    for g in opt.param_groups:
        mom = g["betas"][0] if "betas" in g else g.get("momentum")
        out.append((float(g["lr"]), None if mom is None else float(mom)))
    return out


def assert_same(ours, theirs, where: str) -> None:
    assert len(ours) == len(theirs), where
    for a, b in zip(ours, theirs):
        a = a if isinstance(a, tuple) else (a,)
        b = b if isinstance(b, tuple) else (b,)
        for x, y in zip(a, b):
            if x is None or y is None:
                assert x is None and y is None, where
            else:
                assert math.isclose(x, y, rel_tol=1e-14, abs_tol=0.0), f"{where}: {x} != {y}"


def copy_hyperparameters(src_groups, dst_groups) -> None:
    """What an optimizer's load_state_dict does to the groups' hyperparameters."""
    for s, d in zip(src_groups, dst_groups):
        for key, value in s.items():
            if key not in ("params", "param_names"):
                d[key] = value


def plain_types_only(obj) -> bool:
    if isinstance(obj, dict):
        return all(isinstance(k, (str, int)) and plain_types_only(v) for k, v in obj.items())
    if isinstance(obj, list):
        return all(plain_types_only(v) for v in obj)
    return obj is None or type(obj) in (bool, int, float, str)


# ---- against PyTorch ----------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(CASES))
def test_matches_pytorch_at_every_step(case):
    torch = pytest.importorskip("torch")
    TL = torch.optim.lr_scheduler
    factory, steps, kind, is_plateau = CASES[case]
    opt, topt = make_opt(kind), make_torch_opt(torch, kind)
    sched, tsched = factory(L, opt), factory(TL, topt)
    assert_same(snapshot(opt), snapshot(topt), "after construction")
    assert_same(sched.get_last_lr(), tsched.get_last_lr(), "get_last_lr after construction")
    for t in range(steps):
        advance(sched, is_plateau, t)
        advance(tsched, is_plateau, t)
        assert_same(snapshot(opt), snapshot(topt), f"step {t + 1}")
        assert_same(sched.get_last_lr(), tsched.get_last_lr(), f"get_last_lr step {t + 1}")
    for g, tg in zip(opt.param_groups, topt.param_groups):
        for key in ("initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"):
            assert (key in g) == (key in tg), key
            if key in g:
                assert math.isclose(g[key], tg[key], rel_tol=1e-15)


def _state_keys(sd) -> dict:
    """The keys of a state dict, with nested scheduler states' keys."""
    return {k: ([_state_keys(s) for s in v] if k == "_schedulers" else None)
            for k, v in sd.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_state_dict_exchanges_with_pytorch(case):
    """Same keys as PyTorch; a PyTorch state dict loads into tinyopt mid-run and vice versa."""
    torch = pytest.importorskip("torch")
    TL = torch.optim.lr_scheduler
    factory, steps, kind, is_plateau = CASES[case]
    half = steps // 2
    opt, topt = make_opt(kind), make_torch_opt(torch, kind)
    sched, tsched = factory(L, opt), factory(TL, topt)
    for t in range(half):
        advance(sched, is_plateau, t)
        advance(tsched, is_plateau, t)
    assert _state_keys(sched.state_dict()) == _state_keys(tsched.state_dict())

    # PyTorch -> tinyopt
    opt2 = make_opt(kind)
    sched2 = factory(L, opt2)
    copy_hyperparameters(topt.param_groups, opt2.param_groups)
    sched2.load_state_dict(tsched.state_dict())
    # tinyopt -> PyTorch (our dict is plain data, which PyTorch accepts as is)
    topt2 = make_torch_opt(torch, kind)
    tsched2 = factory(TL, topt2)
    copy_hyperparameters(opt.param_groups, topt2.param_groups)
    tsched2.load_state_dict(copy.deepcopy(sched.state_dict()))
    for t in range(half, steps):
        for s in (sched, sched2, tsched, tsched2):
            advance(s, is_plateau, t)
        ref = snapshot(topt)
        assert_same(snapshot(opt2), ref, f"torch->tinyopt step {t + 1}")
        assert_same(snapshot(topt2), ref, f"tinyopt->torch step {t + 1}")
        assert_same(sched2.get_last_lr(), tsched.get_last_lr(), f"get_last_lr step {t + 1}")


@pytest.mark.parametrize("name,factory,epochs", [
    ("step", lambda M, o: M.StepLR(o, 3, 0.5), [0, 4, 7, 2, 9]),
    ("multistep", lambda M, o: M.MultiStepLR(o, [2, 5, 5], 0.5), [1, 6, 3, 5, 0]),
    ("constant", lambda M, o: M.ConstantLR(o, 0.5, 3), [1, 4, 2]),
    ("linear", lambda M, o: M.LinearLR(o, 0.2, 1.0, 6), [2, 9, 4]),
    ("exponential", lambda M, o: M.ExponentialLR(o, 0.8), [3, 1, 6]),
    ("cosine", lambda M, o: M.CosineAnnealingLR(o, 10), [4, 12, 7]),
    ("poly", lambda M, o: M.PolynomialLR(o, 8, 1.5), [3, 10, 5]),
    ("cosine_warm", lambda M, o: M.CosineAnnealingWarmRestarts(o, 3, 2), [0.5, 4.25, 11, 2.0, 30]),
    ("lambda", lambda M, o: M.LambdaLR(o, lambda e: 1 / (1 + e)), [3, 1]),
])
def test_deprecated_step_epoch_matches_pytorch(name, factory, epochs):
    torch = pytest.importorskip("torch")
    opt, topt = make_opt(), make_torch_opt(torch)
    sched, tsched = factory(L, opt), factory(torch.optim.lr_scheduler, topt)
    for e in epochs:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sched.step(e)
        # CosineAnnealingWarmRestarts.step(epoch) is a supported API, not deprecated
        assert any("epoch parameter" in str(w.message) for w in caught) == (name != "cosine_warm")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tsched.step(e)
        assert_same(snapshot(opt), snapshot(topt), f"{name} epoch {e}")
        sched.step()
        tsched.step()
        assert_same(snapshot(opt), snapshot(topt), f"{name} after epoch {e}")


# ---- hand-computed values (no torch needed) -----------------------------------------------------
def lrs_over(sched_factory, steps: int, lr: float = 1.0, kind: str = "sgd") -> list[float]:
    opt = make_opt(kind, [lr])
    sched = sched_factory(opt)
    out = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        sched.step()
        out.append(opt.param_groups[0]["lr"])
    return out


def test_step_multistep_exponential_values():
    assert lrs_over(lambda o: L.StepLR(o, 2, 0.5), 5) == [1, 1, 0.5, 0.5, 0.25, 0.25]
    assert lrs_over(lambda o: L.MultiStepLR(o, [2, 4, 4], 0.5), 5) == [1, 1, 0.5, 0.5, 0.125, 0.125]
    assert lrs_over(lambda o: L.ExponentialLR(o, 0.5), 3) == [1, 0.5, 0.25, 0.125]
    assert lrs_over(lambda o: L.ConstantLR(o, 0.5, 2), 3) == [0.5, 0.5, 1.0, 1.0]
    assert lrs_over(lambda o: L.LambdaLR(o, lambda e: e + 1), 3) == [1, 2, 3, 4]
    assert lrs_over(lambda o: L.MultiplicativeLR(o, lambda e: 0.5), 2) == [1, 0.5, 0.25]


def test_linear_polynomial_cosine_values():
    np.testing.assert_allclose(lrs_over(lambda o: L.LinearLR(o, 0.25, 1.0, 3), 5),
                               [0.25, 0.5, 0.75, 1.0, 1.0, 1.0], rtol=1e-14)
    np.testing.assert_allclose(lrs_over(lambda o: L.PolynomialLR(o, 4, 2.0), 6),
                               [1, 0.5625, 0.25, 0.0625, 0, 0, 0], rtol=1e-14, atol=1e-15)
    c = math.cos(math.pi / 4)
    np.testing.assert_allclose(lrs_over(lambda o: L.CosineAnnealingLR(o, 4, eta_min=0.2), 8),
                               [1, 0.2 + 0.4 * (1 + c), 0.6, 0.2 + 0.4 * (1 - c), 0.2,
                                0.2 + 0.4 * (1 - c), 0.6, 0.2 + 0.4 * (1 + c), 1.0],
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(lrs_over(lambda o: L.CosineAnnealingWarmRestarts(o, 2, 2), 6),
                               [1, 0.5, 1, 0.5 * (1 + math.cos(math.pi / 4)), 0.5,
                                0.5 * (1 + math.cos(3 * math.pi / 4)), 1, ], rtol=1e-14)


def test_onecycle_values_and_momentum():
    opt = make_opt("sgd", [0.5])
    sched = L.OneCycleLR(opt, max_lr=2.0, total_steps=11, pct_start=0.4, anneal_strategy="linear")
    # phase 1: steps 0..3.4 from 2/25 to 2 ; phase 2: 3.4..10 from 2 to 0.08/1e4
    lrs, moms = [], []
    for t in range(11):
        lrs.append(opt.param_groups[0]["lr"])
        moms.append(opt.param_groups[0]["momentum"])
        if t < 10:
            sched.step()
    assert lrs[0] == pytest.approx(0.08) and moms[0] == pytest.approx(0.95)
    assert lrs[2] == pytest.approx(0.08 + (2 - 0.08) * 2 / 3.4)
    assert moms[2] == pytest.approx(0.95 - 0.1 * 2 / 3.4)
    assert lrs[10] == pytest.approx(8e-6) and moms[10] == pytest.approx(0.95)
    assert max(lrs) <= 2.0 and opt.param_groups[0]["initial_lr"] == pytest.approx(0.08)
    sched.step()  # step 11 == total_steps is allowed, as in PyTorch
    with pytest.raises(ValueError, match="Tried to step 12 times"):
        sched.step()


def test_onecycle_cycles_adam_beta1_only():
    opt = make_opt("adam", [0.1])
    sched = L.OneCycleLR(opt, max_lr=1.0, total_steps=10)
    assert opt.param_groups[0]["betas"] == (0.95, 0.99)
    for _ in range(3):
        sched.step()
    b1, b2 = opt.param_groups[0]["betas"]
    assert b2 == 0.99 and 0.85 <= b1 < 0.95
    assert isinstance(opt.param_groups[0]["betas"], tuple)


def test_cyclic_triangular_values():
    opt = make_opt("sgd", [0.5])
    sched = L.CyclicLR(opt, base_lr=0.1, max_lr=1.0, step_size_up=2)
    lrs, moms = [], []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        moms.append(opt.param_groups[0]["momentum"])
        sched.step()
    np.testing.assert_allclose(lrs, [0.1, 0.55, 1.0, 0.55, 0.1, 0.55], rtol=1e-14)
    np.testing.assert_allclose(moms, [0.9, 0.85, 0.8, 0.85, 0.9, 0.85], rtol=1e-14)
    # triangular2 halves the amplitude every cycle
    two = lrs_over(lambda o: L.CyclicLR(o, 0.0, 1.0, step_size_up=1, mode="triangular2",
                                        cycle_momentum=False), 5)
    np.testing.assert_allclose(two, [0, 1, 0, 0.5, 0, 0.25], atol=1e-15)


def test_sequential_and_chained_values():
    opt = make_opt("sgd", [1.0])
    sched = L.SequentialLR(opt, [L.ConstantLR(opt, 0.5, 10), L.ExponentialLR(opt, 0.5)], [2])
    seen = [opt.param_groups[0]["lr"]]
    for _ in range(4):
        sched.step()
        seen.append(opt.param_groups[0]["lr"])
    assert seen == [0.5, 0.5, 1.0, 0.5, 0.25]
    assert sched.get_last_lr() == [0.25]
    opt = make_opt("sgd", [1.0])
    sched = L.ChainedScheduler([L.ConstantLR(opt, 0.5, 2), L.ExponentialLR(opt, 0.5)])
    seen = [opt.param_groups[0]["lr"]]
    for _ in range(3):
        sched.step()
        seen.append(opt.param_groups[0]["lr"])
    assert seen == [0.5, 0.25, 0.25, 0.125]


def test_reduce_on_plateau_values():
    opt = make_opt("sgd", [1.0, 0.1])
    sched = L.ReduceLROnPlateau(opt, factor=0.5, patience=1, cooldown=1, min_lr=[0.0, 0.08])
    seen = []
    for m in [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5]:
        sched.step(m)
        seen.append(sched.get_last_lr())
    # bad epochs: 1 (ok), 2 -> reduce, cooldown eats the next, then 2 more -> reduce again
    assert seen == [[1.0, 0.1], [1.0, 0.1], [0.5, 0.08], [0.5, 0.08], [0.5, 0.08],
                    [0.25, 0.08], [0.25, 0.08]]
    assert sched.best == 0.5 and sched.num_bad_epochs == 0


def test_base_class_writes_initial_lr_and_base_lrs():
    opt = make_opt("sgd", [0.2, 0.4])
    sched = L.ExponentialLR(opt, 0.5)
    assert [g["initial_lr"] for g in opt.param_groups] == [0.2, 0.4]
    assert sched.base_lrs == [0.2, 0.4] and sched.last_epoch == 0 and sched._step_count == 1
    sched.step()
    # a second scheduler keeps the existing initial_lr (setdefault), as in PyTorch
    other = L.StepLR(opt, 2)
    assert other.base_lrs == [0.2, 0.4] and opt.param_groups[0]["lr"] == 0.1
    # resuming: last_epoch >= 0 keeps the current lr
    resumed = L.ExponentialLR(opt, 0.5, last_epoch=3)
    assert resumed.last_epoch == 4 and opt.param_groups[0]["lr"] == 0.1
    lst = sched.get_last_lr()
    lst[0] = 123.0
    assert sched.get_last_lr()[0] == 0.1


# ---- state_dict ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(CASES))
def test_state_dict_json_round_trip_continues_identically(case):
    factory, steps, kind, is_plateau = CASES[case]
    half = steps // 2
    opt = make_opt(kind)
    sched = factory(L, opt)
    for t in range(half):
        advance(sched, is_plateau, t)
    sd = sched.state_dict()
    assert "optimizer" not in sd
    assert plain_types_only(json.loads(json.dumps(sd)))
    frozen = json.dumps(sd)
    opt2 = make_opt(kind)
    sched2 = factory(L, opt2)
    groups = json.loads(json.dumps([{k: v for k, v in g.items() if k != "params"}
                                    for g in opt.param_groups]))
    for g in groups:  # JSON turns the betas tuple into a list
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    copy_hyperparameters(groups, opt2.param_groups)
    sched2.load_state_dict(json.loads(frozen))
    for t in range(half, steps):
        advance(sched, is_plateau, t)
        advance(sched2, is_plateau, t)
        assert snapshot(opt2) == snapshot(opt), f"step {t + 1}"
        assert sched2.get_last_lr() == sched.get_last_lr()
    assert json.dumps(sd) == frozen, "a saved state dict must not change as training continues"


def test_lambda_state_saves_callable_objects_not_functions():
    class Warmup:
        def __init__(self, n):
            self.n = n

        def __call__(self, e):
            return min(1.0, (e + 1) / self.n)

    opt = make_opt("sgd", [1.0, 1.0, 1.0])
    sched = L.LambdaLR(opt, [Warmup(4), lambda e: 1.0, Warmup(2)])
    sd = sched.state_dict()
    assert sd["lr_lambdas"] == [{"n": 4}, None, {"n": 2}]
    opt2 = make_opt("sgd", [1.0, 1.0, 1.0])
    w = Warmup(100)
    sched2 = L.LambdaLR(opt2, [w, lambda e: 1.0, Warmup(2)])
    sched2.load_state_dict(sd)
    assert w.n == 4


def test_load_state_dict_rejects_bad_dicts_and_changes_nothing():
    opt = make_opt()
    sched = L.StepLR(opt, 3)
    sched.step()
    before = sched.state_dict()
    bad = dict(before, base_lrs=[0.1], last_epoch=99)
    with pytest.raises(ValueError, match="'base_lrs'.*3 param groups"):
        sched.load_state_dict(bad)
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        sched.load_state_dict([1, 2])
    assert sched.state_dict() == before
    seq = L.SequentialLR(opt, [L.StepLR(opt, 2), L.ExponentialLR(opt, 0.5)], [3])
    sd = seq.state_dict()
    before = copy.deepcopy(sd)
    with pytest.raises(ValueError, match="1 scheduler states.*2 schedulers"):
        seq.load_state_dict(dict(sd, _schedulers=sd["_schedulers"][:1], last_epoch=50))
    broken = copy.deepcopy(sd)
    broken["_schedulers"][1]["base_lrs"] = [1.0]
    broken["last_epoch"] = 77
    with pytest.raises(ValueError, match="base_lrs"):
        seq.load_state_dict(broken)
    assert seq.state_dict() == before
    plateau = L.ReduceLROnPlateau(opt)
    with pytest.raises(ValueError, match="mode foo is unknown"):
        plateau.load_state_dict(dict(plateau.state_dict(), mode="foo", patience=0))
    assert plateau.patience == 10


def test_multistep_milestones_survive_json():
    opt = make_opt()
    sched = L.MultiStepLR(opt, [2, 4, 4])
    sd = json.loads(json.dumps(sched.state_dict()))
    assert sd["milestones"] == {"2": 1, "4": 2}
    sched2 = L.MultiStepLR(make_opt(), [])
    sched2.load_state_dict(sd)
    assert sched2.milestones == {2: 1, 4: 2}


# ---- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith(("sequential", "chained"))])
def test_non_optimizer_is_a_type_error(case):
    factory = CASES[case][0]
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        factory(L, [{"lr": 0.1, "momentum": 0.9, "params": []}])


def test_composite_schedulers_validate_members():
    opt, other = make_opt(), make_opt()
    a = L.StepLR(opt, 2)
    with pytest.raises(ValueError, match="expects at least one scheduler"):
        L.SequentialLR(opt, [], [])
    with pytest.raises(ValueError, match="expects at least one scheduler to be chained"):
        L.ChainedScheduler([])
    with pytest.raises(ValueError, match="number of milestones to be equal to 1"):
        L.SequentialLR(opt, [a], [3])
    with pytest.raises(ValueError, match="same optimizer"):
        L.SequentialLR(other, [a], [])
    with pytest.raises(ValueError, match="same optimizer"):
        L.ChainedScheduler([a, L.StepLR(other, 2)])
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
        L.ChainedScheduler([a, L.ReduceLROnPlateau(opt)])
    with pytest.raises(TypeError, match="index 1 should have `optimizer`"):
        L.SequentialLR(opt, [a, object()], [2])


@pytest.mark.parametrize("build,error,match", [
    (lambda o: L.ConstantLR(o, factor=1.5), ValueError, "between 0 and 1"),
    (lambda o: L.LinearLR(o, start_factor=0), ValueError, "Starting multiplicative factor"),
    (lambda o: L.LinearLR(o, end_factor=1.5), ValueError, "Ending multiplicative factor"),
    (lambda o: L.StepLR(o, 0), ValueError, "positive step_size"),
    (lambda o: L.CosineAnnealingLR(o, 0), ValueError, "positive T_max"),
    (lambda o: L.CosineAnnealingWarmRestarts(o, 0), ValueError, "positive integer T_0"),
    (lambda o: L.CosineAnnealingWarmRestarts(o, 2.5), ValueError, "positive integer T_0"),
    (lambda o: L.CosineAnnealingWarmRestarts(o, 2, T_mult=0), ValueError, "T_mult >= 1"),
    (lambda o: L.CosineAnnealingWarmRestarts(o, 2, eta_min="0"), ValueError,
     "float or int eta_min"),
    (lambda o: L.LambdaLR(o, [lambda e: 1.0]), ValueError, "Expected 3 lr_lambdas, but got 1"),
    (lambda o: L.MultiplicativeLR(o, 0.5), TypeError, "lr_lambda should be a function"),
    (lambda o: L.OneCycleLR(o, 1.0), ValueError, "total_steps OR"),
    (lambda o: L.OneCycleLR(o, 1.0, total_steps=0), ValueError, "positive integer total_steps"),
    (lambda o: L.OneCycleLR(o, 1.0, epochs=0, steps_per_epoch=3), ValueError, "integer epochs"),
    (lambda o: L.OneCycleLR(o, 1.0, epochs=2, steps_per_epoch=0), ValueError, "steps_per_epoch"),
    (lambda o: L.OneCycleLR(o, 1.0, total_steps=5, pct_start=1), ValueError, "pct_start"),
    (lambda o: L.OneCycleLR(o, 1.0, total_steps=10, pct_start=0.1), ValueError,
     "warm-up phase would last zero steps"),
    (lambda o: L.OneCycleLR(o, 1.0, total_steps=5, anneal_strategy="cosine"), ValueError,
     "anneal_strategy"),
    (lambda o: L.OneCycleLR(o, [1.0, 2.0], total_steps=5), ValueError,
     "max_lr must have the same length as optimizer.param_groups"),
    (lambda o: L.CyclicLR(o, 0.1, 1.0, mode="sine"), ValueError, "mode is invalid"),
    (lambda o: L.CyclicLR(o, 0.1, 1.0, step_size_up=0), ValueError, "positive step_size_up"),
    (lambda o: L.CyclicLR(o, [0.1], 1.0), ValueError, "base_lr must have the same length"),
    (lambda o: L.ReduceLROnPlateau(o, factor=1.0), ValueError, "Factor should be < 1.0"),
    (lambda o: L.ReduceLROnPlateau(o, mode="low"), ValueError, "mode low is unknown"),
    (lambda o: L.ReduceLROnPlateau(o, threshold_mode="x"), ValueError, "threshold mode x"),
    (lambda o: L.ReduceLROnPlateau(o, min_lr=[0, 0]), ValueError, "expected 3 min_lrs, got 2"),
    (lambda o: L.StepLR(o, 2, last_epoch=4), KeyError, "initial_lr"),
])
def test_bad_arguments_raise_before_anything_changes(build, error, match):
    opt = make_opt()
    before = [dict(g) for g in opt.param_groups]
    with pytest.raises(error, match=match):
        build(opt)
    assert opt.param_groups == before


def test_cycle_momentum_needs_momentum_or_betas():
    opt = PlainOpt([Parameter(np.zeros(2))])
    before = dict(opt.param_groups[0])
    for build in (lambda: L.OneCycleLR(opt, 1.0, total_steps=5),
                  lambda: L.CyclicLR(opt, 0.1, 1.0)):
        with pytest.raises(ValueError, match="must support momentum or beta1"):
            build()
        assert opt.param_groups[0] == before
    L.OneCycleLR(opt, 1.0, total_steps=5, cycle_momentum=False)  # fine without cycling
    with pytest.raises(ValueError, match="non-negative epoch"):
        L.CosineAnnealingWarmRestarts(make_opt(), 3).step(-1)


# ---- warnings ----------------------------------------------------------------------------------
@pytest.mark.filterwarnings("default")
def test_warnings_like_pytorch():
    opt = make_opt()
    sched = L.StepLR(opt, 2)
    with pytest.warns(UserWarning, match="use `get_last_lr\\(\\)`"):
        sched.get_lr()
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()
    opt = make_opt()
    sched = L.StepLR(opt, 2)
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()
        sched.step()
    opt = make_opt()
    sched = L.StepLR(opt, 2)
    opt.step = lambda closure=None: None  # replaced on the instance, after the scheduler
    with pytest.warns(UserWarning, match="has been overridden after learning rate scheduler"):
        sched.step()


def test_no_cyclic_references():
    """PyTorch's test_no_cyclic_references: a scheduler does not wrap its optimizer's step on the
    instance (the wrapper made optimizer -> wrapper -> bound method -> optimizer)."""
    import gc

    opt = SGD([Parameter(np.zeros(10))], lr=0.5)
    sched = L.LambdaLR(opt, lambda epoch: 1.0)
    del sched
    assert len(gc.get_referrers(opt)) == 0, "Optimizer should contain no cyclic references"
    gc.collect()
    del opt
    assert gc.collect() == 0, "Optimizer should be garbage-collected on __del__"


# ---- with the real optimizers -------------------------------------------------------------------
def test_optimizer_uses_the_scheduled_lr():
    p = Parameter(np.zeros(3))
    opt = SGD([p], lr=1.0)
    sched = L.StepLR(opt, 2, gamma=0.5)
    used = []
    for _ in range(5):
        p.grad = np.ones(3)
        used.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert used == [1.0, 1.0, 0.5, 0.5, 0.25]
    np.testing.assert_allclose(p.data, -sum(used))


@pytest.mark.parametrize("case", ["onecycle_linear_3phase_adam", "cyclic_exp_range", "sequential"])
def test_resume_through_optimizer_and_scheduler_state_dicts(case):
    """The PyTorch resume recipe: build both, load the optimizer, then the scheduler."""
    factory, steps, kind, is_plateau = CASES[case]
    half = steps // 2
    opt = make_opt(kind)
    sched = factory(L, opt)
    for t in range(half):
        advance(sched, is_plateau, t)
    opt_sd, sched_sd = opt.state_dict(), json.loads(json.dumps(sched.state_dict()))
    opt2 = make_opt(kind)
    sched2 = factory(L, opt2)
    opt2.load_state_dict(opt_sd)
    sched2.load_state_dict(sched_sd)
    for t in range(half, steps):
        advance(sched, is_plateau, t)
        advance(sched2, is_plateau, t)
        assert snapshot(opt2) == snapshot(opt), f"step {t + 1}"


# ---- properties -----------------------------------------------------------------------------------
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CLOSED_FORMS = {
    "step": lambda o, k, x: L.StepLR(o, k, gamma=x),
    "exponential": lambda o, k, x: L.ExponentialLR(o, x),
    "linear": lambda o, k, x: L.LinearLR(o, start_factor=x, end_factor=1.0, total_iters=k),
    "poly": lambda o, k, x: L.PolynomialLR(o, total_iters=k, power=1 + x),
    "cosine": lambda o, k, x: L.CosineAnnealingLR(o, T_max=k, eta_min=0.01 * x),
    "constant": lambda o, k, x: L.ConstantLR(o, factor=x, total_iters=k),
}


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(sorted(CLOSED_FORMS)), k=st.integers(1, 12),
       x=st.floats(0.05, 1.0), steps=st.integers(1, 40))
def test_chainable_form_follows_closed_form(name, k, x, steps):
    """The recursive updates stay on the paper's closed-form schedule (no torch needed)."""
    opt = make_opt("sgd", [0.5, 2.0])
    sched = CLOSED_FORMS[name](opt, k, x)
    for _ in range(steps):
        sched.step()
        expected = sched._get_closed_form_lr()
        np.testing.assert_allclose(sched.get_last_lr(), expected, rtol=1e-9, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(total=st.integers(2, 40), pct=st.floats(0.05, 0.95), three=st.booleans(),
       linear=st.booleans(), up=st.integers(1, 6), down=st.integers(0, 6),
       mode=st.sampled_from(["triangular", "triangular2", "exp_range"]))
def test_cyclical_schedules_match_pytorch_for_random_settings(total, pct, three, linear, up,
                                                             down, mode):
    torch = pytest.importorskip("torch")
    TL = torch.optim.lr_scheduler
    # PyTorch divides by zero when a phase lasts zero steps
    assume(total * pct != 1.0 and (not three or 2 * total * pct != total + 1))
    for kind in ("sgd", "adam"):
        opt, topt = make_opt(kind), make_torch_opt(torch, kind)
        kw = dict(total_steps=total, pct_start=pct, three_phase=three,
                  anneal_strategy="linear" if linear else "cos")
        pairs = [(L.OneCycleLR(opt, [1.0, 0.5, 2.0], **kw),
                  TL.OneCycleLR(topt, [1.0, 0.5, 2.0], **kw))]
        for t in range(total):
            for s, ts in pairs:
                s.step()
                ts.step()
            assert_same(snapshot(opt), snapshot(topt), f"OneCycleLR step {t + 1}")
        opt, topt = make_opt(kind), make_torch_opt(torch, kind)
        kw = dict(step_size_up=up, step_size_down=down, mode=mode, gamma=0.9)
        s, ts = L.CyclicLR(opt, 0.01, 0.1, **kw), TL.CyclicLR(topt, 0.01, 0.1, **kw)
        for t in range(3 * (up + down) + 2):
            s.step()
            ts.step()
            assert_same(snapshot(opt), snapshot(topt), f"CyclicLR step {t + 1}")


# ---- hostile but well-formed states (issue 9.8, 9.5) ----------------------------------------------
def _sequential(o):
    return L.SequentialLR(o, [L.StepLR(o, 2), L.ExponentialLR(o, 0.5)], [3])


@pytest.mark.parametrize("build,edit,match", [
    (lambda o: L.StepLR(o, 3), lambda sd: sd.update(step=5), "key 'step', which is not part"),
    (lambda o: L.StepLR(o, 3), lambda sd: sd.update(get_lr=None), "key 'get_lr'"),
    (lambda o: L.StepLR(o, 3), lambda sd: sd.update(last_epoch="x"), "'last_epoch' = 'x'"),
    (lambda o: L.StepLR(o, 3), lambda sd: sd.update(last_epoch=2.5), "expected an integer"),
    (lambda o: L.StepLR(o, 3), lambda sd: sd.update(step_size=0), "positive step_size"),
    (lambda o: L.StepLR(o, 3), lambda sd: sd.update(_step_count=-3), "negative step counts"),
    (lambda o: L.StepLR(o, 3), lambda sd: sd.update(base_lrs=[0.1, -1.0, 0.2]),
     "expected finite learning rates"),
    (lambda o: L.StepLR(o, 3), lambda sd: sd.update(base_lrs=[0.1, "a", 0.2]), "does not fit"),
    (lambda o: L.StepLR(o, 3), lambda sd: sd.update(gamma=None, _is_initial="yes"), "does not fit"),
    (lambda o: L.MultiStepLR(o, [2]), lambda sd: sd.update(milestones={"x": 1}),
     "milestones must map epochs"),
    (lambda o: L.CosineAnnealingLR(o, 5), lambda sd: sd.update(T_max=0), "positive T_max"),
    (lambda o: L.CosineAnnealingWarmRestarts(o, 3), lambda sd: sd.update(T_mult=0), "T_mult >= 1"),
    (lambda o: L.ConstantLR(o), lambda sd: sd.update(factor=3.0), "between 0 and 1"),
    (lambda o: L.CyclicLR(o, 0.01, 0.1), lambda sd: sd.update(mode="sine"), "mode is invalid"),
    (lambda o: L.OneCycleLR(o, 1.0, total_steps=10),
     lambda sd: sd["_schedule_phases"][0].update(start_lr="params"), "schedule phase"),
    (lambda o: L.OneCycleLR(o, 1.0, total_steps=10), lambda sd: sd.update(total_steps=0),
     "positive integer total_steps"),
    (lambda o: L.LambdaLR(o, lambda e: 1.0), lambda sd: sd.update(lr_lambdas=[{"n": 1}] * 3),
     "is a function here"),
    (lambda o: L.ReduceLROnPlateau(o), lambda sd: sd.update(patience=-1), "'patience' = -1"),
    (lambda o: L.ReduceLROnPlateau(o), lambda sd: sd.update(factor=2.0), "Factor should be < 1"),
    (_sequential, lambda sd: sd["_schedulers"][1].update(step=1), "key 'step'"),
    (_sequential, lambda sd: sd["_schedulers"][0].update(step_size=0), "positive step_size"),
])
def test_hostile_state_values_are_rejected_and_change_nothing(build, edit, match):
    """Issue 9.8/9.5: a state dict with a key the scheduler does not have (``step`` would shadow
    the method), a value of the wrong kind, or one the constructor rejects raises before anything
    changes; it used to be installed by ``__dict__.update``."""
    opt = make_opt()
    sched = build(opt)
    for t in range(2):
        advance(sched, isinstance(sched, L.ReduceLROnPlateau), t)
    sd = copy.deepcopy(sched.state_dict())
    sd["last_epoch"] = 7  # would be installed first if the load were not atomic
    edit(sd)
    def attrs(s):
        return {k: copy.deepcopy(v) for k, v in vars(s).items()
                if k not in ("optimizer", "_schedulers", "lr_lambdas")}

    before = attrs(sched)
    members = [attrs(s) for s in getattr(sched, "_schedulers", [])]
    with pytest.raises(ValueError, match=match):
        sched.load_state_dict(sd)
    assert attrs(sched) == before
    assert [attrs(s) for s in getattr(sched, "_schedulers", [])] == members
    assert callable(sched.step) and callable(sched.get_lr)


def test_load_into_rollback_leaves_no_scheduler_keys_behind(tmp_path):
    """Issue 9.5: a checkpoint whose scheduler entry holds keys the scheduler does not have (here
    ``step`` and another scheduler's ``T_max``), followed by an entry that is rejected: the
    scheduler is left exactly as it was (it used to keep the keys, ``step`` shadowing the method)."""
    from tinyopt import nn
    from tinyopt.checkpoint import load_into, save

    class Crafted:
        def state_dict(self):
            return dict(L.StepLR(make_opt(), 3).state_dict(), step=3, T_max=9)

    save(tmp_path / "ckpt", scheduler=Crafted(), model=nn.Linear(2, 3))
    sched = L.StepLR(make_opt(), 5, gamma=0.3)
    sched.step()
    before = {k: copy.deepcopy(v) for k, v in vars(sched).items() if k != "optimizer"}
    with pytest.raises(Exception):  # noqa: B017 - the scheduler entry (or the model) is rejected
        load_into(tmp_path / "ckpt", scheduler=sched, model=nn.Linear(4, 4))
    assert {k: v for k, v in vars(sched).items() if k != "optimizer"} == before
    assert callable(sched.step)
    sched.step()


def test_multistep_milestones_load_in_pytorch_and_step_with_epoch():
    """The state dict keeps milestones a Counter, as PyTorch's closed form (step(epoch)) needs
    ``milestones.elements()``; a plain dict (what JSON gives back) loads into tinyopt."""
    torch = pytest.importorskip("torch")
    opt, topt = make_opt(), make_torch_opt(torch)
    sched = L.MultiStepLR(opt, [2, 4, 4], gamma=0.5)
    for _ in range(3):
        sched.step()
    sd = sched.state_dict()
    tsched = torch.optim.lr_scheduler.MultiStepLR(topt, [9])
    copy_hyperparameters(opt.param_groups, topt.param_groups)
    tsched.load_state_dict(copy.deepcopy(sd))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tsched.step(5)
        sched.step(5)
    assert_same(snapshot(opt), snapshot(topt), "step(5)")
