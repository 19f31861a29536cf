"""Benchmark report (``make bench``): tune the zoo, then bench and profile each model.

For each zoo model: tune with the same API calls as ``convtune tune`` (resuming from the database,
so a second run only tunes what the first left undone), then run the tuned artifact, the untuned
TVM build, onnxruntime and OpenVINO interleaved on the same threads (``convtune bench``), then
each contender in its best configuration alone in its own process (``convtune bench --isolated``,
the headline), and profile the tuned artifact per layer next to onnxruntime (``convtune
profile``). Writes ``bench/reports/<date>-<model>.md`` and ``.json``: end to end (both
comparisons), per layer, tuning time, machine.

    python bench/run.py --models resnet18 --trials-per-task 2 --budget-minutes 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import sys
import time
from typing import Any

import onnxruntime
import tvm

from convtune.db.migrate import upgrade
from convtune.db.session import data_dir, make_engine
from convtune.tuner.bench import ModelBench, bench_model, isolated_bench, untuned_library
from convtune.tuner.ingest import load_model
from convtune.tuner.options import DEFAULT_LAYOUT, Layout, TuneOptions
from convtune.tuner.peak import PeakResult
from convtune.tuner.pipeline import tune_model
from convtune.tuner.profile import profile_model
from convtune.tuner.reference import openvino_version
from convtune.tuner.results import peak_for_threads, resolve_peak, store_artifact_results
from convtune.tuner.tables import BENCH_COLUMNS, PROFILE_COLUMNS, bench_rows, fmt, markdown
from convtune.tuner.target import make_target, target_threads

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from bench.zoo import BUILDERS, zoo_model

REPORTS = pathlib.Path(__file__).resolve().parent / "reports"


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "tvm": tvm.__version__,
        "onnxruntime": onnxruntime.__version__,
        "openvino": openvino_version(),
        "host": platform.node(),
    }


def _ratio(doc: dict[str, Any]) -> str:
    tuned = doc["results"].get("tuned", {}).get("time_vs_best_peer")
    return f"{fmt(tuned, '.2f')}× {doc.get('best_peer')}"


def headline_markdown(isolated: dict[str, Any] | None, interleaved: dict[str, Any]) -> list[str]:
    """The best-configuration ratio first, the interleaved non-spinning one next to it."""
    lines = []
    if isolated is not None:
        rounds = isolated["results"].get("tuned", {}).get("rounds")
        lines.append(
            f"**Headline: convtune takes {_ratio(isolated)}'s time** with each contender in its "
            f"best configuration, alone in its own process ({rounds} alternating rounds, "
            "median of round medians; onnxruntime spinning, OpenVINO LATENCY hint fp32). "
        )
    lines.append(f"Interleaved in one process, onnxruntime not spinning: {_ratio(interleaved)}.")
    return lines


def bench_section(title: str, bench: dict[str, Any] | None) -> list[str]:
    """One end-to-end table with its notes (and round medians when isolated); [] if not run."""
    if bench is None:
        return []
    lines = [f"## {title} ({bench['threads']} threads, {bench['gflop']:.2f} GFLOP)", ""]
    lines += markdown(BENCH_COLUMNS, bench_rows(bench))
    lines += ["", *bench.get("notes", []), ""]
    if bench.get("mode") == "isolated":
        medians = "; ".join(
            f"{name} {', '.join(f'{t:.2f}' for t in r['round_medians_ms'])}"
            for name, r in bench["results"].items()
        )
        lines += [f"Round medians (ms): {medians}", ""]
    return lines


def write_report(name: str, report: dict[str, Any], out_dir: pathlib.Path) -> pathlib.Path:
    """``<date>-<model>.json`` (everything) and ``.md`` (the tables); returns the .md path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{report['date']}-{name}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
    tuning, peak, bench = report["tuning"], report["peak"], report["bench"]
    md = [
        f"# {name}: convtune vs untuned TVM, onnxruntime and OpenVINO ({report['date']})",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['logical_cpus']} logical CPUs; "
        f"TVM {report['machine']['tvm']}, onnxruntime {report['machine']['onnxruntime']}. "
        f"fp32 peak {peak['gflops_per_core']:.0f} GFLOP/s per core, {peak['gflops_all']:.0f} on "
        f"{peak['threads']} threads.",
        "",
        f"Tuning: {tuning['seconds'] / 60:.1f} min, {tuning['trials_measured']} trials measured "
        f"({tuning['trials_per_task']} per task, budget {tuning['budget_minutes']} min, "
        f"stopped: {tuning['reason']}); {len(tuning['untuned_tasks'])} task(s) left untuned.",
        "",
        *headline_markdown(report.get("bench_isolated"), bench),
        "",
        *bench_section("End to end, best configuration, isolated", report.get("bench_isolated")),
        *bench_section("End to end, interleaved", bench),
        "## Per layer (tuned artifact, onnxruntime per node on the same threads)",
        "",
        *markdown(PROFILE_COLUMNS, report["profile"]),
        "",
    ]
    path = stem.with_suffix(".md")
    path.write_text("\n".join(md))
    return path


def run_isolated(
    ingested: Any, so_path: pathlib.Path, threads: int, peak_gflops: float, rounds: int
) -> dict[str, Any] | None:
    """``convtune bench --isolated`` for the report (None when ``rounds`` is 0)."""
    if rounds <= 0:
        return None
    return isolated_bench(
        ingested,
        threads=threads,
        peak_gflops=peak_gflops,
        peak_source="database",
        artifact=so_path,
        rounds=rounds,
    ).as_dict()


def run_model(name: str, args: argparse.Namespace, engine: Any, peak: PeakResult) -> dict:
    """Tune, bench and profile one zoo model; returns the report (also stored on the artifact)."""
    ingested = load_model(zoo_model(name))
    target = make_target(args.target)
    threads = target_threads(target, args.threads)
    out_dir = data_dir() / "bench" / name
    print(f"[{name}] tuning ({args.trials_per_task} trials/task, {args.budget_minutes} min)")
    start = time.perf_counter()
    options = TuneOptions(
        target=args.target,
        trials_per_task=args.trials_per_task,
        budget_minutes=args.budget_minutes,
        threads=threads,
        layout=args.layout,
    )
    tuned = tune_model(ingested, out_dir, options, engine=engine)
    tuning_s = time.perf_counter() - start
    peak_gflops = peak_for_threads(peak, threads)
    print(f"[{name}] bench ({args.rounds} rounds)")
    untuned = None if args.skip_untuned else untuned_library(ingested, target, data_dir())
    bench: ModelBench = bench_model(
        ingested,
        threads=threads,
        peak_gflops=peak_gflops,
        peak_source="database",
        artifact=tuned.so_path,
        untuned=untuned,
        rounds=args.rounds,
    )
    print(f"[{name}] isolated bench ({args.isolated_rounds} rounds)")
    isolated = run_isolated(ingested, tuned.so_path, threads, peak_gflops, args.isolated_rounds)
    print(f"[{name}] profile")
    rows = profile_model(
        ingested,
        tuned.so_path,
        target=target,
        threads=threads,
        peak_gflops=peak_gflops,
        layout=tuned.manifest["layout"],
    )
    bench_doc = bench.as_dict()
    if isolated is not None:
        bench_doc["isolated"] = isolated
    store_artifact_results(engine, tuned.artifact_id, bench=bench_doc, profile=rows)
    search = tuned.manifest["search"]
    return {
        "date": args.date,
        "model": name,
        "artifact_id": tuned.artifact_id,
        "machine": machine(),
        "peak": peak.as_dict(),
        "tuning": {
            "seconds": tuning_s,
            "trials_measured": search["trials_measured"],
            "trials_per_task": args.trials_per_task,
            "budget_minutes": args.budget_minutes,
            "reason": search["reason"],
            "untuned_tasks": tuned.manifest["untuned_tasks"],
        },
        "bench": bench_doc,
        "bench_isolated": isolated,
        "profile": rows,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(BUILDERS), help="Comma-separated zoo names.")
    parser.add_argument("--trials-per-task", type=int, default=64)
    parser.add_argument(
        "--budget-minutes", type=float, default=None, help="Search budget per model."
    )
    parser.add_argument("--threads", type=int, default=None, help="Default: the target's cores.")
    parser.add_argument("--target", default=None, help="Default: this host.")
    parser.add_argument("--layout", default=DEFAULT_LAYOUT, type=Layout, choices=list(Layout))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--skip-untuned", action="store_true", help="No untuned TVM baseline.")
    parser.add_argument(
        "--isolated-rounds",
        type=int,
        default=5,
        help="Rounds of the best-configuration bench, one process per contender (0: skip).",
    )
    parser.add_argument("--db", default=None, help="Database URL (default: the data dir's).")
    parser.add_argument("--out", type=pathlib.Path, default=REPORTS)
    args = parser.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in BUILDERS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; the zoo has {', '.join(BUILDERS)}")
    args.date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    return args


def main(argv: list[str] | None = None) -> list[pathlib.Path]:
    args = parse_args(argv)
    upgrade(args.db)
    engine = make_engine(args.db)
    target = make_target(args.target)
    peak, _ = resolve_peak(engine, target, os.cpu_count() or 1, store=True)
    written = []
    for name in args.models.split(","):
        report = run_model(name, args, engine, peak)
        path = write_report(name, report, args.out)
        print(path.read_text())
        written.append(path)
    return written


if __name__ == "__main__":
    main()
