"""Normalization layers, as ``torch.nn``: ``LayerNorm``, ``BatchNorm1d``, ``BatchNorm2d``,
``GroupNorm``, ``InstanceNorm1d``, ``InstanceNorm2d``.

LayerNorm (Ba et al. 2016, https://arxiv.org/abs/1607.06450) normalizes each sample over its last
``len(normalized_shape)`` dimensions: ``y = (x - E[x]) / sqrt(Var[x] + eps) * gamma + beta``.

BatchNorm (Ioffe & Szegedy 2015, https://arxiv.org/abs/1502.03167) normalizes each channel over
the batch (and spatial) dimensions.  In training mode it uses the batch statistics and updates the
running ones, ``running = (1 - momentum) running + momentum batch`` (unbiased batch variance for
``running_var``; with ``momentum=None`` a cumulative average, factor ``1 / num_batches_tracked``);
in eval mode it uses the running statistics.  ``running_mean``, ``running_var`` and
``num_batches_tracked`` are buffers, so they are in ``state_dict()``.  The running statistics are
written when the graph is realized (``backward()``, ``numpy()``...); ``num_batches_tracked`` counts
forward calls, as in PyTorch.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from tinyopt.engine.tensor import Parameter, Tensor, as_tensor
from tinyopt.nn import functional as F
from tinyopt.nn import init, kernels_ahead
from tinyopt.nn.layers._factory import param_dtype
from tinyopt.nn.module import Module


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dimensions, then scale by ``weight``
    (ones) and shift by ``bias`` (zeros) when ``elementwise_affine``."""

    def __init__(self, normalized_shape: int | list[int] | tuple[int, ...], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(np.empty(self.normalized_shape, dtype=dt))
            if bias:
                self.bias = Parameter(np.empty(self.normalized_shape, dtype=dt))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()
        kernels_ahead.at_build(self, kernels_ahead.layer_norm, dt, self.weight is not None,
                               self.bias is not None)

    def reset_parameters(self) -> None:
        """Set ``weight`` to ones and ``bias`` to zeros (with ``elementwise_affine``)."""
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input) -> Tensor:
        kernels_ahead.called(self)
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class RMSNorm(Module):
    """Root mean square layer normalization (Zhang & Sennrich 2019,
    https://arxiv.org/abs/1910.07467): y = x / sqrt(mean(x^2) + eps) * weight over the trailing
    ``normalized_shape`` dimensions; ``eps`` None is the dtype's machine epsilon."""

    def __init__(self, normalized_shape: int | list[int] | tuple[int, ...],
                 eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(np.empty(self.normalized_shape, dtype=dt))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``weight`` to ones."""
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, x) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class _BatchNorm(Module):
    _version = 2
    _input_dims: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device=None,
                 dtype=None, *, bias: bool = True) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(np.empty((num_features,), dtype=dt))
            if bias:
                self.bias = Parameter(np.empty((num_features,), dtype=dt))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", np.zeros((num_features,), dtype=dt))
            self.register_buffer("running_var", np.ones((num_features,), dtype=dt))
            self.register_buffer("num_batches_tracked", np.zeros((), dtype=np.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def _check_input_dim(self, x: Tensor) -> None:
        if x.ndim not in self._input_dims:
            want = " or ".join(f"{d}D" for d in self._input_dims)
            raise ValueError(f"expected {want} input (got {x.ndim}D input)")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}: expected {self.num_features} channels "
                             f"(dimension 1), got input of shape {x.shape}")

    def forward(self, input) -> Tensor:
        x = as_tensor(input)
        self._check_input_dim(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or (self.running_mean is None
                                            and self.running_var is None)
        track = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if track else None,
                            self.running_var if track else None, self.weight, self.bias,
                            use_batch_stats, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


def is_batch_norm(module: Module) -> bool:
    """Whether ``module`` is a batch norm layer (its running statistics estimate the data's, as
    ``tinyopt.optim.swa_utils.update_bn`` recomputes them); an instance norm is not, as in
    PyTorch, although tinyopt derives it from the batch norm class."""
    return isinstance(module, _BatchNorm) and not isinstance(module, _InstanceNorm)


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) inputs, per channel C."""

    _input_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) inputs, per channel C."""

    _input_dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalization of (N, C, D, H, W) inputs, per channel C."""

    _input_dims = (5,)


class GroupNorm(Module):
    """Group normalization (Wu & He 2018, https://arxiv.org/abs/1803.08494): the channels of each
    sample split into ``num_groups`` groups, each normalized over its channels and positions, then
    scaled by ``weight`` (ones) and shifted by ``bias`` (zeros) per channel when ``affine``."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None, *, bias: bool = True) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        if num_channels % num_groups != 0:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = Parameter(np.empty((num_channels,), dtype=dt))
            if bias:
                self.bias = Parameter(np.empty((num_channels,), dtype=dt))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set ``weight`` to ones and ``bias`` to zeros (with ``affine``)."""
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class _InstanceNorm(_BatchNorm):
    """Instance normalization (Ulyanov et al. 2016, https://arxiv.org/abs/1607.08022): each
    sample's channels normalized over their positions; ``affine`` and ``track_running_stats``
    are off by default (with them, the parameters and buffers of batch norm)."""

    _no_batch_dim = 2

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device=None,
                 dtype=None, *, bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype,
                         bias=bias)

    def _check_input_dim(self, x: Tensor) -> None:
        if x.ndim not in self._input_dims:
            want = " or ".join(f"{d}D" for d in self._input_dims)
            raise ValueError(f"expected {want} input (got {x.ndim}D input)")

    def forward(self, input) -> Tensor:
        x = as_tensor(input)
        self._check_input_dim(x)
        feature_dim = x.ndim - self._no_batch_dim
        if x.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match "
                                 f"num_features ({self.num_features}), but got: "
                                 f"{x.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. You "
                          f"can silence this warning by not passing in num_features, which is not "
                          f"used because affine=False", stacklevel=2)
        unbatched = x.ndim == self._no_batch_dim
        if unbatched:
            x = x.unsqueeze(0)
        y = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats,
                            self.momentum if self.momentum is not None else 0.0, self.eps)
        return y.squeeze(0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of (N, C, L) or (C, L) inputs."""

    _input_dims = (2, 3)
    _no_batch_dim = 2


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization of (N, C, H, W) or (C, H, W) inputs."""

    _input_dims = (3, 4)
    _no_batch_dim = 3
