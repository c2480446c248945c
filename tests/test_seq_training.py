"""Training end to end on the bundled text (tests/data/shakespeare.txt): the examples' character
LSTM and tiny GPT reach the loss of the same model in torch 2.13 after the same steps (same
initial weights, same batches, Adam), and the examples run, print a sample, checkpoint and resume
exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import char_lstm  # noqa: E402
import tiny_gpt  # noqa: E402

DATA = char_lstm.CharText(char_lstm.TEXT)
STEPS, B, T = 40, 16, 32


def _batches(seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(STEPS):
        yield DATA.windows(DATA.train, rng.integers(0, len(DATA.train) - T - 1, B), T)


def _torch_twin(model: nn.Module):
    """The same architecture in torch, with the tinyopt model's weights (same state-dict names)."""
    torch = pytest.importorskip("torch")
    tn = torch.nn
    V = len(DATA.vocab)
    if isinstance(model, char_lstm.CharLSTM):
        class Twin(tn.Module):
            def __init__(self):
                super().__init__()
                self.embed = tn.Embedding(V, model.embed.embedding_dim)
                self.lstm = tn.LSTM(model.lstm.input_size, model.lstm.hidden_size,
                                    model.lstm.num_layers, batch_first=True)
                self.head = tn.Linear(model.lstm.hidden_size, V)

            def forward(self, x):
                return self.head(self.lstm(self.embed(x))[0])
    else:
        d = model.tok.embedding_dim
        layer0 = model.blocks.layers[0]

        class Twin(tn.Module):
            def __init__(self):
                super().__init__()
                self.tok, self.pos = tn.Embedding(V, d), tn.Embedding(model.block, d)
                layer = tn.TransformerEncoderLayer(d, layer0.self_attn.num_heads,
                                                   layer0.linear1.out_features, 0.0,
                                                   activation="gelu", batch_first=True,
                                                   norm_first=True)
                self.blocks = tn.TransformerEncoder(layer, len(model.blocks.layers),
                                                    enable_nested_tensor=False)
                self.ln, self.head = tn.LayerNorm(d), tn.Linear(d, V)
                self.register_buffer("mask", tn.Transformer.generate_square_subsequent_mask(
                    model.block), persistent=False)

            def forward(self, x):
                h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
                return self.head(self.ln(self.blocks(h, mask=self.mask, is_causal=True)))
    twin = Twin()
    twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in
                          model.state_dict().items()})
    return twin


def _train_both(model: nn.Module, lr: float) -> tuple[list[float], list[float]]:
    torch = pytest.importorskip("torch")
    twin = _torch_twin(model)
    V = len(DATA.vocab)
    opt, topt = optim.Adam(model.parameters(), lr=lr), torch.optim.Adam(twin.parameters(), lr=lr)
    ours, theirs = [], []
    for x, y in _batches():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x)[0].reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
        ours.append(loss.item())
        topt.zero_grad()
        tl = torch.nn.functional.cross_entropy(twin(torch.from_numpy(x)).reshape(-1, V),
                                               torch.from_numpy(y).reshape(-1))
        tl.backward()
        topt.step()
        theirs.append(tl.item())
    return ours, theirs


@pytest.mark.parametrize("kind", ["lstm", "gpt"])
def test_training_reaches_torchs_loss(kind):
    to.manual_seed(0)
    V = len(DATA.vocab)
    if kind == "lstm":
        model, lr = char_lstm.CharLSTM(V, 16, 64, 1, dropout=0.0), 1e-2
    else:
        model, lr = tiny_gpt.TinyGPT(V, T, 32, 2, 2, 64, dropout=0.0), 3e-3
    ours, theirs = _train_both(model, lr)
    assert abs(ours[0] - theirs[0]) < 1e-4 * theirs[0]  # same weights, same first batch
    end, tend = np.mean(ours[-5:]), np.mean(theirs[-5:])
    assert end < 0.85 * ours[0]  # it learned
    assert abs(end - tend) < 0.03 * tend, (end, tend)


@pytest.mark.parametrize("example", [char_lstm, tiny_gpt])
def test_examples_train_sample_checkpoint_and_resume_exactly(example, tmp_path, capsys):
    size = ["--hidden", "32"] if example is char_lstm else ["--d-model", "16", "--heads", "2"]
    text = tmp_path / "text.txt"  # a short text: a short validation pass
    text.write_text(char_lstm.TEXT.read_text(encoding="utf-8")[:4000], encoding="utf-8")
    args = ["--steps", "6", "--batch-size", "4", "--seq-len", "16", "--layers", "1",
            "--sample", "12", "--text", str(text)] + size
    ckpt = str(tmp_path / "run.tinyopt")
    full = example.main(args + ["--epochs", "2", "--checkpoint", ""])
    example.main(args + ["--epochs", "1", "--checkpoint", ckpt])
    resumed = example.main(args + ["--epochs", "2", "--checkpoint", ckpt, "--resume", ckpt])
    assert resumed == full[1:]
    out = capsys.readouterr().out
    assert "resumed from" in out and "MENENIUS:" in out and "val loss" in out
