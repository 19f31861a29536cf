"""Small thread-local buffers as stack allocations, so LLVM keeps them in registers.

A register block's accumulators written to a ``local`` buffer (``cache_write(..., "local")``)
should become registers. TVM 0.27 gives every such buffer, down to 128 bytes, a
``TVMBackendAllocWorkspace`` call at lowering; LLVM cannot tell that pointer from the kernel's
arguments, so any instruction that may touch memory inside the reduction pins the
accumulators to it. A software prefetch is one (``llvm.prefetch`` is declared
``memory(argmem: readwrite)``): in Winograd's GEMM at 256×14×14 with a prefetch per input
channel, every ``vfmadd`` was followed by a ``vmovups`` of its accumulator to the workspace;
as an ``alloca`` that cannot escape, the same loop is FMAs and loads only (2026-12-02, Zen 5).

TVM keeps an allocation as a stack array when it carries ``disable_lower_builtin``; this pass
sets it on the ``local`` buffers of constant size up to :data:`MAX_STACK_BYTES`. It runs
before ``LowerTVMBuiltin`` (which is in TVM's host passes, after the TIR pipeline).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

#: TVM's annotation that leaves an allocation to the code generator (an ``alloca``).
STACK_ANNOTATION = "disable_lower_builtin"
#: The largest buffer kept on the stack: a register block is at most 32 zmm (2 KiB); TVM's
#: worker threads have the platform's 8 MiB stacks.
MAX_STACK_BYTES = 16 * 1024
LOCAL_SCOPE = "local"


def _bytes(buffer: tirx.Buffer) -> int | None:
    """The buffer's size in bytes, or None when a dimension is not a constant."""
    dtype = tvm.DataType(str(buffer.dtype))
    size = dtype.bits // 8 * dtype.lanes
    for extent in buffer.shape:
        if not isinstance(extent, tirx.IntImm):
            return None
        size *= int(extent)
    return size


def _on_stack(stmt: tirx.AllocBuffer) -> tirx.AllocBuffer:
    buffer = stmt.buffer
    size = _bytes(buffer)
    if buffer.scope() != LOCAL_SCOPE or size is None or size > MAX_STACK_BYTES:
        return stmt
    annotations = {**stmt.annotations, STACK_ANNOTATION: tirx.const(1, "bool")}
    return tirx.AllocBuffer(buffer, annotations)


def keep_locals_on_stack(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its small ``local`` allocations marked for the stack."""
    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.AllocBuffer, _on_stack)))


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="convtune.KeepLocalsOnStack")
def KeepLocalsOnStack(func: tirx.PrimFunc, mod: Any, ctx: Any) -> tirx.PrimFunc:
    """The pass form of :func:`keep_locals_on_stack`."""
    return keep_locals_on_stack(func)
