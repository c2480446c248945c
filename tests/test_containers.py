"""nn.Sequential, nn.ModuleList, nn.ModuleDict."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from tinyopt import nn


class AddConst(nn.Module):
    def __init__(self, c: float):
        super().__init__()
        self.c = nn.Parameter(np.full(1, c, np.float32))

    def forward(self, x):
        return x + self.c.data

    def extra_repr(self) -> str:
        return f"c={float(self.c.data[0])}"


def mods(*cs):
    return [AddConst(c) for c in cs]


# ---- Sequential ---------------------------------------------------------------------------------
def test_sequential_forward_applies_in_order():
    seq = nn.Sequential(*mods(1, 2, 3))
    np.testing.assert_array_equal(seq(np.zeros(2, np.float32)), 6.0)
    assert [n for n, _ in seq.named_parameters()] == ["0.c", "1.c", "2.c"]


def test_sequential_indexing_and_slicing():
    ms = mods(1, 2, 3, 4)
    seq = nn.Sequential(*ms)
    assert len(seq) == 4
    assert seq[0] is ms[0] and seq[-1] is ms[3] and seq[-4] is ms[0]
    sub = seq[1:3]
    assert type(sub) is nn.Sequential and list(sub) == ms[1:3]
    assert list(sub._modules) == ["1", "2"]  # slices keep the original names, as in PyTorch
    assert list(seq[::-1]) == ms[::-1]
    with pytest.raises(IndexError, match="index 4 is out of range"):
        seq[4]
    with pytest.raises(IndexError, match="index -5 is out of range"):
        seq[-5]


def test_sequential_ordered_dict_constructor():
    a, b = mods(1, 2)
    seq = nn.Sequential(OrderedDict([("first", a), ("second", b)]))
    assert seq.first is a and seq[1] is b
    assert list(seq.state_dict()) == ["first.c", "second.c"]


def test_sequential_append_insert_extend_delete_setitem():
    a, b, c, d = mods(1, 2, 3, 4)
    seq = nn.Sequential(a)
    assert seq.append(b) is seq
    seq.insert(0, c)
    assert list(seq) == [c, a, b] and list(seq._modules) == ["0", "1", "2"]
    seq.insert(-1, d)
    assert list(seq) == [c, a, d, b]
    seq.extend(mods(9))
    assert len(seq) == 5
    del seq[0]
    assert list(seq._modules) == ["0", "1", "2", "3"] and seq[0] is a
    del seq[1:3]
    assert list(seq)[0] is a and len(seq) == 2
    seq[0] = c
    assert seq[0] is c
    assert seq.pop(0) is c and len(seq) == 1


def test_sequential_rejects_non_modules_without_changing():
    seq = nn.Sequential(*mods(1))
    with pytest.raises(TypeError, match="not a Module subclass"):
        nn.Sequential(AddConst(1), "relu")
    with pytest.raises(TypeError, match="not a Module subclass"):
        seq.extend([AddConst(2), 3])
    assert len(seq) == 1
    with pytest.raises(TypeError):
        seq.append(lambda x: x)
    with pytest.raises(IndexError, match="Index out of range"):
        seq.insert(5, AddConst(1))


def test_sequential_add_and_mul():
    a, b = mods(1, 2)
    s = nn.Sequential(a) + nn.Sequential(b)
    assert list(s) == [a, b]
    assert list(nn.Sequential(a) * 3) == [a, a, a]
    s = nn.Sequential(a)
    s *= 2
    assert list(s) == [a, a]
    with pytest.raises(ValueError, match="only objects of Sequential class"):
        nn.Sequential(a) + [b]


def test_sequential_repr_matches_torch():
    torch = pytest.importorskip("torch")
    ours = nn.Sequential(nn.Sequential(*mods(1)), *mods(2))
    theirs = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Identity()), torch.nn.Identity())
    expected = repr(theirs).replace("Identity()", "AddConst(c=1.0)", 1)
    expected = expected.replace("Identity()", "AddConst(c=2.0)")
    assert repr(ours) == expected


def test_sequential_train_eval_reach_children():
    seq = nn.Sequential(*mods(1, 2))
    seq.eval()
    assert not seq[0].training and not seq[1].training


# ---- ModuleList ---------------------------------------------------------------------------------
def test_module_list_registers_and_indexes():
    ms = mods(1, 2, 3)
    ml = nn.ModuleList(ms)
    assert len(ml) == 3 and list(ml) == ms and ml[-1] is ms[2]
    assert [n for n, _ in ml.named_parameters()] == ["0.c", "1.c", "2.c"]
    assert type(ml[1:]) is nn.ModuleList and list(ml[1:]) == ms[1:]
    with pytest.raises(IndexError, match="index 3 is out of range"):
        ml[3]
    with pytest.raises(NotImplementedError):
        ml(0)


def test_module_list_mutation():
    a, b, c = mods(1, 2, 3)
    ml = nn.ModuleList([a])
    ml.append(b)
    ml.insert(0, c)
    assert list(ml) == [c, a, b]
    ml += [AddConst(4)]
    assert len(ml) == 4
    del ml[0]
    assert list(ml._modules) == ["0", "1", "2"] and ml[0] is a
    ml[0] = c
    assert ml[0] is c
    assert ml.pop(-1).c.data[0] == 4
    assert list(ml + nn.ModuleList([a])) == [c, b, a]
    with pytest.raises(TypeError, match="iterable"):
        ml.extend(5)
    with pytest.raises(TypeError, match="not a Module subclass"):
        ml.extend([a, "x"])
    assert len(ml) == 2


def test_module_list_repr_compresses_repeats_like_torch():
    torch = pytest.importorskip("torch")
    ours = nn.ModuleList(mods(1, 1, 1, 2))
    theirs = torch.nn.ModuleList([torch.nn.Identity() for _ in range(3)] + [torch.nn.Tanh()])
    expected = repr(theirs).replace("Identity()", "AddConst(c=1.0)").replace(
        "Tanh()", "AddConst(c=2.0)")
    assert repr(ours) == expected
    assert repr(nn.ModuleList()) == "ModuleList()"


# ---- ModuleDict ---------------------------------------------------------------------------------
def test_module_dict_mapping_behaviour():
    a, b = mods(1, 2)
    md = nn.ModuleDict({"cls": a, "box": b})
    assert list(md) == ["cls", "box"] and md["box"] is b and "cls" in md and len(md) == 2
    assert list(md.keys()) == ["cls", "box"] and list(md.values()) == [a, b]
    assert list(md.state_dict()) == ["cls.c", "box.c"]
    md.update([("extra", AddConst(3))])
    assert list(md) == ["cls", "box", "extra"]
    assert md.pop("cls") is a and "cls" not in md
    md["new"] = a
    assert md.new is a
    md.clear()
    assert len(md) == 0


def test_module_dict_rejects_bad_input_without_changing():
    md = nn.ModuleDict({"a": AddConst(1)})
    with pytest.raises(ValueError, match="has length 3; 2 is required"):
        md.update([("b", AddConst(2), 1)])
    with pytest.raises(TypeError, match="should be Iterable"):
        md.update([5])
    with pytest.raises(TypeError, match="not a Module subclass"):
        md.update({"b": AddConst(2), "c": 3})
    with pytest.raises(KeyError):
        md.update({"b": AddConst(2), "x.y": AddConst(3)})
    with pytest.raises(TypeError, match="iterable of key/value pairs"):
        md.update(5)
    assert list(md) == ["a"]


# ---- ParameterList / ParameterDict ---------------------------------------------------------------
def test_parameter_list_registers_and_converts():
    import tinyopt as to
    from tinyopt import nn
    pl = nn.ParameterList([nn.Parameter(np.ones(3)), to.tensor([1.0, 2.0])])
    pl.append(nn.Parameter(np.zeros((2, 2))))
    pl += [to.tensor([5.0])]
    assert len(pl) == 4 and [n for n, _ in pl.named_parameters()] == ["0", "1", "2", "3"]
    assert all(isinstance(p, nn.Parameter) for p in pl)
    assert pl[1].requires_grad and pl[-1].data.tolist() == [5.0]
    assert isinstance(pl[1:3], nn.ParameterList) and len(pl[1:3]) == 2
    pl[0] = nn.Parameter(np.full(3, 7.0))
    assert pl.state_dict()["0"].tolist() == [7.0, 7.0, 7.0]
    with pytest.raises(IndexError):
        pl[4]
    with pytest.raises(TypeError, match="should be called with an iterable"):
        pl.extend(3)
    with pytest.raises(RuntimeError, match="should not be called"):
        pl()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = nn.ParameterList(nn.Parameter(np.ones((2, 2), np.float32)) for _ in range(3))

        def forward(self, x):
            for w in self.ws:
                x = x @ w
            return x

    m = M()
    assert [n for n, _ in m.named_parameters()] == ["ws.0", "ws.1", "ws.2"]
    m(np.ones((1, 2), np.float32)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    assert "(0): Parameter containing: [float32 of size 2x2]" in repr(m)


def test_parameter_dict():
    import tinyopt as to
    from collections import OrderedDict
    from tinyopt import nn
    pd = nn.ParameterDict({"b": nn.Parameter(np.ones(2)), "a": to.tensor([3.0])})
    assert list(pd) == ["a", "b"]  # a plain dict is added in sorted order, as PyTorch
    ordered = nn.ParameterDict(OrderedDict([("z", nn.Parameter(np.ones(1))),
                                            ("y", nn.Parameter(np.ones(1)))]))
    assert list(ordered.keys()) == ["z", "y"]
    pd["c"] = nn.Parameter(np.zeros(1))
    assert "c" in pd and len(pd) == 3 and isinstance(pd["a"], nn.Parameter)
    assert list(pd.state_dict()) == ["a", "b", "c"]
    assert pd.pop("b").data.tolist() == [1.0, 1.0] and list(pd) == ["a", "c"]
    assert pd.get("nope") is None and pd.setdefault("d", to.tensor([1.0])).shape == (1,)
    merged = pd | ordered
    assert list(merged) == ["a", "c", "d", "z", "y"]
    del pd["a"]
    assert list(pd) == ["c", "d"] and [n for n, _ in pd.named_parameters()] == ["c", "d"]
    with pytest.raises(TypeError, match="not a string"):
        pd[1] = nn.Parameter(np.ones(1))
    with pytest.raises(ValueError, match="has length 3; 2 is required"):
        pd.update([("a", 1, 2)])
    pd.clear()
    assert len(pd) == 0 and list(pd.parameters()) == []


def test_parameter_containers_against_torch():
    torch = pytest.importorskip("torch")
    from tinyopt import nn
    ours = nn.ParameterDict({"w": nn.Parameter(np.ones((2, 3), np.float32))})
    theirs = torch.nn.ParameterDict({"w": torch.nn.Parameter(torch.ones(2, 3))})
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ol = nn.ParameterList([nn.Parameter(np.ones(2, np.float32))] * 2)
    tl = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2))] * 2)
    assert list(ol.state_dict()) == list(tl.state_dict()) and len(ol) == len(tl)
