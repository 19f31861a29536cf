"""Links the ``vdpbf16ps`` wrapper into the functions that call it (``schedules/ops/bf16_dot.py``).

The bf16 intrinsic calls an LLVM IR function by name; TVM's LLVM code generator parses and links
the IR of a ``pragma_import_llvm`` attribute, so this pass wraps the body of each function that
calls it in one such attribute (one link per function, not one per unrolled call).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import ir, tirx

from ..ops.bf16_dot import DPBF16PS_FUNCTION, DPBF16PS_LLVM_IR

IMPORT_LLVM = "pragma_import_llvm"


def _calls_dpbf16ps(func: tirx.PrimFunc) -> bool:
    found: list[bool] = []

    def on_call(call: ir.Call) -> None:
        if call.op.name == "tirx.call_pure_extern" and call.args[0].value == DPBF16PS_FUNCTION:
            found.append(True)

    tvm_ffi.structural_walk(func.body, (ir.Call, on_call))
    return bool(found)


def link_dpbf16ps(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with the wrapper's IR attached where it calls the wrapper."""
    if not _calls_dpbf16ps(func):
        return func
    ir_text = ir.StringImm(DPBF16PS_LLVM_IR)
    body = tirx.AttrStmt(tirx.const(0, "int32"), IMPORT_LLVM, ir_text, func.body)
    return func.with_body(body)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="convtune.LinkDpbf16ps")
def LinkDpbf16ps(func: tirx.PrimFunc, mod: Any, ctx: Any) -> tirx.PrimFunc:
    """The pass form of :func:`link_dpbf16ps`."""
    return link_dpbf16ps(func)


__all__ = ["LinkDpbf16ps", "link_dpbf16ps"]
