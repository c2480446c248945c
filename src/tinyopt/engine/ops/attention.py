"""Scaled-dot-product attention (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762) as one op.

    out = softmax(scale * Q K^T + M) V        per batch a and head b:  (L, D) (S, D) (S, Dv)

The forward node runs two batched GEMMs (``np.matmul`` over the (batch, head) stack) around one
fused numba kernel (scale, additive mask, causal limit, softmax: ``kernels/attention.py``) and
writes a workspace holding the output, the probabilities (and their dropped-out copy).  The output
is a view of it whose backward rule is one node: dW = dO V^T, the softmax backward kernel
(dS = scale * P * (dW - rowsum(dW * P))), then dQ = dS K, dK = dS^T Q, dV = W^T dO.  The returned
attention weights are another view with their own backward rule, built only when a loss uses them.

Q, K and V may be *parts* of larger tensors, so multi-head attention needs no head split or merge
copies: a part is read through a strided view (``kind``): ``"4d"`` a tensor (A, B, T, D) itself,
``"nlc"`` heads at columns ``offset + b*D`` of a batch-first (N, T, C) tensor (the output of one
``Linear`` producing q, k and v at once), ``"lnc"`` the same for (T, N, C).  The output is written
in one of those layouts too (``"nlc"``/``"lnc"``: heads merged, ready for the output projection),
and the gradient of each source tensor is written directly in its layout.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tinyopt.engine import autocast, grad_mode
from tinyopt.engine.dtypes import FLOATS, is_low
from tinyopt.engine.op import defop, node, own_reshape
from tinyopt.engine.ops.family import c_contiguous
from tinyopt.engine.ops.elementwise import eq, where
from tinyopt.engine.ops.linalg import matmul
from tinyopt.engine.ops.movement import expand, repeat_interleave
from tinyopt.engine.ops.nn import dropout_mask
from tinyopt.engine.ops.reduce import softmax
from tinyopt.engine.ops.workspace import Layout
from tinyopt.engine.random import Generator
from tinyopt.engine.tensor import Tensor, as_tensor, leaf
from tinyopt.kernels import attention as K
from tinyopt.kernels.native import blas, shared_threads

_NO_MASK = {np.dtype(np.float32): np.zeros((1, 1, 1, 1), np.float32),
            np.dtype(np.float64): np.zeros((1, 1, 1, 1), np.float64)}


def _heads(arr: np.ndarray, kind: str, off: int, A: int, B: int, D: int) -> np.ndarray:
    """The (A, B, T, D) view of a part of ``arr`` (see the module docstring)."""
    if kind == "4d":
        return c_contiguous(arr).reshape(A, B, arr.shape[-2], D)  # (not -1: A or B may be 0)
    if kind == "nlc":
        N, T, _ = arr.shape
        return arr[:, :, off:off + B * D].reshape(N, T, B, D).transpose(0, 2, 1, 3)
    T, N, _ = arr.shape
    return arr[:, :, off:off + B * D].reshape(T, N, B, D).transpose(1, 2, 0, 3)


# attrs: (A, B, L, S, D, Dv, parts, out_kind, scale, has_mask, causal, nan_rows, dropout, n_srcs)
# with parts ((src index, kind, offset) of q, k, v).
class _Spec:
    def __init__(self, attrs):
        (self.A, self.B, self.L, self.S, self.D, self.Dv, self.parts, self.out_kind, self.scale,
         self.has_mask, self.causal, self.nan_rows, self.dropout, self.n_srcs) = attrs[:14]

    @property
    def out_shape(self) -> tuple[int, ...]:
        A, B, L, Dv = self.A, self.B, self.L, self.Dv
        return {"4d": (A, B, L, Dv), "nlc": (A, L, B * Dv), "lnc": (L, A, B * Dv)}[self.out_kind]

    def ws(self) -> Layout:
        probs = (self.A, self.B, self.L, self.S)
        parts = [("out", self.out_shape), ("w", probs)]
        if self.dropout:
            parts.append(("p", probs))
        return Layout(parts)

    def q(self, ins):
        si, kind, off = self.parts[0]
        return _heads(ins[si], kind, off, self.A, self.B, self.D)

    def k(self, ins):
        si, kind, off = self.parts[1]
        return _heads(ins[si], kind, off, self.A, self.B, self.D)

    def v(self, ins):
        si, kind, off = self.parts[2]
        return _heads(ins[si], kind, off, self.A, self.B, self.Dv)

    def out(self, arr):
        return _heads(arr, self.out_kind, 0, self.A, self.B, self.Dv)


def _attention_forward(t):
    s = _Spec(t.attrs)
    layout = s.ws()
    fast = t.dtype == np.float32
    softmax = K.masked_softmax[fast, s.has_mask, s.causal, s.nan_rows]
    no_mask = _NO_MASK[t.dtype]
    chunks = None if s.dropout else _Chunks(
        lambda: K.attention_chunks[fast, s.has_mask, s.causal, s.nan_rows], t.dtype, s, 2)

    def fwd(out, *ins):
        W = layout.views(out)
        P = W["p"] if s.dropout else W["w"]
        q, kt, v, o = s.q(ins), s.k(ins).swapaxes(-1, -2), s.v(ins), s.out(W["out"])
        mask = c_contiguous(ins[s.n_srcs]) if s.has_mask else no_mask
        if chunks is not None and chunks.run([(q, kt, P), (W["w"], v, o)], P, mask):
            return
        np.matmul(q, kt, out=P)
        softmax(P, s.scale, mask)
        if s.dropout:
            np.multiply(P, ins[-1], out=W["w"])
        np.matmul(W["w"], v, out=o)
    return fwd


# OpenBLAS splits a GEMM between its threads above m n k = 65536 * 4 (its interface/gemm.c):
# pairs above that run as chunks with BLAS held to one thread (``_Chunks``)
_CHUNK_GEMM_MAX = 65536 * 4


def _causal_tile(L: int) -> int:
    """Query rows per tile of causal chunks, which skip the keys no row of a tile sees
    (``kernels/attention.py``): smaller tiles skip more of the upper triangle, in more, smaller
    GEMMs.  A quarter of the queries, 16 to 32 rows: the small GPT's attention forward and
    backward (256 x 256 x 64 per pair, one core, CPU ms per layer) took 36.5 whole, 29 in tiles
    of 64 rows, 27.5 of 32, 30 of 16; the baby GPT's (64 x 64 x 32) 1.6 whole, 1.5 in tiles of
    32, 1.3 of 16."""
    return min(32, max(L // 4, 16))


class _Chunks:
    """Attention's (batch, head) pairs as chunks on the shared threads (``kernels/attention.py``
    ``attention_chunks``), where that gives the batched path's bits: numpy's BLAS on the
    kernels' threads (``kernels/native/shared_threads.py``), each GEMM the ``cblas_?gemm`` call
    ``np.matmul`` makes (``kernels/native/blas.py`` ``matmul_args``), and small enough for one
    thread.  Pairs whose GEMMs are larger (the small GPT's 256 x 256 x 64) run as chunks too,
    with BLAS on one thread for the while (``blas.single_threaded``): each thread its own
    pairs, rather than every GEMM split between the threads and the softmax kernel, below 4M
    scores, on one (the small GPT's attention forward and backward at 2 threads: 70-77 -> 38-65
    ms wall, 170-310 -> 51 ms CPU, loaded machine).  On one thread the pairs run one after the
    other (a pair's scores stay in the cache between its GEMMs and its softmax).  Causal pairs
    of more than 16 queries compute their products in tiles (:func:`_causal_tile`): the batched
    values to the last place (OpenBLAS may order a smaller product's sums differently)."""

    def __init__(self, make, dtype, s: _Spec, n_gemms: int):
        self._make, self._s = make, s
        self._gemm = blas.gemm_address(dtype)
        self._args = np.zeros(K.ARGS_HEAD + n_gemms * K.GEMM_FIELDS, np.int64)
        self._scale = np.array([s.scale])
        # (the forward's softmax scratch, a row a pair; the backward reads none)
        self._scratch = np.empty((s.A * s.B, K.scratch_width(s.S)) if n_gemms == 2 else 0)
        self._fn = None

    def run(self, gemms, scores, second) -> bool:
        """Run the pairs with the GEMMs ``(x, y, out)`` (stacks (A, B, ., .)), the first before
        the softmax rows and the others after, and the scores (and mask or probabilities)
        ``second``; False (nothing done) where the conditions above do not hold."""
        s = self._s
        if self._gemm is None or s.A * s.B < 2:
            return False
        runner = shared_threads.chunk_runner()
        args = self._args
        d = K.ARGS_HEAD
        small = True
        for x, y, out in gemms:
            call = blas.matmul_args(x, y, out)
            if call is None:
                return False
            small = small and call[2] * call[3] * call[4] <= _CHUNK_GEMM_MAX
            args[d:d + 8] = call[:8]
            for k, arr in enumerate((x, y, out)):
                args[d + 8 + 3 * k:d + 11 + 3 * k] = (arr.ctypes.data, arr.strides[0],
                                                      arr.strides[1])
            d += K.GEMM_FIELDS
        if self._fn is None:
            self._fn = self._make()
        m = second.shape
        args[:K.ARGS_HEAD] = (self._gemm, s.A, s.B, s.L, s.S, scores.ctypes.data,
                              second.ctypes.data, m[0], m[1], m[2], self._scale.ctypes.data,
                              _causal_tile(s.L), self._scratch.ctypes.data)
        if small:
            runner(self._fn.address, s.A * s.B, args.ctypes.data)
        else:
            with blas.single_threaded():
                runner(self._fn.address, s.A * s.B, args.ctypes.data)
        return True


def _grad_layout(s: _Spec, src_shapes, tiled: bool) -> Layout:
    parts = [(f"g{i}", shape) for i, shape in enumerate(src_shapes)]
    parts.append(("dS", (s.A, s.B, s.L, s.S)))
    if not tiled:
        parts.append(("tmp", (s.A, s.B, max(s.L, s.S), max(s.D, s.Dv))))
    return Layout(parts)


def _tiled(s: _Spec, src_shapes) -> list[bool]:
    """For each source: do its q/k/v parts cover it exactly once (so gradients are written, not
    added)?"""
    out = []
    for i, shape in enumerate(src_shapes):
        spans = sorted((off, off + (s.Dv if n == 2 else s.D) * s.B) if kind != "4d"
                       else (0, shape[-1]) for n, (si, kind, off) in enumerate(s.parts)
                       if si == i)
        ok = bool(spans) and spans[0][0] == 0 and spans[-1][1] == shape[-1] and all(
            a[1] == b[0] for a, b in zip(spans, spans[1:]))
        kinds = {kind for si, kind, _ in s.parts if si == i}
        out.append(ok and not ("4d" in kinds and len(spans) > 1))
    return out


def _attention_grad_forward(t):
    s = _Spec(t.attrs)
    from_weights = t.attrs[14]
    src_shapes = [x.shape for x in t.srcs[2:2 + s.n_srcs]]
    tiled = _tiled(s, src_shapes)
    wsl, gl = s.ws(), _grad_layout(s, src_shapes, all(tiled))
    softmax_grad = K.masked_softmax_grad[s.dropout, s.causal]
    chunks = None if s.dropout or from_weights or not all(tiled) else _Chunks(
        lambda: K.attention_grad_chunks[t.dtype == np.float32, s.causal and s.S <= s.L], t.dtype,
        s, 4)

    def fwd(out, g, ws, *ins):
        W, G = wsl.views(ws), gl.views(out)
        P = W["p"] if s.dropout else W["w"]
        keep = ins[-1] if s.dropout else P
        dS = G["dS"]
        g = c_contiguous(g)
        if chunks is not None:
            go, v = s.out(g), s.v(ins)
            grads = [G[f"g{i}"] for i in range(s.n_srcs)]

            def target(n, D):
                si, kind, off = s.parts[n]
                return _heads(grads[si], kind, off, s.A, s.B, D)
            if chunks.run([(go, v.swapaxes(-1, -2), dS), (dS, s.k(ins), target(0, s.D)),
                           (dS.swapaxes(-1, -2), s.q(ins), target(1, s.D)),
                           (W["w"].swapaxes(-1, -2), go, target(2, s.Dv))], dS, P):
                return
        if from_weights:
            dS[...] = g
        else:
            go = s.out(g)
            np.matmul(go, s.v(ins).swapaxes(-1, -2), out=dS)
        softmax_grad(dS, P, keep, s.scale)
        for i, ok in enumerate(tiled):
            if not ok:
                G[f"g{i}"][...] = 0
        grads = [G[f"g{i}"] for i in range(s.n_srcs)]

        def put(n, a, b, D):
            si, kind, off = s.parts[n]
            target = _heads(grads[si], kind, off, s.A, s.B, D)
            if tiled[si]:
                np.matmul(a, b, out=target)
            else:
                tmp = G["tmp"][:, :, :target.shape[2], :D]
                np.matmul(a, b, out=tmp)
                target += tmp
        put(0, dS, s.k(ins), s.D)
        put(1, dS.swapaxes(-1, -2), s.q(ins), s.D)
        if from_weights:
            si, kind, off = s.parts[2]
            if tiled[si]:
                _heads(grads[si], kind, off, s.A, s.B, s.Dv)[...] = 0
        else:
            put(2, W["w"].swapaxes(-1, -2), s.out(g), s.Dv)
    return fwd


def _view(name):
    def view(t):
        layout = _Spec(t.attrs).ws()
        return lambda ws, *_: layout.views(ws)[name]
    return view


def _backward(from_weights: bool):
    def rule(t, g):
        s = _Spec(t.attrs)
        srcs = t.srcs[1:1 + s.n_srcs]
        keep = (t.srcs[-1],) if s.dropout else ()
        gsrcs = (g, t.srcs[0]) + srcs + keep
        shapes = [x.shape for x in srcs]
        gl = _grad_layout(s, shapes, all(_tiled(s, shapes)))
        d = node("attention_grad", gsrcs, (gl.size,), g.dtype, t.attrs + (from_weights,))
        grads = [gl.region(d, f"g{i}") if x.requires_grad else None for i, x in enumerate(srcs)]
        if from_weights:  # no gradient reaches a source that only gives v
            for i in range(len(srcs)):
                if all(si != i for si, _, _ in s.parts[:2]):
                    grads[i] = None
        return (None,) + tuple(grads) + (None,) * (len(t.srcs) - 1 - s.n_srcs)
    return rule


defop("attention", forward=_attention_forward)
defop("attention_grad", forward=_attention_grad_forward)
defop("attention_out", view=_view("out"), backward=_backward(False))
defop("attention_weights", view=_view("w"), backward=_backward(True))


def attention(srcs: list[Tensor], parts, A: int, B: int, L: int, S: int, D: int, Dv: int,
              out_kind: str = "4d", scale: float | None = None, mask: Tensor | None = None,
              causal: bool = False, nan_rows: bool = False, dropout_p: float = 0.0,
              generator: Generator | None = None, need_weights: bool = False
              ) -> tuple[Tensor, Tensor | None]:
    """The attention op over parts of ``srcs`` (see the module docstring): ``parts`` gives
    (source index, kind, column offset) for q, k and v; A batches, B heads, L queries, S keys,
    head sizes D (q, k) and Dv (v).  ``mask``: an additive float mask of shape (Am, Bm, Lm, S)
    with Am in (1, A), Bm in (1, B), Lm in (1, L); ``causal``: query i sees keys j <= i; rows with
    no key left are 0 (NaN with ``nan_rows``).  ``dropout_p`` drops probabilities (drawn from
    ``generator``) and scales the rest by 1 / (1 - p).

    Returns the output (in ``out_kind`` layout) and, with ``need_weights``, the (dropped-out)
    probabilities (A, B, L, S)."""
    dt = srcs[0].dtype
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    extra: tuple[Tensor, ...] = ()
    if mask is not None:
        if mask.requires_grad:
            raise NotImplementedError("scaled_dot_product_attention: gradients with respect to a "
                                      "float attn_mask are not supported (pass a mask that does "
                                      "not require grad)")
        extra += (mask,)
    if dropout_p > 0.0:
        extra += (leaf(dropout_mask(generator, (A, B, L, S), min(dropout_p, 1.0), dt)),)
    attrs = (A, B, L, S, D, Dv, tuple(parts), out_kind, scale, mask is not None, bool(causal),
             bool(nan_rows), dropout_p > 0.0, len(srcs))
    s = _Spec(attrs)
    all_srcs = tuple(srcs) + extra
    ws = node("attention", all_srcs, (s.ws().size,), dt, attrs)
    out = node("attention_out", (ws,) + all_srcs, s.out_shape, dt, attrs)
    w = node("attention_weights", (ws,) + all_srcs, (A, B, L, S), dt, attrs) \
        if need_weights else None
    return out, w


# ---- masks ----------------------------------------------------------------------------------------
def additive_mask(mask, dtype, masked_when: bool, name: str = "attn_mask") -> Tensor:
    """A boolean or float mask as an additive float mask of ``dtype``: booleans equal to
    ``masked_when`` become -inf and the others 0; float masks are used as they are."""
    if isinstance(mask, Tensor):
        if mask.dtype in FLOATS:
            if mask.dtype != dtype:
                raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match "
                                   f"query dtype, but got {name}.dtype: {mask.dtype} and "
                                   f"query.dtype: {dtype} instead.")
            return mask
        if mask.dtype != np.bool_:
            raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query "
                               f"dtype, but got {name}.dtype: {mask.dtype} and  query.dtype: "
                               f"{dtype} instead.")
        neg = leaf(np.array(-np.inf, dtype))
        zero = leaf(np.array(0.0, dtype))
        return where(mask, neg, zero) if masked_when else where(mask, zero, neg)
    m = np.asarray(mask)
    if m.dtype == np.bool_:
        out = np.where(m == masked_when, -np.inf, 0.0).astype(dtype)
    elif m.dtype.kind == "f":
        out = m.astype(dtype)
    else:
        raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query "
                           f"dtype, but got {name}.dtype: {m.dtype} and  query.dtype: {dtype} "
                           f"instead.")
    return leaf(out)


def _mask4(mask: Tensor, lead: tuple[int, ...], L: int, S: int) -> Tensor:
    """``mask`` broadcast against (*lead, L, S), as an (Am, Bm, Lm, S) tensor (see
    :func:`attention`), materialized only where broadcasting cannot be kept."""
    full = lead + (L, S)
    if mask.ndim > len(full):
        raise RuntimeError(f"attn_mask of shape {mask.shape} cannot be broadcast to the attention "
                           f"scores of shape {full}")
    shape = (1,) * (len(full) - mask.ndim) + mask.shape
    for have, want in zip(shape, full):
        if have not in (1, want):
            raise RuntimeError(f"attn_mask of shape {mask.shape} cannot be broadcast to the "
                               f"attention scores of shape {full}")
    m = mask.reshape(shape) if shape != mask.shape else mask
    front, b = shape[:-3], shape[-3] if len(shape) >= 3 else 1
    if not (all(f == 1 for f in front) or front == lead[:-1]) or shape[-1] != S:
        # batch dimensions that do not flatten into one broadcast axis: materialize
        m = expand(m, full[:-3] + shape[-3:-1] + (S,))
        shape = m.shape
        front = shape[:-3]
    Am = math.prod(front) if front else 1
    return m.reshape(Am, b, shape[-2], S)


def _heads_of(x: Tensor, N: int, h: int, T: int, D: int) -> tuple[Tensor, int] | None:
    """``(base, offset)`` where ``x`` is ``base[:, :, offset:offset + h D].view(N, T, h,
    D).transpose(1, 2)`` for a 3-d ``base`` (N, T, C), as nanoGPT makes its heads
    (``c_attn(x).split(C, dim=2)``, a view, a transpose); else None.  Attention then reads the
    heads in ``base`` itself (an ``"nlc"`` part) and writes their gradient there: no copy of q,
    k and v into contiguous stacks, and no slice gradients zero-filled and added up (the small
    GPT's step: ~4% of it, one thread)."""
    if x.op != "permute" or x.attrs != ((0, 2, 1, 3),):
        return None
    r = x.srcs[0]
    if r.op != "reshape" or r.shape != (N, T, h, D):
        return None
    base = r.srcs[0]
    if base.shape != (N, T, h * D):
        return None
    if base.op != "slice":
        return base, 0
    struct, starts = base.attrs[0], base.srcs[1].value
    if starts is None or len(struct) != 3 or any(e[0] != "s" or e[2] != 1 for e in struct) \
            or starts[0] != 0 or starts[1] != 0 or base.srcs[0].shape[:2] != (N, T):
        return None
    return base.srcs[0], int(starts[2])


def attention_composed(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float | None,
                       dropout_p: float, nan_rows: bool = False) -> tuple[Tensor, Tensor]:
    """Attention with an additive ``mask`` that requires grad (a learned bias: Swin's, T5's
    relative positions) from ops autograd differentiates, the mask's gradient being the
    scores': (softmax(q k^T scale + mask) v, the (dropped-out) probabilities).  A row with no
    key left is 0 (its gradients too), as the fused op and torch's SDPA give; NaN with
    ``nan_rows``, as torch's MultiheadAttention when it returns the weights."""
    s = matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None
                                          else float(scale)) + mask
    if nan_rows:
        p = softmax(s, -1)
    else:
        dead = eq(s.amax(-1, keepdim=True), -math.inf)
        zero = leaf(np.zeros((), s.dtype))
        p = where(dead, zero, softmax(where(dead, zero, s), -1))
    if dropout_p > 0.0:
        p = p * leaf(dropout_mask(None, p.shape, min(dropout_p, 1.0), p.dtype))
    return matmul(p, v), p


def _shared_heads(q: Tensor, kv: Tensor) -> Tensor:
    """Grouped-query attention's keys or values (``enable_gqa``): each of their Hkv heads
    (dimension -3) serves Hq / Hkv consecutive query heads, as torch repeats them."""
    if q.ndim < 3:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-q.ndim}, "
                         f"{q.ndim - 1}], but got -3)")
    heads, kv_heads = q.shape[-3], kv.shape[-3]
    if kv_heads == 0 or heads % kv_heads:
        raise RuntimeError("Number of heads in key and value must divide the number of heads in ")
    return kv if kv_heads == heads else repeat_interleave(kv, heads // kv_heads, -3)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(Q K^T * scale + mask) V over the last two dimensions, as
    ``torch.nn.functional.scaled_dot_product_attention``: query (*, L, E), key (*, S, E), value
    (*, S, Ev) -> (*, L, Ev); ``scale`` defaults to 1 / sqrt(E).  ``attn_mask`` broadcasts
    against (*, L, S): boolean (True takes part) or float (added to the scores).  ``is_causal``:
    query i attends to keys j <= i (not together with ``attn_mask``).  ``dropout_p`` > 0 drops
    attention probabilities, in any mode (PyTorch's rule: pass 0 when not training).  A query
    that can attend to no key gets 0.  ``enable_gqa``: key and value may have fewer heads
    (dimension -3) than query, each serving a group of consecutive query heads."""
    query, key, value = autocast.lower(query, key, value)
    q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
    if not (q.dtype == k.dtype == v.dtype):
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got "
                           f"query.dtype: {q.dtype} key.dtype: {k.dtype} and value.dtype: "
                           f"{v.dtype} instead.")
    if q.dtype not in FLOATS and not is_low(q.dtype):
        raise TypeError(f"scaled_dot_product_attention: expected floating point tensors, got "
                        f"{q.dtype}")
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise RuntimeError(f"scaled_dot_product_attention: query, key and value must have the "
                           f"same number of dimensions (at least 2), got shapes {q.shape}, "
                           f"{k.shape} and {v.shape}")
    if enable_gqa:
        k, v = _shared_heads(q, k), _shared_heads(q, v)
    lead = q.shape[:-2]
    if k.shape[:-2] != lead or v.shape[:-2] != lead or k.shape[-1] != q.shape[-1] \
            or v.shape[-2] != k.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: shapes do not match: query "
                           f"{q.shape}, key {k.shape}, value {v.shape} (expected (*, L, E), "
                           f"(*, S, E) and (*, S, Ev) with the same *)")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real) \
            or not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    L, E = q.shape[-2:]
    S, Ev = v.shape[-2:]
    A = math.prod(lead[:-1]) if len(lead) > 1 else 1
    B = lead[-1] if lead else 1
    srcs: list[Tensor] = []
    parts = []
    for x, T, D in ((q, L, E), (k, S, E), (v, S, Ev)):
        part = _heads_of(x, A, B, T, D) if len(lead) == 2 else None
        kind, off = ("4d", 0) if part is None else ("nlc", part[1])
        x = x if part is None else part[0]
        for i, s in enumerate(srcs):
            if s is x:
                break
        else:
            srcs.append(x)
            i = len(srcs) - 1
        parts.append((i, kind, off))
    mask = None
    if attn_mask is not None and is_causal:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    if attn_mask is not None:
        m = additive_mask(attn_mask, q.dtype, False)
        mask = _mask4(m, lead, L, S)
        if m.requires_grad and grad_mode.current.enabled:
            return attention_composed(q, k, v, m, scale, float(dropout_p))[0]
    out, _ = attention(srcs, parts, A, B, L, S, E, Ev, "4d", scale, mask, is_causal,
                       dropout_p=float(dropout_p))
    return own_reshape(out, lead + (L, Ev))
