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

import onnxruntime as ort

from convtune.tuner.errors import ConvtuneError, InvalidModelError


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
) -> dict[str, Stats]:
    """Time each runner in turn, round after round: A B C A B C … (insertion order of ``runners``).

    ``warmup`` interleaved rounds of one call each come first and are discarded; the fastest
    warm-up call of each runner sets how many calls one measured slot makes
    (``ceil(min_round_s / fastest)``, at least 1), so that very short calls are timed over at
    least ``min_round_s`` and timer resolution does not matter. With ``warmup=0`` every slot is
    one call. Each slot's time divided by its calls is one sample; ``rounds`` samples per runner.
    """
    if not runners:
        raise ConvtuneError("bench: nothing to run")
    if rounds < 1 or warmup < 0 or min_round_s < 0:
        raise ConvtuneError(
            f"bench: need rounds >= 1, warmup >= 0, min_round_s >= 0 "
            f"(got {rounds}, {warmup}, {min_round_s})"
        )
    fastest = dict.fromkeys(runners, math.inf)
    for _ in range(warmup):
        for name, fn in runners.items():
            fastest[name] = min(fastest[name], _timed(fn, 1))
    calls = {
        name: max(1, math.ceil(min_round_s / t)) if math.isfinite(t) and t > 0 else 1
        for name, t in fastest.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            samples[name].append(_timed(fn, calls[name]))
    return {name: summarize(samples[name], calls[name]) for name in runners}


def session_options(threads: int, options: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """``options`` (or fresh ones) set for a fair comparison: ``threads`` intra-op, 1 inter-op.

    Left unset, onnxruntime sizes its pool to all CPUs, whatever the other contender uses.
    """
    if threads < 1:
        raise ConvtuneError(f"bench: threads must be >= 1, got {threads}")
    opts = options if options is not None else ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Graph optimisation is left as given: onnxruntime's default is ORT_ENABLE_ALL.
    return opts


def ort_session(
    model_bytes: bytes, threads: int, options: ort.SessionOptions | None = None
) -> ort.InferenceSession:
    """A CPU onnxruntime session with ``threads`` intra-op threads and one inter-op thread.

    ``options`` (e.g. with profiling enabled) are used instead of fresh ones, with the thread
    settings above imposed so that every session convtune times is threaded the same way.
    Raises :class:`InvalidModelError` if onnxruntime rejects the model.
    """
    opts = session_options(threads, options)
    try:
        return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime has its own exception types, not exported stably
        lines = str(err).strip().splitlines() or [type(err).__name__]
        raise InvalidModelError(f"onnxruntime cannot load the model: {lines[0]}") from err
