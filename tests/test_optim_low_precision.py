"""Fused optimizers over float16/bfloat16 parameters: float32 master weights and state, and the
parameters rewritten (rounded) in the same kernel call.

The master weights must follow exactly the float32 run that starts from the same (widened)
values and gets the same gradients: bit for bit, state included; the 16-bit parameters must be
exactly the rounding of the masters.  Every fused optimizer of ``tinyopt.optim`` is swept.
"""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest

from tinyopt import Parameter, optim
from tinyopt.optim.fused import FusedOptimizer

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)

SHAPES = [(3, 4), (5,), (0,), (2, 3), (40000,)]  # the last one spans chunks
GROUP_OF = [0, 1, 0, 0, 1]
STEPS = 30

FUSED = sorted((c for _, c in inspect.getmembers(optim, inspect.isclass)
                if issubclass(c, FusedOptimizer) and c is not FusedOptimizer
                # Muon: 2-d parameters only (tests/test_muon.py); Adafactor: empty parameters
                # raise as torch's, eps1 is the 16-bit dtype's (tests/test_adafactor.py);
                # Prodigy: its groups' lrs are one or 0 (tests/test_prodigy.py)
                and c not in (optim.Muon, optim.Adafactor, optim.Prodigy)),
               key=lambda c: c.__name__)


def _make(cls, dtype, seed=0, **kw):
    rng = np.random.default_rng(seed)
    params = [Parameter(rng.standard_normal(s).astype(np.float32).astype(dtype)) for s in SHAPES]
    groups = [{"params": [p for p, g in zip(params, GROUP_OF) if g == k]} for k in (0, 1)]
    groups[1]["lr"] = 0.003
    return params, _training(cls(groups, lr=0.01, **kw))


def _grads(seed=1):
    rng = np.random.default_rng(seed)
    return [[None if (i == 1 and t % 3 == 0) else rng.standard_normal(s).astype(np.float32)
             for i, s in enumerate(SHAPES)] for t in range(STEPS)]


def _run(opt, params, grads, steps):
    for t in steps:
        for p, g in zip(params, grads[t]):
            p.grad = g
        opt.step()


def _float32_twin(params16, cls, **kw):
    params = [Parameter(p.data.numpy().astype(np.float32)) for p in params16]
    groups = [{"params": [p for p, g in zip(params, GROUP_OF) if g == k]} for k in (0, 1)]
    groups[1]["lr"] = 0.003
    return params, _training(cls(groups, lr=0.01, **kw))


def _training(opt):
    """``opt``, in train mode if it has one (Schedule-Free's ``step`` needs it)."""
    if hasattr(opt, "train"):
        opt.train()
    return opt


def _assert_masters_follow(opt16, params16, opt32, params32, dtype):
    for i, (p, q) in enumerate(zip(params16, params32)):
        assert p.data.numpy().dtype == dtype
        st, st32 = opt16.state.get(p, {}), opt32.state.get(q, {})
        if not st32 and not st:
            continue
        master = st["master_param"].numpy()
        assert master.dtype == np.float32 and master.shape == p.shape
        np.testing.assert_array_equal(master, q.data.numpy(), err_msg=f"param {i} master")
        np.testing.assert_array_equal(p.data.numpy().view(np.uint16),
                                      q.data.numpy().astype(dtype).view(np.uint16),
                                      err_msg=f"param {i} is not its master rounded")
        assert set(st) - {"master_param"} == set(st32)
        for k, v in st32.items():
            assert st[k].dtype == np.float32
            np.testing.assert_array_equal(st[k].numpy(), v.numpy(), err_msg=f"param {i} state {k}")


@pytest.mark.parametrize("cls", FUSED, ids=lambda c: c.__name__)
def test_every_fused_optimizer_keeps_float32_masters_for_bfloat16(cls):
    params, opt = _make(cls, BF16)
    params32, opt32 = _float32_twin(params, cls)
    grads = _grads()
    _run(opt, params, grads, range(STEPS))
    _run(opt32, params32, grads, range(STEPS))
    _assert_masters_follow(opt, params, opt32, params32, BF16)


def test_float16_with_options_and_parameter_memory():
    kw = dict(amsgrad=True, weight_decay=0.1, maximize=True)
    params, opt = _make(optim.Adam, F16, **kw)
    params32, opt32 = _float32_twin(params, optim.Adam, **kw)
    grads = _grads(2)
    _run(opt, params, grads, range(STEPS))
    _run(opt32, params32, grads, range(STEPS))
    _assert_masters_follow(opt, params, opt32, params32, F16)
    for fb in opt._flat[0] + opt._flat[1]:
        assert fb.low.itemsize == 2 and fb.data.dtype == np.float32 and fb.grad.dtype == np.float32
        for j, p in enumerate(fb.params):  # the parameters' storage is the 16-bit buffer
            assert p._data.itemsize == 2 and (p.numel() == 0 or np.shares_memory(p._data, fb.low))


def test_overflow_and_nan_reach_the_copy_as_ieee_has_them():
    p = Parameter(np.array([60000.0, 1.0, 1.0, 1.0], F16))
    opt = optim.SGD([p], lr=1.0)
    p.grad = np.array([-10000.0, np.nan, np.inf, -1e-8], np.float32)
    opt.step()
    master = opt.state[p]["master_param"].numpy()
    assert master[0] == 70000.0 and np.isinf(p.data.numpy()[0])  # beyond float16: the master has it
    assert np.isnan(p.data.numpy()[1]) and np.isnan(master[1])
    assert p.data.numpy()[2] == -np.inf
    assert p.data.numpy()[3] == 1.0 and master[3] == np.float32(1.0) + np.float32(1e-8)


def test_writes_to_the_parameter_replace_its_master():
    params, opt = _make(optim.Adam, BF16)
    params32, opt32 = _float32_twin(params, optim.Adam)
    grads = _grads(3)
    _run(opt, params, grads, range(10))
    _run(opt32, params32, grads, range(10))
    new = np.full(SHAPES[0], 0.37, np.float32)
    params[0].data = new.astype(BF16)  # a loaded model state dict, an init, p.data[...] = x
    params32[0].data = new.astype(BF16).astype(np.float32)
    params[3].data[0, 1] = 2.5
    params32[3].data[0, 1] = 2.5
    _run(opt, params, grads, range(10, STEPS))
    _run(opt32, params32, grads, range(10, STEPS))
    _assert_masters_follow(opt, params, opt32, params32, BF16)


@pytest.mark.parametrize("dtype", [BF16, F16], ids=["bfloat16", "float16"])
def test_state_dict_carries_masters_and_resumes_bit_for_bit(dtype):
    grads = _grads(4)
    params, opt = _make(optim.AdamW, dtype)
    _run(opt, params, grads, range(12))
    sd = opt.state_dict()
    saved = [p.data.numpy().copy() for p in params]
    assert sd["state"][0]["master_param"].dtype == np.float32
    assert sd["state"][0]["exp_avg"].dtype == np.float32
    _run(opt, params, grads, range(12, STEPS))
    params2, opt2 = _make(optim.AdamW, dtype, seed=9)
    for p, s in zip(params2, saved):
        p.data = s
    opt2.load_state_dict(copy.deepcopy(sd))
    _run(opt2, params2, grads, range(12, STEPS))
    for p, q in zip(params, params2):
        np.testing.assert_array_equal(p.data.numpy().view(np.uint16),
                                      q.data.numpy().view(np.uint16))
        np.testing.assert_array_equal(opt.state[p]["master_param"].numpy(),
                                      opt2.state[q]["master_param"].numpy())


def test_a_state_dict_without_masters_starts_them_from_the_parameters():
    grads = _grads(5)
    params32, opt32 = _make(optim.Adam, np.float32)
    _run(opt32, params32, grads, range(5))
    params, opt = _make(optim.Adam, BF16, seed=9)
    for p, q in zip(params, params32):
        p.data = q.data.numpy().astype(BF16)
    _run(opt, params, grads, range(3))  # masters of its own, then a state dict from float32
    opt.load_state_dict(opt32.state_dict())
    for p in params:
        st = opt.state.get(p)
        if st:
            np.testing.assert_array_equal(st["master_param"].numpy(),
                                          p.data.numpy().astype(np.float32))


def test_loads_into_torch_which_rounds_the_state_to_the_parameters_dtype():
    torch = pytest.importorskip("torch")
    from tinyopt.optim.torch_compat import from_torch, to_torch

    grads = _grads(6)
    params, opt = _make(optim.Adam, BF16)
    _run(opt, params, grads, range(5))
    tparams = [torch.nn.Parameter(torch.from_numpy(p.data.numpy().view(np.int16).copy())
                                  .view(torch.bfloat16)) for p in params]
    groups = [{"params": [p for p, g in zip(tparams, GROUP_OF) if g == k]} for k in (0, 1)]
    topt = torch.optim.Adam(groups, lr=0.01)
    topt.load_state_dict(to_torch(opt.state_dict()))
    st = topt.state[tparams[0]]
    assert st["exp_avg"].dtype == torch.bfloat16
    np.testing.assert_array_equal(st["exp_avg"].float().numpy(),
                                  opt.state[params[0]]["exp_avg"].numpy().astype(BF16)
                                  .astype(np.float32))
    # and back: torch's bfloat16 state, widened; the masters start from the parameters
    opt.load_state_dict(from_torch(topt.state_dict()))
    np.testing.assert_array_equal(opt.state[params[0]]["master_param"].numpy(),
                                  params[0].data.numpy().astype(np.float32))


def test_stochastic_rounding_is_reproducible_and_stays_within_an_ulp():
    grads = _grads(7)
    runs = []
    for _ in range(2):
        params, opt = _make(optim.Adam, BF16, stochastic_rounding=True)
        _run(opt, params, grads, range(STEPS))
        runs.append((params, opt))
    (pa, oa), (pb, ob) = runs
    params32, opt32 = _float32_twin(_make(optim.Adam, BF16)[0], optim.Adam)
    _run(opt32, params32, grads, range(STEPS))
    nearest_differs = 0
    for p, q, r in zip(pa, pb, params32):
        np.testing.assert_array_equal(p.data.numpy().view(np.uint16),
                                      q.data.numpy().view(np.uint16))
        master = oa.state[p]["master_param"].numpy()
        np.testing.assert_array_equal(master, r.data.numpy())  # masters do not depend on rounding
        down = (master.view(np.uint32) >> 16).astype(np.uint16)
        bits = p.data.numpy().view(np.uint16)
        assert np.all((bits == down) | (bits == down + 1))
        nearest_differs += int(np.sum(bits != master.astype(BF16).view(np.uint16)))
    assert nearest_differs > 1000  # about a quarter of the elements round the other way


def test_stochastic_rounding_rejects_float16():
    with pytest.raises(ValueError, match="stochastic_rounding=True rounds bfloat16"):
        optim.SGD([Parameter(np.zeros(3, F16))], lr=0.1, stochastic_rounding=True)
