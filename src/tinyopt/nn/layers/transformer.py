"""Attention and Transformer layers, as ``torch.nn``: ``MultiheadAttention``,
``TransformerEncoderLayer``, ``TransformerEncoder``, ``TransformerDecoderLayer``,
``TransformerDecoder``, ``Transformer`` (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762).

Parameter names, shapes and initialisation are PyTorch's, so state dicts load both ways:
``MultiheadAttention`` has ``in_proj_weight`` (3E, E) (or ``q_proj_weight``, ``k_proj_weight``,
``v_proj_weight`` when ``kdim``/``vdim`` differ from E), ``in_proj_bias`` (3E,), ``out_proj``
(a Linear) and, with ``add_bias_kv``, ``bias_k`` and ``bias_v`` (1, 1, E).

Self-attention runs as three ops: one ``Linear`` for q, k and v together, the attention op
(``engine/ops/attention.py``), which reads the heads straight out of that projection and writes its
output with the heads merged, and the output ``Linear`` -- no head split/merge copies.  A mask
that is the causal mask (``Transformer.generate_square_subsequent_mask``) is recognised and
applied without reading it.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import numpy as np

from tinyopt.engine import grad_mode
from tinyopt.engine.ops.attention import additive_mask, attention, attention_composed
from tinyopt.engine.ops.movement import cat
from tinyopt.engine.tensor import Parameter, Tensor, as_tensor
from tinyopt.nn import functional as F
from tinyopt.nn import init, kernels_ahead
from tinyopt.nn.containers import ModuleList
from tinyopt.nn.layers._factory import param_dtype
from tinyopt.nn.layers.activation import GELU, ReLU
from tinyopt.nn.layers.dropout import Dropout
from tinyopt.nn.layers.linear import Linear
from tinyopt.nn.layers.normalization import LayerNorm
from tinyopt.nn.module import Module


class NonDynamicallyQuantizableLinear(Linear):
    """``Linear`` under the name PyTorch gives ``MultiheadAttention.out_proj``."""


def _leaf_value(x) -> np.ndarray | None:
    """The value of a mask known when the graph is built (a numpy array or an input leaf)."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, Tensor) and x.op == "input" and x.value is not None:
        return x.value
    return None


def _is_causal(mask, L: int, S: int) -> bool:
    """Whether ``mask`` is exactly the causal mask of an (L, S) attention (float: 0 on and below
    the diagonal, -inf above; bool: True above only)."""
    v = _leaf_value(mask)
    if v is None or v.shape[-2:] != (L, S) or v.ndim > 2 and v.size != L * S:
        return False
    v = v.reshape(L, S)
    above = np.triu(np.ones((L, S), bool), 1)
    if v.dtype == np.bool_:
        return bool(np.array_equal(v, above))
    return bool(np.all(v[above] == -np.inf) and np.all(v[~above] == 0))


class MultiheadAttention(Module):
    """Multi-head attention: out = concat_h(softmax(q_h k_h^T / sqrt(d) + mask) v_h) W_o^T + b_o
    with q = query W_q^T + b_q (and so for k, v), as ``torch.nn.MultiheadAttention``.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (output, weights or None)``; inputs (L, N, E)
    ((N, L, E) with ``batch_first``) or unbatched (L, E).  Boolean masks are True where attention
    is *not* allowed; float masks are added to the scores."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False,
                 kdim: int | None = None, vdim: int | None = None, batch_first: bool = False,
                 device=None, dtype=None) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim="
                             f"{embed_dim} and num_heads={num_heads} instead")
        super().__init__()
        dt = param_dtype(device, dtype)
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        E = embed_dim
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(np.empty((E, E), dt))
            self.k_proj_weight = Parameter(np.empty((E, self.kdim), dt))
            self.v_proj_weight = Parameter(np.empty((E, self.vdim), dt))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(np.empty((3 * E, E), dt))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(np.empty((3 * E,), dt))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(E, E, bias=bias, dtype=dt)
        if add_bias_kv:
            self.bias_k = Parameter(np.empty((1, 1, E), dt))
            self.bias_v = Parameter(np.empty((1, 1, E), dt))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def _projections(self, q: Tensor, k: Tensor, v: Tensor, packed: bool):
        """(sources, parts) of q, k and v after the input projection (see engine/ops/attention)."""
        E = self.embed_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        chunk = (lambda i: None) if b is None else (lambda i: b[i * E:(i + 1) * E])
        if packed and q is k and k is v:
            return [F.linear(q, w, b)], [(0, 0), (0, E), (0, 2 * E)]
        if packed and k is v:
            kv = F.linear(k, w[E:], None if b is None else b[E:])
            return [F.linear(q, w[:E], chunk(0)), kv], [(0, 0), (1, 0), (1, E)]
        if self._qkv_same_embed_dim:
            ws = (w[:E], w[E:2 * E], w[2 * E:])
        else:
            ws = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        srcs = [F.linear(x, wi, chunk(i)) for i, (x, wi) in enumerate(zip((q, k, v), ws))]
        return srcs, [(0, 0), (1, 0), (2, 0)]

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False
                ) -> tuple[Tensor, Tensor | None]:
        q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
        batched = _mha_shape_check(q, k, v, key_padding_mask, attn_mask, self.num_heads)
        same_kv, same_qk = key is value, query is key
        if not batched:  # as PyTorch: a batch of one, sequence first
            q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = _unsqueeze0(key_padding_mask)
        kind = "nlc" if self.batch_first and batched else "lnc"
        seq = 1 if kind == "nlc" else 0
        L, N, E = q.shape[seq], q.shape[1 - seq], q.shape[2]
        if E != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got "
                                 f"{E}")
        if q.dtype != self.out_proj.weight.dtype:
            raise RuntimeError(f"MultiheadAttention: query has dtype {q.dtype}, expected "
                               f"{self.out_proj.weight.dtype} (the weights' dtype)")
        extra_kv = self.bias_k is not None or self.add_zero_attn
        packed = self._qkv_same_embed_dim and not extra_kv
        srcs, parts = self._projections(q if not same_qk else k, k, v if not same_kv else k,
                                        packed)
        if extra_kv:
            srcs = self._extend_kv(srcs, kind, N)
        S = srcs[parts[1][0]].shape[seq]

        mask = None
        causal = False
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                               "Transformer module method `generate_square_subsequent_mask` to "
                               "create this mask.")
        if attn_mask is not None and key_padding_mask is None and not need_weights \
                and not extra_kv and (is_causal or _is_causal(attn_mask, L, S)
                                      and not _learned(attn_mask)):
            causal = True  # PyTorch's hint; the mask is not read
        else:
            mask = self._merged_mask(attn_mask, key_padding_mask, q.dtype, N, L, S, extra_kv)
        H, D = self.num_heads, self.head_dim
        dropout_p = self.dropout if self.training else 0.0
        if _learned(mask) and grad_mode.current.enabled:
            out, weights = self._attention_composed(srcs, parts, kind, N, L, S, mask, dropout_p,
                                                    need_weights)
        else:
            if not dropout_p:
                kernels_ahead.attention(q.dtype, mask is not None, causal, need_weights, L, S)
            out, weights = attention(
                srcs, [(si, kind, off) for si, off in parts], N, H, L, S, D, D, kind, None, mask,
                causal, nan_rows=need_weights, dropout_p=dropout_p, need_weights=need_weights)
        out = self.out_proj(out)
        if not batched:
            out = out.squeeze(1)
        if need_weights:
            if average_attn_weights:
                weights = weights.mean(1)
            if not batched:
                weights = weights.squeeze(0)
        return out, weights

    def _attention_composed(self, srcs: list[Tensor], parts, kind: str, N: int, L: int, S: int,
                            mask: Tensor, dropout_p: float, need_weights: bool
                            ) -> tuple[Tensor, Tensor | None]:
        """Attention under a float mask that requires grad (a learned bias, which the fused op
        does not differentiate), composed of matmul and softmax: the heads (N, H, T, D) taken
        out of the projections, and the output's merged back into ``kind``."""
        H, D = self.num_heads, self.head_dim

        def heads(si: int, off: int, T: int) -> Tensor:
            x = srcs[si][:, :, off:off + H * D]
            if kind == "nlc":
                return x.reshape(N, T, H, D).transpose(1, 2)
            return x.reshape(T, N, H, D).permute(1, 2, 0, 3)

        q, k, v = (heads(si, off, T) for (si, off), T in zip(parts, (L, S, S)))
        out, weights = attention_composed(q, k, v, mask, None, dropout_p, nan_rows=need_weights)
        out = out.transpose(1, 2) if kind == "nlc" else out.permute(2, 0, 1, 3)
        return out.reshape(out.shape[:2] + (H * D,)), weights if need_weights else None

    def _extend_kv(self, srcs: list[Tensor], kind: str, N: int) -> list[Tensor]:
        """k and v with ``bias_k``/``bias_v`` and a zero step appended (add_bias_kv,
        add_zero_attn)."""
        seq = 1 if kind == "nlc" else 0
        E = self.embed_dim
        out = list(srcs)
        for i, extra in ((1, self.bias_k), (2, self.bias_v)):
            pieces = [out[i]]
            shape = (N, 1, E) if kind == "nlc" else (1, N, E)
            if extra is not None:
                pieces.append(extra.reshape(1, 1, E).expand(shape))
            if self.add_zero_attn:
                pieces.append(as_tensor(np.zeros(shape, out[i].dtype)))
            out[i] = cat(pieces, seq)
        return out

    def _merged_mask(self, attn_mask, key_padding_mask, dtype, N: int, L: int, S: int,
                     padded: bool) -> Tensor | None:
        """attn_mask (L, S) or (N*H, L, S) and key_padding_mask (N, S) as one additive mask of
        shape (1 or N, 1 or H, L, S)."""
        H = self.num_heads
        extra = (self.bias_k is not None) + bool(self.add_zero_attn) if padded else 0
        if attn_mask is not None and key_padding_mask is not None \
                and _is_bool(attn_mask) != _is_bool(key_padding_mask):
            warnings.warn("Support for mismatched key_padding_mask and attn_mask is deprecated. "
                          "Use same type for both instead.", stacklevel=3)
        m = None
        if attn_mask is not None:
            a = additive_mask(attn_mask, dtype, True)
            if extra:
                a = cat([a, as_tensor(np.zeros(a.shape[:-1] + (extra,), dtype))], -1)
            if a.ndim == 2:
                if a.shape != (L, S):
                    raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(a.shape)}, but "
                                       f"should be {(L, S)}.")
                m = a.reshape(1, 1, L, S)
            elif a.ndim == 3:
                if a.shape != (N * H, L, S):
                    raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(a.shape)}, but "
                                       f"should be {(N * H, L, S)}.")
                m = a.reshape(N, H, L, S)
            else:
                raise RuntimeError(f"attn_mask's dimension {a.ndim} is not supported")
        if key_padding_mask is not None:
            kp = additive_mask(key_padding_mask, dtype, True, "key_padding_mask")
            if extra:
                kp = cat([kp, as_tensor(np.zeros(kp.shape[:-1] + (extra,), dtype))], -1)
            if kp.shape != (N, S):
                raise RuntimeError(f"Expected key_padded_mask.shape[0] to be {N}, but got "
                                   f"{kp.shape[0]}" if kp.shape[0] != N else
                                   f"Expected key_padded_mask.shape[1] to be {S}, but got "
                                   f"{kp.shape[-1]}")
            kp = kp.reshape(N, 1, 1, S)
            m = kp if m is None else m + kp
        return m

    def extra_repr(self) -> str:
        return ""


def _learned(mask) -> bool:
    """Whether ``mask`` is a tensor that requires grad (a learned bias)."""
    return isinstance(mask, Tensor) and mask.requires_grad


def _is_bool(mask) -> bool:
    return (mask.dtype if isinstance(mask, Tensor) else np.asarray(mask).dtype) == np.bool_


def _unsqueeze0(mask):
    return mask[None] if isinstance(mask, np.ndarray) else as_tensor(mask).unsqueeze(0)


def _mha_shape_check(q: Tensor, k: Tensor, v: Tensor, key_padding_mask, attn_mask,
                     num_heads: int) -> bool:
    """PyTorch's checks of the input ranks; returns whether the input is batched."""
    kpm = None if key_padding_mask is None else np.ndim(key_padding_mask) \
        if not isinstance(key_padding_mask, Tensor) else key_padding_mask.ndim
    am = None if attn_mask is None else np.ndim(attn_mask) \
        if not isinstance(attn_mask, Tensor) else attn_mask.ndim
    if q.ndim == 3:
        if k.ndim != 3 or v.ndim != 3:
            raise AssertionError(f"For batched (3-D) `query`, expected `key` and `value` to be "
                                 f"3-D but found {k.ndim}-D and {v.ndim}-D tensors respectively")
        if kpm is not None and kpm != 2:
            raise AssertionError(f"For batched (3-D) `query`, expected `key_padding_mask` to be "
                                 f"`None` or 2-D but found {kpm}-D tensor instead")
        if am is not None and am not in (2, 3):
            raise AssertionError(f"For batched (3-D) `query`, expected `attn_mask` to be `None`, "
                                 f"2-D or 3-D but found {am}-D tensor instead")
        return True
    if q.ndim == 2:
        if k.ndim != 2 or v.ndim != 2:
            raise AssertionError(f"For unbatched (2-D) `query`, expected `key` and `value` to be "
                                 f"2-D but found {k.ndim}-D and {v.ndim}-D tensors respectively")
        if kpm is not None and kpm != 1:
            raise AssertionError(f"For unbatched (2-D) `query`, expected `key_padding_mask` to be "
                                 f"`None` or 1-D but found {kpm}-D tensor instead")
        if am is not None:
            if am not in (2, 3):
                raise AssertionError(f"For unbatched (2-D) `query`, expected `attn_mask` to be "
                                     f"`None`, 2-D or 3-D but found {am}-D tensor instead")
            if am == 3:
                shape = attn_mask.shape
                want = (num_heads, q.shape[0], k.shape[0])
                if tuple(shape) != want:
                    raise AssertionError(f"Expected `attn_mask` shape to be {want} but got "
                                         f"{tuple(shape)}")
        return False
    raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received "
                         f"{q.ndim}-D query tensor")


# ---- Transformer layers -------------------------------------------------------------------------
def _activation(activation) -> Callable:
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return activation


def _relu_or_gelu(activation) -> int:
    if activation is F.relu or isinstance(activation, ReLU):
        return 1
    if activation is F.gelu or isinstance(activation, GELU):
        return 2
    return 0


def _seq_len(x, batch_first: bool) -> int:
    x = as_tensor(x)
    return x.shape[0] if x.ndim == 2 else x.shape[1 if batch_first else 0]


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and LayerNorm:
    x = norm1(x + SA(x)); x = norm2(x + FF(x)), or with ``norm_first``
    x = x + SA(norm1(x)); x = x + FF(norm2(x)); FF(x) = linear2(dropout(act(linear1(x))))."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        activation = _activation(activation)
        self.activation_relu_or_gelu = _relu_or_gelu(activation)
        self.activation = activation
        if activation is F.relu:  # (an nn.ReLU declares its kernel itself)
            kernels_ahead.relu(self.linear1.weight.dtype)

    def forward(self, src, src_mask=None, src_key_padding_mask=None,
                is_causal: bool = False) -> Tensor:
        x = as_tensor(src)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's output (``memory``) and a feed-forward block,
    each with a residual connection and LayerNorm (after each block, or before with
    ``norm_first``)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                            batch_first=batch_first, bias=bias, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                                 batch_first=batch_first, bias=bias, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)
        if self.activation is F.relu:
            kernels_ahead.relu(self.linear1.weight.dtype)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        x = as_tensor(tgt)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask,
                                    memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                               memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        mem = as_tensor(mem)
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x) -> Tensor:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


def _clones(module: Module, n: int) -> ModuleList:
    """``n`` deep copies of ``module``, without its gradients (torch's Parameter copies none)."""
    copies = [copy.deepcopy(module) for _ in range(n)]
    for c in copies:
        for p in c.parameters():
            p.grad = None
    return ModuleList(copies)


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (deep copies, as PyTorch), then ``norm``.
    ``enable_nested_tensor`` and ``mask_check`` are accepted (tinyopt has no nested tensors)."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int,
                 norm: Module | None = None, enable_nested_tensor: bool = True,
                 mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = False
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None,
                is_causal: bool | None = None) -> Tensor:
        output = as_tensor(src)
        if is_causal is None:
            first = self.layers[0]
            batch_first = first.self_attn.batch_first if hasattr(first, "self_attn") else False
            n = _seq_len(src, batch_first)
            is_causal = mask is not None and _is_causal(mask, n, n)
        for mod in self.layers:
            output = mod(output, src_mask=mask, is_causal=is_causal,
                         src_key_padding_mask=src_key_padding_mask)
        if self.norm is not None:
            output = self.norm(output)
        return output


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer``, then ``norm``."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int,
                 norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        output = as_tensor(tgt)
        if tgt_is_causal is None:
            first = self.layers[0]
            batch_first = first.self_attn.batch_first if hasattr(first, "self_attn") else False
            n = _seq_len(tgt, batch_first)
            tgt_is_causal = tgt_mask is not None and _is_causal(tgt_mask, n, n)
        for mod in self.layers:
            output = mod(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask,
                         memory_key_padding_mask=memory_key_padding_mask,
                         tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    """An encoder-decoder Transformer, as ``torch.nn.Transformer``: ``forward(src, tgt, ...)``
    encodes ``src`` and decodes ``tgt`` attending to it.  Weight matrices start Xavier-uniform."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = F.relu, custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation,
                                            layer_norm_eps, batch_first, norm_first, bias, **kw)
            self.encoder = TransformerEncoder(layer, num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias,
                                                        **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation,
                                            layer_norm_eps, batch_first, norm_first, bias, **kw)
            self.decoder = TransformerDecoder(layer, num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias,
                                                        **kw))
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        s, t = as_tensor(src), as_tensor(tgt)
        batched = s.ndim == 3
        b = 0 if self.batch_first else 1
        if batched and s.shape[b] != t.shape[b]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if s.shape[-1] != self.d_model or t.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(s, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(t, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """The (sz, sz) causal mask: 0 on and below the diagonal, -inf above (float32 unless
        ``dtype`` says otherwise)."""
        dt = param_dtype(device, dtype)
        return as_tensor(np.triu(np.full((sz, sz), -np.inf, dt), 1))

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
