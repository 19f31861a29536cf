"""Shared building blocks of the blocked-conv schedule spaces (``schedules/spaces/``): the
conv2d_NCHWc block and its epilogue, the register-block space generator, accumulators kept in
registers, design copies and padding sketches. A space takes them from here, never from another
space's module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import TypeVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import ScheduleFn, SpaceGenerator
from tvm.s_tir.schedule import LoopRV, SBlockRV
from tvm.target import Target

from .annotations import mark_space
from .epilogue import fusable, inline_into_last, inline_side_inputs
from .isa import ACCUMULATORS, accumulator_limit

CONV_BLOCK = "conv2d_NCHWc"
_Variant = TypeVar("_Variant")
# The AVX-512 accumulator limit; a space's generator passes its target's (register_block_space).
MAX_REGISTER_BLOCK = ACCUMULATORS[16]


def is_blocked_conv(mod: IRModule) -> bool:
    """Whether the task's function holds a conv2d_NCHWc block (legalized by schedules.layout)."""
    sch = Schedule(mod)
    return any(
        sch.get(b).name_hint == CONV_BLOCK for b in sch.get_child_blocks(sch.get_sblock("root"))
    )


def conv_and_epilogue(
    sch: Schedule, space: str, conv_block: str = CONV_BLOCK
) -> tuple[SBlockRV, SBlockRV | None, list[SBlockRV]]:
    """The ``conv_block`` block (marked as produced by ``space``), its elementwise epilogue inlined
    into one output block (None without an epilogue), and the blocks before the conv."""
    root = sch.get_sblock("root")
    blocks = sch.get_child_blocks(root)
    names = [sch.get(b).name_hint for b in blocks]
    conv = blocks[names.index(conv_block)]
    mark_space(sch, conv, space)
    # The elementwise epilogue (bias, BN, ReLU, residual add, SiLU) becomes one block after
    # the conv (epilogue.py); epilogue_at computes it under the register block's loop.
    prologue = inline_side_inputs(sch, list(blocks[: names.index(conv_block)]), conv)
    output = inline_into_last(sch, list(blocks[names.index(conv_block) + 1 :]))
    return conv, output, prologue


def epilogue_fuses(mod: IRModule, conv_block: str = CONV_BLOCK) -> bool:
    """Whether the elementwise epilogue after the task's ``conv_block`` fuses as
    :func:`conv_and_epilogue` and :func:`epilogue_at` fuse it, tried on a scratch schedule: a
    space declines a task whose epilogue does not (none of a real model's so far: bias, ReLU,
    ReLU6, SiLU, HardSwish, Mish, GELU, LeakyRelu, PRelu, gates, residual adds all do)."""
    return fusable(mod, conv_block, _at_outer_loop)


def _at_outer_loop(sch: Schedule, conv: SBlockRV, output: SBlockRV) -> None:
    sch.reverse_compute_at(output, sch.get_loops(conv)[0], preserve_unit_loops=True)


def input_channel_block(sch: Schedule, conv: SBlockRV) -> int:
    """The channel block of the conv's input (its data buffer's innermost extent): the
    reduction over input channels is split by it, so ``ic_inner`` walks one contiguous block.
    It differs from the output's block where a 16-channel-blocked tensor feeds an 8-blocked one
    (MobileNetV2's 144→24 projections), see ``layout.channel_block``."""
    return int(sch.get(conv).reads[0].source.shape[-1])


def register_block_space(
    design: Callable[..., list[Schedule] | None], target: Target
) -> SpaceGenerator:
    """The space generator of a register-blocked kernel: ``design(sch, max_block=...)`` with
    ``target``'s accumulator limit, no generic rules, LLVM's postprocessors and mutators."""
    return ScheduleFn(
        partial(design, max_block=accumulator_limit(target)),
        sch_rules=[],
        postprocs="llvm",
        mutator_probs="llvm",
    )


def vectorize_in_registers(sch: Schedule, loop: LoopRV, lanes: int | None = None) -> None:
    """Vectorize ``loop``; with ``lanes``, a loop of several whole vectors is split into
    them, the outer loop unrolled. LLVM legalizes one vector of 24, 40 or 48 floats with
    shuffles and spills its registers: the MatMul register block of 3 column vectors × 4 rows
    (copied out as 24-float vectors) ran 4.4 ms on RapidOCR's 40×120×18720 head, 2 × 5 (16
    floats, two ymm) 1.25 (Zen 4, AVX2)."""
    extent = int(sch.get(loop).extent)
    if lanes is not None and extent > lanes and extent % lanes == 0:
        vectors, loop = sch.split(loop, [None, lanes])
        sch.unroll(vectors)
    sch.vectorize(loop)


def epilogue_at(
    sch: Schedule, output: SBlockRV | None, loop: LoopRV, lanes: int | None = None
) -> None:
    """Compute the conv's epilogue block ``output`` (if any) under ``loop``, vectorized (in
    vectors of ``lanes``, :func:`vectorize_in_registers`): the accumulators of one register
    block are consumed where they are produced, so the intermediate buffer shrinks to the block
    and lives in registers.

    Unit loops are kept so every candidate has the same loop count whatever its tile sizes:
    MetaSchedule replays a trace with mutated decisions instruction by instruction."""
    if output is not None:
        sch.reverse_compute_at(output, loop, preserve_unit_loops=True)
        vectorize_in_registers(sch, sch.get_loops(output)[-1], lanes)


def accumulate_locally(
    sch: Schedule, block: SBlockRV, loop: LoopRV, lanes: int | None = None
) -> None:
    """``block``'s output accumulated in a ``local`` buffer of one iteration of ``loop`` (a
    stack array, ``stack_locals.py``) and copied out under ``loop``, unrolled and vectorized
    (in vectors of ``lanes``, :func:`vectorize_in_registers`): LLVM keeps it in registers even
    with a prefetch inside the reduction (``prefetch.py``), which pins accumulators that live in
    the output buffer itself to memory."""
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, loop, preserve_unit_loops=True)
    loops = sch.get_loops(local)
    depth = [sch.get(outer).same_as(sch.get(loop)) for outer in loops].index(True)
    copy_loops = loops[depth + 1 :]
    for copy_loop in copy_loops[:-1]:
        sch.unroll(copy_loop)
    vectorize_in_registers(sch, copy_loops[-1], lanes)


def block_names(sch: Schedule) -> list[str]:
    """The names of the task's top-level blocks, in order."""
    return [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]


def design_copies(
    sch: Schedule, variants: Iterable[_Variant], apply: Callable[[Schedule, _Variant], None]
) -> list[Schedule]:
    """One design space per variant: a copy of ``sch`` with a seed forked from it, to which
    ``apply(copy, variant)`` applies the variant's schedule."""
    spaces = []
    for variant in variants:
        copy = sch.copy()
        copy.seed(sch.fork_seed())
        apply(copy, variant)
        spaces.append(copy)
    return spaces


def padding_sketches(
    sch: Schedule, design: Callable[..., None], pad_block: str, max_block: int
) -> list[Schedule]:
    """``design(copy, inline_pad=…, max_block=…)`` applied to copies of ``sch``: one sketch with
    the zero/−inf padding as its own pass over memory, and, if the task has a ``pad_block``, one
    with it inlined into the kernel (a select per tap). Which wins depends on the layer."""
    sketches = []
    for inline_pad in (False, True) if pad_block in block_names(sch) else (False,):
        copy = sch.copy()
        design(copy, inline_pad=inline_pad, max_block=max_block)
        sketches.append(copy)
    return sketches


def schedule_prologue(
    sch: Schedule, prologue: list[SBlockRV], *, inline_pad: bool, pad_block: str
) -> None:
    """The blocks before the kernel: the padding inlined if asked, the rest parallel/vector."""
    for block in prologue:
        if inline_pad and sch.get(block).name_hint == pad_block:
            sch.compute_inline(block)
        else:
            parallel_vectorize(sch, block)


def parallel_vectorize(sch: Schedule, block: SBlockRV) -> None:
    """Padding / layout copies before the conv: outer loops parallel, the channel block vector."""
    loops = sch.get_loops(block)
    if len(loops) >= 2:
        sch.vectorize(loops[-1])
        sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])


def conv_extents(mod: IRModule) -> dict[str, int] | None:
    """Loop extents of the task's conv2d_NCHWc block, or None when it has none."""
    sch = Schedule(mod)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if sch.get(block).name_hint == CONV_BLOCK:
            names = ("n", "oc_chunk", "oh", "ow", "oc_block", "ic", "kh", "kw")
            return {
                name: int(sch.get(loop).extent)
                for name, loop in zip(names, sch.get_loops(block), strict=True)
            }
    return None
