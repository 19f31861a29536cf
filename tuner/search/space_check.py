"""Containment of schedule spaces: a space that fails on one task is dropped for that task alone.

A space's design function runs inside MetaSchedule's ``tune_tasks``, where an exception on one
task ends the search of every task: a YOLO-style 3×3 conv followed by SiLU (``x * sigmoid(x)``,
an epilogue that reads the conv output twice) made the Winograd space's
``reverse_compute_inline`` raise, and the whole job died in its first minute with no trial
recorded (issue 30). So before a search each task's applicable spaces generate their designs
once, as MetaSchedule will (:func:`design_failure`, the sketch check of MetaSchedule's own space
tests, no compile); a space that raises or yields nothing is left out of that task's search,
and the job says so in one line (:class:`DroppedSpace`). During the search a space whose every
candidate of a task failed to build or run is dropped the same way (:class:`SpaceHealth`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from convtune.schedules.spaces.base import ScheduleSpace
from convtune.tuner.errors import error_line

#: Failed candidates of one space on one task, with none that ran, before the space is dropped
#: for that task: one batch of the seed pass (8), so a space is judged on a batch, not a fluke.
FAILED_CANDIDATES_TO_DROP = 8


@dataclass(frozen=True)
class DroppedSpace:
    """One space left out of one task's search, and why (one line)."""

    space: str
    task: str
    task_index: int
    reason: str

    def line(self) -> str:
        return f"space {self.space} dropped for task {self.task}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.line()}


def design_failure(
    space: ScheduleSpace, mod: IRModule, target: Target, seed: int = 0
) -> str | None:
    """Why ``space`` cannot generate designs for the task ``mod`` (one line), or None if it can.

    The designs are generated as MetaSchedule's task scheduler generates them (a tune context
    with the space's generator), without compiling anything: a few milliseconds per space."""
    try:
        context = ms.TuneContext(
            mod=mod,
            target=target,
            space_generator=space.generator(target),
            rand_state=seed,
            num_threads=1,
            task_name="space-check",
        )
        designs = context.generate_design_space()
    except Exception as exc:  # a design function may raise anything (TVMError, KeyError, ...)
        return error_line(exc)
    return None if designs else "the space generated no design"


@dataclass
class TaskSpaces:
    """The spaces each task of a search may use: its applicable ones minus those dropped."""

    spaces: dict[int, list[ScheduleSpace]] = field(default_factory=dict)
    dropped: list[DroppedSpace] = field(default_factory=list)

    def of(self, index: int) -> list[ScheduleSpace]:
        return self.spaces.get(index, [])

    def drop(self, index: int, task: str, space: str, reason: str) -> DroppedSpace | None:
        """Leave ``space`` out of task ``index``'s search from now on; the record, or None if it
        was not in it."""
        kept = [s for s in self.of(index) if s.name != space]
        if len(kept) == len(self.of(index)):
            return None
        self.spaces[index] = kept
        dropped = DroppedSpace(space, task, index, reason)
        self.dropped.append(dropped)
        return dropped


def check_task_spaces(
    tasks: Sequence[tuple[int, str, IRModule]],
    target: Target,
    spaces: Sequence[ScheduleSpace],
    seed: int = 0,
) -> TaskSpaces:
    """For each (index, name, mod) of ``tasks``: its applicable spaces that generate designs; the
    others are in ``dropped``. ``applies_to`` failing counts as the space not applying, dropped
    with its reason too."""
    result = TaskSpaces()
    for index, name, mod in tasks:
        usable: list[ScheduleSpace] = []
        for space in spaces:
            try:
                applies = space.applies_to(mod)
            except Exception as exc:
                result.dropped.append(DroppedSpace(space.name, name, index, error_line(exc)))
                continue
            if not applies:
                continue
            why = design_failure(space, mod, target, seed)
            if why is None:
                usable.append(space)
            else:
                result.dropped.append(DroppedSpace(space.name, name, index, why))
        result.spaces[index] = usable
    return result


@dataclass
class SpaceHealth:
    """Per (task, space): candidates that failed to build or run, and candidates that ran.

    A space none of whose first :data:`FAILED_CANDIDATES_TO_DROP` candidates of a task ran is
    broken for that task (a design that generates but never compiles or always crashes)."""

    failed: dict[tuple[int, str], int] = field(default_factory=dict)
    ran: dict[tuple[int, str], int] = field(default_factory=dict)

    def count(self, index: int, space: str, error: str | None) -> bool:
        """Count one candidate; True when this one makes the space broken for the task."""
        key = (index, space)
        if error is None:
            self.ran[key] = self.ran.get(key, 0) + 1
            return False
        self.failed[key] = self.failed.get(key, 0) + 1
        return self.ran.get(key, 0) == 0 and self.failed[key] == FAILED_CANDIDATES_TO_DROP
