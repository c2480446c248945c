"""8-bit optimizer state: the dynamic codes, blockwise quantization against a numpy reference
of Dettmers et al.'s algorithm, the 8-bit steps against that reference and bitsandbytes, saved
and loaded state, memory, and a training run equal to float32 Adam's within seed noise."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tinyopt import Parameter, nn, optim
from tinyopt.kernels import quant8
from tinyopt.optim.eight_bit import CODES

BIG = [(48, 100), (5,), (4096,), (0,), (), (9000,)]  # 8-bit from 4096 elements; blocks of 256


def quantize(x, code):
    """Blockwise dynamic quantization (Dettmers et al. 2022): per block of 256, its absmax and
    each element's nearest code (the lower one on a tie) to the element times 1 / absmax (as
    bitsandbytes' GPU kernels normalize; divided where 1 / absmax overflows)."""
    n = x.size
    q = np.zeros(n, np.uint8)
    absmax = np.zeros(-(-n // 256), np.float32)
    for b in range(len(absmax)):
        blk = x[256 * b:256 * (b + 1)]
        a = np.float32(np.max(np.abs(blk)))
        with np.errstate(invalid="ignore"):  # (a block of zeros: 0 / 0, index 0)
            normed = blk * (np.float32(1) / a) if a >= np.finfo(np.float32).tiny else blk / a
        dist = np.abs(normed[:, None] - code[None, :])
        q[256 * b:256 * (b + 1)] = np.argmin(dist, axis=1)  # (argmin: the first, i.e. lower)
        absmax[b] = a
    return q, absmax


def dequantize(q, absmax, code):
    return code[q] * np.repeat(absmax, 256)[:q.size]


class Ref8bit:
    """The 8-bit steps (bitsandbytes' equations) on dequantized state, requantized after."""

    def __init__(self, kind, h, min_size=4096):
        self.kind, self.h, self.min = kind, h, min_size
        self.st = {}

    def step(self, i, p, g):
        h, st = self.h, self.st.setdefault(i, {"step": 0})
        eight = p.size >= self.min
        two = self.kind == "adam"
        st["step"] += 1
        t = st["step"]
        if "s1" not in st:
            st["s1"] = np.zeros(p.size, np.float32)
            st["s2"] = np.zeros(p.size, np.float32)
        s1, s2, p, g = st["s1"], st["s2"], p.ravel().copy(), g.ravel()
        if self.kind == "adam":
            b1, b2 = h["betas"]
            s1 = s1 * np.float32(b1) + np.float32(1 - b1) * g
            s2 = s2 * np.float32(b2) + np.float32(1 - b2) * g * g
            c1, c2 = 1 - b1 ** t, np.sqrt(1 - b2 ** t)
            if h["weight_decay"] > 0:
                p = p * np.float32(1 - h["lr"] * h["weight_decay"])
            p = p + np.float32(-h["lr"] * c2 / c1) * (s1 / (np.sqrt(s2)
                                                           + np.float32(h["eps"] * c2)))
        elif self.kind == "lion":
            b1, b2 = h["betas"]
            if h["weight_decay"] > 0:
                p = p * np.float32(1 - h["lr"] * h["weight_decay"])
            p = p + np.float32(-h["lr"]) * np.sign(s1 * np.float32(b1) + g * np.float32(1 - b1))
            s1 = s1 * np.float32(b2) + np.float32(1 - b2) * g
        else:  # momentum
            if eight or h["weight_decay"] > 0:
                g = g + np.float32(h["weight_decay"]) * p
            s1 = g if t == 1 else s1 * np.float32(h["momentum"]) + g
            p = p + np.float32(-h["lr"]) * s1
        if eight:  # what the optimizer keeps is the quantized state
            st["q1"], st["a1"] = quantize(s1, CODES["signed"])
            s1 = dequantize(st["q1"], st["a1"], CODES["signed"])
            if two:
                st["q2"], st["a2"] = quantize(s2, CODES["unsigned"])
                s2 = dequantize(st["q2"], st["a2"], CODES["unsigned"])
        st["s1"], st["s2"] = s1, s2
        return p


CASES = [("adam", optim.Adam8bit, dict(lr=1e-2)),
         ("adam", optim.AdamW8bit, dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6)),
         ("lion", optim.Lion8bit, dict(lr=1e-3, weight_decay=0.1)),
         ("momentum", optim.SGD8bit, dict(lr=0.05, momentum=0.9, weight_decay=0.01))]


def _run(opt, params, steps, seed=5):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        for p in params:
            p.grad = np.asarray(rng.standard_normal(p.shape), np.float32)
        opt.step()


def test_codes_are_bitsandbytes_dynamic_maps():
    for signed in (True, False):
        code = quant8.dynamic_map(signed)
        assert code.shape == (256,) and code.dtype == np.float32 and np.all(np.diff(code) >= 0)
        assert code[-1] == 1.0 and (code[0] == np.float32(-0.99296875) if signed else code[0] == 0)
    F = pytest.importorskip("bitsandbytes.functional")
    for signed in (True, False):
        theirs = F.create_dynamic_map(signed=signed).numpy()
        np.testing.assert_allclose(quant8.dynamic_map(signed), theirs, rtol=2 ** -22, atol=0)


def test_the_lookup_tables_give_the_nearest_code():
    """The kernels' quantizer (one table lookup and a compare on the float's pattern) gives
    exactly the nearest code, the lower one on a tie, on random values of every magnitude, the
    codes, their midpoints and the floats next to them, signed zeros and NaN."""
    rng = np.random.default_rng(0)
    for signed, code in ((True, CODES["signed"]), (False, CODES["unsigned"])):
        table = quant8.tables(code)
        x = rng.uniform(-1 if signed else 0, 1, 200000).astype(np.float32)
        x *= (10.0 ** rng.uniform(-8, 0, x.size)).astype(np.float32)
        mids = ((code[:-1] + code[1:]) / np.float32(2)).astype(np.float32)
        x = np.concatenate([x, code, mids, np.nextafter(mids, np.float32(2)),
                            np.nextafter(mids, np.float32(-2)),
                            np.array([0, -0.0, 1, -1, np.nan, 1e-45], np.float32)])
        bits = x.view(np.uint32)
        key = bits >> 15
        t = (bits & 0x7FFF) ^ ((bits >> 31) * 0x7FFF)
        got = (table[key] & 0xFF).astype(np.int64) + (t >= table[key] >> 8)
        np.testing.assert_array_equal(got, quant8.nearest(x, code))
        np.testing.assert_array_equal(quant8.nearest(code, code), np.arange(256))  # each code


@pytest.mark.parametrize("kind,cls,kw", CASES, ids=[c[1].__name__ for c in CASES])
def test_matches_numpy_reference(kind, cls, kw):
    rng = np.random.default_rng(0)
    x = [np.asarray(rng.standard_normal(s), np.float32) for s in BIG]
    params = [Parameter(a.copy()) for a in x]
    opt = cls(params, **kw)
    ref = Ref8bit(kind, dict(opt.defaults))
    ps = [a.ravel().copy() for a in x]
    rng = np.random.default_rng(5)
    for _ in range(6):
        gs = [np.asarray(rng.standard_normal(s), np.float32) for s in BIG]
        for p, g in zip(params, gs):
            p.grad = g
        opt.step()
        ps = [ref.step(i, p, g) if p.size else p for i, (p, g) in enumerate(zip(ps, gs))]
    for i, (p, r) in enumerate(zip(params, ps)):
        np.testing.assert_allclose(p.data.numpy().ravel(), r, rtol=1e-6, atol=1e-7,
                                   err_msg=f"param {i}")
        if p.numel() >= 4096:
            st, rst = opt.state[p], ref.st[i]
            assert st["state1"].numpy().dtype == np.uint8
            np.testing.assert_array_equal(st["state1"].numpy().ravel(), rst["q1"])
            np.testing.assert_array_equal(st["absmax1"].numpy(), rst["a1"])
            if "q2" in rst:
                np.testing.assert_array_equal(st["state2"].numpy().ravel(), rst["q2"])
        elif p.numel():
            assert opt.state[p]["state1"].numpy().dtype == np.float32


@pytest.mark.parametrize("kind,cls,kw", CASES[:2], ids=["Adam8bit", "AdamW8bit"])
def test_adam_steps_give_the_reference_bits(kind, cls, kw):
    """Adam's 8-bit step (a block's dequantization and update in one 16-lane pass, the last
    elements of a block one lane at a time) computes the reference's float32 operations in
    the reference's order: the same bits, parameters and states."""
    shapes = [(4096 + 256 + 40,), (9000,)]  # last blocks of 40 elements: 2 vectors and 8 lanes
    rng = np.random.default_rng(3)
    x = [np.asarray(rng.standard_normal(s), np.float32) for s in shapes]
    params = [Parameter(a.copy()) for a in x]
    opt = cls(params, **kw)
    ref = Ref8bit(kind, dict(opt.defaults))
    ps = [a.copy() for a in x]
    for _ in range(4):
        gs = [np.asarray(rng.standard_normal(s), np.float32) for s in shapes]
        for p, g in zip(params, gs):
            p.grad = g
        opt.step()
        ps = [ref.step(i, p, g) for i, (p, g) in enumerate(zip(ps, gs))]
    for i, (p, r) in enumerate(zip(params, ps)):
        np.testing.assert_array_equal(p.data.numpy(), r)
        for k in ("q1", "q2", "a1", "a2"):
            got = opt.state[p][{"q": "state", "a": "absmax"}[k[0]] + k[1]].numpy()
            np.testing.assert_array_equal(got, ref.st[i][k])


@pytest.mark.parametrize("kind,cls,kw", CASES[::2] + CASES[3:], ids=["Adam8bit", "Lion8bit",
                                                                     "SGD8bit"])
def test_matches_bitsandbytes_within_its_quantization_error(kind, cls, kw):
    torch = pytest.importorskip("torch")
    bnb = pytest.importorskip("bitsandbytes")
    rng = np.random.default_rng(0)
    shapes = [s for s in BIG if np.prod(s) > 0]
    x = [np.asarray(rng.standard_normal(s), np.float32) for s in shapes]
    params = [Parameter(a.copy()) for a in x]
    tparams = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in x]
    opt, topt = cls(params, **kw), getattr(bnb.optim, cls.__name__)(tparams, **kw)
    rng = np.random.default_rng(5)
    for _ in range(8):
        for p, tp in zip(params, tparams):
            g = np.asarray(rng.standard_normal(p.shape), np.float32)
            p.grad, tp.grad = g, torch.from_numpy(g.copy())
        opt.step()
        topt.step()
    for p, tp, a in zip(params, tparams, x):
        ours, theirs = p.data.numpy(), tp.detach().numpy()
        if p.numel() < 4096:  # float32 state: the same equations
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
        else:  # (bitsandbytes' CPU quantizer misses the nearest code for 0.1-3% of elements)
            assert np.linalg.norm(ours - theirs) < 0.05 * np.linalg.norm(theirs - a)
            assert np.mean(opt.state[p]["state1"].numpy() == topt.state[tp]["state1"].numpy()) > 0.97


def test_state_is_at_most_two_and_a_half_bytes_per_parameter():
    p = Parameter(np.zeros(1 << 20, np.float32))
    opt = optim.AdamW8bit([p])
    st = opt._stores[0][0]
    state = st.q1.nbytes + st.q2.nbytes + st.a1.nbytes + st.a2.nbytes + st.scratch.nbytes
    assert state / p.numel() <= 2.5, state / p.numel()


def test_state_dict_saves_the_quantized_state_and_continues_exactly():
    rng = np.random.default_rng(1)
    x = [np.asarray(rng.standard_normal(s), np.float32) for s in BIG]
    runs = []
    for resume in (False, True):
        params = [Parameter(a.copy()) for a in x]
        opt = optim.AdamW8bit(params, lr=1e-2)
        _run(opt, params, 3)
        if resume:
            sd = copy.deepcopy(opt.state_dict())
            assert sd["state"][0]["state1"].dtype == np.uint8 and sd["state"][0]["absmax1"].shape == (19,)
            opt = optim.AdamW8bit(params, lr=1e-2)
            opt.load_state_dict(sd)
        _run(opt, params, 3, seed=6)
        runs.append([p.data.numpy().copy() for p in params])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_a_rejected_load_changes_nothing():
    p = Parameter(np.ones(5000, np.float32))
    opt = optim.Adam8bit([p])
    _run(opt, [p], 2)
    before = copy.deepcopy(opt.state_dict())
    for key, bad, msg in [("state1", np.zeros(5000, np.float32), "uint8"),
                          ("absmax1", np.zeros(3, np.float32), "one per block"),
                          ("qmap1", np.linspace(-1, 1, 256), "quantization map")]:
        sd = copy.deepcopy(before)
        sd["state"][0][key] = bad
        with pytest.raises(ValueError, match=msg):
            opt.load_state_dict(sd)
        after = opt.state_dict()
        for k, v in before["state"][0].items():
            np.testing.assert_array_equal(np.asarray(after["state"][0][k]), np.asarray(v))


def test_loads_a_bitsandbytes_state_dict():
    torch = pytest.importorskip("torch")
    bnb = pytest.importorskip("bitsandbytes")
    x = np.asarray(np.random.default_rng(2).standard_normal(5000), np.float32)
    tp = torch.nn.Parameter(torch.from_numpy(x.copy()))
    topt = bnb.optim.Adam8bit([tp])
    tp.grad = torch.ones(5000)
    topt.step()
    sd = topt.state_dict()  # (its quantized state nested in a dict of its own)
    saved = sd["state"][0]["__bnb_optimizer_quant_state__"]
    p = Parameter(tp.detach().numpy().copy())
    opt = optim.Adam8bit([p])
    opt.load_state_dict(sd)
    for key in ("state1", "state2", "absmax1", "absmax2"):
        np.testing.assert_array_equal(opt.state[p][key].numpy(), saved[key].numpy())
    assert float(opt.state[p]["step"]) == 1


def test_training_matches_float32_adam_within_seed_noise():
    """A small MLP on a fixed regression task: 8-bit AdamW's training curve (the loss every 8
    steps) is within the spread of float32 AdamW's over seeds."""
    import tinyopt
    rng = np.random.default_rng(0)
    X = rng.standard_normal((256, 32)).astype(np.float32)
    Y = np.tanh(X @ rng.standard_normal((32, 4)).astype(np.float32))

    def curve(cls, seed):
        tinyopt.manual_seed(seed)
        model = nn.Sequential(nn.Linear(32, 160), nn.ReLU(), nn.Linear(160, 4))
        opt = cls(model.parameters(), lr=3e-3)
        losses = []
        for t in range(40):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(tinyopt.tensor(X)), tinyopt.tensor(Y))
            loss.backward()
            opt.step()
            if t % 8 == 7:
                losses.append(float(loss.item()))
        return np.array(losses)

    threads = tinyopt.get_num_threads()
    tinyopt.set_num_threads(1)  # (small matmuls: 2 BLAS threads on the shared test machine
    try:  # waited ms a call for a descheduled one; 6.4 s -> 1.2 s)
        ref = np.array([curve(optim.AdamW, s) for s in range(3)])
        ours = np.array([curve(optim.AdamW8bit, s) for s in range(3)])
    finally:
        tinyopt.set_num_threads(threads)
    spread = ref.max(axis=0) - ref.min(axis=0)
    gap = np.abs(ours.mean(axis=0) - ref.mean(axis=0))
    assert np.all(gap < np.maximum(2 * spread, 0.05 * ref.mean(axis=0))), (ours, ref)
    assert ours[:, -1].mean() < 0.5 * ours[:, 0].mean()  # (and it trains)


def test_bfloat16_masters_follow_the_float32_run():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    x = np.asarray(np.random.default_rng(3).standard_normal(5000), np.float32).astype(bf16)
    p16, p32 = Parameter(x.copy()), Parameter(x.astype(np.float32))
    o16, o32 = optim.Adam8bit([p16]), optim.Adam8bit([p32])
    _run(o16, [p16], 3)
    _run(o32, [p32], 3)
    np.testing.assert_array_equal(o16.state[p16]["master_param"].numpy(), p32.data.numpy())
    np.testing.assert_array_equal(p16.data.numpy(), p32.data.numpy().astype(bf16))


@pytest.mark.parametrize("cls,kw,err,msg", [
    (optim.Adam8bit, dict(amsgrad=True), ValueError, "amsgrad"),
    (optim.Adam8bit, dict(lr=-1.0), ValueError, "Invalid learning rate: -1.0"),
    (optim.SGD8bit, dict(lr=0.1), NotImplementedError, "without momentum"),
    (optim.SGD8bit, dict(lr=0.1, momentum=0.9, nesterov=True), ValueError, "nesterov"),
])
def test_argument_checks(cls, kw, err, msg):
    with pytest.raises(err, match=msg):
        cls([Parameter(np.zeros(2, np.float32))], **kw)


def test_float64_parameters_are_refused():
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        optim.Adam8bit([Parameter(np.zeros(2))])


def test_the_optimizer_contract_holds_hooks_schedulers_copies():
    """Step hooks run, a scheduler's lr is the step's, zero_grad empties the gradients, and a
    deep copy or a pickle steps on as the original."""
    import pickle
    p = Parameter(np.linspace(-1, 1, 5000).astype(np.float32))
    opt = optim.AdamW8bit([p], lr=1e-2)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    calls = []
    opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(o.param_groups[0]["lr"]))
    _run(opt, [p], 1)
    sched.step()
    _run(opt, [p], 1)
    assert calls == [1e-2, 5e-3]
    twins = [copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))]
    _run(opt, [p], 2, seed=9)
    for twin in twins:
        q = twin.param_groups[0]["params"][0]
        _run(twin, [q], 2, seed=9)
        np.testing.assert_array_equal(q.data.numpy(), p.data.numpy())
    opt.zero_grad()
    assert p.grad is None


def test_a_nan_moment_makes_its_block_nan_not_a_number():
    p = Parameter(np.ones(5000, np.float32))
    opt = optim.Adam8bit([p])
    g = np.ones(5000, np.float32)
    g[300] = np.nan  # block 1 (elements 256-511)
    p.grad = g
    opt.step()
    absmax = opt.state[p]["absmax1"].numpy()
    assert np.isnan(absmax[1]) and np.isfinite(np.delete(absmax, 1)).all()
    assert np.isnan(p.data.numpy()[300]) and np.isfinite(np.delete(p.data.numpy(), 300)).all()


def test_subnormal_and_zero_blocks_quantize_to_their_nearest_codes():
    """A block whose absmax is subnormal (1 / absmax overflows) is normalized by division, one
    of zeros stays zero, and the others by the reciprocal: each index is the nearest code."""
    g = np.asarray(np.random.default_rng(4).standard_normal(4096), np.float32)
    g[:256] *= np.float32(1e-39)  # subnormal
    g[256:512] = 0
    g[512:768] *= np.float32(1e-30)
    p = Parameter(np.zeros(4096, np.float32))
    opt = optim.SGD8bit([p], lr=0.0, momentum=0.9)
    p.grad = g
    opt.step()  # (the momentum buffer is the gradient at the first step)
    q, absmax = quantize(g, CODES["signed"])
    np.testing.assert_array_equal(opt.state[p]["state1"].numpy(), q)
    np.testing.assert_array_equal(opt.state[p]["absmax1"].numpy(), absmax)
    assert absmax[0] < np.finfo(np.float32).tiny and absmax[1] == 0


@pytest.mark.parametrize("kind,cls,kw", CASES[1:3], ids=["AdamW8bit", "Lion8bit"])
def test_groups_and_none_gradients_match_the_reference(kind, cls, kw):
    """Two groups with their own options (the second's lr changed between steps, as a
    scheduler would), a parameter whose gradient is None on some steps (its state and step
    count wait, as torch's), 0-d and empty ones among them."""
    rng = np.random.default_rng(1)
    x = [np.asarray(rng.standard_normal(s), np.float32) for s in BIG]
    params = [Parameter(a.copy()) for a in x]
    second = dict(lr=kw["lr"] * 3, betas=(0.5, 0.9), weight_decay=0.05)
    opt = cls([{"params": params[::2]}, {"params": params[1::2], **second}], **kw)
    refs = [Ref8bit(kind, dict(opt.param_groups[k])) for k in (0, 1)]
    ps = [a.ravel().copy() for a in x]
    rng = np.random.default_rng(7)
    for t in range(5):
        gs = [None if i == 3 and t % 2 == 0 else np.asarray(rng.standard_normal(s), np.float32)
              for i, s in enumerate(BIG)]
        for p, g in zip(params, gs):
            p.grad = g
        if t == 3:
            opt.param_groups[1]["lr"] *= 0.5
            refs[1].h["lr"] *= 0.5
        opt.step()
        ps = [ref.step(i, p, g) if g is not None and p.size else p
              for i, (p, g, ref) in enumerate(zip(ps, gs, [refs[i % 2] for i in range(len(gs))]))]
    for i, (p, r) in enumerate(zip(params, ps)):
        np.testing.assert_allclose(p.data.numpy().ravel(), r, rtol=1e-6, atol=1e-7,
                                   err_msg=f"param {i}")
    assert float(opt.state[params[3]]["step"]) == 2  # (stepped at t = 1 and 3 only)
