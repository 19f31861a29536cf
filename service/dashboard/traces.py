"""Readable schedule decisions from a stored MetaSchedule trace (``Trace.as_json()``).

A trace is ``[instructions, decisions]``; an instruction is ``[kind, inputs, attrs, outputs]``
and a decision is ``[instruction index, value]``. Sampled values are resolved by following the
random variables they produce: ``Split`` by sampled or constant factors → tile sizes (``None``
for the factor TVM infers), ``SamplePerfectTile`` → the factors it picked,
``SampleCategorical`` → the candidate it picked (the unroll step when an
``meta_schedule.unroll_explicit`` annotation consumes it), ``Split``/``Fuse`` → loop extents,
so a ``Vectorize`` of a loop with a known extent gives the vector width in lanes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

_UNROLL_KEYS = ("meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit")


@dataclass
class ScheduleSummary:
    """What a person wants to know about a schedule; empty lists when the trace has none."""

    tiles: list[dict[str, Any]] = field(default_factory=list)  # {"loop", "factors": [int|None]}
    unroll: list[int] = field(default_factory=list)  # max unroll steps picked
    vector_lanes: list[int] = field(default_factory=list)  # extents of vectorized loops
    vectorize_annotations: list[int] = field(default_factory=list)  # meta_schedule.vectorize
    parallel_annotations: list[int] = field(default_factory=list)  # meta_schedule.parallel
    instructions: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "tiles": self.tiles,
            "unroll": self.unroll,
            "vector_lanes": self.vector_lanes,
            "vectorize_annotations": self.vectorize_annotations,
            "parallel_annotations": self.parallel_annotations,
            "instructions": self.instructions,
        }


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def summarize_trace(trace: Any) -> ScheduleSummary:
    """Decisions of ``trace``; a malformed or empty trace gives an empty summary (never raises)."""
    summary = ScheduleSummary()
    if not (isinstance(trace, list) and len(trace) == 2 and isinstance(trace[0], list)):
        return summary
    instructions, decisions = trace
    chosen: dict[int, Any] = {}
    for item in decisions or []:
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], int):
            chosen[item[0]] = item[1]
    summary.instructions = len(instructions)
    values: dict[str, int] = {}  # random variable / loop name → its integer value or extent
    for index, inst in enumerate(instructions):
        if not (isinstance(inst, list) and len(inst) == 4):
            continue
        kind, inputs, attrs, outputs = inst
        _apply(kind, inputs, attrs, outputs, chosen.get(index), values, summary)
    return summary


def _apply(
    kind: str,
    inputs: list[Any],
    attrs: list[Any],
    outputs: list[Any],
    decision: Any,
    values: dict[str, int],
    summary: ScheduleSummary,
) -> None:
    """Fold one instruction into ``values`` (known integers) and ``summary``."""
    if kind == "SamplePerfectTile" and isinstance(decision, list):
        for name, factor in zip(outputs, decision, strict=False):
            values[name] = factor
    elif kind == "SampleCategorical" and _as_int(decision) is not None and attrs:
        candidates = attrs[0]
        if isinstance(candidates, list) and 0 <= decision < len(candidates) and outputs:
            values[outputs[0]] = candidates[decision]
    elif kind == "Split":
        factors = [
            _as_int(factor) if not isinstance(factor, str) else values.get(factor)
            for factor in inputs[1:]
        ]
        for name, known in zip(outputs, factors, strict=False):
            if known is not None and known > 0:
                values[name] = known
        sampled = any(isinstance(f, str) and f in values for f in inputs[1:])
        if sampled or any(known is not None and known > 1 for known in factors):
            # Our spaces split by constants and sampled widths as well as by perfect tiles (a
            # sampled width of 1 is a decision too); the factor TVM infers (``None``) stays
            # unknown without the loop's extent.
            summary.tiles.append({"loop": inputs[0] if inputs else "?", "factors": factors})
    elif kind == "Fuse" and outputs:
        extents = [values.get(name) for name in inputs]
        if extents and all(e is not None for e in extents):
            values[outputs[0]] = math.prod(e for e in extents if e is not None)
    elif kind == "Vectorize" and inputs and inputs[0] in values:
        summary.vector_lanes.append(values[inputs[0]])
    elif kind == "Annotate" and len(inputs) == 2 and attrs:
        value = inputs[1]
        number = values.get(value) if isinstance(value, str) else _as_int(value)
        if number is None:
            return
        if attrs[0] in _UNROLL_KEYS:
            summary.unroll.append(number)
        elif attrs[0] == "meta_schedule.vectorize":
            summary.vectorize_annotations.append(number)
        elif attrs[0] == "meta_schedule.parallel":
            summary.parallel_annotations.append(number)
