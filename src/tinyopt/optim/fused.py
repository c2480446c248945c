"""``FusedOptimizer``: the base of tinyopt's optimizers, one kernel call per group and dtype.

A subclass is data plus one kernel call:

- ``_validate(group)``: PyTorch's checks and messages for the hyperparameters;
- ``_state_names(group)``: the state buffers it keeps (e.g. ``("exp_avg", "exp_avg_sq")``);
- ``_run(group, fb)``: fill ``fb.hp`` with the group's scalars and call its kernel on the
  :class:`~tinyopt.optim.flat.FlatBuffer` ``fb``.

This class packs each group into flat buffers (``Parameter.data``, ``.grad`` and every
``state[p][name]`` become views), keeps ``state`` PyTorch-shaped (an entry appears when a
parameter first steps, with ``step`` a 0-d float32 view), and loads state dicts into the buffers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyopt.engine.tensor import Parameter
from tinyopt.optim.flat import FlatBuffer
from tinyopt.optim.optimizer import Optimizer


class FusedOptimizer(Optimizer):
    """Base class of the fused optimizers (see the module docstring)."""

    _has_step = True      # whether state[p] carries "step" (SGD's does not)
    _eager_state = False  # whether state exists from construction (Adagrad)

    def __init__(self, params: Iterable, defaults: dict[str, Any]) -> None:
        self._validate(defaults)
        self._flat: list[list[FlatBuffer]] = []
        self._where: dict[int, tuple[FlatBuffer, int]] = {}
        super().__init__(params, defaults)

    # ---- what a subclass provides ---------------------------------------------------------------
    def _validate(self, group: dict[str, Any]) -> None:
        """Raise ValueError (PyTorch's message) for an invalid hyperparameter of ``group``."""

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        """Names of the state buffers this optimizer keeps for ``group``'s options."""
        return ()

    def _state_init(self, group: dict[str, Any]) -> dict[str, float]:
        """Initial value of each state buffer (0 unless listed)."""
        return {}

    def _run(self, group: dict[str, Any], fb: FlatBuffer) -> None:
        """Update ``fb`` with one kernel call."""
        raise NotImplementedError

    # ---- groups ---------------------------------------------------------------------------------
    def _check_group(self, group: dict[str, Any]) -> None:
        for key in ("capturable", "differentiable"):
            if group.get(key, False):
                raise ValueError(f"{type(self).__name__}: {key}=True is not supported (tinyopt has no "
                                 f"CUDA graphs and optimizers do not build graphs)")
        for p in group["params"]:
            if np.dtype(p.dtype).kind != "f":
                raise TypeError(f"{type(self).__name__} can only optimize floating point "
                                f"parameters, but one has dtype {p.dtype}")
        self._validate(group)

    def _add_group(self, group: dict[str, Any]) -> None:
        super()._add_group(group)
        by_dtype: dict[np.dtype, list[Parameter]] = {}
        seen: set[int] = set()
        for p in group["params"]:
            if id(p) not in seen:  # a duplicate (warned about) is packed and updated once
                seen.add(id(p))
                by_dtype.setdefault(np.dtype(p.dtype), []).append(p)
        buffers = [FlatBuffer(ps, dt) for dt, ps in by_dtype.items()]
        self._flat.append(buffers)
        names = self._state_names(group)
        init = self._state_init(group)
        for fb in buffers:
            for j, p in enumerate(fb.params):
                self._where[id(p)] = (fb, j)
            if self._eager_state:
                fb.ensure(names, init)
                self._start(fb, np.arange(len(fb.params)))

    def _start(self, fb: FlatBuffer, idx: Iterable[int]) -> None:
        """Create the ``state`` entries (views) of ``fb``'s parameters ``idx``."""
        for j in idx:
            p = fb.params[j]
            entry = self.state[p]
            if self._has_step:
                entry["step"] = fb.steps[j, ...]
            for name, buf in fb.bufs.items():
                entry[name] = fb.view(buf, j)
            fb.started[j] = True
        fb.all_started = bool(fb.started.all())

    # ---- stepping -------------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any] | None = None):
        """Perform one optimization step (one fused kernel call per group and dtype).

        Args:
            closure: optional; re-evaluates the model (zero grads, forward, backward) and returns
                the loss, which ``step`` returns.
        """
        loss = self._call_closure(closure)
        for group, buffers in zip(self.param_groups, self._flat):
            names = self._state_names(group)
            for fb in buffers:
                if fb.stale:  # a parameter shared with another optimizer: take it back
                    fb.pack()
                if fb.ensure(names, self._state_init(group)):
                    self._start(fb, np.flatnonzero(fb.started))  # add the new views
                self._run(group, fb)
                if not fb.all_started:
                    self._start(fb, np.flatnonzero(~fb.started & (fb.steps > 0)))
        return loss

    # ---- state dict -----------------------------------------------------------------------------
    def _state_items(self):
        order = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        items = [(k, v) for k, v in self.state.items()
                 if not isinstance(k, Parameter) or id(k) in order]
        return sorted(items, key=lambda kv: order.get(id(kv[0]), len(order)))

    def _check_loaded_state(self, state, groups, labels) -> None:
        for group in groups:
            required = (("step",) if self._has_step else ()) + tuple(self._state_names(group))
            for p in group["params"]:
                st = state.get(p)
                if not st:
                    continue
                label = labels.get(id(p), "?")
                missing = [k for k in required if st.get(k) is None]
                if missing:
                    raise ValueError(f"load_state_dict: parameter {label} has no state {missing[0]!r}"
                                     f" ({type(self).__name__} with these options keeps "
                                     f"{list(required)})")
                for k, v in st.items():
                    if k != "step" and v is not None and not isinstance(v, np.ndarray):
                        raise ValueError(f"load_state_dict: parameter {label} has state {k!r} of "
                                         f"type {type(v).__name__}, expected an array")

    def _set_state(self, state, groups) -> None:
        self.param_groups = groups
        self.state = defaultdict(dict)
        for p_or_key, value in state.items():
            if not isinstance(p_or_key, Parameter):
                self.state[p_or_key] = value
        for group, buffers in zip(groups, self._flat):
            init = self._state_init(group)
            for fb in buffers:
                loaded = [state.get(p) or {} for p in fb.params]
                names = list(self._state_names(group))
                for st in loaded:
                    names += [k for k, v in st.items() if k != "step" and v is not None
                              and k not in names]
                fb.ensure(names, init)
                fb.started[:] = False
                for j, st in enumerate(loaded):
                    fb.reset(j, init)
                    if st:
                        step = st.get("step")
                        fb.steps[j] = 1 if step is None else step
                        for k, v in st.items():
                            if k != "step" and v is not None:
                                fb.view(fb.bufs[k], j)[...] = v
                start = [j for j, st in enumerate(loaded) if st or self._eager_state]
                self._start(fb, start)
