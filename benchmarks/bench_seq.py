"""Training-step time of sequence models -- forward, cross-entropy, backward, Adam -- tinyopt
against the same model in PyTorch eager (when installed), and their first step on a cold and on a
warm numba cache.

- ``lstm``: a word-level language model as PyTorch's word_language_model example: Embedding 5000
  x 200, a 2-layer LSTM (hidden 200), Linear 200 -> 5000; sequence 35, batch 20.
- ``gpt``: a tiny GPT: token + position Embedding (65 and 64 x 128), 2 TransformerEncoderLayer
  (d_model 128, 4 heads, feed-forward 512, pre-norm, causal mask), LayerNorm, Linear 128 -> 65;
  T = 64, batch 16.

Both libraries start from the same weights (tinyopt's state dict loaded into the torch model, which
also checks that the state-dict layouts agree) and see the same batch; torch's Adam is
``fused=True``.  Each library runs in its own worker process and the two are timed interleaved
(A B A B ...), compared by medians, as ``bench_train.py`` does.  The first-step times come from
fresh processes with an empty and then a warm numba cache (``NUMBA_CACHE_DIR``).

Targets: step ratio (tinyopt / torch) <= 1.0 for both; first step < 10 s cold, < 1 s warm.

    python benchmarks/bench_seq.py [--repeats N] [--no-startup | --startup-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
from harness import libraries, seconds_per_step, start_workers, stop_workers, timed_blocks

CASES = {"lstm": dict(vocab=5000, emb=200, hidden=200, layers=2, T=35, B=20),
         "gpt": dict(vocab=65, d=128, heads=4, ff=512, layers=2, T=64, B=16)}


def build(lib, kind: str):
    """The model of ``kind`` in ``lib`` (tinyopt or torch), and its forward(idx) -> logits."""
    nn = lib.nn
    c = CASES[kind]
    if kind == "lstm":
        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = nn.Embedding(c["vocab"], c["emb"])
                self.rnn = nn.LSTM(c["emb"], c["hidden"], c["layers"])
                self.decoder = nn.Linear(c["hidden"], c["vocab"])

            def forward(self, idx):
                out, _ = self.rnn(self.encoder(idx))
                return self.decoder(out)
        return LM()

    arange = np.arange if lib.__name__ == "tinyopt" else lib.arange

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(c["vocab"], c["d"])
            self.pos = nn.Embedding(c["T"], c["d"])
            layer = nn.TransformerEncoderLayer(c["d"], c["heads"], c["ff"], dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, c["layers"], enable_nested_tensor=False)
            self.ln = nn.LayerNorm(c["d"])
            self.head = nn.Linear(c["d"], c["vocab"])
            self.mask = nn.Transformer.generate_square_subsequent_mask(c["T"])
            self.positions = arange(c["T"])

        def forward(self, idx):
            x = self.tok(idx) + self.pos(self.positions)
            return self.head(self.ln(self.blocks(x, mask=self.mask, is_causal=True)))
    return GPT()


def batch(kind: str) -> tuple[np.ndarray, np.ndarray]:
    c = CASES[kind]
    rng = np.random.default_rng(0)
    shape = (c["T"], c["B"]) if kind == "lstm" else (c["B"], c["T"])
    return rng.integers(0, c["vocab"], shape), rng.integers(0, c["vocab"], c["T"] * c["B"])


def stepper(lib_name: str, kind: str):
    """One training step of ``kind`` in ``lib_name``, on the weights of a seeded tinyopt model."""
    import tinyopt as to
    to.manual_seed(0)
    ref = build(to, kind)
    x, y = batch(kind)
    vocab = CASES[kind]["vocab"]
    if lib_name == "tinyopt":
        model, F = ref, to.nn.functional
        opt = to.optim.Adam(model.parameters(), lr=1e-3)
    else:
        import torch
        torch.manual_seed(0)
        model, F = build(torch, kind), torch.nn.functional
        model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in
                               ref.state_dict().items()})
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
        x, y = torch.from_numpy(x), torch.from_numpy(y)

    def step() -> float:
        opt.zero_grad()
        loss = F.cross_entropy(model(x).reshape(-1, vocab), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def worker(conn, lib_name: str) -> None:
    """Serve commands: ("case", kind) builds a case; ("run", n) times n steps."""
    step = None
    while True:
        cmd = conn.recv()
        if cmd[0] == "case":
            step = stepper(lib_name, cmd[1])
            conn.send(step())  # the first loss, to check both libraries compute the same thing
            step()
        elif cmd[0] == "run":
            conn.send(seconds_per_step(step, cmd[1]))
        else:
            return


def first_step(kind: str, cache_dir: str) -> tuple[float, float]:
    """Seconds (wall, and the process's CPU time) of the first training step of ``kind`` in a
    fresh process: the CPU time says the same on a quiet machine and stays readable on a busy one."""
    code = (f"import sys, time, json; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            f"import bench_seq as b; s = b.stepper('tinyopt', {kind!r}); t = time.perf_counter();"
            f" c = time.process_time(); s(); "
            f"print(json.dumps([time.perf_counter() - t, time.process_time() - c]))")
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--settle", type=float, default=0.3,
                    help="seconds to pause before each timed block (idle threads go to sleep)")
    ap.add_argument("--no-startup", action="store_true", help="skip the first-step timings")
    ap.add_argument("--startup-only", action="store_true", help="only the first-step timings")
    args = ap.parse_args()
    if not args.startup_only:
        step_ratios(args)
    if not args.no_startup:
        startup()


def step_ratios(args) -> None:
    pipes, procs = start_workers(worker, libraries())
    print(f"{'case':>6} {'tinyopt':>11} {'torch':>11} {'ratio':>6}  target")
    for kind in CASES:
        for c in pipes:
            c.send(("case", kind))
        losses = [c.recv() for c in pipes]
        if len(losses) == 2:
            assert abs(losses[0] - losses[1]) < 1e-4 * max(1.0, abs(losses[1])), losses
        times = timed_blocks(pipes, ("run", 3), args.repeats, args.settle)
        med = [statistics.median(t) for t in times]
        if len(med) == 2:
            print(f"{kind:>6} {med[0] * 1e3:>9.2f}ms {med[1] * 1e3:>9.2f}ms "
                  f"{med[0] / med[1]:>6.2f}  <= 1.0")
        else:
            print(f"{kind:>6} {med[0] * 1e3:>9.2f}ms")
    stop_workers(pipes, procs)


def startup() -> None:
    """The first step of each case on an empty, then on the same (warm) numba cache."""
    print(f"\n{'case':>6} {'cold':>8} {'cpu':>8} {'warm':>8} {'cpu':>8}  "
          f"(first step; targets < 10 s cold, < 1 s warm)")
    for kind in CASES:
        with tempfile.TemporaryDirectory() as cache:
            cold = first_step(kind, cache)
            warm = first_step(kind, cache)
        print(f"{kind:>6} {cold[0]:>7.2f}s {cold[1]:>7.2f}s {warm[0]:>7.2f}s {warm[1]:>7.2f}s")


if __name__ == "__main__":
    main()
