"""Two of numba's compile steps made cheaper for tinyopt's kernels (numba internals: its codegen
and its inliner), with the same machine code.

1. **The Python wrapper's module is not optimized twice.**  numba optimizes every function of a
   module at -O3 as it adds the module to a library (``CPUCodeLibrary._optimize_functions``), then,
   at finalization, optimizes the library's whole module at -O3 again (an inlining pass, then the
   full pipeline, which simplifies every function after inlining).  A kernel called from Python
   gets a module of its own for its wrapper (unboxing the arguments, calling the kernel, boxing
   the result); that module's first round is skipped.  The kernel's own module keeps both rounds:
   skipping the first round there too saved ~0.1-0.25 s more of LLVM in a cold first step of the
   small GPT, but changed the machine code of a third of its kernels (a broadcast loop vectorized
   otherwise), so it is not done.
2. **The inliner's copies share one memo.**  To inline a function (``inline="always"``, and the
   kernels' ``jit.inline``) numba deep-copies the callee's IR twice, block by block, each block
   with a fresh memo, so each block's copy copies the callee's whole scope (every variable)
   again: n blocks and v variables cost n v copies where v do.  Here the blocks of one IR share
   one memo, as the blocks they copy share their scope and variables; numba's IR comes out the
   same (the copies compare equal as numba compares them).

Checked: a cold first step of ``benchmarks/bench_seq.py``'s GPT and LSTM compiles 29 libraries,
with the same assembly (addresses aside) with and without these changes (``PYTHONHASHSEED``
fixed: numba's own output varies with it); numba's inlining took 0.08 s of CPU there instead of
0.17, and LLVM ~0.05 s less (3 alternating pairs, no compile-ahead helper).

Both apply only on a thread compiling a tinyopt kernel (``quiet_compile.compiling_here``), and are
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

from tinyopt.kernels.native.quiet_compile import compiling_here

_INSTALLED: list[bool] = []
_WRAPPER = "_ZN7cpython"  # (the mangled name of numba's Python wrapper of a kernel)
_MEMOS = threading.local()  # (.scopes: id of a scope -> the memo of its blocks' copies)


def install() -> bool:
    """Put both changes in place, once a process; whether they are."""
    if not _INSTALLED:
        _INSTALLED.append(_install())
    return _INSTALLED[0]


def _install() -> bool:
    if os.environ.get("TINYOPT_NUMBA_LEAN_COMPILE", "1") == "0":
        return False
    from numba.core import codegen, inline_closurecall, ir

    library = codegen.CPUCodeLibrary
    worker = inline_closurecall.InlineWorker
    if not (hasattr(library, "_optimize_functions") and hasattr(worker, "inline_ir")
            and inline_closurecall.copy is copy):
        return False
    per_function = library._optimize_functions
    inline_ir = worker.inline_ir

    def optimize_functions(self, ll_module):
        if compiling_here() and all(f.name.startswith(_WRAPPER) for f in ll_module.functions
                                    if not f.is_declaration):
            # (what numba's sets before its passes, for the module-level ones)
            ll_module.data_layout = self._codegen._data_layout
            return None
        return per_function(self, ll_module)

    def inline_ir_one_memo(self, *args, **kwargs):
        if not compiling_here():
            return inline_ir(self, *args, **kwargs)
        outer = getattr(_MEMOS, "scopes", None)
        _MEMOS.scopes = {}  # (fresh for each inlining: its two copies are of different IRs)
        try:
            return inline_ir(self, *args, **kwargs)
        finally:
            _MEMOS.scopes = outer

    class BlockCopies:
        """``copy`` as ``inline_closurecall`` sees it: ``deepcopy`` of an IR block inside
        :func:`inline_ir_one_memo` with the memo of the block's scope (the memo keeps the
        originals alive, so an ``id`` is not reused while it lasts)."""

        def __getattr__(self, name):
            return getattr(copy, name)

        @staticmethod
        def deepcopy(x, memo=None):
            scopes = getattr(_MEMOS, "scopes", None)
            if memo is None and scopes is not None and isinstance(x, ir.Block):
                memo = scopes.setdefault(id(x.scope), {})
            return copy.deepcopy(x, memo)

    library._optimize_functions = optimize_functions
    worker.inline_ir = inline_ir_one_memo
    inline_closurecall.copy = BlockCopies()
    return True
