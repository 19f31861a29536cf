"""The elementwise epilogue a task computes after its kernel (bias, BatchNorm, activations,
residual add, gates), and how a space fuses it into the kernel.

Fusion puts every epilogue block after the kernel's block into one: each block but the last is
computed inline into its consumers, so one block remains, reading the kernel's output (once, or
more than once for ``x · sigmoid(x)``, HardSwish, Mish, GELU, LeakyRelu) and the task's other
inputs (bias, residual, gate). The direct-conv spaces compute that block under a loop of the
kernel's register block (``nchwc_conv.epilogue_at``), the Winograd space under its output
tile loop (``winograd_nchwc.fuse_epilogue``).

A chain in which each block reads one region of what the block before it wrote (bias, ReLU,
ReLU6, LeakyRelu, residual add) can also be inlined the other way, each block into its
producer, back to front (:func:`reads_once`): the Winograd space's schedule of those epilogues,
kept as it is. A block reading two of them (``x · sigmoid(x)`` reads the bias add and the
sigmoid of it) cannot: ``reverse_compute_inline`` accepts a single read region, and YOLO's
3×3 + SiLU crashed the Winograd space ("The block is only allowed to read a single buffer
region, but it reads 2 region(s)") until such a chain was inlined into its last block first.

:func:`fusable` tries the fusion on a scratch schedule, so a space declines in ``applies_to``
what it could not fuse instead of raising while MetaSchedule generates its designs.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV


def split_at(sch: Schedule, anchor: str) -> tuple[list[SBlockRV], SBlockRV, list[SBlockRV]]:
    """The task's top-level blocks before the block named ``anchor``, that block, and the
    blocks after it (the epilogue), in order."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    names = [sch.get(b).name_hint for b in blocks]
    index = names.index(anchor)
    return blocks[:index], blocks[index], blocks[index + 1 :]


def inline_side_inputs(sch: Schedule, before: list[SBlockRV], anchor: SBlockRV) -> list[SBlockRV]:
    """The blocks of ``before`` whose results ``anchor`` reads, directly or through another
    (padding, layout copies, Winograd's input transform); the others, an elementwise op on an
    input only the epilogue reads (the dequantize of a QDQ model's residual operand), are
    computed inline into the epilogue (in place): left at the root, they keep the epilogue from
    moving under the anchor's loops."""
    needed = {r.source for r in sch.get(anchor).reads}
    kept, side = [], []
    for block in reversed(before):
        stmt = sch.get(block)
        if any(w.source in needed for w in stmt.writes):
            kept.append(block)
            needed |= {r.source for r in stmt.reads}
        else:
            side.append(block)
    for block in side:
        sch.compute_inline(block)
    return kept[::-1]


def inline_into_last(sch: Schedule, epilogue: list[SBlockRV]) -> SBlockRV | None:
    """Every block of ``epilogue`` but the last computed inline into its consumers (in place):
    the one block left computes the whole epilogue (None for an empty epilogue)."""
    for block in epilogue[:-1]:
        sch.compute_inline(block)
    return epilogue[-1] if epilogue else None


def reads_once(sch: Schedule, epilogue: list[SBlockRV], anchor: SBlockRV) -> bool:
    """Whether each block of ``epilogue`` reads a single region of the buffers that ``anchor``
    and the epilogue blocks before it write (a chain such as bias, ReLU, residual add)."""
    produced = [w.source for w in sch.get(anchor).writes]
    for block in epilogue:
        stmt = sch.get(block)
        regions = [r for r in stmt.reads if any(r.source.same_as(p) for p in produced)]
        if len(regions) != 1:
            return False
        produced += [w.source for w in stmt.writes]
    return True


def _elements(sch: Schedule, block: SBlockRV) -> int:
    """How many elements ``block`` writes (its first output buffer)."""
    return math.prod(int(d) for d in sch.get(block).writes[0].source.shape)


def grows(sch: Schedule, anchor: SBlockRV, epilogue: list[SBlockRV]) -> bool:
    """Whether a block of ``epilogue`` writes more elements than ``anchor``: a Pad after the
    conv, whose border reads nothing of the conv's output. ``reverse_compute_at`` under a loop
    of the kernel computes only the points that read the kernel's tile, so the border was never
    written: PP-OCRv6 tiny det's stem conv + ReLU + Pad (bottom and right by 1) left garbage in
    its last row and column, and the model's output was off by up to 1."""
    produced = _elements(sch, anchor)
    return any(_elements(sch, block) > produced for block in epilogue)


def fusable(
    mod: IRModule, anchor: str, fuse: Callable[[Schedule, SBlockRV, SBlockRV], None]
) -> bool:
    """Whether ``fuse(sch, anchor_block, last_block)`` succeeds on a scratch schedule of ``mod``
    after the epilogue after ``anchor`` is inlined into its last block (True without an
    epilogue), and computes every point of the epilogue's output (:func:`grows`)."""
    sch = Schedule(mod)
    try:
        before, block, epilogue = split_at(sch, anchor)
        if grows(sch, block, epilogue):
            return False
        inline_side_inputs(sch, before, block)
        last = inline_into_last(sch, epilogue)
        if last is not None:
            fuse(sch, block, last)
    except Exception:  # a schedule error: the space declines the task
        return False
    return True
