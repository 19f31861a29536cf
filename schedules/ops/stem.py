"""The output-blocked conv op (NCHW in, NCHW{x}c out: the RGB stem): its Relax call, weight
packing, TE compute and legalization. Its schedule space is ``schedules/spaces/stem_nchw_nchwc.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax, te, topi
from tvm.ir import IRModule
from tvm.relax import BlockBuilder, Call, Expr
from tvm.s_tir import Schedule

from .conv_call import conv2d_call, lower_conv2d

STEM_BLOCK = "conv2d_nchw_NCHWc"


#: The most input channels a conv may have for this op when no block divides them: the stem
#: space unrolls the input-channel loop whole (``schedules/spaces/stem_nchw_nchwc.py``).
MAX_UNROLLED_CHANNELS = 64


def blocks_output_only(
    in_channels: int,
    out_channels: int,
    groups: int,
    lanes: int,
    *,
    unblockable_pixel: bool = False,
    unblockable_input: bool = False,
) -> bool:
    """Whether a conv is compiled NCHW in, NCHW{lanes}c out: a dense conv whose output channels
    divide by the lanes and whose input channels do not, being fewer than a block (the RGB
    stem), or, with ``unblockable_input``, a count no block divides (12, 20, 36: PP-OCR's
    12-channel stages, YOLOv5's Focus stem) up to :data:`MAX_UNROLLED_CHANNELS`, or, with
    ``unblockable_pixel``, a 1×1 conv of a single pixel whose channels no block divides. The
    latter is squeeze-excitation's excitation (EfficientNet-B0: 20 → 480): kept NCHW, its gate
    was NCHW too and the 14×14×480 tensor it scales went to NCHW and back. An unblockable input
    is NCHW in any case; without this op its conv ran NCHW in the generic space (issue #31: a
    12→24 3×3 conv at 208×208 at 3.5% of peak, 4.8× onnxruntime's time)."""
    few = few_input_channels(in_channels, lanes, unblockable_input=unblockable_input)
    return groups == 1 and out_channels % lanes == 0 and (few or unblockable_pixel)


def few_input_channels(in_channels: int, block: int, *, unblockable_input: bool) -> bool:
    """Whether this op reads a conv's NCHW input: fewer channels than ``block``, or, where no
    block divides them (``unblockable_input``), up to :data:`MAX_UNROLLED_CHANNELS`."""
    return in_channels < block or (unblockable_input and in_channels <= MAX_UNROLLED_CHANNELS)


def pack_weight(weight: np.ndarray, lanes: int) -> np.ndarray:
    """OIHW → OIHW{x}o: ``(O/x, I, KH, KW, x)``, one vector of ``x`` output channels per tap."""
    o, i, kh, kw = weight.shape
    return np.ascontiguousarray(
        weight.reshape(o // lanes, lanes, i, kh, kw).transpose(0, 2, 3, 4, 1)
    )


def conv2d_nchw_nchwc(
    data: te.Tensor,
    weight: te.Tensor,
    strides: Any,
    padding: Any,
    dilation: Any,
    out_dtype: str,
) -> te.Tensor:
    """TE compute: ``data`` NCHW, ``weight`` (O/x, I, KH, KW, x), output (N, O/x, OH, OW, x).

    Its loops are ordered as TOPI's conv2d_NCHWc (n, oc_chunk, oh, ow, oc_block, ic, kh, kw).
    """
    batch, channels, height, width = (int(d) for d in data.shape)
    oc_chunks, _, kh, kw, oc_block = (int(d) for d in weight.shape)
    sh, sw = (int(s) for s in strides)
    dh, dw = (int(d) for d in dilation)
    top, left, bottom, right = (int(p) for p in padding)
    out_h = (height + top + bottom - (kh - 1) * dh - 1) // sh + 1
    out_w = (width + left + right - (kw - 1) * dw - 1) // sw + 1
    padded = (
        topi.nn.pad(data, [0, 0, top, left], [0, 0, bottom, right], name="data_pad")
        if top or left or bottom or right
        else data
    )
    ic = te.reduce_axis((0, channels), name="ic")
    rh = te.reduce_axis((0, kh), name="kh")
    rw = te.reduce_axis((0, kw), name="kw")
    return te.compute(
        (batch, oc_chunks, out_h, out_w, oc_block),
        lambda n, oc_chunk, oh, ow, oc_b: te.sum(
            padded[n, ic, oh * sh + rh * dh, ow * sw + rw * dw].astype(out_dtype)
            * weight[oc_chunk, ic, rh, rw, oc_b].astype(out_dtype),
            axis=[ic, rh, rw],
        ),
        name=STEM_BLOCK,
        tag="conv2d_nchw_NCHWc",
    )


def is_output_blocked(data_layout: str, out_layout: str) -> bool:
    """Whether a Relax conv2d's layouts are this module's: NCHW data, blocked output."""
    return data_layout == "NCHW" and out_layout != "NCHW" and out_layout.startswith("NCHW")


def legalize(bb: BlockBuilder, call: Call) -> Expr:
    """Lower a Relax conv2d with NCHW data and NCHW{x}c output to the TE compute above."""
    return lower_conv2d(bb, call, conv2d_nchw_nchwc, "conv2d_nchw_NCHWc")


def output_blocked_conv(data: Expr, weight: np.ndarray, attrs: Any, lanes: int) -> Expr:
    """The Relax conv2d of ``data`` (NCHW) with the constant OIHW ``weight`` (packed here, at
    build time) and the strides/padding/dilation of ``attrs``, its output in NCHW{lanes}c."""
    return conv2d_call(
        data,
        relax.const(pack_weight(weight, lanes), str(weight.dtype)),
        attrs,
        groups=1,
        data_layout="NCHW",
        kernel_layout=f"OIHW{lanes}o",
        out_layout=f"NCHW{lanes}c",
    )


def stem_loops(mod: IRModule) -> dict[str, int] | None:
    """Loop extents of the task's output-blocked conv block, or None when it has none."""
    sch = Schedule(mod)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if sch.get(block).name_hint == STEM_BLOCK:
            names = ("n", "oc_chunk", "oh", "ow", "oc_block", "ic", "kh", "kw")
            return {
                name: int(sch.get(loop).extent)
                for name, loop in zip(names, sch.get_loops(block), strict=True)
            }
    return None
