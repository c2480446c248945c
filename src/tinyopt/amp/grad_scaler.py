"""``GradScaler``: dynamic loss scaling, as ``torch.amp.GradScaler``.

Gradients computed through float16 ops can underflow to zero; multiplying the loss by a large
scale ``S`` before ``backward()`` keeps them representable, and the optimizer steps with the
gradients divided by ``S`` again.  The scale adapts: a step whose gradients hold an inf or NaN
is skipped and ``S <- S * backoff_factor``; after ``growth_interval`` steps in a row without one,
``S <- S * growth_factor`` (Micikevicius et al. 2017, https://arxiv.org/abs/1710.03740)::

    scaler = to.amp.GradScaler("cpu")
    for x, y in loader:
        opt.zero_grad()
        with to.autocast("cpu", dtype=to.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)        # unscales, skips the step on inf/NaN
        scaler.update()

The finite check and the unscaling are one pass (``kernels/amp.py``) per flat gradient buffer
of a fused optimizer, one per parameter otherwise.  The arithmetic is torch's: the scale is a
float32, ``1/S`` is computed in float64 and rounded to float32, the gradients are multiplied by
it in their dtype, and the new scale is ``float32(S * factor)`` (growth only while finite).
"""

from __future__ import annotations

import warnings
from enum import Enum
from typing import Any

import numpy as np

from tinyopt.engine.tensor import Parameter
from tinyopt.kernels import amp as kernels
from tinyopt.optim.flat import CHUNK
from tinyopt.optim.fused import FusedOptimizer
from tinyopt.optim.optimizer import Optimizer

__all__ = ["GradScaler", "OptState"]

_ONE = np.ones(1, np.uint8)


class OptState(Enum):
    """Where an optimizer is in the scaler's step: READY (nothing done), UNSCALED (its gradients
    were unscaled by ``unscale_``), STEPPED (``step`` ran)."""
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _fresh() -> dict[str, Any]:
    return {"stage": OptState.READY, "found_inf": None}


class GradScaler:
    """Dynamic loss scaling (see the module docstring), with ``torch.amp.GradScaler``'s API.

    Args:
        device: ``"cpu"``.  ``"cuda"`` (torch's default) warns and disables the scaler, as torch
            does on a machine without CUDA.
        init_scale: the first scale.
        growth_factor: multiplies the scale after ``growth_interval`` steps without inf/NaN (> 1).
        backoff_factor: multiplies the scale after a step with inf/NaN (< 1).
        growth_interval: the number of such steps.
        enabled: False makes ``scale`` return its input, ``step`` call ``optimizer.step()`` and
            the other methods do nothing.
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        self._device = device
        self._enabled = enabled
        if device == "cuda":
            if enabled:
                warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  "
                              "Disabling.", stacklevel=2)
            self._enabled = False
        elif device != "cpu":
            raise RuntimeError(f"GradScaler: device type {device!r} is not supported (tinyopt "
                               f"runs on the CPU)")
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
        self._init_scale = init_scale
        self._scale: np.float32 | None = None  # made by the first scale()
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._init_growth_tracker = 0
        self._growth_tracker: int | None = None
        self._per_optimizer_states: dict[int, dict[str, Any]] = {}

    # ---- scaling --------------------------------------------------------------------------------
    def scale(self, outputs: Any) -> Any:
        """``outputs`` (a Tensor, or nested lists/tuples/iterables of them) times the scale."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._scale = np.float32(self._init_scale)
            self._growth_tracker = self._init_growth_tracker
        return self._apply(outputs)

    def _apply(self, val: Any) -> Any:
        from tinyopt.engine.tensor import Tensor

        if isinstance(val, Tensor):
            return val * float(self._scale)
        if isinstance(val, (list, tuple)):
            return type(val)(self._apply(v) for v in val)
        if hasattr(val, "__iter__"):
            return map(self._apply, val)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _check_scale_growth_tracker(self, funcname: str) -> None:
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  This may indicate "
                                 "your script did not use scaler.scale(loss or outputs) earlier "
                                 "in the iteration.")

    def _state(self, optimizer: Optimizer) -> dict[str, Any]:
        return self._per_optimizer_states.setdefault(id(optimizer), _fresh())

    # ---- unscaling ------------------------------------------------------------------------------
    def unscale_(self, optimizer: Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale in place and note whether any is inf or
        NaN; at most once per optimizer between two ``update()`` calls, before ``step``.
        Call it to clip or inspect the true gradients before ``step``."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        state = self._state(optimizer)
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = np.float32(1.0 / np.float64(self._scale))
        state["found_inf"] = float(_unscale_grads(optimizer, inv_scale) > 0)
        state["stage"] = OptState.UNSCALED

    def step(self, optimizer: Optimizer, *args: Any, **kwargs: Any) -> Any:
        """``unscale_(optimizer)`` (unless already called), then ``optimizer.step(*args,
        **kwargs)`` unless a gradient is inf or NaN; returns what ``step`` returned (None when
        skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        state = self._state(optimizer)
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        retval = None
        if not state["found_inf"]:
            retval = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale: float | Any | None = None) -> None:
        """Adapt the scale (see the module docstring), or set it to ``new_scale``; call it once per
        iteration, after ``step`` for every optimizer."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("update")
        if new_scale is not None:
            if isinstance(new_scale, float):
                self._scale = np.float32(new_scale)
            else:
                arr = np.asarray(new_scale)
                if arr.size != 1 or getattr(new_scale, "requires_grad", False):
                    raise AssertionError("new_scale should be a float or a 1-element "
                                         "torch.cuda.FloatTensor or torch.FloatTensor with "
                                         "requires_grad=False.")
                self._scale = np.float32(arr.reshape(()))
        else:
            found = [s["found_inf"] for s in self._per_optimizer_states.values()
                     if s["found_inf"] is not None]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            if sum(found):
                self._scale = np.float32(np.float64(self._scale) * self._backoff_factor)
                self._growth_tracker = 0
            else:
                successful = self._growth_tracker + 1
                if successful == self._growth_interval:
                    grown = np.float32(np.float64(self._scale) * self._growth_factor)
                    if np.isfinite(grown):  # the scale never grows past float32 to inf
                        self._scale = grown
                    self._growth_tracker = 0
                else:
                    self._growth_tracker = successful
        self._per_optimizer_states = {}

    # ---- accessors and state ------------------------------------------------------------------
    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return float(self._init_scale if self._scale is None else self._scale)

    def get_growth_factor(self) -> float:
        """The factor the scale is multiplied by after ``growth_interval`` steps without
        inf/NaN."""
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        """Set the growth factor (see :meth:`get_growth_factor`)."""
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        """The factor the scale is multiplied by after a step whose gradients held an inf
        or NaN."""
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        """Set the backoff factor (see :meth:`get_backoff_factor`)."""
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        """The number of consecutive finite steps after which the scale grows."""
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        """Set the growth interval (see :meth:`get_growth_interval`)."""
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else self._growth_tracker

    def is_enabled(self) -> bool:
        """Whether the scaler scales (False: every method passes values through unchanged)."""
        return self._enabled

    def state_dict(self) -> dict[str, Any]:
        """``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval`` and
        ``_growth_tracker`` (empty when disabled), as torch saves them; take it after
        ``update()``."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` (tinyopt's or torch's) returned."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        missing = [k for k in ("scale", "growth_factor", "backoff_factor", "growth_interval",
                               "_growth_tracker") if k not in state_dict]
        if missing:
            raise KeyError(missing[0])
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._scale = np.float32(self._init_scale)
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._growth_tracker is not None:
            self._growth_tracker = self._init_growth_tracker

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._enabled:
            if self._per_optimizer_states:
                raise AssertionError("A GradScaler instance may only be pickled at the beginning "
                                     "of an iteration, or at the end after scaler.update().")
            state["_init_scale"] = self.get_scale()
            state["_init_growth_tracker"] = self._get_growth_tracker()
            state["_scale"] = None
            state["_growth_tracker"] = None
        return state


def _unscale_grads(optimizer: Optimizer, inv_scale: np.float32) -> int:
    """Unscale every gradient of ``optimizer`` and count the non-finite elements: one kernel call
    per flat buffer of a fused optimizer (the gradients of its 16-bit parameters are float32 in
    those buffers), one per parameter otherwise."""
    found = 0
    done: set[int] = set()
    if isinstance(optimizer, FusedOptimizer):
        for buffers in optimizer._flat:
            for fb in buffers:
                if fb.stale:  # a parameter shared with another optimizer: take it back
                    fb.pack()
                found += kernels.unscale(fb.grad, fb.seg, fb.chunk_seg, CHUNK, fb.flags,
                                         fb.grad.dtype.type(inv_scale))
                done.update(id(p) for p in fb.params)
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not isinstance(p, Parameter):
                raise AssertionError(f"expected param to be a Parameter, got {type(p).__name__}")
            g = p._grad
            if g is None or id(p) in done:
                continue
            done.add(id(p))
            flat = g.reshape(-1)
            if not flat.flags.c_contiguous or flat.base is None and flat is not g:
                raise RuntimeError("GradScaler: a gradient is not contiguous")
            found += kernels.unscale(flat, np.array([0, flat.size], np.int64),
                                     np.zeros(1, np.int64), max(flat.size, 1), _ONE,
                                     flat.dtype.type(inv_scale))
    return found
