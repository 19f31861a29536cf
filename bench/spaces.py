"""Per-layer benchmark of the schedule spaces on ResNet-50 v1.5's unique convolutions.

For each selected workload: a one-Conv ONNX model, tuned with the same trial budget in the plain
NCHW space and in the blocked NCHW[x]c space, then the two artifacts and onnxruntime (same
threads) timed interleaved in one process. Reports GFLOP/s, % of the measured peak, and the ratio
to onnxruntime, per layer, as Markdown and JSON under bench/reports/.

    .venv/bin/python bench/spaces.py --trials 32 --workloads 4
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.zoo import resnet50, workload_key
from convtune.db.migrate import upgrade
from convtune.db.session import make_engine
from convtune.tuner.flops import node_flops, static_shapes
from convtune.tuner.ingest import load_model
from convtune.tuner.options import Layout, TuneOptions
from convtune.tuner.peak import measure_peak
from convtune.tuner.pipeline import tune_model
from convtune.tuner.reference import ort_session
from convtune.tuner.runtime import Artifact, set_threads
from convtune.tuner.target import physical_cores
from convtune.tuner.timing import interleaved
from convtune.tuner.verify import random_feeds

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--workloads", type=int, default=4, help="how many, biggest share first")
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)

    peak = measure_peak(args.threads)
    set_threads(args.threads)
    rows = []
    work = pathlib.Path(tempfile.mkdtemp(prefix="convtune-spaces-"))
    url = f"sqlite:///{work / 'spaces.db'}"
    upgrade(url)
    engine = make_engine(url)
    for number, entry in enumerate(unique_convs()[: args.workloads]):
        model = single_conv(entry)
        ingested = load_model(model.SerializeToString(), name=f"conv{number}")
        feeds = random_feeds(ingested.inputs)
        runners = {}
        tuning_s = {}
        for layout in LAYOUTS:
            started = time.monotonic()
            result = tune_model(
                ingested,
                work / f"{number}-{layout}",
                TuneOptions(trials_per_task=args.trials, threads=args.threads, layout=layout),
                engine=engine,
            )
            tuning_s[layout] = time.monotonic() - started
            runners[layout] = Artifact.load(result.so_path, ["x"]).runner(feeds)
        session = ort_session(model.SerializeToString(), args.threads)
        runners["onnxruntime"] = lambda s=session, f=feeds: s.run(None, f)
        stats = interleaved(runners, warmup=3, rounds=args.rounds, min_round_s=0.02)
        gflop = entry["flops"] / 1e9
        row = {
            "workload": describe(entry),
            "count": entry["count"],
            "gflop": gflop,
            "tuning_s": tuning_s,
        }
        for name, stat in stats.items():
            row[name] = {
                "ms": stat.median * 1e3,
                "gflops": gflop / stat.median,
                "pct_peak": 100 * gflop / stat.median / peak.gflops_all,
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "threads": args.threads,
        "trials": args.trials,
        "peak_gflops": peak.gflops_all,
        "rows": rows,
    }
    REPORTS.mkdir(exist_ok=True)
    stem = REPORTS / f"spaces-{report['date'][:10]}-t{args.trials}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2))
    lines = [
        f"# Schedule spaces on ResNet-50 v1.5 convolutions ({args.trials} trials, "
        f"{args.threads} threads, peak {peak.gflops_all:.0f} GFLOP/s)",
        "",
        "| workload | × | GFLOP | NCHW GFLOP/s | NCHWc GFLOP/s | onnxruntime GFLOP/s | "
        "best / ORT | best % peak |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        best = max(row[layout]["gflops"] for layout in LAYOUTS)
        lines.append(
            f"| {row['workload']} | {row['count']} | {row['gflop']:.3f} | "
            f"{row['nchw']['gflops']:.0f} | {row['nchwc']['gflops']:.0f} | "
            f"{row['onnxruntime']['gflops']:.0f} | {best / row['onnxruntime']['gflops']:.2f} | "
            f"{100 * best / peak.gflops_all:.0f}% |"
        )
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
