"""Kernels of ``embedding_bag`` (``engine/ops/embedding_bag.py``): the reduction of bags of rows of
an embedding table, without materializing the rows.

w (V, D) the table; idx (K,) int64 the indices of all bags, bag b = idx[starts[b]:ends[b]]; psw (K,)
per-sample weights (used when ``has_psw``); out (B, D).  Entries equal to ``padding_idx`` take no
part (and do not count toward a mean); an empty bag gives zeros.  Modes: 0 sum, 1 mean, 2 max.

Indices and bag bounds are user data: each kernel checks them where it reads them and reports the
first bad position in ``err`` (int64 (2,)): err[0] = the position of an index outside [0, V), or
err[1] = a bag whose bounds are not 0 <= start <= end <= K; -1 when all are fine.  The kernel
stops there and the caller raises.
"""

from __future__ import annotations

from tinyopt.kernels.jit import kernel


@kernel
def _bounds_ok(starts, ends, K, err):
    err[0] = -1
    err[1] = -1
    for b in range(starts.shape[0]):
        if starts[b] < 0 or starts[b] > ends[b] or ends[b] > K:
            err[1] = b
            return False
    return True


@kernel
def bag_reduce(w, idx, starts, ends, psw, has_psw, mean, padding_idx, out, err):
    """out[b] = sum_k c_k w[idx[k]] over bag b, c_k = psw[k] (or 1), divided by the bag's
    count of non-padding entries when ``mean``."""
    V, D = w.shape
    if not _bounds_ok(starts, ends, idx.shape[0], err):
        return
    for b in range(out.shape[0]):
        row = out[b]
        row[:] = 0.0
        n = 0
        for k in range(starts[b], ends[b]):
            i = idx[k]
            if i < 0 or i >= V:
                err[0] = k
                return
            if i == padding_idx:
                continue
            n += 1
            c = psw[k] if has_psw else 1.0
            src = w[i]
            for d in range(D):
                row[d] += c * src[d]
        if mean and n > 0:
            inv = 1.0 / n
            for d in range(D):
                row[d] *= inv


@kernel
def bag_reduce_grad(g, idx, starts, ends, psw, has_psw, mean, padding_idx, scale_by_freq,
                    counts, out, err):
    """The gradient of :func:`bag_reduce` with respect to w: out (V, D) = sum over bags b and
    their entries k of c_k g[b] into row idx[k] (divided by the frequency of idx[k] in the batch
    with ``scale_by_freq``); counts (V,) int64 scratch."""
    V, D = out.shape
    if not _bounds_ok(starts, ends, idx.shape[0], err):
        return
    out[:, :] = 0.0
    counts[:] = 0
    for k in range(idx.shape[0]):
        i = idx[k]
        if i < 0 or i >= V:
            err[0] = k
            return
        counts[i] += 1
    for b in range(g.shape[0]):
        n = 0
        if mean:
            for k in range(starts[b], ends[b]):
                if idx[k] != padding_idx:
                    n += 1
        inv = 1.0 / n if n > 0 else 0.0
        gb = g[b]
        for k in range(starts[b], ends[b]):
            i = idx[k]
            if i == padding_idx:
                continue
            c = psw[k] if has_psw else 1.0
            if mean:
                c *= inv
            if scale_by_freq:
                c /= counts[i]
            dst = out[i]
            for d in range(D):
                dst[d] += c * gb[d]


@kernel
def bag_psw_grad(g, w, idx, starts, ends, padding_idx, out, err):
    """The gradient of the 'sum' bag with respect to the per-sample weights:
    out[k] = g[b] . w[idx[k]] for entry k of bag b (0 for padding entries)."""
    V, D = w.shape
    if not _bounds_ok(starts, ends, idx.shape[0], err):
        return
    out[:] = 0.0
    for b in range(g.shape[0]):
        gb = g[b]
        for k in range(starts[b], ends[b]):
            i = idx[k]
            if i < 0 or i >= V:
                err[0] = k
                return
            if i == padding_idx:
                continue
            acc = 0.0
            src = w[i]
            for d in range(D):
                acc += gb[d] * src[d]
            out[k] = acc


@kernel
def bag_argmax(w, idx, starts, ends, padding_idx, arg, err):
    """arg[b, d] = the row idx[k] of bag b holding the largest w[idx[k], d] (the first one; NaN
    wins), or -1 for a bag with no non-padding entry."""
    V, D = w.shape
    if not _bounds_ok(starts, ends, idx.shape[0], err):
        return
    for b in range(arg.shape[0]):
        a = arg[b]
        a[:] = -1
        for k in range(starts[b], ends[b]):
            i = idx[k]
            if i < 0 or i >= V:
                err[0] = k
                return
            if i == padding_idx:
                continue
            src = w[i]
            for d in range(D):
                j = a[d]
                if j < 0:
                    a[d] = i
                else:
                    best = w[j, d]
                    v = src[d]
                    if best == best and (v > best or v != v):
                        a[d] = i


@kernel
def bag_gather(w, arg, out):
    """out[b, d] = w[arg[b, d], d] (0 where arg is -1, or out of range, which bag_argmax never
    gives)."""
    V = w.shape[0]
    for b in range(out.shape[0]):
        for d in range(out.shape[1]):
            j = arg[b, d]
            out[b, d] = w[j, d] if 0 <= j < V else 0.0


@kernel
def bag_scatter(g, arg, out):
    """out (V, D) = 0 but for out[arg[b, d], d] += g[b, d] (the gradient of bag_gather)."""
    out[:, :] = 0.0
    V = out.shape[0]
    for b in range(g.shape[0]):
        for d in range(g.shape[1]):
            j = arg[b, d]
            if 0 <= j < V:
                out[j, d] += g[b, d]
