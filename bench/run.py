"""Benchmark report (``make bench``): tune the zoo, then bench and profile each model.

For each zoo model: tune with the same API calls as ``convtune tune`` (resuming from the database,
so a second run only tunes what the first left undone), then run the tuned artifact, the untuned
TVM build, onnxruntime and OpenVINO interleaved on the same threads (``convtune bench``), then
each contender in its best configuration alone in its own process (``convtune bench --isolated``,
the headline), and profile the tuned artifact per layer next to onnxruntime (``convtune
profile``). Writes ``bench/reports/<date>-<model>.md`` and ``.json``: end to end (both
comparisons), per layer, tuning time, machine, and the time-to-parity curve
(``tuning_curve``): the model's estimated time against tuning minutes, as a table and a PNG
(matplotlib, from the ``bench`` extra).

    python bench/run.py --models resnet18 --trials-per-task 2 --budget-minutes 3
    python bench/run.py --models resnet50 --input-size 256 --label warm  # on the 224 run's DB
    python bench/run.py --models yolov8_like,ppocrv5_det --trials-per-task 2  # bench/corpus
    python bench/run.py --compare cold.json warm.json --out bench/reports  # overlay the curves
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
from collections.abc import Mapping
from typing import Any

import onnx
import onnxruntime
import tvm
from sqlalchemy import select
from sqlalchemy.orm import Session

from convtune.db.migrate import upgrade
from convtune.db.models import ModelWorkloadRow, TuningRecordRow
from convtune.db.session import data_dir, make_engine
from convtune.schedules.ops.isa import vector_lanes
from convtune.tuner.algorithms import manifest_winograd, time_with_alternatives
from convtune.tuner.bench import ModelBench, bench_model, isolated_bench, untuned_library
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.events import CostModelWarmStart, Event, EventKind, SearchPlanned
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.measure.peak import PeakResult
from convtune.tuner.measure.reference import openvino_version
from convtune.tuner.measure.results import peak_for_threads, resolve_peak, store_artifact_results
from convtune.tuner.options import DEFAULT_LAYOUT, Layout, TuneOptions
from convtune.tuner.pipeline import tune_model
from convtune.tuner.profile import ORT_OTHER, profile_model
from convtune.tuner.tables import BENCH_COLUMNS, PROFILE_COLUMNS, bench_rows, fmt, markdown
from convtune.tuner.target import make_target, target_threads

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from bench.corpus import ENTRIES as CORPUS
from bench.corpus import entry as corpus_entry
from bench.layer_spaces import conv_space_markdown, conv_space_rows
from bench.summary import gaps_markdown, summary_markdown
from bench.zoo import BUILDERS, INPUT_NAME, zoo_model

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
    host = make_target()
    return {
        "cpu": cpu,
        # The EPYC behind a session varies (Zen 3 AVX2, Zen 4/5 AVX-512): ratios only compare
        # within one vector width, so every report says which it had.
        "llvm_cpu": str(host.attrs.get("mcpu", "")),
        "fp32_lanes": vector_lanes(host),
        "logical_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "tvm": tvm.__version__,
        "onnxruntime": onnxruntime.__version__,
        "openvino": openvino_version(),
        "host": platform.node(),
    }


def _vector_unit(machine: dict[str, Any]) -> str:
    """``znver3, AVX2`` from a report's machine (older reports did not record it)."""
    lanes = machine.get("fp32_lanes")
    if lanes is None:
        return "vector unit not recorded"
    return f"{machine.get('llvm_cpu')}, {'AVX-512' if lanes == 16 else 'AVX2'}"


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


def tuning_curve(
    engine: Any,
    model_id: int,
    start: datetime.datetime,
    end: datetime.datetime,
    points: int = 24,
) -> list[dict[str, Any]]:
    """The model's estimated time against tuning minutes, from the database alone.

    At each moment: Σ over the model's tasks of occurrences × the best time recorded for the
    task's workload so far (records from before ``start`` count from minute 0: a warm database
    starts ahead). A task with no record yet counts with the slowest time this run recorded for
    it (a stand-in for an unscheduled kernel, which would be far slower still). Cheap: no
    building or running, so it can be drawn at any resolution. Sampled at ``points`` moments
    plus every moment the estimate fell by more than 5%.
    """
    with Session(engine) as session:
        tasks = session.execute(
            select(
                ModelWorkloadRow.workload_id,
                ModelWorkloadRow.occurrences,
                ModelWorkloadRow.description,
            ).where(ModelWorkloadRow.model_id == model_id)
        ).all()
        occurrences: dict[int, int] = {}
        convs: dict[int, list[int]] = {}
        for wid, occ, description in tasks:
            if wid is not None:
                occurrences[wid] = occurrences.get(wid, 0) + occ
                convs[wid] = list((description or {}).get("convs") or [])
        rows = session.execute(
            select(
                TuningRecordRow.workload_id, TuningRecordRow.mean_sec, TuningRecordRow.created_at
            )
            .where(
                TuningRecordRow.workload_id.in_(list(occurrences)),
                TuningRecordRow.mean_sec.is_not(None),
                TuningRecordRow.timed(),
                TuningRecordRow.created_at <= end,
            )
            .order_by(TuningRecordRow.created_at, TuningRecordRow.id)
        ).all()
    best: dict[int, float] = {}
    slowest: dict[int, float] = {}
    for wid, sec, created in rows:
        slowest[wid] = max(slowest.get(wid, 0.0), sec)
        if created < start:
            best[wid] = min(best.get(wid, sec), sec)

    def estimate() -> tuple[float, int]:
        # A direct conv and its Winograd alternatives count once: the fastest, as built.
        total = time_with_alternatives(
            (convs[wid], occ * t if (t := best.get(wid, slowest.get(wid))) is not None else None)
            for wid, occ in occurrences.items()
        )
        return total * 1e3, sum(1 for wid in occurrences if wid in best)

    span = max((end - start).total_seconds(), 1e-9)
    marks = [start + datetime.timedelta(seconds=span * k / points) for k in range(points + 1)]
    curve: list[dict[str, Any]] = []

    def add(moment: datetime.datetime) -> None:
        ms, covered = estimate()
        curve.append(
            {
                "minutes": (moment - start).total_seconds() / 60,
                "est_ms": ms,
                "tasks_with_record": covered,
                "tasks": len(occurrences),
            }
        )

    add(start)
    for wid, sec, created in rows:
        if created < start:
            continue
        while marks and marks[0] < created:
            if marks[0] > start:
                add(marks[0])
            marks.pop(0)
        before = estimate()[0]
        best[wid] = min(best.get(wid, sec), sec)
        if estimate()[0] < 0.95 * before:
            add(created)
    for moment in marks:
        if moment > start:
            add(moment)
    return curve


def calibrate_curve(curve: list[dict[str, Any]], bench: dict[str, Any]) -> None:
    """Adds ``ratio_vs_ort`` to every point: the estimate scaled so that the last point equals
    the measured end-to-end ratio (tuned artifact / onnxruntime, interleaved). The estimate
    leaves out layout transforms and other glue, so its shape, not its level, is what counts."""
    tuned = bench["results"].get("tuned", {}).get("time_vs_ort")
    last = curve[-1]["est_ms"] if curve else 0.0
    for point in curve:
        point["ratio_vs_ort"] = tuned * point["est_ms"] / last if tuned and last else None


def curve_markdown(curve: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| minutes | Σ best × occurrences (ms) | est. time / onnxruntime | tasks with a record |",
        "|---:|---:|---:|---:|",
    ]
    for p in curve:
        lines.append(
            f"| {p['minutes']:.2f} | {p['est_ms']:.2f} | {fmt(p.get('ratio_vs_ort'), '.2f')} | "
            f"{p['tasks_with_record']}/{p['tasks']} |"
        )
    return lines


def plot_curves(curves: dict[str, list[dict[str, Any]]], path: pathlib.Path, title: str) -> bool:
    """Ratio to onnxruntime against tuning minutes, one line per run, as a PNG; False when
    matplotlib is not installed (``pip install -e '.[bench]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for label, curve in curves.items():
        points = [p for p in curve if p.get("ratio_vs_ort") is not None]
        ax.plot(
            [p["minutes"] for p in points],
            [p["ratio_vs_ort"] for p in points],
            marker=".",
            label=label,
        )
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="onnxruntime")
    ax.set_xlabel("tuning minutes")
    ax.set_ylabel("estimated time / onnxruntime")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def resized_model(name: str, size: int | None) -> tuple[str, bytes | pathlib.Path]:
    """The zoo model, its input made ``size``×``size`` when given (every conv workload then has
    other spatial extents: a new workload for the database)."""
    path = zoo_model(name)
    if size is None:
        return name, path
    model = onnx.load(path)
    for value in model.graph.input:
        if value.name == INPUT_NAME:
            dims = value.type.tensor_type.shape.dim
            dims[2].dim_value = size
            dims[3].dim_value = size
    # Intermediate shapes were inferred for the old size: let shape inference redo them.
    del model.graph.value_info[:]
    return f"{name}-{size}", model.SerializeToString()


def model_source(
    name: str, size: int | None
) -> tuple[str, bytes | pathlib.Path, Mapping[str, tuple[int, ...]]]:
    """(report name, model, pinned input shapes) of a zoo model (resized when ``size`` is given)
    or of a real-export corpus model (bench/corpus: its dynamic dims pinned as the corpus pins
    them)."""
    if name in BUILDERS:
        return (*resized_model(name, size), {})
    found = corpus_entry(name)
    return name, found.load().SerializeToString(), found.input_shapes


def write_report(name: str, report: dict[str, Any], out_dir: pathlib.Path) -> pathlib.Path:
    """``<date>-<model>.json`` (everything) and ``.md`` (the tables); returns the .md path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{report['date']}-{name}"
    pathlib.Path(f"{stem}.json").write_text(json.dumps(report, indent=1))
    tuning, peak, bench = report["tuning"], report["peak"], report["bench"]
    md = [
        f"# {name}: convtune vs untuned TVM, onnxruntime and OpenVINO ({report['date']})",
        "",
        f"Machine: {report['machine']['cpu']} ({_vector_unit(report['machine'])}), "
        f"{report['machine']['logical_cpus']} logical CPUs; "
        f"TVM {report['machine']['tvm']}, onnxruntime {report['machine']['onnxruntime']}. "
        f"fp32 peak {peak['gflops_per_core']:.0f} GFLOP/s per core, {peak['gflops_all']:.0f} on "
        f"{peak['threads']} threads.",
        "",
        f"Tuning: {tuning['seconds'] / 60:.1f} min, {tuning['trials_measured']} trials measured "
        f"({tuning['trials_per_task']} per task, budget {tuning['budget_minutes']} min, "
        f"stopped: {tuning['reason']}); {len(tuning['untuned_tasks'])} task(s) left untuned. "
        f"{start_state(tuning, report.get('curve'))}",
        "",
        *headline_markdown(report.get("bench_isolated"), bench),
        "",
        *bench_section("End to end, best configuration, isolated", report.get("bench_isolated")),
        *bench_section("End to end, interleaved", bench),
        "## Per layer (tuned artifact, onnxruntime per node on the same threads)",
        "",
        *profile_caveats(report["profile"]),
        *markdown(PROFILE_COLUMNS, report["profile"]),
        "",
        *gaps_markdown(report["profile"]),
    ]
    if report.get("conv_spaces"):
        md += [
            "## Search per conv: best kernel of each space and algorithm (ms per call, "
            "tuner's measurement; built = in the model)",
            "",
            *conv_space_markdown(report["conv_spaces"]),
            "",
        ]
    curve = report.get("curve")
    if curve:
        png = stem.with_name(stem.name + "-curve.png")
        label = report.get("label") or name
        drawn = plot_curves({label: curve}, png, f"{name}: time to parity ({label})")
        md += [
            f"## Time to parity ({label}: {report['tuning'].get('reused_workloads', 0)} of "
            f"{curve[-1]['tasks']} workloads had records before the run)",
            "",
            *([f"![curve]({png.name})", ""] if drawn else []),
            *curve_markdown(curve),
            "",
        ]
    path = pathlib.Path(f"{stem}.md")
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
    name, source, input_shapes = model_source(name, args.input_size)
    ingested = load_model(source, input_shapes=input_shapes, name=name)
    target = make_target(args.target)
    threads = target_threads(target, args.threads)
    out_dir = data_dir() / "bench" / name
    print(f"[{name}] tuning ({args.trials_per_task} trials/task, {args.budget_minutes} min)")
    events: list[Event] = []
    # The curve's minute 0: when the search planned its trials (after extraction, before the
    # cost model's warm start, which is part of the search's time).
    begun = datetime.datetime.now(datetime.UTC)
    moments: dict[EventKind, datetime.datetime] = {}

    def on_event(event: Event) -> None:
        events.append(event)
        moments.setdefault(event.kind, datetime.datetime.now(datetime.UTC))

    start = time.perf_counter()
    options = TuneOptions(
        target=args.target,
        trials_per_task=args.trials_per_task,
        budget_minutes=args.budget_minutes,
        threads=threads,
        layout=args.layout,
    )
    tuned = tune_model(
        ingested,
        out_dir,
        options,
        engine=engine,
        on_event=on_event,
    )
    tuning_s = time.perf_counter() - start
    ended_at = datetime.datetime.now(datetime.UTC)
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
        winograd=manifest_winograd(tuned.manifest),
        precision=tuned.manifest.get("precision", "fp32"),
    )
    bench_doc = bench.as_dict()
    if isolated is not None:
        bench_doc["isolated"] = isolated
    store_artifact_results(engine, tuned.artifact_id, bench=bench_doc, profile=rows)
    search = tuned.manifest["search"]
    started_at = moments.get(EventKind.SEARCH_PLANNED, ended_at)
    built_at = moments.get(EventKind.BUILD_STARTED, ended_at)
    curve = tuning_curve(engine, tuned.model_id, started_at, built_at)
    calibrate_curve(curve, bench_doc)
    planned = next((e for e in events if isinstance(e, SearchPlanned)), None)
    warm = next((e.as_dict() for e in events if isinstance(e, CostModelWarmStart)), None)
    return {
        "date": args.date,
        "model": name,
        "label": args.label,
        "curve": curve,
        "cost_model": warm,
        # Where a job's wall time goes beyond its budget: each stage's first event, in seconds
        # from the job's start.
        "stage_seconds": {
            str(kind.value): round((moment - begun).total_seconds(), 1)
            for kind, moment in sorted(moments.items(), key=lambda item: item[1])
        },
        "allocation": planned.allocation if planned else [],
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
            "reused_workloads": curve[0]["tasks_with_record"] if curve else 0,
        },
        "bench": bench_doc,
        "bench_isolated": isolated,
        "profile": rows,
        "conv_spaces": conv_space_rows(engine, tuned.model_id),
    }


def start_state(tuning: dict[str, Any], curve: list[dict[str, Any]] | None) -> str:
    """Whether the run started cold, said beside its time: a warm run's figures owe part of their
    speed to the records an earlier run left (a ratio from one is no cold-run result)."""
    reused = int(tuning.get("reused_workloads") or 0)
    total = f" of {curve[-1]['tasks']}" if curve else ""
    if not reused:
        return "Cold: no workload had records before the run."
    return f"**Warm**: {reused}{total} workloads had records before the run."


def profile_caveats(rows: list[dict[str, Any]]) -> list[str]:
    """A line above the per-layer table for each runtime whose profile still did not add up after
    its passes (``disturbed``): its per-layer figures, and every ratio taken from them in the
    search table below, were measured while other work had the cores."""
    lines = []
    for row in rows:
        if row.get("disturbed"):
            whose = "onnxruntime's nodes" if row["layer"] == ORT_OTHER else "our kernels"
            lines += [f"> **Disturbed**: {whose}: {row['shape']}.", ""]
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--models",
        default=",".join(BUILDERS),
        help="Comma-separated zoo or corpus (bench/corpus) names.",
    )
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
    parser.add_argument("--input-size", type=int, default=None, help="Square input, e.g. 256.")
    parser.add_argument("--label", default="", help="Run label in the curve, e.g. cold or warm.")
    parser.add_argument(
        "--compare",
        nargs="+",
        type=pathlib.Path,
        default=None,
        help="Report JSONs whose curves to overlay in one PNG (no tuning).",
    )
    args = parser.parse_args(argv)
    corpus = {e.name for e in CORPUS}
    names = args.models.split(",")
    unknown = [m for m in names if m not in BUILDERS and m not in corpus]
    if unknown:
        parser.error(
            f"unknown model(s) {', '.join(unknown)}; the zoo has {', '.join(BUILDERS)}, "
            f"the corpus {', '.join(sorted(corpus))}"
        )
    if args.input_size is not None and any(m not in BUILDERS for m in names):
        parser.error("--input-size resizes zoo models only: corpus models have pinned shapes")
    args.date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    return args


def compare(paths: list[pathlib.Path], out_dir: pathlib.Path) -> pathlib.Path:
    """One PNG with the curves of several reports (e.g. cold and warm), and their table."""
    reports = [json.loads(p.read_text()) for p in paths]
    curves = {f"{r['model']} {r.get('label') or ''}".strip(): r["curve"] for r in reports}
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / ("compare-" + "-".join(p.stem for p in paths))
    plot_curves(curves, stem.with_suffix(".png"), "time to parity")
    lines = [f"# Time to parity: {', '.join(curves)}", "", f"![curves]({stem.name}.png)", ""]
    for label, curve in curves.items():
        lines += [f"## {label}", "", *curve_markdown(curve), ""]
    stem.with_suffix(".md").write_text("\n".join(lines))
    return stem.with_suffix(".md")


def main(argv: list[str] | None = None) -> list[pathlib.Path]:
    args = parse_args(argv)
    if args.compare:
        return [compare(args.compare, args.out)]
    upgrade(args.db)
    engine = make_engine(args.db)
    target = make_target(args.target)
    peak, _ = resolve_peak(engine, target, os.cpu_count() or 1, store=True)
    written, reports = [], []
    label = f"-{args.label}" if args.label else ""
    failed = []
    for name in args.models.split(","):
        try:
            report = run_model(name, args, engine, peak)
        except ConvtuneError as exc:  # one model's failure (verification, frontend) ends only it
            print(f"[{name}] failed: {exc}", file=sys.stderr)
            failed.append(f"{name}: {exc}")
            continue
        # The model's name with its input size (resnet50-256), and the run's label: a warm run
        # must not overwrite the cold one's report.
        path = write_report(f"{report['model']}{label}", report, args.out)
        print(path.read_text())
        written.append(path)
        reports.append(report)
    benched = [r for r in reports if r.get("bench_isolated")]
    if len(benched) > 1:
        summary = args.out / f"{args.date}-summary{label}.md"
        summary.write_text("\n".join(summary_markdown(benched, f"{len(benched)} models{label}")))
        print(summary.read_text())
        written.append(summary)
    if failed:
        print("failed:\n" + "\n".join(failed), file=sys.stderr)
    return written


if __name__ == "__main__":
    main()
