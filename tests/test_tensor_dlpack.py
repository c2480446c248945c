"""Zero-copy exchange (Tensor.__dlpack__, tinyopt.from_dlpack): numpy arrays and torch CPU
tensors in and out, sharing memory both ways (issue 25, point 6)."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to


def test_numpy_in_and_out_share_memory():
    a = np.arange(6.).reshape(2, 3)
    t = to.from_dlpack(a)
    t[0].add_(10)
    assert a[0].tolist() == [10., 11., 12.]
    back = np.from_dlpack(t.t())  # a view goes out with its strides
    a[1, 2] = -1
    assert back[2, 1] == -1 and back.shape == (3, 2)


def test_a_graph_node_is_computed_and_a_tensor_that_requires_grad_is_refused():
    x = to.tensor([1., 2.], requires_grad=True)
    with pytest.raises(BufferError, match="Can't export tensors that require gradient, use "
                                          "tensor.detach()"):
        x.__dlpack__()
    assert np.from_dlpack((x * 2).detach()).tolist() == [2., 4.]
    assert x.__dlpack_device__() == (1, 0)


def test_torch_tensors_in_and_out_share_memory():
    torch = pytest.importorskip("torch")
    t = to.tensor([1., 2., 3.])
    for shared in (torch.from_dlpack(t), torch.as_tensor(t)):
        shared[0] = 9.0
        assert t[0].item() == 9.0
        t[1] = 7.0
        assert shared[1].item() == 7.0
    src = torch.arange(4.0)
    x = to.from_dlpack(src)
    x.add_(1)
    assert src.tolist() == [1., 2., 3., 4.]
    src[0] = -5
    assert x[0].item() == -5
    capsule = to.from_dlpack(torch.utils.dlpack.to_dlpack(src))  # (legacy: read-only)
    assert capsule.tolist() == src.tolist()


def test_torch_tensor_and_as_tensor_of_a_tinyopt_tensor():
    torch = pytest.importorskip("torch")
    for value in (3.0, [1, 2], [[1.5, 2.5]]):
        t = to.tensor(value)
        assert torch.tensor(t).tolist() == torch.as_tensor(t).tolist() == t.tolist()
    c = torch.tensor(to.tensor([1., 2.]))  # torch.tensor copies
    assert c.dtype == torch.float32 and c.tolist() == [1., 2.]
