"""tinyopt's optimizers in a project that computes its own gradients (no tinyopt graph at all).

A two-layer network fits y = sin(3x) on synthetic data; its gradients are written by hand in plain
numpy and handed over with ``p.grad = ...``.  It shows ``step(closure)``, two param groups (no
weight decay on biases), an lr scheduler, and a state_dict saved mid-run and restored into fresh
objects, which then continue exactly like the uninterrupted run.

Run: ``python examples/optim_standalone.py``
"""

from __future__ import annotations

import copy

import numpy as np

from tinyopt import Parameter
from tinyopt.optim import AdamW
from tinyopt.optim.lr_scheduler import CosineAnnealingLR

STEPS, HALF, HIDDEN = 300, 150, 32


def make_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (256, 1)).astype(np.float32)
    return x, np.sin(3 * x).astype(np.float32)


def make_model(seed: int = 1) -> dict[str, Parameter]:
    rng = np.random.default_rng(seed)
    return {"w1": Parameter(rng.standard_normal((1, HIDDEN)).astype(np.float32)),
            "b1": Parameter(np.zeros(HIDDEN, np.float32)),
            "w2": Parameter((rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN)).astype(np.float32)),
            "b2": Parameter(np.zeros(1, np.float32))}


def make_optimizer(m: dict[str, Parameter]):
    opt = AdamW([{"params": [m["w1"], m["w2"]], "weight_decay": 1e-2},
                 {"params": [m["b1"], m["b2"]], "weight_decay": 0.0}], lr=3e-2)
    return opt, CosineAnnealingLR(opt, T_max=STEPS, eta_min=1e-3)


def closure_for(m: dict[str, Parameter], x: np.ndarray, y: np.ndarray):
    """Forward and hand-written backward of tanh MLP with mean squared error; returns the loss."""
    def closure() -> float:
        h = np.tanh(x @ m["w1"].data + m["b1"].data)
        err = h @ m["w2"].data + m["b2"].data - y
        d_out = 2 * err / len(x)
        d_h = (d_out @ m["w2"].data.T) * (1 - h * h)
        m["w2"].grad, m["b2"].grad = h.T @ d_out, d_out.sum(0)
        m["w1"].grad, m["b1"].grad = x.T @ d_h, d_h.sum(0)
        return float(np.mean(err * err))
    return closure


def train(m, opt, sched, x, y, steps: range) -> float:
    closure = closure_for(m, x, y)
    loss = float("nan")
    for t in steps:
        loss = opt.step(closure)
        sched.step()
        if t % 50 == 0:
            print(f"step {t:3d}  loss {loss:.5f}  lr {sched.get_last_lr()[0]:.5f}")
    return loss


def main() -> None:
    x, y = make_data()
    model = make_model()
    opt, sched = make_optimizer(model)
    train(model, opt, sched, x, y, range(HALF))

    # checkpoint halfway: copies of the weights, the optimizer and the scheduler state
    saved = {"model": {k: p.data.copy() for k, p in model.items()},
             "optim": opt.state_dict(), "sched": copy.deepcopy(sched.state_dict())}
    final = train(model, opt, sched, x, y, range(HALF, STEPS))

    print("-- restoring the halfway checkpoint into fresh objects")
    model2 = make_model(seed=123)
    for k, p in model2.items():
        p.data = saved["model"][k]
    opt2, sched2 = make_optimizer(model2)
    opt2.load_state_dict(saved["optim"])
    sched2.load_state_dict(saved["sched"])
    final2 = train(model2, opt2, sched2, x, y, range(HALF, STEPS))

    same = all(np.array_equal(model[k].data, model2[k].data) for k in model)
    print(f"final loss {final:.6f} (uninterrupted) vs {final2:.6f} (resumed); "
          f"weights identical: {same}")
    assert same and final < 0.01


if __name__ == "__main__":
    main()
