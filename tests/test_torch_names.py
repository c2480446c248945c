"""The small torch names scripts and model code meet (``tinyopt.jit``, ``tinyopt.testing``,
``tinyopt.version``, constants, layouts and memory formats, ``diff``, ``Tensor.unfold``,
``Tensor.new``, ``hardswish``), against PyTorch."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
import tinyopt.nn.functional as F
from tinyopt import nn

torch = pytest.importorskip("torch")


def test_torchscript_names_leave_code_eager():
    m = nn.Linear(2, 2)
    assert to.jit.script(m) is m and to.jit.trace(m, to.ones(1, 2)) is m
    assert not to.jit.is_scripting() and not to.jit.is_tracing()

    @to.jit.ignore
    def f(x):
        return x + 1

    assert f(1) == 2 and to.jit.ignore(drop=True)(f) is f and to.jit.unused(f) is f
    with pytest.raises(NotImplementedError, match="TorchScript"):
        to.jit.load("m.pt")
    with warnings.catch_warnings():  # an export script's filter (YOLOv5's export.py)
        warnings.filterwarnings("ignore", category=to.jit.TracerWarning)
        assert issubclass(to.jit.TracerWarning, Warning) and \
            to.jit.TracerWarning.__name__ == torch.jit.TracerWarning.__name__


def test_constants_layouts_and_versions_as_torch():
    assert (to.pi, to.e, to.inf) == (torch.pi, torch.e, torch.inf) and math.isnan(to.nan)
    assert repr(to.strided) == repr(torch.strided) and repr(to.channels_last) == \
        repr(torch.channels_last)
    assert to.ones(2).layout is to.strided and to.ones(2).is_cpu
    assert isinstance(to.float32, to.dtype) and to.version.cuda is None and \
        not to.is_complex(to.ones(1))
    x = to.arange(3.0)
    assert x.data_ptr() == x.numpy().ctypes.data


def test_assert_close_tolerances_and_messages_match_torch():
    to.testing.assert_close(to.ones(3), to.ones(3) + 1e-6)
    for a, b in ((np.ones(3, np.float32), np.ones(3, np.float32) + 1e-3),
                 (np.ones(3, np.float32), np.ones(3)), (np.ones(3), np.ones(2))):
        with pytest.raises(AssertionError) as theirs:
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b))
        with pytest.raises(AssertionError) as ours:
            to.testing.assert_close(to.tensor(a), to.tensor(b))
        assert str(ours.value).split("\n")[:3] == str(theirs.value).split("\n")[:3]
    to.testing.assert_close({"a": [to.ones(2)]}, {"a": [to.ones(2)]})


def test_diff_unfold_new_hardswish_match_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 7))
    cases = [lambda lib, t: lib.diff(t), lambda lib, t: lib.diff(t, 2, 0),
             lambda lib, t: t.diff(dim=1, prepend=t[:, :1], append=t[:, -2:]),
             lambda lib, t: t.unfold(1, 3, 2), lambda lib, t: t.unfold(0, 2, 1),
             lambda lib, t: lib.nn.functional.hardswish(t * 4),
             lambda lib, t: lib.nn.functional.hardsigmoid(t * 4),
             lambda lib, t: t.new([1.0, 2.0]), lambda lib, t: lib.tensor(t.new(2, 3).shape)]
    for f in cases:
        np.testing.assert_array_equal(f(to, to.tensor(x)).numpy(),
                                      f(torch, torch.tensor(x)).numpy())
    gradcheck(lambda t: t.unfold(1, 3, 2) * 2, x)
    gradcheck(lambda t: to.diff(t, 2, 1), x)
    assert to.diff(to.tensor([True, False, False])).tolist() == [True, False]
    with pytest.raises(RuntimeError, match="maximum size for tensor at dimension 1 is 7"):
        to.tensor(x).unfold(1, 8, 1)
    assert repr(nn.Hardswish()) == repr(torch.nn.Hardswish())


def test_more_functions_match_torch():
    import warnings
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((4, 3))
    cases = [lambda lib, x, y: lib.cross(x, y[:2], dim=1),
             lambda lib, x, y: lib.linalg.cross(x, y[:2]),
             lambda lib, x, y: lib.cdist(x, y), lambda lib, x, y: lib.cdist(x, y, p=1),
             lambda lib, x, y: lib.std_mean(x, 1)[0], lambda lib, x, y: lib.var_mean(x, 0)[1],
             lambda lib, x, y: lib.isin(lib.tensor([1, 2, 3, 4]), lib.tensor([2, 4])),
             lambda lib, x, y: x.clone().gt_(0.1), lambda lib, x, y: x.H,
             lambda lib, x, y: x.dist(y[:2], p=3), lambda lib, x, y: lib.special.sinc(x),
             lambda lib, x, y: lib.special.expit(x), lambda lib, x, y: lib.zeros(5, 2)
             .fill_diagonal_(1.0, wrap=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f in cases:
            np.testing.assert_allclose(f(to, to.tensor(a), to.tensor(b)).numpy(),
                                       f(torch, torch.tensor(a), torch.tensor(b)).numpy(),
                                       rtol=1e-12, atol=1e-12)
    gradcheck(lambda x, y: to.cross(x, y, dim=1).sum(1) + to.cdist(x, y).sum(1), a, b[:2])


def test_switches_devices_and_wrappers_as_torch():
    to.use_deterministic_algorithms(True)
    assert to.are_deterministic_algorithms_enabled()
    to.use_deterministic_algorithms(False)
    to.set_float32_matmul_precision("high")
    assert to.get_float32_matmul_precision() == "high"
    to.set_float32_matmul_precision("highest")
    assert str(to.get_default_device()) == "cpu"
    with pytest.raises(RuntimeError, match="CPU only"):
        to.set_default_device("cuda")
    assert to.cpu.is_available() and not to.xpu.is_available() and not to.mps.is_available()
    assert not to.cuda.is_bf16_supported() and not to.onnx.is_in_onnx_export()
    m = nn.DataParallel(nn.Linear(2, 3))
    t = torch.nn.DataParallel(torch.nn.Linear(2, 3))
    assert list(m.state_dict()) == list(t.state_dict()) and repr(m) == repr(t)
    from tinyopt.nn.modules.batchnorm import _BatchNorm
    assert isinstance(nn.BatchNorm2d(2), _BatchNorm) and to.nn.modules.linear.Linear is nn.Linear
    assert to.nn.parameter.Parameter is nn.Parameter


def test_deprecated_cuda_amp_names_warn_and_disable_as_torch():
    with pytest.warns(FutureWarning, match=r"torch.cuda.amp.GradScaler\(args...\)` is deprecated"):
        scaler = to.cuda.amp.GradScaler(enabled=True)
    assert not scaler.is_enabled()  # (no CUDA: disabled, as PyTorch's CPU build does)
    with pytest.warns(FutureWarning, match=r"torch.cuda.amp.autocast\(args...\)` is deprecated"):
        with to.cuda.amp.autocast():
            pass


def test_histogram_and_histc_match_torch():
    x = np.random.default_rng(2).standard_normal(50)
    for f in (lambda lib, t: lib.histogram(t, bins=7), lambda lib, t: lib.histogram(
                  t, 5, range=(-1.0, 1.0), density=True),
              lambda lib, t: lib.histogram(t, lib.tensor([-2.0, 0.0, 0.5, 2.0], dtype=t.dtype))):
        for a, b in zip(f(to, to.tensor(x)), f(torch, torch.tensor(x))):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(to.histc(to.tensor(x), 6, -1, 1).numpy(),
                                  torch.histc(torch.tensor(x), 6, -1, 1).numpy())
    with pytest.raises(NotImplementedError, match="not implemented for"):
        to.histogram(to.tensor([1, 2]), 2)


def test_unfold_fold_block_diag_combinations_apply_match_torch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5, 6))
    for kw in (dict(kernel_size=(2, 3), padding=1, stride=(2, 1)), dict(kernel_size=3,
                                                                         dilation=2)):
        u = F.unfold(to.tensor(x), **kw)
        tu = torch.nn.functional.unfold(torch.tensor(x), **kw)
        np.testing.assert_array_equal(u.numpy(), tu.numpy())
        np.testing.assert_allclose(F.fold(u, (5, 6), **kw).numpy(),
                                   torch.nn.functional.fold(tu, (5, 6), **kw).numpy(), rtol=1e-12)
    gradcheck(lambda t: F.unfold(t, 2, padding=1, stride=2), x[:1, :2])
    assert repr(nn.Fold((4, 5), (2, 3))) == repr(torch.nn.Fold((4, 5), (2, 3)))
    parts = [np.ones((2, 2)), np.full((1, 3), 2.0), np.array([5.0])]
    np.testing.assert_array_equal(to.block_diag(*map(to.tensor, parts)).numpy(),
                                  torch.block_diag(*map(torch.tensor, parts)).numpy())
    for r, rep in ((2, False), (3, True)):
        np.testing.assert_array_equal(to.combinations(to.tensor([4, 5, 6, 7]), r, rep).numpy(),
                                      torch.combinations(torch.tensor([4, 5, 6, 7]), r,
                                                         rep).numpy())
    a = to.tensor([1.0, 2.0]).apply_(lambda v: v * 10 + 1)
    assert a.tolist() == torch.tensor([1.0, 2.0]).apply_(lambda v: v * 10 + 1).tolist()
    from tinyopt.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
        pass
    assert int(SDPBackend.CUDNN_ATTENTION) == int(torch.nn.attention.SDPBackend.CUDNN_ATTENTION)


def test_foreach_functions_match_torch():
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(3), rng.standard_normal((2, 2))]

    def run(lib):
        xs = [lib.tensor(a) for a in arrays]
        out = lib._foreach_add(xs, xs, alpha=2) + lib._foreach_mul(xs, [2.0, 3.0]) + \
            lib._foreach_norm(xs) + lib._foreach_maximum(xs, 0.1)
        f64 = lib.float64
        lib._foreach_addcdiv_(xs, xs, [lib.ones(3, dtype=f64) * 2, lib.ones(2, 2, dtype=f64)],
                              value=0.5)
        lib._foreach_lerp_(xs, [lib.zeros(3, dtype=f64), lib.zeros(2, 2, dtype=f64)], 0.25)
        lib._foreach_sqrt_(lib._foreach_abs(xs))
        return [t.numpy() for t in list(out) + xs]

    for a, b in zip(run(to), run(torch)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_quantile_adaptive_max_pool_and_dense_sparse_methods_match_torch():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 7))
    for kw in (dict(q=0.3), dict(q=0.3, dim=1), dict(q=0.25, dim=1, interpolation="nearest"),
               dict(q=0.75, keepdim=True, interpolation="midpoint"),
               dict(q=0.5, dim=0, interpolation="higher")):
        np.testing.assert_allclose(to.quantile(to.tensor(a), **kw).numpy(),
                                   torch.quantile(torch.tensor(a), **kw).numpy(), rtol=1e-12)
    q = np.array([0.1, 0.5, 0.95])
    np.testing.assert_allclose(to.tensor(a).quantile(to.tensor(q), 0, True).numpy(),
                               torch.tensor(a).quantile(torch.tensor(q), 0, True).numpy(),
                               rtol=1e-12)
    gradcheck(lambda t: to.quantile(t, 0.4, dim=1), a)
    with pytest.raises(RuntimeError, match=r"q must be in the range \[0, 1\] but got 1.5"):
        to.quantile(to.tensor(a), 1.5)
    img = rng.standard_normal((2, 3, 5, 7))
    for size in ((2, 3), (5, 1), 1):
        ours = F.adaptive_max_pool2d(to.tensor(img), size, return_indices=True)
        theirs = torch.nn.functional.adaptive_max_pool2d(torch.tensor(img), size, True)
        for o, t in zip(ours, theirs):
            np.testing.assert_array_equal(o.numpy(), t.numpy())
    gradcheck(lambda t: F.adaptive_max_pool2d(t, (2, 3)), img[:1, :1])
    for name in ("values", "indices", "coalesce", "is_coalesced"):
        with pytest.raises(RuntimeError) as ours_err:
            getattr(to.ones(2), name)()
        with pytest.raises(RuntimeError) as theirs_err:
            getattr(torch.ones(2), name)()
        assert str(ours_err.value) == str(theirs_err.value)
    with pytest.warns(FutureWarning, match="assert_allclose\\(\\)` is deprecated"):
        to.testing.assert_allclose(to.ones(2), [1.0, 1.0])


def test_glu_inner_cartesian_prod_frac_and_inplace_activations_match_torch():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 4, 3)), rng.standard_normal((5, 3))
    cases = [lambda lib, x, y: lib.nn.functional.glu(x, 1),
             lambda lib, x, y: lib.nn.GLU()(y[:, :2]),
             lambda lib, x, y: lib.inner(x, y), lambda lib, x, y: y.inner(y[0]),
             lambda lib, x, y: lib.inner(lib.tensor(2.0, dtype=lib.float64), y),
             lambda lib, x, y: lib.cartesian_prod(y[0], y[1, :2], y[2, :2]),
             lambda lib, x, y: lib.cartesian_prod(y[0]), lambda lib, x, y: (x * 3).frac(),
             lambda lib, x, y: lib.nn.functional.elu_(x.clone()),
             lambda lib, x, y: lib.nn.functional.leaky_relu_(x.clone(), 0.2),
             lambda lib, x, y: lib.nn.functional.relu_(x.clone())]
    for f in cases:
        np.testing.assert_allclose(f(to, to.tensor(a), to.tensor(b)).numpy(),
                                   f(torch, torch.tensor(a), torch.tensor(b)).numpy(),
                                   rtol=1e-12, atol=1e-12)
    gradcheck(lambda x, y: to.inner(x, y) + 0 * F.glu(x, 1).sum(), a, b)
    gradcheck(lambda x: F.glu(x, 1), a)
    gradcheck(lambda x, y: to.cartesian_prod(x[0, 0], y[0]), a, b)
    gradcheck(lambda x: (x * 3).frac(), a)
    x = to.tensor([-1.0, 2.0])
    assert F.elu_(x) is x and x.tolist()[1] == 2.0 and x.tolist()[0] < 0
    assert repr(nn.GLU(1)) == repr(torch.nn.GLU(1))
    with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension 1 is "
                                           "size 3"):
        F.glu(to.ones(2, 3), 1)
    with pytest.raises(RuntimeError, match="last dimension must match"):
        to.inner(to.ones(2, 3), to.ones(4, 2))
    with pytest.raises(NotImplementedError, match="frac_cpu"):
        to.tensor([1, 2]).frac()


def test_cuda_probes_answer_as_pytorchs_cpu_build():
    """Memory counters read 0; calls that need a device raise torch's AssertionError; streams
    and events are refused with torch's words."""
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved",
                 "max_memory_reserved"):
        assert getattr(to.cuda, name)() == getattr(torch.cuda, name)() == 0
    for name in ("get_device_capability", "current_stream", "mem_get_info", "current_device"):
        with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled"):
            getattr(torch.cuda, name)()
        with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled"):
            getattr(to.cuda, name)()
    with pytest.raises(AssertionError, match="not compiled with CUDA"):
        to.cuda.reset_peak_memory_stats()
    for name in ("Stream", "Event"):
        with pytest.raises(RuntimeError) as theirs:
            getattr(torch.cuda, name)()
        with pytest.raises(RuntimeError) as ours:
            getattr(to.cuda, name)()
        assert str(ours.value) == str(theirs.value)


def test_unique_consecutive_scalar_tensor_and_is_distributed_match_torch():
    a = np.array([[1, 1, 2], [1, 1, 2], [3, 1, 1], [3, 1, 1], [1, 1, 2]])
    f = np.array([0.5, 0.5, np.nan, np.nan, 2.0, 0.5])
    for x in (a, f, a[:0]):
        for kw in ({}, dict(return_inverse=True), dict(return_counts=True),
                   dict(return_inverse=True, return_counts=True, dim=0), dict(dim=1),
                   dict(dim=-1, return_counts=True)):
            if x.ndim == 1 and kw.get("dim") is not None and kw["dim"] not in (0, -1):
                continue
            try:
                theirs = torch.unique_consecutive(torch.tensor(x), **kw)
            except RuntimeError as e:
                with pytest.raises(RuntimeError, match=str(e)):
                    to.unique_consecutive(to.tensor(x), **kw)
                continue
            ours = to.unique_consecutive(to.tensor(x), **kw)
            ours = ours if isinstance(ours, tuple) else (ours,)
            theirs = theirs if isinstance(theirs, tuple) else (theirs,)
            for o, t in zip(ours, theirs, strict=True):
                np.testing.assert_array_equal(o.numpy(), t.numpy())
                assert o.dtype == to.tensor(t.numpy()).dtype
    assert to.tensor(a).unique_consecutive().tolist() == [1, 2, 1, 2, 3, 1, 3, 1, 2]
    for s, kw in ((3, {}), (True, {}), (2.5, dict(dtype=to.float64))):
        ours = to.scalar_tensor(s, **kw)
        theirs = torch.scalar_tensor(s, **{k: torch.float64 for k in kw})
        assert ours.shape == () and ours.item() == theirs.item() and \
            str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    assert to.ones(2).is_distributed() is torch.ones(2).is_distributed() is False
