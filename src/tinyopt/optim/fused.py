"""``FusedOptimizer``: the base of tinyopt's optimizers, one kernel call per group and dtype.

An optimizer is a declaration (see ``docs/adding_an_optimizer.md``):

- ``kernel``: its fused step in ``kernels/optim.py`` (``kernel[switches]`` is a compiled kernel);
- ``scalar_state``: the per-parameter scalar state it keeps and shows in ``state[p]``
  (``("step",)``; NAdam adds ``"mu_product"``; SGD shows none);
- ``validate(group)``: PyTorch's checks and messages for the hyperparameters;
- ``state_names(group)``: the vector state in the kernel's slots (``None`` for a slot the
  options leave unused), e.g. ``("exp_avg", "exp_avg_sq", None)``;
- ``state_init(group)``: initial values of the state that does not start at 0;
- ``side_state(p)``: state not shaped like ``p`` (name -> shape; Adafactor's factors);
- ``host_scalars(group, r)``: the named host scalars of this step.  Those named in ``host64`` stay
  float64 (the per-parameter scalar arithmetic uses them); the others are rounded to the buffer
  dtype for the element math, as PyTorch rounds an op's scalar argument (with PyTorch's overflow
  error beyond the dtype's range); ``r(x)`` rounds one where a later scalar depends on the
  rounded value (a lerp weight ``w`` and ``1 - w``);
- ``switches(group, host)``: the kernel's compile-time options;
- ``_elementwise = True`` when each element steps from its own state and the per-parameter
  scalars alone, so a piece of a parameter steps exactly as the whole one
  (``distributed.optim.ZeroRedundancyOptimizer`` accepts only such optimizers).

These names are the contract.  A subclass written against the underscored names of tinyopt
0.x (``_validate``, ``_state_names``, ``_state_init``, ``_side_state``, ``_host``,
``_switches``) keeps working: the class maps them to these when it is defined.

This class lays each group out in :class:`~tinyopt.optim.flat.FlatBuffer` s (fresh gradients
and every ``state[p][name]`` are views into them; the parameters' storage stays where it is and
the kernel reaches it through the buffer's slots), keeps ``state`` PyTorch-shaped (an
entry appears when a parameter first steps, scalar state as 0-d float32 views), runs the kernel,
and loads state dicts into the buffers.

Low precision comes with the declaration, nothing to add: the float16/bfloat16 parameters of a
group get float32 master weights (``state[p]["master_param"]``), float32 state and gradients,
and the walker's step-plus-copy variant ``kernel.low[mode]`` (``docs/low_precision.md``); a
group's ``stochastic_rounding=True`` rounds its bfloat16 copies stochastically.  A new optimizer
takes ``stochastic_rounding: bool = False`` as a keyword and passes it to this constructor.
"""

from __future__ import annotations

import operator
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from tinyopt.engine.row_sparse import row_sparse_params
from tinyopt.engine.tensor import Parameter, Tensor, leaf
from tinyopt.kernels.optim import BF16, BF16_SR, LOW_MODES, Algorithm
from tinyopt.optim import in_plan
from tinyopt.optim.flat import FlatBuffer
from tinyopt.optim.optimizer import (Optimizer, call_closure, cast_scalar, ParamList,
                                     hyperparameters_as_numbers)


_HOOKS_RENAMED = {"_validate": "validate", "_state_names": "state_names",
                  "_state_init": "state_init", "_side_state": "side_state",
                  "_host": "host_scalars", "_switches": "switches"}
"""The subclass hooks' former names (issue 26): still honoured in subclasses."""


class PreparedStep(NamedTuple):
    """One flat buffer's step, ready to call: ``kernel(*args, record)`` with ``record`` made
    from ``host`` (``FlatBuffer.host``)."""
    host: dict[str, Any]       # the named host scalars (``host_scalars``)
    switches: tuple[bool, ...]  # the kernel's compile-time options (``switches``)
    kernel: Any                 # ``FusedOptimizer.kernel[switches]``
    args: tuple                 # ``FlatBuffer.kernel_args`` (a ``WalkerArgs`` for float32/64)


class StateEntry(dict):
    """``optimizer.state[p]`` of a fused optimizer: a dict whose values are Tensors sharing the
    flat buffers, so in-place changes (``state["exp_avg"].mul_(0.5)``) reach the kernel, and
    assigning a value (``state["exp_avg"] = np.zeros(shape)``, ``state["step"] = 10``) copies it
    into the buffer, as it takes effect in PyTorch.  Deleting an entry raises."""

    def __init__(self, fb: FlatBuffer, j: int, shown: tuple[str, ...], items: dict) -> None:
        super().__init__(items)
        self._fb, self._j, self._shown = fb, j, shown

    def _bind(self, name: str, view: np.ndarray) -> None:
        """Make ``self[name]`` a Tensor viewing ``view`` (copying in a value assigned before the
        buffer existed; keeping a Tensor that already views it)."""
        old = dict.get(self, name)
        if isinstance(old, Tensor) and old.value is view:
            return
        if isinstance(old, Tensor) and old.value.ctypes.data == view.ctypes.data \
                and old.value.shape == view.shape:
            return
        if old is not None:
            view[...] = self._converted(name, old, view)
        dict.__setitem__(self, name, leaf(view))

    def _converted(self, name: str, value: Any, view: np.ndarray) -> np.ndarray:
        if view.ndim == 0 and name in self._fb.scalar_names:
            return cast_scalar(value, name, f"optimizer state {name!r}")
        arr = np.asarray(value)
        if arr.shape != view.shape:
            raise ValueError(f"optimizer state {name!r} has shape {view.shape}; cannot assign a "
                             f"value of shape {arr.shape}")
        return arr

    def __setitem__(self, name: str, value: Any) -> None:
        fb, j = self._fb, self._j
        view = fb.state_view(name, j)
        if view is not None:  # vector or side state
            pass
        elif name in self._shown:
            view = fb.scalars[j, fb.scalar_names.index(name), ...]
        elif name == MASTER and fb.mode:
            view = fb.view(fb.data, j)
        else:  # not state the kernel keeps: stored as given (saved in the state dict)
            dict.__setitem__(self, name, value)
            return
        arr = self._converted(name, value, view)
        if arr is not view:
            view[...] = arr
        if not (isinstance(dict.get(self, name), Tensor)):
            dict.__setitem__(self, name, leaf(view))

    def update(self, *args: Any, **kwargs: Any) -> None:
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, name: str, default: Any = None) -> Any:
        if name not in self:
            self[name] = default
        return self[name]

    def __delitem__(self, name: str) -> None:
        raise TypeError(f"cannot delete the optimizer state {name!r}: a fused optimizer keeps it "
                        "in its flat buffers (assign a value, or load a state dict)")

    def pop(self, *args: Any) -> Any:
        raise TypeError("cannot remove optimizer state of a fused optimizer (assign a value, or "
                        "load a state dict)")

    def __reduce__(self):
        return dict, (dict(self),)


class _State(defaultdict):
    """``optimizer.state`` of a fused optimizer: ``state[p] = {...}`` for a parameter that has
    state writes the values into its buffers (it would otherwise be ignored by the kernel)."""

    def __init__(self, items: Any = ()) -> None:
        super().__init__(dict, items)

    def __setitem__(self, key: Any, value: Any) -> None:
        old = self.get(key)
        if isinstance(old, StateEntry) and old is not value:
            old.update(value)
            return
        super().__setitem__(key, value)

    def __reduce__(self):
        return _State, (dict(self),)


class FusedOptimizer(Optimizer):
    """Base class of the fused optimizers (see the module docstring)."""

    kernel: Any = None
    scalar_state: tuple[str, ...] = ("step",)
    host64: tuple[str, ...] = ()  # host scalars kept in float64 (the others: buffer dtype)
    _eager_state = False  # whether state exists from construction (Adagrad)
    # PyTorch's error for a sparse gradient (``nn.Embedding(sparse=True)``'s weight), or None
    # where PyTorch accepts one (SGD, Adagrad: their dense update is torch's sparse one)
    _sparse_error: str | None = None
    _sparse_weight_decay_error: str | None = None  # (where it accepts them, but not with decay)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for old, new in _HOOKS_RENAMED.items():  # a subclass declared with the old names
            if old in cls.__dict__ and new not in cls.__dict__:
                setattr(cls, new, cls.__dict__[old])
        if FusedOptimizer in cls.__bases__ and "_sparse_error" not in cls.__dict__ \
                and cls.__module__.startswith("tinyopt.optim."):  # (AdamW keeps Adam's, as torch)
            cls._sparse_error = f"{cls.__name__} does not support sparse gradients"

    def __init__(self, params: Iterable, defaults: dict[str, Any], *,
                 stochastic_rounding: bool = False) -> None:
        if stochastic_rounding:  # (only then in the defaults: the others stay torch's)
            defaults = dict(defaults, stochastic_rounding=True)
        defaults = hyperparameters_as_numbers(dict(defaults))
        self.validate(defaults)
        self._empty()
        super().__init__(params, defaults)
        self._ready = True

    def _empty(self) -> None:
        self._flat: list[list[FlatBuffer]] = []
        # per group: its params list and that list's version when laid out; and per buffer, how
        # many times each parameter is listed (None: once each)
        self._layout: list[tuple[list, int]] = []
        self._repeats: list[list[np.ndarray | None]] = []
        self._ids: set[int] = set()
        self._ready = False

    def _restore(self, defaults, groups, state) -> None:
        self._empty()
        super()._restore(defaults, groups, {k: _arrays(v) for k, v in state.items()})
        self._ready = True

    @property
    def state(self) -> _State:
        """Per-parameter state: ``state[p]`` maps names to Tensors viewing the flat buffers."""
        return self._state

    @state.setter
    def state(self, value: Any) -> None:
        if not self._ready:
            self._state = _State(value)
            return
        # ``opt.state = ...`` replaces the state, as loading a state dict keyed by these
        # parameters would (checked first; ``opt.state = defaultdict(dict)`` resets it)
        params = [p for g in self.param_groups for p in g["params"]]
        index: dict[int, int] = {}
        for i, p in enumerate(params):
            index.setdefault(id(p), i)
        state = {}
        for k, v in dict(value).items():
            if isinstance(k, Parameter) and id(k) not in index:
                raise ValueError("optimizer.state: a key is a parameter this optimizer does not "
                                 "optimize")
            state[index[id(k)] if isinstance(k, Parameter) else k] = v
        groups = [dict(g, params=[index[id(p)] for p in g["params"]]) for g in self.param_groups]
        self._load_checked({"state": state, "param_groups": groups})

    # ---- what a subclass declares ---------------------------------------------------------------
    def validate(self, group: dict[str, Any]) -> None:
        """Raise ValueError (PyTorch's message) for an invalid hyperparameter of ``group``."""

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        """The vector state in the kernel's slots for ``group``'s options (None: slot unused)."""
        return ()

    def state_init(self, group: dict[str, Any]) -> dict[str, float]:
        """Initial value of each piece of state (0 unless listed)."""
        return {}

    def side_state(self, p: Parameter) -> dict[str, tuple[int, ...]]:
        """The state of other shapes than ``p``'s that ``p`` keeps, name -> shape (Adafactor's
        factors); it lives in the buffer's ``sides``, zero at the start."""
        return {}

    def host_scalars(self, group: dict[str, Any], r: Callable[[float], np.floating]) -> dict[str, Any]:
        """The named host scalars the kernel reads this step."""
        return {}

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        """The kernel's compile-time options for ``group``."""
        return ()

    # ---- groups ---------------------------------------------------------------------------------
    @classmethod
    def _columns(cls) -> tuple[str, ...]:
        return ("step",) + tuple(n for n in cls.scalar_state if n != "step")

    def _check_group(self, group: dict[str, Any]) -> None:
        hyperparameters_as_numbers(group)
        for key in ("capturable", "differentiable"):
            if group.get(key, False):
                raise ValueError(f"{type(self).__name__}: {key}=True is not supported (tinyopt has no "
                                 f"CUDA graphs and optimizers do not build graphs)")
        for p in group["params"]:
            d = np.dtype(p.dtype)
            if d.kind != "f" and d.name not in LOW_MODES:
                raise TypeError(f"{type(self).__name__} can only optimize floating point "
                                f"parameters, but one has dtype {p.dtype}")
            if group.get("stochastic_rounding", False) and d.name == "float16":
                raise ValueError(f"{type(self).__name__}: stochastic_rounding=True rounds "
                                 f"bfloat16 parameters, but this group has float16 ones")
        self.validate(group)

    def _add_group(self, group: dict[str, Any]) -> None:
        super()._add_group(group)
        self._ids.update(id(p) for p in group["params"])
        by_dtype: dict[np.dtype, list[Parameter]] = {}
        seen: set[int] = set()
        for p in group["params"]:
            if id(p) not in seen:  # a duplicate (warned about) is laid out and updated once
                seen.add(id(p))
                by_dtype.setdefault(np.dtype(p.dtype), []).append(p)
        buffers = [FlatBuffer(ps, dt, self._columns()) for dt, ps in by_dtype.items()]
        for fb in buffers:
            shapes = [self.side_state(p) for p in fb.params]
            fb.add_sides({name: [s.get(name) for s in shapes] for s in shapes for name in s})
        self._flat.append(buffers)
        params = group["params"]
        self._layout.append((params, getattr(params, "version", 0)))
        counts = Counter(id(p) for p in params)
        self._repeats.append([None if all(counts[id(p)] == 1 for p in fb.params) else
                              np.array([counts[id(p)] for p in fb.params]) for fb in buffers])
        if self._eager_state:
            init = self.state_init(group)
            for fb in buffers:
                fb.add_vectors(self.state_names(group), init)
                for j in range(len(fb.params)):
                    fb.reset(j, init)
                self._start(fb, np.arange(len(fb.params)))
        self._compile_ahead(group, buffers)

    def _compile_ahead(self, group: dict[str, Any], buffers: list[FlatBuffer]) -> None:
        """Have the kernel of ``group``'s first step compiled in a helper process while the
        forward and backward passes run here, where it is not cached yet
        (``kernels/compile_ahead.py``; its first call waits for it)."""
        # (a class whose step is its own, or a cautious one, calls kernels of its own)
        if (type(self).in_plan_refusal() is not None or group.get("cautious") or not buffers
                or buffers[0].mode):
            return
        fb = buffers[0]
        try:
            host = self.host_scalars(group, fb.round)
            switches = self.switches(group, host)
            args = (*fb.walker_args(), fb.host(host, self.host64))
        except Exception:  # a value the first step will refuse, with its own error
            return
        type(self).kernel.compile_ahead(switches, args)

    def _start(self, fb: FlatBuffer, idx: Iterable[int]) -> None:
        """Create the ``state`` entries of ``fb``'s parameters ``idx``: Tensors viewing the
        buffers (existing ones are kept)."""
        shown = [(k, name) for k, name in enumerate(fb.scalar_names) if name in self.scalar_state]
        for j in idx:
            p = fb.params[j]
            entry = self._state.get(p)
            if not isinstance(entry, StateEntry):
                entry = StateEntry(fb, int(j), self.scalar_state, entry or {})
                dict.__setitem__(self._state, p, entry)
            for k, name in shown:
                entry._bind(name, fb.scalars[j, k, ...])
            for name, view in fb.state_views(j).items():
                entry._bind(name, view)
            if fb.mode:
                entry._bind(MASTER, fb.view(fb.data, j))
            fb.started[j] = True
        fb.all_started = bool(fb.started.all())

    # ---- stepping -------------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any] | None = None):
        """Perform one optimization step (one fused kernel call per group and dtype).

        Args:
            closure: optional; re-evaluates the model (zero grads, forward, backward) and returns
                the loss, which ``step`` returns.
        """
        loss = call_closure(closure)
        self._follow_groups()
        rows = row_sparse_params()
        if rows:
            sparse = [p for p in rows if p._grad is not None and id(p) in self._ids]
            if sparse:
                self._check_sparse(sparse)
        for group, buffers, repeats in zip(self.param_groups, self._flat, self._repeats):
            for fb, rep in zip(buffers, repeats):
                names = self._use_state_names(fb, group)
                starting = self._begin_state(fb, group, fb.flags)
                if rep is None:
                    self._run(fb, group, names)
                else:
                    self._run_repeated(fb, group, names, rep)
                self._finish_state(fb, starting)
        return loss

    def _check_sparse(self, params: list[Parameter]) -> None:
        """Raise PyTorch's error when ``params`` (of this optimizer) have row-sparse gradients
        and PyTorch refuses them; where it accepts them, the dense update is PyTorch's sparse
        one (rows not looked up have a zero gradient)."""
        if self._sparse_error is not None:
            raise RuntimeError(self._sparse_error)
        if self._sparse_weight_decay_error is not None:
            ids = {id(p) for p in params}
            for group in self.param_groups:
                if group["weight_decay"] != 0 and any(id(p) in ids for p in group["params"]):
                    raise RuntimeError(self._sparse_weight_decay_error)

    def _run(self, fb: FlatBuffer, group: dict[str, Any], names: tuple[str | None, ...]) -> None:
        """One step of ``fb``: one call of the kernel (an algorithm that is not one elementwise
        pass, such as Muon, overrides this)."""
        step = self.prepare_step(fb, group, names)
        self._call(step.kernel, group, fb, step.args, step.host)

    def fuse_with_backward(self, loss: Tensor) -> None:
        """``loss.backward(); self.step()`` as one plan run when possible (``optim/in_plan.py``;
        see :meth:`Optimizer.fuse_with_backward`)."""
        in_plan.fuse_with_backward(self, loss)

    @classmethod
    def in_plan_refusal(cls) -> str | None:
        """Why this class's step cannot run inside a backward plan (``in_plan.fusable`` adds the
        reasons of the moment), or None: an elementwise kernel, ``step`` and ``_run`` not
        overridden."""
        if not isinstance(cls.kernel, Algorithm):
            return "not an elementwise fused optimizer"
        if cls.step is not FusedOptimizer.step or cls._run is not FusedOptimizer._run:
            return "its step is overridden"
        return None

    # ---- the prepared step: what ``step`` and the in-backward update (``in_plan.py``) share ----
    def _use_state_names(self, fb: FlatBuffer, group: dict[str, Any]) -> tuple[str | None, ...]:
        """The vector state ``group``'s options keep now, added to ``fb`` (with its state views)
        when an option changed since the last step."""
        names = self.state_names(group)
        if names != fb.names and fb.add_vectors(names, self.state_init(group)):
            self._start(fb, np.flatnonzero(fb.started))  # add the new views
        fb.names = names
        return names

    def prepare_step(self, fb: FlatBuffer, group: dict[str, Any],
                     names: tuple[str | None, ...]) -> PreparedStep:
        """The kernel, arguments and host scalars of ``fb``'s step.  They follow from the
        group's values alone: while the group holds the very same immutable values as at the
        last step (identity; numbers, strings, tuples of them), they are not recomputed."""
        memo = fb.__dict__.get("_step_memo")
        if (memo is not None and len(memo[0]) == len(group)
                and all(map(operator.is_, memo[0], group.values()))):
            return PreparedStep(memo[1], memo[2], memo[3], fb.kernel_args(names))
        host = self.host_scalars(group, fb.round)
        switches = self.switches(group, host)
        kernel = self.kernel[switches]
        values = tuple(group.values())
        fb._step_memo = ((values, host, switches, kernel) if all(
            _immutable(v) for k, v in group.items() if k != "params") else None)
        return PreparedStep(host, switches, kernel, fb.kernel_args(names))

    def _begin_state(self, fb: FlatBuffer, group: dict[str, Any],
                     stepping: np.ndarray) -> np.ndarray | None:
        """Start the state of ``fb``'s parameters that step now (``stepping``) for the first
        time: from its initial values, or from what was assigned to ``state[p]`` before.  Their
        indices (None when every parameter has started)."""
        if fb.all_started:
            return None
        starting = np.flatnonzero(~fb.started & (stepping != 0))
        if len(starting):
            init = self.state_init(group)
            if init:
                for j in starting:
                    fb.reset(int(j), init)
            given = [j for j in starting if self._state.get(fb.params[j])]
            if given:  # state assigned before the first step takes effect
                self._start(fb, given)
        return starting

    def _finish_state(self, fb: FlatBuffer, starting: np.ndarray | None) -> None:
        """Make the ``state`` entries of the parameters that started in this step (those that
        stepped; a 16-bit one's master exists from now on)."""
        if starting is not None and len(starting):
            started = starting if fb.mode else starting[fb.steps[starting] > 0]
            if len(started):  # (none, step after step, for a momentum-free SGD: no state)
                self._start(fb, started)

    def _call(self, kernel: Any, group: dict[str, Any], fb: FlatBuffer, args: tuple,
              host: dict[str, Any]) -> None:
        """``kernel(*args, host record)`` (its float32-master variant for 16-bit ``fb``),
        raising PyTorch's overflow error when a coefficient does not fit the dtype."""
        if fb.mode:
            kernel = _low_kernel(self, kernel, fb, group)
        bad = kernel(*args, fb.host(host, self.host64))
        if bad >= 0:
            raise RuntimeError(f"value cannot be converted to type {fb._ctype} without overflow")

    def _run_repeated(self, fb: FlatBuffer, group: dict[str, Any], names: tuple[str | None, ...],
                      rep: np.ndarray) -> None:
        """A group listing a parameter ``k`` times updates it ``k`` times with its one state, as
        torch's per-parameter loop does: kernel pass ``r`` updates the parameters listed ``r``
        times or more."""
        flags = fb.flags.copy()
        fresh = fb.steps == 0
        try:
            for r in range(1, int(rep.max()) + 1):
                if r > 1 and "step" not in self.scalar_state:
                    # torch's SGD reads every occurrence's momentum buffer before storing any:
                    # at the first step each occurrence starts it afresh
                    fb.steps[fresh & (rep >= r)] = 0
                fb.flags[:] = flags & (rep >= r)
                self._run(fb, group, names)
        finally:
            fb.flags[:] = flags

    def _follow_groups(self) -> None:
        """Lay the groups out again when ``param_groups`` changed in place since the last step
        (a parameter appended to a group's ``params``, a list or group replaced or appended), as
        torch's optimizers read ``param_groups`` afresh at every step."""
        if len(self._layout) == len(self.param_groups) and all(
                g["params"] is ref and getattr(ref, "version", 0) == v
                for g, (ref, v) in zip(self.param_groups, self._layout)):
            return
        groups = self.param_groups
        seen: set[int] = set()
        for g in groups:
            if not isinstance(g, dict) or "params" not in g:
                raise TypeError("optimizer.param_groups must hold dicts with a 'params' entry")
            params = g["params"]
            params = [params] if isinstance(params, Parameter) else list(params)
            for p in params:
                if not isinstance(p, Parameter):
                    raise TypeError("optimizer can only optimize Tensors, but one of the params "
                                    f"is {type(p).__name__}")
            ids = {id(p) for p in params}
            if ids & seen:
                raise ValueError("some parameters appear in more than one parameter group")
            seen |= ids
            for name, default in self.defaults.items():
                if name not in g:
                    raise KeyError(f"param_groups: a group has no {name!r} (groups added with "
                                   f"add_param_group get the defaults)")
            hyperparameters_as_numbers(g)
            self._check_group(dict(g, params=params))
        state = {k: _arrays(st) for k, st in self._state.items()
                 if not isinstance(k, Parameter) or id(k) in seen}
        self._empty()
        self.param_groups = []
        for g in groups:
            params = g["params"]
            g["params"] = ParamList([params] if isinstance(params, Parameter) else params)
            self._add_group(g)
        self._set_state(defaultdict(dict, state), self.param_groups)
        self._ready = True

    def _load_checked(self, state_dict) -> None:
        self._follow_groups()
        super()._load_checked(state_dict)

    # ---- state dict -----------------------------------------------------------------------------
    def _state_items(self):
        order = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        items = [(k, v) for k, v in self._state.items()
                 if not isinstance(k, Parameter) or id(k) in order]
        return sorted(items, key=lambda kv: order.get(id(kv[0]), len(order)))

    def _scalar_keys(self) -> tuple[str, ...]:
        return self._columns()

    def _check_loaded_state(self, state, groups, labels) -> None:
        for group in groups:
            required = tuple(self.scalar_state) + tuple(n for n in self.state_names(group) if n)
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
                    if v is not None and not isinstance(v, np.ndarray):
                        raise ValueError(f"load_state_dict: parameter {label} has state {k!r} of "
                                         f"type {type(v).__name__}, expected an array")

    def _set_state(self, state, groups) -> None:
        self.param_groups = groups
        self._state = _State()
        for p_or_key, value in state.items():
            if not isinstance(p_or_key, Parameter):
                self._state[p_or_key] = value
        for group, buffers in zip(groups, self._flat):
            init = self.state_init(group)
            for fb in buffers:
                loaded = [state.get(p) or {} for p in fb.params]
                names = [n for n in self.state_names(group) if n]
                for st in loaded:
                    names += [k for k, v in st.items() if k not in fb.scalar_names
                              and v is not None and k not in names and k not in fb.sides
                              and not (k == MASTER and fb.mode)]
                fb.add_vectors(names, init)
                fb.started[:] = False
                for j, st in enumerate(loaded):
                    fb.reset(j, init)
                    if fb.mode:  # without saved masters: the parameters as they are
                        st = dict(st)
                        master = st.pop(MASTER, None)
                        fb.view(fb.data, j)[...] = fb.param_view(j) if master is None else master
                    if st:
                        if "step" not in st:  # SGD's momentum buffer: one momentum step taken
                            fb.steps[j] = 1
                        for k, v in st.items():
                            if k in fb.scalar_names:
                                fb.scalars[j, fb.scalar_names.index(k)] = v
                            elif v is not None:
                                fb.state_view(k, j)[...] = v
                start = [j for j, st in enumerate(loaded) if st or self._eager_state]
                self._start(fb, start)


def _arrays(entry: Any) -> Any:
    """A copy of one parameter's state with Tensors as numpy arrays (what ``_set_state`` takes)."""
    if not isinstance(entry, dict):
        return entry
    return {k: np.array(np.asarray(v)) if isinstance(v, Tensor) else v for k, v in entry.items()}


MASTER = "master_param"
"""The state key of a 16-bit parameter's float32 master weights (Transformer Engine's name)."""


_IMMUTABLE = frozenset((float, int, bool, str, type(None), np.float64, np.float32))


def _immutable(v: Any) -> bool:
    """Whether ``v`` is a value no one can change in place (so the same object means the same
    value): a number, a string, None, or a tuple of them -- not a Tensor or an array."""
    t = type(v)
    return t in _IMMUTABLE or t is tuple and all(type(x) in _IMMUTABLE for x in v)


def _low_kernel(opt: FusedOptimizer, kernel: Any, fb: FlatBuffer, group: dict[str, Any]) -> Any:
    """The step-plus-copy variant of ``kernel`` for ``fb``'s 16-bit parameters."""
    low = getattr(kernel, "low", None)
    if low is None:
        raise TypeError(f"{type(opt).__name__} cannot update {fb.storage} parameters (its kernel "
                        f"has no float32-master variant)")
    sr = fb.mode == BF16 and group.get("stochastic_rounding", False)
    return low[BF16_SR if sr else fb.mode]

