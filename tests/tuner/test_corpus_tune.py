"""The real-export corpus through ``tune_model`` with the default algorithms and layout.

Every export-shaped graph of bench/corpus/built.py (YOLOv8 with SiLU and a DFL Softmax, YOLOv5
with a 12-channel Focus stem, a DB text detector with ConvTranspose heads, a U-Net, a classifier
ending in a 1×1000 Softmax) and the two smallest wheel-shipped models (MTCNN's P-Net and R-Net:
keras2onnx NHWC, PRelu, Softmax).

A passing verification is not enough: the pipeline contains failures (a space that cannot
schedule a task is dropped for it, a build that fails falls back), so each run must also have
dropped no space, needed no build or layout fallback, and given no non-conv task (Softmax,
pooling, elementwise) a record slower than :data:`NON_CONV_MS`: at 64 px such a task runs in
microseconds, so anything near a millisecond is a schedule that recomputes a reduction per
element. The larger built graphs have a budget (their ~40-100 tasks would not all get a trial in
minutes on two cores); the classifier and the MTCNN nets are small enough for every task to get
its trial, each Softmax too.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.corpus import built, entry
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.options import TuneOptions
from convtune.tuner.pipeline import tune_model

pytestmark = pytest.mark.slow

#: Minutes of search + confirmation for a built graph; the build and verification come on top.
#: The budget also covers the search's planning, space checks and cost-model warm start
#: (``run_search``): 14 s of YOLOv8's 42 tasks on a Zen 3 VM, after which half a minute left
#: 16 s, too few for the first round's candidates of every task (0 trials measured).
BUILT_BUDGET_MINUTES = 1.0
#: name → (trials per task, budget minutes or None for every task's trials).
RUNS: dict[str, tuple[int, float | None]] = {
    **{e.name: (1, BUILT_BUDGET_MINUTES) for e in built.ENTRIES},
    # Few tasks: every one gets its trial, the 1×1000 Softmax after the Gemm too.
    "mobilenet_softmax": (1, None),
    "mtcnn_pnet": (1, None),
    "mtcnn_rnet": (1, None),
}
NON_CONV_MS = 1.0


def _problems(manifest: dict[str, Any]) -> list[str]:
    """One line per containment the run needed or per pathological non-conv record."""
    problems = [
        f"dropped {d['space']} for {d['task']}: {d['reason'][:160]}"
        for d in manifest["dropped_spaces"]
    ]
    if manifest["build_fallback"]:
        problems.append(f"build fallback: {manifest['build_fallback']}")
    problems += [f"layout fallback: {f}" for f in manifest["layout_plan"].get("fallbacks", [])]
    problems += [
        f"{row['task']} {row['shape']}: {row['best_ms']:.3f} ms ({row['space']})"
        for row in manifest["layers"]
        if row["kind"] not in ("conv", "matmul", "gemm")
        and row["best_ms"] is not None
        and row["best_ms"] > NON_CONV_MS
    ]
    return problems


@pytest.mark.parametrize("name", list(RUNS))
def test_corpus_model_tunes_and_verifies(name: str, tmp_path, sqlite_engine) -> None:
    trials, budget = RUNS[name]
    corpus_entry = entry(name)
    ingested = load_model(
        corpus_entry.load().SerializeToString(), input_shapes=corpus_entry.input_shapes, name=name
    )
    result = tune_model(
        ingested,
        tmp_path / "out",
        # compare (timing beside onnxruntime) off: a timing, not a check, and 20 s per model.
        TuneOptions(trials_per_task=trials, seed=0, budget_minutes=budget, compare=False),
        engine=sqlite_engine,
    )
    manifest = result.manifest
    assert manifest["verification"]["passed"], manifest["verification"]
    assert manifest["search"]["trials_measured"] > 0
    problems = _problems(manifest)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)
