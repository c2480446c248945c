"""``repr(t)`` and ``str(t)`` as PyTorch prints them: ``tensor([1.0000, 2.5000])``.

The rules are torch's ``_tensor_str``: floats print with 4 decimals, or as ``1.`` when all values
are whole numbers, or in scientific notation when the finite nonzero magnitudes span more than
1000x, exceed 1e8 or go below 1e-4; every element is padded to one width; rows wrap at 80
columns; more than 1000 elements are summarized with the first and last 3 along each dimension.
``set_printoptions`` changes precision, threshold, edgeitems, linewidth and sci_mode.
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.engine.dtypes import is_low


class _Options:
    precision = 4
    threshold: float = 1000
    edgeitems = 3
    linewidth = 80
    sci_mode: bool | None = None


OPTIONS = _Options()


def set_printoptions(precision: int | None = None, threshold: int | None = None,
                     edgeitems: int | None = None, linewidth: int | None = None,
                     profile: str | None = None, sci_mode: bool | None = None) -> None:
    """torch.set_printoptions: how tensors print (profile 'default', 'short' or 'full')."""
    if profile is not None:
        presets = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80),
                   "full": (4, math.inf, 3, 80)}
        if profile not in presets:
            raise ValueError(f"set_printoptions: unknown profile {profile!r}")
        OPTIONS.precision, OPTIONS.threshold, OPTIONS.edgeitems, OPTIONS.linewidth = \
            presets[profile]
    for name, value in (("precision", precision), ("threshold", threshold),
                        ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if value is not None:
            setattr(OPTIONS, name, value)
    OPTIONS.sci_mode = sci_mode


class _Formatter:
    """One width and one style for every element of an array (torch's ``_Formatter``)."""

    def __init__(self, values: np.ndarray):
        self.floating = values.dtype.kind == "f" or is_low(values.dtype)
        self.int_mode = True
        self.sci_mode = False
        if not self.floating:
            self.width = max((len(self._plain(v)) for v in values.reshape(-1)), default=1)
            return
        finite = values[np.isfinite(values) & (values != 0)].astype(np.float64)
        absolute = np.abs(finite)
        if finite.size:
            self.int_mode = bool(np.all(np.ceil(finite) == finite))
            lo, hi = float(absolute.min()), float(absolute.max())
            if self.int_mode:
                self.sci_mode = hi / lo > 1000.0 or hi > 1e8
            else:
                self.sci_mode = hi / lo > 1000.0 or hi > 1e8 or lo < 1e-4
        if OPTIONS.sci_mode is not None:
            self.sci_mode = OPTIONS.sci_mode
        self.width = max((len(self.format(v, pad=False)) for v in values.reshape(-1)), default=1)

    def _plain(self, v) -> str:
        return str(bool(v)) if isinstance(v, (bool, np.bool_)) else str(int(v))

    def format(self, v, pad: bool = True) -> str:
        if not self.floating:
            s = self._plain(v)
        elif not math.isfinite(float(v)):
            s = str(float(v))
        elif self.sci_mode:
            s = f"{float(v):.{OPTIONS.precision}e}"
        elif self.int_mode:
            s = f"{float(v):.0f}."
        else:
            s = f"{float(v):.{OPTIONS.precision}f}"
        return s.rjust(self.width) if pad else s


def _summarize(a: np.ndarray, edge: int) -> np.ndarray:
    """The values a summarized print shows (for the width): the edges along every dimension."""
    for d in range(a.ndim):
        if a.shape[d] > 2 * edge:
            a = np.concatenate([a.take(range(edge), d), a.take(range(a.shape[d] - edge,
                                                                     a.shape[d]), d)], d)
    return a


def _body(a: np.ndarray, fmt: _Formatter, indent: int, summarize: bool) -> str:
    edge = OPTIONS.edgeitems
    if a.ndim == 0:
        return fmt.format(a.item(), pad=False)
    if a.ndim == 1:
        if summarize and a.shape[0] > 2 * edge:
            items = ([fmt.format(v) for v in a[:edge].tolist()] + [" ..."]
                     + [fmt.format(v) for v in a[-edge:].tolist()])
        else:
            items = [fmt.format(v) for v in a.tolist()]
        per_line = max(1, math.floor((OPTIONS.linewidth - indent) / (fmt.width + 2)))
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    n = a.shape[0]
    if summarize and n > 2 * edge:
        rows = ([_body(a[i], fmt, indent + 1, summarize) for i in range(edge)] + ["..."]
                + [_body(a[i], fmt, indent + 1, summarize) for i in range(n - edge, n)])
    else:
        rows = [_body(a[i], fmt, indent + 1, summarize) for i in range(n)]
    sep = "," + "\n" * (a.ndim - 1) + " " * (indent + 1)
    return "[" + sep.join(rows) + "]"


def format_array(a: np.ndarray, prefix: str = "tensor(") -> str:
    """The bracketed values of ``a`` as torch prints them after ``prefix``."""
    if a.size == 0:
        return "[]"
    summarize = a.size > OPTIONS.threshold
    shown = _summarize(a, OPTIONS.edgeitems) if summarize else a
    return _body(a, _Formatter(shown), len(prefix), summarize)


def tensor_repr(a: np.ndarray, suffixes: list[str], prefix: str = "tensor(") -> str:
    """``tensor(<values>, <suffixes>)``: a suffix that would pass the line width goes on a line
    of its own; an empty tensor of more than one dimension adds its size, as torch does."""
    text = prefix + format_array(a, prefix)
    if a.size == 0 and a.shape != (0,):
        suffixes = [f"size={tuple(a.shape)}"] + suffixes
    parts = [text]
    last = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last + len(suffix) + 2 > OPTIONS.linewidth:
            parts.append(",\n" + " " * len(prefix) + suffix)
            last = len(prefix) + len(suffix)
        else:
            parts.append(", " + suffix)
            last += len(suffix) + 2
    return "".join(parts) + ")"
