"""The native sub-layer: kernels code that reaches below numba's public API.

Everything here depends on a particular numba/llvmlite (LLVM IR emitted by hand, numba's internal
classes) or a particular CPU or library (an ISA extension, OpenBLAS's exported symbols, GNU
OpenMP), so it is kept in one place, gated, and never the only path:

- ``half``: the 16-bit float conversions as numba intrinsics (LLVM ``fpext``/``fptrunc`` to
  ``half``, integer IR for bfloat16), inlined into the kernels that store 16-bit values;
- ``address``: an array's data pointer as a typed array view inside a kernel (the optimizers'
  flat buffers step parameters where they live);
- ``blas``: numpy's OpenBLAS by address (``gemm_address``, ``matmul_args``: a GEMM called from
  inside a kernel) and its thread count (``single_threaded``);
- ``shared_threads``: OpenBLAS's jobs run on numba's GNU OpenMP threads (a ``cfunc`` callback
  whose body is LLVM IR);
- ``gemm_bf16``: the AVX512-BF16 GEMM (``llvm.x86.avx512bf16.dpbf16ps.512``) Muon uses;
- ``numba_cache``: numba's cache class swapped for one that loads cached kernels without the
  context refresh;
- ``lean_compile``: four of numba's compile steps made cheaper for tinyopt's kernels, with the
  same machine code (its inliner's copies of a callee's IR, its pass pipelines for declarations,
  its IR's variable lists, its ABI-size questions to LLVM); ``quiet_compile``: numba compiles
  with the garbage collector paused;
- ``c_function``: a C function compiled by numba's ``CFunc`` class and cached on disk (the
  callbacks ``shared_threads`` hands OpenBLAS, made through ``kernels/jit.py``'s ``c_callback``);
- ``instructions``: single instructions as intrinsics (``llvm.fma``, ``llvm.prefetch``, a
  float32's bit pattern), for the optimizers' kernels;
- ``quant8_lanes``: the 8-bit optimizers' table lookups and Adam pass, 16 elements at once
  (``llvm.masked.gather``).

Gates.  ``pyproject.toml`` admits the numba/llvmlite releases this was tested on (numba 0.68,
llvmlite 0.50); ``numba_cache`` and ``lean_compile`` run only on the numba versions they were
checked on (``CHECKED_VERSIONS``); ``gemm_bf16`` only where the CPU has AVX512-BF16 and its
kernel compiled (``gemm_bf16.usable``: otherwise Muon computes in float32); ``shared_threads`` only
with an OpenBLAS that takes a thread callback and GNU OpenMP (otherwise OpenBLAS keeps its own
pool); ``blas`` falls back to numpy's ``matmul`` where no GEMM address is found.
``instructions`` and ``quant8_lanes`` need no gate beyond the numba/llvmlite range: they use only
target-independent LLVM intrinsics, which LLVM lowers on every CPU, to the same bits: ``llvm.fma``
to one ``vfmadd`` or, without FMA, a call to libm's correctly rounded ``fma``;
``llvm.masked.gather`` to ``vgatherdps`` or, without AVX2, scalar loads; ``llvm.prefetch`` to
``prefetcht0/1`` or to nothing (a hint).  So there is no CPU where they fail to compile and no
fallback to choose (``tests/test_native_intrinsics.py`` compiles them for a baseline x86-64, SSE2
only, and compares the bits).  What is version-specific in them is llvmlite's API (opaque-pointer
intrinsic names such as ``llvm.prefetch.p0``, a vector ``gep``), which the pinned range fixes.

Threads (the one policy every kernel follows).  Three pools could run tinyopt's work: numba's
OpenMP threads (``prange`` kernels, ``kernels/jit.py``), tinyopt's worker threads
(``kernels/chunk_threads.py``: a fixed number of chunks handed to sleeping Python threads) and
OpenBLAS's pthreads (numpy's matmul).  Threads of one pool spin after their work and take the
cores the next pool's call needs (2 cores: an MLP step took 8.5 ms against 0.75 ms), so:

1. small work runs serially on the calling thread: a parallel kernel uses its threads only from
   ``PARALLEL_MIN_ELEMENTS`` elements (``kernels/jit.py``);
2. where ``shared_threads`` is installed, BLAS runs on numba's OpenMP threads, so there is one
   pool and kernels cut rows with ``prange``; otherwise big per-sample kernels use the workers,
   which sleep between calls;
3. recurrences (many small dependent GEMMs) run their GEMMs on one BLAS thread
   (``blas.single_threaded``);
4. ``tinyopt.set_num_threads`` sets numba's and OpenBLAS's counts together
   (``kernels/num_threads.py``), and what a thread computes never depends on the count (fixed
   chunks, sums added in a fixed order): results are the same bits on any number of threads;
5. after ``fork`` a child runs serial builds (GNU OpenMP does not survive it).
"""
