"""Convolutions with few input channels (the 7×7 stride-2 RGB stem): NCHW in, NCHW[x]c out.

Such a conv cannot be blocked on its input (3 % 16 != 0), and in NCHW the generic space found
no good schedule for ResNet-50's stem in 16 trials: 0.19× onnxruntime, the layer furthest from it
(per-layer benchmark, README). Here the input stays NCHW (no transform, no channel padding that
would multiply zeros) and only the output is blocked, as in MLAS's NCHWc convolution for the first
layer: the weights are packed at build time to ``OIHW{x}o`` (``(O/x, I, KH, KW, x)``), so one
weight vector holds ``x`` output channels of one input channel and tap, and the output is
``NCHW{x}c`` like every blocked conv after it (the layout pass, ``layout.py``, carries it on).

The kernel of this space is the 2-D register block of ``nchwc_conv2d.py`` with the input-channel
loop (3 iterations) unrolled whole, and optionally the window's column loop too::

    for kh, [kw]:                                   # kw unrolled or not (a design space)
        for ic in 0..C (unrolled):
            w[c] = weights[oc_outer·oc_inner + c, ic, kh, kw, 0:x]
            for j (unrolled): acc[c, j] += broadcast(input[ic, row·s + kh, (col + j)·s + kw]) * w[c]
"""

from __future__ import annotations

from functools import partial
from itertools import product
from typing import Any, ClassVar

import numpy as np
from tvm import relax, te, topi
from tvm.ir import IRModule
from tvm.relax import BlockBuilder, Call, Expr
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from .base import ScheduleSpace
from .conv_call import conv2d_call, lower_conv2d
from .nchwc_conv import (
    MAX_REGISTER_BLOCK,
    conv_and_epilogue,
    design_copies,
    epilogue_fuses,
    register_block_space,
)
from .nchwc_conv2d import OC_BLOCKS, ORDERS, RegisterBlock, schedule_register_block

STEM_BLOCK = "conv2d_nchw_NCHWc"
SPACE_NAME = "stem-nchw-nchwc"


def blocks_output_only(
    in_channels: int,
    out_channels: int,
    groups: int,
    lanes: int,
    *,
    unblockable_pixel: bool = False,
) -> bool:
    """Whether a conv is compiled NCHW in, NCHW{lanes}c out: a dense conv whose output channels
    divide by the lanes and whose input channels do not, being fewer than a block (the RGB
    stem) or, with ``unblockable_pixel``, a 1×1 conv of a single pixel whose channels no block
    divides. The latter is squeeze-excitation's excitation (EfficientNet-B0: 20 → 480): kept
    NCHW, its gate was NCHW too and the 14×14×480 tensor it scales went to NCHW and back."""
    return groups == 1 and out_channels % lanes == 0 and (in_channels < lanes or unblockable_pixel)


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


def _stem_loops(mod: IRModule) -> dict[str, int] | None:
    sch = Schedule(mod)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if sch.get(block).name_hint == STEM_BLOCK:
            names = ("n", "oc_chunk", "oh", "ow", "oc_block", "ic", "kh", "kw")
            return {
                name: int(sch.get(loop).extent)
                for name, loop in zip(names, sch.get_loops(block), strict=True)
            }
    return None


def schedule_stem_conv(
    sch: Schedule, block: RegisterBlock, max_block: int = MAX_REGISTER_BLOCK
) -> None:
    """Apply this space's schedule for ``block`` (in place), sampling the column block."""
    conv, output, prologue = conv_and_epilogue(sch, SPACE_NAME, STEM_BLOCK)
    ic = int(sch.get(sch.get_loops(conv)[5]).extent)
    schedule_register_block(sch, conv, output, block, ic_block=ic, max_block=max_block)
    for pad in prologue:
        # NCHW padding of a few channels: whole rows copied in parallel (its rows are not a
        # multiple of the vector width; it is ~1% of the conv's time).
        loops = sch.get_loops(pad)
        sch.parallel(sch.fuse(*loops[:-1]))


def design_spaces(sch: Schedule, max_block: int = MAX_REGISTER_BLOCK) -> list[Schedule]:
    loops = _stem_loops(sch.mod)
    assert loops is not None
    blocks = [
        RegisterBlock(oc, 1, order, unroll_window)
        for oc, order, unroll_window in product(OC_BLOCKS, ORDERS, (False, True))
        if loops["oc_chunk"] % oc == 0
    ]
    return design_copies(sch, blocks, partial(schedule_stem_conv, max_block=max_block))


class StemConvSpace(ScheduleSpace):
    """Convs compiled NCHW in, NCHW[x]c out (few input channels): the register block above,
    one design space per (output-channel chunks, outer order, unrolled window column)."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 8

    def applies_to(self, mod: IRModule) -> bool:
        return _stem_loops(mod) is not None and epilogue_fuses(mod, STEM_BLOCK)

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(design_spaces, target)
