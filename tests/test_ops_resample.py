"""pad, interpolate, adaptive_avg_pool2d, pixel_shuffle (``engine/ops/resample.py``): forward and
gradients against PyTorch 2.13 and finite differences; errors as PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
import tinyopt.nn.functional as F
from gradcheck import gradcheck
from torch_parity import against_torch, torch_or_skip

rng = np.random.default_rng(0)
X = rng.normal(size=(2, 3, 5, 6))


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("pads", [(1, 2), (1, 2, 2, 1), (0, 3, 1, 0), (2, 2, 4, 4)])
def test_pad_modes_against_torch(mode, pads):
    torch = torch_or_skip()
    x = X[0] if len(pads) == 2 else X  # non-constant modes pad (C, W) / (N, C, H, W) like this
    against_torch(lambda a: F.pad(a, pads, mode=mode),
                  lambda a: torch.nn.functional.pad(a, pads, mode=mode), x)


def test_pad_constant_value_negative_and_3d():
    torch = torch_or_skip()
    against_torch(lambda a: F.pad(a, (-1, 2, 0, -2), value=2.5),
                  lambda a: torch.nn.functional.pad(a, (-1, 2, 0, -2), value=2.5), X)
    x5 = rng.normal(size=(1, 2, 3, 4, 5))
    against_torch(lambda a: F.pad(a, (1, 1, 2, 0, 0, 1)),
                  lambda a: torch.nn.functional.pad(a, (1, 1, 2, 0, 0, 1)), x5)
    against_torch(lambda a: F.pad(a, (1, 2, 1, 1, 2, 1), mode="reflect"),
                  lambda a: torch.nn.functional.pad(a, (1, 2, 1, 1, 2, 1), mode="reflect"), x5)
    ints = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.testing.assert_array_equal(F.pad(ints, (1, 1), value=7).numpy(),
                                  torch.nn.functional.pad(torch.from_numpy(ints), (1, 1),
                                                          value=7).numpy())


def test_pad_gradcheck():
    gradcheck(lambda a: F.pad(a, (2, 1, 1, 3), mode="reflect"), X[:1, :2])
    gradcheck(lambda a: F.pad(a, (3, 1), mode="circular"), X[0, :1])
    gradcheck(lambda a: F.pad(a, (1, -2, 2, 2), value=1.0), X[:1, :2])


@pytest.mark.parametrize("call, error, message", [
    (lambda: F.pad(X, (1,)), RuntimeError, "Padding length must be divisible by 2"),
    (lambda: F.pad(X[0, 0], (1, 1, 1, 1, 1, 1)), RuntimeError, "Padding length should be less"),
    (lambda: F.pad(X[0], (6, 0), mode="reflect"), RuntimeError, "Padding size should be less"),
    (lambda: F.pad(X[0], (7, 0), mode="circular"), RuntimeError, "wrapping around more than once"),
    (lambda: F.pad(X[0], (1, 1), mode="reflect", value=1.0), RuntimeError,
     "doesn't take in value"),
    (lambda: F.pad(X, (1, 1), mode="bogus"), NotImplementedError, "Unrecognised padding mode"),
    (lambda: F.pad(X, (1, 1), mode="reflect"), NotImplementedError,
     "Padding size 2 is not supported for 4D input"),
    (lambda: F.pad(X, (-4, -4)), RuntimeError, "negative output size"),
])
def test_pad_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("kwargs", [dict(scale_factor=2), dict(size=(7, 11)),
                                    dict(scale_factor=1.7), dict(size=(3, 4)),
                                    dict(scale_factor=(0.5, 3)), dict(size=5),
                                    dict(scale_factor=1.7, recompute_scale_factor=True)])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear", "bilinear-ac"])
def test_interpolate_2d_against_torch(kwargs, mode):
    torch = torch_or_skip()
    extra = dict(mode="bilinear", align_corners=True) if mode == "bilinear-ac" else dict(mode=mode)
    for dtype in (np.float64, np.float32):
        against_torch(lambda a: F.interpolate(a, **kwargs, **extra),
                      lambda a: torch.nn.functional.interpolate(a, **kwargs, **extra),
                      X.astype(dtype), rtol=1e-5 if dtype == np.float64 else 2e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(size=(3, 4)), dict(size=(10, 12)), dict(scale_factor=2),
                                    dict(size=(5, 3))])
def test_interpolate_area_against_torch(kwargs):
    torch = torch_or_skip()
    against_torch(lambda a: F.interpolate(a, mode="area", **kwargs),
                  lambda a: torch.nn.functional.interpolate(a, mode="area", **kwargs), X)


def test_interpolate_1d_and_3d_against_torch():
    torch = torch_or_skip()
    x3 = X.reshape(2, 3, 30)
    for kwargs in (dict(size=47, mode="linear"), dict(scale_factor=0.6, mode="linear",
                                                      align_corners=True),
                   dict(scale_factor=2.5), dict(size=9, mode="nearest-exact"),
                   dict(size=8, mode="area")):
        against_torch(lambda a: F.interpolate(a, **kwargs),
                      lambda a: torch.nn.functional.interpolate(a, **kwargs), x3)
    x5 = rng.normal(size=(1, 2, 3, 4, 5))
    against_torch(lambda a: F.interpolate(a, scale_factor=(2, 1.5, 0.5)),
                  lambda a: torch.nn.functional.interpolate(a, scale_factor=(2, 1.5, 0.5)), x5)


def test_interpolate_gradcheck():
    gradcheck(lambda a: F.interpolate(a, size=(4, 7), mode="bilinear"), X[:1, :2])
    gradcheck(lambda a: F.interpolate(a, scale_factor=1.5, mode="bilinear", align_corners=True),
              X[:1, :1])
    gradcheck(lambda a: F.interpolate(a, size=(7, 4)), X[:1, :2])
    gradcheck(lambda a: F.interpolate(a, size=11, mode="linear"), X[:1, :2, 0])


@pytest.mark.parametrize("call, error, message", [
    (lambda: F.interpolate(X, scale_factor=2, mode="nearest", align_corners=True), ValueError,
     "align_corners option can only be set"),
    (lambda: F.interpolate(X, size=3, scale_factor=2), ValueError, "only one of size"),
    (lambda: F.interpolate(X), ValueError, "either size or scale_factor"),
    (lambda: F.interpolate(X, size=(1, 2, 3)), ValueError, "same number of spatial dimensions"),
    (lambda: F.interpolate(X, size=3, mode="bicubic"), NotImplementedError, "not supported"),
    (lambda: F.interpolate(X, size=3, mode="linear"), NotImplementedError, "needs 3D input"),
    (lambda: F.interpolate(X[0, 0], size=3), NotImplementedError, "Only 3D, 4D and 5D"),
    (lambda: F.interpolate(X, size=3, recompute_scale_factor=True), ValueError,
     "not meaningful with an explicit size"),
])
def test_interpolate_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("size", [(3, 4), 1, (5, 6), (None, 2), (4, 9)])
def test_adaptive_avg_pool2d_against_torch(size):
    torch = torch_or_skip()
    against_torch(lambda a: F.adaptive_avg_pool2d(a, size),
                  lambda a: torch.nn.functional.adaptive_avg_pool2d(a, size), X)
    against_torch(lambda a: F.adaptive_avg_pool2d(a, size),
                  lambda a: torch.nn.functional.adaptive_avg_pool2d(a, size), X[0])
    gradcheck(lambda a: F.adaptive_avg_pool2d(a, (3, 4)), X[:1, :1])
    against_torch(lambda a: F.adaptive_avg_pool1d(a, 4),
                  lambda a: torch.nn.functional.adaptive_avg_pool1d(a, 4), X[0])


def test_pixel_shuffle_round_trip_and_torch():
    torch = torch_or_skip()
    xs = rng.normal(size=(2, 8, 3, 4))
    against_torch(lambda a: F.pixel_shuffle(a, 2), lambda a: torch.nn.functional.pixel_shuffle(a, 2),
                  xs)
    against_torch(lambda a: F.pixel_unshuffle(a, 2),
                  lambda a: torch.nn.functional.pixel_unshuffle(a, 2), X[:, :, :4])
    np.testing.assert_array_equal(F.pixel_unshuffle(F.pixel_shuffle(xs, 2), 2).numpy(), xs)
    with pytest.raises(RuntimeError, match="divisible by the square of upscale_factor"):
        F.pixel_shuffle(X, 2)
    with pytest.raises(RuntimeError, match="divisible by downscale_factor"):
        F.pixel_unshuffle(X, 2)


def test_plans_are_reused_across_steps():
    p = to.Parameter(X.copy())
    for _ in range(3):
        F.interpolate(F.pad(p, (1, 1, 1, 1), mode="reflect"), scale_factor=2,
                      mode="bilinear").sum().backward()
    before = to.engine.cache_info()
    F.interpolate(F.pad(p, (1, 1, 1, 1), mode="reflect"), scale_factor=2,
                  mode="bilinear").sum().backward()
    after = to.engine.cache_info()
    assert after.misses == before.misses


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize("mode, shape", [("nearest", (1, 1, 4)), ("nearest", (1, 1, 4, 4)),
                                         ("nearest", (1, 1, 2, 2, 2)), ("nearest-exact", (1, 2, 3)),
                                         ("linear", (1, 1, 4)), ("bilinear", (1, 1, 3, 3)),
                                         ("area", (1, 1, 4, 4)), ("area", (1, 1, 2, 2, 2))])
def test_integer_inputs_give_torchs_result_or_error(dtype, mode, shape):
    """Issue 25: nearest resampling of integer tensors computed where torch refuses (only uint8
    is resampled, by the nearest modes; tinyopt refuses uint8 bilinear, which torch rounds)."""
    torch = pytest.importorskip("torch")
    if dtype == "uint8" and mode == "bilinear":
        pytest.skip("tinyopt refuses it (a TypeError)")

    def run(lib):
        x = lib.tensor(np.arange(np.prod(shape)).reshape(shape) % 3, dtype=getattr(lib, dtype))
        try:
            r = lib.nn.functional.interpolate(x, scale_factor=2, mode=mode)
        except NotImplementedError as e:
            return str(e)
        return str(r.dtype).split(".")[-1], r.tolist()

    assert run(to) == run(torch)
