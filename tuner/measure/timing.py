"""Side-by-side timing: run competitors interleaved (A B C A B C …) so that machine noise hits all.

On a shared machine an absolute time means little; a ratio of medians taken in one interleaved run
is what convtune reports. Stats are seconds per call.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from convtune.tuner.errors import ConvtuneError


@dataclass(frozen=True)
class Stats:
    """Seconds per call over the measured rounds; ``spread`` is ``(p90 - p10) / median``."""

    median: float
    p10: float
    p90: float
    spread: float
    rounds: int
    calls_per_round: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list (numpy's default method)."""
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples: list[float], calls_per_round: int = 1) -> Stats:
    """Median, p10, p90 and relative spread of per-call times."""
    if not samples:
        raise ValueError("no samples")
    values = sorted(samples)
    median = statistics.median(values)
    p10, p90 = _quantile(values, 0.1), _quantile(values, 0.9)
    spread = (p90 - p10) / median if median > 0 else 0.0
    return Stats(median, p10, p90, spread, len(values), calls_per_round)


def _timed(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def interleaved(
    runners: Mapping[str, Callable[[], object]],
    *,
    warmup: int,
    rounds: int,
    min_round_s: float,
    budget_s: Mapping[str, float] | None = None,
) -> dict[str, Stats]:
    """Time each runner in turn, round after round: A B C A B C … (insertion order of ``runners``).

    ``warmup`` interleaved rounds of one call each come first and are discarded; the fastest
    warm-up call of each runner sets how many calls one measured slot makes
    (``ceil(min_round_s / fastest)``, at least 1), so that very short calls are timed over at
    least ``min_round_s`` and timer resolution does not matter. With ``warmup=0`` every slot is
    one call. Each slot's time divided by its calls is one sample; ``rounds`` samples per runner.

    ``budget_s`` caps the seconds a runner may spend (warm-up included): once spent, it sits out
    the remaining warm-ups and rounds, but it always gets one warm-up call (if ``warmup > 0``)
    and one measured sample. Its :attr:`Stats.rounds` tells how many samples it got.
    """
    if not runners:
        raise ConvtuneError("bench: nothing to run")
    if rounds < 1 or warmup < 0 or min_round_s < 0:
        raise ConvtuneError(
            f"bench: need rounds >= 1, warmup >= 0, min_round_s >= 0 "
            f"(got {rounds}, {warmup}, {min_round_s})"
        )
    budget = dict(budget_s or {})
    spent = dict.fromkeys(runners, 0.0)

    def over_budget(name: str) -> bool:
        return spent[name] >= budget.get(name, math.inf)

    fastest = dict.fromkeys(runners, math.inf)
    for i in range(warmup):
        for name, fn in runners.items():
            if i > 0 and over_budget(name):
                continue
            t = _timed(fn, 1)
            spent[name] += t
            fastest[name] = min(fastest[name], t)
    calls = {
        name: max(1, math.ceil(min_round_s / t)) if math.isfinite(t) and t > 0 else 1
        for name, t in fastest.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            if samples[name] and over_budget(name):
                continue
            t = _timed(fn, calls[name])
            spent[name] += t * calls[name]
            samples[name].append(t)
    return {name: summarize(samples[name], calls[name]) for name in runners}
