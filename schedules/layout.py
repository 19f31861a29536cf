"""Graph-level blocked layout: convolutions in NCHW[x]c, as in NeoCPU (ATC'19).

``ConvertLayout`` rewrites every conv2d whose channel counts are multiples of ``x`` to
``NCHW{x}c`` data and ``OIHW{x}i{x}o`` weights, and propagates the layout through the elementwise
ops between convolutions, so a tensor stays blocked from one convolution to the next and is
transformed back only where a layout-sensitive op needs NCHW. The weight transforms act on
constants: ``FoldConstant`` packs the weights once, at build time. Convolutions whose channels do
not divide (an RGB input layer, depthwise ones) stay in NCHW.

TVM's own legalization refuses blocked layouts, so the blocked conv2d is lowered here with TOPI's
``conv2d_NCHWc`` compute; MetaSchedule then tiles that loop nest, whose innermost output-channel
axis is exactly one vector register wide.
"""

from __future__ import annotations

from tvm import relax, topi
from tvm.ir import IRModule, Op
from tvm.relax import BlockBuilder, Call, Expr
from tvm.target import Target

from . import stem_conv
from .depthwise_conv import is_blocked_depthwise_call, legalize_depthwise_conv2d
from .isa import vector_lanes

_CONV2D = Op.get("relax.nn.conv2d")


def _legalize_conv2d(bb: BlockBuilder, call: Call) -> Expr:
    attrs = call.attrs
    if stem_conv.is_output_blocked(str(attrs.data_layout), str(attrs.out_layout)):
        return stem_conv.legalize(bb, call)
    if len(attrs.data_layout) == 4:
        return _CONV2D.get_attr("FLegalize")(bb, call)
    if is_blocked_depthwise_call(call):
        return legalize_depthwise_conv2d(bb, call)
    out_dtype = str(attrs.out_dtype)
    if out_dtype in ("", "None", "void"):
        out_dtype = str(call.ty.dtype)
    return bb.call_te(
        topi.nn.conv2d_NCHWc,
        call.args[0],
        call.args[1],
        attrs.strides,
        attrs.padding,
        attrs.dilation,
        attrs.data_layout,
        attrs.out_layout,
        out_dtype,
        primfunc_name_hint="conv2d_NCHWc",
    )


def blocked_layout(mod: IRModule, target: Target) -> IRModule:
    """The model with its convolutions in ``NCHW{x}c`` (x = the target's fp32 lanes), legalized."""
    lanes = vector_lanes(target)
    mod = relax.transform.ConvertLayout(
        {"relax.nn.conv2d": [f"NCHW{lanes}c", f"OIHW{lanes}i{lanes}o"]}
    )(mod)
    mod = stem_conv.block_outputs(mod, lanes)
    with target:
        return relax.transform.LegalizeOps({"relax.nn.conv2d": _legalize_conv2d})(mod)
