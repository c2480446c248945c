"""Which results are views, as torch has them: an op whose torch result is a new tensor gives a
tensor of its own (``_is_view()`` False, no ``_base``), not a view of a node the op made inside
(``engine.op.own_reshape``); a torch view (``view``, ``squeeze``, ``narrow``, ``unbind``...) is
a view of the same input; and where torch's result is a view of a tensor its op made inside
(``cov``'s ``squeeze``, an unbatched ``conv2d``, ``avg_pool1d``), tinyopt's is one too.  A write
into a result before backward then behaves as in torch: torch's error where its backward reads
the result, else torch's gradient."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyopt as to

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(0)
A = (_rng.random((2, 3, 4)) + 0.5).astype(np.float32)
M = (_rng.random((3, 3)) + 0.5).astype(np.float32)

# Generic calls for the sweep over every public function: the first the torch function accepts
# is the one compared (a = (2, 3, 4), m = (3, 3)).
PATTERNS = (
    lambda a, m: (a,), lambda a, m: (a, 1), lambda a, m: (a, a), lambda a, m: (a, 1, True),
    lambda a, m: (a, 0, 1), lambda a, m: (a, a, a), lambda a, m: (m,), lambda a, m: (m, m),
    lambda a, m: (a, (4, 6)), lambda a, m: (a, 2, 1), lambda a, m: ([a, a],),
)

# Calls the patterns miss (other shapes, paths and keywords); ``F`` is the library's functional.
CASES = {
    "view": lambda L, F, a, m: a.view(6, 4),
    "reshape": lambda L, F, a, m: a.reshape(4, 6),
    "squeeze": lambda L, F, a, m: a[:1].squeeze(0),
    "transpose": lambda L, F, a, m: a.transpose(0, 2),
    "t": lambda L, F, a, m: m.t(),
    "mT": lambda L, F, a, m: a.mT,
    "narrow": lambda L, F, a, m: a.narrow(1, 1, 2),
    "select": lambda L, F, a, m: a.select(2, 1),
    "unbind": lambda L, F, a, m: a.unbind(1),
    "split": lambda L, F, a, m: a.split(2, 2),
    "chunk": lambda L, F, a, m: a.chunk(3, 1),
    "diagonal": lambda L, F, a, m: a.diagonal(0, 1, 2),
    "expand": lambda L, F, a, m: a[:, :1].expand(2, 5, 4),
    "Tensor.unfold": lambda L, F, a, m: a.unfold(2, 2, 1),
    "unsqueeze": lambda L, F, a, m: a.unsqueeze(1),
    "flatten": lambda L, F, a, m: a.flatten(1),
    "flatten one dim": lambda L, F, a, m: a.flatten(1, 1),
    "dropout of nothing": lambda L, F, a, m: F.dropout(a[:0]),
    "contiguous of nothing": lambda L, F, a, m: a[0, :0].t().contiguous(),
    "dropout2d of nothing": lambda L, F, a, m: F.dropout2d(a[:0]),
    "dropout1d of nothing": lambda L, F, a, m: F.dropout1d(a[0, :0]),
    "max_pool3d unbatched": lambda L, F, a, m: F.max_pool3d(a[None], 2),
    "max_pool3d indices": lambda L, F, a, m: F.max_pool3d(a[None], 2, return_indices=True),
    "avg_pool3d unbatched": lambda L, F, a, m: F.avg_pool3d(a[None], 2),
    "adaptive_avg_pool3d unbatched": lambda L, F, a, m: F.adaptive_avg_pool3d(a[None], 1),
    "conv3d unbatched": lambda L, F, a, m: F.conv3d(a[None], L.ones(2, 1, 2, 2, 2)),
    "broadcast_tensors": lambda L, F, a, m: L.broadcast_tensors(a, m[0, :1]),
    "amax all": lambda L, F, a, m: L.amax(a),
    "amax 0-d": lambda L, F, a, m: L.amax(a[0, 0, 0]),
    "amin dims": lambda L, F, a, m: L.amin(a, (0, 2)),
    "argmax all": lambda L, F, a, m: L.argmax(a),
    "prod": lambda L, F, a, m: L.prod(a, 1),
    "prod keepdim": lambda L, F, a, m: L.prod(a, 1, keepdim=True),
    "prod all": lambda L, F, a, m: L.prod(a),
    "norm": lambda L, F, a, m: L.norm(a, dim=(0, 2)),
    "vector_norm": lambda L, F, a, m: L.linalg.vector_norm(a, 3, 1),
    "cdist": lambda L, F, a, m: L.cdist(a, a),
    "pairwise_distance": lambda L, F, a, m: F.pairwise_distance(a, a * 2),
    "kthvalue": lambda L, F, a, m: L.kthvalue(a, 2, 1),
    "kthvalue keepdim": lambda L, F, a, m: L.kthvalue(a, 2, 1, keepdim=True),
    "median dim": lambda L, F, a, m: L.median(a, 2),
    "median": lambda L, F, a, m: L.median(a),
    "sort 0-d": lambda L, F, a, m: L.sort(a[0, 0, 0]),
    "topk 0-d": lambda L, F, a, m: L.topk(a[0, 0, 0], 1),
    "msort 0-d": lambda L, F, a, m: L.msort(a[0, 0, 0]),
    "index_select 0-d": lambda L, F, a, m: L.index_select(a[0, 0, 0], 0, L.tensor([0])),
    "roll": lambda L, F, a, m: L.roll(a, 1),
    "tile": lambda L, F, a, m: L.tile(a, (2, 1)),
    "repeat": lambda L, F, a, m: a.repeat(1, 2, 1),
    "diag": lambda L, F, a, m: L.diag(m),
    "cov": lambda L, F, a, m: L.cov(m),
    "nonzero as_tuple": lambda L, F, a, m: L.nonzero(m > 1.0, as_tuple=True),
    "conv1d": lambda L, F, a, m: F.conv1d(a, a[:, :, :2]),
    "conv1d unbatched": lambda L, F, a, m: F.conv1d(a[0], a[:, :, :2]),
    "conv2d N=1": lambda L, F, a, m: F.conv2d(a[None, :, :, :3].repeat(1, 1, 1, 1),
                                              L.ones(2, 2, 2, 2)),
    "conv2d unbatched": lambda L, F, a, m: F.conv2d(a[:, :, :3], L.ones(2, 2, 2, 2)),
    "max_pool1d": lambda L, F, a, m: F.max_pool1d(a, 2),
    "max_pool1d unbatched": lambda L, F, a, m: F.max_pool1d(a[0], 2),
    "max_pool1d indices": lambda L, F, a, m: F.max_pool1d(a, 2, return_indices=True),
    "avg_pool1d": lambda L, F, a, m: F.avg_pool1d(a, 2),
    "max_pool2d unbatched": lambda L, F, a, m: F.max_pool2d(a, 2),
    "avg_pool2d unbatched": lambda L, F, a, m: F.avg_pool2d(a, 2),
    "adaptive_max_pool2d": lambda L, F, a, m: F.adaptive_max_pool2d(a, (2, 3)),
    "adaptive_avg_pool2d same": lambda L, F, a, m: F.adaptive_avg_pool2d(a, (3, 4)),
    "pixel_shuffle": lambda L, F, a, m: F.pixel_shuffle(a, 1),
    "pixel_unshuffle": lambda L, F, a, m: F.pixel_unshuffle(a.reshape(2, 2, 6)[None], 2),
    "unfold": lambda L, F, a, m: F.unfold(a[None], 2),
    "unfold N=2": lambda L, F, a, m: F.unfold(a[:, None], 2),
    "unfold unbatched": lambda L, F, a, m: F.unfold(a, 2),
    "fold unbatched": lambda L, F, a, m: F.fold(a.reshape(4, 6), (3, 4), 2),
    "sdpa": lambda L, F, a, m: F.scaled_dot_product_attention(a, a, a),
}


def _functional(lib):
    return lib.nn.functional


def _resolve(lib, name):
    # (torch's top-level adaptive_max_pool1d, which tinyopt does not have, returns the indices
    # too: F's is the one to compare)
    for ns in (lib, lib.nn.functional)[name == "adaptive_max_pool1d":]:
        f = getattr(ns, name, None)
        if callable(f) and not isinstance(f, type):
            return f
    return None


def _inputs(lib, mode):
    """(a, m): plain tensors, leaves requiring grad, or non-leaf nodes of a graph."""
    a, m = (lib.tensor(d, requires_grad=mode != "plain") for d in (A, M))
    return (a * 1.0, m * 1.0) if mode == "graph" else (a, m)


def _outs(r):
    """The tensors among a result (a tensor, or a tuple holding some)."""
    rs = r if isinstance(r, (tuple, list)) else [r]
    return [t for t in rs if hasattr(t, "_is_view")]


def _shape(lib, r, ins):
    """Each result's view-ness as comparable across libraries: (is a view, of which input or
    of a tensor made inside (None if not a view), which input it is itself (if one), has no
    ``_base`` unless a view)."""
    where = {id(t): k for k, t in enumerate(ins)}
    return [(t._is_view(), where.get(id(t._base), "inner") if t._is_view() else None,
             where.get(id(t)), t._is_view() or t._base is None) for t in _outs(r)]


# Tensor members not compared: ``detach()`` and ``.data`` share their tensor's storage, which
# tinyopt's storage model records as ``_base`` (DESIGN.md, storage) where torch's has none; the
# rest return no tensor or change the tensor.
_NOT_SWEPT = {"detach", "data", "grad_fn", "backward", "register_hook", "retain_grad",
              "share_memory_", "requires_grad_", "to_sparse", "to_sparse_coo"}


def _sweep_calls():
    """(name, call(L, F, a, m)) for every public function of the op table and of
    ``nn.functional``, and every ``Tensor`` method both libraries have (not in place), with the
    first pattern torch accepts; then the cases."""
    from tinyopt.engine.ops import api_table
    names = sorted({e[1] for e in api_table.entries()}
                   | {n for n in dir(to.nn.functional) if not n.startswith("_")})
    calls = []
    for name in names:
        if _resolve(to, name) is not None and _resolve(torch, name) is not None:
            calls += _first_accepted(name, lambda L, name: _resolve(L, name))
    for name in sorted(dir(to.Tensor)):
        if name.startswith("_") or name.endswith("_") or name in _NOT_SWEPT \
                or not hasattr(torch.Tensor, name):
            continue
        if not callable(getattr(torch.Tensor, name)):  # (a property: ``T``, ``mT``, ``real``)
            calls.append((f"Tensor.{name}", lambda L, F, a, m, name=name: getattr(a, name)))
            continue
        calls += _first_accepted(f"Tensor.{name}", lambda L, name: lambda x, *args: getattr(
            x, name.removeprefix("Tensor."))(*args))
    return calls + list(CASES.items())


def _first_accepted(name, resolve):
    """[(name, call)] with the first of ``PATTERNS`` torch's ``resolve(torch, name)`` accepts
    (none if it accepts none)."""
    for pat in PATTERNS:
        fa, fm = _inputs(torch, "plain")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                resolve(torch, name)(*pat(fa, fm))
        except Exception:
            continue
        return [(name, lambda L, F, a, m: resolve(L, name)(*pat(a, m)))]
    return []


def test_a_result_is_a_view_exactly_where_torchs_is_and_of_the_same_tensor():
    """Over the op table (a generic call per function) and the cases, plain, with leaves
    requiring grad and inside a graph: ``_is_view()``, which tensor ``_base`` is, whether the
    result is an input itself.  (A call one library refuses is the fuzz tests' business, but
    every case runs under torch.)"""
    wrong = []
    for name, call in _sweep_calls():
        for mode in ("plain", "leaf", "graph"):
            shapes = []
            for lib in (torch, to):
                ins = _inputs(lib, mode)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        r = call(lib, _functional(lib), *ins)
                except Exception as e:
                    assert lib is to or name not in CASES, (name, e)
                    shapes.append(type(e).__name__)
                    continue
                shapes.append(_shape(lib, r, ins))
            if shapes[0] != shapes[1] and not any(isinstance(s, str) for s in shapes):
                wrong.append((name, mode, *shapes))
    assert not wrong, "\n".join(map(str, wrong))


# ops tinyopt made return a view of an inner node (or an input itself): a write into the result,
# then backward
WRITES = ("amax all", "amin dims", "median", "prod", "prod all", "norm", "vector_norm", "cdist",
          "pairwise_distance", "kthvalue", "roll", "tile", "diag", "conv1d", "conv2d N=1",
          "max_pool1d", "max_pool2d unbatched", "avg_pool2d unbatched", "adaptive_max_pool2d",
          "adaptive_avg_pool2d same", "pixel_shuffle", "unfold", "unfold N=2", "fold unbatched",
          "sdpa", "broadcast_tensors", "cov", "avg_pool1d", "argmax all", "sort 0-d",
          "topk 0-d", "index_select 0-d", "max_pool3d unbatched", "avg_pool3d unbatched",
          "adaptive_avg_pool3d unbatched")


@pytest.mark.parametrize("name", WRITES)
def test_a_write_into_the_result_before_backward_is_torchs(name):
    """``r.mul_(2)`` and ``(r * r).sum().backward()``: torch's error where torch raises (its
    backward reads the result), else torch's gradient, and torch's values either way."""
    got = []
    for lib in (torch, to):
        a, m = lib.tensor(A, requires_grad=True), lib.tensor(M, requires_grad=True)
        r = _outs(CASES[name](lib, _functional(lib), a * 1.5, m * 1.0))[0]
        if r.dtype == lib.int64:  # (no gradient: the write and the values only)
            r.add_(1)
            got.append((r.numpy().copy(), "no grad"))
            continue
        r.mul_(2.0)
        value = r.detach().numpy().copy()
        try:
            (r * r).sum().backward()
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e)
            got.append((value, "raised"))
        else:
            got.append((value, [None if t.grad is None else t.grad.numpy().copy()
                                for t in (a, m)]))
    (tv, tg), (v, g) = got
    np.testing.assert_allclose(v, tv, rtol=1e-5, atol=1e-6)
    assert isinstance(tg, str) == isinstance(g, str), f"torch: {tg}, tinyopt: {g}"[:200]
    if not isinstance(tg, str):
        for want, have in zip(tg, g):
            assert (want is None) == (have is None)
            if want is not None:
                np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


def test_a_matrix_product_with_a_vector_is_not_a_view():
    """``v @ v``, ``M @ v``, ``v @ M``, ``dot`` and ``mv`` are new tensors, as torch's, with and
    without a gradient recorded, with their values and gradients."""
    for rg in (False, True):
        v = to.tensor(A[0, 0, :3], requires_grad=rg)
        m = to.tensor(M, requires_grad=rg)
        for r, want in ((v @ v, A[0, 0, :3] @ A[0, 0, :3]), (m @ v, M @ A[0, 0, :3]),
                        (v @ m, A[0, 0, :3] @ M), (to.dot(v, v), A[0, 0, :3] @ A[0, 0, :3]),
                        (to.mv(m, v), M @ A[0, 0, :3])):
            assert not r._is_view() and r._base is None
            np.testing.assert_allclose(r.detach().numpy(), want, rtol=1e-6)
        if rg:
            (m @ v).sum().backward()
            np.testing.assert_allclose(v.grad.numpy(), M.sum(0), rtol=1e-6)


def test_split_and_chunk_of_an_empty_dim_give_torchs_empty_views():
    """Along a dim of size 0, ``split(n)`` gives one empty piece and ``chunk(n)`` gives ``n``,
    each a view of the input, as torch's (they gave none)."""
    got = []
    for lib in (torch, to):
        x = lib.ones(0, 3)
        parts = [x.split(2), x.split(1), x.chunk(3), x.chunk(1), x.chunk(2, 1)]
        got.append([[tuple(p.shape) for p in ps] for ps in parts])
        assert all(p._base is x for ps in parts for p in ps)
    assert got[1] == got[0]
