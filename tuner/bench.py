"""Model-level bench: the tuned artifact, the untuned TVM build and onnxruntime, interleaved."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .options import DEFAULT_LAYOUT, Layout
from .reference import ort_session
from .timing import Stats, interleaved

if TYPE_CHECKING:
    from tvm.target import Target

    from convtune.tuner.ingest import IngestedModel


TUNED, UNTUNED, ORT = "tuned", "untuned", "onnxruntime"


def untuned_library(
    ingested: IngestedModel, target: Target, cache_root: Path, layout: Layout = DEFAULT_LAYOUT
) -> Path:
    """The untuned TVM build of ``ingested`` for ``target``, compiled once and cached.

    The cache key covers the model bytes (sha256), the pinned input specs, the target, the layout
    and the convtune version, so a different ``--input-shape``, target or compile pipeline never
    reuses a stale library.
    """
    from convtune.db.ms_database import target_key

    from .library import compile_untuned

    specs = [(s.name, list(s.shape), s.dtype) for s in ingested.inputs]
    key = hashlib.sha256(
        json.dumps(
            [
                ingested.sha256,
                specs,
                target_key(target),
                Layout.parse(layout).value,
                version("convtune"),
            ]
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
