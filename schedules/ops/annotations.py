"""Annotations a schedule leaves in its trace for the search and the lowering passes: which
space produced it (:func:`mark_space`, read back by ``schedules/spaces/registry.py``) and which
loop prefetches which buffer how far ahead (:func:`sample_weight_prefetch`, lowered by
``schedules/lowering/prefetch.py``).
"""

from __future__ import annotations

from typing import Any

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import LoopRV, SBlockRV

#: Block annotation naming the space of a schedule; it is part of every trace of that space.
SPACE_ANNOTATION = "convtune.space"
#: The space a trace without the annotation came from.
DEFAULT_SPACE = "generic"
#: TVM's function attribute for "scheduled already": MetaSchedule's ApplyDatabase sets it, the
#: untuned pass and task extraction skip such functions, hand-built kernels carry it.
SCHEDULED = "tirx.is_scheduled"


#: TVM's LoopPartition peels the iterations of a loop with this annotation where a condition
#: inside it is not always true: the last, partial vector of a row. Vectorized with the
#: condition, the whole loop was scalarized (Softmax over 18384 classes, its Σ exp in 64-lane
#: accumulators: 0.92 ms against 0.25 for 18432, Zen 5). ``lowering/peel_tails.py`` keeps
#: the hint alive through TVM's index narrowing.
PEEL_TAIL = "pragma_loop_partition_hint"

#: Key prefix of the source loop's annotation, followed by the buffer's name; the value is
#: the distance in the loop's iterations (0: none).
SOURCE_ANNOTATION = "convtune.prefetch:"

#: Source-loop iterations ahead the search may choose (0: no prefetch); two leaves the lines
#: more time to arrive than one.
DISTANCES = (0, 1, 2)


def annotate_prefetch(sch: Schedule, source: LoopRV, buffer: str, distance: Any) -> None:
    """Prefetch ``buffer``'s data for iteration ``+distance`` of ``source`` while ``source``
    runs; ``distance`` may be a sampled decision (an ``ExprRV``), 0 meaning none."""
    sch.annotate(source, SOURCE_ANNOTATION + buffer, distance)


def sample_weight_prefetch(
    sch: Schedule, conv: SBlockRV, source: LoopRV, distances: tuple[int, ...] = DISTANCES
) -> None:
    """A searched prefetch of ``conv``'s weights (its last read) ahead of ``source``: the
    distance is a trace decision over ``distances`` (0 among them), so the search measures
    with and without it."""
    weights = sch.get(conv).reads[-1].source.name
    distance = sch.sample_categorical(
        candidates=list(distances), probs=[1.0 / len(distances)] * len(distances)
    )
    annotate_prefetch(sch, source, weights, distance)


def mark_space(sch: Schedule, block: SBlockRV, name: str) -> None:
    """Record in the schedule's trace that the space ``name`` produced it."""
    sch.annotate(block, SPACE_ANNOTATION, name)
