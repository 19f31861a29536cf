"""Model-level bench: the tuned artifact against the untuned TVM build and the peers.

Two modes:

- interleaved (:func:`bench_model`): every contender in one process, A B C A B C …, onnxruntime
  without spinning threads so that it leaves the cores to whoever runs next. Machine noise hits
  all contenders alike, but nobody runs in its best configuration.
- isolated (:func:`isolated_bench`): each contender in its best configuration, alone in a
  process of its own (one subprocess per contender per round, the order rotating from round to
  round); the figure of a contender is the median of its round medians. onnxruntime spins,
  OpenVINO runs with the LATENCY hint in fp32, our artifact with
  :data:`~convtune.tuner.measure.child.TVM_BEST_ENV`. This is the headline comparison: on
  MobileNetV2
  (issue 16, Zen 4) it put convtune 1.65-1.70x behind the best peer where the interleaved one
  said 1.38x.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from convtune.tuner.code_version import code_version
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.child import load_feeds, run_child, save_feeds, tvm_process_env
from convtune.tuner.measure.reference import openvino_runner, openvino_version, ort_session
from convtune.tuner.measure.timing import Stats, interleaved, summarize
from convtune.tuner.options import DEFAULT_LAYOUT, Layout

if TYPE_CHECKING:
    from tvm.target import Target

    from convtune.tuner.graph.ingest import IngestedModel


TUNED, UNTUNED, ORT, OPENVINO = "tuned", "untuned", "onnxruntime", "openvino"
#: The other runtimes convtune is compared with; the fastest of them is "the best peer".
PEERS = (ORT, OPENVINO)
INTERLEAVED, ISOLATED = "interleaved", "isolated"
#: Said in every bench that leaves OpenVINO out because it is not installed.
NO_OPENVINO = "OpenVINO not installed (pip install 'convtune[bench]'): its column is left out"


def untuned_library(
    ingested: IngestedModel, target: Target, cache_root: Path, layout: Layout = DEFAULT_LAYOUT
) -> Path:
    """The untuned TVM build of ``ingested`` for ``target``, compiled once and cached.

    The cache key covers the model bytes (sha256), the pinned input specs, the target, the layout
    and the code version (release and source digest), so a different ``--input-shape``, target or
    compile pipeline never reuses a stale library.
    """
    from convtune.db.ms_database import target_key
    from convtune.tuner.library import compile_untuned

    specs = [(s.name, list(s.shape), s.dtype) for s in ingested.inputs]
    key = hashlib.sha256(
        json.dumps(
            [
                ingested.sha256,
                specs,
                target_key(target),
                Layout.parse(layout).value,
                code_version(),
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
    """Per contender (``tuned``/``untuned``/``onnxruntime``/``openvino``, in run order) stats.

    ``mode`` says how they were timed (:data:`INTERLEAVED` or :data:`ISOLATED`); in isolated mode
    ``round_medians`` holds each contender's median per round (seconds) and ``stats`` summarises
    those round medians.
    """

    model: str
    sha256: str
    threads: int
    gflop: float
    peak_gflops: float
    peak_source: str
    stats: dict[str, Stats]
    mode: str = INTERLEAVED
    round_medians: dict[str, list[float]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        ingested: IngestedModel,
        *,
        threads: int,
        peak_gflops: float,
        peak_source: str,
        stats: dict[str, Stats],
        mode: str = INTERLEAVED,
        round_medians: dict[str, list[float]] | None = None,
        notes: Sequence[str] = (),
    ) -> ModelBench:
        """The bench of ``ingested`` (its name, hash and FLOPs read off the model)."""
        from convtune.tuner.graph.flops import model_flops

        return cls(
            model=ingested.name,
            sha256=ingested.sha256,
            threads=threads,
            gflop=model_flops(ingested.model).gflops,
            peak_gflops=peak_gflops,
            peak_source=peak_source,
            stats=stats,
            mode=mode,
            round_medians=round_medians or {},
            notes=tuple(notes),
        )

    def best_peer(self) -> str | None:
        """The peer (onnxruntime, OpenVINO) with the lowest median, None if none was timed."""
        peers = [name for name in PEERS if name in self.stats]
        return min(peers, key=lambda name: self.stats[name].median) if peers else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, times in ms; ``time_vs_ort``: median over onnxruntime's (<1: faster);
        ``time_vs_best_peer``: median over the fastest peer's (the headline ratio)."""
        ort_median = self.stats[ORT].median if ORT in self.stats else None
        best = self.best_peer()
        best_median = self.stats[best].median if best else None
        results: dict[str, dict[str, Any]] = {}
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
                "time_vs_best_peer": s.median / best_median if best_median else None,
            }
            if name in self.round_medians:
                results[name]["round_medians_ms"] = [t * 1e3 for t in self.round_medians[name]]
        return {
            "model": self.model,
            "sha256": self.sha256,
            "threads": self.threads,
            "gflop": self.gflop,
            "peak_gflops": self.peak_gflops,
            "peak_source": self.peak_source,
            "mode": self.mode,
            "best_peer": best,
            "order": list(self.stats),
            "results": results,
            "notes": list(self.notes),
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
    openvino: bool = True,
) -> ModelBench:
    """Run the tuned ``artifact``, the ``untuned`` library, onnxruntime and OpenVINO interleaved.

    All get the same random inputs (seed 0) and ``threads`` threads (TVM's pool via
    ``set_threads``, onnxruntime's intra-op pool, OpenVINO's inference threads). A missing
    ``artifact``/``untuned`` is left out, and so is OpenVINO when not installed or ``openvino`` is
    False. The untuned build stops being timed once it has used ``untuned_budget_s`` seconds
    (naive loops take seconds per call on a real CNN) but always gets one sample.
    """
    from convtune.tuner.measure.runtime import Artifact, set_threads
    from convtune.tuner.measure.verify import random_feeds

    feeds = random_feeds(ingested.inputs, seed=0)
    names = [s.name for s in ingested.inputs]
    set_threads(threads)
    runners: dict[str, Callable[[], object]] = {}
    if artifact is not None:
        runners[TUNED] = Artifact.load(artifact, names).runner(feeds)
    if untuned is not None:
        runners[UNTUNED] = Artifact.load(untuned, names).runner(feeds)
    model_bytes = ingested.model.SerializeToString()
    session = ort_session(model_bytes, threads)
    runners[ORT] = lambda: session.run(None, feeds)
    notes: list[str] = []
    if openvino:
        ov_run = openvino_runner(model_bytes, threads, feeds)
        if ov_run is None:
            notes.append(NO_OPENVINO)
        else:
            runners[OPENVINO] = ov_run
    stats = interleaved(
        runners,
        warmup=warmup,
        rounds=rounds,
        min_round_s=min_round_s,
        budget_s={UNTUNED: untuned_budget_s},
    )
    return ModelBench.of(
        ingested,
        threads=threads,
        peak_gflops=peak_gflops,
        peak_source=peak_source,
        stats=stats,
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------
# isolated: each contender alone in its own process, in its best configuration
# ---------------------------------------------------------------------------------------------


def _contender_runner(
    name: str,
    model_bytes: bytes,
    feeds: Mapping[str, np.ndarray],
    threads: int,
    artifact: Path | None,
) -> Callable[[], object]:
    """The zero-argument callable timing ``name`` in its best configuration."""
    if name == TUNED:
        from convtune.tuner.measure.runtime import Artifact, set_threads

        if artifact is None:
            raise ConvtuneError("bench: the tuned contender needs an artifact")
        set_threads(threads)
        return Artifact.load(artifact, list(feeds)).runner(feeds)
    if name == ORT:
        session = ort_session(model_bytes, threads, spinning=True)
        return lambda: session.run(None, dict(feeds))
    if name == OPENVINO:
        run = openvino_runner(model_bytes, threads, feeds)
        if run is None:
            raise ConvtuneError(NO_OPENVINO)
        return run
    raise ConvtuneError(f"bench: unknown contender {name!r}")


def _child_main(spec_json: str) -> None:
    """One contender, one round, in this (fresh) process: print its Stats as one JSON line."""
    spec = json.loads(spec_json)
    run = _contender_runner(
        spec["contender"],
        Path(spec["model"]).read_bytes(),
        load_feeds(spec),
        spec["threads"],
        Path(spec["artifact"]) if spec["artifact"] else None,
    )
    stats = interleaved(
        {spec["contender"]: run},
        warmup=spec["warmup"],
        rounds=spec["samples"],
        min_round_s=spec["min_round_s"],
    )
    print(json.dumps(stats[spec["contender"]].as_dict()))


def contender_env(name: str, threads: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a contender's own process: ours gets :func:`tvm_process_env`; the
    peers get the environment as it is."""
    if name == TUNED:
        return tvm_process_env(threads, base)
    return dict(os.environ if base is None else base)


def isolated_bench(
    ingested: IngestedModel,
    *,
    threads: int,
    peak_gflops: float,
    peak_source: str,
    artifact: Path | None = None,
    rounds: int = 5,
    warmup: int = 10,
    samples: int = 15,
    min_round_s: float = 0.05,
    openvino: bool = True,
    timeout_s: float = 600.0,
    contenders: Sequence[str] | None = None,
) -> ModelBench:
    """Each contender in its best configuration, alone in its own process, ``rounds`` times.

    Round ``r`` starts one subprocess per contender, in an order rotated by ``r`` (nobody always
    runs first, right after another contender's process has warmed or heated the machine); each
    loads its runtime, makes ``warmup`` discarded calls and ``samples`` timed slots (batched to
    ``min_round_s`` like :func:`~convtune.tuner.measure.timing.interleaved`), and reports its
    median. A
    contender's figure summarises its round medians. Inputs are the interleaved bench's (seed 0).
    OpenVINO is left out with a note when not installed.
    """
    from convtune.tuner.measure.verify import random_feeds

    if rounds < 1 or samples < 1 or warmup < 0:
        raise ConvtuneError(
            "bench: need rounds >= 1, samples >= 1, warmup >= 0 "
            f"(got {rounds}, {samples}, {warmup})"
        )
    names = list(contenders) if contenders is not None else [TUNED, ORT, OPENVINO]
    if artifact is None and TUNED in names:
        names.remove(TUNED)
    notes: list[str] = []
    if OPENVINO in names and (not openvino or openvino_version() is None):
        names.remove(OPENVINO)
        if openvino:
            notes.append(NO_OPENVINO)
    if not names:
        raise ConvtuneError("bench: nothing to run")
    feeds = random_feeds(ingested.inputs, seed=0)
    per_round: dict[str, list[Stats]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="convtune-bench-") as tmp:
        model_path = Path(tmp) / "model.onnx"
        model_path.write_bytes(ingested.model.SerializeToString())
        base = {
            **save_feeds(Path(tmp), [s.name for s in ingested.inputs], feeds),
            "model": str(model_path),
            "artifact": str(artifact) if artifact is not None else None,
            "threads": threads,
            "warmup": warmup,
            "samples": samples,
            "min_round_s": min_round_s,
        }
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                stats = run_child(
                    "convtune.tuner.bench",
                    {**base, "contender": name},
                    what=f"bench: {name}",
                    env=contender_env(name, threads),
                    timeout_s=timeout_s,
                )
                per_round[name].append(Stats(**stats))
    return _isolated_result(ingested, threads, peak_gflops, peak_source, per_round, notes)


def _isolated_result(
    ingested: IngestedModel,
    threads: int,
    peak_gflops: float,
    peak_source: str,
    per_round: Mapping[str, list[Stats]],
    notes: Sequence[str],
) -> ModelBench:
    """Summarise round medians per contender (the order of ``per_round`` is the table's)."""
    medians = {name: [s.median for s in stats] for name, stats in per_round.items()}
    return ModelBench.of(
        ingested,
        threads=threads,
        peak_gflops=peak_gflops,
        peak_source=peak_source,
        stats={
            name: summarize(values, per_round[name][0].calls_per_round)
            for name, values in medians.items()
        },
        mode=ISOLATED,
        round_medians=medians,
        notes=notes,
    )


if __name__ == "__main__":
    _child_main(sys.argv[1])
