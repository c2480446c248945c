"""A nanoGPT-style GPT (issue 27) at three sizes: training-step time and peak resident memory,
tinyopt against PyTorch eager (when installed).

The model follows nanoGPT's ``model.py`` (written here for both libraries): token and position
embeddings, pre-norm blocks of causal self-attention (one ``c_attn`` projection to q, k, v,
``scaled_dot_product_attention(is_causal=True)``, ``c_proj``) and an MLP (4x, GELU), a final
LayerNorm and a head tied to the token embedding; AdamW (betas 0.9, 0.95) with weight decay 0.1
on the matrices only, as nanoGPT's ``configure_optimizers``; dropout 0.  Weights start as
nanoGPT's ``_init_weights`` sets them (``init_weights``); both libraries start from the same
weights and see the same batches.

Sizes (layers x width, heads, block, batch, vocabulary):

- ``baby``: 4 x 128, 4 heads, block 64, batch 12, 65 (shakespeare_char's characters);
- ``small``: 6 x 384, 6 heads, block 256, batch 8, 65 (shakespeare_char's model);
- ``gpt2``: 12 x 768, 12 heads, block 256, batch 2, 50304 (GPT-2 small, 124M parameters).

Each library runs in its own spawned worker (numba's and PyTorch's thread pools spoil each
other in one process), timed interleaved A B A B ... (medians); the peak RSS is each worker's
``ru_maxrss`` after its steps (its whole life: the model, the optimizer state, the steps).
Goals (issue 27, point 4): ``gpt2`` step <= 0.8 of torch's at 2 threads, peak RSS <= torch's.

    python benchmarks/bench_gpt.py [--sizes baby,small,gpt2] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from harness import (libraries, pin_threads, seconds_per_step, start_workers, stop_workers,
                     timed_blocks)

SIZES = {"baby": dict(layers=4, d=128, heads=4, block=64, batch=12, vocab=65),
         "small": dict(layers=6, d=384, heads=6, block=256, batch=8, vocab=65),
         "gpt2": dict(layers=12, d=768, heads=12, block=256, batch=2, vocab=50304)}


def build(lib, c: dict):
    """nanoGPT's GPT for library ``lib`` (tinyopt or torch) and config ``c``."""
    nn, F = lib.nn, lib.nn.functional
    d, h = c["d"], c["heads"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
            q, k, v = (t.view(B, T, h, C // h).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(c["vocab"], d), nn.Embedding(c["block"], d)
            self.blocks = nn.ModuleList([Block() for _ in range(c["layers"])])
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, c["vocab"], bias=False)
            self.lm_head.weight = self.wte.weight  # weight tying, as nanoGPT

        def forward(self, idx, targets):
            pos = np.arange(idx.shape[1]) if lib.__name__ == "tinyopt" else \
                lib.arange(idx.shape[1])
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def init_weights(model, layers: int, seed: int = 0) -> None:
    """nanoGPT's ``_init_weights``: linear and embedding weights N(0, 0.02), the residual
    projections' N(0, 0.02 / sqrt(2 layers)), biases 0 (LayerNorm keeps 1 and 0).

    (With the layers' own defaults instead, the tied embedding's N(0, 1) rows make GPT-2's
    logits span hundreds of nats: a first loss of ~480, and from the second step on a quarter
    of the cross-entropy gradient's entries subnormal, which both libraries' GEMMs then read
    4-30x slower: a benchmark of subnormal arithmetic, not of training.)"""
    rng = np.random.default_rng(seed)
    state = {}
    for name, v in model.state_dict().items():
        shape = tuple(v.shape)
        if name.endswith("bias") and not name.split(".")[-2].startswith("ln"):
            state[name] = np.zeros(shape, np.float32)
        elif name.endswith("weight") and len(shape) == 2:
            std = 0.02 / np.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
            if name != "lm_head.weight":  # tied: wte's
                state[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    state["lm_head.weight"] = state["wte.weight"]
    model.load_state_dict(state, strict=False)


def _stepper(lib_name: str, size: str):
    import tinyopt as to
    c = SIZES[size]
    to.manual_seed(0)
    ref = build(to, c)
    init_weights(ref, c["layers"])
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, c["vocab"], (c["batch"], c["block"])),
                rng.integers(0, c["vocab"], (c["batch"], c["block"]))) for _ in range(4)]
    if lib_name == "tinyopt":
        lib, model = to, ref
        batches = [(to.tensor(x), to.tensor(y)) for x, y in batches]
    else:
        import torch as lib
        model = build(lib, c)
        model.load_state_dict({k: lib.from_numpy(np.array(v)) for k, v in
                               ref.state_dict().items()})
        batches = [(lib.from_numpy(x), lib.from_numpy(y)) for x, y in batches]
        del ref
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    extra = {"fused": True} if lib_name == "torch" else {}
    opt = lib.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), **extra)
    k = [0]

    def step() -> float:
        x, y = batches[k[0] % len(batches)]
        k[0] += 1
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def worker(conn, lib_name: str) -> None:
    """Serve commands: ("case", size) builds a case and runs its first steps; ("run", n) times
    n steps; ("rss",) sends the peak resident set in bytes."""
    import resource
    step = None
    while True:
        cmd = conn.recv()
        if cmd[0] == "case":
            step = _stepper(lib_name, cmd[1])
            t0 = time.perf_counter()
            first = step()
            conn.send((first, time.perf_counter() - t0))
            step()
        elif cmd[0] == "run":
            conn.send(seconds_per_step(step, cmd[1]))
        elif cmd[0] == "rss":
            conn.send(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        else:
            return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="baby,small,gpt2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2, help="steps per timed block")
    ap.add_argument("--settle", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    pin_threads(args.threads)
    libs = libraries()
    print(f"{'size':>6} {'tinyopt':>10} {'torch':>10} {'ratio':>6}   {'RSS tinyopt':>11} "
          f"{'torch':>8} {'ratio':>6}   first step (s)", flush=True)
    for size in args.sizes.split(","):
        pipes, procs = start_workers(worker, libs)  # fresh per size: each peak RSS its own
        firsts = []
        for c in pipes:
            c.send(("case", size))
            firsts.append(c.recv())
        if len(firsts) == 2:
            assert abs(firsts[0][0] - firsts[1][0]) < 1e-3 * abs(firsts[1][0]), firsts
        times = timed_blocks(pipes, ("run", args.steps), args.repeats, args.settle)
        rss = []
        for c in pipes:
            c.send(("rss",))
            rss.append(c.recv())
        stop_workers(pipes, procs)
        med = [statistics.median(t) for t in times]
        first = " ".join(f"{f[1]:.2f}" for f in firsts)
        if len(med) == 2:
            print(f"{size:>6} {med[0] * 1e3:>8.1f}ms {med[1] * 1e3:>8.1f}ms {med[0] / med[1]:>6.2f}"
                  f"   {rss[0] / 2**30:>9.2f}GB {rss[1] / 2**30:>6.2f}GB {rss[0] / rss[1]:>6.2f}"
                  f"   {first}", flush=True)
        else:
            print(f"{size:>6} {med[0] * 1e3:>8.1f}ms   {rss[0] / 2**30:>9.2f}GB   {first}",
                  flush=True)


if __name__ == "__main__":
    main()
