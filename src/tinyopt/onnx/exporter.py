"""ONNX export, node by node from the recorded forward graph.

``export(model, args, f)`` runs ``model(*args)`` in eval mode with graph recording forced on
(``no_fold``: even ops over constant inputs become nodes), then walks the graph from the outputs:

- the ``args`` tensors become the ONNX graph's inputs;
- every node that does not depend on them (parameters, buffers, masks, a batch norm's running
  statistics) is computed once by tinyopt and stored as an initializer (constant folding);
- every other node is translated by the converter registered for its op in ``_CONVERTERS``,
  emitting the ONNX nodes that compute the same values (linear, conv and transposed conv, pooling,
  batch/layer/group/instance norm, activations, softmax, embedding, attention, LSTM/GRU/RNN
  layers, padding, nearest and bilinear upsampling, reshapes, slices, indexing, cat, reductions
  and the elementwise ops).  An op without a converter is refused with its name.

Exported values equal tinyopt's forward to float32 rounding (the tests run the MLP, CNN, LSTM
language model and small GPT in onnxruntime).  Dynamic axes name dimensions of the inputs and
outputs; reshapes keep the dimensions they share with their input (ONNX's ``0``), so a dynamic
batch works through flatten and the attention's head split; other shapes are those of ``args``.
Only the forward pass in eval mode is exported (a model in training mode is put in eval mode for
the export and restored; ``training=TrainingMode.TRAINING`` is refused).
"""

from __future__ import annotations

import enum
import inspect
import io
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tinyopt.engine.grad_mode import no_fold, no_grad
from tinyopt.engine.tensor import Tensor, leaf

__all__ = ["export", "is_in_onnx_export"]

class TrainingMode(enum.IntEnum):
    """``export``'s ``training``: EVAL exports the eval-mode forward (the default); PRESERVE, the
    model's own mode (refused for a model in training mode); TRAINING is refused (tinyopt exports
    dropout and batch norm in their inference form only)."""

    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


class OperatorExportTypes(enum.IntEnum):
    """``export``'s ``operator_export_type``: every op is exported as ONNX operators, or refused
    with an error naming it.  ONNX (the default), ONNX_ATEN_FALLBACK and ONNX_FALLTHROUGH
    therefore give the same graph (their fallbacks are for ops without an ONNX form); ONNX_ATEN
    (every op as an ATen operator) is refused."""

    ONNX = 0
    ONNX_ATEN = 1
    ONNX_ATEN_FALLBACK = 2
    ONNX_FALLTHROUGH = 3


_EXPORTING = [0]  # exports in progress (model code may ask: ``torch.onnx.is_in_onnx_export()``)
_MIN_OPSET = 17  # LayerNormalization
_DEFAULT_OPSET = 18


def export(model: Any, args: Any = (), f: str | os.PathLike | io.BufferedIOBase | None = None,
           *, kwargs: dict[str, Any] | None = None, verbose: bool | None = None,
           input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
           opset_version: int | None = None, dynamo: bool = True, external_data: bool = True,
           dynamic_shapes: Any = None, custom_translation_table: Any = None,
           report: bool = False, optimize: bool = True, verify: bool = False,
           profile: bool = False, dump_exported_program: bool = False,
           artifacts_dir: str | os.PathLike = ".", export_params: bool = True,
           keep_initializers_as_inputs: bool = False,
           dynamic_axes: Mapping[str, Mapping[int, str]] | Mapping[str, Sequence[int]] | None
           = None, training: Any = None, operator_export_type: Any = None,
           do_constant_folding: bool = True, custom_opsets: Mapping[str, int] | None = None,
           export_modules_as_functions: Any = False, autograd_inlining: bool = True) -> Any:
    """Export ``model``'s forward pass on ``args`` (a tensor or a tuple of them; numpy arrays
    work too) to ONNX, written to ``f`` (a path or a binary file) when given; returns the
    ``onnx.ModelProto``.  torch.onnx.export's signature: ``input_names``/``output_names`` name
    the graph's inputs and outputs, ``dynamic_axes`` maps a name to ``{dim: "name"}`` (or a list
    of dims), ``opset_version`` is 17 or more (18 by default); the options of torch's exporter
    machinery (dynamo, report, optimize...) are accepted and change nothing."""
    try:
        import onnx
    except ImportError:
        raise ImportError("tinyopt.onnx.export needs the onnx package: pip install onnx (or "
                          "pip install tinyopt[onnx])") from None
    opset = _DEFAULT_OPSET if opset_version is None else int(opset_version)
    if opset < _MIN_OPSET:
        raise ValueError(f"tinyopt.onnx.export: opset_version {opset} is not supported; use "
                         f"{_MIN_OPSET} or later")
    if not export_params:
        raise NotImplementedError("tinyopt.onnx.export: export_params=False is not supported "
                                  "(the parameters are the graph's initializers)")
    _check_modes(model, training, operator_export_type)
    args = args if isinstance(args, tuple) else (args,)
    if args and isinstance(args[-1], dict) and kwargs is None:
        args, kwargs = args[:-1], args[-1]
    inputs: list[Tensor] = []
    default_names: list[str] = []
    args = tuple(_graph_inputs(a, inputs, default_names, n)
                 for a, n in zip(args, _argument_names(model, len(args))))
    names = list(input_names or [])
    if len(names) > len(inputs):
        raise ValueError(f"tinyopt.onnx.export: {len(names)} input_names for {len(inputs)} inputs")
    names += default_names[len(names):]
    modes = [(m, m.training) for m in model.modules()] if hasattr(model, "modules") else []
    try:
        for m, _ in modes:
            m.training = False
        _EXPORTING[0] += 1
        with no_grad(), no_fold():
            out = model(*args, **(kwargs or {}))
    finally:
        _EXPORTING[0] -= 1
        for m, mode in modes:
            m.training = mode
    outputs = _flatten(out)
    if not outputs:
        raise ValueError("tinyopt.onnx.export: the model returned no tensors")
    out_names = list(output_names or [])
    out_names += [f"output_{i}" if len(outputs) > 1 else "output"
                  for i in range(len(out_names), len(outputs))]
    ex = _Exporter(onnx, opset, {id(t): n for t, n in zip(inputs, names)})
    for t, n in zip(outputs, out_names):
        ex.nodes.append(onnx.helper.make_node("Identity", [ex.value(t)], [n]))
    dims = _dynamic_dims(dynamic_axes, names + out_names)
    graph = onnx.helper.make_graph(
        ex.nodes, type(model).__name__,
        [_value_info(onnx, n, t, dims.get(n, {})) for t, n in zip(inputs, names)],
        [_value_info(onnx, n, t, dims.get(n, {})) for t, n in zip(outputs, out_names)],
        ex.initializers)
    proto = onnx.helper.make_model(graph, producer_name="tinyopt",
                                   opset_imports=[onnx.helper.make_opsetid("", opset)])
    proto.ir_version = min(onnx.IR_VERSION, 10)
    onnx.checker.check_model(proto)
    if f is not None:
        data = proto.SerializeToString()
        if hasattr(f, "write"):
            f.write(data)
        else:
            with open(f, "wb") as fh:
                fh.write(data)
    return proto


def _check_modes(model: Any, training: Any, operator_export_type: Any) -> None:
    """Refuse the ``training``/``operator_export_type`` values whose graph tinyopt cannot write."""
    mode = TrainingMode.EVAL if training is None else TrainingMode(int(training))
    in_training = any(m.training for m in model.modules()) if hasattr(model, "modules") else False
    if mode == TrainingMode.TRAINING or (mode == TrainingMode.PRESERVE and in_training):
        raise NotImplementedError("tinyopt.onnx.export: only the eval-mode forward is exported "
                                  "(training=TrainingMode.EVAL, or PRESERVE with model.eval())")
    kind = OperatorExportTypes.ONNX if operator_export_type is None else \
        OperatorExportTypes(int(operator_export_type))
    if kind == OperatorExportTypes.ONNX_ATEN:
        raise NotImplementedError("tinyopt.onnx.export: operator_export_type=ONNX_ATEN is not "
                                  "supported (ops are exported as ONNX operators)")


def is_in_onnx_export() -> bool:
    """Whether an ``export`` is running the model now."""
    return _EXPORTING[0] > 0


def _graph_inputs(value: Any, found: list[Tensor], names: list[str], name: str) -> Any:
    """``value`` with each tensor (or array) replaced by a fresh input leaf, appended to
    ``found`` (and its default name, ``name`` or ``name.i`` inside a nested tuple or list such as
    an LSTM's ``(h, c)``, to ``names``) in order."""
    if isinstance(value, (Tensor, np.ndarray)):
        t = leaf(np.array(value.numpy() if isinstance(value, Tensor) else value))
        found.append(t)
        names.append(name)
        return t
    if isinstance(value, (tuple, list)):
        return type(value)(_graph_inputs(v, found, names, f"{name}.{i}")
                           for i, v in enumerate(value))
    return value


def _argument_names(model: Any, n: int) -> list[str]:
    """The names of ``model.forward``'s first ``n`` parameters (``input_i`` where unknown)."""
    try:
        params = [p.name for p in inspect.signature(getattr(model, "forward", model)).parameters
                  .values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"input_{i}" for i in range(n)]


def _flatten(out: Any) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _flatten(o)]
    return []


def _dynamic_dims(dynamic_axes: Any, names: list[str]) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for name, axes in (dynamic_axes or {}).items():
        if name not in names:
            raise ValueError(f"tinyopt.onnx.export: dynamic_axes names {name!r}, which is not an "
                             f"input or output name ({names})")
        out[name] = dict(axes) if isinstance(axes, Mapping) else {
            int(d): f"{name}_dynamic_axes_{i + 1}" for i, d in enumerate(axes)}
    return out


def _value_info(onnx: Any, name: str, t: Tensor, dynamic: dict[int, str]) -> Any:
    shape = [dynamic.get(d, dynamic.get(d - t.ndim, s)) for d, s in enumerate(t.shape)]
    return onnx.helper.make_tensor_value_info(
        name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), shape)


class _Exporter:
    """The ONNX nodes and initializers of one export, made on demand from the outputs back."""

    def __init__(self, onnx: Any, opset: int, inputs: dict[int, str]):
        self.onnx, self.opset = onnx, opset
        self.names: dict[int, str] = dict(inputs)
        self.rnn: dict[int, list[str]] = {}  # a recurrent layer's ONNX outputs, by its rnn_out
        self.inputs = set(inputs)
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._live: dict[int, bool] = {}
        self._count = 0
        self._keep: list[Tensor] = []  # (tensors named by id stay alive while exporting)

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def depends(self, t: Tensor) -> bool:
        """Whether ``t`` depends on the graph's inputs (else it is a constant)."""
        stack, order = [t], []
        while stack:  # (iterative: graphs may be deep)
            s = stack.pop()
            if id(s) in self._live:
                continue
            if id(s) in self.inputs or not s.srcs:
                self._live[id(s)] = id(s) in self.inputs
                continue
            pending = [x for x in s.srcs if id(x) not in self._live]
            if pending:
                stack.append(s)
                stack.extend(pending)
                continue
            self._live[id(s)] = any(self._live[id(x)] for x in s.srcs)
            order.append(s)
        return self._live[id(t)]

    def value(self, t: Tensor) -> str:
        """The ONNX name of ``t``'s value, emitting what computes it."""
        name = self.names.get(id(t))
        if name is not None:
            return name
        if not self.depends(t):
            name = self.const(np.asarray(t.numpy()), "const")
        else:
            conv = _CONVERTERS.get(t.op)
            if conv is None:
                raise NotImplementedError(f"tinyopt.onnx.export: no ONNX translation for the op "
                                          f"{t.op!r} (shape {t.shape})")
            name = conv(self, t)
        self.names[id(t)] = name
        self._keep.append(t)
        return name

    def const(self, arr: np.ndarray, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(arr),
                                                                   name))
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), "shape")

    def op(self, op_type: str, inputs: Sequence[str], **attrs: Any) -> str:
        out = self.fresh(op_type.lower())
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def ops(self, op_type: str, inputs: Sequence[str], n: int, **attrs: Any) -> list[str]:
        outs = [self.fresh(op_type.lower()) for _ in range(n)]
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs

    def src(self, t: Tensor, i: int) -> str:
        return self.value(t.srcs[i])

    def reshape(self, x: str, in_shape: Sequence[int], shape: Sequence[int]) -> str:
        """Reshape keeping (as ONNX's 0) the leading dimensions equal to the input's, so that a
        dynamic batch passes through."""
        target = list(shape)
        for i, (a, b) in enumerate(zip(in_shape, shape)):
            if a != b or b == 0:
                break
            target[i] = 0
        return self.op("Reshape", [x, self.ints(target)])


# ---- converters: one per op ----------------------------------------------------------------------
Converter = Callable[[_Exporter, Tensor], str]
_CONVERTERS: dict[str, Converter] = {}


def _converts(*ops: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for op in ops:
            _CONVERTERS[op] = fn
        return fn
    return register


_UNARY = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log",
          "sqrt": "Sqrt", "neg": "Neg", "abs": "Abs", "erf": "Erf", "sin": "Sin", "cos": "Cos",
          "reciprocal": "Reciprocal", "floor": "Floor", "ceil": "Ceil", "sign": "Sign",
          "clone": "Identity", "contiguous": "Identity", "logical_not": "Not"}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "eq": "Equal",
           "lt": "Less", "gt": "Greater", "le": "LessOrEqual", "ge": "GreaterOrEqual",
           "maximum": "Max", "minimum": "Min", "logical_and": "And", "logical_or": "Or"}


for _op, _onnx in _UNARY.items():
    _converts(_op)(lambda ex, t, _o=_onnx: ex.op(_o, [ex.src(t, 0)]))
for _op, _onnx in _BINARY.items():
    _converts(_op)(lambda ex, t, _o=_onnx: ex.op(_o, [ex.src(t, 0), ex.src(t, 1)]))


@_converts("square")
def _square(ex: _Exporter, t: Tensor) -> str:
    x = ex.src(t, 0)
    return ex.op("Mul", [x, x])


@_converts("silu")
def _silu(ex: _Exporter, t: Tensor) -> str:
    x = ex.src(t, 0)
    return ex.op("Mul", [x, ex.op("Sigmoid", [x])])


@_converts("gelu", "gelu_tanh")
def _gelu(ex: _Exporter, t: Tensor) -> str:
    x = ex.src(t, 0)
    dt = t.dtype.type
    if t.op == "gelu":  # 0.5 x (1 + erf(x / sqrt 2))
        inner = ex.op("Erf", [ex.op("Mul", [x, ex.const(dt(1 / math.sqrt(2)))])])
    else:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = ex.op("Mul", [ex.op("Mul", [x, x]), x])
        arg = ex.op("Add", [x, ex.op("Mul", [cube, ex.const(dt(0.044715))])])
        inner = ex.op("Tanh", [ex.op("Mul", [arg, ex.const(dt(math.sqrt(2 / math.pi)))])])
    half = ex.op("Mul", [x, ex.const(dt(0.5))])
    return ex.op("Mul", [half, ex.op("Add", [inner, ex.const(dt(1.0))])])


@_converts("leaky_relu")
def _leaky_relu(ex: _Exporter, t: Tensor) -> str:
    return ex.op("LeakyRelu", [ex.src(t, 0)], alpha=float(t.attrs[0]))


@_converts("clamp")
def _clamp(ex: _Exporter, t: Tensor) -> str:
    lo, hi = t.attrs
    dt = t.dtype.type
    return ex.op("Clip", [ex.src(t, 0), ex.const(dt(lo)), ex.const(dt(hi))])


@_converts("cast")
def _cast(ex: _Exporter, t: Tensor) -> str:
    return ex.op("Cast", [ex.src(t, 0)],
                 to=ex.onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)))


@_converts("where")
def _where(ex: _Exporter, t: Tensor) -> str:
    return ex.op("Where", [ex.src(t, 0), ex.src(t, 1), ex.src(t, 2)])


@_converts("linear")
def _linear(ex: _Exporter, t: Tensor) -> str:
    x, w = t.srcs[0], t.srcs[1]
    wt = ex.const(np.asarray(w.numpy()).T, "weight_t") if not ex.depends(w) else \
        ex.op("Transpose", [ex.value(w)], perm=[1, 0])
    y = ex.op("MatMul", [ex.value(x), wt])
    return ex.op("Add", [y, ex.src(t, 2)]) if len(t.srcs) > 2 else y


@_converts("matmul", "mm", "bmm")
def _matmul(ex: _Exporter, t: Tensor) -> str:
    return ex.op("MatMul", [ex.src(t, 0), ex.src(t, 1)])


@_converts("reshape")
def _reshape(ex: _Exporter, t: Tensor) -> str:
    return ex.reshape(ex.src(t, 0), t.srcs[0].shape, t.shape)


@_converts("permute")
def _permute(ex: _Exporter, t: Tensor) -> str:
    return ex.op("Transpose", [ex.src(t, 0)], perm=list(t.attrs[0]))


@_converts("expand")
def _expand(ex: _Exporter, t: Tensor) -> str:
    return ex.op("Expand", [ex.src(t, 0), ex.ints(t.shape)])


@_converts("cat")
def _cat(ex: _Exporter, t: Tensor) -> str:
    return ex.op("Concat", [ex.value(s) for s in t.srcs], axis=int(t.attrs[0]))


@_converts("slice")
def _slice(ex: _Exporter, t: Tensor) -> str:
    struct = t.attrs[0]
    starts = np.asarray(t.srcs[1].numpy()).tolist()
    x = ex.src(t, 0)
    begins, ends, axes, steps, squeeze, unsqueeze = [], [], [], [], [], []
    d = out_d = k = 0
    for entry in struct:
        if entry[0] == "n":
            unsqueeze.append(out_d)
            out_d += 1
            continue
        start = starts[k]
        k += 1
        n, step = (entry[1], entry[2]) if entry[0] == "s" else (1, 1)
        begins.append(start)
        ends.append(start + (n - 1) * step + 1 if n else start)
        axes.append(d)
        steps.append(step)
        if entry[0] == "i":
            squeeze.append(d)
        else:
            out_d += 1
        d += 1
    y = ex.op("Slice", [x, ex.ints(begins), ex.ints(ends), ex.ints(axes), ex.ints(steps)])
    if squeeze:
        y = ex.op("Squeeze", [y, ex.ints(squeeze)])
    if unsqueeze:
        y = ex.op("Unsqueeze", [y, ex.ints(unsqueeze)])
    return y


@_converts("sum_run")
def _sum_run(ex: _Exporter, t: Tensor) -> str:
    d0, d1 = t.attrs
    return ex.op("ReduceSum", [ex.src(t, 0), ex.ints(range(d0, d1 + 1))], keepdims=1)


@_converts("softmax_run", "log_softmax_run")
def _softmax(ex: _Exporter, t: Tensor) -> str:
    return ex.op("Softmax" if t.op == "softmax_run" else "LogSoftmax", [ex.src(t, 0)],
                 axis=int(t.attrs[0]))


@_converts("embedding")
def _embedding(ex: _Exporter, t: Tensor) -> str:
    return ex.op("Gather", [ex.src(t, 0), ex.src(t, 1)], axis=0)


@_converts("layer_norm")
def _layer_norm(ex: _Exporter, t: Tensor) -> str:
    D, eps, has_w, has_b = t.attrs
    x = t.srcs[0]
    k = next(k for k in range(1, x.ndim + 1) if math.prod(x.shape[x.ndim - k:]) == D)
    ns = x.shape[x.ndim - k:]
    rest = list(t.srcs[2:])
    w = ex.value(rest.pop(0)) if has_w else ex.const(np.ones(ns, x.dtype))
    b = ex.value(rest.pop(0)) if has_b else ex.const(np.zeros(ns, x.dtype))
    return ex.op("LayerNormalization", [ex.value(x), w, b], axis=-k, epsilon=float(eps))


@_converts("batch_norm")
def _batch_norm(ex: _Exporter, t: Tensor) -> str:
    training, has_w, has_b = t.attrs
    x, stats = t.srcs[0], t.srcs[1]
    if ex.depends(stats):
        raise NotImplementedError("tinyopt.onnx.export: batch norm with batch statistics "
                                  "(training mode, or track_running_stats=False) is not "
                                  "exported")
    mu, _, rstd = np.asarray(stats.numpy())
    shape = (-1,) + (1,) * (x.ndim - 2)
    y = ex.op("Sub", [ex.value(x), ex.const(mu.reshape(shape))])
    y = ex.op("Mul", [y, ex.const(rstd.reshape(shape))])
    rest = list(t.srcs[2:])
    if has_w:
        y = ex.op("Mul", [y, ex.reshape(ex.value(rest.pop(0)), (x.shape[1],), shape)])
    if has_b:
        y = ex.op("Add", [y, ex.reshape(ex.value(rest.pop(0)), (x.shape[1],), shape)])
    return y


def _conv_attrs(x_shape, out_shape, k, s, p, d) -> dict[str, Any]:
    """Conv/pool attributes, the end pads from the output size (asymmetric "same" padding)."""
    ends = [(o - 1) * st + dl * (kk - 1) + 1 - n - pp
            for o, st, dl, kk, n, pp in zip(out_shape[2:], s, d, k, x_shape[2:], p)]
    return dict(kernel_shape=list(k), strides=list(s), pads=list(p) + [max(e, 0) for e in ends],
                dilations=list(d))


@_converts("conv2d")
def _conv2d(ex: _Exporter, t: Tensor) -> str:
    kh, kw, ph, pw, dh, dw = t.attrs[:6]
    attrs = _conv_attrs(t.srcs[0].shape, t.shape, (kh, kw), (1, 1), (ph, pw), (dh, dw))
    return ex.op("Conv", [ex.value(s) for s in t.srcs], **attrs)


@_converts("conv_gemm")
def _conv_gemm(ex: _Exporter, t: Tensor) -> str:
    col = t.srcs[0]
    if col.op != "im2col":
        return _grouped_gemm(ex, t)
    kh, kw, sh, sw, ph, pw, dh, dw = col.attrs
    x = col.srcs[0]
    groups = t.attrs[0]
    N, OC, OH, OW = x.shape[0], t.shape[0], t.shape[2], t.shape[3]
    attrs = _conv_attrs(x.shape, (N, OC, OH, OW), (kh, kw), (sh, sw), (ph, pw), (dh, dw))
    y = ex.op("Conv", [ex.value(x)] + [ex.value(s) for s in t.srcs[1:]], group=int(groups),
              **attrs)
    return ex.op("Transpose", [y], perm=[1, 0, 2, 3])  # conv_gemm's (OC, N, OH, OW) layout


@_converts("col2im")
def _col2im(ex: _Exporter, t: Tensor) -> str:
    """A transposed convolution's (or ``F.fold``'s) columns (C*kH*kW, N, H, W) summed into the
    image: ONNX's Col2Im over the columns laid out as (N, C*kH*kW, H*W)."""
    kh, kw, sh, sw, ph, pw, dh, dw = t.attrs
    col = t.srcs[0]
    CK, N, H, W = col.shape
    cols = ex.op("Reshape", [ex.op("Transpose", [ex.value(col)], perm=[1, 0, 2, 3]),
                             ex.ints([N, CK, H * W])])
    return ex.op("Col2Im", [cols, ex.ints(t.shape[2:]), ex.ints([kh, kw])],
                 dilations=[dh, dw], pads=[ph, pw, ph, pw], strides=[sh, sw])


def _grouped_gemm(ex: _Exporter, t: Tensor) -> str:
    """``conv_gemm`` over columns that are not ``im2col``'s (a transposed convolution's input):
    per group, W (OC/G, K) @ cols (K, N*H*W), as one batched MatMul."""
    G, OCg, K, L = t.attrs
    cols, w = t.srcs[0], t.srcs[1]
    x = ex.op("Reshape", [ex.value(cols), ex.ints([G, K, L])])
    y = ex.op("MatMul", [ex.op("Reshape", [ex.value(w), ex.ints([G, OCg, K])]), x])
    y = ex.op("Reshape", [y, ex.ints(t.shape)])
    if len(t.srcs) > 2:
        y = ex.op("Add", [y, ex.op("Reshape", [ex.value(t.srcs[2]), ex.ints([-1, 1, 1, 1])])])
    return y


@_converts("pool_gather")
def _max_pool(ex: _Exporter, t: Tensor) -> str:
    idx = t.srcs[1]
    if idx.op != "max_pool2d_indices":
        raise NotImplementedError("tinyopt.onnx.export: pool_gather without max_pool2d_indices")
    a = idx.attrs
    x = t.srcs[0]
    attrs = _conv_attrs(x.shape, t.shape, a[0:2], a[2:4], a[4:6], a[6:8])
    return ex.op("MaxPool", [ex.value(x)], **attrs)


@_converts("avg_pool2d")
def _avg_pool(ex: _Exporter, t: Tensor) -> str:
    a = t.attrs
    if a[7]:
        raise NotImplementedError("tinyopt.onnx.export: avg_pool2d with divisor_override")
    x = t.srcs[0]
    attrs = _conv_attrs(x.shape, t.shape, a[0:2], a[2:4], a[4:6], (1, 1))
    del attrs["dilations"]
    return ex.op("AveragePool", [ex.value(x)], count_include_pad=int(bool(a[6])), **attrs)


@_converts("adaptive_avg2")
def _adaptive_avg(ex: _Exporter, t: Tensor) -> str:
    x = t.srcs[0]
    (h, w), (oh, ow) = x.shape[-2:], t.shape[-2:]
    if (oh, ow) == (1, 1):
        return ex.op("GlobalAveragePool", [ex.value(x)])
    if h % oh or w % ow:
        raise NotImplementedError(f"tinyopt.onnx.export: adaptive average pooling from "
                                  f"{(h, w)} to {(oh, ow)} (not a whole number of windows)")
    k = (h // oh, w // ow)
    return ex.op("AveragePool", [ex.value(x)], kernel_shape=list(k), strides=list(k))


@_converts("gather3")
def _gather3(ex: _Exporter, t: Tensor) -> str:
    """Padding and nearest interpolation: index maps along the (D, H, W) of the (B, D, H, W) view,
    a -1 reading the fill value (a slot appended to each axis)."""
    from tinyopt.engine.ops.resample import index_maps, view4
    attrs, fill = t.attrs[:-1], t.attrs[-1]
    k = attrs[1]
    x = t.srcs[0]
    in4, out4 = view4(x.shape, k), view4(t.shape, k)
    maps = index_maps(attrs, in4, out4)
    y = ex.op("Reshape", [ex.value(x), ex.ints(in4)])
    if any((m < 0).any() for m in maps):
        y = ex.op("Pad", [y, ex.ints([0, 0, 0, 0, 0, 1, 1, 1]),
                          ex.const(np.asarray(fill, dtype=x.dtype))])
    for axis, m in enumerate(maps, start=1):
        idx = np.where(m < 0, in4[axis], m).astype(np.int64)
        if not np.array_equal(idx, np.arange(in4[axis])):
            y = ex.op("Gather", [y, ex.const(idx, "index")], axis=axis)
    return ex.op("Reshape", [y, ex.ints(t.shape)])


@_converts("lerp2")
def _lerp2(ex: _Exporter, t: Tensor) -> str:
    """Bilinear interpolation, term by term as the kernel computes it."""
    from tinyopt.engine.ops.resample import lerp_tables, planes3
    x = t.srcs[0]
    h0, h1, lh, w0, w1, lw = lerp_tables(x.shape, t.shape, t.attrs, t.dtype)
    y = ex.op("Reshape", [ex.value(x), ex.ints(planes3(x.shape))])
    rows = [ex.op("Gather", [y, ex.const(h, "index")], axis=1) for h in (h0, h1)]
    corner = {(a, b): ex.op("Gather", [rows[a], ex.const(w, "index")], axis=2)
              for a in (0, 1) for b, w in ((0, w0), (1, w1))}
    dt = t.dtype
    lw_, lh_ = ex.const(lw.reshape(1, 1, -1)), ex.const(lh.reshape(1, -1, 1))
    one_lw = ex.const((1 - lw).astype(dt).reshape(1, 1, -1))
    one_lh = ex.const((1 - lh).astype(dt).reshape(1, -1, 1))

    def row(a: int) -> str:
        return ex.op("Add", [ex.op("Mul", [one_lw, corner[a, 0]]),
                             ex.op("Mul", [lw_, corner[a, 1]])])
    out = ex.op("Add", [ex.op("Mul", [one_lh, row(0)]), ex.op("Mul", [lh_, row(1)])])
    return ex.op("Reshape", [out, ex.ints(t.shape)])


@_converts("hardtanh")
def _hardtanh(ex: _Exporter, t: Tensor) -> str:
    lo, hi = t.attrs
    dt = t.dtype.type
    return ex.op("Clip", [ex.src(t, 0), ex.const(dt(lo)), ex.const(dt(hi))])


@_converts("softplus")
def _softplus(ex: _Exporter, t: Tensor) -> str:
    """log(1 + exp(beta x)) / beta, x itself where beta x > threshold."""
    beta, threshold = t.attrs
    x = ex.src(t, 0)
    dt = t.dtype.type
    z = ex.op("Mul", [x, ex.const(dt(beta))])
    soft = ex.op("Div", [ex.op("Softplus", [z]), ex.const(dt(beta))])
    return ex.op("Where", [ex.op("Greater", [z, ex.const(dt(threshold))]), x, soft])


@_converts("elu")
def _elu(ex: _Exporter, t: Tensor) -> str:
    """scale x for x > 0, else scale alpha (exp(input_scale x) - 1) (ELU, SELU, CELU)."""
    alpha, scale, input_scale = t.attrs
    x = ex.src(t, 0)
    dt = t.dtype.type
    neg = ex.op("Mul", [ex.op("Sub", [ex.op("Exp", [ex.op("Mul", [x, ex.const(dt(input_scale))])]),
                                      ex.const(dt(1))]), ex.const(dt(alpha * scale))])
    return ex.op("Where", [ex.op("Greater", [x, ex.const(dt(0))]),
                           ex.op("Mul", [x, ex.const(dt(scale))]), neg])


@_converts("mish")
def _mish(ex: _Exporter, t: Tensor) -> str:
    x = ex.src(t, 0)
    return ex.op("Mul", [x, ex.op("Tanh", [ex.op("Softplus", [x])])])


@_converts("prelu")
def _prelu(ex: _Exporter, t: Tensor) -> str:
    x, w = t.srcs
    slope = ex.value(w)
    if w.numel() > 1 and x.ndim > 2:  # one weight per channel (dimension 1)
        slope = ex.op("Reshape", [slope, ex.ints((-1,) + (1,) * (x.ndim - 2))])
    return ex.op("PRelu", [ex.value(x), slope])


@_converts("index")
def _index(ex: _Exporter, t: Tensor) -> str:
    """Advanced indexing by one integer array (``x[:, idx]``): Gather along its dimension, with
    negative indices wrapped."""
    (positions,) = t.attrs
    if len(t.srcs) != 2 or len(positions) != 1:
        raise NotImplementedError("tinyopt.onnx.export: indexing with several index arrays")
    x, idx = t.srcs
    d = positions[0]
    i = ex.value(idx) if ex.depends(idx) else \
        ex.const(np.asarray(idx.numpy()) % max(x.shape[d], 1), "index")
    return ex.op("Gather", [ex.value(x), i], axis=int(d))


@_converts("log_sigmoid")
def _log_sigmoid(ex: _Exporter, t: Tensor) -> str:
    return ex.op("Neg", [ex.op("Softplus", [ex.op("Neg", [ex.src(t, 0)])])])


@_converts("group_norm")
def _group_norm(ex: _Exporter, t: Tensor) -> str:
    """(x - mean) / sqrt(var + eps) over each (sample, group), then the channel's affine."""
    G, has_w, has_b = t.attrs
    x, stats = t.srcs[0], t.srcs[1]
    eps = stats.attrs[1]
    N, C = x.shape[:2]
    g = ex.op("Reshape", [ex.value(x), ex.ints([N, G, -1])])
    mu = ex.op("ReduceMean", [g, ex.ints([2])], keepdims=1)
    centered = ex.op("Sub", [g, mu])
    var = ex.op("ReduceMean", [ex.op("Mul", [centered, centered]), ex.ints([2])], keepdims=1)
    rstd = ex.op("Reciprocal", [ex.op("Sqrt", [ex.op("Add", [var, ex.const(
        np.asarray(eps, x.dtype))])])])
    y = ex.op("Reshape", [ex.op("Mul", [centered, rstd]), ex.ints(x.shape)])
    rest = list(t.srcs[2:])
    shape = (C,) + (1,) * (x.ndim - 2)
    if has_w:
        y = ex.op("Mul", [y, ex.op("Reshape", [ex.value(rest.pop(0)), ex.ints(shape)])])
    if has_b:
        y = ex.op("Add", [y, ex.op("Reshape", [ex.value(rest.pop(0)), ex.ints(shape)])])
    return y


@_converts("max_vals", "min_vals", "max_idx", "min_idx")
def _extreme(ex: _Exporter, t: Tensor) -> str:
    """The maximum (minimum) along one dimension, kept, or its first index."""
    (d,) = t.attrs
    op = {"max_vals": "ReduceMax", "min_vals": "ReduceMin", "max_idx": "ArgMax",
          "min_idx": "ArgMin"}[t.op]
    if op.startswith("Reduce"):
        return ex.op(op, [ex.src(t, 0), ex.ints([d])], keepdims=1)
    return ex.op(op, [ex.src(t, 0)], axis=int(d), keepdims=1, select_last_index=0)


# ---- attention: the fused op as MatMul, Softmax, MatMul ------------------------------------------
def _heads(ex: _Exporter, src: Tensor, kind: str, off: int, A: int, B: int, D: int) -> str:
    x = ex.value(src)
    if kind == "4d":
        return ex.reshape(x, src.shape, (A, B, src.shape[-2], D))
    if off or src.shape[-1] != B * D:
        x = ex.op("Slice", [x, ex.ints([off]), ex.ints([off + B * D]), ex.ints([2])])
    N, T = src.shape[:2]
    x = ex.reshape(x, (N, T, B * D), (N, T, B, D))
    return ex.op("Transpose", [x], perm=[0, 2, 1, 3] if kind == "nlc" else [1, 2, 0, 3])


def _attention_probs(ex: _Exporter, ws: Tensor) -> str:
    """The softmax probabilities (A, B, L, S) of the attention workspace ``ws``."""
    name = ex.names.get(id(ws))
    if name is not None:
        return name
    (A, B, L, S, D, Dv, parts, out_kind, scale, has_mask, causal, nan_rows, dropout,
     n_srcs) = ws.attrs[:14]
    if dropout:
        raise NotImplementedError("tinyopt.onnx.export: attention with dropout (export in eval "
                                  "mode)")
    q = _heads(ex, ws.srcs[parts[0][0]], parts[0][1], parts[0][2], A, B, D)
    k = _heads(ex, ws.srcs[parts[1][0]], parts[1][1], parts[1][2], A, B, D)
    scores = ex.op("MatMul", [q, ex.op("Transpose", [k], perm=[0, 1, 3, 2])])
    dt = ws.dtype.type
    scores = ex.op("Mul", [scores, ex.const(dt(scale))])
    if has_mask:
        scores = ex.op("Add", [scores, ex.value(ws.srcs[n_srcs])])
    if causal:
        mask = np.triu(np.full((L, S), -np.inf, ws.dtype), 1)
        scores = ex.op("Add", [scores, ex.const(mask)])
    probs = ex.op("Softmax", [scores], axis=-1)
    ex.names[id(ws)] = probs
    ex._keep.append(ws)
    return probs


@_converts("attention_weights")
def _attention_weights(ex: _Exporter, t: Tensor) -> str:
    return _attention_probs(ex, t.srcs[0])


@_converts("attention_out")
def _attention_out(ex: _Exporter, t: Tensor) -> str:
    ws = t.srcs[0]
    A, B, L, S, D, Dv, parts, out_kind = ws.attrs[:8]
    probs = _attention_probs(ex, ws)
    v = _heads(ex, ws.srcs[parts[2][0]], parts[2][1], parts[2][2], A, B, Dv)
    y = ex.op("MatMul", [probs, v])  # (A, B, L, Dv)
    if out_kind == "4d":
        return y
    if out_kind == "nlc":
        return ex.reshape(ex.op("Transpose", [y], perm=[0, 2, 1, 3]), (A, L, B, Dv),
                          (A, L, B * Dv))
    return ex.reshape(ex.op("Transpose", [y], perm=[2, 0, 1, 3]), (L, A, B, Dv),
                      (L, A, B * Dv))


# ---- recurrent layers: ONNX's LSTM/GRU/RNN over the input projection the graph computed ----------
_ONNX_RNN = {"lstm": ("LSTM", [0, 3, 1, 2]), "gru": ("GRU", [1, 0, 2]),
             "rnn_tanh": ("RNN", [0]), "rnn_relu": ("RNN", [0])}  # torch gate -> ONNX order


def _rnn(ex: _Exporter, out: Tensor) -> list[str]:
    """ONNX's Y, Y_h (and Y_c) of the layer whose visible states are ``out`` (``rnn_out``)."""
    if id(out) in ex.rnn:
        return ex.rnn[id(out)]
    mode, T, B, H, P, reverse, has_bhh, has_h0, has_c0, has_len = out.attrs[:10]
    if P != H or has_len:
        raise NotImplementedError("tinyopt.onnx.export: LSTM projections and packed sequences "
                                  "are not exported")
    op_type, order = _ONNX_RNN[mode]
    n = len(order)
    xw, w_hh = out.srcs[1], out.srcs[2]
    extra = list(out.srcs[3:])
    b_hh = extra.pop(0) if has_bhh else None
    h0 = extra.pop(0) if has_h0 else None
    c0 = extra.pop(0) if has_c0 else None
    dt = np.dtype(out.dtype)
    perm = np.concatenate([np.arange(g * H, (g + 1) * H) for g in order])
    W = np.eye(n * H, dtype=dt)[perm][None]  # X' = X W^T picks torch's gates in ONNX's order
    if ex.depends(w_hh) or (b_hh is not None and ex.depends(b_hh)):
        raise NotImplementedError("tinyopt.onnx.export: recurrent weights computed from inputs")
    R = np.asarray(w_hh.numpy())[perm][None]
    Rb = np.asarray(b_hh.numpy())[perm] if b_hh is not None else np.zeros(n * H, dt)
    bias = np.concatenate([np.zeros(n * H, dt), Rb])[None]
    inputs = [ex.value(xw), ex.const(W, "W"), ex.const(R, "R"), ex.const(bias, "B"), ""]
    inputs.append(ex.op("Unsqueeze", [ex.value(h0), ex.ints([0])]) if h0 is not None else "")
    if mode == "lstm":
        inputs.append(ex.op("Unsqueeze", [ex.value(c0), ex.ints([0])]) if c0 is not None else "")
    while inputs[-1] == "":
        inputs.pop()
    attrs: dict[str, Any] = dict(hidden_size=H, direction="reverse" if reverse else "forward")
    if mode == "gru":
        attrs["linear_before_reset"] = 1
    if mode.startswith("rnn_"):
        attrs["activations"] = ["Tanh" if mode == "rnn_tanh" else "Relu"]
    outs = ex.ops(op_type, inputs, 3 if mode == "lstm" else 2, **attrs)
    ex.rnn[id(out)] = outs
    ex._keep.append(out)
    return outs


@_converts("region")
def _region(ex: _Exporter, t: Tensor) -> str:
    out = t.srcs[0]
    if out.op != "rnn_out":
        raise NotImplementedError("tinyopt.onnx.export: a workspace region of "
                                  f"{out.op!r}")
    mode, T, B, H, P, reverse = out.attrs[:6]
    y = _rnn(ex, out)
    off = t.attrs[0]
    last = 0 if reverse else T
    if t.shape == (T, B, P) and off == (0 if reverse else B * P):
        return ex.op("Squeeze", [y[0], ex.ints([1])])
    if t.shape == (B, P) and off == last * B * P:
        return ex.op("Squeeze", [y[1], ex.ints([0])])
    if mode == "lstm" and t.shape == (B, H) and off == (T + 1) * B * P + last * B * H:
        return ex.op("Squeeze", [y[2], ex.ints([0])])
    raise NotImplementedError("tinyopt.onnx.export: an unexpected part of a recurrent layer's "
                              "states")

