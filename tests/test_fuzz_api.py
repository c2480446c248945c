"""Property-based fuzz of the public API: every layer, loss, functional and optimizer (the tables
below; ``test_every_layer_loss_functional_and_optimizer_is_fuzzed`` fails when one has no case),
over shapes (0-d and empty included), dtypes, NaN/inf, non-contiguous arrays and invalid
arguments.  The rule: **a clear error or PyTorch's result** -- never a crash, a hang, an internal
error (AttributeError, KeyError, a numba typing error...), or a result that differs from
PyTorch's (values, NaN/inf positions, shape, dtype), nor accepting what PyTorch refuses.  A clear
error where PyTorch computes fails too, unless the case lists it (``refuses=``, a regex, with the
reason beside it).

The examples run in a child process, so a crash (SIGSEGV, abort) fails a test instead of killing
the run, and the child reports the case it was running.  Without PyTorch only the
no-crash/clear-error half is checked.

Size: ``TINYOPT_FUZZ_EXAMPLES`` examples per case (default 2, what the suite affords; the same
examples every run); for a deep local run, with new examples each time, e.g.
``TINYOPT_FUZZ_EXAMPLES=300 python -m pytest tests/test_fuzz_api.py``.  The child can be run by
hand: ``python tests/test_fuzz_api.py layers losses [case-name ...]``.

Adding a layer, loss, functional or optimizer is one line in ``LAYERS``, ``LOSSES``,
``FUNCTIONALS`` or ``OPTIMIZERS``.  ``known=`` marks a discrepancy reported to the file's owner
(and in notes/issue-9.md): its mismatches with PyTorch are printed rather than failing; crashes,
hangs and internal errors fail a known case too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable

import numpy as np
import pytest

EXAMPLES = int(os.environ.get("TINYOPT_FUZZ_EXAMPLES", "2"))
CLEAR = (TypeError, ValueError, RuntimeError, IndexError, NotImplementedError)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
I64, F16, BOOL = np.dtype(np.int64), np.dtype(np.float16), np.dtype(np.bool_)
ODD = (I64, F16, BOOL)  # dtypes a float layer should refuse, or compute as torch does


# ---- input specifications --------------------------------------------------------------------
# A shape rule is ``rule(draw, shapes_so_far) -> shape``; an input is (shape rule, kind) with kind
# "float" (values in [-4, 4] plus, sometimes, NaN/inf/-0.0), "prob" (in [0, 1]), "sign" (+-1),
# ("int", lo, hi) (int64 in [lo, hi]).

def dims(*tail, lead=(0, 2), size=(0, 3)):
    """``lead`` leading dimensions of ``size`` each, then ``tail`` (ints, or (lo, hi) ranges)."""
    def rule(draw, _):
        from hypothesis import strategies as st
        n = draw(st.integers(*lead))
        head = tuple(draw(st.integers(*size)) for _ in range(n))
        return head + tuple(t if isinstance(t, int) else draw(st.integers(*t)) for t in tail)
    return rule


def like(k=0, drop=0, keep=None):
    """The shape of input ``k`` (without its dimension ``drop`` if given as 1, or only its
    ``keep`` first dimensions)."""
    def rule(draw, shapes):
        s = shapes[k]
        if keep is not None:
            return s[:keep]
        if drop:
            return s[:1] + s[2:]
        return s
    return rule


FLOAT = "float"


@dataclasses.dataclass
class Case:
    """One entry of a table.  ``call(lib, xs, params)`` runs it with library ``lib`` (``Ours`` or
    ``Torch``) on its tensors ``xs``; ``params(draw, shapes)`` draws keyword arguments."""
    name: str
    call: Callable
    inputs: tuple = ((dims(lead=(0, 3)), FLOAT),)
    params: Callable | None = None
    dtypes: tuple = (F32, F64)
    grad: bool = True
    module: tuple | None = None   # (class name, args, kwargs): build and copy a module's state
    train: bool = True
    known: str = ""     # a discrepancy reported to its owner: its mismatches are listed, not failed
    refuses: str = ""   # a regex: clear errors accepted where torch computes (else a failure)


@dataclasses.dataclass(frozen=True)
class Sub:
    """A module built as the argument of another (``TransformerEncoder(layer, 1)``)."""
    name: str
    args: tuple = ()
    kwargs: tuple = ()   # (key, value) pairs

    def build(self, lib):
        return getattr(lib.nn, self.name)(*self.args, **dict(self.kwargs))

    def __repr__(self):
        return f"{self.name}{self.args}"


def layer(name, *args, inputs=None, train=True, grad=True, known="", refuses="",
          dtypes=(F32, F64), **kwargs):
    return Case(f"{name}{args or ''}{kwargs or ''}", None,
                inputs or ((dims(lead=(0, 3)), FLOAT),), None, dtypes, grad,
                (name, args, kwargs), train, known, refuses)


def loss(name, inputs, *args, known="", refuses="", **kwargs):
    return layer(name, *args, inputs=inputs, known=known, refuses=refuses, **kwargs)


def fn(name, call, inputs=None, params=None, dtypes=(F32, F64), grad=True, known="", refuses=""):
    return Case(name, call, inputs or ((dims(lead=(0, 3)), FLOAT),), params, dtypes, grad,
                known=known, refuses=refuses)


def _st():
    from hypothesis import strategies as st
    return st


def dim_of(k=0):
    """A ``dim`` argument for input ``k``: in range, negative, or out of range."""
    def draw_params(draw, shapes):
        n = len(shapes[k])
        return {"dim": draw(_st().integers(-n - 1, max(n, 1)))}
    return draw_params


def choose(**options):
    """Keyword arguments each drawn from its list of values."""
    def draw_params(draw, shapes):
        return {k: draw(_st().sampled_from(v)) for k, v in options.items()}
    return draw_params


NCHW = dims((1, 4), (1, 4), lead=(0, 1), size=(0, 2))   # (C?, H, W) after the batch dims


def chw(c):
    return dims(c, (1, 5), (1, 5), lead=(0, 1), size=(0, 3))


def ncl(c):
    return dims(c, (1, 5), lead=(1, 1), size=(0, 3))


def cdhw(c):
    return dims(c, (1, 4), (1, 4), (1, 4), lead=(0, 1), size=(1, 2))


REDUCTIONS = ("mean", "sum", "none")
F16_NOTE = "tensor/lowp: a float16 array becomes float32 silently (16-bit dtypes: issue 15)"
# torch trains on an empty batch (NaN statistics); tinyopt refuses it with torch's message for 1
EMPTY_BN = r"^ValueError: Expected more than 1 value per channel when training, got input size \[0,"

# ---- the tables ------------------------------------------------------------------------------
LAYERS = [
    layer("Linear", 4, 3, inputs=((dims(4), FLOAT),)),
    layer("Linear", 4, 3, inputs=((dims(4), FLOAT),), dtypes=ODD, known=F16_NOTE),
    layer("Linear", 4, 3, bias=False, inputs=((dims(4), FLOAT),)),
    layer("Linear", 0, 2, inputs=((dims(0), FLOAT),)),
    layer("Conv2d", 2, 3, 3, padding=1, inputs=((chw(2), FLOAT),)),
    layer("Conv2d", 2, 4, 2, stride=2, groups=2, inputs=((chw(2), FLOAT),)),
    layer("Conv2d", 1, 2, 3, dilation=2, padding=2, bias=False, inputs=((chw(1), FLOAT),)),
    layer("ConvTranspose2d", 2, 3, 3, stride=2, padding=1, inputs=((chw(2), FLOAT),),
          known="speed: weight.grad is NaN at kernel taps that reach only cropped outputs when "
                "the input holds a NaN (torch: only at the taps used)"),
    layer("MaxPool2d", 2, inputs=((chw(2), FLOAT),)),
    layer("MaxPool2d", 3, stride=2, padding=1, inputs=((chw(1), FLOAT),)),
    layer("AvgPool2d", 2, inputs=((chw(2), FLOAT),)),
    layer("AvgPool2d", 3, stride=2, padding=1, count_include_pad=False, inputs=((chw(1), FLOAT),)),
    layer("AdaptiveAvgPool2d", (2, 3), inputs=((chw(2), FLOAT),)),
    layer("AdaptiveAvgPool1d", 2, inputs=((dims(2, (1, 5), lead=(0, 1)), FLOAT),)),
    layer("BatchNorm1d", 3, inputs=((dims(3, lead=(1, 1), size=(0, 4)), FLOAT),), refuses=EMPTY_BN),
    layer("BatchNorm1d", 3, inputs=((ncl(3), FLOAT),), refuses=EMPTY_BN),
    layer("BatchNorm2d", 2, inputs=((dims(2, (1, 3), (1, 3), lead=(1, 1)), FLOAT),),
          refuses=EMPTY_BN),
    layer("BatchNorm2d", 2, train=False, inputs=((dims(2, (1, 3), (1, 3), lead=(1, 1)), FLOAT),)),
    layer("LayerNorm", 4, inputs=((dims(4), FLOAT),)),
    layer("LayerNorm", (2, 3), elementwise_affine=False, inputs=((dims(2, 3), FLOAT),)),
    layer("GroupNorm", 2, 4, inputs=((dims(4, (1, 3), lead=(1, 1)), FLOAT),)),
    layer("InstanceNorm1d", 3, inputs=((ncl(3), FLOAT),)),
    layer("InstanceNorm2d", 2, affine=True,  # (torch's own fails on an empty batch)
          inputs=((dims(2, (1, 3), (1, 3), lead=(1, 1), size=(1, 2)), FLOAT),)),
    layer("Dropout", 0.0),
    layer("Dropout", 0.5, train=False),
    layer("Dropout1d", 0.0, inputs=((dims(2, (1, 4), lead=(0, 1)), FLOAT),)),
    layer("Dropout2d", 0.0, inputs=((chw(2), FLOAT),)),
    layer("ReLU"), layer("ReLU", dtypes=ODD, known=F16_NOTE + "; ReLU on bool computes"),
    layer("ReLU6"), layer("LeakyReLU", 0.1), layer("ELU"),
    # torch's own inconsistency: its float64 CELU (alpha != 1) gives a NaN gradient at a NaN input,
    # its float32 CELU and every ELU give the positive branch's, as tinyopt does in both dtypes
    layer("CELU", 0.5, known="torch: celu's float64 gradient at a NaN input is NaN, float32's is 1"),
    layer("SELU"), layer("GELU"), layer("GELU", approximate="tanh"), layer("SiLU"), layer("Mish"),
    layer("Sigmoid"), layer("Sigmoid", dtypes=ODD, known=F16_NOTE), layer("Tanh"), layer("Softplus"),
    layer("Softplus", beta=2.0, threshold=5.0),
    layer("Hardtanh"), layer("Hardtanh", -0.5, 2.0), layer("LogSigmoid"),
    layer("PReLU", inputs=((dims(1, lead=(0, 2)), FLOAT),)),
    layer("PReLU", 3, inputs=((dims(3, (0, 2), lead=(1, 1)), FLOAT),)),
    layer("Softmax", dim=-1), layer("Softmax", dim=0, inputs=((dims(lead=(1, 3)), FLOAT),)),
    layer("LogSoftmax", dim=1, inputs=((dims(lead=(2, 3)), FLOAT),)),
    layer("Flatten"),
    layer("Flatten", 0, -1), layer("Identity"), layer("Identity", dtypes=ODD, known=F16_NOTE),
    layer("Unflatten", 1, (2, 2), inputs=((dims(4, lead=(1, 1)), FLOAT),)),
    layer("Embedding", 5, 3, inputs=((dims(lead=(0, 2)), ("int", -1, 5)),)),
    layer("Embedding", 4, 2, padding_idx=1, inputs=((dims(lead=(1, 2)), ("int", 0, 3)),)),
    layer("PixelShuffle", 2, inputs=((dims(4, (1, 3), (1, 3), lead=(0, 1)), FLOAT),)),
    layer("PixelUnshuffle", 2,
          inputs=((dims(1, (1, 2), (1, 2), lead=(0, 1), size=(1, 2)), FLOAT),)),
    layer("ZeroPad2d", 1, inputs=((chw(2), FLOAT),)),
    layer("ZeroPad1d", (1, 2), inputs=((dims(2, (1, 4), lead=(0, 1)), FLOAT),)),
    layer("ConstantPad1d", 2, 3.5, inputs=((dims(2, (1, 4), lead=(0, 1)), FLOAT),)),
    layer("ConstantPad2d", (1, 0, 2, 1), -1.0, inputs=((chw(1), FLOAT),)),
    layer("ReflectionPad1d", 1, inputs=((dims(2, (1, 4), lead=(0, 1)), FLOAT),)),
    layer("ReflectionPad2d", 1, inputs=((chw(1), FLOAT),)),
    layer("ReplicationPad1d", 2, inputs=((dims(2, (1, 4), lead=(0, 1)), FLOAT),)),
    layer("ReplicationPad2d", (1, 2, 0, 1), inputs=((chw(1), FLOAT),)),
    layer("Upsample", scale_factor=2, inputs=((chw(1), FLOAT),)),
    layer("Upsample", size=(3, 5), mode="bilinear", inputs=((chw(2), FLOAT),),
          known="porting: bilinear upsampling spreads a NaN to other outputs than torch's"),
    layer("UpsamplingNearest2d", scale_factor=2, inputs=((chw(1), FLOAT),)),
    layer("UpsamplingBilinear2d", scale_factor=2, inputs=((chw(1), FLOAT),)),
    layer("Conv1d", 2, 3, 3, padding=1, inputs=((ncl(2), FLOAT),)),
    layer("Conv1d", 2, 2, 2, stride=2, groups=2, bias=False, inputs=((ncl(2), FLOAT),)),
    layer("MaxPool1d", 2, inputs=((dims(2, (1, 5), lead=(0, 1)), FLOAT),)),
    layer("AvgPool1d", 3, stride=2, padding=1, inputs=((dims(2, (1, 5), lead=(0, 1)), FLOAT),)),
    layer("Dropout3d", 0.0, inputs=((dims(2, (1, 2), (1, 2), (1, 2), lead=(0, 1)), FLOAT),)),
    # (bags of length 0 in a 2-d input: torch's own fails, "step must be nonzero")
    layer("EmbeddingBag", 5, 2, mode="sum", inputs=((dims((1, 3), lead=(1, 1)), ("int", -1, 5)),)),
    layer("EmbeddingBag", 4, 3, inputs=((dims((1, 3), lead=(1, 1)), ("int", 0, 3)),)),
    layer("EmbeddingBag", 4, 2, mode="max", inputs=((dims((1, 3), lead=(1, 1)), ("int", 0, 3)),)),
    layer("RNN", 3, 2, inputs=((dims(3, lead=(1, 2), size=(0, 3)), FLOAT),)),
    layer("RNN", 3, 2, num_layers=2, nonlinearity="relu", batch_first=True,
          inputs=((dims(3, lead=(2, 2), size=(0, 3)), FLOAT),)),
    layer("LSTM", 3, 2, inputs=((dims(3, lead=(1, 2), size=(0, 3)), FLOAT),)),
    layer("LSTM", 2, 3, bidirectional=True, proj_size=2,
          inputs=((dims(2, lead=(2, 2), size=(1, 3)), FLOAT),)),
    layer("GRU", 3, 2, inputs=((dims(3, lead=(1, 2), size=(0, 3)), FLOAT),)),
    layer("GRU", 2, 2, num_layers=2, bidirectional=True, batch_first=True,
          inputs=((dims(2, lead=(2, 2), size=(1, 3)), FLOAT),)),
    layer("RNNCell", 3, 2, inputs=((dims(3, lead=(0, 1)), FLOAT),)),
    layer("LSTMCell", 3, 2, inputs=((dims(3, lead=(0, 1)), FLOAT),)),
    layer("GRUCell", 3, 2, bias=False, inputs=((dims(3, lead=(0, 1)), FLOAT),)),
    layer("MultiheadAttention", 4, 2, inputs=((dims(4, lead=(1, 2), size=(1, 3)), FLOAT),
                                              (like(), FLOAT), (like(), FLOAT))),
    layer("MultiheadAttention", 4, 1, batch_first=True, kdim=3, vdim=2,
          inputs=((dims((1, 2), (1, 2), 4, lead=(0, 0)), FLOAT),
                  (lambda draw, s: (s[0][0], draw(_st().integers(1, 3)), 3), FLOAT),
                  (lambda draw, s: s[1][:2] + (2,), FLOAT))),
    layer("TransformerEncoderLayer", 4, 2, 8, 0.0,
          inputs=((dims(4, lead=(1, 2), size=(1, 3)), FLOAT),)),
    layer("TransformerEncoderLayer", 4, 2, 6, 0.0, batch_first=True, norm_first=True,
          activation="gelu", inputs=((dims(4, lead=(2, 2), size=(1, 3)), FLOAT),)),
    layer("TransformerDecoderLayer", 4, 2, 8, 0.0,
          inputs=((dims(4, lead=(2, 2), size=(1, 3)), FLOAT),
                  (lambda draw, s: (draw(_st().integers(1, 3)),) + s[0][1:], FLOAT))),
    layer("TransformerEncoder", Sub("TransformerEncoderLayer", (4, 2, 8, 0.0)), 2,
          inputs=((dims(4, lead=(2, 2), size=(1, 3)), FLOAT),)),
    layer("TransformerDecoder", Sub("TransformerDecoderLayer", (4, 2, 8, 0.0)), 1,
          inputs=((dims(4, lead=(2, 2), size=(1, 3)), FLOAT),
                  (lambda draw, s: (draw(_st().integers(1, 3)),) + s[0][1:], FLOAT))),
    layer("Transformer", 4, 2, 1, 1, 8, 0.0,
          inputs=((dims(4, lead=(2, 2), size=(1, 3)), FLOAT),
                  (lambda draw, s: (draw(_st().integers(1, 3)),) + s[0][1:], FLOAT))),
    layer("CosineSimilarity", dim=1, inputs=((dims(3, lead=(1, 2)), FLOAT), (like(), FLOAT))),
    layer("PairwiseDistance", inputs=((dims(3, lead=(1, 1)), FLOAT), (like(), FLOAT))),
    layer("Conv3d", 2, 3, 2, padding=1, inputs=((cdhw(2), FLOAT),)),
    layer("ConvTranspose3d", 2, 2, 2, stride=2, inputs=((cdhw(2), FLOAT),)),
    layer("MaxPool3d", 2, inputs=((cdhw(1), FLOAT),)),
    layer("AvgPool3d", 2, inputs=((cdhw(2), FLOAT),)),
    layer("AdaptiveAvgPool3d", (1, 2, 2), inputs=((cdhw(2), FLOAT),)),
    layer("BatchNorm3d", 2, inputs=((dims(2, (1, 2), (1, 2), (1, 2), lead=(1, 1)), FLOAT),),
          refuses=EMPTY_BN),
    layer("AdaptiveMaxPool2d", (2, 1), inputs=((chw(2), FLOAT),)),
    layer("AdaptiveMaxPool1d", 2, inputs=((dims(2, (1, 5), lead=(0, 1)), FLOAT),)),
    layer("AdaptiveMaxPool3d", (2, 1, None), inputs=((cdhw(2), FLOAT),)),
    layer("LPPool1d", 2, 2, inputs=((dims(2, (2, 5), lead=(0, 1)), FLOAT),)),
    layer("LPPool2d", 2, 2, stride=1, inputs=((dims(2, (2, 4), (2, 4), lead=(0, 1)), FLOAT),)),
    layer("LPPool3d", 1.5, 1, inputs=((cdhw(2), FLOAT),)),
    layer("GLU", inputs=((dims(4, lead=(0, 2)), FLOAT),)),
    layer("Hardsigmoid", known="torch: float64 hardsigmoid's gradient is computed with a float32 "
                               "1/6 (3e-8 relative off); tinyopt's with the float64 one"),
    layer("Hardswish"),
    layer("Softsign"), layer("Tanhshrink"), layer("Threshold", 0.1, -2.0), layer("Hardshrink", 0.3),
    layer("Softshrink", 0.3), layer("Softmax2d", inputs=((chw(2), FLOAT),)),
    layer("RMSNorm", 4, inputs=((dims(4), FLOAT),)),
    layer("Unfold", 2, inputs=((dims(2, (2, 4), (2, 4), lead=(1, 1)), FLOAT),)),
    layer("Fold", (3, 3), 2, inputs=((dims(8, 4, lead=(1, 1)), FLOAT),)),
]

# losses: (input, target[, ...]) with every reduction
_SAME = ((dims(lead=(0, 3)), FLOAT), (like(), FLOAT))
_CLASSES = ((dims(4, lead=(1, 1), size=(0, 4)), FLOAT), (like(keep=1), ("int", -1, 4)))
_CLASSES_ND = ((dims(3, (1, 3), lead=(1, 1), size=(1, 3)), FLOAT), (like(drop=1), ("int", 0, 3)))
LOSSES = [
    *(loss("MSELoss", _SAME, reduction=r) for r in REDUCTIONS),
    *(loss("L1Loss", _SAME, reduction=r) for r in REDUCTIONS),
    loss("SmoothL1Loss", _SAME, beta=0.5),
    loss("SmoothL1Loss", _SAME, reduction="none"),
    loss("HuberLoss", _SAME, delta=2.0), loss("HuberLoss", _SAME, reduction="sum"),
    *(loss("BCELoss", ((dims(lead=(0, 3)), "prob"), (like(), "prob")), reduction=r)
      for r in REDUCTIONS),
    *(loss("BCEWithLogitsLoss", _SAME, reduction=r) for r in REDUCTIONS),
    loss("KLDivLoss", _SAME, reduction="batchmean"),
    loss("KLDivLoss", _SAME, reduction="sum", log_target=True),
    *(loss("CrossEntropyLoss", _CLASSES, reduction=r) for r in REDUCTIONS),
    loss("CrossEntropyLoss", _CLASSES, label_smoothing=0.1),
    loss("CrossEntropyLoss", _CLASSES, ignore_index=2),
    loss("CrossEntropyLoss", _CLASSES_ND, reduction="none"),
    *(loss("NLLLoss", _CLASSES, reduction=r) for r in REDUCTIONS),
    loss("NLLLoss", _CLASSES_ND),
    loss("MarginRankingLoss", ((dims(lead=(1, 1)), FLOAT), (like(), FLOAT), (like(), "sign")),
         margin=0.5),
    loss("CosineEmbeddingLoss", ((dims(3, lead=(1, 1)), FLOAT), (like(), FLOAT),
                                 (like(keep=1), "sign"))),
    loss("TripletMarginLoss", ((dims(3, lead=(1, 1)), FLOAT), (like(), FLOAT), (like(), FLOAT))),
]

FUNCTIONALS = [
    fn("conv3d", lambda L, x, p: L.F.conv3d(x[0], x[1], **p),
       known="speed: a NaN weight times the zero padding: torch's outputs are NaN there, "
             "tinyopt skips the padding (as conv2d, the other way round)",
       inputs=((cdhw(2), FLOAT), (dims(2, (1, 2), (1, 2), (1, 2), lead=(1, 1), size=(1, 2)),
                                  FLOAT)),
       params=choose(stride=[1, 2], padding=[0, 1])),
    fn("conv_transpose3d", lambda L, x, p: L.F.conv_transpose3d(x[0], x[1], **p),
       inputs=((cdhw(2), FLOAT), (dims(2, (1, 2), (1, 2), (1, 2), lead=(0, 0)), FLOAT)),
       params=choose(stride=[1, 2])),
    fn("max_pool3d", lambda L, x, p: L.F.max_pool3d(x[0], **p), inputs=((cdhw(1), FLOAT),),
       params=choose(kernel_size=[1, 2], stride=[None, 1], padding=[0, 1])),
    fn("avg_pool3d", lambda L, x, p: L.F.avg_pool3d(x[0], **p), inputs=((cdhw(1), FLOAT),),
       params=choose(kernel_size=[1, 2], stride=[None, 1], padding=[0, 1])),
    fn("adaptive_avg_pool3d", lambda L, x, p: L.F.adaptive_avg_pool3d(x[0], **p),
       inputs=((cdhw(1), FLOAT),), params=choose(output_size=[1, (2, 1, 3)])),
    fn("adaptive_max_pool2d", lambda L, x, p: L.F.adaptive_max_pool2d(x[0], **p),
       inputs=((chw(2), FLOAT),), params=choose(output_size=[1, (2, 3)])),
    fn("adaptive_max_pool1d", lambda L, x, p: L.F.adaptive_max_pool1d(x[0], **p),
       inputs=((dims(2, (1, 5), lead=(0, 1)), FLOAT),),
       params=choose(output_size=[1, 3], return_indices=[False, True])),
    fn("adaptive_max_pool3d", lambda L, x, p: L.F.adaptive_max_pool3d(x[0], **p),
       inputs=((cdhw(1), FLOAT),), params=choose(output_size=[1, (2, None, 3)])),
    fn("lp_pool1d", lambda L, x, p: L.F.lp_pool1d(x[0], **p),
       inputs=((dims(1, (2, 5), lead=(0, 1)), FLOAT),),
       params=choose(norm_type=[2, 3.0], kernel_size=[1, 2], stride=[None, 1])),
    fn("lp_pool2d", lambda L, x, p: L.F.lp_pool2d(x[0], **p),
       inputs=((dims(1, (2, 4), (2, 4), lead=(0, 1)), FLOAT),),
       params=choose(norm_type=[1, 2, float("inf")], kernel_size=[1, 2], ceil_mode=[False, True])),
    fn("lp_pool3d", lambda L, x, p: L.F.lp_pool3d(x[0], **p),
       inputs=((cdhw(1), FLOAT),), params=choose(norm_type=[2], kernel_size=[1, (1, 1, 1)])),
    fn("glu", lambda L, x, p: L.F.glu(x[0], **p), inputs=((dims(2, 4, lead=(0, 1)), FLOAT),),
       params=choose(dim=[-1, -2])),
    fn("hardsigmoid", lambda L, x, p: L.F.hardsigmoid(x[0]),
       known="torch: float64 hardsigmoid's gradient uses a float32 1/6"),
    fn("hardswish", lambda L, x, p: L.F.hardswish(x[0])),
    fn("softsign", lambda L, x, p: L.F.softsign(x[0])),
    fn("tanhshrink", lambda L, x, p: L.F.tanhshrink(x[0])),
    fn("threshold", lambda L, x, p: L.F.threshold(x[0], 0.2, **p), params=choose(value=[0.0, 5.0])),
    fn("hardshrink", lambda L, x, p: L.F.hardshrink(x[0], **p), params=choose(lambd=[0.0, 0.5])),
    fn("softshrink", lambda L, x, p: L.F.softshrink(x[0], **p), params=choose(lambd=[0.0, 0.5])),
    fn("rms_norm", lambda L, x, p: L.F.rms_norm(x[0], (3,), x[1], **p),
       inputs=((dims(3), FLOAT), (dims(3, lead=(0, 0)), FLOAT)), params=choose(eps=[None, 0.1])),
    fn("unfold", lambda L, x, p: L.F.unfold(x[0], **p),
       inputs=((dims(2, (2, 4), (2, 4), lead=(1, 1)), FLOAT),),
       params=choose(kernel_size=[1, 2], padding=[0, 1], stride=[1, 2])),
    fn("fold", lambda L, x, p: L.F.fold(x[0], (3, 4), 2, **p),
       inputs=((dims(8, 6, lead=(1, 1)), FLOAT),), params=choose(stride=[1])),
    fn("affine_grid", lambda L, x, p: L.F.affine_grid(x[0], [1, 1, 3, 4], **p),
       inputs=((dims(2, 3, lead=(0, 0)), FLOAT),),
       params=choose(align_corners=[False, True])),
    fn("grid_sample", lambda L, x, p: L.F.grid_sample(x[0], x[1], **p),
       inputs=((dims(1, 2, (2, 4), (2, 4), lead=(0, 0)), FLOAT),
               (dims(1, (1, 3), (1, 3), 2, lead=(0, 0)), FLOAT)),
       params=choose(mode=["bilinear", "nearest"], padding_mode=["zeros", "border", "reflection"],
                     align_corners=[False, True])),
    fn("softmax", lambda L, x, p: L.F.softmax(x[0], **p), params=dim_of()),
    fn("log_softmax", lambda L, x, p: L.F.log_softmax(x[0], **p), params=dim_of()),
    fn("normalize", lambda L, x, p: L.F.normalize(x[0], **p), params=dim_of()),
    fn("relu", lambda L, x, p: L.F.relu(x[0])),
    fn("gelu", lambda L, x, p: L.F.gelu(x[0], **p), params=choose(approximate=["none", "tanh"])),
    fn("leaky_relu", lambda L, x, p: L.F.leaky_relu(x[0], **p),
       params=choose(negative_slope=[0.0, 0.01, -2.0])),
    fn("elu", lambda L, x, p: L.F.elu(x[0], **p), params=choose(alpha=[1.0, 0.3])),
    fn("hardtanh", lambda L, x, p: L.F.hardtanh(x[0], **p),
       params=choose(min_val=[-1.0, 0.5], max_val=[1.0, 0.0])),
    fn("softplus", lambda L, x, p: L.F.softplus(x[0], **p),
       params=choose(beta=[1.0, 0.5, 3.0], threshold=[20.0, 1.0])),
    fn("linear", lambda L, x, p: L.F.linear(x[0], x[1], x[2]),
       inputs=((dims(3), FLOAT), (dims(3, lead=(1, 1), size=(0, 3)), FLOAT),
               (like(1, keep=1), FLOAT))),
    fn("linear-int", lambda L, x, p: L.F.linear(x[0], x[1]), grad=False,
       known="tensor: F.linear(int64 x, float32 w) promotes, torch raises RuntimeError",
       inputs=((dims(3), ("int", -3, 3)), (dims(3, lead=(1, 1)), FLOAT))),
    fn("cross_entropy", lambda L, x, p: L.F.cross_entropy(x[0], x[1], **p),
       inputs=((dims(3, lead=(1, 1), size=(0, 4)), FLOAT), (like(keep=1), ("int", -2, 4))),
       params=choose(reduction=REDUCTIONS, label_smoothing=[0.0, 0.2], ignore_index=[-100, -1])),
    fn("nll_loss", lambda L, x, p: L.F.nll_loss(x[0], x[1], **p),
       inputs=((dims(3, lead=(1, 1), size=(0, 4)), FLOAT), (like(keep=1), ("int", -2, 4))),
       params=choose(reduction=REDUCTIONS)),
    fn("cross_entropy-computed-targets",  # targets made by the graph: checked when read
       lambda L, x, p: L.F.cross_entropy(x[0], L.computed(x[1]), **p),
       inputs=((dims(3, lead=(1, 1), size=(0, 4)), FLOAT), (like(keep=1), ("int", -2, 4))),
       params=choose(reduction=REDUCTIONS)),
    fn("nll_loss-computed-targets", lambda L, x, p: L.F.nll_loss(x[0], L.computed(x[1])),
       inputs=((dims(3, lead=(1, 1), size=(0, 4)), FLOAT), (like(keep=1), ("int", -2, 4)))),
    fn("embedding-computed-indices", lambda L, x, p: L.F.embedding(L.computed(x[0]), x[1]),
       inputs=((dims(lead=(0, 2)), ("int", -2, 4)), (dims(2, lead=(1, 1), size=(1, 4)), FLOAT))),
    fn("one_hot-computed-indices", lambda L, x, p: L.F.one_hot(L.computed(x[0]), 3),
       grad=False, inputs=((dims(lead=(0, 2)), ("int", -1, 4)),)),
    fn("cross_entropy-1d", lambda L, x, p: L.F.cross_entropy(x[0], x[1]),
       inputs=((dims((0, 3), lead=(0, 0)), FLOAT), (dims(lead=(0, 0)), ("int", -1, 3)))),
    fn("one_hot", lambda L, x, p: L.F.one_hot(x[0], **p), grad=False,
       inputs=((dims(lead=(0, 2)), ("int", -1, 4)),), params=choose(num_classes=[-1, 0, 3, 5])),
    fn("embedding", lambda L, x, p: L.F.embedding(x[0], x[1], **p),
       inputs=((dims(lead=(0, 2)), ("int", -2, 4)), (dims(2, lead=(1, 1), size=(0, 4)), FLOAT)),
       params=choose(padding_idx=[None, 0, -1])),
    fn("pad", lambda L, x, p: L.F.pad(x[0], **p), inputs=((chw(1), FLOAT),),
       params=choose(pad=[(1, 1), (0, 2, 1, 0), (-1, 1)], mode=["constant", "reflect",
                                                                 "replicate"])),
    fn("interpolate", lambda L, x, p: L.F.interpolate(x[0], **p), inputs=((chw(1), FLOAT),),
       params=choose(scale_factor=[2, 0.5], mode=["nearest", "bilinear"])),
    fn("max_pool2d", lambda L, x, p: L.F.max_pool2d(x[0], **p), inputs=((chw(1), FLOAT),),
       params=choose(kernel_size=[1, 2, 3], stride=[None, 1, 2], padding=[0, 1])),
    fn("avg_pool2d", lambda L, x, p: L.F.avg_pool2d(x[0], **p), inputs=((chw(1), FLOAT),),
       params=choose(kernel_size=[1, 2, 3], stride=[None, 2], padding=[0, 1],
                     ceil_mode=[False, True])),
    fn("conv2d", lambda L, x, p: L.F.conv2d(x[0], x[1], **p),
       known="speed: a NaN weight times the zero padding gives NaN outputs; torch's do not",
       inputs=((chw(2), FLOAT), (dims(2, (1, 3), (1, 3), lead=(1, 1), size=(1, 3)), FLOAT)),
       params=choose(stride=[1, 2], padding=[0, 1, "same"], dilation=[1, 2])),
    fn("batch_norm", lambda L, x, p: L.F.batch_norm(x[0], x[1], x[2], training=False), grad=False,
       # running statistics are updated in place, so a strided view is refused (even in eval)
       refuses=r"^TypeError: batch_norm: running_(mean|var) must be a writable contiguous",
       inputs=((dims(3, lead=(1, 1), size=(1, 3)), FLOAT), (dims(3, lead=(0, 0)), "prob"),
               (like(1), "prob"))),
    fn("layer_norm", lambda L, x, p: L.F.layer_norm(x[0], tuple(x[0].shape[-1:])),
       inputs=((dims((1, 3), lead=(0, 2)), FLOAT),)),
    fn("cosine_similarity", lambda L, x, p: L.F.cosine_similarity(x[0], x[1], **p),
       inputs=((dims(3, lead=(0, 2)), FLOAT), (like(), FLOAT)), params=dim_of()),
    *(fn(name, (lambda name: lambda L, x, p: getattr(L.F, name)(x[0]))(name))
      for name in ("celu", "selu", "silu", "sigmoid", "tanh", "mish", "relu6", "logsigmoid")),
    fn("conv1d", lambda L, x, p: L.F.conv1d(x[0], x[1], x[2], **p),
       inputs=((ncl(2), FLOAT), (dims(2, (1, 3), lead=(1, 1), size=(1, 3)), FLOAT),
               (like(1, keep=1), FLOAT)),
       params=choose(stride=[1, 2], padding=[0, 1, "same"], dilation=[1, 2])),
    fn("conv_transpose2d", lambda L, x, p: L.F.conv_transpose2d(x[0], x[1], **p),
       inputs=((chw(2), FLOAT), (dims(2, (1, 3), (1, 3), (1, 3), lead=(0, 0)), FLOAT)),
       params=choose(stride=[1, 2], padding=[0, 1], output_padding=[0, 1])),
    fn("max_pool1d", lambda L, x, p: L.F.max_pool1d(x[0], **p),
       inputs=((dims(1, (1, 5), lead=(0, 1)), FLOAT),),
       params=choose(kernel_size=[1, 2, 3], stride=[None, 1], padding=[0, 1])),
    fn("avg_pool1d", lambda L, x, p: L.F.avg_pool1d(x[0], **p),
       inputs=((dims(1, (1, 5), lead=(0, 1)), FLOAT),),
       params=choose(kernel_size=[1, 2, 3], stride=[None, 2], padding=[0, 1],
                     ceil_mode=[False, True], count_include_pad=[True, False])),
    fn("adaptive_avg_pool1d", lambda L, x, p: L.F.adaptive_avg_pool1d(x[0], **p),
       inputs=((dims(2, (1, 5), lead=(0, 1)), FLOAT),), params=choose(output_size=[1, 2, 4])),
    fn("adaptive_avg_pool2d", lambda L, x, p: L.F.adaptive_avg_pool2d(x[0], **p),
       inputs=((chw(1), FLOAT),), params=choose(output_size=[1, (2, 1), 3])),
    fn("group_norm", lambda L, x, p: L.F.group_norm(x[0], 2, x[1], x[2]),
       known="porting: an inf weight gives +-inf outputs where torch's fused scale-and-shift "
             "gives NaN; on a constant group torch's weight gradient keeps a rounding residue "
             "(about 6e-5) where tinyopt's is exactly 0",
       inputs=((dims(4, (1, 3), lead=(1, 1)), FLOAT), (dims(4, lead=(0, 0)), FLOAT),
               (like(1), FLOAT))),
    fn("instance_norm", lambda L, x, p: L.F.instance_norm(x[0], weight=x[1], bias=x[2]),
       known="porting: with NaN/inf in the weight or bias, outputs and input gradients are NaN "
             "where torch's are not",
       inputs=((dims(2, (1, 3), lead=(1, 1), size=(1, 2)), FLOAT), (dims(2, lead=(0, 0)), FLOAT),
               (like(1), FLOAT))),
    fn("prelu", lambda L, x, p: L.F.prelu(x[0], x[1]),
       inputs=((dims(2, (0, 2), lead=(1, 1)), FLOAT), (dims((1, 2), lead=(0, 0)), FLOAT))),
    fn("embedding_bag", lambda L, x, p: L.F.embedding_bag(x[0], x[1], x[2], **p),
       inputs=((dims((0, 5), lead=(0, 0)), ("int", -1, 3)),
               (dims(2, lead=(1, 1), size=(1, 4)), FLOAT),
               (dims((1, 3), lead=(0, 0)), ("int", 0, 6))),
       params=choose(mode=["sum", "mean", "max"], include_last_offset=[False, True])),
    fn("scaled_dot_product_attention",
       lambda L, x, p: L.F.scaled_dot_product_attention(x[0], x[1], x[2], **p),
       inputs=((dims((1, 3), (1, 3), lead=(0, 2), size=(0, 2)), FLOAT),
               (lambda draw, s: s[0][:-2] + (draw(_st().integers(0, 3)), s[0][-1]), FLOAT),
               (lambda draw, s: s[1][:-1] + (draw(_st().integers(1, 3)),), FLOAT)),
       params=choose(is_causal=[False, True], scale=[None, 0.5])),
    *(fn(name, (lambda name: lambda L, x, p: getattr(L.F, name)(x[0], **p))(name),
         inputs=((dims(2, (1, 2), (1, 2), (1, 2), lead=(0, 1)), FLOAT),),
         params=choose(p=[0.0, 0.5], training=[False]) if name != "dropout" else
         choose(p=[0.0, 0.5, 1.0], training=[False]))
      for name in ("dropout", "dropout1d", "dropout2d", "dropout3d")),
    fn("pixel_shuffle", lambda L, x, p: L.F.pixel_shuffle(x[0], 2),
       inputs=((dims((3, 5), (1, 2), (1, 2), lead=(0, 1)), FLOAT),)),
    fn("pixel_unshuffle", lambda L, x, p: L.F.pixel_unshuffle(x[0], 2),
       inputs=((dims(1, (1, 4), (1, 4), lead=(0, 1)), FLOAT),)),
    fn("upsample", lambda L, x, p: L.F.upsample(x[0], **p), inputs=((chw(1), FLOAT),),
       params=choose(scale_factor=[2, 3], mode=["nearest"])),
    fn("binary_cross_entropy", lambda L, x, p: L.F.binary_cross_entropy(x[0], x[1], x[2], **p),
       inputs=((dims(lead=(0, 2)), "prob"), (like(), "prob"), (like(), "prob")),
       params=choose(reduction=REDUCTIONS)),
    fn("binary_cross_entropy_with_logits",
       lambda L, x, p: L.F.binary_cross_entropy_with_logits(x[0], x[1], pos_weight=x[2], **p),
       inputs=((dims(3, lead=(0, 2)), FLOAT), (like(), "prob"), (dims(3, lead=(0, 0)), "prob")),
       params=choose(reduction=REDUCTIONS)),
    *(fn(name, (lambda name: lambda L, x, p: getattr(L.F, name)(x[0], x[1], **p))(name),
         inputs=_SAME, params=choose(reduction=REDUCTIONS))
      for name in ("l1_loss", "huber_loss", "smooth_l1_loss")),
    fn("kl_div", lambda L, x, p: L.F.kl_div(x[0], x[1], **p), inputs=_SAME,
       params=choose(reduction=["sum", "batchmean"], log_target=[False, True])),
    fn("margin_ranking_loss", lambda L, x, p: L.F.margin_ranking_loss(x[0], x[1], x[2], **p),
       inputs=((dims(lead=(1, 1)), FLOAT), (like(), FLOAT), (like(), "sign")),
       params=choose(margin=[0.0, 1.0], reduction=REDUCTIONS)),
    fn("cosine_embedding_loss",
       lambda L, x, p: L.F.cosine_embedding_loss(x[0], x[1], x[2], **p),
       inputs=((dims(3, lead=(1, 1)), FLOAT), (like(), FLOAT), (like(keep=1), "sign")),
       params=choose(margin=[0.0, 0.5], reduction=REDUCTIONS)),
    fn("triplet_margin_loss",
       lambda L, x, p: L.F.triplet_margin_loss(x[0], x[1], x[2], **p),
       inputs=((dims(3, lead=(0, 1)), FLOAT), (like(), FLOAT), (like(), FLOAT)),
       params=choose(p=[1.0, 2.0], swap=[False, True], reduction=REDUCTIONS)),
    fn("pairwise_distance", lambda L, x, p: L.F.pairwise_distance(x[0], x[1], **p),
       inputs=((dims(3, lead=(0, 1)), FLOAT), (like(), FLOAT)),
       params=choose(p=[1.0, 2.0, 3.0], keepdim=[False, True])),
    fn("mse_loss-broadcast", lambda L, x, p: L.F.mse_loss(x[0], x[1]),
       # torch broadcasts with a warning that it is likely a mistake; tinyopt refuses
       refuses=r"^ValueError: mse_loss: target size .* must be the same as input size",
       inputs=((dims(3, lead=(0, 1)), FLOAT), (dims(lead=(0, 1)), FLOAT))),
]


DEEP = EXAMPLES >= 20  # a deep run also walks the optimizers' compile-time switches


def _opt(name, switches=None, known="", **values):
    """An optimizer case: ``values`` are run-time hyperparameters, each drawn from its list;
    ``switches`` select a kernel compiled for them (numba compiles each combination once, which a
    CI-sized run cannot afford for all): drawn in a deep run, else their first values."""
    switches = switches or {}

    def draw_params(draw, shapes):
        grid = {**values, **(switches if DEEP else {k: v[:1] for k, v in switches.items()})}
        return choose(**grid)(draw, shapes)
    return Case(f"{name}", None, (), draw_params, (F32, F64), module=(name, (), {}), known=known)


OPTIMIZERS = [
    _opt("SGD", lr=[0.1, 0.0, -0.1], dampening=[0.0, 0.5],
         switches=dict(momentum=[0.9, 0.0], nesterov=[False, True], weight_decay=[0.0, 0.1],
                       maximize=[False, True])),
    _opt("Adam", lr=[1e-2, 1.0], betas=[(0.9, 0.999), (0.0, 0.5), (1.0, 0.9)],
         eps=[1e-8, 0.0, -1.0], switches=dict(weight_decay=[0.0, 0.1], amsgrad=[False, True],
                                              maximize=[False, True])),
    _opt("AdamW", lr=[1e-3, 0.5], weight_decay=[0.01, 0.0],
         switches=dict(amsgrad=[False, True])),
    _opt("RMSprop", lr=[1e-2], alpha=[0.99, 0.5],  # (alpha=0 + centered: see the issue-9 note)
         switches=dict(momentum=[0.0, 0.9], centered=[False, True], weight_decay=[0.0, 0.1])),
    _opt("Adagrad", lr=[1e-2, 0.5], lr_decay=[0.0, 0.1], initial_accumulator_value=[0.0, 0.5],
         eps=[1e-10, -1.0], switches=dict(weight_decay=[0.0, 0.2])),
    # dense gradients here: refused as by torch (its row-sparse ones from Embedding(sparse=True)
    # are tested in tests/test_sparse_adam.py)
    _opt("SparseAdam", lr=[1e-3, 0.1], betas=[(0.9, 0.999), (0.0, 0.5)]),
    _opt("Adadelta", lr=[1.0, 0.1], rho=[0.9, 0.0], eps=[1e-6, 0.0],
         switches=dict(weight_decay=[0.0, 0.1], maximize=[False, True])),
    _opt("Adamax", lr=[2e-3, 0.5], betas=[(0.9, 0.999), (0.0, 0.5)], eps=[1e-8, 0.0],
         switches=dict(weight_decay=[0.0, 0.1])),
    _opt("NAdam", lr=[2e-3, 0.5], betas=[(0.9, 0.999), (0.0, 0.5)], momentum_decay=[4e-3, 0.0],
         switches=dict(weight_decay=[0.0, 0.1], decoupled_weight_decay=[False, True])),
    _opt("RAdam", lr=[1e-3, 0.5], betas=[(0.9, 0.999), (0.0, 0.5)],
         switches=dict(weight_decay=[0.0, 0.1], decoupled_weight_decay=[False, True])),
    _opt("ASGD", lr=[1e-2, 0.5], lambd=[1e-4, 0.0], alpha=[0.75, 1.0], t0=[1e6, 1.0],
         switches=dict(weight_decay=[0.0, 0.1])),
    _opt("Rprop", lr=[1e-2, 0.5], etas=[(0.5, 1.2), (0.1, 2.0)],
         step_sizes=[(1e-6, 50.0), (0.0, 1.0)], switches=dict(maximize=[False, True])),
    _opt("Adafactor", lr=[1e-2, 0.5], beta2_decay=[-0.8, -0.5], weight_decay=[0.0, 0.1]),
    # 2-d parameters only: the 0-d/1-d draws check that both libraries refuse them
    _opt("Muon", lr=[1e-3, 0.1], momentum=[0.95, 0.0], nesterov=[True, False],
         weight_decay=[0.1, 0.0]),
    # step(closure): the closure hands the step's drawn gradients to every evaluation
    _opt("LBFGS", lr=[1.0, 0.1], max_iter=[3, 1], history_size=[2, 5],
         known="optim: torch's LBFGS raises on a group of empty parameters only (max() of an "
               "empty tensor); tinyopt's step leaves them as they are"),
]

TABLES = {"layers": LAYERS, "losses": LOSSES, "functionals": FUNCTIONALS,
          "optimizers": OPTIMIZERS}


# ---- the two libraries behind one face ---------------------------------------------------------
class Ours:
    name = "tinyopt"

    def __init__(self):
        import tinyopt
        self.to = tinyopt
        self.nn = tinyopt.nn
        self.F = tinyopt.nn.functional
        self.optim = tinyopt.optim

    def tensor(self, a, grad):
        if grad:
            return self.to.tensor(a, requires_grad=True)
        return a  # the array itself: layouts (non-contiguous) reach the library as given

    def value(self, t):
        return t.numpy() if hasattr(t, "numpy") else np.asarray(t)

    def computed(self, a):
        """``a`` as the output of a graph node rather than a leaf."""
        return self.to.tensor(a) + 0

    def grad(self, t):
        g = t.grad
        return None if g is None else np.asarray(g.numpy() if hasattr(g, "numpy") else g)

    def backward(self, outs, gs):
        sum((o * self.to.tensor(g)).sum() for o, g in zip(outs, gs)).backward()

    def state(self, module):
        return {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                for k, v in module.state_dict().items()}

    def param(self, a):
        return self.nn.Parameter(a.copy())

    def set_grad(self, p, g):
        p.grad = None if g is None else g.copy()

    def seed(self):
        self.to.manual_seed(0)


class Torch:
    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch
        self.nn = torch.nn
        self.F = torch.nn.functional
        self.optim = torch.optim

    def tensor(self, a, grad):
        t = self.torch.from_numpy(np.array(a, order="C"))  # (keeps 0-d arrays 0-d)
        return t.requires_grad_() if grad else t

    def value(self, t):
        return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)

    def computed(self, t):
        return t + 0

    def grad(self, t):
        return None if t.grad is None else t.grad.numpy()

    def backward(self, outs, gs):
        sum((o * self.torch.from_numpy(g)).sum() for o, g in zip(outs, gs)).backward()

    def state(self, module):
        return {k: v.detach().numpy() for k, v in module.state_dict().items()}

    def param(self, a):
        return self.nn.Parameter(self.torch.from_numpy(a.copy()))

    def set_grad(self, p, g):
        p.grad = None if g is None else self.torch.from_numpy(g.copy())

    def seed(self):
        self.torch.manual_seed(0)


# ---- one example -------------------------------------------------------------------------------
class Mismatch(AssertionError):
    pass


def _draw_array(draw, shape, kind, dtype):
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    if isinstance(kind, tuple):  # ("int", lo, hi)
        return draw(hnp.arrays(np.int64, shape, elements=st.integers(kind[1], kind[2])))
    if kind == "sign":
        return draw(hnp.arrays(dtype, shape, elements=st.sampled_from([-1.0, 1.0])))
    if dtype.kind in "biu":  # a float input given as integers or bools: refused or computed
        return draw(hnp.arrays(dtype, shape, elements=st.integers(0, 1) if dtype == BOOL
                               else st.integers(-4, 4))).astype(dtype)
    if dtype == F16:
        return draw(hnp.arrays(dtype, shape, elements=st.floats(-4, 4, width=16)))
    lo, hi = (0.0, 1.0) if kind == "prob" else (-4.0, 4.0)
    width = 32 if dtype == F32 else 64
    a = draw(hnp.arrays(dtype, shape, elements=st.floats(lo, hi, width=width)))
    if a.size and kind == FLOAT and draw(st.booleans()):  # NaN, inf, signed zeros
        for _ in range(draw(st.integers(1, 2))):
            a.flat[draw(st.integers(0, a.size - 1))] = draw(st.sampled_from(
                [math.nan, math.inf, -math.inf, -0.0]))
    if a.ndim and a.size and draw(st.booleans()):  # the same values, not contiguous
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        wide[..., ::2] = a
        a = wide[..., ::2]
    return a


def _build(lib, spec):
    name, args, kwargs = spec
    return getattr(lib.nn, name)(*(a.build(lib) if isinstance(a, Sub) else a for a in args),
                                 **kwargs)


def _flat(out):
    """The tensors of an output: itself, or those of a (nested) tuple, without Nones."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [] if out is None else [out]


def _outcome(lib, case, arrays, params, grad):
    """``("ok", {name: array})`` or ``("error", exception)`` of running ``case`` with ``lib``."""
    try:
        lib.seed()
        xs = [lib.tensor(a, grad and a.dtype.kind == "f") for a in arrays]
        module = None
        if case.module is not None:
            module = _build(lib, case.module)
            if params["$dtype"] == F64:
                module = module.double()
            module.train(case.train)
            if lib.name == "torch":  # the same weights as ours
                import torch
                module.load_state_dict({k: torch.from_numpy(v.copy())
                                        for k, v in params["$state"].items()})
            out = module(*xs)
        else:
            out = case.call(lib, xs, params)
        outs = _flat(out)
        res = {f"out {i}" if len(outs) > 1 else "out": lib.value(o) for i, o in enumerate(outs)}
        floats = [(o, v) for o, v in zip(outs, res.values()) if v.dtype.kind == "f"]
        if grad and floats:
            lib.backward([o for o, _ in floats],
                         [np.random.default_rng(v.size + i).uniform(-1, 1, v.shape).astype(v.dtype)
                          for i, (_, v) in enumerate(floats)])
            for i, x in enumerate(xs):
                if not isinstance(x, np.ndarray) and arrays[i].dtype.kind == "f":
                    res[f"grad x{i}"] = lib.grad(x)
            if module is not None:
                for k, p in module.named_parameters():
                    res[f"grad {k}"] = lib.grad(p)
        if module is not None:
            res.update({f"state {k}": v for k, v in lib.state(module).items()})
        return "ok", res
    except Exception as e:  # noqa: BLE001 - classified by the caller
        return "error", e


def _close(a, b, where):
    if a is None or b is None:
        if (a is None) != (b is None):
            raise Mismatch(f"{where}: tinyopt {'None' if a is None else 'a value'}, torch "
                           f"{'None' if b is None else 'a value'}")
        return
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise Mismatch(f"{where}: shape {a.shape}, torch {b.shape}")
    if a.dtype != b.dtype and not (a.dtype.kind == b.dtype.kind == "b"):
        raise Mismatch(f"{where}: dtype {a.dtype}, torch {b.dtype}")
    if a.dtype.kind not in "fc":
        if not np.array_equal(a, b):
            raise Mismatch(f"{where}: {a.ravel()[:8]} vs torch {b.ravel()[:8]}")
        return
    x, y = a.astype(np.float64), b.astype(np.float64)
    if not np.array_equal(np.isnan(x), np.isnan(y)):
        raise Mismatch(f"{where}: NaN at {np.argwhere(np.isnan(x))[:4].tolist()}, torch at "
                       f"{np.argwhere(np.isnan(y))[:4].tolist()}")
    fin = np.isfinite(y)
    if not np.array_equal(x[~fin & ~np.isnan(y)], y[~fin & ~np.isnan(y)]) or \
            not np.array_equal(np.isfinite(x), fin):
        raise Mismatch(f"{where}: inf pattern differs ({x.ravel()[:8]} vs torch {y.ravel()[:8]})")
    if fin.any():
        scale = 1.0 + np.abs(y[fin]).max()
        rtol, atol = (2e-4, 2e-5 * scale) if a.dtype == F32 else (1e-9, 1e-11 * scale)
        bad = ~np.isclose(x[fin], y[fin], rtol=rtol, atol=atol)
        if bad.any():
            i = int(np.argmax(bad))
            raise Mismatch(f"{where}: {x[fin][i]!r} vs torch {y[fin][i]!r} (of {bad.sum()} "
                           f"values differing)")


def _internal(e: BaseException) -> bool:
    """An error that is a bug, not a clear refusal: not of a clear type, or raised inside numpy
    or numba (an argument tinyopt let through unchecked)."""
    if not isinstance(e, CLEAR):
        return True
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename if tb is not None else ""
    return f"{os.sep}numba{os.sep}" in where or f"{os.sep}numpy{os.sep}" in where


KNOWN: list[str] = []  # mismatches of the cases marked ``known``: listed, not failed


def _refused(case, res, tres):
    """A clear error where torch computes: accepted when the case expects it (``refuses``)."""
    import re
    msg = f"{type(res).__name__}: {res}"
    if not (case.refuses and re.search(case.refuses, msg)):
        raise Mismatch(f"tinyopt refused what torch computes ({msg})")


def _check(case, ours, theirs, arrays, params, grad):
    kind, res = _outcome(ours, case, arrays, params, grad)
    tkind, tres = _outcome(theirs, case, arrays, params, grad) if theirs else (None, None)
    if kind == "error" and _internal(res) and not (  # torch's own AssertionErrors are kept
            type(res) is AssertionError and type(tres) is AssertionError):
        raise res  # a bug
    if theirs is None:
        return
    if kind == "error":
        if tkind != "error":
            _refused(case, res, tres)
        return
    if tkind == "error":
        if grad:  # the forward pass agreed; torch's autograd fails on some empty shapes
            return
        raise Mismatch(f"tinyopt accepted what torch refuses ({type(tres).__name__}: {tres})")
    for k in tres:
        if k in res:
            _close(res[k], tres[k], k)


def _run_optimizer(case, draw, ours, theirs):
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    dtype = draw(st.sampled_from(case.dtypes))
    shapes = draw(st.lists(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3),
                           min_size=1, max_size=3))
    kwargs = case.params(draw, ()) if case.params else {}
    init = [_draw_array(draw, s, "prob", dtype) for s in shapes]
    steps = [[None if draw(st.integers(0, 5)) == 0 else _draw_array(draw, s, FLOAT, dtype)
              for s in shapes] for _ in range(3)]

    def run(lib):
        try:
            ps = [lib.param(a) for a in init]
            opt = getattr(lib.optim, case.module[0])(ps, **kwargs)
            trace = {}
            for t, grads in enumerate(steps):
                def closure(grads=grads):
                    for p, g in zip(ps, grads):
                        lib.set_grad(p, g)
                    return 1.0
                closure()
                opt.step(closure) if case.module[0] == "LBFGS" else opt.step()
                for i, p in enumerate(ps):
                    trace[f"step {t} param {i}"] = lib.value(p).copy()
            return "ok", trace
        except Exception as e:  # noqa: BLE001
            return "error", e

    kind, res = run(ours)
    tkind, tres = run(theirs) if theirs else (None, None)
    if kind == "error" and _internal(res) and not (  # torch's own error, type and message
            tkind == "error" and type(res) is type(tres) and str(res) == str(tres)):
        raise res
    if theirs is None:
        return
    if kind == "error":
        if tkind != "error":
            _refused(case, res, tres)
        return
    if tkind == "error":
        raise Mismatch(f"tinyopt accepted what torch refuses ({type(tres).__name__}: {tres}; "
                       f"kwargs {kwargs})")
    for k in tres:
        _close(res[k], tres[k], f"{k} ({kwargs})")


def _example(case, draw, ours, theirs):
    from hypothesis import strategies as st
    if case in OPTIMIZERS:
        return _run_optimizer(case, draw, ours, theirs)
    dtype = draw(st.sampled_from(case.dtypes), label="dtype")
    shapes: list = []
    arrays = []
    for rule, kind in case.inputs:
        shape = rule(draw, shapes)
        shapes.append(shape)
        arrays.append(_draw_array(draw, shape, kind, dtype))
    params = case.params(draw, shapes) if case.params else {}
    if case.module is not None:  # the weights both libraries use: tinyopt's own initialisation
        ours.seed()
        try:
            m = _build(ours, case.module)
            if dtype == F64:
                m = m.double()
            params = {"$state": ours.state(m), "$dtype": dtype}
        except CLEAR:
            params = {"$state": {}, "$dtype": dtype}
    for grad in (False, True):  # forward on the arrays as given, then forward and backward
        _check(case, ours, theirs, arrays, params, grad and case.grad)


# ---- the child: run a table, report each case as a JSON line ---------------------------------
def child(tables: list[str], only: list[str], progress: str | None) -> None:
    import logging
    import warnings

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    warnings.simplefilter("ignore")
    logging.getLogger("tinyopt").setLevel(logging.ERROR)  # every example is a new plan
    ours = Ours()
    try:
        theirs: Torch | None = Torch()
    except ImportError:
        theirs = None
    # the suite's size draws the same examples every run (CI and a coordinator see one result);
    # a larger setting, for a deep local run, draws new ones
    fixed = bool(os.environ.get("CI")) or "TINYOPT_FUZZ_EXAMPLES" not in os.environ
    for table, case in [(t, c) for t in tables for c in TABLES[t]]:
        if only and case.name not in only:
            continue
        if progress:
            with open(progress, "w") as f:
                f.write(case.name)

        def make(case):
            @settings(max_examples=EXAMPLES, deadline=None, derandomize=fixed, database=None,
                      print_blob=True, suppress_health_check=list(HealthCheck))
            @given(st.data())
            def run(data):
                try:
                    _example(case, data.draw, ours, theirs)
                except Mismatch as e:  # crashes and internal errors fail even a known case
                    if not case.known:
                        raise
                    KNOWN.append(str(e).splitlines()[0][:200])
            return run
        run = make(case)

        report = {"table": table, "case": case.name, "failure": None, "known": case.known}
        del KNOWN[:]
        start = time.perf_counter()
        try:
            run()
        except Exception:  # noqa: BLE001 - reported to the parent
            report["failure"] = "".join(traceback.format_exc(limit=-6))
        report["mismatches"] = sorted(set(KNOWN))[:5]
        report["seconds"] = round(time.perf_counter() - start, 2)
        print(json.dumps(report), flush=True)


# ---- the tests: one child runs every table (numba loads each kernel once) --------------------
@pytest.fixture(scope="module")
def fuzz_reports(tmp_path_factory):
    progress = tmp_path_factory.mktemp("fuzz") / "progress"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    try:
        r = subprocess.run([sys.executable, __file__, *TABLES, "--progress", str(progress)],
                           capture_output=True, text=True, timeout=1800, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the fuzz hung in case {progress.read_text()!r}")
    if r.returncode != 0:
        case = progress.read_text() if progress.exists() else "?"
        pytest.fail(f"the fuzz crashed (exit {r.returncode}) in case {case!r}:\n"
                    f"{r.stderr[-4000:]}")
    reports = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return {table: [rep for rep in reports if rep["table"] == table] for table in TABLES}


@pytest.mark.parametrize("table", list(TABLES))
def test_fuzz_public_api(table, fuzz_reports):
    reports = fuzz_reports[table]
    assert len(reports) == len(TABLES[table])
    failed = [rep for rep in reports if rep["failure"]]
    for rep in reports:
        for line in rep["mismatches"]:
            print(f"known ({rep['known']}): {rep['case']}: {line}")
    assert not failed, "\n\n".join(f"{rep['case']}:\n{rep['failure'][-3000:]}" for rep in failed)


# what has no case of its own, and why
NOT_FUZZED = {
    "Module": "the base class", "RNNBase": "the base of RNN/LSTM/GRU",
    "RNNCellBase": "the base of the cells", "Sequential": "a container",
    "ModuleList": "a container", "ModuleDict": "a container", "ParameterList": "a container",
    "ParameterDict": "a container", "Optimizer": "the base class",
    "as_tensor": "a conversion (tinyopt.as_tensor), not an op of torch.nn.functional",
    # not in torch.optim: each against its reference package in its own test file (issue 31)
    "SGDScheduleFree": "tests/test_schedule_free.py", "AdamWScheduleFree": "the same",
    "RAdamScheduleFree": "the same", "Lion": "tests/test_lion.py", "ADOPT": "tests/test_adopt.py",
    "AdEMAMix": "tests/test_ademamix.py", "Lamb": "tests/test_lamb.py", "LARS": "tests/test_lars.py",
    "Prodigy": "tests/test_prodigy.py", "SOAP": "tests/test_soap.py",
    "Adam8bit": "tests/test_eight_bit.py", "AdamW8bit": "the same", "Lion8bit": "the same",
    "SGD8bit": "the same",
    "DataParallel": "a container (one process: the module itself)",
    "relu_": "in place: tests/test_torch_names.py", "elu_": "the same", "leaky_relu_": "the same",
    "threshold_": "in place: tests/test_ops_activation.py",
}


def test_every_layer_loss_functional_and_optimizer_is_fuzzed():
    import inspect

    import tinyopt
    modules = {n for n in dir(tinyopt.nn) if inspect.isclass(getattr(tinyopt.nn, n))
               and issubclass(getattr(tinyopt.nn, n), tinyopt.nn.Module)}
    F = tinyopt.nn.functional
    functionals = {n for n in dir(F) if not n.startswith("_") and inspect.isfunction(getattr(F, n))
                   and getattr(F, n).__module__.startswith("tinyopt")}
    optimizers = {n for n in tinyopt.optim.__all__ if inspect.isclass(getattr(tinyopt.optim, n))}
    fuzzed = {c.module[0] for t in TABLES.values() for c in t if c.module} | \
        {c.name.split("-")[0] for c in FUNCTIONALS}
    missing = sorted((modules | functionals | optimizers) - fuzzed - set(NOT_FUZZED))
    assert not missing, f"no fuzz case for {missing}: add one to the tables"


if __name__ == "__main__":
    args = sys.argv[1:]
    prog = None
    if "--progress" in args:
        i = args.index("--progress")
        prog = args[i + 1]
        del args[i:i + 2]
    tables = [a for a in args if a in TABLES]
    child(tables, [a for a in args if a not in TABLES], prog)
