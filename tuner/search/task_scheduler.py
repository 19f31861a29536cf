"""Which task's batch to search next: MetaSchedule's gradient rule, one batch in flight at a time.

MetaSchedule's ``GradientBased`` scheduler sends the first batch of *every* task before it joins
any: the first round's measurements are recorded only when the last task's batch has been
generated and built. Measured on Zen 4 with EfficientNet-B0 (75 tasks), after the seed passes
the union pass recorded nothing for 14 minutes of a 30-minute budget. Meanwhile:

- a worker killed in that window loses every measurement of the round;
- the cost model learns nothing from the round, so each task's first batch is picked by a model
  that has not seen any of the round's measurements;
- each batch is timed while the next task's candidates are searched for and compiled on the same
  cores (the builder uses every core), so the timings carry that load.

``ExclusiveGradient`` joins the batch in flight before it picks the next task: every batch is
recorded (and learned from) before the next one is generated, and measurement never overlaps a
compile. The price is that measuring no longer hides behind the next search, a few seconds per
batch. After the first round (each task once, in the order given, which ``run_search`` sorts by
expected gain), the next task is the one with the largest weighted gradient of its best latency
(TVM's) per second its batches take. TVM counts batches, not seconds: on Emerald Rapids a batch
of ResNet-18's F(4×4) Winograd kernels took 110-200 s against 3 s for a direct conv's, so
every batch they were given cost a direct task 40 batches.
"""

from __future__ import annotations

import random
import statistics
import time

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

#: TVM's defaults for the gradient: the weight of the recent slope against best/trials, and the
#: number of batches the slope is taken over.
ALPHA = 0.2
WINDOW = 3
_NO_TIME = 1e9  # a task with no successful trial yet


def best_seconds(results: list[RunnerResult]) -> float:
    """The fastest median run time of a batch (``_NO_TIME`` if nothing ran)."""
    times = [
        statistics.median_high(float(s) for s in r.run_secs)
        for r in results
        if r.error_msg is None and r.run_secs
    ]
    return min(times, default=_NO_TIME)


def batch_seconds(durations: list[float]) -> float:
    """What the task's next batch is expected to take: the median of its last ``WINDOW``."""
    return max(statistics.median(durations[-WINDOW:]), 1e-3) if durations else 1.0


def gradient(history: list[float], weight: float) -> float:
    """TVM's task gradient: how much weighted latency one more batch is expected to remove."""
    n = len(history)
    if n == 0 or history[-1] >= _NO_TIME:
        return -_NO_TIME
    best = history[-1]
    slope = (history[n - 1 - WINDOW] - best) / WINDOW if n > WINDOW else 0.0
    return (ALPHA * slope + (1 - ALPHA) * best / n) * weight


@derived_object
class ExclusiveGradient(PyTaskScheduler):
    """Gradient-based task choice; the batch in flight is measured and recorded first."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self._random = random.Random(seed)
        self._first_round = 0  # tasks given their first batch so far
        self._history: dict[int, list[float]] = {}  # task id -> best time after each batch
        self._durations: dict[int, list[float]] = {}  # task id -> seconds of each batch
        self._in_flight: tuple[int, float] | None = None  # task id, when it was picked

    def next_task_id(self) -> int:
        tasks = self._outer().tasks_
        for task_id, task in enumerate(tasks):
            if task.runner_futures is not None:
                self._join(task_id)
        alive = [i for i, task in enumerate(tasks) if not task.is_terminated]
        if not alive:
            return -1
        return self._picked(self._choose(tasks, alive))

    def _choose(self, tasks: list, alive: list[int]) -> int:
        while self._first_round < len(tasks):
            task_id = self._first_round
            self._first_round += 1
            if not tasks[task_id].is_terminated:
                return task_id
        scores = [
            gradient(self._history.get(i, []), float(tasks[i].task_weight))
            / batch_seconds(self._durations.get(i, []))
            for i in alive
        ]
        if max(scores) == min(scores):
            return self._random.choice(alive)
        return alive[scores.index(max(scores))]

    def _picked(self, task_id: int) -> int:
        # A batch's time: from its pick (search, build) to the next pick, which joins its
        # measurement first.
        now = time.monotonic()
        if self._in_flight is not None:
            previous, since = self._in_flight
            self._durations.setdefault(previous, []).append(now - since)
        self._in_flight = (task_id, now)
        return task_id

    def _join(self, task_id: int) -> None:
        results = self.join_running_task(task_id)
        history = self._history.setdefault(task_id, [])
        previous = history[-1] if history else _NO_TIME
        history.append(min(previous, best_seconds(list(results))))
