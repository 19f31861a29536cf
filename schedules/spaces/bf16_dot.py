"""Our space for bf16 convolutions (``--precision bf16``): a register-blocked bf16×bf16→fp32
conv on AVX-512 BF16.

The kernel is ``dot_conv.py``'s with ``vdpbf16ps`` (``schedules/ops/bf16_dot.py``): a broadcast
of two bf16 inputs against a 64-byte weight tile, sixteen fp32 accumulators per zmm, twice the
multiply-adds of an fp32 FMA per instruction. The fp32 epilogue (bias, activation, and the cast
to bf16 of a next conv's input) runs on the registers. The space declines on a CPU without
AVX-512 BF16: the job never builds bf16 convs there (``tuner/graph/bf16.py``).
"""

from __future__ import annotations

from typing import ClassVar

from tvm.target import Target

from ..ops.bf16_dot import BF16_LOCAL_INTRIN
from ..ops.dot_conv import BF16, DotFormat
from ..ops.isa import has_bf16
from .dot_conv import DotConvSpace

SPACE_NAME = "bf16-dot"


class Bf16DotConvSpace(DotConvSpace):
    """bf16 convolutions (conv2d_NCHWc_bf16) as ``vdpbf16ps`` register blocks (above)."""

    name: ClassVar[str] = SPACE_NAME
    fmt: ClassVar[DotFormat] = BF16
    intrin: ClassVar[str] = BF16_LOCAL_INTRIN

    def available(self, target: Target) -> bool:
        return has_bf16(target)
