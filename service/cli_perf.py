"""Performance commands (``convtune peak``, ``bench``, ``profile``) for the main CLI to mount.

The main CLI calls ``app.add_typer(perf_app)``; without a name, typer merges these commands into
the top level of ``convtune``. Every command stores what it measured in the database: the peak on
this host's target row, bench/profile results on the artifact row whose library was measured.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from convtune.service.cli_common import (
    DbOption,
    InputShapeOption,
    load_ingested,
    open_database,
    user_errors,
)
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.peak import DOT_PEAKS, PeakResult, measure_machine
from convtune.tuner.options import DEFAULT_LAYOUT, Layout
from convtune.tuner.tables import BENCH_COLUMNS, PROFILE_COLUMNS, bench_rows, rich_table

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from tvm.target import Target

    from convtune.tuner.bench import ModelBench

perf_app = typer.Typer(help="Machine peak and performance measurements.")

ModelArg = Annotated[Path, typer.Argument(help="The ONNX model.")]
ArtifactOption = Annotated[
    Path | None,
    typer.Option("--artifact", help="model.so built by `convtune tune` (with its manifest)."),
]
ThreadsOption = Annotated[
    int | None,
    typer.Option(min=1, help="Threads for every contender (default: the artifact's, else cores)."),
]


def peak_table(result: PeakResult) -> Table:
    """The peak as a two-column table (also what the dashboard's text export shows)."""
    table = Table(title="peak (FMA and dot-product microbenchmarks)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("GFLOP/s, 1 core", f"{result.gflops_per_core:.1f}")
    table.add_row(f"GFLOP/s, {result.threads} threads", f"{result.gflops_all:.1f}")
    table.add_row(
        f"ms per GFLOP at peak, {result.threads} threads", f"{1e3 / result.gflops_all:.2f}"
    )
    if result.spread is not None:
        table.add_row("spread of repeated runs", f"{100 * result.spread:.1f}%")
    if result.load is not None:
        table.add_row("load average before", f"{result.load:.2f}")
    if result.bandwidth_gbs is not None:
        table.add_row(
            f"memory bandwidth (triad), {result.threads} threads",
            f"{result.bandwidth_gbs:.1f} GB/s",
        )
        table.add_row("ridge point (FLOP/byte)", f"{result.gflops_all / result.bandwidth_gbs:.1f}")
    for precision, rate in sorted(result.dot_peaks.items()):
        instruction = next((d.instruction for d in DOT_PEAKS if d.precision == precision), "")
        label = f"{precision} G op/s ({instruction}), {result.threads} threads"
        table.add_row(label, f"{rate:.1f}")
    table.add_row("method", result.method)
    return table


def warn(message: str) -> None:
    """A warning on stderr: the figures stand, but read them with this in mind."""
    Console(stderr=True, soft_wrap=True).print(f"[yellow]warning:[/] {message}")


def warn_over_peak(
    values: list[float | None], what: str, precision: str = "fp32", dot_roof: bool = False
) -> None:
    """% of peak above 100 means the stored peak was measured low (under load), not magic; or,
    for an artifact whose convs multiply int8 or bf16 (``precision``), that they beat the fp32
    FMA peak the percentages are of, as they should; or, judged by the stored dot-product roof
    of their precision (``dot_roof``), that they run on AMX tiles, or that roof read low."""
    over = [v for v in values if v is not None and v > 100.0]
    if not over:
        return
    if precision != "fp32":
        roof = f"the {precision} dot product's" if dot_roof else "the fp32 FMA's"
        why = (
            "on AMX tiles they may, else the peak was measured under load"
            if dot_roof
            else f"this artifact's {precision} convs exceed it"
        )
        Console(stderr=True, soft_wrap=True).print(
            f"note: {len(over)} {what} above 100% of the stored peak (up to {max(over):.0f}%): "
            f"the peak is {roof}, and {why}"
        )
        return
    warn(
        f"{len(over)} {what} above 100% of the stored peak (up to {max(over):.0f}%): the "
        "peak was measured under load; run `convtune peak` on a quiet machine"
    )


def conv_precision(manifest: dict[str, Any]) -> str:
    """What an artifact's convs multiply: "int8" if any conv is integer (a QDQ model), else
    the manifest's precision ("bf16", "fp32")."""
    convs = (manifest.get("layout_plan") or {}).get("convs", [])
    if any(conv.get("precision") == "int8" for conv in convs):
        return "int8"
    return str(manifest.get("precision", "fp32"))


@perf_app.command("peak")
def peak(
    threads: Annotated[
        int, typer.Option(help="Threads for the all-cores figure (default: all CPUs).")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    db: DbOption = None,
) -> None:
    """Measure this machine's fp32 FMA peak (one core, THREADS cores), its int8/bf16 dot-product
    peaks and memory bandwidth (stream triad), repeated; warns when the runs spread or other
    processes are running."""
    from convtune.tuner.measure.results import store_peak
    from convtune.tuner.target import make_target

    with user_errors():
        result = measure_machine(threads or os.cpu_count() or 1)
        store_peak(open_database(db), make_target(None), result)
    if as_json:
        typer.echo(json.dumps(result.as_dict()))
    else:
        Console().print(peak_table(result))
    for message in result.warnings:
        warn(message)


# ---------------------------------------------------------------------------------------------
# shared by bench and profile
# ---------------------------------------------------------------------------------------------


def _context(
    model: Path, artifact: Path | None, threads: int | None, input_shape: list[str] | None
) -> tuple[Any, Target, int]:
    """The ingested model, this host's target and the thread count; checks the artifact fits."""
    from convtune.tuner.measure.runtime import load_manifest
    from convtune.tuner.target import make_target, target_threads

    ingested = load_ingested(model, input_shape)
    target = make_target(None)
    manifest_threads = None
    if artifact is not None:
        if not artifact.is_file():
            raise ConvtuneError(f"artifact not found: {artifact}")
        manifest = load_manifest(artifact)
        built_from = manifest.get("model", {}).get("sha256")
        if built_from and built_from != ingested.sha256:
            raise ConvtuneError(f"{artifact} was built from another model than {model}")
        manifest_threads = manifest.get("threads")
    return ingested, target, target_threads(target, threads or manifest_threads)


def _peak(engine: Engine, target: Target, threads: int) -> tuple[float, str, dict[str, float]]:
    """GFLOP/s peak for ``threads`` threads, its source (see ``resolve_peak``) and the
    dot-product peaks for as many threads (empty where none was stored)."""
    from convtune.tuner.measure.results import dot_peaks_for_threads, peak_for_threads, resolve_peak

    found, source = resolve_peak(engine, target, threads, store=False)
    return peak_for_threads(found, threads), source, dot_peaks_for_threads(found, threads)


def _store(engine: Engine, artifact: Path | None, **results: Any) -> int | None:
    """Attach results to the artifact row of ``artifact``'s library; its id, or None if unknown."""
    from convtune.tuner.measure.results import find_artifact, store_artifact_results

    if artifact is None:
        return None
    artifact_id = find_artifact(engine, artifact)
    if artifact_id is not None:
        store_artifact_results(engine, artifact_id, **results)
    return artifact_id


def measure_artifact(
    engine: Engine,
    ingested: Any,
    so_path: Path,
    *,
    artifact_id: int,
    target: Target,
    threads: int,
    layout: Layout,
    winograd: dict[int, int] | None = None,
    rounds: int = 10,
    runs: int = 5,
    precision: str = "fp32",
) -> dict[str, Any]:
    """Bench (tuned vs onnxruntime, interleaved) and per-layer profile of a freshly built
    artifact on ``threads`` threads, stored on its row: what the worker runs after every job so
    the dashboard's latency, ratio and per-layer onnxruntime columns fill without the CLI.

    The untuned build is left out: compiling and timing naive loops takes minutes on a real CNN
    and says nothing about the artifact. Returns the bench document.
    """
    from convtune.tuner.bench import bench_model
    from convtune.tuner.measure.results import (
        dot_peaks_for_threads,
        peak_for_threads,
        resolve_peak,
        store_artifact_results,
    )
    from convtune.tuner.profile import profile_model

    # Stored when missing (measured inside the host's measurement lock): the dashboard's
    # "% of peak" and roofline need it, and nobody should have to run `convtune peak` first.
    peak, peak_source = resolve_peak(engine, target, threads, store=True)
    peak_gflops = peak_for_threads(peak, threads)
    doc = bench_model(
        ingested,
        threads=threads,
        peak_gflops=peak_gflops,
        peak_source=peak_source,
        artifact=so_path,
        rounds=rounds,
    ).as_dict()
    rows = profile_model(
        ingested,
        so_path,
        target=target,
        threads=threads,
        peak_gflops=peak_gflops,
        runs=runs,
        layout=layout,
        winograd=winograd,
        precision=precision,
        dot_peaks=dot_peaks_for_threads(peak, threads),
    )
    doc["artifact_id"] = artifact_id
    store_artifact_results(engine, artifact_id, bench=doc, profile=rows)
    return doc


def _data_dir() -> Path:
    from convtune.db.session import data_dir

    return data_dir()


def _console() -> Console:
    """stdout console; piped output gets a wide fixed width so tables stay readable in reports."""
    return Console() if sys.stdout.isatty() else Console(width=200)


# ---------------------------------------------------------------------------------------------
# bench
# ---------------------------------------------------------------------------------------------

BENCH_ROUNDS = 20  # interleaved: rounds of A B C in one process
ISOLATED_ROUNDS = 5  # isolated: rounds of one process per contender


def bench_table(result: ModelBench) -> Table:
    """Contenders in run order: time, GFLOP/s, % of peak, time relative to onnxruntime and to the
    fastest peer; the title says how they were timed (interleaved, or isolated at their best)."""
    doc = result.as_dict()
    how = (
        "each alone in its own process, best configuration"
        if doc["mode"] == "isolated"
        else "interleaved in one process, onnxruntime not spinning"
    )
    title = (
        f"{doc['model']}: {doc['gflop']:.2f} GFLOP, {doc['threads']} threads, "
        f"peak {doc['peak_gflops']:.0f} GFLOP/s ({doc['peak_source']}); {how}"
    )
    table = rich_table(BENCH_COLUMNS, bench_rows(doc), title)
    table.caption = "\n".join(doc["notes"]) or None
    return table


@perf_app.command("bench")
def bench(
    model: ModelArg,
    artifact: ArtifactOption = None,
    threads: ThreadsOption = None,
    input_shape: InputShapeOption = None,
    rounds: Annotated[
        int, typer.Option(min=1, help="Measured rounds per contender.")
    ] = BENCH_ROUNDS,
    warmup: Annotated[int, typer.Option(min=0, help="Discarded warm-up rounds.")] = 3,
    skip_untuned: Annotated[
        bool, typer.Option("--skip-untuned", help="Leave out the untuned TVM build.")
    ] = False,
    untuned_budget: Annotated[
        float, typer.Option(min=0.0, help="Seconds the untuned build may run (naive loops).")
    ] = 20.0,
    isolated: Annotated[
        bool,
        typer.Option(
            "--isolated",
            help="Each contender in its best configuration, alone in its own process per round "
            "(onnxruntime spinning, OpenVINO LATENCY hint, ours tuned); no untuned build. "
            "--rounds counts process rounds then (default 5).",
        ),
    ] = False,
    openvino: Annotated[
        bool, typer.Option(help="OpenVINO as a peer when installed (the `bench` extra).")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print ONE JSON line.")] = False,
    db: DbOption = None,
) -> None:
    """Tuned artifact vs untuned TVM vs onnxruntime and OpenVINO on the same threads:
    interleaved in one process, or (--isolated) each alone at its best."""
    from convtune.tuner.bench import bench_model, isolated_bench, untuned_library
    from convtune.tuner.measure.runtime import load_manifest

    with user_errors():
        ingested, target, n_threads = _context(model, artifact, threads, input_shape)
        engine = open_database(db)
        peak_gflops, peak_source, _ = _peak(engine, target, n_threads)
        if isolated:
            result = isolated_bench(
                ingested,
                threads=n_threads,
                peak_gflops=peak_gflops,
                peak_source=peak_source,
                artifact=artifact,
                rounds=rounds if rounds != BENCH_ROUNDS else ISOLATED_ROUNDS,
                openvino=openvino,
            )
        else:
            untuned = None if skip_untuned else untuned_library(ingested, target, _data_dir())
            result = bench_model(
                ingested,
                threads=n_threads,
                peak_gflops=peak_gflops,
                peak_source=peak_source,
                artifact=artifact,
                untuned=untuned,
                rounds=rounds,
                warmup=warmup,
                untuned_budget_s=untuned_budget,
                openvino=openvino,
            )
        doc = result.as_dict()
        # The last bench of the artifact, either mode (``doc["mode"]`` says which).
        doc["artifact_id"] = _store(engine, artifact, bench=doc)
    if as_json:
        typer.echo(json.dumps(doc))
    else:
        _console().print(bench_table(result))
    precision = conv_precision(load_manifest(artifact)) if artifact else "fp32"
    warn_over_peak([r["pct_peak"] for r in doc["results"].values()], "contender(s) ran", precision)


# ---------------------------------------------------------------------------------------------
# profile
# ---------------------------------------------------------------------------------------------


def profile_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Per-layer rows as printed by ``convtune profile``."""
    return rich_table(PROFILE_COLUMNS, rows, title)


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """Rows as CSV with :data:`PROFILE_COLUMNS`; ``onnx_nodes`` joined by ``;``, None empty."""
    from convtune.tuner.profile import PROFILE_COLUMNS

    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=PROFILE_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "onnx_nodes": ";".join(row["onnx_nodes"])})


@perf_app.command("profile")
def profile(
    model: ModelArg,
    artifact: ArtifactOption = None,
    threads: ThreadsOption = None,
    input_shape: InputShapeOption = None,
    runs: Annotated[int, typer.Option(min=1, help="Profiled runs (median per layer).")] = 5,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write rows as JSON.")] = None,
    csv_file: Annotated[Path | None, typer.Option("--csv", help="Write rows as CSV.")] = None,
    db: DbOption = None,
) -> None:
    """Per-layer time of the compiled model (untuned without --artifact) next to onnxruntime's."""
    from convtune.tuner.algorithms import manifest_winograd
    from convtune.tuner.bench import untuned_library
    from convtune.tuner.measure.runtime import load_manifest
    from convtune.tuner.profile import DISTURBED_NOTE, profile_model

    with user_errors():
        ingested, target, n_threads = _context(model, artifact, threads, input_shape)
        engine = open_database(db)
        peak_gflops, _, dot_peaks = _peak(engine, target, n_threads)
        so_path = artifact or untuned_library(ingested, target, _data_dir())
        manifest = load_manifest(artifact) if artifact else {}
        rows = profile_model(
            ingested,
            so_path,
            target=target,
            threads=n_threads,
            peak_gflops=peak_gflops,
            runs=runs,
            layout=Layout.parse(manifest.get("layout", Layout.NCHW))
            if artifact
            else DEFAULT_LAYOUT,
            winograd=manifest_winograd(manifest),
            precision=str(manifest.get("precision", "fp32")),
            dot_peaks=dot_peaks,
        )
        _store(engine, artifact, profile=rows)
    if json_file is not None:
        json_file.write_text(json.dumps(rows, indent=1))
    if csv_file is not None:
        write_csv(rows, csv_file)
    kind = "tuned" if artifact is not None else "untuned"
    title = f"{ingested.name} ({kind}), {n_threads} threads, peak {peak_gflops:.0f} GFLOP/s"
    precision = conv_precision(manifest)
    if precision in dot_peaks:
        title += f" ({precision} layers: {dot_peaks[precision]:.0f} G op/s)"
    _console().print(profile_table(rows, title))
    warn_over_peak([r["pct_peak"] for r in rows], "layer(s) ran", precision, precision in dot_peaks)
    if any(r.get("disturbed") for r in rows):
        warn(f"the layers' times sum above the end-to-end time: {DISTURBED_NOTE}")
