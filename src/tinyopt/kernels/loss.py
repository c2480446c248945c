"""Loss kernels over rows of logits: cross-entropy (with class weights and label smoothing) and
negative log-likelihood, and their gradients.

Shapes: logits ``x`` (N, C) C-contiguous float32/float64, targets ``y`` (N,) int64, class weights
``w`` (C,).  Rows whose target equals ``ignore_index`` give zero loss and zero gradient.

Targets are user data, so every kernel that indexes with them checks each one where it reads it
(one comparison per row) and reports the first out of ``[0, C)`` in ``err`` (int64 (1,)): ``err[0]``
is its row, or -1 when all are in range.  The kernel stops at that row (its output is then
incomplete); the caller raises.  No path reaches an index unchecked, whatever built the targets.
"""

from __future__ import annotations

import math

from tinyopt.kernels.jit import kernel


@kernel
def ce_rows(x, y, w, ignore_index, eps, out, err):
    """out[i] = (1-eps) w[y_i] (-log p_i[y_i]) + (eps/C) sum_c w_c (-log p_i[c]),
    p_i = softmax(x_i) (the label-smoothed, class-weighted cross-entropy of row i)."""
    N, C = x.shape
    err[0] = -1
    for i in range(N):
        t = y[i]
        if t == ignore_index:
            out[i] = 0.0
            continue
        if t < 0 or t >= C:
            err[0] = i
            return
        m = x[i, 0]
        for c in range(1, C):
            if x[i, c] > m or x[i, c] != x[i, c]:
                m = x[i, c]
        acc = 0.0
        for c in range(C):
            acc += math.exp(x[i, c] - m)
        lse = m + math.log(acc)
        loss = (1.0 - eps) * w[t] * (lse - x[i, t])
        if eps != 0.0:
            smooth = 0.0
            for c in range(C):
                smooth += w[c] * (lse - x[i, c])
            loss += eps / C * smooth
        out[i] = loss


@kernel
def ce_rows_grad(g, x, y, w, ignore_index, eps, out, err):
    """d/dx of ce_rows times g: out[i, k] = g_i ((1-eps) w[y_i] (p_k - [k = y_i])
    + (eps/C) (p_k sum_c w_c - w_k)); on an ignored row 0 p_k, as PyTorch's log_softmax backward
    (0 - p_k 0): NaN where p_k is (a NaN or +inf in the row), else 0."""
    N, C = x.shape
    err[0] = -1
    wsum = 0.0
    for c in range(C):
        wsum += w[c]
    for i in range(N):
        t = y[i]
        ignored = t == ignore_index
        if not ignored and (t < 0 or t >= C):
            err[0] = i
            return
        if C == 0:  # (an ignored row of no classes)
            continue
        m = x[i, 0]
        for c in range(1, C):
            if x[i, c] > m or x[i, c] != x[i, c]:
                m = x[i, c]
        acc = 0.0
        for c in range(C):
            e = math.exp(x[i, c] - m)
            out[i, c] = e
            acc += e
        inv = 1.0 / acc
        if ignored:
            for c in range(C):
                out[i, c] = 0.0 * (out[i, c] * inv)
            continue
        a = g[i] * (1.0 - eps) * w[t]
        b = g[i] * eps / C
        for c in range(C):
            p = out[i, c] * inv
            out[i, c] = a * p + b * (p * wsum - w[c])
        out[i, t] -= a


@kernel
def nll_rows(logp, y, w, ignore_index, out, err):
    """out[i] = -w[y_i] logp[i, y_i] (0 for ignored rows)."""
    C = logp.shape[1]
    err[0] = -1
    for i in range(logp.shape[0]):
        t = y[i]
        if t == ignore_index:
            out[i] = 0.0
        elif t < 0 or t >= C:
            err[0] = i
            return
        else:
            out[i] = -w[t] * logp[i, t]


@kernel
def nll_rows_grad(g, y, w, ignore_index, out, err):
    """out[i, c] = -g_i w[y_i] where c = y_i, else 0."""
    N, C = out.shape
    err[0] = -1
    for i in range(N):
        for c in range(C):
            out[i, c] = 0.0
        t = y[i]
        if t == ignore_index:
            continue
        if t < 0 or t >= C:
            err[0] = i
            return
        out[i, t] = -g[i] * w[t]


@kernel
def _target_weight_sum(y, w, ignore_index, err):
    """sum_i w[y_i] over rows not ignored (float64): the divisor of a 'mean' reduction."""
    C = w.shape[0]
    err[0] = -1
    acc = 0.0
    for i in range(y.shape[0]):
        t = y[i]
        if t != ignore_index:
            if t < 0 or t >= C:
                err[0] = i
                return 0.0
            acc += w[t]
    return acc


@kernel
def mean_of_rows(rows, y, w, ignore_index, out, err):
    """The 'mean' reduction of row losses, as PyTorch's: out[0] = sum_i rows_i / sum_i w[y_i]
    over rows not ignored (0/0 = NaN when every row is, without numpy's warning, as PyTorch)."""
    acc = 0.0
    for i in range(rows.shape[0]):
        acc += rows[i]
    out[0] = acc / _target_weight_sum(y, w, ignore_index, err)


@kernel
def mean_of_rows_grad(g, y, w, ignore_index, out, err):
    """The adjoint of :func:`mean_of_rows`: out[i] = g[0] / sum_i w[y_i], each row's share."""
    share = g[0] / _target_weight_sum(y, w, ignore_index, err)
    for i in range(out.shape[0]):
        out[i] = share


@kernel
def one_hot(y, out, err):
    """out[i, c] = 1 where c = y_i, else 0 (int64)."""
    N, C = out.shape
    err[0] = -1
    for i in range(N):
        for c in range(C):
            out[i, c] = 0
        t = y[i]
        if t < 0 or t >= C:
            err[0] = i
            return
        out[i, t] = 1
