"""Recurrent layers, as ``torch.nn``: ``RNN``, ``LSTM``, ``GRU`` and the cells ``RNNCell``,
``LSTMCell``, ``GRUCell``.

Parameter names, shapes, gate order and initialisation are PyTorch's, so state dicts load both
ways: per layer ``k`` and direction (suffix ``_reverse`` for the backward one) ``weight_ih_l{k}``
(G*H, I_k), ``weight_hh_l{k}`` (G*H, P), ``bias_ih_l{k}`` and ``bias_hh_l{k}`` (G*H,), and for an
LSTM with ``proj_size`` P > 0, ``weight_hr_l{k}`` (P, H); G is 4 for LSTM (gates i, f, g, o), 3 for
GRU (r, z, n; ``b_hn`` inside the reset gate's product), 1 for RNN.  Every parameter starts as
U(-1/sqrt(H), 1/sqrt(H)).

Each direction of each layer is one engine op over the whole sequence (``engine/ops/rnn.py``), so
a 2-layer LSTM over 35 steps adds a dozen graph nodes to a training step, not hundreds.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from tinyopt.engine.ops.movement import cat, stack
from tinyopt.engine.ops.nn import dropout as _dropout
from tinyopt.engine.ops.rnn import gather_rows, rnn_scan, scatter_rows
from tinyopt.engine.tensor import Parameter, Tensor, as_tensor
from tinyopt.nn import init, kernels_ahead
from tinyopt.nn.layers._factory import param_dtype
from tinyopt.nn.module import Module
from tinyopt.nn.utils.rnn import PackedSequence

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
_SCAN_MODE = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}


def _torch_dtype(d: np.dtype) -> str:
    return f"tinyopt.{np.dtype(d).name}"


class RNNBase(Module):
    """The shared machinery of RNN, LSTM and GRU (``mode`` 'RNN_TANH', 'RNN_RELU', 'LSTM' or
    'GRU'); see the module docstring for the parameters."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None,
                 dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        if mode not in _GATES:
            raise ValueError("Unrecognized RNN mode: " + str(mode))
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) \
                or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so "
                          f"non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        for name, v in (("bias", bias), ("batch_first", batch_first)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} should be of type bool, got: {type(v).__name__}")
        for name, v in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{name} should be of type int, got: {type(v).__name__}")
            if v <= 0:
                raise ValueError(f"{name} must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable "
                             "projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        D = 2 if bidirectional else 1
        G = _GATES[mode] * hidden_size
        P = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(num_layers):
            for direction in range(D):
                n_in = input_size if layer == 0 else P * D
                shapes = [("weight_ih_l{}{}", (G, n_in)), ("weight_hh_l{}{}", (G, P))]
                if bias:
                    shapes += [("bias_ih_l{}{}", (G,)), ("bias_hh_l{}{}", (G,))]
                if proj_size > 0:
                    shapes.append(("weight_hr_l{}{}", (proj_size, hidden_size)))
                suffix = "_reverse" if direction == 1 else ""
                names = []
                for fmt, shape in shapes:
                    name = fmt.format(layer, suffix)
                    setattr(self, name, Parameter(np.empty(shape, dtype=dt)))
                    names.append(name)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()
        if mode == "LSTM" and proj_size == 0:
            kernels_ahead.at_build(self, kernels_ahead.lstm, dt)

    def reset_parameters(self) -> None:
        """Draw every weight and bias again from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as
        PyTorch does."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self) -> None:
        """A no-op, as PyTorch's on the CPU (the weights are always used where they are)."""

    @property
    def _flat_weights(self) -> list[Parameter]:
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters per layer and direction: ``[[w_ih, w_hh, b_ih, b_hh], ...]`` (without the
        biases when ``bias=False``)."""
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # ---- forward ----------------------------------------------------------------------------
    def forward(self, input, hx=None):
        """``(output, h_n)`` (RNN and GRU; LSTM's is its own): see :class:`RNN`."""
        x, lengths, packed, batched = self._prepare(input)
        h0 = self._hidden(hx, batched, x.shape[1], self.hidden_size)
        out, hs, _ = self._run(x, h0, None, lengths)
        out, (h_n,) = self._finish(out, [hs], packed, batched)
        return out, h_n

    @property
    def _state_size(self) -> int:
        return self.proj_size if self.proj_size > 0 else self.hidden_size

    def _check_input(self, x: Tensor, packed: bool) -> None:
        wdt = self._flat_weights[0].dtype
        if x.dtype != wdt:
            raise ValueError(f"RNN input dtype ({_torch_dtype(x.dtype)}) does not match weight "
                             f"dtype ({_torch_dtype(wdt)}). Convert input: "
                             f"input.to({_torch_dtype(wdt)}), or convert model: "
                             f"model.to({_torch_dtype(x.dtype)})")
        want = 2 if packed else 3
        if x.ndim != want:
            raise RuntimeError(f"input must have {want} dimensions, got {x.ndim}")
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {x.shape[-1]}")

    def _check_hidden(self, h: Tensor, expected: tuple[int, ...], which: str = "") -> None:
        if h.shape != expected:
            raise RuntimeError(f"Expected hidden{which} size {expected}, got {list(h.shape)}")

    def _prepare(self, input):
        """(x (T, B, I), lengths or None, packed layout or None, batched)."""
        if isinstance(input, PackedSequence):
            data = as_tensor(input.data)
            self._check_input(data, True)
            bs = input._batch_sizes()
            T, B = len(bs), int(bs[0])
            pos = input._positions(False, T)
            x = scatter_rows(data, pos, T * B).reshape(T, B, self.input_size)
            return x, input._lengths(), (input, pos), True
        x = as_tensor(input)
        if x.ndim not in (2, 3):
            name = "LSTM" if self.mode == "LSTM" else "RNN"
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {x.ndim}D "
                             + ("instead" if name == "LSTM" else "tensor instead"))
        batched = x.ndim == 3
        if not batched:
            x = x.unsqueeze(1)
        elif self.batch_first:
            x = x.transpose(0, 1)
        self._check_input(x, False)
        return x, None, None, batched

    def _run(self, x: Tensor, h0, c0, lengths):
        """All layers and directions: (output (T, B, D*P), [h_n per layer/direction], [c_n])."""
        D = 2 if self.bidirectional else 1
        mode = _SCAN_MODE[self.mode]
        layer_input = x
        hs, cs = [], []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(D):
                k = layer * D + direction
                w = [getattr(self, n) for n in self._all_weights[k]]
                b_ih, b_hh = (w[2], w[3]) if self.bias else (None, None)
                w_hr = w[-1] if self.proj_size > 0 else None
                y, h_n, c_n = rnn_scan(mode, layer_input, w[0], w[1], b_ih, b_hh, w_hr,
                                       None if h0 is None else h0[k],
                                       None if c0 is None else c0[k], lengths,
                                       reverse=direction == 1)
                outs.append(y)
                hs.append(h_n)
                cs.append(c_n)
            layer_input = outs[0] if D == 1 else cat(outs, 2)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_input = _dropout(layer_input, self.dropout, True)
        return layer_input, hs, cs

    def _finish(self, out: Tensor, states: list[Tensor], packed, batched: bool):
        if packed is not None:
            seq, pos = packed
            T, B = out.shape[:2]
            data = gather_rows(out.reshape(T * B, out.shape[2]), pos)
            out = PackedSequence(data, seq.batch_sizes, seq.sorted_indices, seq.unsorted_indices)
        elif not batched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        result = []
        for s in states:
            h = stack(s, 0) if len(s) > 1 else s[0].unsqueeze(0)
            result.append(h if batched else h.squeeze(1))
        return out, result

    def _hidden(self, hx, batched: bool, B: int, size: int, which: str = "") -> Tensor | None:
        if hx is None:
            return None
        h = as_tensor(hx)
        if batched and h.ndim != 3 and not which:
            raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got "
                               f"{h.ndim}-D tensor")
        if not batched:
            if h.ndim != 2 and not which:
                raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got "
                                   f"{h.ndim}-D tensor")
            h = h.unsqueeze(1)
        D = 2 if self.bidirectional else 1
        self._check_hidden(h, (self.num_layers * D, B, size), which)
        if h.dtype != self._flat_weights[0].dtype:
            raise RuntimeError(f"hx has dtype {h.dtype}, expected {self._flat_weights[0].dtype}"
                               f" (the dtype of the input and the weights)")
        return h


class RNN(RNNBase):
    """An Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (``nonlinearity``
    'relu' uses ReLU), layer by layer.  ``forward(input, hx=None) -> (output, h_n)`` with input
    (T, B, I) ((B, T, I) with ``batch_first``), (T, I) unbatched, or a PackedSequence."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             f"'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)


class GRU(RNNBase):
    """A GRU layer stack (Cho et al. 2014, https://arxiv.org/abs/1406.1078):
    r = sig(W_ir x + b_ir + W_hr h + b_hr), z = sig(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h.
    ``forward(input, hx=None) -> (output, h_n)``, inputs as for :class:`RNN`."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device=None, dtype=None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype)


class LSTM(RNNBase):
    """An LSTM layer stack (Hochreiter & Schmidhuber 1997): gates i, f, g, o =
    sig, sig, tanh, sig(W_i* x + b_i* + W_h* h + b_h*), c' = f c + i g, h' = o tanh(c'); with
    ``proj_size`` P > 0, h' = W_hr (o tanh(c')) (Sak et al. 2014,
    https://arxiv.org/abs/1402.1128).  ``forward(input, (h0, c0)=None) -> (output, (h_n, c_n))``,
    inputs as for :class:`RNN`; h0 (L*D, B, P), c0 (L*D, B, H)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None,
                 dtype=None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        kernels_ahead.called(self)
        x, lengths, packed, batched = self._prepare(input)
        B = x.shape[1]
        h0 = c0 = None
        if hx is not None:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise TypeError("LSTM: hx must be a tuple (h_0, c_0)")
            h, c = as_tensor(hx[0]), as_tensor(hx[1])
            want = 3 if batched else 2
            if h.ndim != want or c.ndim != want:
                kind = "batched 3-D" if batched else "unbatched 2-D"
                raise RuntimeError(f"For {kind} input, hx and cx should also be {want}-D but "
                                   f"got ({h.ndim}-D, {c.ndim}-D) tensors")
            h0 = self._hidden(h, batched, B, self._state_size, "[0]")
            c0 = self._hidden(c, batched, B, self.hidden_size, "[1]")
        out, hs, cs = self._run(x, h0, c0, lengths)
        out, (h_n, c_n) = self._finish(out, [hs, cs], packed, batched)
        return out, (h_n, c_n)


# ---- cells --------------------------------------------------------------------------------------
class RNNCellBase(Module):
    """One step of a recurrent layer: ``weight_ih`` (G*H, I), ``weight_hh`` (G*H, H),
    ``bias_ih``, ``bias_hh`` (G*H,), each U(-1/sqrt(H), 1/sqrt(H)).  The step is the same single
    op as a whole layer's, run for one time step."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
                 device=None, dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        G = num_chunks * hidden_size
        self.weight_ih = Parameter(np.empty((G, input_size), dtype=dt))
        self.weight_hh = Parameter(np.empty((G, hidden_size), dtype=dt))
        if bias:
            self.bias_ih = Parameter(np.empty((G,), dtype=dt))
            self.bias_hh = Parameter(np.empty((G,), dtype=dt))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every weight and bias again from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as
        PyTorch does."""
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _input(self, input) -> tuple[Tensor, bool]:
        x = as_tensor(input)
        if x.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected input to be 1D or 2D, got "
                             f"{x.ndim}D instead")
        batched = x.ndim == 2
        x = x if batched else x.unsqueeze(0)
        if x.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {x.shape[1]} expected "
                               f"{self.input_size}")
        if x.dtype != self.weight_ih.dtype:
            raise RuntimeError(f"{type(self).__name__}: input has dtype {x.dtype}, expected "
                               f"{self.weight_ih.dtype} (the weights' dtype)")
        return x, batched

    def _state(self, h, batched: bool, B: int, k: int, name: str) -> Tensor | None:
        if h is None:
            return None
        h = as_tensor(h)
        if h.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected {name} to be 1D or 2D, got "
                             f"{h.ndim}D instead")
        h = h if batched else h.unsqueeze(0)
        if h.shape[0] != B:
            raise RuntimeError(f"Input batch size {B} doesn't match hidden{k} batch size "
                               f"{h.shape[0]}")
        if h.shape[1] != self.hidden_size:
            raise RuntimeError(f"hidden{k} has inconsistent hidden_size: got {h.shape[1]}, "
                               f"expected {self.hidden_size}")
        return h

    def _step(self, x: Tensor, h0, c0, mode: str):
        y, h, c = rnn_scan(mode, x.unsqueeze(0), self.weight_ih, self.weight_hh,
                           self.bias_ih, self.bias_hh, None, h0, c0)
        return h, c


class RNNCell(RNNCellBase):
    """h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or ReLU); ``forward(input, hx=None) -> h'``
    with input (B, I) or (I,)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None) -> Tensor:
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        x, batched = self._input(input)
        h, _ = self._step(x, self._state(hx, batched, x.shape[0], 0, "hidden"), None,
                          "rnn_" + self.nonlinearity)
        return h if batched else h.squeeze(0)


class GRUCell(RNNCellBase):
    """One GRU step (see :class:`GRU`); ``forward(input, hx=None) -> h'``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device=device, dtype=dtype)

    def forward(self, input, hx=None) -> Tensor:
        x, batched = self._input(input)
        h, _ = self._step(x, self._state(hx, batched, x.shape[0], 0, "hidden"), None, "gru")
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step (see :class:`LSTM`); ``forward(input, (h, c)=None) -> (h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device=device, dtype=dtype)

    def forward(self, input, hx=None) -> tuple[Tensor, Tensor]:
        x, batched = self._input(input)
        h0 = c0 = None
        if hx is not None:
            h0 = self._state(hx[0], batched, x.shape[0], 0, "hx[0]")
            c0 = self._state(hx[1], batched, x.shape[0], 1, "hx[1]")
        h, c = self._step(x, h0, c0, "lstm")
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))
