"""Differential fuzz of writes through views against torch (issue 25, points 1, 2 and 5).

A case makes a base (a leaf that requires grad or not, or a non-leaf), takes a chain of one or
two views of it, writes in place (through the view, into the base, or through a sibling view),
then reads the base and the view and backpropagates a loss over both.  Values, gradients,
``requires_grad``, version counters and error types (with the first words of the message) must
equal torch 2.13's.  Every view op meets every in-place op and every kind of base
(``product``); CI runs each (view, op) pair once and a fixed-seed sample of the whole grid
(chains of two views, other bases, writes into the base or a sibling), ``TINYOPT_FUZZ_FULL=1``
all of it.

Three combinations are left out on purpose (``_excluded_case``).  A write through ``.data``
into the output of an op that saved it (``y = x.exp(); y.data.add_(1)``): torch's backward then
reads the overwritten memory (``.data`` bumps no version, the unsafety its docs warn of);
tinyopt's reads the value the graph computed, so its gradient is the true one of the recorded
computation.  Scattered writes into an expanded view (``masked_fill_``...; see ``_SCATTERED``).
A slice of a ``detach()``/``.data`` alias written with an operand that requires grad.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import random

import numpy as np
import pytest

import tinyopt as to

torch = pytest.importorskip("torch")

SHAPE = (4, 6)

# view ops: (name, fn, applies(shape))
VIEWS = [
    ("select", lambda t: t[1], lambda s: len(s) >= 1 and s[0] > 1),
    ("slice", lambda t: t[1:3], lambda s: len(s) >= 1 and s[0] >= 3),
    ("step", lambda t: t[::2], lambda s: len(s) >= 1),
    ("col", lambda t: t[:, 1], lambda s: len(s) >= 2 and s[1] > 1),
    ("t", lambda t: t.t(), lambda s: len(s) == 2),
    ("transpose", lambda t: t.transpose(0, -1), lambda s: len(s) >= 1),
    ("permute", lambda t: t.permute(*reversed(range(t.dim()))), lambda s: len(s) >= 1),
    ("view", lambda t: t.view(-1), lambda s: True),
    ("reshape", lambda t: t.reshape(-1), lambda s: True),
    ("flatten", lambda t: t.flatten(), lambda s: True),
    ("narrow", lambda t: t.narrow(-1, 1, 2), lambda s: len(s) >= 1 and s[-1] >= 3),
    ("diagonal", lambda t: t.diagonal(), lambda s: len(s) == 2),
    ("diagonal1", lambda t: t.diagonal(1), lambda s: len(s) == 2 and s[1] > 1),
    ("unsqueeze", lambda t: t.unsqueeze(0), lambda s: len(s) <= 2),
    ("squeeze", lambda t: t[:1].squeeze(0), lambda s: len(s) >= 1),
    ("expand", lambda t: t.unsqueeze(0).expand(2, *t.shape), lambda s: len(s) <= 2),
    ("unfold", lambda t: t.unfold(-1, 2, 2), lambda s: len(s) >= 1 and s[-1] >= 2),
    ("split", lambda t: t.split(1)[0], lambda s: len(s) >= 1),
    ("chunk", lambda t: t.chunk(2)[1], lambda s: len(s) >= 1 and s[0] > 1),
    ("unbind", lambda t: t.unbind(0)[1], lambda s: len(s) >= 1 and s[0] > 1),
    ("as_strided", lambda t: t.as_strided((2, 2), (1, 2), 1), lambda s: True),
    ("detach", lambda t: t.detach(), lambda s: True),
    ("data", lambda t: t.data, lambda s: True),
    ("view_as", lambda t: t.view_as(t), lambda s: True),
    ("mT", lambda t: t.mT, lambda s: len(s) >= 2),
    ("movedim", lambda t: t.movedim(0, -1), lambda s: len(s) >= 1),
    ("T", lambda t: t.T, lambda s: len(s) == 2),
    ("swapaxes", lambda t: t.swapaxes(0, -1), lambda s: len(s) >= 1),
    ("negative index", lambda t: t[-1], lambda s: len(s) >= 1),
    ("None, ...", lambda t: t[None, ..., 1:], lambda s: len(s) >= 1 and s[-1] > 1),
    ("all", lambda t: t[:], lambda s: len(s) >= 1),  # (a view that changes nothing)
    ("expand_as", lambda t: t.expand_as(t), lambda s: True),
    ("squeeze all", lambda t: t[:1].squeeze(), lambda s: len(s) >= 1),
    ("unflatten", lambda t: t.unflatten(-1, (2, -1)), lambda s: len(s) >= 1 and s[-1] % 2 == 0),
    ("tensor_split", lambda t: t.tensor_split(2)[1], lambda s: len(s) >= 1 and s[0] > 1),
    ("split sizes", lambda t: t.split([1, t.shape[0] - 1])[1], lambda s: len(s) >= 1 and s[0] > 1),
]


def _w(lib, shape, rg, seed):
    n = int(np.prod(shape))
    data = (np.arange(n, dtype=np.float64).reshape(shape) % 5 + 1 + seed) / 4
    return lib.tensor(data, dtype=lib.float64, requires_grad=rg)


def _lib(t):
    return torch if isinstance(t, torch.Tensor) else to


def _reversed_rows(v):
    """The indices of ``v``'s first dimension, last first (int64)."""
    return _lib(v).tensor(list(range(v.shape[0]))[::-1], dtype=_lib(v).int64)


def _reversed_rows_index(v):
    """An index of ``v``'s shape whose element ``[i, ...]`` is ``n - 1 - i`` (for scatter)."""
    n = v.shape[0]
    rows = np.arange(n)[::-1].reshape((n,) + (1,) * (v.dim() - 1))
    return _lib(v).tensor(np.broadcast_to(rows, tuple(v.shape)).copy())


def _rows(fn):
    """``fn`` for a tensor with a first dimension; a 0-d one is written by ``add_``."""
    return lambda v, w: fn(v, w) if v.dim() else v.add_(w)


# in-place ops: (name, fn(v, w)); w has v's shape and may require grad
INPLACE = [
    ("add_", lambda v, w: v.add_(2.0)),
    ("add_t", lambda v, w: v.add_(w)),
    ("mul_", lambda v, w: v.mul_(3.0)),
    ("mul_t", lambda v, w: v.mul_(w)),
    ("sub_t", lambda v, w: v.sub_(w, alpha=2)),
    ("div_", lambda v, w: v.div_(4.0)),
    ("div_t", lambda v, w: v.div_(w)),
    ("zero_", lambda v, w: v.zero_()),
    ("fill_", lambda v, w: v.fill_(7.0)),
    ("copy_", lambda v, w: v.copy_(w)),
    ("clamp_", lambda v, w: v.clamp_(0.5, 2.0)),
    ("setitem", lambda v, w: v.__setitem__(..., w)),
    ("setitem0", lambda v, w: v.__setitem__(0, 5.0) if v.dim() else v.fill_(5.0)),
    ("exp_", lambda v, w: v.exp_()),
    ("neg_", lambda v, w: v.neg_()),
    ("pow_", lambda v, w: v.pow_(2)),
    ("iadd", lambda v, w: v.__iadd__(w)),
    ("imul", lambda v, w: v.__imul__(w)),
    ("mul_0d", lambda v, w: v.mul_(w.mean())),
    ("fill_0d", lambda v, w: v.fill_(w.sum() / 8)),
    ("addcmul_", lambda v, w: v.addcmul_(w, w, value=0.5)),
    ("lerp_", lambda v, w: v.lerp_(w, 0.25)),
    ("clamp_min_t", lambda v, w: v.clamp_min_(w)),
    ("sigmoid_", lambda v, w: v.sigmoid_()),
    ("cumsum_", lambda v, w: v.cumsum_(0)),
    ("tril_", lambda v, w: v.tril_() if v.dim() >= 2 else v.neg_()),
    ("masked_fill_", lambda v, w: v.masked_fill_(w > 1.2, -1.0)),
    ("masked_fill_0d", lambda v, w: v.masked_fill_(w > 1.2, w.sum() / 8)),
    ("setitem mask", lambda v, w: v.__setitem__(w > 1.2, w[w > 1.2] * 2)),
    ("setitem rows", _rows(lambda v, w: v.__setitem__(_reversed_rows(v), w))),
    ("setitem slice", _rows(lambda v, w: v.__setitem__((..., slice(None, 1)), w[..., :1]))),
    ("index_add_", _rows(lambda v, w: v.index_add_(0, _reversed_rows(v), w, alpha=2))),
    ("index_copy_", _rows(lambda v, w: v.index_copy_(0, _reversed_rows(v), w))),
    ("index_fill_", _rows(lambda v, w: v.index_fill_(0, _reversed_rows(v)[:1], -2.0))),
    ("scatter_", _rows(lambda v, w: v.scatter_(0, _reversed_rows_index(v), w))),
    ("scatter_add_", _rows(lambda v, w: v.scatter_add_(0, _reversed_rows_index(v), w))),
]

BASES = ["leaf", "leaf_rg", "nonleaf", "nonleaf_clone", "nonleaf_exp"]
TARGETS = ["view", "base", "sibling"]


def _chains():
    out = [(v,) for v in VIEWS]
    for a, b in itertools.product(VIEWS, VIEWS):
        out.append((a, b))
    return out


def _applicable(chain) -> bool:
    t = torch.empty(SHAPE)
    for name, fn, ok in chain:
        if not ok(tuple(t.shape)):
            return False
        try:
            t = fn(t)
        except RuntimeError:  # (the case compares the error)
            return True
    return True


def _make_base(lib, base: str):
    """x (a leaf, requiring grad unless ``base`` is "leaf") and the base y made from it."""
    data = np.arange(24, dtype=np.float64).reshape(SHAPE) / 8 + 0.25
    x = lib.tensor(data, dtype=lib.float64, requires_grad=base != "leaf")
    y = {"leaf": x, "leaf_rg": x, "nonleaf": x * 1.5, "nonleaf_clone": x.clone(),
         "nonleaf_exp": x.exp()}[base]
    return x, y


def run_case(lib, base: str, chain, op, w_rg: bool, target: str) -> dict:
    """Run one case in ``lib`` (tinyopt or torch); what it observed (values, gradients, flags,
    versions) or the error it raised and where."""
    out: dict = {}
    stage = "make"
    try:
        x, y = _make_base(lib, base)
        stage = "view"
        v = y
        for _, fn, _ in chain:
            v = fn(v)
        sib = y[2:] if target == "sibling" else None
        stage = "write"
        w = _w(lib, v.shape if target != "base" else y.shape, w_rg, 1)
        dest = {"view": v, "base": y, "sibling": v}[target]
        op[1](dest, w)
        stage = "read"
        out["y"] = np.asarray(y.tolist())
        out["v"] = np.asarray(v.tolist())
        if sib is not None:
            out["sib"] = np.asarray(sib.tolist())
        out["rg"] = (y.requires_grad, v.requires_grad)
        out["version"] = (y._version, v._version)
        stage = "backward"
        c1 = _w(lib, y.shape, False, 2)
        c2 = _w(lib, v.shape, False, 3)
        loss = (y * c1).sum() + (v * c2).sum()
        if loss.requires_grad:
            loss.backward()
            for name, t in (("x.grad", x), ("w.grad", w)):
                if t.is_leaf and t.requires_grad and t.grad is not None:
                    out[name] = np.asarray(t.grad.tolist())
    except Exception as e:  # the error is the observation
        out["error"] = (stage, type(e).__name__, _words(str(e)))
    return out


def _words(message: str) -> str:
    """An error's first words, with the view torch names in its multi-output view errors
    ("Output 0 of Select") masked: torch names the last view function called (``squeeze``,
    ``view_as``...), tinyopt the op that made the view (``reshape``)."""
    return re.sub(r"^Output \d+ of \w+ ", "Output _ ", message)[:60]


def _compare(a: dict, b: dict) -> str | None:
    if set(a) != set(b):
        return f"keys {sorted(a)} != {sorted(b)}: {a.get('error')} vs {b.get('error')}"
    for k in a:
        if k in ("rg", "version", "error"):
            if a[k] != b[k]:
                return f"{k}: {a[k]} != {b[k]}"
        elif a[k].shape != b[k].shape or not np.allclose(a[k], b[k], equal_nan=True,
                                                         rtol=1e-12, atol=1e-12):
            return f"{k}: {a[k].tolist()} != {b[k].tolist()}"
    return None


@functools.cache
def _overlapping(chain) -> bool:
    """Whether the chain's view has elements sharing memory (an expanded view)."""
    t = torch.empty(SHAPE)
    try:
        for _, fn, _ in chain:
            t = fn(t)
    except RuntimeError:  # (the case compares the error)
        return False
    return torch._debug_has_internal_overlap(t) == 1


_SCATTERED = {"masked_fill_", "masked_fill_0d", "setitem mask", "setitem rows", "index_fill_",
              "tril_"}
"""Writes torch makes into memory several elements share (the first five with a deprecation
warning, each location keeping whichever write lands last) and cannot differentiate; tinyopt
refuses them at once with torch's overlap error (docs/porting.md)."""


def _excluded_case(base: str, chain, op, w_rg: bool, target: str) -> bool:
    """The combinations left out on purpose (each a corner docs/porting.md names): a .data write
    into exp's saved output (see the module docstring); the writes of ``_SCATTERED`` into an
    expanded view; a slice of a detach()/.data alias, or a view of one, written with an operand
    that requires grad (torch makes the alias itself a CopySlices node; tinyopt refuses the
    write: docs/porting.md)."""
    names = [c[0] for c in chain]
    aliases = [i for i, n in enumerate(names) if n in ("detach", "data")]
    return (base == "nonleaf_exp" and "data" in names
            or target != "base" and op[0] in _SCATTERED and _overlapping(chain)
            or w_rg and op[0] == "setitem slice" and target != "base" and bool(aliases)
            # (a view of an alias written with a grad operand: refused, test_inplace.py)
            or w_rg and target != "base" and bool(aliases) and aliases[-1] < len(names) - 1)


def grid():
    cases = []
    for chain in _chains():
        if not _applicable(chain):
            continue
        for base, op, w_rg, target in itertools.product(BASES, INPLACE, (False, True), TARGETS):
            if not _excluded_case(base, chain, op, w_rg, target):
                cases.append((base, chain, op, w_rg, target))
    return cases


KINDS = [(base, w_rg) for base in ("leaf", "leaf_rg", "nonleaf") for w_rg in (False, True)]
"""The bases the issue names (a leaf that does not require grad, one that does, a non-leaf),
each written by an operand that requires grad or not."""


def product(full: bool) -> list:
    """Every view op x every in-place op x :data:`KINDS`, written through the view.  Not
    ``full``: each (view, op) pair once, the kinds taken in turn, so that every view op and every
    in-place op still meets every kind."""
    cases = []
    for i, view in enumerate(VIEWS):
        if not _applicable((view,)):
            continue
        for j, op in enumerate(INPLACE):
            for k, (base, w_rg) in enumerate(KINDS):
                if (full or k == (i + j) % len(KINDS)) and \
                        not _excluded_case(base, (view,), op, w_rg, "view"):
                    cases.append((base, (view,), op, w_rg, "view"))
    return cases


def _name(case) -> str:
    base, chain, op, w_rg, target = case
    return f"{base}-{'.'.join(c[0] for c in chain)}-{op[0]}-{'wrg' if w_rg else 'w'}-{target}"


def mismatches(cases) -> list[str]:
    bad = []
    for case in cases:
        got = run_case(to, *case)
        want = run_case(torch, *case)
        why = _compare(got, want)
        if why is not None:
            bad.append(f"{_name(case)}: {why}")
    return bad


def test_every_view_op_by_every_in_place_op_matches_torch():
    cases = product(bool(os.environ.get("TINYOPT_FUZZ_FULL")))
    bad = mismatches(cases)
    assert not bad, f"{len(bad)} of {len(cases)} cases differ from torch:\n" + "\n".join(bad[:30])


def sample(n: int, seed: int) -> list:
    """``n`` cases of :func:`grid` drawn with ``seed`` (without building all of it)."""
    rng = random.Random(seed)
    chains = [c for c in _chains() if _applicable(c)]
    cases: list = []
    while len(cases) < n:
        case = (rng.choice(BASES), rng.choice(chains), rng.choice(INPLACE), rng.random() < 0.5,
                rng.choice(TARGETS))
        if not _excluded_case(*case):
            cases.append(case)
    return cases


def test_writes_through_views_match_torch():
    cases = grid() if os.environ.get("TINYOPT_FUZZ_FULL") else sample(400, 25)
    bad = mismatches(cases)
    assert not bad, f"{len(bad)} of {len(cases)} cases differ from torch:\n" + "\n".join(bad[:30])


# ---- sequences: several views and writes, in any order ------------------------------------------
def _program(rng: random.Random) -> tuple[str, list[tuple]]:
    """A base and 2-5 steps: make a view of any alias made so far, write through one (with an
    operand that requires grad or not), or read one."""
    steps: list[tuple] = []
    aliases = 1
    for _ in range(rng.randint(2, 5)):
        kind = rng.choice(["view", "view", "write", "write", "read"])
        src = rng.randrange(aliases)
        if kind == "view":
            steps.append(("view", src, rng.randrange(len(VIEWS))))
            aliases += 1
        elif kind == "write":
            steps.append(("write", src, rng.randrange(len(INPLACE)), rng.random() < 0.5))
        else:
            steps.append(("read", src))
    return rng.choice(BASES), steps


def _excluded(base: str, steps: list[tuple]) -> bool:
    """The combinations this fuzz leaves out: a .data write into a saved output (exp's, above);
    a view made of a base that did not require grad, written after a write made the base
    require grad (torch raises "a leaf Variable ..." there unless the view's grad_fn was read in
    between: its lazily regenerated grad_fn; tinyopt always differentiates the write); a write
    with an operand that requires grad into a view of a detach()/.data alias (torch then makes
    the alias itself a CopySlices node and rebases the views made of it; tinyopt differentiates
    the written view, and the alias keeps no gradient: docs/porting.md); and the writes of
    ``_SCATTERED`` into an alias made through ``expand``."""
    writes = [s for s in steps if s[0] == "write"]
    behind_alias = [False]  # per alias: made through a detach()/.data
    view_of_alias = [False]  # per alias: a view of one made through a detach()/.data
    expanded = [False]  # per alias: made through an expand (its elements may share memory)
    for s in steps:
        if s[0] == "view":
            behind_alias.append(behind_alias[s[1]] or VIEWS[s[2]][0] in ("detach", "data"))
            view_of_alias.append(behind_alias[s[1]])
            expanded.append(expanded[s[1]] or VIEWS[s[2]][0] in ("expand", "expand_as"))
    saves_output = base == "nonleaf_exp" or any(INPLACE[s[2]][0] == "exp_" for s in writes)
    return (saves_output and any(s[0] == "view" and VIEWS[s[2]][0] == "data" for s in steps)
            or base == "leaf" and any(s[3] for s in writes[:-1])
            or any(s[3] and view_of_alias[s[1]] for s in writes)
            or any(INPLACE[s[2]][0] in _SCATTERED and expanded[s[1]] for s in writes))


def run_program(lib, base: str, steps: list[tuple]) -> dict:
    """Run a program (see ``_program``); every alias's value, requires_grad and version at the
    end, what the reads saw, and the gradients of a loss over all aliases, or the error."""
    out: dict = {}
    stage = "make"
    try:
        x, y = _make_base(lib, base)
        aliases, ws = [y], []
        for i, step in enumerate(steps):
            stage = f"step {i}"
            if step[0] == "view":
                aliases.append(VIEWS[step[2]][1](aliases[step[1]]))
            elif step[0] == "write":
                ws.append(_w(lib, aliases[step[1]].shape, step[3], i))
                INPLACE[step[2]][1](aliases[step[1]], ws[-1])
            else:
                out[f"read {i}"] = np.asarray(aliases[step[1]].tolist())
        stage = "read"
        for j, a in enumerate(aliases):
            out[f"alias {j}"] = np.asarray(a.tolist())
        out["rg"] = tuple(a.requires_grad for a in aliases)
        out["version"] = tuple(a._version for a in aliases)
        stage = "backward"
        loss = sum((a * _w(lib, a.shape, False, 7 + j)).sum() for j, a in enumerate(aliases))
        if loss.requires_grad:
            loss.backward()
            for name, t in [("x", x)] + [(f"w{k}", w) for k, w in enumerate(ws)]:
                if t.is_leaf and t.requires_grad and t.grad is not None:
                    out[name + ".grad"] = np.asarray(t.grad.tolist())
    except IndexError as e:  # (the words of indexing errors are issue 25's point 14)
        out["error"] = (stage, "IndexError")
    except Exception as e:
        out["error"] = (stage, type(e).__name__, _words(str(e)))
    return out


def test_sequences_of_views_and_writes_match_torch():
    rng = random.Random(2513)
    n = 3000 if os.environ.get("TINYOPT_FUZZ_FULL") else 150
    programs = [p for p in (_program(rng) for _ in range(n)) if not _excluded(*p)]
    bad = []
    for base, steps in programs:
        why = _compare(run_program(to, base, steps), run_program(torch, base, steps))
        if why is not None:
            bad.append(f"{base} {steps}: {why}")
    assert not bad, f"{len(bad)} of {len(programs)} programs differ:\n" + "\n".join(bad[:20])
