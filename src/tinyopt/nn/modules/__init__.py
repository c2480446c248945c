"""``torch.nn.modules``: the paths model code imports layers from
(``from torch.nn.modules.batchnorm import _BatchNorm``, ``torch.nn.modules.linear.Linear``).

Each submodule is a view of tinyopt's own modules with PyTorch's file names: the classes are the
same objects as ``tinyopt.nn.<Name>``, so ``isinstance`` checks hold.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# PyTorch's file -> (tinyopt module, the names that file defines; "module:Name" for a name that
# lives elsewhere)
_FILES: dict[str, tuple[str, str]] = {
    "module": ("tinyopt.nn.module", "Module"),
    "container": ("tinyopt.nn.containers",
                  "Sequential ModuleList ModuleDict ParameterList ParameterDict"),
    "linear": ("tinyopt.nn", "Linear Identity "
               "tinyopt.nn.layers.transformer:NonDynamicallyQuantizableLinear"),
    "conv": ("tinyopt.nn", "Conv1d Conv2d Conv3d ConvTranspose2d ConvTranspose3d"),
    "pooling": ("tinyopt.nn", "MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d "
                "AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d"),
    "batchnorm": ("tinyopt.nn.layers.normalization",
                  "BatchNorm1d BatchNorm2d BatchNorm3d _BatchNorm"),
    "instancenorm": ("tinyopt.nn.layers.normalization",
                     "InstanceNorm1d InstanceNorm2d _InstanceNorm"),
    "normalization": ("tinyopt.nn.layers.normalization", "LayerNorm GroupNorm RMSNorm"),
    "activation": ("tinyopt.nn", "CELU ELU GELU GLU SELU Hardsigmoid Hardswish Hardtanh LeakyReLU "
                   "LogSigmoid LogSoftmax Mish PReLU ReLU ReLU6 Sigmoid SiLU Softmax Softplus "
                   "Tanh MultiheadAttention"),
    "dropout": ("tinyopt.nn.layers.dropout", "Dropout Dropout1d Dropout2d Dropout3d _DropoutNd"),
    "sparse": ("tinyopt.nn", "Embedding EmbeddingBag"),
    "loss": ("tinyopt.nn.layers.loss", "BCELoss BCEWithLogitsLoss CosineEmbeddingLoss "
             "CrossEntropyLoss HuberLoss KLDivLoss L1Loss MarginRankingLoss MSELoss NLLLoss "
             "SmoothL1Loss TripletMarginLoss _Loss _WeightedLoss"),
    "rnn": ("tinyopt.nn", "RNNBase RNN LSTM GRU RNNCellBase RNNCell LSTMCell GRUCell"),
    "transformer": ("tinyopt.nn", "Transformer TransformerEncoder TransformerDecoder "
                    "TransformerEncoderLayer TransformerDecoderLayer"),
    "padding": ("tinyopt.nn", "ConstantPad1d ConstantPad2d ReflectionPad1d ReflectionPad2d "
                "ReplicationPad1d ReplicationPad2d ZeroPad1d ZeroPad2d"),
    "pixelshuffle": ("tinyopt.nn", "PixelShuffle PixelUnshuffle"),
    "upsampling": ("tinyopt.nn", "Upsample UpsamplingNearest2d UpsamplingBilinear2d"),
    "flatten": ("tinyopt.nn", "Flatten Unflatten"),
    "distance": ("tinyopt.nn", "CosineSimilarity PairwiseDistance"),
}


def _submodule(file: str) -> types.ModuleType:
    mod = types.ModuleType(f"{__name__}.{file}", f"torch.nn.modules.{file} (tinyopt's)")
    wanted = _where(file)

    def __getattr__(name: str) -> Any:
        if name not in wanted:
            raise AttributeError(f"module 'torch.nn.modules.{file}' has no attribute {name!r} "
                                 f"in tinyopt")
        value = getattr(importlib.import_module(wanted[name]), name)
        setattr(mod, name, value)
        return value

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    mod.__all__ = [n for n in wanted if not n.startswith("_")]
    return mod


def _where(file: str) -> dict[str, str]:
    """{name: the tinyopt module it is read from} for one of PyTorch's files."""
    source, names = _FILES[file]
    return {n.rpartition(":")[2]: n.rpartition(":")[0] or source for n in names.split()}


for _file in _FILES:
    _mod = _submodule(_file)
    sys.modules[_mod.__name__] = _mod
    globals()[_file] = _mod


def __getattr__(name: str) -> Any:
    for file in _FILES:
        where = _where(file)
        if name in where:
            return getattr(importlib.import_module(where[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_FILES)
