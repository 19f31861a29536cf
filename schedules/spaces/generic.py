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
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule import Mutator, Postproc, ScheduleRule, TuneContext
from tvm.s_tir.meta_schedule.schedule_rule import (
    MultiLevelTiling,
    ParallelizeVectorizeUnroll,
    PyScheduleRule,
    RandomComputeLocation,
    ReuseType,
)
from tvm.s_tir.meta_schedule.space_generator import PostOrderApply, SpaceGenerator
from tvm.s_tir.schedule import SBlockRV
from tvm.target import Target
from tvm.tirx import IterVar

from ..ops.isa import vector_lanes
from ..ops.winograd_conv import is_winograd_nchwc
from .base import ScheduleSpace

#: The annotation AddRFactor leaves for RandomComputeLocation on a reduction it split.
RANDOM_COMPUTE_PRODUCER = "meta_schedule.random_compute_producer"


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
        elif isinstance(rule, RandomComputeLocation):
            rule = ReductionsStayAtRoot()
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


def is_reduction(sch: Schedule, block: SBlockRV) -> bool:
    """Whether ``block`` reduces over some axis (a max, a sum, a conv's accumulation)."""
    return any(iv.iter_type == IterVar.CommReduce for iv in sch.get(block).iter_vars)


@derived_object
class ReductionsStayAtRoot(PyScheduleRule):
    """MetaSchedule's ``RandomComputeLocation``, except that a reduction is never computed
    inside its consumer's loops.

    Its consumer usually iterates over the axis the reduction removed (a Softmax's
    normalisation reads the row's max and sum once per element), so a reduction placed there is
    recomputed per element: every generic candidate of a 1×1000 Softmax did that, and measured
    1.2 ms to 0.77 s where the unscheduled function takes 1.3 µs (Zen 5, 2026-12-03; a tuned
    ResNet-50 ending in Softmax ran 5.6× slower than onnxruntime, issue 30). Elementwise
    producers (a conv's padding) still get a sampled location; tiled reductions never did.
    """

    def __init__(self) -> None:
        self.inner = RandomComputeLocation()

    def _initialize_with_tune_context(self, context: TuneContext) -> None:
        self.inner._initialize_with_tune_context(context)

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if not is_reduction(sch, block):
            return list(self.inner.apply(sch, block))
        # AddRFactor asks for its rfactor block's producers to be placed: they stay at root.
        if RANDOM_COMPUTE_PRODUCER in sch.get(block).annotations:
            sch.unannotate(block, RANDOM_COMPUTE_PRODUCER)
        return [sch]

    def clone(self) -> ScheduleRule:
        return ReductionsStayAtRoot()


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
