"""Muon: momentum orthogonalized by Newton–Schulz, for 2-d parameters (``torch.optim.Muon``)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from tinyopt.kernels.native import gemm_bf16, half
from tinyopt.kernels import optim as kernels
from tinyopt.optim.flat import FlatBuffer, staggered_zeros
from tinyopt.optim.fused import FusedOptimizer

EPS = 1e-7
DEFAULT_A = 3.4445
DEFAULT_B = -4.7750
DEFAULT_C = 2.0315
DEFAULT_NS_STEPS = 5

NS_PATH = os.environ.get("TINYOPT_MUON_NS", "auto")
"""How Newton–Schulz computes its products: ``"bf16"`` (``kernels/native/gemm_bf16.py``, AVX512-BF16
only), ``"float32"`` (numpy's BLAS on bfloat16 values, rounded after each product), or
``"auto"``: bf16 where the CPU has it and the matrix is large enough to gain
(``BF16_MIN_WORK``).  Tests set it to compare the two; ``TINYOPT_MUON_NS`` sets it at
import."""


class Muon(FusedOptimizer):
    r"""Muon (Jordan et al. 2024, https://kellerjordan.github.io/posts/muon/; Liu et al. 2025,
    https://arxiv.org/abs/2502.16982) as ``torch.optim.Muon``: 2-d parameters only.

    .. math::
        B_t &= \mu B_{t-1} + (1 - \mu) g_t \;(\text{a lerp}), \qquad
        \tilde B_t = \mathrm{lerp}(g_t, B_t, \mu) \text{ if nesterov else } B_t \\
        O_t &= \mathrm{NS}^{(a,b,c)}_k(\tilde B_t), \qquad
        \theta_t = \theta_{t-1}(1 - \gamma\lambda) - \gamma' O_t

    with :math:`\mathrm{NS}` ``ns_steps`` Newton–Schulz iterations :math:`X \leftarrow aX +
    (bA + cA^2)X`, :math:`A = XX^\top`, from :math:`X_0 = \tilde B / \max(\lVert\tilde
    B\rVert_F, \epsilon)` (the wide orientation), in bfloat16 as PyTorch computes it (float32
    sums of the bfloat16 values' products, rounded to bfloat16 where PyTorch's bfloat16 tensors
    round: on a CPU with AVX512-BF16 by tinyopt's bfloat16 GEMM, ``kernels/native/gemm_bf16.py``,
    elsewhere and for small matrices through numpy's float32 BLAS; ``NS_PATH``);
    :math:`\gamma' = \gamma\sqrt{\max(1, A/B)}` (``adjust_lr_fn=None`` or
    ``"original"``) or :math:`0.2\,\gamma\sqrt{\max(A, B)}` (``"match_rms_adamw"``) for an
    :math:`A \times B` parameter.  The momentum and the update are fused walker passes over the
    group's flat buffers; only the matrix products are per parameter.

    State: ``momentum_buffer``.

    Example::

        hidden = [p for p in model.parameters() if p.ndim == 2]
        opt = Muon(hidden, lr=0.02, momentum=0.95)
    """

    kernel = kernels.muon_momentum
    scalar_state = ()

    def __init__(self, params: Iterable, lr: float = 1e-3, weight_decay: float = 0.1,
                 momentum: float = 0.95, nesterov: bool = True,
                 ns_coefficients: tuple[float, float, float] = (DEFAULT_A, DEFAULT_B, DEFAULT_C),
                 eps: float = EPS, ns_steps: int = DEFAULT_NS_STEPS,
                 adjust_lr_fn: str | None = None, *, stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                        ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps,
                        adjust_lr_fn=adjust_lr_fn)
        self._scratch: dict[int, np.ndarray] = {}
        self._ns_work: dict = {}  # the bf16 path's matrices and packed buffers
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Learning rate should be >= 0 but is: {group['lr']}")
        if not 0.0 <= group["momentum"]:
            raise ValueError(f"momentum should be >= 0 but is: {group['momentum']}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"weight decay should be >= 0 but is: {group['weight_decay']}")
        fn = group["adjust_lr_fn"]
        if fn is not None and fn not in ("original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {fn} is not supported")
        # (PyTorch checks these two at the first step)
        if group["ns_steps"] >= 100:
            raise ValueError("Number of steps must be less than 100 for computational efficiency")
        if len(group["ns_coefficients"]) != 3:
            raise ValueError("Coefficients must be a tuple of exactly 3 values")

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        for p in group["params"]:
            if p.ndim != 2:
                raise ValueError(f"Muon only supports 2D parameters whereas we found a parameter "
                                 f"with size: {tuple(p.shape)}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("momentum_buffer",)

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        mu = float(group["momentum"])
        w, m = r(1.0 - mu), r(mu)
        return dict(w=w, w_c=1 - w, mu=m, mu_c=1 - m)

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["nesterov"]), bool(abs(host["w"]) < 0.5), bool(abs(host["mu"]) < 0.5))

    def _run(self, fb: FlatBuffer, group: dict[str, Any], names: tuple[str | None, ...]) -> None:
        u = self._scratch.get(id(fb))
        if u is None:
            u = self._scratch[id(fb)] = staggered_zeros(fb.numel, fb.dtype, len(fb.vectors) + 3)
        host = self.host_scalars(group, fb.round)
        # the first pass does not write the parameters: the plain walker also for 16-bit ones
        args = fb.walker_args(fb.vectors["momentum_buffer"], u, plain=True)
        self.kernel[self.switches(group, host)](*args, fb.host(host))
        lr, coefficients = float(group["lr"]), group["ns_coefficients"]
        for j in np.flatnonzero(fb.flags):
            view = fb.view(u, int(j))
            lr_j = _adjust_lr(lr, group["adjust_lr_fn"], view.shape)
            ortho = _zeropower_via_newtonschulz(view, coefficients, group["ns_steps"],
                                                group["eps"], self._ns_work)
            np.multiply(fb.dtype.type(-lr_j), ortho, out=view)  # (add_'s alpha, then the add)
        wd = float(group["weight_decay"])
        args = fb.walker_args(u)
        self._call(kernels.muon_apply[wd != 0], group, fb, args, dict(decay=1.0 - lr * wd))


def _adjust_lr(lr: float, adjust_lr_fn: str | None, shape: tuple[int, ...]) -> float:
    """The learning rate for an ``A x B`` matrix (PyTorch's ``_adjust_lr``)."""
    a, b = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1, a / b))
    return lr * (0.2 * math.sqrt(max(a, b)))


def _bf16(x: np.ndarray) -> np.ndarray:
    """``x`` (float32, contiguous) rounded to bfloat16 in place (to nearest even), kept as the
    float32 it widens to exactly; returns ``x``."""
    flat = x.reshape(-1)
    bits = np.empty(flat.shape[0], dtype=np.uint16)
    half.round_bf16(flat, bits)
    half.widen_bf16(bits, flat)
    return x


def _bf16_pays(shape: tuple[int, int]) -> bool:
    """Whether Newton–Schulz on a wide matrix (m <= n) takes the bf16 kernels (``NS_PATH``)."""
    if NS_PATH == "float32":
        return False
    if NS_PATH == "bf16":
        if not gemm_bf16.available():
            raise RuntimeError("tinyopt.optim.muon.NS_PATH = 'bf16' needs a CPU with "
                               "AVX512-BF16 (avx512bf16), which this one does not have")
        if not gemm_bf16.usable():
            raise RuntimeError("tinyopt.optim.muon.NS_PATH = 'bf16': the AVX512-BF16 GEMM does "
                               "not compile with this numba/LLVM (see the warning)")
        return True
    m, n = shape
    return m * m * n >= BF16_MIN_WORK and gemm_bf16.usable()


BF16_MIN_WORK = 1 << 21
"""``"auto"`` takes the bf16 path from this many multiply-adds in ``update @ x`` (m^2 n): below
it the bf16 path's fixed costs (conversions, packing, 15 kernel calls) lose to numpy's float32
products.  Newton–Schulz, 5 steps, on the 2-core Zen 4: 64 x 64 0.20 ms float32 against 0.23
bf16, 96 x 96 0.39 against 0.42, 64 x 512 0.71 against 0.65, 128 x 128 0.80 against 0.57."""


def _zeropower_via_newtonschulz(grad: np.ndarray, coefficients, steps: int, eps: float,
                                work: dict | None = None) -> np.ndarray:
    """Newton–Schulz orthogonalization of a matrix as PyTorch's (bfloat16 values, float32
    sums of their products): roughly :math:`US'V^\\top` for :math:`G = USV^\\top`, with
    :math:`S'_{ii}` near 1 (Jordan's quintic coefficients).  ``work`` keeps the bf16 path's
    buffers between calls."""
    a, b, c = (np.float32(v) for v in coefficients)
    x = _bf16(np.array(grad, dtype=np.float32))
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = np.ascontiguousarray(x.T)
    norm = _bf16(np.array([math.sqrt(float(np.sum(x * x, dtype=np.float32)))], np.float32))
    floor = _bf16(np.array([eps], np.float32))
    _bf16(np.divide(x, np.maximum(norm[0], floor[0]), out=x))  # (a NaN eps gives NaN, as torch)
    if steps > 0 and x.size and _bf16_pays(x.shape):
        _newtonschulz_bf16(x, a, b, c, steps, {} if work is None else work)
    else:
        for _ in range(steps):
            gram = _bf16(x @ x.T)  # (numpy: syrk, half a GEMM's multiply-adds)
            # gram is symmetric to the bit (syrk mirrors one triangle), so gram @ gram is the
            # product gram @ gram.T, which numpy also hands to syrk: 1000 x 1000 float32,
            # 9.4 -> 6.0 ms
            update = _bf16(c * (gram @ gram.T) + b * gram)
            x = _bf16(update @ x + a * x)
    return x.T if tall else x


def _newtonschulz_bf16(x: np.ndarray, a, b, c, steps: int, work: dict) -> None:
    """``x`` (m x n float32, bf16 values, m <= n, C-contiguous) <- its Newton–Schulz iterate,
    every product a bf16 GEMM (``kernels/native/gemm_bf16.py``), the matrices kept as bf16 patterns
    between them.  Both Gram products are symmetric to the bit (see ``gemm_bf16.matmul``), so
    each computes its upper triangle only: 4 of the 6 GEMMs' multiply-adds per iteration."""
    m, n = x.shape
    xb, x2 = _buffer(work, "x", (m, n)), _buffer(work, "x2", (m, n))
    gram, update = _buffer(work, "gram", (m, m)), _buffer(work, "update", (m, m))
    packed = work.setdefault("packed", {})
    half.round_bf16(x.reshape(-1), xb.reshape(-1))  # (exact: x holds bf16 values)
    for _ in range(steps):
        gemm_bf16.matmul(xb, xb, gram, b_transposed=True, symmetric=True, work=packed)
        gemm_bf16.matmul(gram, gram, update, b_transposed=True, alpha=c, beta=b, c=gram,
                         symmetric=True, work=packed)
        gemm_bf16.matmul(update, xb, x2, alpha=1.0, beta=a, c=xb, work=packed)
        xb, x2 = x2, xb
    half.widen_bf16(xb.reshape(-1), x.reshape(-1))


def _buffer(work: dict, name: str, shape: tuple[int, int]) -> np.ndarray:
    """A uint16 matrix of ``shape`` over ``work[name]``, one flat buffer grown to the largest
    shape asked for (the group's matrices take turns: memory for the largest, not for each)."""
    size = shape[0] * shape[1]
    flat = work.get(name)
    if flat is None or flat.shape[0] < size:
        flat = work[name] = np.empty(size, np.uint16)
    return flat[:size].reshape(shape)
