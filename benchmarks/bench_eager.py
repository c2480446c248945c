"""Code whose graph changes every step (issue 27): tinyopt against PyTorch eager, per step.

Cases (each library in its own spawned worker, timed interleaved A B A B ..., medians):

- ``chain-same``: a chain of 32 small ops (``h * w``, ``h + b``, ``tanh``, ``sigmoid``, ``h * h``,
  ``relu``) over 5-element tensors, the loss its sum, backward and an SGD step; the same chain
  every step.  Reported in microseconds per forward op (the step time over 32).
- ``chain-change``: the same, but each step draws a new sequence of 24-40 ops (data-dependent
  control flow): every step a graph structure never seen before.
- ``crf``: a BiLSTM-CRF tagger in the style of PyTorch's tutorial, one sentence (5-12 words) a
  step: an embedding, a bidirectional LSTM, the CRF's forward algorithm as a per-word loop of
  ``logsumexp`` over the tag transitions, minus the gold path's score; SGD.
- ``actor-critic``: the actor-critic example's update: per environment step a shared MLP gives
  action log-probabilities and a value (one sample at a time, kept in lists), an episode of
  10-60 steps, then ``stack``, discounted returns, policy and value losses, one backward, Adam.
  Reported per environment step.

Goals: ``chain-change`` <= 1.5x torch per op (stretch 1.0x), ``crf`` and ``actor-critic`` <= 1.5x.
Ratio = tinyopt time / PyTorch time, of wall time and of the workers' CPU time (one thread each:
on a quiet machine the two agree; on a busy one the CPU ratio stays readable).

    python benchmarks/bench_eager.py [--repeats 7] [--only chain-change]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from harness import libraries, pin_threads, start_workers, stop_workers, timed_blocks

CHAIN = 32


def _chain(lib, change: bool):
    """One chain step per call; returns the number of forward ops it ran."""
    ns = lib.nn
    rng = np.random.default_rng(0)
    init = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32) * 0.5
    w = ns.Parameter(lib.tensor(init[0] + 1))
    b = ns.Parameter(lib.tensor(init[1]))
    x = lib.tensor(np.linspace(-1, 1, 5, dtype=np.float32))
    opt = lib.optim.SGD([w, b], lr=1e-4)
    ops = [lambda h: h * w, lambda h: h + b, lib.tanh, lib.sigmoid, lambda h: h * h, lib.relu]
    fixed = rng.integers(0, len(ops), CHAIN)

    def step() -> int:
        seq = rng.integers(0, len(ops), int(rng.integers(24, 41))) if change else fixed
        opt.zero_grad()
        h = x
        for k in seq:
            h = ops[k](h)
        h.sum().backward()
        opt.step()
        return len(seq)
    return step


def _crf(lib):
    """The BiLSTM-CRF tutorial's training step (``neg_log_likelihood``), one sentence."""
    ns = lib.nn
    lib.manual_seed(0)
    vocab, tags, emb, hid = 50, 5, 16, 16
    start, stop = tags - 2, tags - 1

    class BiLSTMCRF(ns.Module):
        def __init__(self):
            super().__init__()
            self.emb = ns.Embedding(vocab, emb)
            self.lstm = ns.LSTM(emb, hid // 2, bidirectional=True)
            self.out = ns.Linear(hid, tags)
            self.trans = ns.Parameter(lib.randn(tags, tags))

        def feats(self, sent):
            h, _ = self.lstm(self.emb(sent).view(len(sent), 1, -1))
            return self.out(h.view(len(sent), hid))

        def forward_alg(self, feats):
            init = np.full((1, tags), -10000.0, np.float32)
            init[0, start] = 0.0
            alpha = lib.tensor(init)
            for feat in feats:
                steps = [lib.logsumexp(alpha + self.trans[t].view(1, -1) + feat[t], 1).view(1)
                         for t in range(tags)]
                alpha = lib.cat(steps).view(1, -1)
            return lib.logsumexp(alpha + self.trans[stop], 1)

        def gold(self, feats, path):
            score = lib.zeros(1)
            path = [start] + path
            for i, feat in enumerate(feats):
                score = score + self.trans[path[i + 1], path[i]] + feat[path[i + 1]]
            return score + self.trans[stop, path[-1]]

        def nll(self, sent, path):
            feats = self.feats(sent)
            return (self.forward_alg(feats) - self.gold(feats, path)).sum()

    model = BiLSTMCRF()
    opt = lib.optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-4)
    rng = np.random.default_rng(0)

    def step() -> int:
        n = int(rng.integers(5, 13))
        sent = lib.tensor(rng.integers(0, vocab, n))
        path = [int(t) for t in rng.integers(0, tags - 2, n)]
        opt.zero_grad()
        model.nll(sent, path).backward()
        opt.step()
        return 1
    return step


def _actor_critic(lib):
    """PyTorch's actor-critic example's update over one episode of random length."""
    ns, F = lib.nn, lib.nn.functional
    lib.manual_seed(0)

    class Policy(ns.Module):
        def __init__(self):
            super().__init__()
            self.affine = ns.Linear(4, 128)
            self.action = ns.Linear(128, 2)
            self.value = ns.Linear(128, 1)

        def forward(self, x):
            x = F.relu(self.affine(x))
            return F.softmax(self.action(x), dim=-1), self.value(x)

    model = Policy()
    opt = lib.optim.Adam(model.parameters(), lr=3e-2)
    rng = np.random.default_rng(0)

    def step() -> int:
        n = int(rng.integers(10, 61))
        states = rng.standard_normal((n, 4)).astype(np.float32)
        rewards = rng.random(n)
        log_probs, values = [], []
        for t in range(n):
            probs, value = model(lib.tensor(states[t]))
            a = int(rng.random() < float(probs[1].item()))
            log_probs.append(lib.log(probs[a]))
            values.append(value)
        returns, r = [], 0.0
        for x in rewards[::-1]:
            r = x + 0.99 * r
            returns.insert(0, r)
        ret = lib.tensor(np.array(returns, np.float32))
        ret = (ret - ret.mean()) / (ret.std() + 1e-8)
        pol, val = [], []
        for lp, v, R in zip(log_probs, values, ret):
            adv = R - v.item()
            pol.append(-lp * adv)
            val.append(F.smooth_l1_loss(v, lib.tensor([float(R)])))
        opt.zero_grad()
        (lib.stack(pol).sum() + lib.stack(val).sum()).backward()
        opt.step()
        return n
    return step


CASES = {"chain-same": (lambda lib: _chain(lib, False), "us/op", None),
         "chain-change": (lambda lib: _chain(lib, True), "us/op", 1.5),
         "crf": (_crf, "ms/sentence", 1.5),
         "actor-critic": (_actor_critic, "us/env step", 1.5)}
_SCALE = {"us/op": 1e6, "ms/sentence": 1e3, "us/env step": 1e6}


def worker(conn, lib_name: str) -> None:
    """Serve commands: ("case", name, steps) builds a case and runs that many steps (warm-up:
    kernels loaded, structures that repeat compiled); ("run", seconds) runs steps for about that
    long and sends the wall and CPU time per unit (op, sentence, environment step)."""
    if lib_name == "tinyopt":
        import tinyopt as lib
    else:
        import torch as lib
    step = None
    while True:
        cmd = conn.recv()
        if cmd[0] == "case":
            step = CASES[cmd[1]][0](lib)
            for _ in range(cmd[2]):
                step()
            conn.send(True)
        elif cmd[0] == "run":
            units, t0, c0 = 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - t0 < cmd[1]:
                units += step()
            conn.send(((time.perf_counter() - t0) / units, (time.process_time() - c0) / units))
        else:
            return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--block", type=float, default=0.5, help="seconds per timed block")
    ap.add_argument("--settle", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=60,
                    help="steps each case runs before it is timed (the CRF's 8 sentence lengths "
                         "have each been seen twice by then, so their plans are compiled)")
    ap.add_argument("--only", choices=list(CASES), action="append")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads for both libraries (default 1: these steps are per-op "
                         "Python and dispatch, not parallel work)")
    args = ap.parse_args()
    pin_threads(args.threads)
    pipes, procs = start_workers(worker, libraries())
    print(f"{'case':>13} {'unit':>12} {'tinyopt':>9} {'torch':>9} {'ratio':>6}   "
          f"{'cpu: tinyopt':>12} {'torch':>9} {'ratio':>6}  goal", flush=True)
    for name in args.only or list(CASES):
        _, unit, goal = CASES[name]
        for c in pipes:
            c.send(("case", name, args.warmup))
        for c in pipes:
            c.recv()
        times = timed_blocks(pipes, ("run", args.block), args.repeats, args.settle)
        med = [statistics.median(w for w, _ in t) * _SCALE[unit] for t in times]
        cpu = [statistics.median(c for _, c in t) * _SCALE[unit] for t in times]
        if len(med) == 2:
            g = f"<= {goal}" if goal else ""
            print(f"{name:>13} {unit:>12} {med[0]:>9.2f} {med[1]:>9.2f} {med[0] / med[1]:>6.2f}   "
                  f"{cpu[0]:>12.2f} {cpu[1]:>9.2f} {cpu[0] / cpu[1]:>6.2f}  {g}", flush=True)
        else:
            print(f"{name:>13} {unit:>12} {med[0]:>9.2f}   {cpu[0]:>12.2f}", flush=True)
    stop_workers(pipes, procs)


if __name__ == "__main__":
    main()
