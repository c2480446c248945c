"""Train a tiny GPT (a decoder-only Transformer) on the bundled Shakespeare excerpt, then let it
write.

    python examples/tiny_gpt.py                        # 4 epochs of 150 steps, a sample each
    python examples/tiny_gpt.py --epochs 10 --layers 4 --d-model 192

The model: token and position embeddings, ``--layers`` pre-norm ``TransformerEncoderLayer`` blocks
under a causal mask (``Transformer.generate_square_subsequent_mask``), a final LayerNorm and a
Linear head -- what PyTorch users write with ``nn.TransformerEncoder`` for a GPT.  Data, training
loop, evaluation, sampling, checkpoints and ``--resume`` are ``char_lstm.py``'s (see there)::

    python examples/tiny_gpt.py --epochs 2 --checkpoint gpt.tinyopt
    python examples/tiny_gpt.py --epochs 4 --checkpoint gpt.tinyopt --resume gpt.tinyopt

Each block's attention is one engine op over all heads (q, k and v read straight out of one
projection), so a step compiles once and is replayed.  Sampling runs the model on a window of
exactly ``--seq-len`` characters (the text so far, padded on the right: with a causal mask the
padding cannot change the logits that are read), so it reuses one plan too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import tinyopt as to
from tinyopt import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from char_lstm import CharText, parse_args, train  # noqa: E402


class TinyGPT(nn.Module):
    """Token + position Embedding -> ``layers`` causal pre-norm Transformer blocks -> LayerNorm
    -> Linear, batch first; ``block`` is the longest context."""

    def __init__(self, vocab: int, block: int, d_model: int = 128, heads: int = 4,
                 layers: int = 2, ff: int = 512, dropout: float = 0.1):
        super().__init__()
        self.block = block
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(block, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        self.mask = nn.Transformer.generate_square_subsequent_mask(block)

    def forward(self, x, state=None):
        T = x.shape[1]
        h = self.tok(x) + self.pos(np.arange(T))
        mask = self.mask if T == self.block else \
            nn.Transformer.generate_square_subsequent_mask(T)
        h = self.blocks(h, mask=mask, is_causal=True)
        return self.head(self.ln(h)), None


def gpt_step(model: TinyGPT):
    """How the sampler advances the GPT by one character: the logits after the last ``block``
    characters, from one fixed-size window."""
    def step(ids: list[int], state):
        ctx = ids[-model.block:]
        window = np.zeros((1, model.block), np.int64)
        window[0, :len(ctx)] = ctx
        logits, _ = model(window)
        return logits.numpy()[0, len(ctx) - 1], None
    return step


def gpt_args(p) -> None:
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)


def main(argv: list[str] | None = None) -> list[tuple[float, float]]:
    args = parse_args(argv, name="tiny_gpt", lr=1e-3, description=__doc__.split("\n")[0],
                      model_args=gpt_args)
    to.manual_seed(args.seed)
    data = CharText(args.text)
    model = TinyGPT(len(data.vocab), args.seq_len, args.d_model, args.heads, args.layers,
                    4 * args.d_model, args.dropout)
    print(model)
    return train(model, data, args, step=gpt_step)


if __name__ == "__main__":
    main()
