"""A software prefetch for compiled (numba) kernels: ``prefetch(a, i)``. Rank-local.

The NAU kernels gather or scatter whole feature rows, and the partition store's CSR fill looks
up a table entry, at indices read from an index array (``x[idx[j]]``), which the hardware
prefetcher cannot predict: each row is a cache miss whose
latency the out-of-order core overlaps only a few rows deep. Prefetching the rows a few entries
ahead (``idx[j + D]``) keeps more misses in flight. A prefetch is a hint: it changes no value,
and an address past the array is not dereferenced. A leaf module (no shardgnn imports), so
any kernel module can use it.
"""
from __future__ import annotations

from typing import Any

import functools

import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: Index entries looked ahead by the NAU gather/scatter kernels (CSBM 50k, rows of 64 floats:
#: 16 about 4% faster than 8 in a CPU-time micro-benchmark, 2 or 4 slower).
DISTANCE = 16


@functools.lru_cache(maxsize=1)
def _intrinsic_name() -> str:
    """The prefetch intrinsic's name as this LLVM mangles it: ``llvm.prefetch.p0`` with opaque
    pointers (LLVM >= 15, numba >= 0.61), ``llvm.prefetch.p0i8`` before; the first whose call
    verifies. Pure (parses a four-line module, once)."""
    for name in ("llvm.prefetch.p0", "llvm.prefetch.p0i8"):
        src = (f'declare void @"{name}"(i8*, i32, i32, i32)\n'
               f'define void @probe(i8* %p) {{\n'
               f'  call void @"{name}"(i8* %p, i32 0, i32 3, i32 1)\n  ret void\n}}\n')
        try:
            llvm.parse_assembly(src).verify()
        except RuntimeError:
            continue
        return name
    return "llvm.prefetch.p0i8"


def _codegen(write: int) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]],
                                       wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _intrinsic_name())
        # (address, read 0 / write 1, locality 3 = keep in every cache level, data cache)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(write), i32(3), i32(1)])
        return context.get_dummy_value()

    return codegen


def _typer(write: int) -> Any:
    def typer(typingctx: Any, arr: Any, idx: Any) -> Any:
        if (not isinstance(arr, types.Array) or arr.ndim != 1
                or not isinstance(idx, types.Integer)):
            return None
        return types.void(arr, idx), _codegen(write)

    return typer


#: ``prefetch(a, i)``: hint that element ``i`` of the 1-D array ``a`` will be read soon.
prefetch: Any = intrinsic(_typer(0))
#: ``prefetch_write(a, i)``: hint that element ``i`` of the 1-D array ``a`` will be written soon.
prefetch_write: Any = intrinsic(_typer(1))
