"""The generic space: MetaSchedule's x86 rules for any task, with every knob spelled out.

Knobs (see ``SpaceConfig``): the multi-level tiling structure (S = spatial, R = reduction levels),
the largest innermost tile (it bounds the register block and the vectorised loop), the vector width
in fp32 lanes (16 on AVX-512, 8 on AVX2), the unroll steps the search may pick for each block, and
how many parallel jobs per core the outer fused loop may split into.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir.meta_schedule import Mutator, Postproc, ScheduleRule
from tvm.s_tir.meta_schedule.schedule_rule import (
    MultiLevelTiling,
    ParallelizeVectorizeUnroll,
    ReuseType,
)
from tvm.s_tir.meta_schedule.space_generator import PostOrderApply, SpaceGenerator
from tvm.target import Target

from .base import ScheduleSpace
from .isa import vector_lanes
from .winograd_nchwc import is_winograd_nchwc


@dataclass(frozen=True)
class SpaceConfig:
    """One point of configuration for the generic (MetaSchedule-style) x86 space."""

    tiling_structure: str = "SSRSRS"
    max_innermost_factor: int = 64
    unroll_steps: tuple[int, ...] = (0, 16, 64, 512)
    max_jobs_per_core: int = 16
    # Vectorised loops may span several registers: LLVM splits them into `lanes`-wide operations.
    vector_registers: int = 4


def generic_space(target: Target, config: SpaceConfig | None = None) -> PostOrderApply:
    """MetaSchedule's x86 rules with the tiling and vectorisation knobs taken from ``config``.

    The other rules stay as MetaSchedule ships them: custom rules, inlining of constant scalars and
    elementwise epilogues, rfactor for reductions with little parallelism, compute-location moves.
    """
    config = config or SpaceConfig()
    lanes = vector_lanes(target)
    rules = []
    for rule in ScheduleRule.create("llvm"):
        if isinstance(rule, MultiLevelTiling):
            rule = _multi_level_tiling(config)
        elif isinstance(rule, ParallelizeVectorizeUnroll):
            rule = _parallel_vectorize_unroll(config, lanes)
        rules.append(rule)
    return PostOrderApply(
        sch_rules=rules,
        postprocs=Postproc.create("llvm"),  # incl. RewriteLayout: weights are pre-packed at build
        mutator_probs=Mutator.create("llvm"),
    )


def _multi_level_tiling(config: SpaceConfig) -> ScheduleRule:
    return MultiLevelTiling(
        structure=config.tiling_structure,
        max_innermost_factor=config.max_innermost_factor,
        # The accumulator tile stays in registers/L1 and is written back once per outer tile.
        reuse_write=ReuseType(req="may", levels=[1, 2], scope="global"),
    )


def _parallel_vectorize_unroll(config: SpaceConfig, lanes: int) -> ScheduleRule:
    return ParallelizeVectorizeUnroll(
        max_jobs_per_core=config.max_jobs_per_core,
        max_vectorize_extent=lanes * config.vector_registers,
        unroll_max_steps=list(config.unroll_steps),
        unroll_explicit=True,
    )


class GenericSpace(ScheduleSpace):
    """Every task: conv, Gemm, pooling, elementwise. Searched alone or in the union with the
    spaces that also apply to a task. Not the Winograd kernels: their transforms are select
    chains that fold only under our schedule's unrolling, and auto-inlining the data pack into
    the GEMM would recompute it per output channel."""

    name: ClassVar[str] = "generic"

    def __init__(self, config: SpaceConfig | None = None) -> None:
        self.config = config or SpaceConfig()

    def applies_to(self, mod: IRModule) -> bool:
        return not is_winograd_nchwc(mod)

    def generator(self, target: Target) -> SpaceGenerator:
        return generic_space(target, self.config)
