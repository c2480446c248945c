"""``torch.nn.utils.parametrizations``: ``weight_norm`` and ``spectral_norm`` as parametrizations
(``tinyopt.nn.utils.parametrize``), with PyTorch's state_dict keys and values.

    m = weight_norm(nn.Linear(20, 40))      # m.parametrizations.weight.original0 (g), original1 (v)
    m = spectral_norm(nn.Linear(20, 40))    # weight / sigma, sigma by power iteration

    m = orthogonal(nn.Linear(20, 20))       # weight = base @ matrix_exp(A), A skew-symmetric

``orthogonal`` supports ``matrix_exp``, ``cayley`` and ``householder`` with
``use_trivialization=True`` (the default); ``use_trivialization=False`` raises
``NotImplementedError``.
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine.grad_mode import no_grad
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.nn.module import Module
from tinyopt.nn.utils import parametrize

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:
    """The ``pow``-norm of ``v`` over every dimension but ``dim`` (all of them for -1), shaped
    to broadcast against ``v`` (``torch.norm_except_dim``)."""
    if dim == -1:
        return v.norm(pow)
    d = dim % v.ndim
    rest = tuple(i for i in range(v.ndim) if i != d)
    return v.norm(pow, dim=rest, keepdim=True)


class _WeightNorm(Module):
    """w = g * v / ||v|| (Salimans & Kingma 2016, https://arxiv.org/abs/1602.07868), the norm over
    every dimension but ``dim``."""

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_v * (weight_g / norm_except_dim(weight_v, 2, self.dim))

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int = 0) -> Module:
    """Reparametrize ``module.<name>`` as g * v / ||v|| (g: ``original0``, v: ``original1``)."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


class _SpectralNorm(Module):
    """W / sigma(W), sigma the largest singular value of W reshaped to a matrix (``dim`` first),
    estimated by power iteration (Miyato et al. 2018, https://arxiv.org/abs/1802.05957): ``_u``
    and ``_v`` are updated ``n_power_iterations`` times at every forward pass in training mode."""

    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, "
                             f"{ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError(f"Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            mat = self._matrix(np.asarray(weight.detach().numpy()))
            h, w = mat.shape
            from tinyopt.engine.ops.creation import randn
            u = np.asarray(randn(h, dtype=weight.dtype).numpy())
            v = np.asarray(randn(w, dtype=weight.dtype).numpy())
            self.register_buffer("_u", as_tensor(self._normalize(u)))
            self.register_buffer("_v", as_tensor(self._normalize(v)))
            self._power_method(mat, 15)

    def _matrix(self, w: np.ndarray) -> np.ndarray:
        if self.dim != 0:
            w = np.moveaxis(w, self.dim, 0)
        return w.reshape(w.shape[0], -1)

    def _normalize(self, x: np.ndarray) -> np.ndarray:
        return x / max(float(np.linalg.norm(x)), self.eps)

    def _power_method(self, mat: np.ndarray, n: int) -> None:
        """``n`` power-iteration steps on the buffers (no gradient, as in PyTorch)."""
        u, v = np.asarray(self._u.numpy()), np.asarray(self._v.numpy())
        for _ in range(n):
            u = self._normalize(mat @ v).astype(mat.dtype)
            v = self._normalize(mat.T @ u).astype(mat.dtype)
        self._u = as_tensor(u)
        self._v = as_tensor(v)

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            from tinyopt.nn.functional import normalize
            return normalize(weight, dim=0, eps=self.eps)
        if self.training:
            with no_grad():
                self._power_method(self._matrix(np.asarray(weight.detach().numpy())),
                                   self.n_power_iterations)
        w = weight if self.dim == 0 else weight.movedim(self.dim, 0)
        mat = w.reshape(w.shape[0], -1)
        sigma = (self._u * (mat @ self._v)).sum()
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """Reparametrize ``module.<name>`` as W / sigma(W) (see ``_SpectralNorm``); ``dim`` defaults
    to 1 for transposed convolutions, else 0."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if type(module).__name__.startswith("ConvTranspose") else 0
    parametrize.register_parametrization(module, name,
                                         _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module


def _make_orthogonal(q: np.ndarray) -> np.ndarray:
    """The Q of Q R = q with R's diagonal made positive (torch's ``_make_orthogonal``)."""
    Q, R = np.linalg.qr(q)
    return Q * np.sign(np.diagonal(R, axis1=-2, axis2=-1))[..., None, :]


class _Orthogonal(Module):
    """Q(X) orthogonal for any X: exp(A) of A = tril(X) - tril(X)^T (``matrix_exp``) or the
    product of the Householder reflections in X's columns (``householder``); with
    ``use_trivialization`` (the default) Q = base @ Q(X), ``base`` the orthogonal matrix the
    weight started as, and X starts where Q(X) = I."""

    def __init__(self, weight: Tensor, orthogonal_map: str, *,
                 use_trivialization: bool = True) -> None:
        super().__init__()
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X: Tensor) -> Tensor:
        from tinyopt.linalg import householder_product, matrix_exp, solve
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.transpose(-2, -1)
            n, k = k, n
        if self.orthogonal_map in ("matrix_exp", "cayley"):
            X = X.tril()
            if n != k:
                from tinyopt.engine.ops.movement import cat
                X = cat([X, as_tensor(np.zeros(X.shape[:-1] + (n - k,), X.dtype))], -1)
            A = X - X.transpose(-2, -1)
            if self.orthogonal_map == "matrix_exp":
                Q = matrix_exp(A)
            else:  # the Cayley map (I - A/2)^{-1} (I + A/2)
                eye = as_tensor(np.eye(n, dtype=A.dtype))
                Q = solve(eye - A * 0.5, eye + A * 0.5)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(-2))
            Q = householder_product(A, tau)
            Q = Q * X.diagonal(0, -2, -1).int().unsqueeze(-2)
        if self.base is not None:
            Q = self.base @ Q
        return Q.transpose(-2, -1) if transposed else Q

    def right_inverse(self, Q: Tensor) -> Tensor:
        if Q.shape != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. Got "
                             f"a tensor of shape {Q.shape}.")
        if "base" not in self._buffers:
            raise NotImplementedError("orthogonal(use_trivialization=False) is not supported by "
                                      "tinyopt")
        q = np.asarray(Q.detach().numpy())
        q0 = q
        n, k = q.shape[-2], q.shape[-1]
        if n < k:
            q = np.swapaxes(q, -2, -1)
            n, k = k, n
        if n == k:
            eye = np.eye(n, dtype=q.dtype)
            eps = 10 * n * np.finfo(q.dtype).eps
            ok = np.allclose(np.swapaxes(q, -2, -1) @ q, eye, atol=eps)
            q = q.copy() if ok else _make_orthogonal(q)
        else:
            from tinyopt.engine.ops.creation import randn
            extra = np.asarray(randn(*(q.shape[:-2] + (n, n - k)), dtype=q.dtype).numpy())
            q = _make_orthogonal(np.concatenate([q, extra], -1))
        self.base = as_tensor(q.astype(q0.dtype))
        neg_id = np.zeros_like(q0)
        idx = np.arange(min(q0.shape[-2:]))
        neg_id[..., idx, idx] = -1.0
        return as_tensor(neg_id)


def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:
    """Constrain ``module.<name>`` (a matrix, or a batch of them) to be orthogonal, through
    ``matrix_exp`` (the default for square matrices) or ``householder`` (otherwise)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of "
                         f"{weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    if orthogonal_map not in ("matrix_exp", "cayley", "householder"):
        raise ValueError(f'orthogonal_map has to be one of "matrix_exp", "cayley", '
                         f'"householder". Got: {orthogonal_map}')
    if not use_trivialization:
        raise NotImplementedError("orthogonal(use_trivialization=False) is not supported by "
                                  "tinyopt")
    parametrize.register_parametrization(
        module, name, _Orthogonal(weight, orthogonal_map, use_trivialization=True), unsafe=True)
    return module
