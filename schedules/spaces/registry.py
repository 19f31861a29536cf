"""The schedule spaces convtune searches, in the order their seed passes run.

Adding a space: one module with a :class:`~convtune.schedules.base.ScheduleSpace` subclass, and
one line in ``SPACES`` below.
"""

from __future__ import annotations

from collections.abc import Sequence

from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator, SpaceGeneratorUnion
from tvm.target import Target

from ..untuned import DEFAULT_SCHEDULE
from .amx_conv import Bf16AmxConvSpace, Int8AmxConvSpace
from .base import DEFAULT_SPACE, SPACE_ANNOTATION, ScheduleSpace
from .bf16_dot import Bf16DotConvSpace
from .blocked_pool import BlockedPoolSpace
from .depthwise_nchwc import DepthwiseConvSpace
from .generic import GenericSpace
from .int8_vnni import Int8VnniConvSpace
from .lrn import LrnSpace
from .matmul_regblock import MatmulSpace
from .nchwc_kblock import ReductionBlockedConvSpace
from .nchwc_regblock import RegisterBlockedConvSpace
from .nchwc_regblock2d import RegisterBlock2DConvSpace
from .row_reduction import RowReductionSpace
from .stem_nchw_nchwc import StemConvSpace
from .winograd_nchwc import WinogradConvSpace

SPACES: tuple[ScheduleSpace, ...] = (
    GenericSpace(),
    RegisterBlockedConvSpace(),
    RegisterBlock2DConvSpace(),
    ReductionBlockedConvSpace(),
    DepthwiseConvSpace(),
    StemConvSpace(),
    BlockedPoolSpace(),
    RowReductionSpace(),
    LrnSpace(),
    MatmulSpace(),
    WinogradConvSpace(),
    Int8VnniConvSpace(),
    Int8AmxConvSpace(),
    Bf16DotConvSpace(),
    Bf16AmxConvSpace(),
)


def get_space(space: str | ScheduleSpace) -> ScheduleSpace:
    """A registered space by name, or ``space`` itself (MetaSchedule's string-or-instance rule)."""
    if isinstance(space, ScheduleSpace):
        return space
    for candidate in SPACES:
        if candidate.name == space:
            return candidate
    names = ", ".join(s.name for s in SPACES)
    raise KeyError(f"unknown schedule space {space!r}: registered are {names}")


def applicable(mod: IRModule, spaces: Sequence[ScheduleSpace] = SPACES) -> list[ScheduleSpace]:
    """The spaces of ``spaces`` that can schedule the task ``mod``."""
    return [space for space in spaces if space.applies_to(mod)]


def union_space(
    mod: IRModule, target: Target, spaces: Sequence[ScheduleSpace] = SPACES
) -> SpaceGenerator:
    """Every applicable space of ``mod`` as one generator (the cost model ranks them together)."""
    generators = [space.generator(target) for space in applicable(mod, spaces)]
    if not generators:
        raise ValueError("no schedule space applies to the task")
    return generators[0] if len(generators) == 1 else SpaceGeneratorUnion(generators)


def space_of(trace_text: str, spaces: Sequence[ScheduleSpace] = SPACES) -> str:
    """Which space a candidate came from, read off its trace (JSON or text form): the space named
    by its :data:`~convtune.schedules.base.SPACE_ANNOTATION` (one of ``spaces``, or the default
    rule of ``schedules/untuned.py``), else the generic space."""
    if SPACE_ANNOTATION in trace_text:
        names = [DEFAULT_SCHEDULE, *(space.name for space in spaces)]
        for name in names:
            if name != DEFAULT_SPACE and f'"{name}"' in trace_text.replace('\\"', '"'):
                return name
    return DEFAULT_SPACE
