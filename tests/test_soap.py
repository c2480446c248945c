"""SOAP against a numpy reference of the published update (matrices: Q_L^T G Q_R) and against
pytorch-optimizer."""

from __future__ import annotations

import numpy as np
import pytest
from optim_runs import (assert_close, grads, make, run, run_reference, run_torch,
                        state_dict_halfway, torch_twin)

from tinyopt import Parameter, optim

STEPS = 20
MATRICES = [(3, 4), (5,), (4, 3), (), (0,), (6, 5)]  # (|m - n| <= 1: eigenbases unique up to sign)


def _lerp(a, b, w):
    w = a.dtype.type(w)
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - w)


def _basis(s):
    return np.linalg.eigh(s + s.dtype.type(1e-30) * np.eye(len(s), dtype=s.dtype))[1][:, ::-1]


def ref_soap(p, g, st, h):
    """SOAP (Vyas et al. 2024, Algorithm 1) for a matrix (1-d and 0-d parameters: Adam)."""
    b1, b2 = h["betas"]
    sb = h["shampoo_beta"] if h["shampoo_beta"] is not None else b2
    mat = p.ndim == 2
    if not st:
        st.update(step=0.0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
        if mat:
            st.update(GG0=np.zeros((p.shape[0],) * 2, p.dtype),
                      GG1=np.zeros((p.shape[1],) * 2, p.dtype))
    st["step"] += 1
    s = int(st["step"]) - 1
    if s > 0:
        L, R = (st["Q0"], st["Q1"]) if mat else (None, None)
        rot = (lambda x: L.T @ x @ R) if mat else (lambda x: x)
        back = (lambda x: L @ x @ R.T) if mat else (lambda x: x)
        st["exp_avg"] = _lerp(st["exp_avg"], g, 1 - b1)
        gp = rot(g)
        st["exp_avg_sq"] = _lerp(st["exp_avg_sq"], gp * gp, 1 - b2)
        u = back(rot(st["exp_avg"]) / (np.sqrt(st["exp_avg_sq"]) + h["eps"]))
        step = h["lr"] * np.sqrt(1 - b2 ** s) / (1 - b1 ** s)
        p = (p + p.dtype.type(-step) * u) * p.dtype.type(1 - h["lr"] * h["weight_decay"])
    if mat:
        st["GG0"] = _lerp(st["GG0"], g @ g.T, 1 - sb)
        st["GG1"] = _lerp(st["GG1"], g.T @ g, 1 - sb)
        if s == 0:
            st["Q0"], st["Q1"] = _basis(st["GG0"]), _basis(st["GG1"])
        elif s % h["precondition_frequency"] == 0:
            for i in (0, 1):
                q = st[f"Q{i}"]
                prod = st[f"GG{i}"] @ q
                order = np.argsort(-(q * prod).sum(axis=0), kind="stable")
                st["exp_avg_sq"] = np.take(st["exp_avg_sq"], order, axis=i)
                st[f"Q{i}"] = np.linalg.qr(prod[:, order].astype(np.float32))[0].astype(p.dtype)
    return p


CASES = [(dict(lr=0.01, precondition_frequency=3), dict(lr=0.02, weight_decay=0.0)),
         (dict(lr=0.01, precondition_frequency=2, shampoo_beta=0.9),
          dict(betas=(0.9, 0.99), eps=1e-6))]


def _same_up_to_column_signs(a, b, dtype):
    """Eigenbases (as ``Q<i>``) are unique up to the sign of each column."""
    a, b = np.asarray(a), np.asarray(b)
    signs = np.sign(np.sum(a * b, axis=0))
    assert_close([a * signs], [b], dtype, rtol=1e-4)


@pytest.mark.parametrize("o0,o1", CASES)
def test_matches_numpy_reference(o0, o1):
    dtype = np.float32
    params, opt = make(optim.SOAP, o0, o1, dtype, shapes=MATRICES)
    gs = grads(7, dtype, STEPS, MATRICES)
    ref, states = run_reference(ref_soap, opt, params, gs)
    run(opt, params, gs, range(STEPS))
    assert_close([p.data for p in params], ref, dtype, rtol=1e-5)
    for i, p in enumerate(params):
        assert set(opt.state.get(p, {})) == set(states[i])
        for k in states[i]:
            if k.startswith("Q"):
                _same_up_to_column_signs(opt.state[p][k], states[i][k], dtype)
            else:
                assert_close([opt.state[p][k]], [states[i][k]], dtype, rtol=1e-5)


PACKAGE_CASE = (dict(lr=0.01, precondition_frequency=3, normalize_gradient=True),
                dict(precondition_1d=True, max_precondition_dim=4))


def _against_pytorch_optimizer(torch, pytorch_optimizer, dtype):
    """tinyopt's and pytorch-optimizer's SOAP through the same gradients: every shape of the
    grid (3-d included: one rotation per axis); pytorch-optimizer counts steps per group, so
    every parameter has a gradient at every step."""
    params, opt = make(optim.SOAP, *PACKAGE_CASE, dtype)
    tparams, topt = torch_twin(torch, pytorch_optimizer.SOAP, *PACKAGE_CASE, params)
    gs = grads(11, dtype, STEPS, none=False)
    run(opt, params, gs, range(STEPS))
    run_torch(torch, topt, tparams, gs, range(STEPS))
    return [p.data.numpy() for p in params], [p.detach().numpy() for p in tparams]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_pytorch_optimizer(dtype):
    """Within 1e-6 relative (measured: 7e-8 float32, 4e-8 float64), not closer: the eigenbases
    come from two LAPACKs (numpy's OpenBLAS, PyTorch's MKL) and the rotations from two BLAS
    GEMMs that add in different orders; their last-bit differences grow through the power
    iterations, and in float64 too, since both implementations take the QR in float32.  With
    those computations made the same, the two agree to the bit (the test below)."""
    torch = pytest.importorskip("torch")
    pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
    ours, theirs = _against_pytorch_optimizer(torch, pytorch_optimizer, dtype)
    assert_close(ours, theirs, dtype, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_pytorch_optimizer_to_the_bit_with_numpys_linear_algebra(dtype, monkeypatch):
    """With the reference's eigh, QR, tensordot and matmul computed by numpy (as tinyopt's
    are), its sqrt correctly rounded (PyTorch's CPU sqrt is MKL's vsSqrt, within an ulp but not
    correctly rounded) and its mean by numpy (PyTorch's sum adds in an order set by the CPU's
    vector width), every parameter equals pytorch-optimizer's to the bit: the moments' lerps
    and the step ``p.add_(u, alpha=-step_size)`` round as PyTorch's CPU kernels do (fused
    multiply-adds), and everything else is the same arithmetic in the same order."""
    torch = pytest.importorskip("torch")
    pytorch_optimizer = pytest.importorskip("pytorch_optimizer")

    def numpy_(fn):
        return lambda *a, **k: _tensors(fn(*(x.numpy() for x in a), **k))

    def _tensors(r):
        return tuple(map(_tensors, r)) if isinstance(r, tuple) else torch.from_numpy(np.array(r))

    monkeypatch.setattr(torch.linalg, "eigh", numpy_(np.linalg.eigh))
    monkeypatch.setattr(torch.linalg, "qr", numpy_(np.linalg.qr))
    monkeypatch.setattr(torch, "tensordot", numpy_(lambda a, b, dims: np.tensordot(a, b, dims)))
    monkeypatch.setattr(torch.Tensor, "__matmul__", numpy_(np.matmul))
    monkeypatch.setattr(torch.Tensor, "sqrt", numpy_(np.sqrt))
    monkeypatch.setattr(torch.Tensor, "sqrt_", lambda t: t.copy_(numpy_(np.sqrt)(t)))
    monkeypatch.setattr(torch, "mean",
                        numpy_(lambda a: np.mean(a) if a.size else a.dtype.type("nan")))
    ours, theirs = _against_pytorch_optimizer(torch, pytorch_optimizer, dtype)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_state_dict_saved_halfway_continues_identically():
    state_dict_halfway(optim.SOAP, *CASES[0], STEPS)


def test_a_loaded_preconditioner_must_be_square_for_its_axis():
    p = Parameter(np.ones((3, 4), np.float32))
    opt = optim.SOAP([p])
    p.grad = np.ones((3, 4), np.float32)
    opt.step()
    sd = opt.state_dict()
    sd["state"][0]["Q1"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="'Q1' of shape \\(3, 3\\), expected \\(4, 4\\)"):
        opt.load_state_dict(sd)


@pytest.mark.parametrize("kw,msg", [
    (dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
    (dict(precondition_frequency=0), "Invalid precondition_frequency value: 0"),
    (dict(merge_dims=True), "merge_dims must be False"),
])
def test_argument_checks(kw, msg):
    with pytest.raises(ValueError, match=msg):
        optim.SOAP([Parameter(np.zeros(2, np.float32))], **kw)
