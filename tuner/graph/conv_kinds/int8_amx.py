"""Integer convs on AMX targets (``schedules/ops/int8_amx.py``): the weight laid out for tile
register blocks, a kernel row's columns in one tile row.

Asked before the int8 kind: it takes the integer convs a tile register block can compute
(ungrouped, undilated, kernels 1 to 4 columns wide, 16-channel input blocks, output rows
that a tile of 4 to 16 rows divides) when the target
has AMX-INT8; the int8 kind (VNNI) takes the rest. Only the int8-amx space and the generic
one schedule this op. On ResNet-50's convs (Sapphire-Rapids-class Xeon, 2 threads,
2026-12-05) the VNNI kernels ran 64→64 3×3 at 56² in 0.20 ms, 512→128 1×1 at 28² in 0.081.
"""

from __future__ import annotations

from typing import ClassVar

from tvm import relax
from tvm.relax import BlockBuilder, Expr

from convtune.schedules.ops.amx import tile_rows
from convtune.schedules.ops.dot_conv import INT8
from convtune.schedules.ops.int8_amx import (
    AMX_CONV_BLOCK,
    AMX_DATA_BLOCK,
    amx_refusal,
    conv2d_nchwc_int8_amx,
    pack_weight,
    taps_of,
)

from .base import ConvKind, ConvOperands, ConvSite, Decision
from .winograd import OUT_ELEMWISE_FUSABLE


class Int8AmxKind(ConvKind):
    name: ClassVar[str] = "int8-amx"

    def decide(self, site: ConvSite) -> Decision | None:
        if str(site.call.args[0].ty.dtype) != INT8.data_dtype or not site.amx_int8:
            return None
        refusal = amx_refusal(
            site.x_shape[1], site.w_shape[0], site.w_shape[2:], site.attrs.dilation, site.groups
        )
        out_width = int(site.call.ty.shape[3])
        if refusal or not site.constant_weight or site.in_block != AMX_DATA_BLOCK:
            return None
        if tile_rows(out_width) is None:  # no tile of 4 to 16 rows divides it: VNNI's
            return None
        return Decision(True, "u8×s8→s32 (AMX tiles)")

    def computed_columns(self, site: ConvSite) -> int:
        return taps_of(site.w_shape[3])

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        assert operands.data_block == AMX_DATA_BLOCK
        attrs = site.attrs
        return bb.call_te(
            conv2d_nchwc_int8_amx,
            operands.data,
            relax.const(pack_weight(site.weight_array()), INT8.weight_dtype),
            attrs.strides,
            attrs.padding,
            site.w_shape[3],
            primfunc_name_hint=AMX_CONV_BLOCK,
            # Fusable with its elementwise epilogue, like a conv (winograd.py).
            primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
        )
