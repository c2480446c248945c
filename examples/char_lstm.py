"""Train a character-level LSTM language model on the bundled Shakespeare excerpt, then let it write.

    python examples/char_lstm.py                       # 4 epochs of 150 steps, a sample each
    python examples/char_lstm.py --text my.txt --epochs 20 --hidden 256

The text is ``tests/data/shakespeare.txt`` (the opening of Coriolanus, public domain) unless
``--text`` names another file.  Each step trains on a batch of random windows of ``--seq-len + 1``
characters (predict every next character: cross-entropy over the vocabulary), with Adam and
gradient clipping, as PyTorch's char-rnn examples do.  After every epoch the script prints the
training loss, the loss on the held-out last 10% of the text, and a sampled continuation of a
prompt, and saves a checkpoint (``--checkpoint PATH``, default ``char_lstm.tinyopt`` in a new
temporary folder; ``''`` saves none); within an epoch it prints the step and the running loss
every ``--progress`` seconds (10).  ``--resume PATH`` continues a run where it stopped, printing
exactly the numbers the uninterrupted run would have printed (model, optimizer, and the random
generator that draws the windows and the samples are all restored)::

    python examples/char_lstm.py --epochs 2 --checkpoint run.tinyopt
    python examples/char_lstm.py --epochs 4 --checkpoint run.tinyopt --resume run.tinyopt

The model is ``Embedding -> LSTM -> Linear``; each LSTM layer runs the whole window as one engine
op, so a training step is a handful of graph nodes, compiled once and replayed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.engine import default_generator  # the global generator (to.manual_seed)

TEXT = Path(__file__).resolve().parents[1] / "tests" / "data" / "shakespeare.txt"


class CharText:
    """A text as int64 character ids: ``vocab`` (sorted characters), ``train``, ``val``."""

    def __init__(self, path: str | os.PathLike):
        text = Path(path).read_text(encoding="utf-8")
        self.vocab = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.vocab)}
        ids = self.encode(text)
        cut = int(len(ids) * 0.9)
        self.train, self.val = ids[:cut], ids[cut:]

    def encode(self, s: str) -> np.ndarray:
        return np.array([self.index[c] for c in s], dtype=np.int64)

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids)

    def windows(self, ids: np.ndarray, starts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Inputs (B, n) and next-character targets (B, n) of the windows starting at ``starts``."""
        idx = starts[:, None] + np.arange(n + 1)
        w = ids[idx]
        return w[:, :-1], w[:, 1:]


class CharLSTM(nn.Module):
    """Embedding -> LSTM (``layers`` layers, dropout between them) -> Linear, batch first."""

    def __init__(self, vocab: int, emb: int = 64, hidden: int = 256, layers: int = 2,
                 dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, layers, batch_first=True,
                            dropout=dropout if layers > 1 else 0.0)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x, state=None):
        y, state = self.lstm(self.embed(x), state)
        return self.head(y), state


def lstm_step(model: CharLSTM):
    """How the sampler advances the LSTM: the logits of the character after ``ids``, and the new
    (h, c) (the whole prompt at the first call, then one character at a time)."""
    def step(ids: list[int], state):
        x = np.array([ids if state is None else ids[-1:]], dtype=np.int64)
        logits, (h, c) = model(x, state)
        return logits.numpy()[0, -1], (h.detach(), c.detach())
    return step


def sample(model: nn.Module, data: CharText, prompt: str, n: int, temperature: float,
           step=lstm_step) -> str:
    """Continue ``prompt`` by ``n`` characters drawn from the model's softmax at ``temperature``
    (from tinyopt's global generator)."""
    model.eval()
    rng = default_generator.numpy
    ids = list(data.encode(prompt))
    advance = step(model)
    with to.no_grad():
        state = None
        for _ in range(n):
            logits, state = advance(ids, state)
            z = logits / temperature
            p = np.exp(z - z.max())
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
    model.train()
    return data.decode(ids[len(prompt):])


def evaluate(model: nn.Module, data: CharText, seq_len: int, batch_size: int) -> float:
    """Mean next-character cross-entropy over consecutive windows of the held-out text."""
    model.eval()
    n = (len(data.val) - 1) // seq_len
    starts = np.arange(n) * seq_len
    total = 0.0
    with to.no_grad():
        for i in range(0, n - batch_size + 1, batch_size):
            x, y = data.windows(data.val, starts[i:i + batch_size], seq_len)
            logits, _ = model(x)
            total += nn.functional.cross_entropy(logits.reshape(-1, len(data.vocab)),
                                                 y.reshape(-1)).item() * batch_size
    model.train()
    return total / (n - n % batch_size)


def train(model: nn.Module, data: CharText, args: argparse.Namespace, step=lstm_step,
          prompt: str = "MENENIUS:\n") -> list[tuple[float, float]]:
    """Train as ``args`` say; returns (train loss, val loss) per epoch run."""
    opt = optim.Adam(model.parameters(), lr=args.lr)
    first = 0
    if args.resume:
        first = to.load_into(args.resume, model=model, optimizer=opt)["epoch"]
        print(f"resumed from {args.resume} after epoch {first}")
    rng = default_generator.numpy
    vocab = len(data.vocab)
    history = []
    for epoch in range(first, args.epochs):
        t0 = shown = time.perf_counter()
        total = 0.0
        for i in range(args.steps):
            starts = rng.integers(0, len(data.train) - args.seq_len - 1, args.batch_size)
            x, y = data.windows(data.train, starts, args.seq_len)
            opt.zero_grad()
            logits, _ = model(x)
            loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            opt.step()
            total += loss.item()
            if time.perf_counter() - shown >= args.progress and i + 1 < args.steps:
                shown = time.perf_counter()
                print(f"  step {i + 1}/{args.steps}  train loss {total / (i + 1):.4f}  "
                      f"({shown - t0:.1f} s)", flush=True)
        val = evaluate(model, data, args.seq_len, args.batch_size)
        history.append((total / args.steps, val))
        print(f"epoch {epoch + 1:3d}  train loss {total / args.steps:.4f}  val loss {val:.4f}  "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
        text = sample(model, data, prompt, args.sample, args.temperature, step)
        print("  " + (prompt + text).replace("\n", "\n  "), flush=True)
        if args.checkpoint:
            to.save(args.checkpoint, model=model, optimizer=opt, epoch=epoch + 1)
    if args.checkpoint:
        print(f"checkpoint {args.checkpoint}")
    return history


def lstm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--emb", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)


def parse_args(argv: list[str] | None = None, name: str = "char_lstm", lr: float = 3e-3,
               description: str | None = None, model_args=lstm_args) -> argparse.Namespace:
    """The options shared by the character-level examples, and the model's (``model_args``)."""
    p = argparse.ArgumentParser(description=description or __doc__.split("\n")[0])
    model_args(p)
    p.add_argument("--text", default=str(TEXT), help="training text (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=4,
                   help="epochs in all (a resumed run continues up to this many)")
    p.add_argument("--steps", type=int, default=150, help="training steps per epoch")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping")
    p.add_argument("--sample", type=int, default=200, help="characters sampled after each epoch")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default=None, metavar="PATH",
                   help=f"save here after every epoch ('' to save nothing; default: "
                        f"{name}.tinyopt in a new temporary folder)")
    p.add_argument("--resume", default=None, metavar="PATH",
                   help="continue the run saved in this checkpoint")
    p.add_argument("--progress", type=float, default=10.0, metavar="SECONDS",
                   help="within an epoch, print the step and the running loss every SECONDS "
                        "(default: %(default)s; 0: after every step)")
    args = p.parse_args(argv)
    if args.checkpoint is None:  # a folder of this run's own: never a fixed name others can take
        args.checkpoint = os.path.join(tempfile.mkdtemp(prefix=f"{name}-"), f"{name}.tinyopt")
    return args


def main(argv: list[str] | None = None) -> list[tuple[float, float]]:
    args = parse_args(argv)
    to.manual_seed(args.seed)
    data = CharText(args.text)
    model = CharLSTM(len(data.vocab), args.emb, args.hidden, args.layers)
    print(model)
    return train(model, data, args)


if __name__ == "__main__":
    main()
