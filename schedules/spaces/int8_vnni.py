"""Our space for integer convolutions: a register-blocked u8×s8→s32 conv on AVX-512 VNNI.

The kernel is ``dot_conv.py``'s with ``vpdpbusd`` (``schedules/ops/vnni.py``): a broadcast of
four u8 inputs against a 64-byte s8 weight tile, sixteen s32 accumulators per zmm, the
requantization epilogue (scale, bias, ReLU/Clip/SiLU, round, zero point, clamp to u8) on the
registers. The space declines on a CPU without VNNI: the job never builds integer convs there
(``tuner/graph/quantized.py``).
"""

from __future__ import annotations

from typing import ClassVar

from tvm.s_tir import Schedule
from tvm.target import Target

from ..ops.dot_conv import INT8, DotFormat
from ..ops.isa import has_vnni
from ..ops.nchwc import MAX_REGISTER_BLOCK
from ..ops.vnni import VNNI_LOCAL_INTRIN
from .dot_conv import OC_BLOCKS, DotConvSpace

SPACE_NAME = "int8-vnni"


class Int8VnniConvSpace(DotConvSpace):
    """Integer convolutions (conv2d_NCHWc_int8) as ``vpdpbusd`` register blocks (above)."""

    name: ClassVar[str] = SPACE_NAME
    fmt: ClassVar[DotFormat] = INT8
    intrin: ClassVar[str] = VNNI_LOCAL_INTRIN

    def available(self, target: Target) -> bool:
        return has_vnni(target)


def schedule_int8_conv(sch: Schedule, oc_inner: int, max_block: int = MAX_REGISTER_BLOCK) -> None:
    """One design of the int8-vnni space (in place)."""
    Int8VnniConvSpace().schedule(sch, oc_inner, max_block)


__all__ = ["OC_BLOCKS", "SPACE_NAME", "Int8VnniConvSpace", "schedule_int8_conv"]
