"""The extension point for schedule spaces: what the search needs to know about one space.

A space is a family of schedules for the tasks it applies to. The search
(``tuner/search/driver.py``)
gives each space with ``seed_trials > 0`` that many trials alone on each task it applies to and
that has no trial of it yet (a small hand-written space drowns in the union's far larger
population otherwise), then searches the union of every applicable space, the cost model ranking
candidates of all of them; the fastest measured schedule is the one built.

Contract for an implementation:
- ``name`` is unique, stable (it is stored with every trial in ``tuning_records.space``) and
  short;
- ``applies_to`` is cheap and pure: it looks at the task's TIR only;
- every schedule the generator yields calls :func:`mark_space` on one of its blocks, so a
  measured trial says which space produced it (the generic space, which cannot, is the default);
- the generator is deterministic given MetaSchedule's random state, and every sampled knob is a
  trace decision, so the cost model ranks candidates and the mutator varies them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

# Before any TuneContext: MetaSchedule's import of every backend's intrinsics took 40 s a job.
from .. import cpu_intrinsics  # noqa: F401
from ..ops.annotations import DEFAULT_SPACE, SPACE_ANNOTATION, mark_space

__all__ = ["DEFAULT_SPACE", "SPACE_ANNOTATION", "ScheduleSpace", "mark_space"]


class ScheduleSpace(ABC):
    """One family of schedules (see the module docstring for the contract)."""

    name: ClassVar[str]
    #: Trials this space gets alone on each task before the union search (0: union only).
    seed_trials: ClassVar[int] = 0

    @abstractmethod
    def applies_to(self, mod: IRModule) -> bool:
        """Whether this space can schedule the task ``mod`` (one fused TIR function)."""

    @abstractmethod
    def generator(self, target: Target) -> SpaceGenerator:
        """MetaSchedule's space generator for this space on ``target``."""

    def seeds_first(self, mod: IRModule) -> bool:
        """Whether this space's seed pass on task ``mod`` comes before the other spaces' (in
        registry order otherwise): a time budget can end after the first seed round."""
        return False

    def available(self, target: Target) -> bool:
        """Whether ``target``'s CPU can run this space's kernels at all (an instruction set
        extension it needs); a space that is not never sees a task there."""
        return True

    def __repr__(self) -> str:
        return f"<space {self.name}>"
