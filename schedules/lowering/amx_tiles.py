"""Configures AMX tiles once per parallel task, and links the configuration functions into the
kernels that call them (``schedules/ops/amx.py``).

The int8-amx space's init intrinsic calls the tile configuration of its block before zeroing
the accumulators, once per register block. ``ldtilecfg`` is slow: a configuration and four
``tilezero`` every four ``tdpbusd`` made each take 30 ns instead of 5 (Sapphire-Rapids-class
Xeon, 2026-12-05), and a 56×56 3×3 conv runs 448 register blocks. The configuration only has to
precede the tiles' first use in each thread, so this pass moves the call to the start of each
task of the kernel's parallel loops (``denormals.py`` made them one chunk per task; this pass
runs after it), or of the function when it has none. A function that calls two configurations
keeps its calls where they are.

A task keeps the configuration its thread had (on its stack) and loads it back at its end
(``amx.keep_functions``): onnxruntime's AMX kernels, run after ours on the same thread, trust
the configuration they loaded once.

Each configuration is LLVM IR, attached once per function with TVM's ``pragma_import_llvm`` (as
``bf16_dot.py`` links its wrapper), then inlined by LLVM.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import ir, tirx

from ..ops.amx import is_tile_config, keep_functions, tile_config_ir
from .bf16_dot import IMPORT_LLVM
from .stack_locals import STACK_ANNOTATION


def _config_name(stmt: tirx.Evaluate) -> str | None:
    call = stmt.value
    if isinstance(call, ir.Call) and call.op.name == "tirx.call_extern":
        name = str(call.args[0].value)
        return name if is_tile_config(name) else None
    return None


def _config_calls(stmt: tirx.Stmt) -> list[str]:
    """The tile configuration of every configuration call in ``stmt``, in order."""
    found: list[str] = []

    def on_evaluate(evaluate: tirx.Evaluate) -> None:
        name = _config_name(evaluate)
        if name is not None:
            found.append(name)

    tvm_ffi.structural_walk(stmt, (tirx.Evaluate, on_evaluate))
    return found


def _configured_per_task(body: tirx.Stmt, name: str) -> tirx.Stmt:
    """``body`` with its calls of configuration ``name`` moved to the start of each iteration
    of the parallel loops that held them (of ``body`` when none did)."""
    configure = tirx.Evaluate(tirx.call_extern("int32", name))

    def drop(stmt: tirx.Evaluate) -> tirx.Stmt:
        return tirx.Evaluate(tirx.const(0, "int32")) if _config_name(stmt) == name else stmt

    def calls(stmt: tirx.Stmt) -> int:
        return _config_calls(stmt).count(name)

    # Which parallel loops use tiles is read before the calls go (a prologue's loops do not).
    tiled: list[tirx.Var] = []
    inside: list[int] = []

    def find(loop: tirx.For) -> None:
        count = calls(loop.body) if loop.kind == tirx.ForKind.PARALLEL else 0
        if count:
            tiled.append(loop.loop_var)
            inside.append(count)

    tvm_ffi.structural_walk(body, (tirx.For, find))
    if tiled and sum(inside) != calls(body):
        return body  # a call outside those loops (or nested ones): leave every call in place
    body = tvm_ffi.structural_map(body, (tirx.Evaluate, drop))
    if not tiled:
        return tirx.SeqStmt([configure, body])

    def on_for(loop: tirx.For) -> tirx.For:
        if not any(var.same_as(loop.loop_var) for var in tiled):
            return loop
        return tirx.For(
            loop.loop_var, loop.min, loop.extent, loop.kind, tirx.SeqStmt([configure, loop.body]),
            loop.thread_binding, loop.annotations,
        )  # fmt: skip

    return tvm_ffi.structural_map(body, (tirx.For, on_for))


#: Bytes of a tile configuration (``ldtilecfg``'s operand).
CONFIG_BYTES = 64


def _kept(body: tirx.Stmt, config: str) -> tirx.Stmt:
    """``body`` between storing the thread's tile configuration on the stack and loading it
    back (``amx.keep_functions``, linked with ``config``)."""
    kept = tirx.decl_buffer((CONFIG_BYTES,), "uint8", name="amx_kept", scope="local")
    keep, restore = keep_functions(config)
    return tirx.SeqStmt(
        [
            tirx.AllocBuffer(kept, {STACK_ANNOTATION: tirx.const(1, "bool")}),
            tirx.Evaluate(tirx.call_extern("int32", keep, kept.data)),
            body,
            tirx.Evaluate(tirx.call_extern("int32", restore, kept.data)),
        ]
    )


def _kept_per_task(body: tirx.Stmt, config: str) -> tirx.Stmt:
    """``body`` with the thread's tile configuration kept and loaded back around every parallel
    task that configures tiles, or around itself when no parallel loop does (the functions
    linked with ``config``, one of the configurations it calls)."""
    tasks: list[bool] = []

    def on_for(loop: tirx.For) -> tirx.For:
        if loop.kind != tirx.ForKind.PARALLEL or not _config_calls(loop.body):
            return loop
        tasks.append(True)
        return tirx.For(
            loop.loop_var, loop.min, loop.extent, loop.kind, _kept(loop.body, config),
            loop.thread_binding, loop.annotations,
        )  # fmt: skip

    body = tvm_ffi.structural_map(body, (tirx.For, on_for))
    return body if tasks else _kept(body, config)


def configure_tiles(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its tile configuration once per task, the thread's own configuration back
    at each task's end, and the configurations' IR attached."""
    configs = list(dict.fromkeys(_config_calls(func.body)))  # distinct, in order
    if not configs:
        return func
    body = func.body
    if len(configs) == 1:
        body = _configured_per_task(body, configs[0])
    body = _kept_per_task(body, configs[0])
    for name in configs:
        ir_text = tile_config_ir(name)
        body = tirx.AttrStmt(tirx.const(0, "int32"), IMPORT_LLVM, ir.StringImm(ir_text), body)
    return func.with_body(body)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="convtune.ConfigureAmxTiles")
def ConfigureAmxTiles(func: tirx.PrimFunc, mod: Any, ctx: Any) -> tirx.PrimFunc:
    """The pass form of :func:`configure_tiles`."""
    return configure_tiles(func)


__all__ = ["ConfigureAmxTiles", "configure_tiles"]
