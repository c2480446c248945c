"""``Flatten`` and ``Unflatten``: reshape a contiguous range of dimensions, as ``torch.nn``."""

from __future__ import annotations

from tinyopt.engine.ops.movement import flatten, reshape
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.nn.module import Module


class Flatten(Module):
    """Merge dimensions ``start_dim..end_dim`` into one: (N, C, H, W) -> (N, C*H*W) by default."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input) -> Tensor:
        return flatten(as_tensor(input), self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dimension ``dim`` into ``unflattened_size``: the inverse of ``Flatten``."""

    def __init__(self, dim: int, unflattened_size: tuple[int, ...] | list[int]) -> None:
        super().__init__()
        if not isinstance(dim, int):
            raise TypeError(f"Unflatten: dim must be an int, got {type(dim).__name__}")
        if not isinstance(unflattened_size, (tuple, list)) or not all(
                isinstance(s, int) for s in unflattened_size):
            raise TypeError(f"Unflatten: unflattened_size must be a tuple of ints, got "
                            f"{unflattened_size!r}")
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input) -> Tensor:
        x = as_tensor(input)
        d = self.dim + x.ndim if self.dim < 0 else self.dim
        if not 0 <= d < x.ndim:
            raise IndexError(f"Unflatten: dim {self.dim} is out of range for an input of shape "
                             f"{x.shape}")
        return reshape(x, x.shape[:d] + self.unflattened_size + x.shape[d + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
