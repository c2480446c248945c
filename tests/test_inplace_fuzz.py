"""Differential fuzz of writes through views against torch (issue 25, points 1, 2 and 5).

A case makes a base (a leaf that requires grad or not, or a non-leaf), takes a chain of one or
two views of it, writes in place (through the view, into the base, or through a sibling view),
then reads the base and the view and backpropagates a loss over both.  Values, gradients,
``requires_grad``, version counters and error types (with the first words of the message) must
equal torch 2.13's.  CI runs a fixed-seed sample of the grid; ``TINYOPT_FUZZ_FULL=1`` runs all
of it.

One combination is left out on purpose: a write through ``.data`` into the output of an op that
saved it (``y = x.exp(); y.data.add_(1)``).  torch's backward then reads the overwritten memory
(``.data`` bumps no version, the unsafety its docs warn of); tinyopt's reads the value the graph
computed, so its gradient is the true one of the recorded computation.
"""

from __future__ import annotations

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
]


def _w(lib, shape, rg, seed):
    n = int(np.prod(shape))
    data = (np.arange(n, dtype=np.float64).reshape(shape) % 5 + 1 + seed) / 4
    return lib.tensor(data, dtype=lib.float64, requires_grad=rg)


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


def grid():
    cases = []
    for chain in _chains():
        if not _applicable(chain):
            continue
        for base, op, w_rg, target in itertools.product(BASES, INPLACE, (False, True), TARGETS):
            if base == "nonleaf_exp" and any(c[0] == "data" for c in chain):
                continue  # torch's backward reads exp's output as .data left it (see below)
            cases.append((base, chain, op, w_rg, target))
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


def test_writes_through_views_match_torch():
    cases = grid()
    if not os.environ.get("TINYOPT_FUZZ_FULL"):
        cases = random.Random(25).sample(cases, 400)
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
    between: its lazily regenerated grad_fn; tinyopt always differentiates the write); and a
    write with an operand that requires grad into a detach()/.data alias or a view of one (torch
    then makes the alias itself a CopySlices node and rebases the views made of it; tinyopt
    differentiates the written tensor, and the alias keeps no gradient: docs/porting.md)."""
    writes = [s for s in steps if s[0] == "write"]
    behind_alias = [False]  # per alias: made through a detach()/.data
    for s in steps:
        if s[0] == "view":
            behind_alias.append(behind_alias[s[1]] or VIEWS[s[2]][0] in ("detach", "data"))
    saves_output = base == "nonleaf_exp" or any(INPLACE[s[2]][0] == "exp_" for s in writes)
    return (saves_output and any(s[0] == "view" and VIEWS[s[2]][0] == "data" for s in steps)
            or base == "leaf" and any(s[3] for s in writes[:-1])
            or any(s[3] and behind_alias[s[1]] for s in writes))


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
