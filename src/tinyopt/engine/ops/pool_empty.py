"""An adaptive pooling to an output size with a 0 in it: torch's forward gives an empty tensor,
and its backward refuses the empty gradient (``adaptive_{avg,max}_pool{2,3}d_backward(): Expected
grad_output to have non-zero size for non-batch dimensions, ...``); so do these.  The 1-d
poolings are the 2-d ones over a height of 1, as torch's, so their errors name the 2-d op and
the 2-d gradient's sizes as torch's do."""

from __future__ import annotations

import numpy as np

from tinyopt.engine.op import defop, node
from tinyopt.engine.tensor import Tensor

__all__ = ["checked_sizes", "empty_pool"]


def checked_sizes(op: str, sizes: tuple[int, ...], shape: tuple[int, ...]) -> None:
    """Refuse a negative output size with the error torch's ``op`` gives (the max poolings'
    comes from making their output, the average poolings' from their own check)."""
    if min(sizes) >= 0:
        return
    if "max" in op:
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(sizes)}: "
                           f"{list(shape)}")
    # (torch's own formatting: "{-1, 2}" for two sizes, "{-1, 2,2}" for three)
    listed = ", ".join(map(str, sizes[:2])) + "".join(f",{s}" for s in sizes[2:])
    raise RuntimeError(f"{op}: elements of output_size must be greater than or equal to 0 but "
                       f"received {{{listed}}}")


def empty_pool(op: str, x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """The (empty) result of ``op`` on ``x`` with output ``shape``; its gradient raises."""
    return node("pool_empty", (x,), shape, x.dtype, (op,))


def _refuse_gradient(t: Tensor, g: Tensor):
    empty = next(i for i in range(1, len(t.shape)) if t.shape[i] == 0)
    raise RuntimeError(f"{t.attrs[0]}_backward(): Expected grad_output to have non-zero size for "
                       f"non-batch dimensions, but grad_output has sizes {list(t.shape)} with "
                       f"dimension {empty} being empty")


def _nothing_to_write(out: np.ndarray, x: np.ndarray) -> None:
    pass


defop("pool_empty", forward=lambda t: _nothing_to_write, backward=_refuse_gradient)
