"""The search strategy MetaSchedule runs: its evolutionary search, sized to the budget, behind an
adapter that generates no candidate for a task whose budget is spent."""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import CostModel
from tvm.s_tir.meta_schedule.database import Database
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import (
    EvolutionarySearch,
    MeasureCandidate,
    PySearchStrategy,
    SearchStrategy,
)

from convtune.db.ms_database import trace_key
from convtune.schedules.ops.isa import vector_lanes
from convtune.tuner.search.budget import TrialBudget
from convtune.tuner.search.recording import floor_candidates


def evolutionary_search(trials_per_task: int) -> EvolutionarySearch:
    """MetaSchedule's evolutionary search, its population scaled to the trial budget.

    The default population (512 schedules sampled, mutated and ranked by the cost model for every
    batch) is sized for 64-trial batches; for a budget of a few trials it costs more time than the
    measurements themselves. Sized per task: on Zen 4 the union pass's first round over
    EfficientNet-B0's 75 tasks took 14 of 30 minutes with every task at 512 (the largest task's
    size), though 45 of the 75 were allotted 8 or 16 trials (a population of 64 or 128 here).
    """
    return EvolutionarySearch(population_size=min(512, max(64, 8 * trials_per_task)))


@derived_object
class BudgetedSearch(PySearchStrategy):
    """Wraps a search strategy so that a task stops when its ``TrialBudget`` allowance is spent.

    An empty batch also ends the task: the space is exhausted (tiny elementwise spaces have a
    handful of distinct schedules), and asking again would only repeat the search. In the union
    pass (``union``) that is recorded on the workload (``TrialBudget.mark_searched``); a seed
    pass searches one space of several, whose exhaustion says nothing of the others.
    """

    def __init__(
        self,
        inner: SearchStrategy,
        budget: TrialBudget,
        index: int,
        union: bool = False,
    ) -> None:
        super().__init__()
        self.inner = inner
        self.budget = budget
        self.index = index
        self.union = union

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.mod = context.mod
        self.lanes = vector_lanes(context.target)
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(
        self,
        max_trials: int,
        num_trials_per_iter: int,
        design_spaces: list[Schedule],
        database: Database | None = None,
        cost_model: CostModel | None = None,
    ) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self) -> list[MeasureCandidate] | None:
        allowed = self.budget.allowance(self.index)
        if allowed <= 0:
            return None
        candidates = self.inner.generate_measure_candidates()
        if not candidates:
            self._exhausted()
            return None
        # MetaSchedule's search only avoids re-measuring within one run, and a small space
        # (ours has a handful of schedules per layer) yields the same candidates again and again:
        # a schedule measured before, by this run or any earlier one, is never measured again.
        seen = self.budget.measured(self.index)
        floors = (
            floor_candidates(self.mod, self.lanes) if self.budget.wants_default(self.index) else []
        )
        fresh: list[MeasureCandidate] = []
        for position, candidate in enumerate([*floors, *candidates]):
            key = trace_key(candidate.sch.trace.as_json())
            # The floor is measured whole, even past a one-trial allowance: a build must never
            # pick a schedule slower than either of its schedules.
            if key not in seen and (position < len(floors) or len(fresh) < allowed):
                seen.add(key)
                fresh.append(candidate)
        if not fresh:
            self._exhausted()
        return fresh or None

    def _exhausted(self) -> None:
        if self.union:
            self.budget.mark_searched(self.index)

    def notify_runner_results(
        self, measure_candidates: list[MeasureCandidate], results: list[RunnerResult]
    ) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> SearchStrategy:
        return BudgetedSearch(self.inner.clone(), self.budget, self.index, self.union)
