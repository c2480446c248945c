"""8-bit optimizer state: bitsandbytes' ``Adam8bit``, ``AdamW8bit``, ``Lion8bit`` and ``SGD8bit``.

Each quantized state tensor is kept as one byte per element plus one float32 per block of 256
(``kernels/quant8.py``: blockwise dynamic quantization, Dettmers et al. 2022,
https://arxiv.org/abs/2110.02861): Adam's two moments take 2.03 bytes per parameter where
float32 Adam's take 8.  A parameter smaller than ``min_8bit_size`` (4096 elements) keeps float32
state, as bitsandbytes.  The group's parameters and gradients live in
:class:`~tinyopt.optim.flat.FlatBuffer` s (16-bit parameters with float32 masters, as every
fused optimizer); the step is one kernel call per group and dtype that dequantizes, updates and
requantizes each block in one pass.

``state[p]`` and the state dict hold bitsandbytes' keys: ``step``, ``state1`` (uint8, or
float32 for a small parameter), ``absmax1``, ``qmap1`` (the code) and, for Adam, ``state2``,
``absmax2``, ``qmap2``; a state dict saves the quantized state and loads it exactly (and a
bitsandbytes state dict, whose codes match these to an ulp, loads too).
``ZeroRedundancyOptimizer(params, optimizer_class=AdamW8bit)`` shards the quantized state
(shards cut parameters at block boundaries: each rank's pieces step bit for bit as the plain
optimizer's parameters, and the consolidated state dict is the plain optimizer's).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyopt.engine.tensor import Parameter, leaf
from tinyopt.kernels import quant8
from tinyopt.kernels.optim import LOW_MODES
from tinyopt.optim.adam import check_adam_hyperparameters
from tinyopt.optim.flat import FlatBuffer
from tinyopt.optim.optimizer import Optimizer, call_closure, cast_state

CODES = {"signed": quant8.dynamic_map(True), "unsigned": quant8.dynamic_map(False)}
for _code in CODES.values():
    _code.flags.writeable = False
_BNB = "__bnb_optimizer_quant_state__"


@functools.cache
def _tables() -> tuple[np.ndarray, ...]:
    """The kernels' codes and the quantizer's lookup tables (512 KiB a code), made at the first
    8-bit step: ``(code1, code2, table1, table2)``."""
    return (CODES["signed"], CODES["unsigned"], quant8.tables(CODES["signed"]),
            quant8.tables(CODES["unsigned"]))


_LAYOUT = {"state1": "element", "state2": "element", "absmax1": "block", "absmax2": "block",
           "qmap1": "shared", "qmap2": "shared"}


def _cast_8bit_state(key: str, value, shape: tuple[int, ...], quantized: bool, label: str):
    """A checked copy of a loaded quantized-state entry of a parameter of ``shape``:
    ``state1``/``state2``: uint8 shaped as the parameter (float32 when it is not ``quantized``,
    below ``min_8bit_size``); ``absmax1``/``absmax2``: one float32 per block of 256;
    ``qmap1``/``qmap2``: this optimizer's code (bitsandbytes', to an ulp)."""
    where = f"load_state_dict: parameter {label} has state {key!r}"
    arr = np.asarray(value)
    if key.startswith("qmap"):
        code = CODES["unsigned" if key == "qmap2" else "signed"]
        if arr.shape != code.shape or not np.allclose(arr, code, rtol=2 ** -22, atol=0):
            raise ValueError(f"{where} that is not this optimizer's quantization map")
        return code
    if key.startswith("absmax"):
        n = -(-int(np.prod(shape)) // quant8.BLOCK)
        if not quantized or arr.shape != (n,) or arr.dtype.kind != "f":
            raise ValueError(f"{where} of shape {arr.shape}, expected ({n},) float32 (one "
                             f"per block of {quant8.BLOCK}; none for a float32-state "
                             f"parameter)")
        return np.array(arr, np.float32)
    want = np.uint8 if quantized else np.float32
    if arr.shape != shape or (arr.dtype != want and not (
            want == np.float32 and arr.dtype.kind == "f")):
        raise ValueError(f"{where} of shape {arr.shape} and dtype {arr.dtype}, expected "
                         f"{shape} {np.dtype(want)} (parameters of "
                         f"{'at least' if quantized else 'under'} min_8bit_size elements)")
    return np.array(arr, want)


class _Store:
    """The 8-bit state of one FlatBuffer: quantized (``q1``, ``q2``, ``a1``, ``a2``) for its
    parameters of ``min_size`` elements or more (``whole``: each one's size, or the size of the
    parameter it is a piece of), float32 (``f1``, ``f2``) for the others, at offsets of their
    own; the block table and the kernel's scratch."""

    def __init__(self, fb: FlatBuffer, min_size: int, two: bool, whole: np.ndarray) -> None:
        self.fb = fb
        sizes = fb.sizes
        self.kind8 = (whole >= min_size).astype(np.uint8)  # (whole: see _Blockwise8bit)
        eight = self.kind8.astype(bool)
        self.off = np.zeros(len(sizes), np.int64)
        for mask in (eight, ~eight):  # each kind's parameters end to end in its own arrays
            self.off[mask] = np.cumsum(sizes[mask]) - sizes[mask]
        n8, n32 = int(sizes[eight].sum()), int(sizes[~eight].sum())
        self.q1 = np.zeros(n8, np.uint8)
        self.q2 = np.zeros(n8 if two else 0, np.uint8)
        self.f1 = np.zeros(n32, np.float32)
        self.f2 = np.zeros(n32 if two else 0, np.float32)
        nblocks = -(-sizes // quant8.BLOCK)
        self.bseg = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(nblocks, out=self.bseg[1:])
        nb = int(self.bseg[-1])
        self.bj = np.repeat(np.arange(len(sizes), dtype=np.int64), nblocks)
        k = np.arange(nb, dtype=np.int64) - self.bseg[:-1][self.bj]  # block k of its parameter
        self.blo = fb.seg[:-1][self.bj] + quant8.BLOCK * k
        self.bhi = np.minimum(self.blo + quant8.BLOCK, fb.seg[1:][self.bj])
        self.boff = self.off[self.bj] + quant8.BLOCK * k
        self.a1 = np.zeros(nb, np.float32)
        self.a2 = np.zeros(nb if two else 0, np.float32)
        chunks = -(-nb // quant8.BLOCKS_PER_CHUNK)
        self.scratch = np.zeros((chunks, 2, quant8.BLOCK), np.float32)
        self.two = two

    def views(self, j: int) -> dict[str, np.ndarray]:
        """Parameter ``j``'s state, by bitsandbytes' names (views, shaped)."""
        shape = tuple(self.fb.params[j].shape)
        o, n = int(self.off[j]), int(self.fb.sizes[j])
        b0, b1 = int(self.bseg[j]), int(self.bseg[j + 1])
        names = ("1", "2") if self.two else ("1",)
        out: dict[str, np.ndarray] = {}
        for s in names:
            if self.kind8[j]:
                out["state" + s] = getattr(self, "q" + s)[o:o + n].reshape(shape)
                out["absmax" + s] = getattr(self, "a" + s)[b0:b1]
                out["qmap" + s] = CODES["unsigned" if s == "2" else "signed"]
            else:
                out["state" + s] = getattr(self, "f" + s)[o:o + n].reshape(shape)
        return out

    def reset(self, j: int) -> None:
        """Parameter ``j``'s state back to its start (step 0, zero moments)."""
        self.fb.steps[j] = 0
        for name, view in self.views(j).items():
            if not name.startswith("qmap"):
                view[...] = 0


class _Blockwise8bit(Optimizer):
    """The machinery of the 8-bit optimizers (see the module docstring).

    ZeRO-1 (``ZeroRedundancyOptimizer``) runs one on pieces of parameters: it cuts parameters
    only at multiples of ``_shard_block`` elements, so a piece's blocks are the whole
    parameter's, and gives each local group ``"_whole_numel"`` (the size of the parameter each
    piece belongs to), so a piece is quantized exactly when its parameter is; then a piece
    steps bit for bit as its part of the whole parameter does.  ``_state_layout`` says how the
    pieces' state joins into the whole's."""

    algorithm = ""  # in kernels.quant8.ALGORITHMS
    two_states = True
    _shard_block = quant8.BLOCK

    def __init__(self, params: Iterable, defaults: dict[str, Any]) -> None:
        self._stores: list[list[_Store]] = []
        self._index: dict[int, tuple[_Store, int]] = {}  # id(p) -> its store and position
        super().__init__(params, defaults)

    def _restore(self, defaults, groups, state) -> None:
        self._stores, self._index = [], {}
        super()._restore(defaults, groups, state)

    # ---- groups ---------------------------------------------------------------------------------
    def _check_group(self, group: dict[str, Any]) -> None:
        for p in group["params"]:
            dt = np.dtype(p.dtype)
            if dt != np.float32 and dt.name not in LOW_MODES:
                raise TypeError(f"{type(self).__name__} keeps float32 (and 8-bit) state: it "
                                f"optimizes float32, float16 and bfloat16 parameters, but one "
                                f"has dtype {dt}")
        if not 0 <= group["min_8bit_size"]:
            raise ValueError(f"Invalid min_8bit_size value: {group['min_8bit_size']}")
        self._validate(group)

    def _validate(self, group: dict[str, Any]) -> None:
        """Raise ValueError for an invalid hyperparameter of ``group``."""

    def _fill_legacy(self, group: dict[str, Any]) -> None:
        """A loaded group without some of this optimizer's hyperparameters (bitsandbytes' groups
        have no ``min_8bit_size``) takes their defaults."""
        for key, value in self.defaults.items():
            group.setdefault(key, value)

    def _add_group(self, group: dict[str, Any]) -> None:
        super()._add_group(group)
        by_dtype: dict[np.dtype, list[Parameter]] = {}
        seen: set[int] = set()
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                by_dtype.setdefault(np.dtype(p.dtype), []).append(p)
        whole = {id(p): n for p, n in zip(group["params"], group.get("_whole_numel", ()))}
        stores = [_Store(FlatBuffer(ps, dt), int(group["min_8bit_size"]), self.two_states,
                         np.array([whole.get(id(p), p.numel()) for p in ps], np.int64))
                  for dt, ps in by_dtype.items()]
        self._stores.append(stores)
        for st in stores:
            self._index.update({id(p): (st, j) for j, p in enumerate(st.fb.params)})

    def _host(self, group: dict[str, Any]) -> dict[str, Any]:
        """The named host scalars of the kernel (see ``kernels/quant8.py``)."""
        raise NotImplementedError

    # ---- stepping -------------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any] | None = None):
        """One step: one kernel call per group and dtype.

        Args:
            closure: optional; re-evaluates the model and returns the loss, which ``step``
                returns.
        """
        loss = call_closure(closure)
        for group, stores in zip(self.param_groups, self._stores):
            host = self._host(group)
            for st in stores:
                fb = st.fb
                on = fb.flags != 0
                if not on.any():
                    continue
                for j in np.flatnonzero(on & ~fb.started):
                    self._bind(st, int(j))
                fb.steps[on] += np.float32(1)
                kernel = quant8.step[self.algorithm, fb.mode]
                # (the group as one flat vector: the parameters' own when end to end, else a
                # copy written back; the gradients are read where they lie)
                storage = fb.gather_params()
                q = storage.view(np.uint16) if fb.mode else np.zeros(0, np.uint16)
                kernel(q, fb.data, fb.slots.grad_addr, fb.seg, st.q1, st.q2, st.f1, st.f2, st.a1,
                       st.a2, *_tables(), st.bj, st.blo, st.bhi, st.boff, st.kind8, fb.flags,
                       fb.steps,
                       fb.host(host, ("lr", "beta1", "beta2", "eps_wide")), st.scratch, fb.coef)
                fb.scatter_params()
        return loss

    def _bind(self, st: _Store, j: int) -> None:
        """Create parameter ``j``'s ``state`` entry: views of its state, as Tensors."""
        fb = st.fb
        entry = {"step": leaf(fb.scalars[j, 0, ...])}
        entry.update({k: leaf(v) for k, v in st.views(j).items()})
        if fb.mode:
            entry["master_param"] = leaf(fb.view(fb.data, j))
        self.state[fb.params[j]] = entry
        fb.started[j] = True

    # ---- state dict -----------------------------------------------------------------------------
    def _load_checked(self, state_dict) -> None:
        """bitsandbytes' state dicts nest the quantized state of a parameter in a dict under
        ``__bnb_optimizer_quant_state__``: taken out before the checks."""
        state = state_dict.get("state")
        if isinstance(state, dict) and any(isinstance(s, dict) and _BNB in s
                                           for s in state.values()):
            state = {k: ({**{n: v for n, v in s.items() if n != _BNB}, **s[_BNB]}
                         if isinstance(s, dict) and isinstance(s.get(_BNB), dict) else s)
                     for k, s in state.items()}
            state_dict = dict(state_dict, state=state)
        super()._load_checked(state_dict)

    def _cast_loaded(self, p, key, value, label: str, scalar: bool):
        if key not in _LAYOUT:
            return cast_state(p, key, value, label, scalar)
        st, j = self._index[id(p)]
        return _cast_8bit_state(key, value, tuple(p.shape), bool(st.kind8[j]), label)

    @staticmethod
    def _state_layout(key: str) -> str:
        """How a state entry relates to its parameter's elements: ``"element"`` (one per
        element, shaped as the parameter), ``"block"`` (one per block of ``_shard_block``),
        ``"shared"`` (the same for every parameter: the codes) or ``"scalar"`` (``step``)."""
        return _LAYOUT.get(key, "scalar" if key == "step" else "element")

    @classmethod
    def _cast_whole(cls, group: dict[str, Any], p, key, value, label: str, scalar: bool):
        """``_cast_loaded`` for a parameter ``p`` of ``group`` that this optimizer does not hold
        (ZeRO checks the whole parameter's state before cutting it into pieces)."""
        if key not in _LAYOUT:
            return cast_state(p, key, value, label, scalar)
        return _cast_8bit_state(key, value, tuple(p.shape),
                                p.numel() >= group["min_8bit_size"], label)

    def _check_loaded_state(self, state, groups, labels) -> None:
        for group in groups:
            for p in group["params"]:
                s = state.get(p)
                if not s:
                    continue
                st, j = self._index[id(p)]
                need = ["step", "state1"] + (["state2"] if self.two_states else [])
                if st.kind8[j]:
                    need += ["absmax1"] + (["absmax2"] if self.two_states else [])
                missing = [k for k in need if s.get(k) is None]
                if missing:
                    raise ValueError(f"load_state_dict: parameter {labels.get(id(p), '?')} has no "
                                     f"state {missing[0]!r} ({type(self).__name__} keeps {need})")

    def _set_state(self, state, groups) -> None:
        self.param_groups = groups
        self.state = type(self.state)(dict)
        for p_or_key, value in state.items():
            if not isinstance(p_or_key, Parameter):
                self.state[p_or_key] = value
        for stores in self._stores:
            for st in stores:
                fb = st.fb
                fb.started[:] = False
                for j, p in enumerate(fb.params):
                    st.reset(j)
                    s = state.get(p) or {}
                    if fb.mode:
                        master = s.get("master_param")
                        fb.view(fb.data, j)[...] = (fb.param_view(j) if master is None
                                                    else np.asarray(master))
                    if not s:
                        continue
                    views = st.views(j)
                    for k, v in s.items():
                        if k == "step":
                            fb.steps[j] = np.asarray(v)
                        elif k in views and not k.startswith("qmap"):
                            views[k][...] = np.asarray(v)
                    self._bind(st, j)


class Adam8bit(_Blockwise8bit):
    r"""Adam with 8-bit state (Dettmers et al. 2022, https://arxiv.org/abs/2110.02861) as
    ``bitsandbytes.optim.Adam8bit`` computes it: the moments of a parameter of
    ``min_8bit_size`` elements or more are kept blockwise quantized (256 per block, the signed
    dynamic code for :math:`m`, the unsigned for :math:`v`), dequantized, updated and
    requantized in the step's one pass:

    .. math::
        m &= \beta_1 m + (1 - \beta_1) g, \qquad v = \beta_2 v + (1 - \beta_2) g^2, \qquad
        \theta \leftarrow \theta (1 - \gamma\lambda) \\
        \theta &\leftarrow \theta - \gamma\frac{\sqrt{1 - \beta_2^t}}{1 - \beta_1^t}
        \frac{m}{\sqrt v + \epsilon\sqrt{1 - \beta_2^t}}

    (as bitsandbytes' GPU kernels and its 32-bit state compute it; its CPU backend's 8-bit
    path divides twice, :math:`m / (\sqrt v / \sqrt{1 - \beta_2^t} + \epsilon)`: the same
    update up to rounding; weight decay decoupled, as bitsandbytes' 8-bit Adam).  State
    (bitsandbytes' names):
    ``step``, ``state1`` (m), ``state2`` (v), ``absmax1``, ``absmax2``, ``qmap1``, ``qmap2``:
    2.03 bytes per parameter where ``Adam`` keeps 8.  ``amsgrad=True`` is not supported
    (as bitsandbytes); ``optim_bits``, ``args`` and ``is_paged`` are accepted and ignored.  A
    NaN in a block's moment makes the whole block NaN (bitsandbytes' quantizer drops it).

    Example::

        opt = Adam8bit(model.parameters(), lr=1e-3)
    """

    algorithm = "adam"
    _elementwise = True  # (for ZeroRedundancyOptimizer: see _Blockwise8bit)

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, optim_bits: int = 32,
                 args: Any = None, min_8bit_size: int = 4096, is_paged: bool = False) -> None:
        if amsgrad:
            raise ValueError(f"{type(self).__name__}: amsgrad=True is not supported (as "
                             "bitsandbytes' 8-bit Adam)")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        min_8bit_size=min_8bit_size)
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        check_adam_hyperparameters(group["lr"], group["eps"], group["betas"],
                                   group["weight_decay"])

    def _host(self, group: dict[str, Any]) -> dict[str, Any]:
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        return dict(lr=lr, beta1=b1, beta2=b2, eps_wide=float(group["eps"]), b1=b1,
                    one_minus_b1=1.0 - b1, b2=b2, one_minus_b2=1.0 - b2,
                    decay=1.0 - lr * wd if wd > 0 else 1.0)


class AdamW8bit(Adam8bit):
    r"""AdamW (Loshchilov & Hutter 2019, https://arxiv.org/abs/1711.05101) with 8-bit state
    (Dettmers et al. 2022, https://arxiv.org/abs/2110.02861) as
    ``bitsandbytes.optim.AdamW8bit``: :class:`Adam8bit` (whose weight decay is decoupled
    already: :math:`\theta \leftarrow \theta (1 - \gamma\lambda)` before the Adam update)
    with ``weight_decay=1e-2`` by default.

    Example::

        opt = AdamW8bit(model.parameters(), lr=1e-3, weight_decay=1e-2)
    """

    _elementwise = True

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, optim_bits: int = 32,
                 args: Any = None, min_8bit_size: int = 4096, is_paged: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, optim_bits, args,
                         min_8bit_size, is_paged)


class Lion8bit(_Blockwise8bit):
    r"""Lion (Chen et al. 2023, https://arxiv.org/abs/2302.06675) with 8-bit state (Dettmers
    et al. 2022, https://arxiv.org/abs/2110.02861) as ``bitsandbytes.optim.Lion8bit`` computes
    it:

    .. math::
        \theta \leftarrow \theta (1 - \gamma\lambda) - \gamma\,
        \mathrm{sign}(\beta_1 m + (1 - \beta_1) g), \qquad m \leftarrow \beta_2 m + (1 - \beta_2) g

    with :math:`m` blockwise quantized with the signed dynamic code when the parameter has
    ``min_8bit_size`` elements or more: 1.02 bytes of state per parameter.  State:
    ``step``, ``state1`` (m), ``absmax1``, ``qmap1``.  ``args`` and ``is_paged`` are accepted
    and ignored.

    Example::

        opt = Lion8bit(model.parameters(), lr=1e-4, weight_decay=1e-2)
    """

    algorithm = "lion"
    two_states = False
    _elementwise = True

    def __init__(self, params: Iterable, lr: float = 1e-4,
                 betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0,
                 args: Any = None, min_8bit_size: int = 4096, is_paged: bool = False) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay,
                        min_8bit_size=min_8bit_size)
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        for k, b in enumerate(group["betas"]):
            if not 0.0 <= b <= 1.0:
                raise ValueError(f"Invalid beta parameter at index {k}: {b}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")

    def _host(self, group: dict[str, Any]) -> dict[str, Any]:
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        return dict(lr=lr, beta1=b1, beta2=b2, eps_wide=0.0, b1=b1, one_minus_b1=1.0 - b1,
                    b2=b2, one_minus_b2=1.0 - b2, decay=1.0 - lr * wd if wd > 0 else 1.0,
                    neg_lr=-lr, one=1.0, zero=0.0)


class SGD8bit(_Blockwise8bit):
    r"""SGD with momentum and 8-bit state (Dettmers et al. 2022,
    https://arxiv.org/abs/2110.02861) as ``bitsandbytes.optim.SGD8bit`` computes it:
    :math:`g \leftarrow g + \lambda\theta`, :math:`b = g` at the first step, else
    :math:`b = \mu b + g` (no dampening), :math:`\theta \leftarrow \theta - \gamma b`; :math:`b`
    blockwise quantized with the signed dynamic code when the parameter has ``min_8bit_size``
    elements or more (1.02 bytes per parameter).  ``momentum`` must be > 0 and ``dampening``
    0, ``nesterov`` False (ValueError, as bitsandbytes).  State: ``step``, ``state1`` (the
    momentum buffer), ``absmax1``, ``qmap1``.

    Example::

        opt = SGD8bit(model.parameters(), lr=0.1, momentum=0.9)
    """

    algorithm = "momentum"
    two_states = False
    _elementwise = True

    def __init__(self, params: Iterable, lr: float, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, args: Any = None,
                 min_8bit_size: int = 4096) -> None:
        if momentum == 0:
            raise NotImplementedError("SGD without momentum is not supported!")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, min_8bit_size=min_8bit_size)
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if not 0.0 < group["momentum"]:
            raise ValueError(f"Invalid momentum value: {group['momentum']}")
        if group["dampening"] != 0 or group["nesterov"]:
            raise ValueError("SGD8bit: dampening and nesterov are not supported (as "
                             "bitsandbytes)")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")

    def _host(self, group: dict[str, Any]) -> dict[str, Any]:
        wd = float(group["weight_decay"])
        return dict(lr=float(group["lr"]), beta1=0.0, beta2=0.0, eps_wide=0.0,
                    b1=group["momentum"], weight_decay=wd, wd_on=float(wd > 0),
                    neg_lr=-group["lr"])
