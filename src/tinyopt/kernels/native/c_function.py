"""A C function compiled by numba and cached on disk like the kernels (numba internals: ``CFunc``).

numba's public ``cfunc(signature, cache=True)`` compiles as it decorates, before its cache can be
made to load without the context refresh (``numba_cache.loads_without_refresh``); its class,
``numba.core.ccallback.CFunc``, is built here directly instead, the refresh-free cache installed,
and only then compiled.  Used by the kernels a C library calls back (OpenBLAS's thread callback
running chunks of a row kernel: ``kernels/jit.py``'s ``c_callback``).
"""

from __future__ import annotations

from tinyopt.kernels.native.numba_cache import loads_without_refresh
from tinyopt.kernels.native.quiet_compile import gc_paused


def compile_c_function(fn, signature: str, options: dict, cache: bool):
    """``fn`` compiled now as a C function of ``signature`` (numba's signature string) with the
    numba ``options`` (no ``cache`` among them), cached on disk when ``cache``; numba's ``CFunc``,
    whose ``.address`` is the function's address (keep the object alive while it is called).

    Raises numba's ``RuntimeError`` where it cannot cache (the caller picks another folder)."""
    from numba.core import sigutils
    from numba.core.ccallback import CFunc

    cf = CFunc(fn, sigutils.normalize_signature(signature), locals={}, options=options)
    if cache:
        cf.enable_caching()
    loads_without_refresh(cf)
    with gc_paused():
        cf.compile()
    return cf
