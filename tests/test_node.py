"""``engine/node.py``: the engine's node protocol, the public fields every Tensor carries."""

import numpy as np
import pytest

import tinyopt as to
from tinyopt.engine.node import Node
from tinyopt.engine.storage import Storage, ViewInfo

FIELDS = Node.__slots__


def test_node_fields_are_not_torch_tensor_names():
    # a user porting torch code must never meet an engine field where torch has an attribute
    torch = pytest.importorskip("torch")
    clash = sorted(set(FIELDS) & set(dir(torch.Tensor)))
    assert clash == [], f"Node fields that torch.Tensor also has: {clash}"


def test_each_field_is_documented_and_declared_once():
    for name in FIELDS:
        assert f"``{name}``" in Node.__doc__, name
    assert not set(FIELDS) & set(to.Tensor.__slots__)  # (a second slot would shadow Node's)
    assert issubclass(to.Tensor, Node) and issubclass(to.nn.Parameter, Node)


def test_concrete_tensor_parameter_and_graph_node_carry_the_fields():
    x = to.tensor([1.0, 2.0])
    assert (x.op, x.srcs, x.attrs) == ("input", (), ())
    assert isinstance(x.value, np.ndarray) and x.value is x.numpy()
    w = to.nn.Parameter(to.ones(2))
    assert w.op == "param" and w.value is w.detach().numpy()  # its storage, not a copy
    y = w * x
    assert y.op == "mul" and y.srcs == (w, x) and y.value is None
    assert y.node_id > w.node_id > x.node_id  # creation order
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0])
    assert y.value is not None  # realized and kept
    for t in (x, w, y):
        assert getattr(t, "view_info", None) is None and getattr(t, "prev_version", None) is None


def test_view_and_inplace_write_fields():
    base = to.tensor([[1.0, 2.0], [3.0, 4.0]])
    v = base[0]
    assert isinstance(v.view_info, ViewInfo) and v._base is base
    assert isinstance(v.shared_storage, Storage) and v.shared_storage is base.shared_storage
    before = base.node_id
    v.add_(1.0)  # a plain write into the memory: same node, stamped
    assert base.node_id == before and base.write_stamp > before

    x = to.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2.0
    old_id = y.node_id
    y.mul_(3.0)  # an autograd write: y becomes a new node, its old version is kept
    assert y.node_id > old_id and y.prev_version.node_id == old_id
    assert old_id < y.prev_version.superseded_at <= y.node_id  # (the write's stamp)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 6.0])
