"""The layers of ``tinyopt.nn``, one family per module (all re-exported by ``tinyopt.nn``):

- ``linear``: Linear, Identity          - ``conv``: Conv1d, Conv2d
- ``conv_transpose``: ConvTranspose2d   - ``flatten``: Flatten, Unflatten
- ``pooling``: MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d, AdaptiveAvgPool1d, AdaptiveAvgPool2d
- ``activation``: ReLU, LeakyReLU, GELU, Sigmoid, Tanh, SiLU, Softplus, Softmax, LogSoftmax, ELU,
  SELU, CELU, Hardtanh, ReLU6, LogSigmoid, Mish, PReLU
- ``normalization``: LayerNorm, BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm1d,
  InstanceNorm2d
- ``dropout``: Dropout, Dropout1d, Dropout2d, Dropout3d
- ``sparse``: Embedding, EmbeddingBag
- ``rnn``: RNN, LSTM, GRU, RNNCell, LSTMCell, GRUCell
- ``transformer``: MultiheadAttention, Transformer(Encoder|Decoder)(Layer), Transformer
- ``upsampling``: Upsample, UpsamplingNearest2d, UpsamplingBilinear2d, PixelShuffle,
  PixelUnshuffle
- ``padding``: ZeroPad1d/2d, ConstantPad1d/2d, ReflectionPad1d/2d, ReplicationPad1d/2d
- ``distance``: CosineSimilarity, PairwiseDistance
- ``loss``: CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, BCEWithLogitsLoss, BCELoss, KLDivLoss,
  SmoothL1Loss, HuberLoss, TripletMarginLoss, CosineEmbeddingLoss, MarginRankingLoss

Constructors, defaults, initialisation and ``repr`` follow ``torch.nn``; each ``forward`` calls
``tinyopt.nn.functional``.
"""

import typing as _typing

from tinyopt.engine.lazy_exports import exports as _exports
from tinyopt.engine.lazy_exports import table as _table

if _typing.TYPE_CHECKING:  # imported on first use (``tinyopt.engine.lazy_exports``)
    from tinyopt.nn.layers.activation import (CELU, ELU, GELU, GLU, SELU, Hardshrink,
                                              Hardsigmoid, Hardswish, Hardtanh, LeakyReLU,
                                              LogSigmoid, LogSoftmax, Mish, PReLU, ReLU, ReLU6,
                                              Sigmoid, SiLU, Softmax, Softmax2d, Softplus,
                                              Softshrink, Softsign, Tanh, Tanhshrink, Threshold)
    from tinyopt.nn.layers.conv import Conv1d, Conv2d
    from tinyopt.nn.layers.conv_transpose import ConvTranspose2d
    from tinyopt.nn.layers.distance import CosineSimilarity, PairwiseDistance
    from tinyopt.nn.layers.dropout import Dropout, Dropout1d, Dropout2d, Dropout3d
    from tinyopt.nn.layers.flatten import Flatten, Unflatten
    from tinyopt.nn.layers.fold import Fold, Unfold
    from tinyopt.nn.layers.linear import Identity, Linear
    from tinyopt.nn.layers.loss import (BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss,
                                        CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss,
                                        MarginRankingLoss, MSELoss, NLLLoss, SmoothL1Loss,
                                        TripletMarginLoss)
    from tinyopt.nn.layers.normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d,
                                                 GroupNorm, InstanceNorm1d, InstanceNorm2d,
                                                 LayerNorm, RMSNorm)
    from tinyopt.nn.layers.padding import (ConstantPad1d, ConstantPad2d, ReflectionPad1d,
                                           ReflectionPad2d, ReplicationPad1d, ReplicationPad2d,
                                           ZeroPad1d, ZeroPad2d)
    from tinyopt.nn.layers.pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d,
                                           AdaptiveMaxPool1d, AdaptiveMaxPool2d,
                                           AdaptiveMaxPool3d, AvgPool1d, AvgPool2d, LPPool1d,
                                           LPPool2d, LPPool3d, MaxPool1d, MaxPool2d)
    from tinyopt.nn.layers.rnn import (GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell,
                                       RNNCellBase)
    from tinyopt.nn.layers.sparse import Embedding, EmbeddingBag
    from tinyopt.nn.layers.transformer import (MultiheadAttention, Transformer, TransformerDecoder,
                                               TransformerDecoderLayer, TransformerEncoder,
                                               TransformerEncoderLayer)
    from tinyopt.nn.layers.upsampling import (PixelShuffle, PixelUnshuffle, Upsample,
                                              UpsamplingBilinear2d, UpsamplingNearest2d)
    from tinyopt.nn.layers.volume import (AdaptiveAvgPool3d, AvgPool3d, Conv3d, ConvTranspose3d,
                                          MaxPool3d)

__getattr__, __dir__ = _exports(__name__, globals(), _table({
    "tinyopt.nn.layers.activation": (
        "CELU ELU GELU GLU SELU Hardsigmoid Hardswish Hardtanh LeakyReLU LogSigmoid LogSoftmax Mish "
        "PReLU ReLU ReLU6 Sigmoid SiLU Softmax Softplus Tanh Softsign Tanhshrink Threshold "
        "Hardshrink Softshrink Softmax2d"),
    "tinyopt.nn.layers.conv": "Conv1d Conv2d",
    "tinyopt.nn.layers.conv_transpose": "ConvTranspose2d",
    "tinyopt.nn.layers.distance": "CosineSimilarity PairwiseDistance",
    "tinyopt.nn.layers.dropout": "Dropout Dropout1d Dropout2d Dropout3d",
    "tinyopt.nn.layers.flatten": "Flatten Unflatten",
    "tinyopt.nn.layers.fold": "Fold Unfold",
    "tinyopt.nn.layers.linear": "Identity Linear",
    "tinyopt.nn.layers.loss": (
        "BCELoss BCEWithLogitsLoss CosineEmbeddingLoss CrossEntropyLoss HuberLoss KLDivLoss "
        "L1Loss MarginRankingLoss MSELoss NLLLoss SmoothL1Loss TripletMarginLoss"),
    "tinyopt.nn.layers.normalization": (
        "BatchNorm1d BatchNorm2d BatchNorm3d GroupNorm InstanceNorm1d InstanceNorm2d LayerNorm "
        "RMSNorm"),
    "tinyopt.nn.layers.padding": (
        "ConstantPad1d ConstantPad2d ReflectionPad1d ReflectionPad2d ReplicationPad1d "
        "ReplicationPad2d ZeroPad1d ZeroPad2d"),
    "tinyopt.nn.layers.pooling": (
        "AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveMaxPool1d AdaptiveMaxPool2d "
        "AdaptiveMaxPool3d AvgPool1d AvgPool2d LPPool1d LPPool2d LPPool3d MaxPool1d MaxPool2d"),
    "tinyopt.nn.layers.rnn": "GRU LSTM RNN GRUCell LSTMCell RNNBase RNNCell RNNCellBase",
    "tinyopt.nn.layers.sparse": "Embedding EmbeddingBag",
    "tinyopt.nn.layers.transformer": (
        "MultiheadAttention Transformer TransformerDecoder TransformerDecoderLayer "
        "TransformerEncoder TransformerEncoderLayer"),
    "tinyopt.nn.layers.upsampling": (
        "PixelShuffle PixelUnshuffle Upsample UpsamplingBilinear2d UpsamplingNearest2d"),
    "tinyopt.nn.layers.volume": "AdaptiveAvgPool3d AvgPool3d Conv3d ConvTranspose3d MaxPool3d",
}))

__all__ = ["Linear", "Identity", "Conv2d", "ConvTranspose2d", "MaxPool2d", "AvgPool2d",
           "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "Flatten", "Unflatten", "Dropout",
           "Dropout1d", "Dropout2d", "Dropout3d", "Embedding", "LayerNorm", "BatchNorm1d",
           "BatchNorm2d", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "ReLU", "LeakyReLU",
           "GELU", "Sigmoid", "Tanh", "SiLU", "Softplus", "Softmax", "LogSoftmax", "ELU", "SELU",
           "CELU", "Hardtanh", "ReLU6", "LogSigmoid", "Mish", "PReLU", "Upsample",
           "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle",
           "ZeroPad1d", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ReflectionPad1d",
           "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d", "CosineSimilarity",
           "PairwiseDistance", "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss",
           "BCEWithLogitsLoss", "BCELoss", "KLDivLoss", "SmoothL1Loss", "HuberLoss",
           "TripletMarginLoss", "CosineEmbeddingLoss", "MarginRankingLoss", "Conv1d", "MaxPool1d",
           "AvgPool1d", "EmbeddingBag", "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell",
           "LSTMCell", "GRUCell", "MultiheadAttention", "TransformerEncoderLayer",
           "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder", "Transformer",
           "RMSNorm", "BatchNorm3d", "Conv3d", "ConvTranspose3d", "MaxPool3d", "AvgPool3d",
           "AdaptiveAvgPool3d", "Hardswish", "Hardsigmoid", "Fold", "Unfold", "AdaptiveMaxPool2d",
           "GLU", "Softsign", "Tanhshrink", "Threshold", "Hardshrink", "Softshrink", "Softmax2d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d"]
