"""The environment report of ``python -m tinyopt`` and ``tinyopt.utils.collect_env()``: what to
paste into a bug report, and what to look at when tinyopt is slow or compiles at every start.

    $ python -m tinyopt
    tinyopt 0.1.0 (/home/me/tinyopt/src/tinyopt)
    versions
      python             3.11.7 (CPython, Linux-6.18-x86_64-with-glibc2.36)
      numpy              2.4.6
      ...
    threads
      CPUs this process may use  2
      numba threading layer      omp (not started yet; NUMBA_THREADING_LAYER=default, ...)
      BLAS core                  SkylakeX
      ...
    kernel cache
      folder            /home/me/tinyopt/src/tinyopt/kernels/__pycache__
      compiled kernels  17 (0.7 MiB)
    ...

Sections: versions (tinyopt's dependencies and the optional packages, read from the installed
metadata without importing them), threads (numba's threading layer and thread count, the BLAS's,
the CPUs this process may use, the variables that set them), the kernel cache (where numba keeps
tinyopt's compiled kernels, how many and how many bytes: an empty cache means the next run
compiles for minutes), the CPU (what numba compiles for, the vector features tinyopt's kernels
use) and every ``TINYOPT_*`` environment variable (:data:`VARIABLES`; docs/environment.md
describes each) with its value.  Nothing here compiles a kernel or starts a thread pool.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
import os
import platform
import sys
import tempfile
from pathlib import Path

from tinyopt import __version__

# every environment variable tinyopt reads (docs/environment.md says what each does;
# tests/test_diagnostics.py checks that the source reads no other and that the table has each)
VARIABLES = ("TINYOPT_NUM_THREADS", "TINYOPT_PARALLEL_MIN", "TINYOPT_SHARE_BLAS_THREADS",
             "TINYOPT_NUMBA_LAZY_LOAD", "TINYOPT_NUMBA_LEAN_COMPILE", "TINYOPT_PLAN_CACHE_BYTES",
             "TINYOPT_PLAN_SHARING", "TINYOPT_MUON_NS", "TINYOPT_COMPILE_AFTER",
             "TINYOPT_COMPILE_AHEAD", "TINYOPT_COMPILE_AHEAD_FORK")

# the other variables that change what tinyopt does: numba's and the BLAS's
OTHER_VARIABLES = ("NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER", "NUMBA_CACHE_DIR", "NUMBA_OPT",
                   "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_DISABLE_JIT", "OMP_NUM_THREADS",
                   "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

DEPENDENCIES = ("numpy", "numba", "llvmlite", "typing-extensions")
OPTIONAL = ("ml_dtypes", "mpi4py", "mpich", "matplotlib", "safetensors", "torch", "mkdocs")

# CPU features worth naming: the vector units LLVM compiles tinyopt's kernels for
CPU_FEATURES = ("sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                "avx512fp16", "avx512bf16", "amx-bf16", "neon", "sve")


def version(package: str) -> str:
    """The installed version of ``package`` (its distribution name), or ``not installed``."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _blas() -> list[tuple[str, str]]:
    """numpy's BLAS: the library it was built with, and at run time (OpenBLAS) the core it
    chose, its build options and its thread count."""
    import numpy as np

    from tinyopt.kernels.native import blas
    try:
        built = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        rows = [("BLAS", f"{built.get('name', '?')} {built.get('version', '')}".strip())]
    except Exception:  # numpy < 1.26 has no dict form
        rows = [("BLAS", "unknown")]
    for key, names in (("BLAS core", ("openblas_get_corename", "scipy_openblas_get_corename64_",
                                      "scipy_openblas_get_corename")),
                       ("BLAS build", ("openblas_get_config", "scipy_openblas_get_config64_",
                                       "scipy_openblas_get_config")),
                       ("BLAS threads", ("openblas_get_num_threads",
                                         "scipy_openblas_get_num_threads64_",
                                         "scipy_openblas_get_num_threads"))):
        fn = blas._openblas_function(*names)
        if fn is not None:
            if key != "BLAS threads":
                fn.restype = ctypes.c_char_p
            value = fn()
            rows.append((key, value.decode().strip() if isinstance(value, bytes) else str(value)))
    return rows


def threading_layer() -> str:
    """numba's threading layer: the one running, or the one numba would choose (without
    starting it: a started OpenMP pool changes what ``fork`` may do, ``kernels/jit.py``)."""
    import numba
    try:
        return f"{numba.threading_layer()} (started)"
    except ValueError:  # no parallel kernel has run in this process
        pass
    requested = numba.config.THREADING_LAYER
    order = {"default": ("tbb", "omp", "workqueue"), "safe": ("tbb",),
             "threadsafe": ("tbb", "omp"), "forksafe": ("tbb", "omp", "workqueue")}
    available = []
    for layer in ("tbb", "omp", "workqueue"):
        try:
            importlib.import_module(f"numba.np.ufunc.{layer}pool" if layer != "workqueue"
                                    else "numba.np.ufunc.workqueue")
            available.append(layer)
        except ImportError:
            pass
    chosen = next((x for x in order.get(requested, (requested,)) if x in available), "none")
    return (f"{chosen} (not started yet; NUMBA_THREADING_LAYER={requested}, available: "
            f"{', '.join(available) or 'none'})")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cache_dirs() -> list[Path]:
    """Where numba may keep tinyopt's compiled kernels: ``NUMBA_CACHE_DIR`` when set, else the
    ``__pycache__`` folders of tinyopt's sources, and the private fallback ``kernels/jit.py``
    uses where those are read-only."""
    import numba
    package = Path(__file__).resolve().parent
    if numba.config.CACHE_DIR:
        return [Path(numba.config.CACHE_DIR)]
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    private = Path(tempfile.gettempdir()) / f"tinyopt-numba-{uid}"
    return sorted(package.rglob("__pycache__")) + ([private] if private.is_dir() else [])


def cache_usage() -> tuple[int, int, list[Path]]:
    """(compiled kernels, bytes, folders holding them) in :func:`cache_dirs`: numba writes one
    ``.nbi`` index per kernel and one ``.nbc`` file per compiled signature."""
    kernels = size = 0
    used = []
    for folder in cache_dirs():
        files = [p for p in folder.rglob("*.nb[ic]")] if folder.is_dir() else []
        if files:
            used.append(folder)
        kernels += sum(p.suffix == ".nbi" for p in files)
        size += sum(p.stat().st_size for p in files)
    return kernels, size, used


def cpu() -> tuple[str, list[str]]:
    """(the CPU numba compiles for, the notable features it has)."""
    import llvmlite.binding as llvm
    from numba.core import config
    name = config.CPU_NAME or llvm.get_host_cpu_name()
    if config.CPU_FEATURES:
        flags = {f[1:] for f in config.CPU_FEATURES.split(",") if f.startswith("+")}
    else:
        flags = {k for k, v in llvm.get_host_cpu_features().items() if v}
    return name, [f for f in CPU_FEATURES if f in flags]


def sections() -> list[tuple[str, list[tuple[str, str]]]]:
    """The report's sections as (title, [(key, value)])."""
    import numba

    from tinyopt.kernels.native import gemm_bf16
    versions = [("python", f"{platform.python_version()} ({platform.python_implementation()}, "
                           f"{platform.platform(terse=True)})")]
    versions += [(p, version(p)) for p in DEPENDENCIES]
    versions += [(p, version(p)) for p in OPTIONAL]
    threads = [("CPUs this process may use", str(_cpus())),
               ("numba threading layer", threading_layer()),
               ("numba threads", str(numba.config.NUMBA_NUM_THREADS))] + _blas()
    threads += [(name, os.environ.get(name, "(unset)")) for name in OTHER_VARIABLES]
    kernels, size, used = cache_usage()
    where = ", ".join(map(str, used)) or ", ".join(map(str, cache_dirs()[:1])) or "(none)"
    cache = [("folder", where),
             ("compiled kernels", f"{kernels} ({size / 2**20:.1f} MiB)" +
              ("; empty: the first run compiles each kernel it uses" if not kernels else ""))]
    name, features = cpu()
    machine = [("numba compiles for", f"{name} ({platform.machine()})"),
               ("vector features", " ".join(features) or "(none of note)"),
               ("bfloat16 GEMM (AVX512-BF16)", "used" if gemm_bf16.available() else
                "not available: Muon's Newton-Schulz runs in float32")]
    ours = [(name, os.environ.get(name, "(unset)")) for name in VARIABLES]
    ours += [(name, f"{value}  <- not a variable tinyopt reads (a typo?)")
             for name, value in sorted(os.environ.items())
             if name.startswith("TINYOPT_") and name not in VARIABLES]
    return [(f"tinyopt {__version__} ({Path(__file__).resolve().parent})", []),
            ("versions", versions), ("threads", threads), ("kernel cache", cache),
            ("CPU", machine), ("TINYOPT_* environment variables", ours)]


def report() -> str:
    """The environment report as text (see the module docstring)."""
    lines = []
    for title, rows in sections():
        lines.append(title)
        width = max((len(k) for k, _ in rows), default=0)
        lines += [f"  {k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines) + "\n"


def collect_env() -> None:
    """Print the environment report (``torch.utils.collect_env``'s role): versions, numba's
    threading layer, BLAS and thread settings, the kernel cache, the CPU features used and every
    ``TINYOPT_*`` environment variable.  ``python -m tinyopt`` prints the same."""
    sys.stdout.write(report())
