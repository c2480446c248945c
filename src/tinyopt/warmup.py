"""``python -m tinyopt warmup``: compile the common kernels ahead of time.

The first use of a numba kernel compiles it (0.1-1 s each) and caches the machine code on disk
next to the installed package (or in ``NUMBA_CACHE_DIR``), keyed by the kernel's source and the
CPU; every later process loads it in milliseconds.  So a fresh install's first training step
takes seconds (the README's MLP: about 2 s of CPU, a small GPT or LSTM 4-5 s) where a warm one
takes about 0.15 s.  :func:`warmup` pays that once, ahead of time -- after installing, in a
container's build step, before timing anything -- by training a few small models for two steps
each on the kernels those models use in float32:

``mlp``
    the README's model (Flatten, Linear, ReLU, cross-entropy) with AdamW, Adam and SGD with
    momentum, and its evaluation (``argmax``, accuracy);
``cnn``
    3x3 convolutions with ReLU and 2x2 max pooling, BatchNorm2d, Dropout, a linear head;
``lstm``
    a word-level language model: Embedding, a 2-layer LSTM, Linear, gradient clipping;
``gpt``
    a tiny GPT: token and position embeddings, pre-norm TransformerEncoderLayers (LayerNorm,
    causal attention, GELU), AdamW.

Kernels chosen by size compile at their first use still: parallel builds of large optimizer
steps and im2col convolutions (from ``TINYOPT_PARALLEL_MIN`` elements), the chunked
cross-entropy of 2**20 logits or more, other dtypes and pooling windows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

import tinyopt as to
from tinyopt import nn


def _train(model, opt, batches, loss_fn) -> None:
    """Two training steps (the first runs eagerly, the second compiles its plan)."""
    for x, y in batches:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.item()


def _mlp() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((32, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, 32)
    for make in (lambda p: to.optim.AdamW(p, lr=1e-3), lambda p: to.optim.Adam(p, lr=1e-3),
                 lambda p: to.optim.SGD(p, lr=0.1, momentum=0.9)):
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))
        _train(model, make(model.parameters()), [(x, y)] * 2, nn.functional.cross_entropy)
    with to.no_grad():
        (model(x).argmax(1) == to.tensor(y)).float().mean().item()


def _cnn() -> None:
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.25), nn.Linear(784, 10))
    x = rng.random((16, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, 16)
    _train(model, to.optim.Adam(model.parameters(), lr=1e-3), [(x, y)] * 2,
           nn.functional.cross_entropy)
    model.eval()
    with to.no_grad():
        model(x).argmax(1).numpy()


def _lstm() -> None:
    rng = np.random.default_rng(0)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.rnn = nn.Embedding(100, 32), nn.LSTM(32, 32, 2)
            self.decoder = nn.Linear(32, 100)

        def forward(self, idx):
            return self.decoder(self.rnn(self.encoder(idx))[0]).reshape(-1, 100)

    model = LM()
    opt = to.optim.SGD(model.parameters(), lr=1.0)
    for _ in range(2):
        x, y = rng.integers(0, 100, (12, 4)), rng.integers(0, 100, 48)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        loss.item()


def _gpt() -> None:
    rng = np.random.default_rng(0)
    T, d = 16, 32

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(65, d), nn.Embedding(T, d)
            layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True,
                                               norm_first=True, activation="gelu")
            self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, 65)
            self.mask = nn.Transformer.generate_square_subsequent_mask(T)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(np.arange(T))
            return self.head(self.ln(self.blocks(x, mask=self.mask, is_causal=True)))

    model = GPT()
    batches = [(rng.integers(0, 65, (4, T)), rng.integers(0, 65, 4 * T)) for _ in range(2)]
    _train(model, to.optim.AdamW(model.parameters(), lr=1e-3), batches,
           lambda out, y: nn.functional.cross_entropy(out.reshape(-1, 65), y))


WORKLOADS: dict[str, Callable[[], None]] = {"mlp": _mlp, "cnn": _cnn, "lstm": _lstm, "gpt": _gpt}
"""The models :func:`warmup` trains, by name (see the module docstring)."""


def warmup(workloads: Iterable[str] | None = None,
           report: Callable[[str, float], None] | None = None) -> dict[str, float]:
    """Compile (or load) the kernels of ``workloads`` (names of :data:`WORKLOADS`; all by
    default) into numba's disk cache; the seconds each took, by name.  ``report(name,
    seconds)`` is called after each."""
    names = list(WORKLOADS) if workloads is None else list(workloads)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"warmup: unknown workload {unknown[0]!r}; expected one of "
                         f"{', '.join(WORKLOADS)}")
    took = {}
    for name in names:
        t0 = time.perf_counter()
        WORKLOADS[name]()
        took[name] = time.perf_counter() - t0
        if report is not None:
            report(name, took[name])
    return took
