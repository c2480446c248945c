"""tinyopt's optimizers in a project that computes its own gradients (no tinyopt graph at all).

A two-layer network fits y = sin(3x) on synthetic data.  Its weights are the project's own numpy
arrays: the optimizer gets them as Parameters sharing that memory (``to.from_numpy``) and steps
them in place, so the forward pass below keeps reading the plain arrays.  The gradients are
written by hand in numpy and handed over with ``p.grad = ...``.  It shows ``step(closure)``, two
param groups (no weight decay on biases), an lr scheduler, and a state_dict saved mid-run and
restored into fresh objects, which then continue exactly like the uninterrupted run.

Run: ``python examples/optim_standalone.py``
"""

from __future__ import annotations

import copy

import numpy as np

import tinyopt as to
from tinyopt import Parameter
from tinyopt.optim import AdamW
from tinyopt.optim.lr_scheduler import CosineAnnealingLR

STEPS, HIDDEN = 300, 32


def make_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (256, 1)).astype(np.float32)
    return x, np.sin(3 * x).astype(np.float32)


def make_weights(seed: int = 1) -> dict[str, np.ndarray]:
    """The project's own arrays."""
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((1, HIDDEN)).astype(np.float32),
            "b1": np.zeros(HIDDEN, np.float32),
            "w2": (rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN)).astype(np.float32),
            "b2": np.zeros(1, np.float32)}


def make_optimizer(w: dict[str, np.ndarray], steps: int):
    """An AdamW over the arrays ``w`` (Parameters sharing their memory) and its scheduler."""
    p = {k: Parameter(to.from_numpy(a)) for k, a in w.items()}
    opt = AdamW([{"params": [p["w1"], p["w2"]], "weight_decay": 1e-2},
                 {"params": [p["b1"], p["b2"]], "weight_decay": 0.0}], lr=3e-2)
    return p, opt, CosineAnnealingLR(opt, T_max=steps, eta_min=1e-3)


def closure_for(w: dict[str, np.ndarray], p: dict[str, Parameter], x: np.ndarray, y: np.ndarray):
    """Forward and hand-written backward of a tanh MLP with mean squared error, in plain numpy
    over the arrays ``w``; the gradients go to the Parameters ``p``; returns the loss."""
    def closure() -> float:
        h = np.tanh(x @ w["w1"] + w["b1"])
        err = h @ w["w2"] + w["b2"] - y
        d_out = 2 * err / len(x)
        d_h = (d_out @ w["w2"].T) * (1 - h * h)
        p["w2"].grad, p["b2"].grad = h.T @ d_out, d_out.sum(0)
        p["w1"].grad, p["b1"].grad = x.T @ d_h, d_h.sum(0)
        return float(np.mean(err * err))
    return closure


def train(w, p, opt, sched, x, y, steps: range) -> float:
    closure = closure_for(w, p, x, y)
    loss = float("nan")
    for t in steps:
        loss = opt.step(closure)
        sched.step()
        if t % 50 == 0:
            print(f"step {t:3d}  loss {loss:.5f}  lr {sched.get_last_lr()[0]:.5f}")
    return loss


def run(steps: int = STEPS) -> tuple[float, float, bool]:
    """Train ``steps`` steps, checkpointing halfway; resume the checkpoint into fresh arrays and
    objects.  Returns both final losses and whether the weights came out identical."""
    half = steps // 2
    x, y = make_data()
    w = make_weights()
    p, opt, sched = make_optimizer(w, steps)
    train(w, p, opt, sched, x, y, range(half))

    # checkpoint halfway: copies of the weights, the optimizer and the scheduler state
    saved = {"weights": {k: a.copy() for k, a in w.items()},
             "optim": opt.state_dict(), "sched": copy.deepcopy(sched.state_dict())}
    final = train(w, p, opt, sched, x, y, range(half, steps))

    print("-- restoring the halfway checkpoint into fresh objects")
    w2 = make_weights(seed=123)
    for k, a in w2.items():
        a[...] = saved["weights"][k]
    p2, opt2, sched2 = make_optimizer(w2, steps)
    opt2.load_state_dict(saved["optim"])
    sched2.load_state_dict(saved["sched"])
    final2 = train(w2, p2, opt2, sched2, x, y, range(half, steps))
    same = all(np.array_equal(w[k], w2[k]) for k in w)
    return final, final2, same


def main() -> None:
    final, final2, same = run()
    print(f"final loss {final:.6f} (uninterrupted) vs {final2:.6f} (resumed); "
          f"weights identical: {same}")
    assert same and final < 0.01


if __name__ == "__main__":
    main()
