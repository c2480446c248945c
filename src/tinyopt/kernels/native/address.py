"""Arrays reached through a table of addresses: storage that lives where its owner put it.

An optimizer steps a group's parameters in one kernel call, but their storage is wherever the
user's arrays are (``nn.Parameter(to.from_numpy(arr))``, shared memory, a torch tensor's memory
through numpy): a segment table gives the kernel, per parameter ``j``, the address of its first
element (``addr[j]``, int64) and its extent in the flat layout (``[seg[j], seg[j + 1])``), and
:func:`at` turns one entry back into an array inside the kernel.  Nothing is copied.

Who makes a table keeps every array whose address is in it alive, checks that each is
C-contiguous, of the kernel's dtype and of its segment's size (``engine/slot.py``): a kernel reads
exactly ``seg[j + 1] - seg[j]`` elements from ``addr[j]``, so a table that is right is never out
of bounds.

:func:`copy_segments` copies between such storage and a flat buffer, for algorithms that work
on the group as one vector (LBFGS, Adafactor's kernel, ZeRO's allgather).
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.core.typing.npydecl import parse_shape

from tinyopt.kernels.jit import kernel
from tinyopt.kernels.native.numba_cache import cached_intrinsic


@cached_intrinsic
def carray(typingctx, ptr, shape):
    """``numba.carray(ptr, shape)`` for a typed pointer: the C-contiguous array of that shape (an
    integer or a tuple of them) over ``ptr``'s memory, owned by nobody.  The same array, built
    by numba's own code, but lowered where it is called: ``numba.carray`` is an overload whose
    implementation numba compiles as a function of its own for every pointer type and number of
    dimensions, ~0.02 s of CPU each, 4-6 of them in each process of the small GPT's cold first
    step."""
    from numba.np.arrayobj import np_cfarray  # (typed when compiling: numba's lowering is loaded)

    ndim = parse_shape(shape)
    if not isinstance(ptr, types.CPointer) or ndim is None:
        return None
    return types.Array(ptr.dtype, ndim, "C")(ptr, shape), np_cfarray


@cached_intrinsic
def data(typingctx, a):
    """A typed pointer to the first element of ``a``, a C-contiguous array (another layout is a
    typing error, when the kernel compiles): what a kernel reads an array through where its
    cold compile counts (``kernels/loss.py``'s ``ce_rows``).  numba lowers an array access to
    ~30 lines of LLVM IR (the array's structure loaded, a negative index wrapped), and each use
    of an array variable (``a.shape``, ``a.ctypes``) to ~30 more; a pointer access is 2 lines,
    and this is one use.  The caller keeps ``a`` alive and indexes within its size."""
    if not (isinstance(a, types.Array) and a.layout == "C"):
        return None

    def codegen(context, builder, signature, args):
        return context.make_array(signature.args[0])(context, builder, args[0]).data

    return types.CPointer(a.dtype)(a), codegen


@cached_intrinsic
def c_contiguous(typingctx, a):
    """Whether the array ``a`` is C-contiguous, a constant of the compiled kernel: numba types
    an array argument by its layout, ``C`` exactly where numpy's ``flags.c_contiguous`` holds,
    and a dispatcher that may compile calls only a build of the argument's exact types, so a
    build for another layout is another build.  For a kernel without reference counting
    (``jit.kernel(nrt=False)``), where reading ``a.flags`` needs it; the check costs nothing
    at run time, and a build whose check fails is the one that raises."""
    if not isinstance(a, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return context.get_constant(types.boolean, a.layout == "C")

    return types.boolean(a), codegen


@cached_intrinsic
def at(typingctx, addr, n, like):
    """The 1-d C-contiguous array of ``n`` elements at ``addr``, of ``like``'s dtype (an array,
    or a numpy scalar type such as ``np.uint16``): ``carray`` of the address as a pointer, in one
    intrinsic, as an inlined function it cost numba's inline pass at every call (~0.01-0.02 s
    of a kernel's cold compile each: the Adam walker has two)."""
    from numba.np.arrayobj import np_cfarray  # (typed when compiling: numba's lowering is loaded)

    if not isinstance(n, types.Integer):
        return None
    dtype = like.dtype if isinstance(like, types.Array) else like.instance_type
    ptr, array = types.CPointer(dtype), types.Array(dtype, 1, "C")

    def codegen(context, builder, signature, args):
        start = builder.inttoptr(args[0], context.get_value_type(ptr))
        return np_cfarray(context, builder, array(ptr, signature.args[1]), (start, args[1]))

    return array(types.int64, n, like), codegen


@cached_intrinsic
def offset(typingctx, ptr, k):
    """``ptr + k`` for a typed pointer (``k`` elements on): a view of a flat buffer from an
    element on, indexed from 0 (the optimizer's serial walker: a parameter's slice of its state
    buffers).  No bounds: the caller keeps ``k`` and what it reads there within the buffer."""
    if not (isinstance(ptr, types.CPointer) and isinstance(k, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        return builder.gep(args[0], [args[1]])

    return ptr(ptr, k), codegen


@cached_intrinsic
def retyped(typingctx, addr, ptr):
    """The address ``addr`` (an int64, an entry of a table of addresses) as a pointer of
    ``ptr``'s type, where the kernel has no array of the dtype at hand, or would pay for using
    one (the serial walker's parameters and gradients, typed as its state buffer; ``blas.pointer``
    takes a scalar for the type)."""
    if not (isinstance(addr, types.Integer) and isinstance(ptr, types.CPointer)):
        return None

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(ptr))

    return ptr(addr, ptr), codegen


@cached_intrinsic
def local_copy(typingctx, rec):
    """A copy of the record ``rec`` (an element of a structured array: numba passes it as a
    pointer to its bytes) on the kernel's stack.  Why: a loop that reads a record's fields and
    stores through other pointers must reload the fields after every store (the record might be
    what was written), and LLVM neither hoists them nor vectorizes the loop; a copy whose
    address never escapes cannot be written through another pointer, so its fields become
    registers.  The same values: the bytes are copied once, where this is called."""
    if not isinstance(rec, types.Record):
        return None

    def codegen(context, builder, signature, args):
        data_type = context.data_model_manager[rec].get_data_type()
        copy = cgutils.alloca_once(builder, data_type)
        builder.store(builder.load(args[0]), copy)
        return copy

    return rec(rec), codegen


@kernel
def copy_segments(flat, addr, seg, flags, into_flat):
    """For every ``j`` with ``flags[j] != 0``: ``flat[seg[j]:seg[j + 1]] <- storage j`` if
    ``into_flat`` (gather), else ``storage j <- flat[seg[j]:seg[j + 1]]`` (scatter); ``flat``
    1-d C-contiguous, the storage of ``flat``'s dtype at ``addr[j]``."""
    # element loops, not slice assignments: numba compiles a slice assignment's shape check with
    # its error message (string formatting of the shapes), ~2 s of CPU of a cold first step
    # whose gradients the user assigned; the bounds check below has a constant message
    for j in range(addr.shape[0]):
        if flags[j] != 0:
            lo, hi = seg[j], seg[j + 1]
            if lo < 0 or hi > flat.shape[0]:
                raise ValueError("copy_segments: a segment lies outside the flat buffer")
            storage = at(addr[j], hi - lo, flat)
            if into_flat:
                for i in range(hi - lo):
                    flat[lo + i] = storage[i]
            else:
                for i in range(hi - lo):
                    storage[i] = flat[lo + i]
