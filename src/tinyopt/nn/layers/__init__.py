"""The layers of ``tinyopt.nn``, one family per module (all re-exported by ``tinyopt.nn``):

- ``linear``: Linear, Identity          - ``conv``: Conv1d, Conv2d
- ``pooling``: MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d, AdaptiveAvgPool1d
- ``flatten``: Flatten, Unflatten
- ``activation``: ReLU, LeakyReLU, GELU, Sigmoid, Tanh, SiLU, Softplus, Softmax, LogSoftmax
- ``normalization``: LayerNorm, BatchNorm1d, BatchNorm2d
- ``dropout``: Dropout                  - ``sparse``: Embedding, EmbeddingBag
- ``rnn``: RNN, LSTM, GRU, RNNCell, LSTMCell, GRUCell
- ``transformer``: MultiheadAttention, Transformer(Encoder|Decoder)(Layer), Transformer
- ``loss``: CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, BCEWithLogitsLoss

Constructors, defaults, initialisation and ``repr`` follow ``torch.nn``; each ``forward`` calls
``tinyopt.nn.functional``.
"""

from tinyopt.nn.layers.activation import (GELU, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU,
                                          Softmax, Softplus, Tanh)
from tinyopt.nn.layers.conv import Conv1d, Conv2d
from tinyopt.nn.layers.dropout import Dropout
from tinyopt.nn.layers.flatten import Flatten, Unflatten
from tinyopt.nn.layers.linear import Identity, Linear
from tinyopt.nn.layers.loss import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from tinyopt.nn.layers.normalization import BatchNorm1d, BatchNorm2d, LayerNorm
from tinyopt.nn.layers.pooling import (AdaptiveAvgPool1d, AvgPool1d, AvgPool2d, MaxPool1d,
                                       MaxPool2d)
from tinyopt.nn.layers.rnn import (GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell,
                                   RNNCellBase)
from tinyopt.nn.layers.sparse import Embedding, EmbeddingBag
from tinyopt.nn.layers.transformer import (MultiheadAttention, Transformer, TransformerDecoder,
                                           TransformerDecoderLayer, TransformerEncoder,
                                           TransformerEncoderLayer)

__all__ = ["Linear", "Identity", "Conv1d", "Conv2d", "MaxPool1d", "MaxPool2d", "AvgPool1d",
           "AvgPool2d", "AdaptiveAvgPool1d", "Flatten", "Unflatten",
           "Dropout", "Embedding", "EmbeddingBag", "LayerNorm", "BatchNorm1d", "BatchNorm2d", "ReLU", "LeakyReLU",
           "GELU", "Sigmoid", "Tanh", "SiLU", "Softplus", "Softmax", "LogSoftmax",
           "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCEWithLogitsLoss",
           "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
           "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder",
           "TransformerDecoderLayer", "TransformerDecoder", "Transformer"]
