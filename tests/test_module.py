"""nn.Module: registration, naming, modes, state_dict round trips and their errors."""

from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.engine.tensor import Tensor


class Affine(nn.Module):
    """A Linear-shaped module built only from the Module API (layers come from elsewhere)."""

    def __init__(self, n_in: int, n_out: int, bias: bool = True, dtype=np.float32):
        super().__init__()
        rng = np.random.default_rng(n_in * 100 + n_out)
        self.weight = nn.Parameter(rng.standard_normal((n_out, n_in)).astype(dtype))
        if bias:
            self.bias = nn.Parameter(np.zeros(n_out, dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        return x @ self.weight.data.T + (0 if self.bias is None else self.bias.data)

    def extra_repr(self) -> str:
        return (f"in_features={self.weight.shape[1]}, out_features={self.weight.shape[0]}, "
                f"bias={self.bias is not None}")


class Norm(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(np.ones(n, np.float32))
        self.register_buffer("running_mean", np.zeros(n, np.float32))
        self.register_buffer("num_batches_tracked", np.zeros((), np.int64))
        self.register_buffer("scratch", np.zeros(n, np.float32), persistent=False)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Affine(4, 3)
        self.norm = Norm(3)
        self.fc2 = Affine(3, 2)
        self.scale = nn.Parameter(np.ones(1, np.float32))

    def forward(self, x):
        return self.fc2(self.fc1(x)) * self.scale.data


def assert_state_equal(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert a[k].dtype == b[k].dtype


# ---- registration and naming --------------------------------------------------------------------
def test_named_parameters_order_and_dotted_names():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "scale", "fc1.weight", "fc1.bias", "norm.weight", "fc2.weight", "fc2.bias"]
    assert [p for p in net.parameters()] == [p for _, p in net.named_parameters()]
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["scale"]
    assert [n for n, _ in net.named_parameters(prefix="model")][0] == "model.scale"


def test_parameters_match_torch_order():
    torch = pytest.importorskip("torch")

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(4, 3)
            self.norm = torch.nn.BatchNorm1d(3)
            self.fc2 = torch.nn.Linear(3, 2)
            self.scale = torch.nn.Parameter(torch.ones(1))

    names = [n for n, _ in TNet().named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "norm.weight", "norm.bias",
                     "fc2.weight", "fc2.bias"]


def test_shared_parameter_yielded_once_but_saved_under_both_names():
    a, b = Affine(3, 3), Affine(3, 3)
    b.weight = a.weight
    model = nn.Sequential(a, b)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "1.bias"]
    assert len(list(model.named_parameters(remove_duplicate=False))) == 4
    assert list(model.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]


def test_shared_submodule_visited_once():
    shared = Affine(2, 2)
    model = nn.Sequential(shared, shared)
    assert [n for n, _ in model.named_modules()] == ["", "0"]
    assert len(list(model.parameters())) == 2
    assert len(list(model.children())) == 1


def test_buffers_registration_and_persistence():
    norm = Norm(3)
    assert [n for n, _ in norm.named_buffers()] == ["running_mean", "num_batches_tracked",
                                                    "scratch"]
    assert isinstance(norm.running_mean, to.Tensor)
    assert list(norm.state_dict()) == ["weight", "running_mean", "num_batches_tracked"]
    norm.running_mean = np.full(3, 2.0, np.float32)  # assigning keeps it a buffer
    assert "running_mean" in norm._buffers
    np.testing.assert_array_equal(norm.state_dict()["running_mean"], 2.0)
    norm.register_buffer("maybe", None)
    assert "maybe" not in norm.state_dict()


def test_buffer_keeps_the_tensor_and_wraps_arrays_without_copy():
    m = nn.Module()
    t = to.tensor(np.ones(2, np.float32))
    m.register_buffer("t", t)
    assert m.t is t and m.get_buffer("t") is t and list(m.buffers()) == [t]
    arr = np.zeros(3)
    m.register_buffer("a", arr)
    assert isinstance(m.a, to.Tensor) and m.a.numpy() is arr  # shares the array's memory
    m.a[1] = 5.0
    assert arr[1] == 5.0
    with pytest.raises(TypeError, match="buffer 't'"):
        m.t = [1, 2]


def make_counter(lib):
    """A module using buffers as PyTorch code does: registered from zeros, changed in place in
    forward (``+=``, ``masked_fill_``, ``copy_``, ``mul_``/``add_`` under no_grad)."""

    class Counter(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lib.nn.Linear(3, 3)
            self.register_buffer("steps", lib.zeros((), dtype=lib.int64))
            self.register_buffer("ema", lib.zeros(3))
            self.register_buffer("mask", lib.zeros(3, dtype=lib.bool))

        def forward(self, x):
            self.steps += 1
            y = self.lin(x)
            with lib.no_grad():
                self.ema.mul_(0.5).add_(y.mean(0), alpha=0.5)
                self.mask.copy_(self.ema > 0)
            self.ema.masked_fill_(self.ema.abs() > 100.0, 0.0)
            return y * 2 + self.ema
    return Counter()


def test_buffers_change_in_place_in_forward_like_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((3, 3)).astype(np.float32), rng.standard_normal(3).astype(
        np.float32)
    xs = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(3)]

    ours, theirs = make_counter(to), make_counter(torch)
    for m, lib in ((ours, to), (theirs, torch)):
        m.load_state_dict({"lin.weight": lib.tensor(w), "lin.bias": lib.tensor(b),
                           "steps": lib.tensor(0), "ema": lib.zeros(3),
                           "mask": lib.zeros(3, dtype=lib.bool)})
    ema = ours.ema
    for x in xs:
        ours(to.tensor(x)).sum().backward()
        theirs(torch.tensor(x)).sum().backward()
    assert ours.ema is ema  # written in place, not replaced
    sd, want = ours.state_dict(), theirs.state_dict()
    assert list(sd) == list(want)
    for k in sd:
        assert str(sd[k].dtype) == str(want[k].dtype).removeprefix("torch."), k
        np.testing.assert_allclose(sd[k].numpy(), want[k].numpy(), rtol=1e-6, err_msg=k)
    np.testing.assert_allclose(ours.lin.weight.grad.numpy(), theirs.lin.weight.grad.numpy(),
                               rtol=1e-6)
    assert ours.steps.item() == 3


def test_buffer_state_dict_round_trip_and_dtype_cast(tmp_path):
    m = make_counter(to)
    m(to.ones(2, 3))
    sd = m.state_dict()
    assert all(isinstance(v, to.Tensor) for v in sd.values())
    assert sd["ema"].numpy() is not None and np.shares_memory(sd["ema"].numpy(), m.ema.numpy())
    assert m.state_dict(keep_vars=True)["ema"] is m.ema
    to.save(sd, tmp_path / "m.pt")
    fresh = make_counter(to)
    ema = fresh.ema
    fresh.load_state_dict(to.load(tmp_path / "m.pt"))
    assert fresh.ema is ema  # loaded into the existing storage
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(fresh.state_dict()[k].numpy(), v.numpy())
    fresh.double()
    assert fresh.ema.dtype == to.float64 and fresh.steps.dtype == to.int64
    assert fresh.mask.dtype == to.bool


@pytest.mark.parametrize("name, exc, match", [
    (1, TypeError, "should be a string"),
    ("a.b", KeyError, "contain"),
    ("", KeyError, "empty string"),
    ("forward", KeyError, "already exists"),
])
def test_register_rejects_bad_names(name, exc, match):
    m = nn.Module()
    with pytest.raises(exc, match=match):
        m.register_buffer(name, np.zeros(1))
    with pytest.raises(exc, match=match):
        m.register_parameter(name, nn.Parameter(np.zeros(1, np.float32)))
    with pytest.raises(exc, match=match):
        m.add_module(name, nn.Module())


def test_setattr_type_rules():
    m = Affine(2, 2)
    with pytest.raises(TypeError, match="cannot assign 'numpy.ndarray' as parameter 'weight'"):
        m.weight = np.zeros((2, 2))
    m.bias = None
    assert m.bias is None and "bias" in m._parameters
    seq = nn.Sequential(Affine(2, 2))
    with pytest.raises(TypeError, match="as child module '0'"):
        setattr(seq, "0", 5)
    with pytest.raises(TypeError, match="not a Module subclass"):
        m.add_module("x", 5)
    with pytest.raises(TypeError, match="object to parameter"):
        m.register_parameter("p", np.zeros(1))


def test_reassigning_moves_between_registries():
    m = nn.Module()
    m.x = nn.Parameter(np.zeros(1, np.float32))
    m.x = None  # stays a (None) parameter slot
    assert m._parameters == {"x": None}
    del m.x
    m.x = nn.Module()
    assert "x" in m._modules and "x" not in m._parameters
    m.plain = 3
    assert m.plain == 3 and "plain" in m.__dict__
    del m.x
    with pytest.raises(AttributeError, match="'Module' object has no attribute 'x'"):
        m.x


def test_assign_before_init_raises():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(np.zeros(1, np.float32))

    with pytest.raises(AttributeError, match=r"before Module.__init__\(\) call"):
        Bad()


def test_get_submodule_parameter_buffer():
    net = Net()
    assert net.get_submodule("fc1") is net.fc1
    assert net.get_submodule("") is net
    assert net.get_parameter("fc2.bias") is net.fc2.bias
    assert net.get_buffer("norm.running_mean") is net.norm.running_mean
    with pytest.raises(AttributeError, match="has no attribute `nope`"):
        net.get_submodule("fc1.nope")
    with pytest.raises(AttributeError, match="is not an nn.Module"):
        net.get_submodule("scale")


# ---- modes and bulk operations ------------------------------------------------------------------
def test_train_eval_propagate():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    with pytest.raises(ValueError, match="boolean"):
        net.train("yes")


def test_zero_grad_set_to_none_and_in_place():
    net = Net()
    for p in net.parameters():
        p.grad = np.ones(p.shape, p.dtype)
    grads = [p.grad for p in net.parameters()]
    net.zero_grad(set_to_none=False)
    for p, g in zip(net.parameters(), grads):
        assert p.grad is g and not g.any()
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_apply_order_and_requires_grad():
    net = Net()
    seen = []
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen == ["Affine", "Norm", "Affine", "Net"]
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_forward_hooks_and_missing_forward():
    m = Affine(2, 2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    h2 = m.register_forward_hook(lambda mod, args, out: calls.append(out.shape) or out + 1)
    x = np.ones((1, 2), np.float32)
    np.testing.assert_allclose(m(x), m.forward(2 * x) + 1)
    h1.remove()
    h2.remove()
    np.testing.assert_allclose(m(x), m.forward(x))
    assert calls == [(1, 2)]
    with pytest.raises(NotImplementedError, match="missing the required \"forward\""):
        nn.Module()(1)


def test_to_double_keeps_parameter_identity():
    net = Net()
    w = net.fc1.weight
    before = w.data.numpy().copy()
    net.double()
    assert net.fc1.weight is w and w.dtype == np.float64 and w.data.dtype == np.float64
    np.testing.assert_array_equal(w.data, before)
    assert net.norm.running_mean.dtype == np.float64
    assert net.norm.num_batches_tracked.dtype == np.int64  # integer buffers are not cast
    net.float()
    assert w.dtype == np.float32
    with pytest.raises(TypeError, match="floating point"):
        net.to(np.int64)
    with pytest.raises(RuntimeError, match="CPU only"):  # as torch without CUDA: at once
        net.to("cuda")
    for move in (net.cuda, lambda: net.cuda(0), net.xpu):
        with pytest.raises(RuntimeError, match="CPU only"):
            move()
    # torch's CPU build raises AssertionError: scripts that catch it keep working
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled"):
        net.cuda()
    with pytest.raises(AssertionError, match="^Torch not compiled with XPU enabled"):
        net.xpu()


def test_deepcopy_keeps_sharing_and_copies_storage():
    a = Affine(2, 2)
    model = nn.Sequential(a, a)
    clone = copy.deepcopy(model)
    assert clone[0] is clone[1] and clone[0].weight is not a.weight
    clone[0].weight.data[...] = 7
    assert not (a.weight.data == 7).any()


# ---- repr ---------------------------------------------------------------------------------------
def test_repr_like_pytorch():
    net = nn.Sequential(Affine(4, 3), nn.Sequential(Affine(3, 2, bias=False)))
    assert repr(net) == (
        "Sequential(\n"
        "  (0): Affine(in_features=4, out_features=3, bias=True)\n"
        "  (1): Sequential(\n"
        "    (0): Affine(in_features=3, out_features=2, bias=False)\n"
        "  )\n"
        ")")
    assert repr(nn.Module()) == "Module()"


def test_repr_matches_torch_structure():
    torch = pytest.importorskip("torch")

    class Affine_(torch.nn.Module):  # same extra_repr, torch's __repr__
        def __init__(self, text):
            super().__init__()
            self.text = text

        def extra_repr(self):
            return self.text

        def _get_name(self):
            return "Affine"

    ours = nn.ModuleList([Affine(2, 2), Affine(2, 2), Affine(3, 2)])
    theirs = torch.nn.ModuleList([Affine_(m.extra_repr()) for m in ours])
    assert repr(ours) == repr(theirs)
    multi = Affine(2, 2)
    multi.extra_repr = lambda: "a=1,\nb=2"
    outer = nn.Sequential(multi)
    t = Affine_("a=1,\nb=2")
    assert repr(outer) == repr(torch.nn.Sequential(t))


# ---- state_dict ---------------------------------------------------------------------------------
def test_state_dict_keys_values_are_copies():
    net = Net()
    sd = net.state_dict()
    assert isinstance(sd, OrderedDict)
    assert list(sd) == ["scale", "fc1.weight", "fc1.bias", "norm.weight", "norm.running_mean",
                        "norm.num_batches_tracked", "fc2.weight", "fc2.bias"]
    assert all(isinstance(v, to.Tensor) for v in sd.values())
    w = sd["fc1.weight"].numpy().copy()
    snapshot = copy.deepcopy(sd)
    net.fc1.weight.data -= 1.0
    net.norm.running_mean += 5
    # As in PyTorch the values share the storage (no copy); a deepcopy keeps a snapshot.
    np.testing.assert_array_equal(sd["fc1.weight"], w - 1.0)
    np.testing.assert_array_equal(sd["norm.running_mean"], 5)
    np.testing.assert_array_equal(snapshot["fc1.weight"], w)
    np.testing.assert_array_equal(snapshot["norm.running_mean"], 0)
    kept = net.state_dict(keep_vars=True)
    assert kept["fc1.weight"] is net.fc1.weight
    assert kept["norm.running_mean"] is net.norm.running_mean


def test_round_trip_into_fresh_model_copies_into_existing_storage():
    src, dst = Net(), Net()
    src.fc1.weight.data[...] = 3.0
    src.norm.num_batches_tracked[...] = 9
    storage = dst.fc1.weight._data
    running = dst.norm.running_mean
    result = dst.load_state_dict(src.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    assert dst.fc1.weight._data is storage and running is dst.norm.running_mean
    assert_state_equal(dst.state_dict(), src.state_dict())
    src.fc1.weight.data[...] = 4.0  # no aliasing between the two models
    assert (dst.fc1.weight.data == 3.0).all()


def test_load_accepts_parameters_and_tensors_as_values():
    src, dst = Net(), Net()
    dst.load_state_dict(src.state_dict(keep_vars=True))
    assert_state_equal(dst.state_dict(), src.state_dict())


def test_strict_missing_and_unexpected_messages_like_pytorch():
    net = Net()
    sd = net.state_dict()
    del sd["fc2.bias"]
    sd["fc2.extra"] = np.zeros(1)
    sd["nothere.weight"] = np.zeros(1)
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(sd)
    assert str(info.value) == (
        "Error(s) in loading state_dict for Net:\n"
        '\tMissing key(s) in state_dict: "fc2.bias". \n'
        '\tUnexpected key(s) in state_dict: "nothere.weight", "fc2.extra". ')
    result = net.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["fc2.bias"]
    assert sorted(result.unexpected_keys) == ["fc2.extra", "nothere.weight"]
    missing, unexpected = result  # a NamedTuple, unpackable like PyTorch's


def test_missing_and_unexpected_match_torch():
    torch = pytest.importorskip("torch")
    tnet = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Sequential(torch.nn.Linear(3, 2)))
    ours = nn.Sequential(Affine(4, 3), nn.Sequential(Affine(3, 2)))
    sd = {k: v.detach().numpy() for k, v in tnet.state_dict().items()}
    del sd["1.0.bias"]
    sd["1.0.weight.x"] = sd["0.bias"]
    sd["1"] = sd["0.bias"]
    sd["2.weight"] = sd["0.bias"]
    theirs = tnet.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    mine = ours.load_state_dict(sd, strict=False)
    assert mine.missing_keys == theirs.missing_keys
    assert sorted(mine.unexpected_keys) == sorted(theirs.unexpected_keys)


def test_shape_mismatch_raises_value_error_and_changes_nothing():
    net = Net()
    before = copy.deepcopy(net.state_dict())
    sd = Net().state_dict()
    for k in sd:
        sd[k] = sd[k] + 1  # everything else would change
    sd["fc2.weight"] = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match=r"size mismatch for fc2\.weight: copying a param with "
                       r"shape \(3, 2\) from checkpoint, the shape in current model is \(2, 3\)"):
        net.load_state_dict(sd)
    with pytest.raises(RuntimeError):  # also catchable as PyTorch code expects
        net.load_state_dict(sd, strict=False)
    assert_state_equal(net.state_dict(), before)


def test_dtype_mismatch_raises_value_error_and_changes_nothing():
    net = Net()
    before = copy.deepcopy(net.state_dict())
    sd = {k: v + 1 for k, v in net.state_dict().items()}
    sd["fc1.bias"] = sd["fc1.bias"].double()
    with pytest.raises(ValueError, match=r"dtype mismatch for fc1\.bias: .*float64.*float32"):
        net.load_state_dict(sd)
    sd = {k: v + 1 for k, v in net.state_dict().items()}
    sd["scale"] = [2.0]
    with pytest.raises(ValueError, match='parameter named "scale"'):
        net.load_state_dict(sd)
    assert_state_equal(net.state_dict(), before)


def test_non_mapping_rejected():
    with pytest.raises(TypeError, match="dict-like"):
        Net().load_state_dict([("scale", np.ones(1))])


def test_non_persistent_buffer_not_loaded_and_unexpected():
    norm = Norm(3)
    sd = norm.state_dict()
    sd["scratch"] = np.ones(3, np.float32)
    assert norm.load_state_dict(sd, strict=False).unexpected_keys == ["scratch"]
    assert not norm.scratch.any()


def test_loading_keeps_optimizer_views_valid():
    net = Net()
    opt = optim.SGD(net.parameters(), lr=1.0)
    storage = [p._data for p in net.parameters()]
    weight = net.fc1.weight._data
    src = Net()
    src.fc1.weight.data[...] = 5.0
    net.load_state_dict(src.state_dict())
    assert all(p._data is a for p, a in zip(net.parameters(), storage))  # loaded in place
    assert (net.fc1.weight.data == 5.0).all()
    for p in net.parameters():
        p.grad = np.ones(p.shape, np.float32)
    opt.step()  # steps the loaded values, where they are
    assert (weight == 4.0).all() and (net.fc1.weight.data == 4.0).all()


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=2, max_size=5),
       bias=st.booleans(), seed=st.integers(0, 2**16))
def test_state_dict_round_trip_property(sizes, bias, seed):
    def build():
        return nn.Sequential(*[Affine(a, b, bias=bias) for a, b in zip(sizes, sizes[1:])])

    src, dst = build(), build()
    rng = np.random.default_rng(seed)
    for p in src.parameters():
        p.data[...] = rng.standard_normal(p.shape)
    dst.load_state_dict(src.state_dict())
    assert_state_equal(dst.state_dict(), src.state_dict())
    expected = len(sizes) - 1
    assert len(dst.state_dict()) == expected * (2 if bias else 1)


def test_non_string_keys_get_a_clear_error():
    m = nn.Sequential(nn.Linear(2, 2))
    before = [p.data.numpy().copy() for p in m.parameters()]
    state = {**m.state_dict(), 1: np.ones(1)}
    with pytest.raises(TypeError, match=r"keys must be strings.*got 1 of type int"):
        m.load_state_dict(state)
    for p, b in zip(m.parameters(), before):
        np.testing.assert_array_equal(p.data, b)
    for fn in (m.get_submodule, m.get_parameter, m.get_buffer):
        with pytest.raises(TypeError, match="target must be a dotted name"):
            fn(0)
