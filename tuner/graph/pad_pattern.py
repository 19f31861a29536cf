"""Padding is not element by element: a pass that corrects TVM's op pattern of a pad.

TVM's pattern analysis (``AnnotateTIROpPattern``) calls a pad that adds rows or columns only at
the end (the ONNX Pad of PP-OCRv6's stem: bottom and right by one) element-wise (``op_pattern``
0): its loads use the store's indices, under a condition. FuseOps then lets it follow a conv
into the conv's kernel as an epilogue, where every schedule that computes the epilogue under
the kernel's loops — ours and MetaSchedule's own — computes only the points that read the
kernel's tile: the padded border was never written, and PP-OCRv6 tiny det's output was off by
up to 1 (verification refused it). An element-wise function writes as many elements as its
largest input; one that writes more is padding, marked injective here, so it runs as its own
kernel (or fused with the injective ops around it).
"""

from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

#: TVM's op patterns kElemWise and kInjective.
_ELEMWISE = 0
_INJECTIVE = 2


def grows(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` writes more elements (its last argument, the output) than any of its
    inputs holds."""
    sizes = [math.prod(int(d) for d in arg.shape) for arg in ArgInfo.from_prim_func(func)]
    return len(sizes) >= 2 and sizes[-1] > max(sizes[:-1])


@tvm.transform.module_pass(opt_level=0, name="PaddingIsNotElementwise")
def padding_is_not_elementwise(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
    """Element-wise PrimFuncs that write more elements than they read marked injective (module
    docstring); run after ``AnnotateTIROpPattern``, before ``FuseOps``."""
    marked = [
        gvar
        for gvar, func in mod.functions.items()
        if isinstance(func, tirx.PrimFunc)
        and func.attrs
        and "op_pattern" in func.attrs
        and int(func.attrs["op_pattern"]) == _ELEMWISE
        and grows(func)
    ]
    if not marked:
        return mod
    out = IRModule(dict(mod.functions), attrs=mod.attrs)
    for gvar in marked:
        out.update_func(gvar, mod[gvar].with_attr("op_pattern", _INJECTIVE))
    return out
