"""Kernels run with denormals flushed to zero (MXCSR FTZ and DAZ), and leave MXCSR as they found it.

Intel cores take a microcode assist, on the order of a hundred cycles, for an FMA that reads or
would write a denormal; Zen cores do not. Weights are flushed once at build time
(``tuner/graph/denormals.py``), but activations can be denormal too: with PP-OCRv6 small det's
input, 1,100-1,300 of the 76,800 values of its 768-channel GELU outputs at 10×10 are (measured
with onnxruntime), and each feeds 384 FMAs of the next 1×1 conv. OpenVINO runs its CPU kernels
with FTZ/DAZ set in its threads.

This pass runs each parallel loop of a kernel as one chunk of consecutive iterations per
task of TVM's pool (the split the pool makes anyway) and brackets each chunk with

    old = convtune_mxcsr_flush()      # stmxcsr; old | FTZ | DAZ; ldmxcsr
    ...
    convtune_mxcsr_restore(old)       # ldmxcsr old

so the pool's threads and the caller's (which runs task 0) keep their own setting after a call.
The two functions are LLVM IR linked into each kernel (``pragma_import_llvm``, as
``bf16_dot.py`` links its wrapper) and inlined. Measured on a Sapphire-Rapids-class Xeon, 2
threads, a 512×2048 dot-product kernel: 0.57 ms on normal inputs with and without the pass,
18.8 ms on denormal inputs without it, 0.57 with it. A denormal becomes zero, a change below
1.18e-38 per operand. x86 only: on another ISA the pass returns the function unchanged; a
kernel with no parallel loop (a tiny one) runs as the caller's MXCSR says.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from .bf16_dot import IMPORT_LLVM

FLUSH_FUNCTION = "convtune_mxcsr_flush"
RESTORE_FUNCTION = "convtune_mxcsr_restore"
#: MXCSR bits: flush-to-zero (15) and denormals-are-zero (6).
FTZ_DAZ = (1 << 15) | (1 << 6)
MXCSR_LLVM_IR = f"""
define internal i32 @{FLUSH_FUNCTION}() alwaysinline {{
  %slot = alloca i32, align 4
  call void @llvm.x86.sse.stmxcsr(ptr %slot)
  %old = load i32, ptr %slot, align 4
  %new = or i32 %old, {FTZ_DAZ}
  store i32 %new, ptr %slot, align 4
  call void @llvm.x86.sse.ldmxcsr(ptr %slot)
  ret i32 %old
}}
define internal i32 @{RESTORE_FUNCTION}(i32 %old) alwaysinline {{
  %slot = alloca i32, align 4
  store i32 %old, ptr %slot, align 4
  call void @llvm.x86.sse.ldmxcsr(ptr %slot)
  ret i32 0
}}
declare void @llvm.x86.sse.stmxcsr(ptr)
declare void @llvm.x86.sse.ldmxcsr(ptr)
"""


def _target(func: tirx.PrimFunc) -> Any:
    return func.attrs.get("target") if func.attrs is not None else None


def _x86(func: tirx.PrimFunc) -> bool:
    target = _target(func)
    triple = str(target.attrs.get("mtriple", "")) if target is not None else ""
    arch = triple.split("-")[0] if triple else platform.machine().lower()
    return arch in ("x86_64", "amd64", "i686")


def _tasks(func: tirx.PrimFunc) -> int:
    """The parallel tasks TVM's pool will run: the target's cores (the artifact runs with
    ``TVM_NUM_THREADS`` set to them), this machine's when the target does not say."""
    target = _target(func)
    cores = int(target.attrs.get("num-cores", 0)) if target is not None else 0
    return cores if cores > 0 else max(1, os.cpu_count() or 1)


def _flushed(body: tirx.Stmt) -> tirx.Stmt:
    """``body`` between a flush and a restore of MXCSR."""
    old = tirx.Var("convtune_mxcsr", "int32")
    flush = tirx.Bind(old, tirx.call_extern("int32", FLUSH_FUNCTION))
    restore = tirx.Evaluate(tirx.call_extern("int32", RESTORE_FUNCTION, old))
    return tirx.SeqStmt([flush, body, restore])


def _chunked(loop: tirx.For, tasks: int) -> tirx.For:
    """``loop`` as ``tasks`` parallel chunks of consecutive iterations, each flushed once.

    TVM's pool gives each task a contiguous share of a parallel loop, ``ceil(extent / tasks)``
    iterations, so with as many tasks as chunks the work is split as before; the MXCSR pair runs
    once per task instead of once per iteration.
    """
    extent = int(loop.extent)
    size = -(-extent // tasks)
    chunk = tirx.Var(f"{loop.loop_var.name}_chunk", loop.loop_var.ty.dtype)
    dtype = loop.loop_var.ty.dtype
    begin = loop.min + chunk * tirx.const(size, dtype)
    end = tirx.min(begin + tirx.const(size, dtype), loop.min + tirx.const(extent, dtype))
    serial = tirx.For(loop.loop_var, begin, end - begin, tirx.ForKind.SERIAL, loop.body)
    return tirx.For(
        chunk, tirx.const(0, dtype), tirx.const(-(-extent // size), dtype), loop.kind,
        _flushed(serial), loop.thread_binding, loop.annotations,
    )  # fmt: skip


def flush_denormals_in(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with each parallel loop run under FTZ/DAZ, one flush and restore per task."""
    if not _x86(func):
        return func
    tasks = _tasks(func)
    parallel: list[bool] = []

    def on_for(loop: tirx.For) -> tirx.For:
        if loop.kind != tirx.ForKind.PARALLEL or not isinstance(loop.extent, tirx.IntImm):
            return loop
        parallel.append(True)
        return _chunked(loop, tasks)

    body = tvm_ffi.structural_map(func.body, (tirx.For, on_for))
    if not parallel:
        return func
    linked = tirx.AttrStmt(
        tirx.const(0, "int32"), IMPORT_LLVM, tvm.ir.StringImm(MXCSR_LLVM_IR), body
    )
    return func.with_body(linked)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="convtune.FlushDenormals")
def FlushDenormals(func: tirx.PrimFunc, mod: Any, ctx: Any) -> tirx.PrimFunc:
    """The pass form of :func:`flush_denormals_in`."""
    return flush_denormals_in(func)


__all__ = ["FTZ_DAZ", "FlushDenormals", "flush_denormals_in"]
