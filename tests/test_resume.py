"""Exact resume with the real engine: a model with Dropout (and BatchNorm1d) trained by the explicit
loop over a shuffled DataLoader with a scheduler, stopped mid-epoch, saved, restored into fresh
objects (some in a fresh process) and trained on gives parameters bit-for-bit equal to the
uninterrupted run, for every optimizer; the same for ``fit(checkpoint=..., resume=...)`` and for
the examples' ``--resume``.

Run as a script (``python tests/test_resume.py child NAME CKPT OUT STEPS``) this file is the fresh
process: it builds the objects with another seed, restores CKPT, trains STEPS steps, saves OUT.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.data import DataLoader, TensorDataset
from tinyopt.optim import lr_scheduler as lrs
from tinyopt.train import Callback, History, fit

HERE = Path(__file__).resolve()
EXAMPLES = HERE.parent.parent / "examples"

# optimizer, scheduler, whether the model has a BatchNorm1d
CASES = {
    "SGD": (lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
            lambda o: lrs.OneCycleLR(o, max_lr=0.1, total_steps=40), True),
    "Adam": (lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True),
             lambda o: lrs.CosineAnnealingLR(o, T_max=9), True),
    "AdamW": (lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1),
              lambda o: lrs.SequentialLR(o, [lrs.LinearLR(o, start_factor=0.2, total_iters=4),
                                             lrs.ExponentialLR(o, gamma=0.9)], milestones=[4]),
              True),
    "Adagrad": (lambda ps: optim.Adagrad(ps, lr=0.05, lr_decay=0.01),
                lambda o: lrs.StepLR(o, step_size=4, gamma=0.7), False),
    "RMSprop": (lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
                lambda o: lrs.ExponentialLR(o, gamma=0.95), True),
}
N, M = 8, 9  # 45 samples in batches of 8: 6 batches per epoch, so N stops mid-epoch 2


def build(name: str, seed: int = 0) -> dict:
    """Model, optimizer, scheduler and loader of a run; ``seed`` seeds their initial state."""
    make_opt, make_sched, batchnorm = CASES[name]
    g = np.random.default_rng(0)
    x = g.normal(size=(45, 6)).astype(np.float32)
    y = g.integers(0, 3, size=45).astype(np.int64)
    to.manual_seed(seed)
    layers = [nn.Linear(6, 16)] + ([nn.BatchNorm1d(16)] if batchnorm else []) \
        + [nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 3)]
    model = nn.Sequential(*layers)
    opt = make_opt(model.parameters())
    return {"model": model, "optimizer": opt, "scheduler": make_sched(opt),
            "loader": DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)}


def train(objs: dict, steps: int, it=None):
    """``steps`` steps of the PyTorch loop; returns the epoch's iterator to continue with."""
    model, opt, sched = objs["model"], objs["optimizer"], objs["scheduler"]
    done = 0
    while done < steps:
        if it is None:
            it = iter(objs["loader"])
        try:
            xb, yb = next(it)
        except StopIteration:
            it = None
            continue
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
        sched.step()
        done += 1
    return it


def assert_same(a, b, where="state"):
    """Nested state dicts equal, arrays bit for bit."""
    a, b = (np.asarray(v) if isinstance(v, to.Tensor) else v for v in (a, b))
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b)):
            assert_same(u, v, f"{where}[{i}]")
    elif isinstance(a, (np.ndarray, np.generic)):
        b = np.asarray(b)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), where
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"


def uninterrupted(name: str) -> dict:
    ref = build(name)
    train(ref, N + M)
    return ref


def assert_runs_equal(ref: dict, got: dict) -> None:
    for (k, a), b in zip(ref["model"].state_dict().items(), got["model"].state_dict().values()):
        assert np.array_equal(a, b), k  # parameters and BatchNorm running statistics
    assert_same(ref["optimizer"].state_dict(), got["optimizer"].state_dict(), "optimizer")
    assert_same(ref["scheduler"].state_dict(), got["scheduler"].state_dict(), "scheduler")


@pytest.mark.parametrize("name", ["Adam", "Adagrad", "RMSprop"])
def test_loop_resumes_exactly_in_fresh_objects(tmp_path, name):
    ref = uninterrupted(name)
    run = build(name)
    train(run, N)
    to.save(tmp_path / "ckpt", **run, step=N)
    train(run, 3)  # the saved run goes on: the checkpoint is a snapshot

    fresh = build(name, seed=1234)  # other initial weights, other global generator state
    assert to.load_into(tmp_path / "ckpt", **fresh) == {"step": N}
    train(fresh, M)
    assert_runs_equal(ref, fresh)


@pytest.mark.parametrize("name", ["SGD", "AdamW"])
def test_loop_resumes_exactly_in_a_fresh_process(tmp_path, name):
    ref = uninterrupted(name)
    run = build(name)
    train(run, N)
    to.save(tmp_path / "ckpt", **run)
    subprocess.run([sys.executable, str(HERE), "child", name, str(tmp_path / "ckpt"),
                    str(tmp_path / "out"), str(M)], check=True, timeout=600)
    out = to.load(tmp_path / "out")
    assert_same(dict(ref["model"].state_dict()), out["model"], "model")
    assert_same(ref["optimizer"].state_dict(), out["optimizer"], "optimizer")
    assert_same(ref["scheduler"].state_dict(), out["scheduler"], "scheduler")
    assert_same(ref["loader"].state_dict(), out["loader"], "loader")


def _child(name: str, ckpt: str, out: str, steps: str) -> None:
    objs = build(name, seed=4321)
    to.load_into(ckpt, **objs)
    train(objs, int(steps))
    to.save(out, **objs)


# ---- fit(checkpoint=..., resume=...) ------------------------------------------------------------

def blobs(n=100, d=6, classes=3):
    g = np.random.default_rng(1)
    y = g.integers(0, classes, size=n).astype(np.int64)
    x = g.normal(scale=0.8, size=(n, d)).astype(np.float32)
    x[np.arange(n), y] += 1.5
    return x, y


class Best(Callback):
    """A stateful callback: remembers the best validation loss (saved in fit's checkpoints)."""

    def __init__(self):
        self.best = float("inf")
        self.seen = 0

    def on_epoch_end(self, epoch, record):
        self.best = min(self.best, record.val.loss)
        self.seen += 1

    def state_dict(self):
        return {"best": self.best, "seen": self.seen}

    def load_state_dict(self, state):
        self.best, self.seen = state["best"], state["seen"]


FIT_CASES = {
    # seed=None: the shuffling generator is drawn from the global one; per-step cosine schedule
    "global-seed": dict(kw=dict(batch_size=16, val_split=0.2),
                        sched=lambda o: lrs.CosineAnnealingLR(o, T_max=15)),
    # a seeded order, gradient accumulation with a short last batch, plateau scheduler
    "seeded-accumulation": dict(kw=dict(batch_size=8, logical_batch_size=24, val_split=0.25,
                                        seed=7),
                                sched=lambda o: lrs.ReduceLROnPlateau(o, patience=0,
                                                                      factor=0.5)),
}


def fit_setup(case: str, seed: int = 0):
    to.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3),
                          nn.Linear(16, 3))
    opt = optim.Adam(model.parameters(), lr=0.02)
    return model, opt, FIT_CASES[case]["sched"](opt), Best()


def run_fit(case, model, opt, sched, cb, epochs, **extra):
    x, y = blobs()
    return fit(model, (x, y), nn.CrossEntropyLoss(), opt, epochs=epochs, scheduler=sched,
               callbacks=[cb], progress=False, **FIT_CASES[case]["kw"], **extra)


def numbers(history: History) -> list:
    return [{k: v for k, v in r.as_dict().items() if k != "seconds"} | {
        "train": {k: v for k, v in r.train.as_dict().items() if k != "seconds"},
        "val": {k: v for k, v in r.val.as_dict().items() if k != "seconds"}} for r in history]


@pytest.mark.parametrize("case", sorted(FIT_CASES))
def test_fit_resumes_exactly(tmp_path, case):
    model, opt, sched, cb = fit_setup(case)
    ref = run_fit(case, model, opt, sched, cb, 4)

    path = tmp_path / "fit.tinyopt"
    m1, o1, s1, c1 = fit_setup(case)
    first = run_fit(case, m1, o1, s1, c1, 2, checkpoint=path)
    assert to.load(path)["fit"]["epoch"] == 2
    assert numbers(History.from_dict(to.load(path)["fit"]["history"])) == numbers(first)

    m2, o2, s2, c2 = fit_setup(case, seed=99)  # fresh objects, other global generator state
    starts = []
    c2.on_epoch_begin = starts.append
    resumed = run_fit(case, m2, o2, s2, c2, 4, checkpoint=path, resume=path)
    assert starts == [2, 3]  # only the epochs left ran
    assert len(resumed) == 4 and numbers(resumed) == numbers(ref)
    for (k, a), b in zip(model.state_dict().items(), m2.state_dict().values()):
        assert np.array_equal(a, b), k
    assert_same(opt.state_dict(), o2.state_dict(), "optimizer")
    assert_same(sched.state_dict(), s2.state_dict(), "scheduler")
    assert (c2.best, c2.seen) == (cb.best, cb.seen) == (min(r.val.loss for r in ref), 4)
    assert to.load(path)["fit"]["epoch"] == 4 and to.load(path)["fit"]["step"] == \
        to.load(path)["optimizer"]["state"][0]["step"]


# ---- the examples' --resume ---------------------------------------------------------------------

def _example(capsys, argv: list[str]) -> list[str]:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import mnist_fc
    finally:
        sys.path.remove(str(EXAMPLES))
    mnist_fc.main(argv)
    out = capsys.readouterr().out
    # the numbers of each epoch line, without its wall time
    return [line.rsplit("(", 1)[0].strip() for line in out.splitlines()
            if line.startswith("epoch")]


@pytest.mark.parametrize("mode", [[], ["--loop"]], ids=["fit", "loop"])
def test_example_resume_gives_the_straight_run(tmp_path, capsys, mode):
    common = ["--limit", "500", "--batch-size", "100", "--seed", "5"] + mode
    straight = _example(capsys, common + ["--epochs", "2", "--checkpoint",
                                          str(tmp_path / "a.tinyopt")])
    ckpt = str(tmp_path / "b.tinyopt")
    first = _example(capsys, common + ["--epochs", "1", "--checkpoint", ckpt])
    second = _example(capsys, common + ["--epochs", "2", "--checkpoint", ckpt, "--resume", ckpt])
    assert len(straight) == 2 and first == straight[:1], (straight, first)
    assert second == straight[1:], (straight, second)
    assert os.path.exists(ckpt)


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "child":
    _child(*sys.argv[2:])
