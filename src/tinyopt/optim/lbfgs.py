"""L-BFGS with an optional strong-Wolfe line search (``torch.optim.LBFGS``).

The group's parameters and gradients live in :class:`~tinyopt.optim.flat.FlatBuffer` s (one per
dtype), so L-BFGS's vectors are flat arrays and every piece of its algebra (the gradient
gathered, the two-loop recursion, ``x <- x + t d``) is one call over the whole group, never a loop
over parameters: the recursion's steps are the fused in-place kernels of
:mod:`tinyopt.kernels.lbfgs` (``y <- y + a x`` and the next dot product in one pass), whose dot
products sum in one fixed order (float64 partial sums, whatever the threads; PyTorch's BLAS dot
sums in an order of its own, so the last bits of a dot differ from it).  Scalars (``y's``,
``H_diag``, ``t``...) are numpy scalars of the vectors' dtype, so they round as PyTorch's 0-d
tensors do (NEP 50: a Python float does not widen them).

dtypes, as PyTorch: the flat vectors have the promoted dtype of the parameters (``torch.cat``
promotes: float32 and float64 parameters give float64 vectors), in the parameters' order, and
``x <- x + t d`` computes in that dtype and stores in each parameter's own.  float16/bfloat16
parameters get float32 master weights, as every tinyopt optimizer (``docs/low_precision.md``):
the masters take the steps, and the 16-bit parameters the model reads are their roundings,
rewritten after every change (the closure sees what PyTorch's 16-bit run would, up to the
masters' extra precision).  Each 16-bit parameter's masters are its ``state[p]["master_param"]``
(float32, as the fused optimizers keep them), so they are saved, copied and restored with the
state and a resumed run continues bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyopt.kernels import lbfgs as vec
from tinyopt.kernels.optim import LOW_MODES
from tinyopt.optim.flat import FlatBuffer
from tinyopt.optim.fused import MASTER
from tinyopt.optim.optimizer import Optimizer, call_closure, cast_state, typename

_INT_STATE = ("func_evals", "n_iter")
_VECTOR_STATE = ("d", "prev_flat_grad")
_LIST_STATE = ("old_dirs", "old_stps")
_NUMBER_STATE = ("t", "H_diag", "prev_loss")
_NUMBER_LIST_STATE = ("ro", "al")


class LBFGS(Optimizer):
    r"""L-BFGS (Nocedal 1980, https://doi.org/10.1090/S0025-5718-1980-0572855-7; Liu & Nocedal
    1989) as ``torch.optim.LBFGS``, after minFunc.

    Each ``step(closure)`` runs up to ``max_iter`` iterations: with :math:`s_k = t_k d_k`,
    :math:`y_k = g_{k+1} - g_k` kept for the last ``history_size`` pairs with
    :math:`y_k^\top s_k > 10^{-10}`, the direction :math:`d = -H g` comes from the two-loop
    recursion with :math:`H_0 = \frac{y^\top s}{y^\top y} I`; the step is ``lr`` (the first
    iteration: :math:`\min(1, 1/\lVert g\rVert_1)\,\mathrm{lr}`), or what the strong-Wolfe line
    search (cubic interpolation, :math:`c_1 = 10^{-4}`, :math:`c_2 = 0.9`) finds.  It stops
    early when :math:`\max|g| \le` ``tolerance_grad``, when the change of the loss or of the
    parameters is below ``tolerance_change``, or after ``max_eval`` closure calls.

    Args:
        params: the parameters (one group; float16/bfloat16/float32/float64, mixed as torch).
        lr: learning rate (default 1).
        max_iter: iterations per ``step`` (default 20).
        max_eval: closure evaluations per ``step`` (default ``max_iter * 5 // 4``).
        tolerance_grad: first-order optimality tolerance (default 1e-7).
        tolerance_change: tolerance on loss and parameter changes (default 1e-9).
        history_size: curvature pairs kept (default 100).
        line_search_fn: None or ``"strong_wolfe"``.

    State (in ``state[first parameter]``, PyTorch's keys): ``func_evals``, ``n_iter``, ``d``,
    ``t``, ``old_dirs``, ``old_stps``, ``ro``, ``H_diag``, ``prev_flat_grad``, ``prev_loss``,
    ``al``; and ``master_param`` of each float16/bfloat16 parameter once stepping started.

    Example::

        opt = LBFGS(model.parameters(), lr=1, line_search_fn="strong_wolfe")
        def closure():
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            return loss
        opt.step(closure)
    """

    def __init__(self, params: Iterable, lr: float = 1, max_iter: int = 20,
                 max_eval: int | None = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)
        self._flats: list[FlatBuffer] = []
        super().__init__(params, defaults)

    @property
    def _params(self) -> list:
        return self.param_groups[0]["params"]

    # ---- groups ---------------------------------------------------------------------------------
    def _check_group(self, group: dict[str, Any]) -> None:
        for p in group["params"]:
            dt = np.dtype(p.dtype)
            if dt.kind != "f" and dt.name not in LOW_MODES:
                raise TypeError(f"LBFGS can only optimize floating point parameters, but one has "
                                f"dtype {dt}")

    def _add_group(self, group: dict[str, Any]) -> None:
        if self.param_groups:  # (torch fails at the next step; tinyopt at once)
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        super()._add_group(group)
        unique: dict[int, Any] = {}
        for p in group["params"]:
            unique.setdefault(id(p), p)
        params = list(unique.values())
        by_dtype: dict[np.dtype, list] = {}
        for p in params:
            by_dtype.setdefault(np.dtype(p.dtype), []).append(p)
        self._flats = [FlatBuffer(ps, dt) for dt, ps in by_dtype.items()]
        self._dtype = np.result_type(*(fb.dtype for fb in self._flats))
        self._numel = sum(fb.numel for fb in self._flats)
        self._order = self._inverse = None
        if len(self._flats) > 1:  # the buffers hold the parameters by dtype; torch's vectors
            start, k = {}, 0      # follow the parameters' order
            for fb in self._flats:
                for j, p in enumerate(fb.params):
                    start[id(p)] = k + int(fb.seg[j])
                k += fb.numel
            self._order = np.concatenate([np.arange(start[id(p)], start[id(p)] + p.numel())
                                          for p in params] or [np.zeros(0, np.int64)])
            self._inverse = np.argsort(self._order)

    # ---- flat vectors ---------------------------------------------------------------------------
    def _take_back(self) -> None:
        """Read the parameters' storage into the flat vectors (unless they are that storage),
        and adopt, as masters, 16-bit values written from outside since the last step."""
        for fb in self._flats:
            flat = fb.gather_params()
            if fb.mode:
                changed = fb.data.astype(fb.storage).view(np.uint16) != flat.view(np.uint16)
                if changed.any():
                    fb.data[changed] = flat[changed].astype(np.float32)

    def _bind_masters(self) -> None:
        """``state[p]["master_param"]``: each 16-bit parameter's masters (a view of its part of
        the buffer)."""
        for fb in self._flats:
            if fb.mode:
                for j, p in enumerate(fb.params):
                    self.state[p][MASTER] = fb.view(fb.data, j)

    def _gather_flat_grad(self) -> np.ndarray:
        """The gradients, flat (zeros for a parameter whose grad is None), as a new array."""
        parts = []
        for fb in self._flats:
            g = fb.gather_grads().astype(self._dtype)
            for j in np.flatnonzero(fb.flags == 0):
                g[fb.seg[j]:fb.seg[j + 1]] = 0
            parts.append(g)
        return parts[0] if self._order is None else np.concatenate(parts)[self._order]

    def _add_grad(self, step_size, update: np.ndarray) -> None:
        """``x <- x + step_size * update`` over the flat parameters (``add_(alpha=...)``, in the
        vectors' dtype, stored in each parameter's)."""
        if self._inverse is not None:
            update = update[self._inverse]
        t = self._dtype.type(step_size)
        k = 0
        for fb in self._flats:
            if fb.dtype == self._dtype:
                vec.axpy(fb.data, t, update[k:k + fb.numel])
            else:  # a float32 buffer of a float64 group: the sum in float64, stored in float32
                data = fb.data
                data += t * update[k:k + fb.numel]
            k += fb.numel
            _store(fb)

    def _flat_params(self) -> list[np.ndarray]:
        return [fb.data.copy() for fb in self._flats]

    def _set_params(self, x: list[np.ndarray]) -> None:
        for fb, xb in zip(self._flats, x):
            fb.data[...] = xb
            _store(fb)

    def _directional_evaluate(self, closure: Callable, x: list[np.ndarray], t, d: np.ndarray):
        self._add_grad(t, d)
        loss = float(call_closure(closure))
        flat_grad = self._gather_flat_grad()
        self._set_params(x)
        return loss, flat_grad

    # ---- stepping -------------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any]):  # type: ignore[override]
        """Run up to ``max_iter`` L-BFGS iterations; ``closure`` (required) zeroes the grads,
        evaluates the model, calls ``backward()`` and returns the loss.  Returns the first loss."""
        group = self.param_groups[0]
        lr = float(group["lr"])
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]
        self._take_back()
        one = self._dtype.type
        if not self.state:  # the first step (16-bit parameters: their masters join the state)
            self._bind_masters()
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = call_closure(closure)
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if _abs_max(flat_grad) <= tolerance_grad:
            return orig_loss

        # as torch's: the iteration count, the previous gradient and the history lists change
        # in place as the step goes, the rest is stored at its end, so a closure that raises
        # mid-step leaves them out of step: the next step continues from that state (torch's),
        # or after a first step that raised, fails as torch's does
        d, t = state.get("d"), _number(state.get("t"))
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        H_diag = _number(state.get("H_diag"))
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")

        n_iter = 0
        total_iter = state["n_iter"]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            while n_iter < max_iter:
                n_iter += 1
                total_iter += 1
                state["n_iter"] = total_iter
                if total_iter != 1 and prev_flat_grad is None:  # (a first step raised)
                    raise TypeError("sub(): argument 'other' (position 1) must be Tensor, not "
                                    "NoneType")
                if total_iter == 1:
                    d = np.empty_like(flat_grad)
                    gtd = one(vec.negate_dot(flat_grad, d, flat_grad))  # d = -g; g'd
                    old_dirs, old_stps, ro = [], [], []
                    H_diag = 1
                    if prev_flat_grad is None:
                        prev_flat_grad = flat_grad.copy()
                    else:
                        prev_flat_grad[...] = flat_grad
                else:
                    # y = g - g_prev, s = t d, g_prev <- g, and y's, y'y: one pass
                    y, s = np.empty_like(flat_grad), np.empty_like(flat_grad)
                    ys, yy = vec.curvature_pair(flat_grad, prev_flat_grad, d, one(t), y, s)
                    ys = one(ys)
                    if ys > 1e-10:  # keep the pair only where the curvature is positive
                        if len(old_dirs) == history_size:
                            old_dirs.pop(0)
                            old_stps.pop(0)
                            ro.pop(0)
                        old_dirs.append(y)
                        old_stps.append(s)
                        ro.append(_stored(1.0 / ys))
                        H_diag = ys / one(yy)
                    d, gtd = self._direction(state, flat_grad, old_dirs, old_stps,
                                             [_number(r) for r in ro], H_diag, history_size)
                prev_loss = loss
                t = min(1.0, 1.0 / np.abs(flat_grad).sum()) * lr if total_iter == 1 else lr
                if gtd > -tolerance_change:  # not a descent direction
                    break

                ls_func_evals = 0
                if line_search_fn is not None:
                    if line_search_fn != "strong_wolfe":
                        raise RuntimeError("only 'strong_wolfe' is supported")
                    x_init = self._flat_params()

                    def obj_func(x, t, d):
                        return self._directional_evaluate(closure, x, t, d)

                    loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                        obj_func, x_init, t, d, loss, flat_grad, gtd,
                        max_ls=max_eval - current_evals)
                    self._add_grad(t, d)
                    opt_cond = _abs_max(flat_grad) <= tolerance_grad
                else:
                    self._add_grad(t, d)
                    opt_cond = False
                    if n_iter != max_iter:  # re-evaluate, except after the last iteration
                        loss = float(call_closure(closure))
                        flat_grad = self._gather_flat_grad()
                        opt_cond = _abs_max(flat_grad) <= tolerance_grad
                        ls_func_evals = 1
                current_evals += ls_func_evals
                state["func_evals"] += ls_func_evals

                if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                    break
                # max |t d_i| = |t| max |d_i| exactly: rounding is monotonic
                if _abs_max(d) * abs(one(t)) <= tolerance_change:
                    break
                if abs(loss - prev_loss) < tolerance_change:
                    break

        state["d"] = d
        state["t"] = _stored(t)
        state["old_dirs"] = old_dirs
        state["old_stps"] = old_stps
        state["ro"] = ro
        state["H_diag"] = _stored(H_diag)
        state["prev_flat_grad"] = prev_flat_grad
        state["prev_loss"] = prev_loss
        return orig_loss

    @staticmethod
    def _direction(state, flat_grad, old_dirs, old_stps, ro, H_diag, history_size):
        """``(d, g'd)``: ``d = -H g`` by the two-loop recursion over the kept pairs (``al`` kept
        in ``state``), each update fused with the dot product the recursion takes next."""
        if "al" not in state:
            state["al"] = [None] * history_size
        al = state["al"]
        one = flat_grad.dtype.type
        q = np.empty_like(flat_grad)
        m = len(old_dirs)
        if m == 0:
            np.negative(flat_grad, out=q)
            return q, one(vec.scale_dot(q, one(H_diag), flat_grad))
        dot = one(vec.negate_dot(flat_grad, q, old_stps[m - 1]))  # q = -g; s_{m-1}'q
        for i in range(m - 1, -1, -1):
            a = dot * ro[i]
            al[i] = np.asarray(a)
            if i:
                dot = one(vec.axpy_dot(q, one(-a), old_dirs[i], old_stps[i - 1]))
            else:
                vec.axpy(q, one(-a), old_dirs[0])
        dot = one(vec.scale_dot(q, one(H_diag), old_dirs[0]))  # r = H_diag q, in place; y_0'r
        for i in range(m):
            be_i = dot * ro[i]
            after = old_dirs[i + 1] if i + 1 < m else flat_grad  # the last: g'd
            dot = one(vec.axpy_dot(q, one(al[i][()] - be_i), old_stps[i], after))
        return q, dot

    # ---- state dict -----------------------------------------------------------------------------
    def _set_state(self, state, groups: list[dict]) -> None:
        """Install a loaded (checked, copied) state: saved masters go into the buffers (without
        them the masters stay the parameters' values, as a state dict of torch's gives)."""
        masters = {id(p): st.pop(MASTER) for p, st in state.items()
                   if isinstance(st, dict) and MASTER in st}
        for p in [p for p, st in state.items() if isinstance(st, dict) and not st]:
            del state[p]  # (a float32 parameter's saved master: it is its own master)
        super()._set_state(state, groups)
        for fb in self._flats:
            if fb.mode:
                for j, p in enumerate(fb.params):
                    if masters.get(id(p)) is not None:
                        fb.view(fb.data, j)[...] = masters[id(p)]
        if self.state:
            self._bind_masters()

    def _cast_loaded(self, p, key, value, label: str, scalar: bool):
        """L-BFGS's state is flat (the group's length), lists of such, numbers and counts."""
        where = f"load_state_dict: parameter {label} has state {key!r}"
        n, dtype = self._numel, self._dtype

        def vector(v, what=where):
            arr = np.asarray(v)
            if arr.dtype.kind not in "fiu" or arr.shape != (n,):
                raise ValueError(f"{what} of shape {arr.shape} and dtype {arr.dtype}, expected "
                                 f"a flat vector of {n} numbers (the group's length)")
            return np.array(arr, dtype=dtype, copy=True)

        def number(v, what=where, allow_none=False):
            if v is None and allow_none:
                return None
            if isinstance(v, (bool, str, bytes)) or v is None:
                raise ValueError(f"{what} of type {typename(v)}, expected a number")
            arr = np.asarray(v)
            if arr.size != 1 or arr.dtype.kind not in "fiu":
                raise ValueError(f"{what} of shape {arr.shape} and dtype {arr.dtype}, expected a "
                                 f"number")
            return v if isinstance(v, (int, float)) else np.array(arr.reshape(()), dtype=dtype)

        if key in _INT_STATE:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{where} = {value!r:.40}, expected a count >= 0")
            return int(value)
        if key in _VECTOR_STATE:
            return None if value is None else vector(value)
        if key in _LIST_STATE or key in _NUMBER_LIST_STATE:
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"{where} of type {typename(value)}, expected a list")
            if key in _LIST_STATE:
                return [vector(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return [number(v, f"{where}[{i}]", allow_none=key == "al")
                    for i, v in enumerate(value)]
        if key in _NUMBER_STATE:
            return None if value is None and key != "H_diag" else number(value)
        return cast_state(p, key, value, label, scalar)


def _dot(x: np.ndarray, y: np.ndarray):
    """``x . y`` in the vectors' dtype (:func:`tinyopt.kernels.lbfgs.dot`'s fixed order)."""
    return x.dtype.type(vec.dot(x, y))


def _abs_max(x: np.ndarray):
    """``max |x_i|`` (0 if empty, NaN if any is NaN) in ``x``'s dtype."""
    return x.dtype.type(vec.abs_max(x))


def _number(x):
    """A stored number as the scalar the arithmetic uses (a 0-d array -> a numpy scalar)."""
    return x[()] if isinstance(x, np.ndarray) else x


def _stored(x):
    """A number as kept in ``state`` (numpy scalars as 0-d arrays, as PyTorch keeps 0-d tensors)."""
    return np.asarray(x) if isinstance(x, np.generic) else x


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimizer of the cubic through ``(x1, f1, g1)`` and ``(x2, f2, g2)``, clipped to
    ``bounds`` (default: the interval); the midpoint when the cubic has no minimum."""
    xmin_bound, xmax_bound = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = np.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                  max_ls=25):
    """A step ``t`` along ``d`` satisfying the strong Wolfe conditions (Nocedal & Wright,
    Algorithms 3.5 and 3.6: bracketing, then zoom by cubic interpolation), as PyTorch's; returns
    ``(f_new, g_new, t, evaluations)``."""
    d_norm = _abs_max(d)
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = _dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:  # bracketing
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
    if ls_iter == max_ls:  # reached the maximum number of evaluations
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:  # zoom
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0],
                               bracket[1], bracket_f[1], bracket_gtd[1])
        # keep away from the ends of the bracket unless the last step made no progress
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) \
                    else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.copy(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.copy(), gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


def _store(fb: FlatBuffer) -> None:
    """Write ``fb.data`` (changed) into the parameters' storage (16-bit: rounded from the
    masters)."""
    if fb.mode:
        fb.low[...] = fb.data
    fb.scatter_params()
