"""Four of numba's compile steps made cheaper for tinyopt's kernels (numba internals: its codegen,
its inliner, its IR's variable lists and its target context), with the same machine code.

1. **No pass pipeline for a declaration.**  numba optimizes every function of a module at -O3 as
   it adds the module to a library (``CPUCodeLibrary._optimize_functions``), then, at
   finalization, the library's whole module again.  Its first round builds a pass builder and a
   function pass manager for each *declaration* of the module too (the helpers, C API and
   intrinsics it calls: 157 in the GPT's step, 0.03-0.1 ms each) and runs them over no code;
   LLVM's own module pipeline never runs function passes on a declaration
   (``ModuleToFunctionPassAdaptor`` skips them).  Here only definitions get the round.  (Skipping
   the round for a kernel's module changed the machine code of a third of the GPT's kernels (a
   broadcast loop vectorized otherwise); skipping it for a kernel's Python-wrapper module, as
   this module did until it was seen to change the wrapper of a kernel that raises (the blocks
   of its exception path laid out otherwise: ``reduce.sum_axis`` in the GPT's step), saved
   ~0.07 s of the GPT's step.  Neither is done.)
2. **The inliner's copies share one memo.**  To inline a function (``inline="always"``, and the
   kernels' ``jit.inline``) numba deep-copies the callee's IR twice, block by block, each block
   with a fresh memo, so each block's copy copies the callee's whole scope (every variable)
   again: n blocks and v variables cost n v copies where v do.  Here the blocks of one IR share
   one memo, as the blocks they copy share their scope and variables; numba's IR comes out the
   same (the copies compare equal as numba compares them).
3. **A statement's variables are listed in one walk.**  numba's passes ask every statement for
   the variables it reads and writes (``list_vars``; ``compute_use_defs`` alone does it for each
   statement some 7 times per compile, once per ``PostProcessor`` run) and numba builds that list
   recursively, one list per value visited (an assignment's target, its expression, the
   expression's arguments, the location...) with up to four ``isinstance`` checks each: ~560000
   calls in the GPT's step.  Here one list is filled in one walk, in the same order, with each
   value's kind (variable, instruction, sequence, mapping, other) looked up by its class: the
   same list of the same objects.
4. **An LLVM type's ABI size and alignment are asked once.**  numba's target context asks
   llvmlite, which prints a module declaring a global of that type and has LLVM parse it, for
   every question (351 in the GPT's step, ~0.1 ms each); the answer depends on the type's text
   and the data layout only, so it is kept (for types named by their text alone: not an
   identified struct, whose text is its name).

Checked: a cold first step of ``benchmarks/bench_seq.py``'s GPT and LSTM adds 50 modules to
28 libraries, with the same unoptimized IR and the same assembly (addresses aside) with and
without these changes (``PYTHONHASHSEED`` fixed: numba's own output varies with it).  Measured
there (the GPT, main thread, no compile-ahead helper, 3 alternating pairs): numba's inlining
0.17 -> 0.08 s of CPU (2.); pass builders 229 -> 84 (1.); ``compute_use_defs`` (244 calls)
0.104-0.108 -> 0.071-0.074 s and numba's ``PostProcessor`` runs 0.33-0.35 -> 0.30 s (3.); ABI
questions parsed 351 -> 17 times, 0.032-0.038 -> 0.003 s (4.).

All apply only on a thread compiling a tinyopt kernel (``quiet_compile.compiling_here``), and are
put in place at the first disk-cache miss of a kernel (``numba_cache``'s cache class), when
numba's compiler modules are imported anyway: a process that only loads cached kernels imports
nothing for them.  So only on the numba versions that class was checked on
(``numba_cache.CHECKED_VERSIONS``), and where the patched names exist;
``TINYOPT_NUMBA_LEAN_COMPILE=0`` turns it off.
"""

from __future__ import annotations

import copy
import os
import threading

from llvmlite import ir as llvm_ir

from tinyopt.kernels.native.quiet_compile import compiling_here

_INSTALLED: list[bool] = []
_MEMOS = threading.local()  # (.scopes: id of a scope -> the memo of its blocks' copies)
_VAR, _LEAF, _INST, _SEQUENCE, _MAPPING = range(1, 6)  # (what ``list_vars`` does with a value)


def install() -> bool:
    """Put the changes in place, once a process; whether they are."""
    if not _INSTALLED:
        _INSTALLED.append(_install())
    return _INSTALLED[0]


def _install() -> bool:
    if os.environ.get("TINYOPT_NUMBA_LEAN_COMPILE", "1") == "0":
        return False
    from numba.core import base, codegen, inline_closurecall, ir

    library = codegen.CPUCodeLibrary
    worker = inline_closurecall.InlineWorker
    context = base.BaseContext
    if not (hasattr(library, "_optimize_functions") and hasattr(worker, "inline_ir")
            and inline_closurecall.copy is copy and hasattr(ir.Inst, "_rec_list_vars")
            and "list_vars" in vars(ir.Stmt) and "list_vars" in vars(ir.Expr)
            and hasattr(context, "get_abi_sizeof") and hasattr(context, "get_abi_alignment")):
        return False
    library._optimize_functions = _definitions_optimized(library._optimize_functions)
    worker.inline_ir = _inlined_with_one_memo(worker.inline_ir)
    inline_closurecall.copy = _BlockCopies(ir)
    ir.Stmt.list_vars, ir.Expr.list_vars = _listed_in_one_walk(ir)
    for name in ("get_abi_sizeof", "get_abi_alignment"):
        setattr(context, name, _asked_once(getattr(context, name)))
    return True


def _definitions_optimized(per_function):
    """numba's ``CPUCodeLibrary._optimize_functions`` over a module's definitions only (1.)."""

    def optimize_functions(self, ll_module):
        if not compiling_here():
            return per_function(self, ll_module)
        ll_module.data_layout = self._codegen._data_layout
        for func in ll_module.functions:  # (numba's loop, declarations left out)
            if not func.is_declaration:
                fpm, pb = self._codegen._function_pass_manager()
                with self._recorded_timings.record(f"Function passes on {func.name!r}", pb):
                    fpm.run(func, pb)

    return optimize_functions


def _inlined_with_one_memo(inline_ir):
    """numba's ``InlineWorker.inline_ir`` whose block copies share a memo per scope (2.)."""

    def inline_ir_one_memo(self, *args, **kwargs):
        if not compiling_here():
            return inline_ir(self, *args, **kwargs)
        outer = getattr(_MEMOS, "scopes", None)
        _MEMOS.scopes = {}  # (fresh for each inlining: its two copies are of different IRs)
        try:
            return inline_ir(self, *args, **kwargs)
        finally:
            _MEMOS.scopes = outer

    return inline_ir_one_memo


class _BlockCopies:
    """``copy`` as ``inline_closurecall`` sees it: ``deepcopy`` of an IR block inside
    :func:`_inlined_with_one_memo` with the memo of the block's scope (the memo keeps the
    originals alive, so an ``id`` is not reused while it lasts)."""

    def __init__(self, ir):
        self._block = ir.Block

    def __getattr__(self, name):
        return getattr(copy, name)

    def deepcopy(self, x, memo=None):
        scopes = getattr(_MEMOS, "scopes", None)
        if memo is None and scopes is not None and isinstance(x, self._block):
            memo = scopes.setdefault(id(x.scope), {})
        return copy.deepcopy(x, memo)


def _listed_in_one_walk(ir):
    """numba's ``Stmt.list_vars`` and ``Expr.list_vars`` (``_rec_list_vars`` of the statement's
    attributes, of the expression's arguments: a variable itself, an instruction's
    ``list_vars()``, the variables of a list's, tuple's or dict's values in order, nothing for
    anything else) filling one list (3.).

    numba tells the cases apart with ``isinstance``; here by a table of classes, for a class
    whose ``isinstance`` answers follow from its subclass relations: ``isinstance(x, C)`` also
    reads ``x.__class__``, which is ``type(x)`` unless a class of its MRO overrides attribute
    access or defines ``__class__`` (a proxy's does; Python's str, int, list... and builtin
    functions override ``__getattribute__`` with the generic one).  Other values take numba's
    checks each time.  (On numba's path again: a subclass with its own ``_rec_list_vars``, and
    any thread not compiling a tinyopt kernel.)"""
    var, inst, numbas_walk = ir.Var, ir.Inst, ir.Inst._rec_list_vars
    stmt_list_vars, expr_list_vars = ir.Stmt.list_vars, ir.Expr.list_vars
    generic = {object, str, int, float, complex, bool, bytes, type(None), slice, list, tuple,
               dict, type(len)}
    kinds: dict[type, int] = {}

    def kind_of(value) -> int:
        if isinstance(value, var):
            kind = _VAR
        elif isinstance(value, inst):
            kind = _INST
        elif isinstance(value, (list, tuple)):
            kind = _SEQUENCE
        elif isinstance(value, dict):
            kind = _MAPPING
        else:
            kind = _LEAF
        cls = type(value)
        if all(c in generic or ("__getattribute__" not in vars(c) and "__class__" not in vars(c))
               for c in cls.__mro__):
            kinds[cls] = kind
        return kind

    def walk(values, out: list) -> None:
        for value in values:
            kind = kinds.get(type(value))
            if kind is None:
                kind = kind_of(value)
            if kind == _VAR:
                out.append(value)
            elif kind == _LEAF:
                continue
            elif kind == _INST:
                out.extend(value.list_vars())
            elif kind == _SEQUENCE:
                walk(value, out)
            else:
                walk(value.values(), out)

    def listed(val) -> list:
        out: list = []
        walk(val.values() if type(val) is dict else (val,), out)
        return out

    def stmt_vars(self):
        if compiling_here() and type(self)._rec_list_vars is numbas_walk:
            return listed(self.__dict__)
        return stmt_list_vars(self)

    def expr_vars(self):
        if compiling_here() and type(self)._rec_list_vars is numbas_walk:
            return listed(self._kws)
        return expr_list_vars(self)

    return stmt_vars, expr_vars


def _asked_once(ask):
    """numba's ``BaseContext.get_abi_sizeof`` (or ``get_abi_alignment``) of an LLVM type,
    kept by the type's text and the context's target data (4.)."""
    answers: dict = {}  # (id of the target data, text of the type) -> (target data, answer)

    def asked_once(self, ty):
        if not compiling_here() or not isinstance(ty, llvm_ir.Type):
            return ask(self, ty)
        text = str(ty)
        if "%" in text:  # (an identified struct: its text is its name, not its layout)
            return ask(self, ty)
        data = self.target_data
        kept = answers.get((id(data), text))
        if kept is None or kept[0] is not data:  # (the data kept alive: its id is not reused)
            kept = answers[(id(data), text)] = (data, ask(self, ty))
        return kept[1]

    return asked_once
