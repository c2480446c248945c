"""``Optimizer``: the base class of every optimizer, with ``torch.optim.Optimizer``'s contract.

It owns ``param_groups`` (dicts holding ``params`` and every hyperparameter, read afresh at every
step so schedulers and users may change them), ``defaults``, ``state`` (a dict per parameter),
``add_param_group``, ``zero_grad``, the hooks, and ``state_dict``/``load_state_dict`` in PyTorch's
layout with numpy arrays in place of tensors::

    {"state": {0: {"step": array(3., dtype=float32), "exp_avg": array([...]), ...}, ...},
     "param_groups": [{"lr": 0.001, ..., "params": [0, 1, 2]}]}

A subclass written the PyTorch way (a ``step`` looping over ``p.grad`` and ``self.state[p]``)
works as is; tinyopt's own optimizers derive from :class:`tinyopt.optim.fused.FusedOptimizer`,
which keeps each group in flat buffers and updates it with one kernel call.

``load_state_dict`` validates everything first (group count and sizes like PyTorch, and also each
state array's shape against its parameter) and changes nothing when it rejects a dict.  When both
the optimizer and the dict carry ``param_names``, parameters are matched by name.
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyopt.engine.grad_mode import enable_grad
from tinyopt.engine.hooks import RemovableHandle
from tinyopt.engine.row_sparse import forget_rows
from tinyopt.engine.tensor import Parameter, Tensor, leaf

StateDict = dict[str, Any]


class _RequiredParameter:
    """Singleton marking a hyperparameter a param group must give (like ``torch.optim.required``)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()

_global_optimizer_pre_hooks: OrderedDict = OrderedDict()
_global_optimizer_post_hooks: OrderedDict = OrderedDict()


def register_optimizer_step_pre_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(optimizer, args, kwargs) -> None | (new_args, new_kwargs)`` to run before
    the ``step`` of every optimizer (before each optimizer's own pre hooks), as torch's."""
    handle = RemovableHandle(_global_optimizer_pre_hooks)
    _global_optimizer_pre_hooks[handle.id] = hook
    return handle


def register_optimizer_step_post_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(optimizer, args, kwargs) -> None`` to run after the ``step`` of every
    optimizer (after each optimizer's own post hooks), as torch's."""
    handle = RemovableHandle(_global_optimizer_post_hooks)
    _global_optimizer_post_hooks[handle.id] = hook
    return handle


LEGACY_DEFAULTS: dict[str, Any] = {"maximize": False, "foreach": None, "capturable": False,
                                   "differentiable": False, "fused": None,
                                   "decoupled_weight_decay": False, "amsgrad": False,
                                   "nesterov": False}
"""Hyperparameters torch.optim added after its first releases, with the value torch's
``__setstate__`` gives a loaded group that lacks one (an optimizer fills only those it has)."""


class ParamList(list):
    """``param_groups[i]["params"]``: a list counting its changes (``version``), so a fused
    optimizer sees an appended or replaced parameter at its next step."""

    __slots__ = ("version",)

    def __init__(self, items: Iterable = ()) -> None:
        super().__init__(items)
        self.version = 0


def _counting(name: str) -> Callable:
    method = getattr(list, name)

    @functools.wraps(method)
    def changed(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        self.version += 1
        return out

    return changed


for _name in ("append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse",
              "__setitem__", "__delitem__", "__iadd__", "__imul__"):
    setattr(ParamList, _name, _counting(_name))


def _as_number(name: str, value: Any) -> Any:
    """A hyperparameter given as a Tensor or array: its one number (torch's message otherwise)."""
    if isinstance(value, (Tensor, np.ndarray, np.generic)) and not isinstance(value, Parameter):
        arr = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
        if arr.size != 1:
            raise ValueError(f"Tensor {name} must be 1-element")
        return arr.reshape(()).item()
    return value


def hyperparameters_as_numbers(group: dict[str, Any]) -> dict[str, Any]:
    """``group`` with 1-element Tensors/arrays (``lr``, each of ``betas``...) as Python numbers,
    in place (ValueError "Tensor lr must be 1-element" for a bigger one)."""
    for key, value in group.items():
        if key in ("params", "param_names"):
            continue
        if isinstance(value, tuple):
            group[key] = tuple(_as_number(f"{key}[{i}]", v) for i, v in enumerate(value))
        else:
            group[key] = _as_number(key, value)
    return group


def typename(x) -> str:
    """``x``'s type as torch's messages name it (``list``, ``numpy.ndarray``)."""
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def call_closure(closure: Callable[[], Any] | None) -> Any:
    """What ``step(closure)`` does with its closure: ``closure()`` with gradient recording on
    (torch's ``with torch.enable_grad(): loss = closure()``), None without one."""
    if closure is None:
        return None
    with enable_grad():
        return closure()


def _hooked_step(step: Callable) -> Callable:
    """Wrap a subclass's ``step`` so the step pre/post hooks run around it (once, when nested)."""

    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        if getattr(self, "_in_step", False):  # super().step() from an overriding subclass
            return step(self, *args, **kwargs)
        for hook in ([*_global_optimizer_pre_hooks.values(),
                      *self._optimizer_step_pre_hooks.values()]
                     if _global_optimizer_pre_hooks or self._optimizer_step_pre_hooks else ()):
            result = hook(self, args, kwargs)
            if result is not None:
                if isinstance(result, tuple) and len(result) == 2:
                    args, kwargs = result
                else:
                    raise RuntimeError(f"{step} must return None or a tuple of (new_args, new_kwargs),"
                                       f" but got {result}.")
        self._in_step = True
        try:
            out = step(self, *args, **kwargs)
        finally:
            self._in_step = False
        self._opt_called = True
        for hook in ([*self._optimizer_step_post_hooks.values(),
                      *_global_optimizer_post_hooks.values()]
                     if _global_optimizer_post_hooks or self._optimizer_step_post_hooks else ()):
            hook(self, args, kwargs)
        return out

    wrapper._tinyopt_hooked = True  # type: ignore[attr-defined]
    return wrapper


class Optimizer:
    """Base class for all optimizers (``torch.optim.Optimizer``'s interface and rules).

    Args:
        params: an iterable of Parameters, of ``(name, Parameter)`` pairs, or of dicts (param
            groups, each with a ``"params"`` entry and any hyperparameters overriding ``defaults``).
        defaults: the default value of every hyperparameter.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "_tinyopt_hooked", False):
            cls.step = _hooked_step(step)

    def __init__(self, params: Iterable, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self._optimizer_step_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_step_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_post_hooks: OrderedDict = OrderedDict()
        if isinstance(params, Parameter):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got " + typename(params))
        if isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but "
                            "the ordering of tensors in sets will change between runs. Please use a "
                            "list instead.")
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def __repr__(self) -> str:
        lines = [self.__class__.__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(group):
                if key != "params":
                    lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)

    # ---- copies -----------------------------------------------------------------------------------
    # As torch's, a copy (copy.deepcopy, pickle) keeps ``defaults``, ``param_groups`` and ``state``
    # and no hooks.  A deep copy takes the parameters from ``memo`` (the model's copy when both
    # are copied together: ``copy.deepcopy((model, opt))``); unpickling makes new Parameters.
    def _unique_params(self) -> list[Parameter]:
        seen: dict[int, Parameter] = {}
        for group in self.param_groups:
            for p in group["params"]:
                seen.setdefault(id(p), p)
        return list(seen.values())

    def __deepcopy__(self, memo: dict) -> Optimizer:
        params = self._unique_params()
        new_params = {id(p): copy.deepcopy(p, memo) for p in params}
        groups = [{k: [new_params[id(p)] for p in v] if k == "params" else copy.deepcopy(v, memo)
                   for k, v in g.items()} for g in self.param_groups]
        state = {new_params.get(id(k), k) if isinstance(k, Parameter) else copy.deepcopy(k, memo):
                 copy.deepcopy(dict(v), memo) for k, v in self.state.items()}
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new._restore(copy.deepcopy(self.defaults, memo), groups, state)
        return new

    def __reduce_ex__(self, protocol: Any) -> Any:
        params = self._unique_params()
        index = {id(p): i for i, p in enumerate(params)}
        groups = [dict(g, params=[index[id(p)] for p in g["params"]]) for g in self.param_groups]
        state = [(index[id(k)], None, dict(v)) if isinstance(k, Parameter) else (None, k, v)
                 for k, v in self.state.items() if not isinstance(k, Parameter) or id(k) in index]
        saved = [(np.array(p.value), None if p._grad is None else np.array(p._grad),
                  p.requires_grad, p.name) for p in params]
        return _unpickle, (type(self), self.defaults, groups, saved, state)

    def _restore(self, defaults: dict[str, Any], groups: list[dict[str, Any]],
                 state: dict[Any, Any]) -> None:
        """Make this (uninitialized) optimizer a copy: checked groups over their own
        parameters, and ``state`` keyed by them (what deepcopy and unpickling call)."""
        self.defaults = defaults
        for name in ("step_pre", "step_post", "state_dict_pre", "state_dict_post",
                     "load_state_dict_pre", "load_state_dict_post"):
            setattr(self, f"_optimizer_{name}_hooks", OrderedDict())
        self.state = defaultdict(dict)
        self.param_groups = []
        for group in groups:
            group["params"] = ParamList(group["params"])
            self._add_group(group)
        self._set_state(defaultdict(dict, state), self.param_groups)

    # ---- param groups ---------------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters (with its own hyperparameters) to ``param_groups``.

        Useful when fine-tuning: unfreeze layers and give them to the optimizer as training goes.
        Nothing changes if the group is rejected.
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        param_group = dict(param_group)
        if "params" not in param_group:
            raise ValueError("param_group must have a 'params' entry")
        params = param_group["params"]
        if isinstance(params, Parameter):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but "
                            "the ordering of tensors in sets will change between runs. Please use a "
                            "list instead.")
        else:
            params = list(params)
        names, tensors = [], []
        for item in params:
            if isinstance(item, tuple):
                if len(item) != 2 or not isinstance(item[0], str):
                    raise TypeError("named parameters must be (name, Parameter) pairs, but got "
                                    f"{item!r:.80}")
                names.append(item[0])
                tensors.append(item[1])
            else:
                tensors.append(item)
        if names and len(names) != len(tensors):
            raise ValueError("all optimizer params should be with/without names. Some param names "
                             "are missing")
        for p in tensors:
            if not isinstance(p, Parameter):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + typename(p))
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization "
                                 f"parameter {name}")
        if len({id(p) for p in tensors}) != len(tensors):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error; see "
                          "github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
        seen: set[int] = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if bool(names) != ("param_names" in group):
                txt = "with names" if names else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {txt} to the optimizer")
        if any(id(p) in seen for p in tensors):
            raise ValueError("some parameters appear in more than one parameter group")
        new_group: dict[str, Any] = {"params": ParamList(tensors)}
        if names:
            new_group["param_names"] = names
        for key, value in param_group.items():
            if key not in ("params", "param_names"):
                new_group[key] = value
        for name, default in self.defaults.items():
            new_group.setdefault(name, default)
        self._check_group(new_group)
        self._add_group(new_group)

    def _check_group(self, group: dict[str, Any]) -> None:
        """Raise if ``group``'s hyperparameters are invalid (subclasses override; before any change)."""

    def _add_group(self, group: dict[str, Any]) -> None:
        """Append a validated group (subclasses extend this to set up storage)."""
        self.param_groups.append(group)

    # ---- stepping -------------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimized parameters (to None, or to zeros in place)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p._grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p._grad.fill(0)
                        forget_rows(p)  # a sparse Embedding's gradient has no rows looked up now

    def step(self, closure: Callable[[], Any] | None = None):
        """Perform one optimization step; subclasses implement it."""
        raise NotImplementedError

    def fuse_with_backward(self, loss: Tensor) -> None:
        """``loss.backward(); self.step()`` -- the same values, bit for bit -- as one plan run
        that steps each parameter as soon as its gradient is final (ggml's ``gb_opt``), when
        nothing needs the gradients between the two; otherwise exactly those two calls.  See
        ``tinyopt.optim.in_plan`` for when it fuses (gradients reset, no step pre-hooks...):
        only a ``FusedOptimizer`` does; this base takes the two calls."""
        loss.backward()
        self.step()

    # ---- hooks ----------------------------------------------------------------------------------
    @staticmethod
    def _register(hooks: OrderedDict, hook: Callable, prepend: bool = False) -> RemovableHandle:
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        if prepend:
            hooks.move_to_end(handle.id, last=False)
        return handle

    def register_step_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(optimizer, args, kwargs) -> None | (new_args, new_kwargs)`` runs before ``step``."""
        return self._register(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(optimizer, args, kwargs) -> None`` runs after ``step``."""
        return self._register(self._optimizer_step_post_hooks, hook)

    def register_state_dict_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer) -> None`` runs before ``state_dict`` builds its result."""
        return self._register(self._optimizer_state_dict_pre_hooks, hook, prepend)

    def register_state_dict_post_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer, state_dict) -> state_dict | None`` may edit or replace the result."""
        return self._register(self._optimizer_state_dict_post_hooks, hook, prepend)

    def register_load_state_dict_pre_hook(self, hook: Callable,
                                          prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer, state_dict) -> state_dict | None`` runs before loading (on a shallow copy)."""
        return self._register(self._optimizer_load_state_dict_pre_hooks, hook, prepend)

    def register_load_state_dict_post_hook(self, hook: Callable,
                                           prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer) -> None`` runs after loading."""
        return self._register(self._optimizer_load_state_dict_post_hooks, hook, prepend)

    # ---- state dict -----------------------------------------------------------------------------
    def _state_items(self) -> Iterable[tuple[Parameter, dict[str, Any]]]:
        """(parameter, state dict) pairs of the live state, in the order to save them."""
        return self.state.items()

    def state_dict(self) -> StateDict:
        """The optimizer state in PyTorch's layout, as a snapshot (later steps do not change it).

        ``state`` maps integer ids (numbered across groups in order) to per-parameter dicts of
        Tensors (``step`` a 0-d float32 Tensor) holding copies of the state; ``param_groups``
        holds every hyperparameter, ``param_names`` when the parameters were given with names,
        and ``params`` as ids.  (PyTorch returns the live state tensors, so a dict taken mid-run
        changes as training goes on unless deep-copied; tinyopt's is a snapshot.)
        """
        for hook in list(self._optimizer_state_dict_pre_hooks.values()):
            hook(self)
        index: dict[int, int] = {}
        groups = []
        start = 0
        for group in self.param_groups:
            packed = {k: copy.deepcopy(v) for k, v in group.items() if k != "params"}
            # as torch: a parameter listed twice in a group gets the index of its last listing
            index.update({id(p): i for i, p in enumerate(group["params"], start)
                          if id(p) not in index})
            packed["params"] = [index[id(p)] for p in group["params"]]
            start += len(packed["params"])
            groups.append(packed)
        packed_state: dict[Any, Any] = {}
        for key, value in self._state_items():
            k = index[id(key)] if isinstance(key, Parameter) else key
            packed_state[k] = _copy_state(value)
        if all(isinstance(k, int) for k in packed_state):
            packed_state = dict(sorted(packed_state.items()))
        sd = {"state": packed_state, "param_groups": groups}
        for hook in list(self._optimizer_state_dict_post_hooks.values()):
            result = hook(self, sd)
            if result is not None:
                sd = result
        return sd

    def load_state_dict(self, state_dict: StateDict) -> None:
        """Load a state dict made by :meth:`state_dict` (or PyTorch's, with tensors as numpy arrays).

        Checks and converts everything before changing anything (a rejected dict leaves the
        optimizer as it was): the number of groups and their sizes (as PyTorch), the
        hyperparameters, that every state entry belongs to a parameter of the dict's groups,
        that every state array has its parameter's shape, that scalar state (``step``...) is a
        valid number, and what a subclass requires of the state.  Matches parameters by name
        when both sides have ``param_names``, by position otherwise.  Arrays are copied (cast to
        the parameter's dtype; scalar state becomes 0-d float32).
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"load_state_dict expects a dict, but got {typename(state_dict)}")
        state_dict = state_dict.copy()
        for hook in list(self._optimizer_load_state_dict_pre_hooks.values()):
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        self._load_checked(state_dict)
        for hook in list(self._optimizer_load_state_dict_post_hooks.values()):
            hook(self)

    def _load_checked(self, state_dict: StateDict) -> None:
        """Check and convert ``state_dict`` entirely, then install it (load_state_dict's work)."""
        for key, kind in (("state", dict), ("param_groups", list)):
            if key not in state_dict:
                raise ValueError(f"loaded state dict has no '{key}' entry")
            if not isinstance(state_dict[key], kind):
                raise ValueError(f"loaded state dict: '{key}' must be a {kind.__name__}, got "
                                 f"{typename(state_dict[key])}")
        groups = self.param_groups
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for i, s in enumerate(saved_groups):
            if not isinstance(s, dict) or not isinstance(s.get("params"), (list, tuple)):
                raise ValueError(f"loaded state dict: param_groups[{i}] must be a dict with a "
                                 "'params' list")
        for s in saved_groups:  # an older torch's dict: what it lacks, as torch's __setstate__
            self._fill_legacy(s)
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the "
                             "size of optimizer's group")
        id_map = self._match_params(groups, saved_groups)
        names = {}
        for g in groups:
            for i, p in enumerate(g["params"]):
                names[id(p)] = repr(g["param_names"][i]) if "param_names" in g else None
        new_groups = []
        for g, s in zip(groups, saved_groups):
            s["params"] = g["params"]
            if "param_names" in g and "param_names" not in s:
                s["param_names"] = g["param_names"]
            elif "param_names" in g:
                s["param_names"] = list(g["param_names"])
            new_groups.append(s)
        labels = {id(p): names[id(p)] or str(k) for k, p in id_map.items()}
        scalar_keys = self._scalar_keys()
        state: defaultdict = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k not in id_map:
                if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                    raise ValueError(f"loaded state dict has state for parameter {k}, which is not "
                                     f"in its param_groups (params {sorted(id_map, key=str)})")
                state[k] = copy.deepcopy(v)
                continue
            p = id_map[k]
            label = labels[id(p)]
            if not isinstance(v, dict):
                raise ValueError(f"load_state_dict: state of parameter {label} must be a dict, got "
                                 f"{typename(v)}")
            state[p] = {key: self._cast_loaded(p, key, value, label, key in scalar_keys)
                        for key, value in v.items()}
        for s in new_groups:
            self._check_group(s)
        self._check_loaded_state(state, new_groups, labels)
        self._set_state(state, new_groups)

    _legacy_defaults: dict[str, Any] = LEGACY_DEFAULTS

    def _fill_legacy(self, group: dict[str, Any]) -> None:
        """Give a loaded ``group`` the hyperparameters of this optimizer that torch added later
        (``maximize``, ``foreach``...) and that it lacks, with torch's ``__setstate__`` values."""
        for key, value in self._legacy_defaults.items():
            if key in self.defaults:
                group.setdefault(key, value)

    def _scalar_keys(self) -> tuple[str, ...]:
        """State keys that hold one number per parameter (loaded as 0-d float32 arrays)."""
        return ("step",)

    def _cast_loaded(self, p: Parameter, key, value, label: str, scalar: bool):
        """A checked copy of one loaded state value (subclasses whose state is not shaped like
        its parameter, as L-BFGS's, override this)."""
        return cast_state(p, key, value, label, scalar)

    @staticmethod
    def _match_params(groups: list[dict], saved_groups: list[dict]) -> dict[Any, Parameter]:
        """Saved id -> live parameter: by name when both sides carry ``param_names``, else by order."""
        id_map: dict[Any, Parameter] = {}
        for gi, (g, s) in enumerate(zip(groups, saved_groups)):
            if "param_names" in g and "param_names" in s:
                saved_names = list(s["param_names"])
                if len(saved_names) != len(s["params"]):
                    raise ValueError(f"loaded state dict: group {gi} has {len(saved_names)} "
                                     f"param_names for {len(s['params'])} params")
                by_name = dict(zip(g["param_names"], g["params"]))
                if len(by_name) != len(g["params"]) or len(set(saved_names)) != len(saved_names):
                    raise ValueError(f"cannot match parameters by name in group {gi}: names are "
                                     "not unique")
                missing = sorted(set(saved_names) - set(by_name))
                if missing:
                    raise ValueError(f"loaded state dict: group {gi} has parameters {missing} that "
                                     f"the optimizer does not have")
                for name, pid in zip(saved_names, s["params"]):
                    id_map[pid] = by_name[name]
            else:
                id_map.update(zip(s["params"], g["params"]))
        return id_map

    def _check_loaded_state(self, state: dict, groups: list[dict], labels: dict[int, str]) -> None:
        """Raise if the (already cast) loaded ``state`` does not fit; subclasses add their rules.

        ``labels`` names each parameter for messages (its name, or its id in the saved dict).
        """

    def _set_state(self, state: defaultdict, groups: list[dict]) -> None:
        """Install a validated, copied state and groups (subclasses copy into their storage)."""
        self.state = state
        self.param_groups = groups


def _unpickle(cls: type, defaults: dict, groups: list[dict], saved: list[tuple],
              state: list[tuple]) -> Optimizer:
    """An unpickled optimizer: new Parameters with the saved values, then ``_restore``."""
    params = []
    for data, grad, requires_grad, *name in saved:  # (pickles before names were kept: no name)
        p = Parameter(data, requires_grad=requires_grad)
        if name:
            p.name = name[0]
        if grad is not None:
            p.grad = grad
        params.append(p)
    opt = cls.__new__(cls)
    opt._restore(defaults, [dict(g, params=[params[i] for i in g["params"]]) for g in groups],
                 {params[i] if i is not None else k: v for i, k, v in state})
    return opt


def _copy_state(value):
    """A deep copy of a per-parameter state value with arrays and Tensors copied (never aliasing
    live state)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, Tensor):
        return leaf(np.array(np.asarray(value), copy=True))
    if isinstance(value, dict):
        return {k: _copy_state(v) for k, v in value.items()}
    return copy.deepcopy(value)


def cast_state(p: Parameter, key, value, label: str, scalar: bool):
    """A copy of one loaded state value: arrays in the parameter's dtype (float32 for a float16
    or bfloat16 parameter), scalar state (``step``, ``mu_product``...) as a 0-d float32 array.

    Array-like values that are not numpy arrays (e.g. torch tensors) are converted with
    ``np.asarray``; other Python values are copied as they are.  Raises ValueError for what cannot
    be installed, so that nothing changes before every value is known to fit.
    """
    if scalar:
        return cast_scalar(value, key, f"load_state_dict: parameter {label} has state {key!r}")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if not isinstance(value, np.ndarray):
        if hasattr(value, "__array__") or isinstance(value, (list, tuple)):
            try:
                value = np.asarray(value)
            except Exception as e:  # noqa: BLE001 - report what could not be read
                raise ValueError(f"load_state_dict: parameter {label} has state {key!r} that is not "
                                 f"an array: {e}") from None
        else:
            return copy.deepcopy(value)
    if value.dtype.kind not in "fiub" and value.dtype.name != "bfloat16":
        raise ValueError(f"load_state_dict: parameter {label} has state {key!r} of dtype "
                         f"{value.dtype}, expected a numeric array")
    if value.shape != p.shape:
        raise ValueError(f"load_state_dict: parameter {label} has state {key!r} of shape "
                         f"{value.shape}, expected {p.shape}")
    dtype = np.dtype(p.dtype)
    if dtype.name in ("float16", "bfloat16"):  # their state (and master weights) are float32
        dtype = np.dtype(np.float32)
    elif dtype.kind != "f":
        dtype = value.dtype
    return np.array(value, dtype=dtype, copy=True)


def cast_scalar(value, key, where: str) -> np.ndarray:
    """One number of scalar state as a 0-d float32 array; ``step`` must be a whole number >= 0.

    ``where`` starts the error messages (``load_state_dict: parameter 'w' has state 'step'``)."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, bytes)):
        raise ValueError(f"{where} of type {typename(value)}, expected a number")
    if isinstance(value, (int, float)):
        try:
            x = float(value)
        except OverflowError:
            x = float("inf")
    else:
        try:
            arr = np.asarray(value)
        except Exception as e:  # noqa: BLE001 - report what could not be read
            raise ValueError(f"{where} that is not a number: {e}") from None
        if arr.size != 1:
            raise ValueError(f"{where} of shape {arr.shape}, expected a scalar")
        if arr.dtype.kind not in "fiu":
            raise ValueError(f"{where} of dtype {arr.dtype}, expected a number")
        x = float(arr.reshape(()))
    if not np.isfinite(x) or abs(x) > float(np.finfo(np.float32).max):
        raise ValueError(f"{where} = {value!r:.40}, expected a finite float32 number")
    if key == "step" and (x < 0 or x != int(x)):
        raise ValueError(f"{where} = {x}, expected a whole number >= 0 (a step count)")
    return np.array(x, dtype=np.float32)
