"""ONNX export (``tinyopt.onnx``): the exported graph, run in onnxruntime, gives tinyopt's forward
values for the example models and the layers they are built from."""

from __future__ import annotations

import inspect
import io
import sys
from pathlib import Path

import numpy as np
import pytest

import tinyopt as to
import tinyopt.nn.functional as F
import tinyopt.onnx
from tinyopt import nn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))


def _run(model, xs, **kw):
    buf = io.BytesIO()
    names = [f"in{i}" for i in range(len(xs))]
    tinyopt.onnx.export(model, tuple(to.tensor(x) for x in xs), buf, input_names=names, **kw)
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    return sess, names


def _check(model, *xs, atol=1e-5, feeds=None):
    to.manual_seed(0)
    sess, names = _run(model, xs)
    model.eval()
    for batch in feeds or [xs]:
        got = sess.run(None, dict(zip(names, batch)))
        want = model(*(to.tensor(x) for x in batch))
        want = [w for w in (want if isinstance(want, tuple) else (want,))
                if isinstance(w, to.Tensor)]
        assert len(got) >= 1
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=atol)


def _examples():
    from char_lstm import CharLSTM
    from mnist_cnn import build_model
    from tiny_gpt import TinyGPT
    return CharLSTM, build_model, TinyGPT


RNG = np.random.default_rng(0)


def test_mlp_with_a_dynamic_batch():
    to.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.LogSoftmax(1))
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    sess, names = _run(model, [x], output_names=["logp"],
                       dynamic_axes={"in0": {0: "batch"}, "logp": {0: "batch"}})
    assert model.training  # exported in eval mode, and restored
    for n in (1, 5):
        xb = RNG.standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"in0": xb})[0], model(xb).numpy(),
                                   rtol=1e-5, atol=1e-6)
    assert sess.get_inputs()[0].shape[0] == "batch"


def test_training_mode_and_operator_types_as_torch_or_refused(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    x = np.ones((2, 4), np.float32)
    for kind in (to.onnx.OperatorExportTypes.ONNX, to.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK):
        to.onnx.export(model, (x,), tmp_path / "m.onnx", training=to.onnx.TrainingMode.EVAL,
                       operator_export_type=kind)
    with pytest.raises(NotImplementedError, match="eval-mode"):
        to.onnx.export(model, (x,), training=to.onnx.TrainingMode.TRAINING)
    with pytest.raises(NotImplementedError, match="eval-mode"):
        to.onnx.export(model, (x,), training=to.onnx.TrainingMode.PRESERVE)
    to.onnx.export(model.eval(), (x,), training=to.onnx.TrainingMode.PRESERVE)
    with pytest.raises(NotImplementedError, match="ONNX_ATEN"):
        to.onnx.export(model, (x,), operator_export_type=to.onnx.OperatorExportTypes.ONNX_ATEN)
    torch = pytest.importorskip("torch")
    for ours, theirs in ((to.onnx.TrainingMode, torch.onnx.TrainingMode),
                         (to.onnx.OperatorExportTypes, torch.onnx.OperatorExportTypes)):
        assert {k: int(v) for k, v in ours.__members__.items()} == \
            {k: int(v) for k, v in theirs.__members__.items()}


def test_cnn_example():
    _, build_model, _ = _examples()
    to.manual_seed(0)
    x = RNG.standard_normal((2, 1, 28, 28)).astype(np.float32)
    model = build_model()
    _check(model, x)
    sess, _ = _run(model, [x], dynamic_axes={"in0": [0]})  # flatten keeps a dynamic batch
    x3 = RNG.standard_normal((3, 1, 28, 28)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"in0": x3})[0], model(x3).numpy(), rtol=1e-5,
                               atol=1e-5)


def test_lstm_language_model_example():
    CharLSTM, _, _ = _examples()
    to.manual_seed(0)
    _check(CharLSTM(20, 8, 16, 2), RNG.integers(0, 20, (2, 5)))


def test_small_gpt_example():
    _, _, TinyGPT = _examples()
    to.manual_seed(0)
    _check(TinyGPT(20, 8, 16, 2, 2), RNG.integers(0, 20, (2, 8)))


class _Zoo(nn.Module):
    """The other layers: strided and grouped conv, batch norm, pooling, GELU, SiLU, layer norm,
    attention from nn.MultiheadAttention, a GRU, slicing, cat and reductions."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AvgPool2d(2)
        self.mp = nn.MaxPool2d(3, stride=1, padding=1)
        self.adapt = nn.AdaptiveAvgPool2d(1)
        self.ln = nn.LayerNorm(8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.gru = nn.GRU(8, 6, batch_first=True)
        self.rnn = nn.RNN(6, 5, nonlinearity="relu")

    def forward(self, img, seq):
        y = self.mp(F.silu(self.bn(self.conv(img))))
        y = self.adapt(self.pool(y)).flatten(1)            # (N, 8)
        s = F.gelu(self.ln(seq + y[:, None, :]))
        a, w = self.attn(s, s, s)
        h, hn = self.gru(a * 0.5 - 1.0)
        r, _ = self.rnn(h.transpose(0, 1))
        out = to.cat([r.mean(0), hn[0], y.softmax(-1)[:, 1:4]], 1)
        return out.sum(1, keepdim=True).tanh(), w


def test_layer_zoo():
    to.manual_seed(1)
    zoo = _Zoo()
    zoo.train()
    zoo.bn(to.tensor(RNG.standard_normal((4, 8, 4, 4)).astype(np.float32)))  # running stats
    _check(zoo, RNG.standard_normal((2, 4, 8, 8)).astype(np.float32),
           RNG.standard_normal((2, 3, 8)).astype(np.float32))


def test_errors():
    class Odd(nn.Module):
        def forward(self, x):
            return to.cumsum(x, 0)

    with pytest.raises(NotImplementedError, match="no ONNX translation for the op"):
        tinyopt.onnx.export(Odd(), (to.ones(3),), io.BytesIO())
    with pytest.raises(ValueError, match="opset_version 11 is not supported"):
        tinyopt.onnx.export(nn.Linear(2, 2), (to.ones(1, 2),), io.BytesIO(), opset_version=11)
    with pytest.raises(ValueError, match="dynamic_axes names 'y'"):
        tinyopt.onnx.export(nn.Linear(2, 2), (to.ones(1, 2),), io.BytesIO(),
                            input_names=["x"], dynamic_axes={"y": [0]})


def test_writes_a_path_and_matches_torchs_signature(tmp_path):
    path = tmp_path / "m.onnx"
    tinyopt.onnx.export(nn.Linear(2, 3), to.ones(1, 2), path)
    assert onnx.load(str(path)).graph.input[0].name == "input"
    torch = pytest.importorskip("torch")
    ours = inspect.signature(tinyopt.onnx.export).parameters
    theirs = inspect.signature(torch.onnx.export).parameters
    assert list(ours) == list(theirs)
    assert [p.kind for p in ours.values()] == [p.kind for p in theirs.values()]


def test_nested_inputs_an_lstm_with_its_state():
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 6)
            self.rnn = nn.LSTM(6, 5, 2)
            self.out = nn.Linear(5, 10)

        def forward(self, x, hidden):
            y, hidden = self.rnn(self.emb(x), hidden)
            return self.out(y), hidden

    to.manual_seed(0)
    m = LM()
    x = RNG.integers(0, 10, (4, 3))
    h = (RNG.standard_normal((2, 3, 5)).astype(np.float32),
         RNG.standard_normal((2, 3, 5)).astype(np.float32))
    buf = io.BytesIO()
    tinyopt.onnx.export(m, (to.tensor(x), tuple(to.tensor(a) for a in h)), buf)
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["x", "hidden.0", "hidden.1"]
    got = sess.run(None, {"x": x, "hidden.0": h[0], "hidden.1": h[1]})
    m.eval()
    want, (hn, cn) = m(to.tensor(x), tuple(to.tensor(a) for a in h))
    for g, w in zip(got, (want, hn, cn)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


class _MoreLayers(nn.Module):
    """Transposed conv, padding, upsampling, group and instance norm, more activations, 1-d
    layers, advanced indexing and reductions with indices."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.pad = nn.ReflectionPad2d(1)
        self.near = nn.Upsample(scale_factor=2, mode="nearest")
        self.bil = nn.Upsample(size=(7, 9), mode="bilinear", align_corners=False)
        self.gn = nn.GroupNorm(2, 4)
        self.inorm = nn.InstanceNorm2d(4, affine=True)
        self.acts = nn.Sequential(nn.Softplus(), nn.ELU(), nn.LeakyReLU(0.2), nn.PReLU(4),
                                  nn.Mish(), nn.SELU(), nn.Hardtanh(), nn.LogSigmoid())
        self.conv1 = nn.Conv1d(4, 2, 3, padding=1)

    def forward(self, x):
        y = self.inorm(self.gn(self.up(x)))                  # (N, 4, 8, 8)
        y = self.bil(self.near(self.pad(self.acts(y))))      # (N, 4, 7, 9)
        z = self.conv1(y.flatten(2))                         # (N, 2, 63)
        return z[:, [1, 0]].max(dim=2).values, y.amin(1).argmax(-1)


def test_more_layers():
    to.manual_seed(2)
    _check(_MoreLayers(), RNG.standard_normal((2, 3, 4, 4)).astype(np.float32))
