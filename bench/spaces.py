"""Per-layer benchmark of the schedule spaces on ResNet-50 v1.5's unique convolutions.

For each selected workload: a one-Conv ONNX model, tuned with the same trial budget in the plain
NCHW space and in the blocked NCHW[x]c space, then the two artifacts and onnxruntime (same
threads) timed interleaved in one process. Reports GFLOP/s, % of the measured peak, and the ratio
to onnxruntime, per layer, as Markdown and JSON under bench/reports/.

    .venv/bin/python -m bench.spaces --trials 32 --workloads 4
    .venv/bin/python -m bench.spaces --trials 16 --layouts nchwc --match 7×7 --match '1×1 s1 @56'

Per layer it reports each space's best kernel (as the tuner measured it, alone) against
onnxruntime's Conv kernel (its profiler), and the one-Conv models end to end, interleaved.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import sys
import tempfile
import time
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from bench.zoo import resnet50, workload_key
from convtune.db.migrate import upgrade
from convtune.db.models import ModelWorkloadRow, TuningRecordRow
from convtune.db.session import make_engine
from convtune.tuner.graph.flops import node_flops, static_shapes
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.measure.peak import measure_peak
from convtune.tuner.measure.reference import ort_session
from convtune.tuner.measure.runtime import Artifact, set_threads
from convtune.tuner.measure.timing import interleaved
from convtune.tuner.measure.verify import random_feeds
from convtune.tuner.options import Layout, TuneOptions
from convtune.tuner.pipeline import tune_model
from convtune.tuner.profile import ort_node_times
from convtune.tuner.target import physical_cores

REPORTS = pathlib.Path(__file__).resolve().parent / "reports"
LAYOUTS = tuple(Layout)


def unique_convs() -> list[dict]:
    """ResNet-50's unique Conv workloads with their count and FLOPs, biggest total share first."""
    model = onnx.shape_inference.infer_shapes(resnet50())
    shapes = static_shapes(model)
    found: dict[tuple, dict] = {}
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        key = workload_key(node, shapes)
        entry = found.setdefault(
            key,
            {
                "node": node,
                "x": shapes[node.input[0]],
                "w": shapes[node.input[1]],
                "count": 0,
                "flops": node_flops(node, shapes),
            },
        )
        entry["count"] += 1
    return sorted(found.values(), key=lambda e: -e["flops"] * e["count"])


def single_conv(entry: dict, seed: int = 0) -> onnx.ModelProto:
    node = entry["node"]
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal(entry["w"]) * np.sqrt(2.0 / np.prod(entry["w"][1:]))).astype(
        np.float32
    )
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    conv.attribute.extend(a for a in node.attribute)
    graph = helper.make_graph(
        [conv],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(entry["x"]))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def describe(entry: dict) -> str:
    attrs = {a.name: helper.get_attribute_value(a) for a in entry["node"].attribute}
    x, w = entry["x"], entry["w"]
    return f"{x[1]}→{w[0]} {w[2]}×{w[3]} s{attrs.get('strides', [1])[0]} @{x[2]}×{x[3]}"


def best_per_space(engine: Engine, model_id: int) -> dict[str, float]:
    """Fastest measured seconds of the model's conv task, per schedule space that produced it."""
    query = (
        select(TuningRecordRow.space, func.min(TuningRecordRow.mean_sec))
        .join(ModelWorkloadRow, ModelWorkloadRow.workload_id == TuningRecordRow.workload_id)
        .where(ModelWorkloadRow.model_id == model_id, ModelWorkloadRow.kind == "conv")
        .where(TuningRecordRow.mean_sec.is_not(None), TuningRecordRow.timed())
        .group_by(TuningRecordRow.space)
    )
    with Session(engine) as session:
        return {str(space): float(sec) for space, sec in session.execute(query)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--workloads", type=int, default=4, help="how many, biggest share first")
    parser.add_argument(
        "--match",
        action="append",
        default=[],
        help="only workloads whose description contains this (repeatable), e.g. '7×7' '@56×56'",
    )
    parser.add_argument(
        "--layouts", default=",".join(LAYOUTS), help="comma-separated: nchw, nchwc (default both)"
    )
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    layouts = [Layout.parse(name) for name in args.layouts.split(",")]

    peak = measure_peak(args.threads)
    set_threads(args.threads)
    rows = []
    work = pathlib.Path(tempfile.mkdtemp(prefix="convtune-spaces-"))
    url = f"sqlite:///{work / 'spaces.db'}"
    upgrade(url)
    engine = make_engine(url)
    selected = [
        entry
        for entry in unique_convs()
        if not args.match or any(m in describe(entry) for m in args.match)
    ][: args.workloads]
    for number, entry in enumerate(selected):
        model = single_conv(entry)
        model_bytes = model.SerializeToString()
        ingested = load_model(model_bytes, name=f"conv{number}")
        feeds = random_feeds(ingested.inputs)
        gflop = entry["flops"] / 1e9
        runners = {}
        tuning_s = {}
        kernels: dict[str, float] = {}
        for layout in layouts:
            started = time.monotonic()
            result = tune_model(
                ingested,
                work / f"{number}-{layout}",
                TuneOptions(trials_per_task=args.trials, threads=args.threads, layout=layout),
                engine=engine,
            )
            tuning_s[layout] = time.monotonic() - started
            runners[layout] = Artifact.load(result.so_path, ["x"]).runner(feeds)
            for space, sec in best_per_space(engine, result.model_id).items():
                kernels[f"{layout}/{space}"] = sec
        session = ort_session(model_bytes, args.threads)
        runners["onnxruntime"] = lambda s=session, f=feeds: s.run(None, f)
        stats = interleaved(runners, warmup=3, rounds=args.rounds, min_round_s=0.02)
        # onnxruntime's conv kernel alone (its profiler), next to our kernels measured alone by
        # the tuner: the single-Conv models pay layout reorders on both sides.
        ort_kernels, _ = ort_node_times(
            model_bytes, feeds, args.threads, runs=args.rounds, end_to_end=False
        )
        row: dict = {
            "workload": describe(entry),
            "count": entry["count"],
            "gflop": gflop,
            "tuning_s": tuning_s,
            "kernels_gflops": {name: gflop / sec for name, sec in kernels.items()},
            "ort_kernel_gflops": gflop / (ort_kernels["conv"] / 1e3),
            "ort_other_ms": {k: v for k, v in ort_kernels.items() if k != "conv"},
        }
        for name, stat in stats.items():
            row[name] = {
                "ms": stat.median * 1e3,
                "p10_ms": stat.p10 * 1e3,
                "p90_ms": stat.p90 * 1e3,
                "gflops": gflop / stat.median,
                "pct_peak": 100 * gflop / stat.median / peak.gflops_all,
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    report, stem = save_report(
        "spaces", rows, f"-t{args.trials}",
        threads=args.threads, trials=args.trials, peak_gflops=peak.gflops_all,
    )  # fmt: skip
    lines = markdown_report(report, layouts)
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def save_report(
    kind: str, rows: list[dict[str, Any]], suffix: str = "", **fields: Any
) -> tuple[dict[str, Any], pathlib.Path]:
    """Write ``reports/<kind>-<date><suffix>.json``: the date, ``fields`` and ``rows``; returns
    the report and the path stem its ``.md`` goes next to."""
    report = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **fields, "rows": rows}
    REPORTS.mkdir(exist_ok=True)
    stem = REPORTS / f"{kind}-{report['date'][:16].replace(':', '')}{suffix}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2))
    return report, stem


def markdown_report(report: dict, layouts: list[Layout]) -> list[str]:
    """Two tables: kernels alone (best of each space vs onnxruntime's conv kernel), and the
    one-Conv models end to end, interleaved."""
    rows = report["rows"]
    spaces = sorted({name for row in rows for name in row["kernels_gflops"]})
    peak = report["peak_gflops"]
    lines = [
        f"# Schedule spaces on ResNet-50 v1.5 convolutions ({report['trials']} trials, "
        f"{report['threads']} threads, peak {peak:.0f} GFLOP/s, {report['date']})",
        "",
        "## Kernels alone (GFLOP/s): best trial of each space vs onnxruntime's Conv kernel",
        "",
        "| workload | × | GFLOP | " + " | ".join(spaces) + " | onnxruntime | best / ORT |",
        "|---|---|---|" + "---|" * len(spaces) + "---|---|",
    ]
    for row in rows:
        figures = row["kernels_gflops"]
        best = max(figures.values(), default=0.0)
        cells = [f"{figures[s]:.0f}" if s in figures else "–" for s in spaces]
        lines.append(
            f"| {row['workload']} | {row['count']} | {row['gflop']:.3f} | " + " | ".join(cells)
            + f" | {row['ort_kernel_gflops']:.0f} | {best / row['ort_kernel_gflops']:.2f} |"
        )  # fmt: skip
    names = [str(layout) for layout in layouts]
    lines += [
        "",
        "## One-Conv models end to end (GFLOP/s, median of interleaved rounds; layout "
        "transforms and reorders included on both sides)",
        "",
        "| workload | " + " | ".join(names) + " | onnxruntime | best / ORT | best % peak |",
        "|---|" + "---|" * len(names) + "---|---|---|",
    ]
    for row in rows:
        best = max(row[name]["gflops"] for name in names)
        ort = row["onnxruntime"]["gflops"]
        lines.append(
            f"| {row['workload']} | " + " | ".join(f"{row[n]['gflops']:.0f}" for n in names)
            + f" | {ort:.0f} | {best / ort:.2f} | {100 * best / peak:.0f}% |"
        )  # fmt: skip
    return lines


if __name__ == "__main__":
    sys.exit(main())
