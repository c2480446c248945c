"""Vector norms over one axis, and their gradients.

``x`` is seen as (A, R, B) and reduced over R into ``out`` (A, B); C-contiguous float32/float64,
accumulated in float64.  ``vector_norm[kind]`` is specialized on the order: ``"2"``, ``"1"``,
``"inf"``, ``"-inf"``, ``"0"`` (the count of nonzeros) or ``"p"`` (any other order, passed as
``p``): ||x||_p = (sum |x_r|^p)^(1/p).  The gradient follows PyTorch's ``norm_backward``:
x / ||x|| (p = 2), sign(x) (p = 1), sign(x) [|x| = ||x||] / #ties (p = +-inf), 0 (p = 0), and
sign(x) |x|^(p-1) / ||x||^(p-1) otherwise, with 0 where the norm is 0 (and, for p < 1, where x is).
The parallel loop runs over A: iteration a writes only out[a].
"""

from __future__ import annotations

import math

from tinyopt.kernels.jit import parallel_kernel, prange, specialized


@specialized
def vector_norm(kind: str):
    @parallel_kernel
    def norm_kernel(x, p, out):
        A, R, B = x.shape
        for a in prange(A):
            for b in range(B):
                if kind == "inf" or kind == "-inf":
                    acc = abs(x[a, 0, b]) if R > 0 else (0.0 if kind == "inf" else math.inf)
                    for r in range(1, R):
                        v = abs(x[a, r, b])
                        if kind == "inf":
                            if v > acc or v != v:
                                acc = v
                        elif v < acc or v != v:
                            acc = v
                    out[a, b] = acc
                    continue
                acc = 0.0
                for r in range(R):
                    v = x[a, r, b]
                    if kind == "2":
                        acc += v * v
                    elif kind == "1":
                        acc += abs(v)
                    elif kind == "0":
                        acc += 1.0 if v != 0 else 0.0
                    else:
                        acc += abs(v) ** p
                if kind == "2":
                    out[a, b] = math.sqrt(acc)
                elif kind == "p":
                    out[a, b] = acc ** (1.0 / p)
                else:
                    out[a, b] = acc
    return norm_kernel


@specialized
def vector_norm_grad(kind: str):
    @parallel_kernel
    def norm_grad_kernel(g, x, n, p, out):
        A, R, B = x.shape
        for a in prange(A):
            for b in range(B):
                nv = n[a, b]
                gv = g[a, b]
                ties = 0.0
                if kind == "inf" or kind == "-inf":
                    for r in range(R):
                        if abs(x[a, r, b]) == nv:
                            ties += 1.0
                for r in range(R):
                    v = x[a, r, b]
                    s = 1.0 if v > 0 else (-1.0 if v < 0 else 0.0)
                    if kind == "2":
                        out[a, r, b] = 0.0 if nv == 0 else v * (gv / nv)
                    elif kind == "1":
                        out[a, r, b] = s * gv
                    elif kind == "0":
                        out[a, r, b] = 0.0
                    elif kind == "inf" or kind == "-inf":
                        out[a, r, b] = s * (gv / ties) if abs(v) == nv else 0.0
                    elif p < 1.0:
                        scaled = 0.0 if v == 0 else s * abs(v) ** (p - 1.0)
                        out[a, r, b] = scaled * gv * nv ** (1.0 - p)
                    elif p < 2.0:
                        scale = 0.0 if nv == 0 else gv / nv ** (p - 1.0)
                        out[a, r, b] = s * abs(v) ** (p - 1.0) * scale
                    else:
                        scale = 0.0 if nv == 0 else gv / nv ** (p - 1.0)
                        out[a, r, b] = v * abs(v) ** (p - 2.0) * scale
    return norm_grad_kernel
