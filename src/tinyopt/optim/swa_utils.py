r"""Stochastic weight averaging and EMA of weights, as ``torch.optim.swa_utils``.

Keep a running average of a model's weights beside training, and use the average to evaluate::

    from tinyopt.optim.swa_utils import AveragedModel, SWALR, get_ema_multi_avg_fn, update_bn

    swa_model = AveragedModel(model)                     # equal weights (SWA)
    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    swa_scheduler = SWALR(opt, swa_lr=0.05, anneal_epochs=5)
    for epoch in range(100):
        train_one_epoch(model, opt)
        ema_model.update_parameters(model)
        if epoch >= 75:
            swa_model.update_parameters(model)
            swa_scheduler.step()
    update_bn(loader, swa_model)                          # BatchNorm statistics of the average

SWA (Izmailov et al. 2018, https://arxiv.org/abs/1803.05407) averages with equal weights,
:math:`W^{\text{SWA}}_{n+1} = W^{\text{SWA}}_n + (W - W^{\text{SWA}}_n) / (n + 1)`; EMA
(Polyak averaging with exponential weights) keeps
:math:`W^{\text{EMA}}_{t+1} = \text{decay}\, W^{\text{EMA}}_t + (1 - \text{decay})\, W_{t+1}`.

An :class:`AveragedModel` keeps its weights in flat buffers (one per dtype, parameters and
buffers apart), so the built-in averages (the default, :func:`get_swa_multi_avg_fn`,
:func:`get_ema_multi_avg_fn`) update a whole model in one fused kernel call
(``kernels/averaging.py``), reading the model's weights in place when they lie end to end (as
``tinyopt.nn``'s layers allocate them, ``engine/arena.py``) and through one gathering copy
otherwise.  The values are PyTorch's bit for bit, floating point and integer
buffers alike.  A custom ``avg_fn`` (per tensor) or ``multi_avg_fn`` (per list) gets tinyopt
Tensors sharing the weights' storage, as PyTorch passes tensors.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Callable, Iterable
from typing import Any, Literal

import numpy as np

from tinyopt.engine.device import check_device
from tinyopt.engine.grad_mode import no_grad
from tinyopt.engine.tensor import Parameter, Tensor, leaf
from tinyopt.kernels import averaging as kernels
from tinyopt.nn.layers.normalization import is_batch_norm
from tinyopt.nn.module import Module
from tinyopt.optim.flat import end_to_end, staggered_zeros
from tinyopt.optim.lr_scheduler.base import LRScheduler, per_group
from tinyopt.optim.optimizer import Optimizer

__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn", "get_swa_multi_avg_fn",
           "get_ema_avg_fn", "get_swa_avg_fn"]

_INT_ADDCDIV = (
    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will "
    "perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
    "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer "
    "inputs and as (input + value * tensor1 / tensor2) for float inputs. The future addcdiv "
    "behavior is just the latter implementation: (input + value * tensor1 / tensor2), for all "
    "dtypes.")


# ---- the averaging functions ------------------------------------------------------------------
def _storage(t: Any) -> np.ndarray:
    """The array holding ``t``'s values (shared, written in place)."""
    if isinstance(t, Parameter):
        return t.value
    if isinstance(t, Tensor):
        return t.numpy()
    if isinstance(t, np.ndarray):
        return t
    raise TypeError(f"expected Tensors, got {type(t).__name__}")


def _count(n: Any) -> tuple[int, bool]:
    """``(number of models averaged, whether it came as a tensor)``."""
    if isinstance(n, (Tensor, np.ndarray, np.generic)):
        return int(np.asarray(n.numpy() if isinstance(n, Tensor) else n)), True
    if isinstance(n, numbers.Integral):
        return int(n), False
    raise TypeError(f"num_averaged must be an int or a Tensor, got {type(n).__name__}")


def _f32_like_torch(x: np.ndarray) -> np.ndarray:
    """An integer array as the float32 PyTorch computes with when it meets a float scalar."""
    return x.astype(np.float32)


class _MultiAverage:
    """An in-place average over lists of tensors (``multi_avg_fn``), fused over flat buffers."""

    def __call__(self, averaged: list[Any], current: list[Any], num_averaged: Any) -> None:
        if len(averaged) != len(current):
            raise ValueError(f"expected as many current tensors as averaged ones, got "
                             f"{len(current)} and {len(averaged)}")
        if not averaged:
            return
        floating = _storage(averaged[0]).dtype.kind == "f"
        for a_t, b_t in zip(averaged, current):
            a, b = _storage(a_t), _storage(b_t)
            if a.shape != b.shape:
                raise RuntimeError(f"The size of tensor a ({a.shape}) must match the size of "
                                   f"tensor b ({b.shape})")
            if floating:
                flat = a.reshape(-1)
                if not np.shares_memory(flat, a):  # not contiguous: average a copy, write back
                    flat = a.flatten()
                    self._flat(flat, np.ascontiguousarray(b, dtype=a.dtype).reshape(-1),
                               num_averaged)
                    a[...] = flat.reshape(a.shape)
                else:
                    self._flat(flat, np.ascontiguousarray(b, dtype=a.dtype).reshape(-1),
                               num_averaged)
            else:
                self._integer(a, b, num_averaged)

    def _flat(self, a: np.ndarray, b: np.ndarray, num_averaged: Any) -> None:
        """Average the 1-d float arrays: ``a`` in place."""
        raise NotImplementedError

    def _integer(self, a: np.ndarray, b: np.ndarray, num_averaged: Any) -> None:
        """Average integer arrays (buffers such as ``num_batches_tracked``) as PyTorch does."""
        raise NotImplementedError


def _lerp(a: np.ndarray, b: np.ndarray, w: float) -> None:
    dt = a.dtype.type
    wd = dt(w)
    kernels.lerp_(a, b, wd, dt(wd - dt(1)))


class _EMA(_MultiAverage):
    def __init__(self, decay: float) -> None:
        self.decay = decay

    def _flat(self, a, b, num_averaged) -> None:
        _lerp(a, b, 1 - self.decay)  # torch: _foreach_lerp_(ema, model, 1 - decay)

    def _integer(self, a, b, num_averaged) -> None:
        d = np.float32(self.decay)
        a[...] = _f32_like_torch(a) * d + _f32_like_torch(b) * np.float32(1 - self.decay)

    def __repr__(self) -> str:
        return f"get_ema_multi_avg_fn(decay={self.decay})"


class _SWA(_MultiAverage):
    def _flat(self, a, b, num_averaged) -> None:
        n, is_tensor = _count(num_averaged)
        # torch: lerp with weight 1 / (n + 1), a float32 tensor when num_averaged is one
        w = float(np.float32(1) / np.float32(n + 1)) if is_tensor else 1 / (n + 1)
        _lerp(a, b, w)

    def _integer(self, a, b, num_averaged) -> None:
        n, is_tensor = _count(num_averaged)
        if is_tensor:
            raise RuntimeError(_INT_ADDCDIV)
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating "
                           "point number.")

    def __repr__(self) -> str:
        return "get_swa_multi_avg_fn()"


def get_ema_multi_avg_fn(decay: float = 0.999) -> Callable[[list, list, Any], None]:
    r"""The exponential moving average over lists of tensors, in place (``multi_avg_fn``):
    :math:`W^{\text{EMA}} \leftarrow \text{decay}\, W^{\text{EMA}} + (1 - \text{decay})\, W`,
    computed as PyTorch's ``lerp(W_ema, W, 1 - decay)``.  ``decay`` in [0, 1]."""
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] "
                         "range.")
    return _EMA(decay)


def get_swa_multi_avg_fn() -> Callable[[list, list, Any], None]:
    r"""The equal-weight average over lists of tensors, in place (``multi_avg_fn``):
    :math:`W^{\text{SWA}} \leftarrow \operatorname{lerp}(W^{\text{SWA}}, W, 1 / (n + 1))`."""
    return _SWA()


def get_ema_avg_fn(decay: float = 0.999) -> Callable[[Tensor, Tensor, Any], Tensor]:
    r"""The exponential moving average of one tensor (``avg_fn``):
    ``decay * ema_param + (1 - decay) * current_param``.  ``decay`` in [0, 1]."""
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] "
                         "range.")

    def ema_update(ema_param: Tensor, current_param: Tensor, num_averaged: Any) -> Tensor:
        with no_grad():
            return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn() -> Callable[[Tensor, Tensor, Any], Tensor]:
    r"""The equal-weight average of one tensor (``avg_fn``):
    ``averaged_param + (current_param - averaged_param) / (num_averaged + 1)``."""

    def swa_update(averaged_param: Tensor, current_param: Tensor, num_averaged: Any) -> Tensor:
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


class _Mean(_MultiAverage):
    """PyTorch's default on the CPU: ``get_swa_avg_fn`` applied tensor by tensor."""

    def _flat(self, a, b, num_averaged) -> None:
        n, _ = _count(num_averaged)
        kernels.running_mean_(a, b, a.dtype.type(n + 1))

    def _integer(self, a, b, num_averaged) -> None:
        n, _ = _count(num_averaged)
        diff = (b - a).astype(np.float32) / np.float32(n + 1)
        a[...] = (_f32_like_torch(a) + diff).astype(a.dtype)


# ---- flat storage -----------------------------------------------------------------------------
class _Flat:
    """One group of arrays (one dtype) seen as one flat 1-d array: a view when they lie end to
    end (found once per set of arrays), else a staging copy (gathered before and scattered
    after the kernel)."""

    def __init__(self) -> None:
        self._arrays: tuple[np.ndarray, ...] = ()
        self._view: np.ndarray | None = None
        self._staging: np.ndarray | None = None

    def get(self, arrays: list[np.ndarray], dtype: np.dtype) -> tuple[np.ndarray, bool]:
        """``(flat, staged)``: the flat array holding ``arrays``' values in ``dtype``."""
        if len(arrays) != len(self._arrays) or any(a is not b for a, b in zip(arrays,
                                                                              self._arrays)):
            self._arrays = tuple(arrays)
            view = end_to_end(arrays)
            self._view = view if view is not None and view.dtype == dtype else None
        if self._view is not None:
            return self._view, False
        n = sum(a.size for a in arrays)
        if self._staging is None or self._staging.size != n or self._staging.dtype != dtype:
            self._staging = np.empty(n, dtype=dtype)
        if arrays:
            np.concatenate([a.reshape(-1) for a in arrays], out=self._staging, casting="unsafe")
        return self._staging, True

    def scatter(self, flat: np.ndarray, arrays: list[np.ndarray]) -> None:
        i = 0
        for a in arrays:
            np.copyto(a, flat[i:i + a.size].reshape(a.shape), casting="unsafe")
            i += a.size

    def __deepcopy__(self, memo: dict) -> _Flat:
        return _Flat()  # a copy's arrays are new: found again on first use


# ---- AveragedModel ----------------------------------------------------------------------------
class AveragedModel(Module):
    r"""A copy of ``model`` whose weights are a running average of ``model``'s
    (``torch.optim.swa_utils.AveragedModel``).

    Args:
        model: the model to average (deep-copied).
        device: ``None`` or ``"cpu"``.
        avg_fn: ``avg_fn(averaged, current, num_averaged) -> Tensor``, applied tensor by tensor;
            default: the equal-weight average.
        multi_avg_fn: ``multi_avg_fn(averaged_list, current_list, num_averaged)`` updating the
            averaged tensors in place (one list per dtype, as PyTorch groups them);
            :func:`get_ema_multi_avg_fn` and :func:`get_swa_multi_avg_fn` run fused.
        use_buffers: average the buffers too (BatchNorm statistics); otherwise they are copied
            from ``model`` at every update.

    ``update_parameters(model)`` copies ``model``'s weights on the first call (``n_averaged``
    is 0) and averages them in afterwards.  ``state_dict()`` holds ``n_averaged`` (0-d int64)
    and the copy's weights as ``module.*``, as PyTorch's; ``avg_fn``/``multi_avg_fn`` are not
    saved.
    """

    n_averaged: np.ndarray

    def __init__(self, model: Module, device: Any = None,
                 avg_fn: Callable[[Tensor, Tensor, Any], Tensor] | None = None,
                 multi_avg_fn: Callable[[list, list, Any], None] | None = None,
                 use_buffers: bool = False) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        check_device(device)
        if not isinstance(model, Module):
            raise TypeError(f"AveragedModel expects a Module, got {type(model).__name__}")
        self.module = copy.deepcopy(model)
        self.register_buffer("n_averaged", np.zeros((), dtype=np.int64))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers
        self.__dict__["_flats"] = {}
        self._pack()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    # ---- storage --------------------------------------------------------------------------------
    @staticmethod
    def _targets(model: Module) -> tuple[list[Parameter], list[tuple[Module, str]]]:
        """``model.parameters()``, and ``model.buffers()`` as (module, name) pairs."""
        buffers, seen = [], set()
        for m in model.modules():
            for name, b in m._buffers.items():
                if b is not None and id(b) not in seen:
                    seen.add(id(b))
                    buffers.append((m, name))
        return list(model.parameters()), buffers

    def _pack(self) -> None:
        """Lay the copy's floating-point weights end to end, one buffer per dtype for the
        parameters and one for the buffers (the arrays are replaced by views)."""
        params, buffers = self._targets(self.module)
        for kind, items in (("p", params), ("b", buffers)):
            by_dtype: dict[np.dtype, list] = {}
            for item in items:
                arr = item.value if kind == "p" else item[0]._buffers[item[1]].numpy()
                if arr.dtype.kind == "f" and not (kind == "p" and item.slot is not None):
                    by_dtype.setdefault(arr.dtype, []).append((item, arr))
            for slot, (dtype, members) in enumerate(by_dtype.items()):
                flat = staggered_zeros(sum(a.size for _, a in members), dtype, slot)
                i = 0
                for item, arr in members:
                    view = flat[i:i + arr.size].reshape(arr.shape)
                    view[...] = arr
                    if kind == "p":
                        with no_grad():
                            item.set_(leaf(view))
                    else:
                        item[0]._buffers[item[1]] = leaf(view)  # buffers are Tensors
                    i += arr.size

    # ---- averaging ------------------------------------------------------------------------------
    def update_parameters(self, model: Module) -> None:
        """Average ``model``'s current weights into this one (copy them on the first call)."""
        own_p, own_b = self._targets(self.module)
        src_p, src_b = self._targets(model)
        own = [p.value for p in own_p]
        src = [p.value for p in src_p]
        if self.use_buffers:
            own += [m._buffers[n].numpy() for m, n in own_b]
            src += [m._buffers[n].numpy() for m, n in src_b]
        _check_pairs(own, src, "parameters and buffers" if self.use_buffers else "parameters")
        n = int(self.n_averaged)
        if n == 0:
            for a, b in zip(own, src):
                np.copyto(a, b, casting="unsafe")
        elif self.avg_fn is not None:
            count = leaf(np.array(n, dtype=np.int64))
            own_t = [p.detach() for p in own_p] + [leaf(a) for a in own[len(own_p):]]
            src_t = [p.detach() for p in src_p] + [leaf(b) for b in src[len(src_p):]]
            for a, a_t, b_t in zip(own, own_t, src_t):
                np.copyto(a, np.asarray(_storage(self.avg_fn(a_t, b_t, count))),
                          casting="unsafe")
        elif self.multi_avg_fn is not None and not isinstance(self.multi_avg_fn, _MultiAverage):
            count = leaf(np.array(n, dtype=np.int64))
            own_t = [p.detach() for p in own_p] + [leaf(a) for a in own[len(own_p):]]
            src_t = [p.detach() for p in src_p] + [leaf(b) for b in src[len(src_p):]]
            groups: dict[np.dtype, tuple[list, list]] = {}
            for a, a_t, b_t in zip(own, own_t, src_t):
                g = groups.setdefault(a.dtype, ([], []))
                g[0].append(a_t)
                g[1].append(b_t)
            for a_list, b_list in groups.values():
                self.multi_avg_fn(a_list, b_list, count)
        else:
            self._average(self.multi_avg_fn or _Mean(), own_p, src_p, own_b, src_b,
                          leaf(np.array(n, dtype=np.int64)))
        if not self.use_buffers:  # keep the buffers in sync with the model
            own_bufs = [m._buffers[n].numpy() for m, n in own_b]
            src_bufs = [m._buffers[n].numpy() for m, n in src_b]
            _check_pairs(own_bufs, src_bufs, "buffers")
            for a, b in zip(own_bufs, src_bufs):
                np.copyto(a, b, casting="unsafe")
        self.n_averaged += 1

    def _average(self, fn: _MultiAverage, own_p, src_p, own_b, src_b, count,
                 may_repack: bool = True) -> None:
        """A built-in average: one fused kernel call per dtype of parameters (and of buffers)."""
        kinds = [("p", [p.value for p in own_p], [p.value for p in src_p])]
        if self.use_buffers:
            kinds.append(("b", [m._buffers[n].numpy() for m, n in own_b],
                          [m._buffers[n].numpy() for m, n in src_b]))
        work = []
        for kind, own, src in kinds:
            by_dtype: dict[np.dtype, tuple[list, list]] = {}
            for a, b in zip(own, src):
                g = by_dtype.setdefault(a.dtype, ([], []))
                g[0].append(a)
                g[1].append(b)
            for dtype, (a_list, b_list) in by_dtype.items():
                if dtype.kind != "f":
                    work.append((None, None, a_list, b_list))
                    continue
                fa = self._flats.setdefault((kind, dtype, "own"), _Flat())
                fb = self._flats.setdefault((kind, dtype, "src"), _Flat())
                flat_a, staged_a = fa.get(a_list, dtype)
                if staged_a and may_repack and _packable(own_p):
                    # the copy's storage was replaced (deepcopy, .to(dtype)...): lay it out
                    # end to end again, then average over the views
                    self._pack()
                    self._average(fn, own_p, src_p, own_b, src_b, count, may_repack=False)
                    return
                work.append((fa, (flat_a, staged_a), a_list, fb.get(b_list, dtype)[0]))
        for fa, flat, a_list, b in work:
            if fa is None:
                for a_i, b_i in zip(a_list, b):
                    fn._integer(a_i, b_i, count)
                continue
            fn._flat(flat[0], b, count)
            if flat[1]:
                fa.scatter(flat[0], a_list)


def _packable(params: list[Parameter]) -> bool:
    """Whether the copy's parameters may be moved into new storage (no optimizer holds them)."""
    return all(p.slot is None for p in params)


def _check_pairs(own: list[np.ndarray], src: list[np.ndarray], what: str) -> None:
    if len(own) != len(src):
        raise ValueError(f"AveragedModel.update_parameters: the model has {len(src)} {what}, the "
                         f"averaged model {len(own)}")
    for i, (a, b) in enumerate(zip(own, src)):
        if a.shape != b.shape:
            raise ValueError(f"AveragedModel.update_parameters: {what} {i} has shape {b.shape} in "
                             f"the model and {a.shape} in the averaged model")


# ---- update_bn ----------------------------------------------------------------------------------
def _realize(out: Any) -> None:
    if isinstance(out, Tensor):
        out.numpy()
    elif isinstance(out, (list, tuple)):
        for o in out:
            _realize(o)
    elif isinstance(out, dict):
        for o in out.values():
            _realize(o)


def update_bn(loader: Iterable[Any], model: Module, device: Any = None) -> None:
    """Recompute the running statistics of every BatchNorm layer of ``model`` with one pass over
    ``loader`` (``torch.optim.swa_utils.update_bn``).

    Each batch is a tensor (or array), or a list/tuple whose first element is; ``model`` is
    called on it in training mode with the layers' momentum set to None (a cumulative average
    over the batches), under ``no_grad``.  Momentum and the training mode are restored after.
    """
    check_device(device)
    momenta = {}
    for module in model.modules():
        if is_batch_norm(module):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    try:
        with no_grad():
            for batch in loader:
                if isinstance(batch, (list, tuple)):
                    batch = batch[0]
                _realize(model(batch))
    finally:
        for module, momentum in momenta.items():
            module.momentum = momentum
        model.train(was_training)


# ---- SWALR ----------------------------------------------------------------------------------------
class SWALR(LRScheduler):
    r"""Anneal each group's lr to a fixed ``swa_lr`` (``torch.optim.swa_utils.SWALR``).

    Args:
        optimizer: the optimizer.
        swa_lr: the final lr, for all groups or one per group (written as ``group["swa_lr"]``).
        anneal_epochs: steps of the annealing phase (an int >= 0).
        anneal_strategy: ``"cos"`` (:math:`\alpha(t) = (1 - \cos \pi t) / 2`) or ``"linear"``
            (:math:`\alpha(t) = t`), with :math:`t = \min(1, \text{step} / \text{anneal\_epochs})`.
        last_epoch: the index of the last epoch.

    Each step moves the lr along :math:`\eta = \alpha\, \eta_{\text{swa}} + (1 - \alpha)\,
    \eta_0`, where :math:`\eta_0` is recovered from the current lr and the previous step's
    :math:`\alpha` (PyTorch's chainable form), then stays at ``swa_lr``.
    """

    def __init__(self, optimizer: Optimizer, swa_lr: float | list[float], anneal_epochs: int = 10,
                 anneal_strategy: Literal["cos", "linear"] = "cos", last_epoch: int = -1) -> None:
        swa_lrs = per_group("swa_lr", optimizer, swa_lr)
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        for lr, group in zip(swa_lrs, optimizer.param_groups):
            group["swa_lr"] = lr
        self._anneal_strategy = anneal_strategy
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t: float) -> float:
        return t

    @staticmethod
    def _cosine_anneal(t: float) -> float:
        return (1 - math.cos(math.pi * t)) / 2

    @property
    def anneal_func(self) -> Callable[[float], float]:
        """The annealing function of ``anneal_strategy``."""
        return self._cosine_anneal if self._anneal_strategy == "cos" else self._linear_anneal

    def _set_anneal_func(self, anneal_strategy: Literal["cos", "linear"]) -> None:
        self._anneal_strategy = anneal_strategy

    @staticmethod
    def _get_initial_lr(lr: float, swa_lr: float, alpha: float) -> float:
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def _lr(self) -> list[float]:
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        groups = self.optimizer.param_groups
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(groups, prev_lrs)]

    def _check_values(self, state: dict[str, Any]) -> None:
        if state.get("_anneal_strategy") not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{state.get('_anneal_strategy')}")
        epochs = state.get("anneal_epochs")
        if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {epochs}")
