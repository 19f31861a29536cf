"""Side-by-side timing: run competitors interleaved (A B C A B C …) so that machine noise hits all.

On a shared machine an absolute time means little; a ratio of medians taken in one interleaved run
is what convtune reports. Stats are seconds per call.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnxruntime as ort

from convtune.tuner.errors import ConvtuneError, InvalidModelError

if TYPE_CHECKING:
    from tvm.target import Target

    from convtune.tuner.ingest import IngestedModel


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
    # onnxruntime's pool threads spin for a while after each run. Interleaved with another
    # contender they take its cores: measured on ResNet-50 here, a TVM artifact ran in 56 ms right
    # after an onnxruntime run and in 24 ms on its own. Without spinning, onnxruntime itself is
    # ~5% slower (20.3 vs 19.2 ms), the price of timing both in one process.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
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


# ---------------------------------------------------------------------------------------------
# model-level bench: tuned artifact vs untuned TVM vs onnxruntime
# ---------------------------------------------------------------------------------------------

TUNED, UNTUNED, ORT = "tuned", "untuned", "onnxruntime"


def untuned_library(
    ingested: IngestedModel, target: Target, cache_root: Path, layout: str = "nchwc"
) -> Path:
    """The untuned TVM build of ``ingested`` for ``target``, compiled once and cached.

    The cache key covers the model bytes (sha256), the pinned input specs, the target, the layout
    and the convtune version, so a different ``--input-shape``, target or compile pipeline never
    reuses a stale library.
    """
    from convtune.db.ms_database import target_key

    from .compile import compile_untuned

    specs = [(s.name, list(s.shape), s.dtype) for s in ingested.inputs]
    key = hashlib.sha256(
        json.dumps(
            [ingested.sha256, specs, target_key(target), layout, version("convtune")]
        ).encode()
    ).hexdigest()
    out_dir = cache_root / "untuned" / key[:24]
    so_path = out_dir / "model.so"
    if not so_path.is_file():
        compile_untuned(ingested, target, out_dir, layout)
    return so_path


@dataclass(frozen=True)
class ModelBench:
    """Per contender (``tuned``/``untuned``/``onnxruntime``, in run order) stats and figures."""

    model: str
    sha256: str
    threads: int
    gflop: float
    peak_gflops: float
    peak_source: str
    stats: dict[str, Stats]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, times in ms; ``time_vs_ort``: median over onnxruntime's (<1: faster)."""
        ort_median = self.stats[ORT].median if ORT in self.stats else None
        results = {}
        for name, s in self.stats.items():
            gflops = self.gflop / s.median if s.median > 0 else 0.0
            results[name] = {
                "median_ms": s.median * 1e3,
                "p10_ms": s.p10 * 1e3,
                "p90_ms": s.p90 * 1e3,
                "spread": s.spread,
                "rounds": s.rounds,
                "calls_per_round": s.calls_per_round,
                "gflops": gflops,
                "pct_peak": 100.0 * gflops / self.peak_gflops if self.peak_gflops else None,
                "time_vs_ort": s.median / ort_median if ort_median else None,
            }
        return {
            "model": self.model,
            "sha256": self.sha256,
            "threads": self.threads,
            "gflop": self.gflop,
            "peak_gflops": self.peak_gflops,
            "peak_source": self.peak_source,
            "order": list(self.stats),
            "results": results,
        }


def bench_model(
    ingested: IngestedModel,
    *,
    threads: int,
    peak_gflops: float,
    peak_source: str,
    artifact: Path | None = None,
    untuned: Path | None = None,
    rounds: int = 20,
    warmup: int = 3,
    min_round_s: float = 0.05,
    untuned_budget_s: float = 20.0,
) -> ModelBench:
    """Run the tuned ``artifact``, the ``untuned`` library and onnxruntime interleaved.

    All three get the same random inputs (seed 0) and ``threads`` threads (TVM's pool via
    ``set_threads``, onnxruntime's intra-op pool). A missing ``artifact``/``untuned`` is left out.
    The untuned build stops being timed once it has used ``untuned_budget_s`` seconds (naive loops
    take seconds per call on a real CNN) but always gets one sample.
    """
    from .flops import model_flops
    from .runtime import Artifact, set_threads
    from .verify import random_feeds

    feeds = random_feeds(ingested.inputs, seed=0)
    names = [s.name for s in ingested.inputs]
    set_threads(threads)
    runners: dict[str, Callable[[], object]] = {}
    if artifact is not None:
        runners[TUNED] = Artifact.load(artifact, names).runner(feeds)
    if untuned is not None:
        runners[UNTUNED] = Artifact.load(untuned, names).runner(feeds)
    session = ort_session(ingested.model.SerializeToString(), threads)
    runners[ORT] = lambda: session.run(None, feeds)
    stats = interleaved(
        runners,
        warmup=warmup,
        rounds=rounds,
        min_round_s=min_round_s,
        budget_s={UNTUNED: untuned_budget_s},
    )
    return ModelBench(
        model=ingested.name,
        sha256=ingested.sha256,
        threads=threads,
        gflop=model_flops(ingested.model).gflops,
        peak_gflops=peak_gflops,
        peak_source=peak_source,
        stats=stats,
    )
