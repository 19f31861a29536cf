"""The ``convtune`` command line: tune, workloads, run, db upgrade, serve, worker, peak."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from convtune.service.cli_common import (
    DbOption,
    InputShapeOption,
    load_ingested,
    open_database,
    user_errors,
)
from convtune.service.cli_fleets import device_app, fleets_app
from convtune.service.cli_perf import perf_app
from convtune.service.progress import TuneProgress
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.events import Event, TrialBatch
from convtune.tuner.options import (
    ALL_ALGORITHMS,
    DEFAULT_LAYOUT,
    Algorithm,
    Layout,
    Precision,
    TuneOptions,
)

app = typer.Typer(
    name="convtune",
    help="Autotune the Conv/Gemm kernels of an ONNX model for this CPU.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(perf_app)
app.add_typer(fleets_app, name="fleets")
app.add_typer(device_app)

console = Console(stderr=True, soft_wrap=True)  # long lines stay whole in a log file

TargetOption = Annotated[
    str | None,
    typer.Option("--target", help='Default: this host. E.g. "llvm -mcpu=znver4 -num-cores=2".'),
]

PrecisionOption = Annotated[
    Precision,
    typer.Option(
        help="bf16: convolutions multiply bf16 inputs and weights with fp32 sums on "
        "AVX-512 BF16 CPUs (verified with a bf16 tolerance); fp32 otherwise."
    ),
]


def _quiet_tvm_logs() -> None:
    # MetaSchedule prints its task tables at INFO; ours is the progress display.
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    logging.getLogger("tvm").setLevel(logging.WARNING)


@app.command()
def workloads(
    model: Annotated[Path, typer.Argument(help="ONNX model file.")],
    input_shape: InputShapeOption = None,
    target: TargetOption = None,
    precision: PrecisionOption = TuneOptions.precision,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """List the model's tunable workloads: each Conv/Gemm/MatMul and the other fused tasks."""
    with user_errors():
        from convtune.tuner.graph.extract import extract_tasks
        from convtune.tuner.tables import layout_label
        from convtune.tuner.target import make_target

        ingested = load_ingested(model, input_shape)
        # With the Winograd alternatives a job would tune.
        relax_model, tasks = extract_tasks(
            ingested,
            make_target(target),
            algorithms=TuneOptions().algorithms,
            precision=precision,
        )
        rows = [task.as_dict() for task in tasks]
        layout = relax_model.layout_summary()
        if as_json:
            document = {"model": ingested.name, "sha256": ingested.sha256, "workloads": rows}
            print(json.dumps({**document, "layout": layout}))
            return
        table = Table(title=f"{ingested.name}: {len(rows)} tasks", title_justify="left")
        for column in ("#", "kind", "op", "shape", "layout", "ONNX nodes", "×", "MFLOP", "task"):
            table.add_column(column, justify="right" if column in ("#", "×", "MFLOP") else "left")
        order = sorted(rows, key=lambda r: (r["kind"] == "other", -r["flops"] * r["occurrences"]))
        for row in order:
            table.add_row(
                str(len(table.rows)),
                row["kind"],
                row["op"] or "-",
                row["shape"],
                layout_label(row["description"], missing="-"),
                _nodes_text(row["onnx_nodes"]),
                str(row["occurrences"]),
                f"{row['flops'] / 1e6:.1f}",
                row["task"],
            )
        Console().print(table)
        _print_layout(layout)


#: A blocked layout in a conv's plan entry ("NCHW16c", "NCHW8c→NCHW16c", "NCHW16c→NCHW").
BLOCK = re.compile(r"NCHW(\d+)c")


def _print_layout(layout: dict[str, Any]) -> None:
    """One line on the blocked layout, then one warning per fallback taken."""
    if "convs" in layout:
        # The blocks the convs read or write, widest first: NCHW16c, NCHW8c.
        sizes = {int(size) for c in layout["convs"] for size in BLOCK.findall(c["layout"])}
        blocks = [f"NCHW{size}c" for size in sorted(sizes, reverse=True)]
        console.print(
            f"layout: {layout['blocked_convs']} of {len(layout['convs'])} convs blocked"
            f"{' (' + ', '.join(blocks) + ')' if blocks else ''}, "
            f"{layout['transforms']} layout transforms"
            + (
                f", {layout['concat_chains']} concat chains written in place"
                if layout.get("concat_chains")
                else ""
            )
        )
    if layout.get("denormals_flushed"):
        console.print(
            f"weights: {layout['denormals_flushed']} denormal values set to 0 "
            "(Intel cores slow every FMA that reads one)"
        )
    for message in layout["fallbacks"]:
        console.print(f"[yellow]warning:[/] {message}")


def _nodes_text(nodes: list[str], limit: int = 3) -> str:
    if len(nodes) <= limit:
        return ", ".join(nodes) or "-"
    return ", ".join(nodes[:limit]) + f" (+{len(nodes) - limit})"


class Progress:
    """Tuning progress: a live table when stdout is a terminal, else one plain line per batch.

    The live view heads its per-task table with the overall trials, elapsed time, budget left
    and ETA (``TuneProgress``, the same figures the worker logs). Redirected to a file, each
    measured batch prints one line and nothing is redrawn or cut to 80 columns.
    """

    def __init__(self, budget_minutes: float | None, *, live: bool | None = None) -> None:
        self.state = TuneProgress(budget_minutes=budget_minutes)
        self.rows: dict[int, TrialBatch] = {}
        self.is_live = sys.stdout.isatty() if live is None else live
        self.console = Console() if self.is_live else Console(width=200)
        self.live: Live | None = (
            Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
            if self.is_live
            else None
        )

    def __enter__(self) -> Progress:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def _render(self) -> Table:
        table = Table(title=f"{self.state.phase} · {self.state.summary()}", title_justify="left")
        for column in ("task", "op", "shape", "trials", "best GFLOP/s", "best ms"):
            table.add_column(column)
        for row in self.rows.values():
            table.add_row(
                row.task,
                row.op,
                row.shape,
                f"{row.trials}/{row.budget}",
                f"{row.best_gflops:.1f}" if row.best_gflops else "-",
                f"{row.best_ms:.3f}" if row.best_ms else "-",
            )
        return table

    def __call__(self, event: Event) -> None:
        self.state.update(event)
        if isinstance(event, TrialBatch):
            self.rows[event.task_index] = event
        line = event.notice
        if line is not None:
            # Printed above the live table (rich keeps it there), or as a plain line.
            self.console.print(f"[yellow]note:[/] {line}", highlight=False, soft_wrap=True)
        if self.live is not None:
            self.live.update(self._render())
        elif isinstance(event, TrialBatch):
            print(self.state.batch_line(), flush=True)
        elif event.is_phase:
            print(f"{self.state.phase} · {self.state.summary()}", flush=True)


@app.command()
def tune(
    model: Annotated[Path, typer.Argument(help="ONNX model file.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Output directory for model.so.")],
    trials_per_task: Annotated[int, typer.Option(min=1, help="Trials per Conv/Gemm task.")] = 64,
    budget_minutes: Annotated[
        float | None,
        typer.Option(min=0.0, help="Minutes for the search and the confirmation after it."),
    ] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="Default: all cores.")] = None,
    seed: int = 0,
    retune: Annotated[bool, typer.Option(help="Search again workloads tuned before.")] = False,
    layout: Annotated[
        Layout, typer.Option(help="nchwc: convolutions in the blocked NCHW[x]c layout.")
    ] = DEFAULT_LAYOUT,
    algorithms: Annotated[
        str,
        typer.Option(
            help="Convolution algorithms to choose from per layer by measurement, comma-separated: "
            "direct,winograd. 'direct' refuses Winograd (its rounding differs)."
        ),
    ] = ",".join(ALL_ALGORITHMS),
    precision: PrecisionOption = TuneOptions.precision,
    input_shape: InputShapeOption = None,
    target: TargetOption = None,
    fleet: Annotated[
        str | None, typer.Option(help="Measure on this fleet's RPC devices (convtune fleets add).")
    ] = None,
    confirm: Annotated[
        bool,
        typer.Option(
            help="Re-measure each layer's fastest kernels side by side before the build "
            "(within --budget-minutes); --no-confirm re-measures nothing and "
            "builds on the fastest single measurements where no earlier job confirmed one."
        ),
    ] = TuneOptions.confirm,
    compare: Annotated[
        bool,
        typer.Option(
            help="After verification, time the artifact against onnxruntime on the same "
            "threads and name the layers of any gap (the last line)."
        ),
    ] = TuneOptions.compare,
    db: DbOption = None,
) -> None:
    """Tune every task of MODEL, build OUT/model.so, verify it against onnxruntime."""
    _quiet_tvm_logs()
    with user_errors():
        from convtune.tuner.pipeline import tune_model

        ingested = load_ingested(model, input_shape)
        engine = open_database(db)
        options = TuneOptions(
            target=target,
            trials_per_task=trials_per_task,
            budget_minutes=budget_minutes,
            threads=threads,
            seed=seed,
            retune=retune,
            layout=layout,
            algorithms=Algorithm.parse_list(algorithms),
            precision=precision,
            fleet=fleet,
            confirm=confirm,
            compare=compare,
        )
        progress = Progress(budget_minutes)
        with progress:
            result = tune_model(
                ingested,
                out,
                options,
                engine=engine,
                on_event=progress,
                stored_path=str(model.resolve()),
            )
    verification = result.manifest["verification"]
    quantized = ""
    if verification.get("max_steps") is not None:
        quantized = f", {verification['max_steps']:.3g} quantization steps"
        if verification.get("step_tolerance") is not None:
            quantized += f" (tolerance {verification['step_tolerance']:.3g})"
        if verification.get("top1_agreement") is not None:
            quantized += f", top-1 agreement {verification['top1_agreement']:.0%}"
    console.print(
        f"[green]ok[/] {result.so_path} (sha256 {result.manifest['library']['sha256'][:16]}…), "
        f"{result.search.trials_measured} trials measured, matches onnxruntime "
        f"(max abs err {verification['max_abs_err']:.2g}{quantized})"
    )
    _print_layout(result.manifest["layout_plan"])
    if result.manifest["untuned_tasks"]:
        console.print(
            f"[yellow]warning:[/] {len(result.manifest['untuned_tasks'])} task(s) have no "
            "successful trial and run the default schedule (parallel rows, vector lanes): "
            + ", ".join(result.manifest["untuned_tasks"])
        )
    if result.manifest.get("build_fallback"):
        console.print(f"[yellow]built with {result.manifest['build_fallback']}[/]")
    check = result.manifest.get("peer_check")
    if check is not None:
        slower = check["ratio"] is not None and check["ratio"] > 1.0
        console.print(f"[{'yellow' if slower else 'green'}]vs onnxruntime:[/] {check['message']}")


@app.command()
def run(
    artifact: Annotated[Path, typer.Argument(help="model.so built by `convtune tune`.")],
    inputs: Annotated[
        list[str], typer.Option("--input", help="NAME=file.npy, or file.npy for a single input.")
    ],
    output: Annotated[Path | None, typer.Option("--output", help="Save outputs (.npz).")] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="Default: the manifest's.")] = None,
) -> None:
    """Run a built artifact on inputs stored as .npy files; prints output shapes and a checksum."""
    import numpy as np

    with user_errors():
        from convtune.tuner.measure.runtime import Artifact, manifest_or_library, set_threads
        from convtune.tuner.target import physical_cores

        manifest = manifest_or_library(artifact)
        names = [spec["name"] for spec in manifest["inputs"]]
        feeds = _read_feeds(inputs, names)
        set_threads(threads or manifest.get("threads") or physical_cores())
        outputs = Artifact.load(artifact, names).run(feeds)
    specs = manifest["outputs"] or [{"name": f"output_{i}"} for i in range(len(outputs))]
    for spec, value in zip(specs, outputs, strict=False):
        print(
            f"{spec['name']}: shape {list(value.shape)} {value.dtype} sum {float(value.sum()):.6g}"
        )
    if output is not None:
        np.savez(output, **{spec["name"]: v for spec, v in zip(specs, outputs, strict=False)})


def _read_feeds(inputs: list[str], names: list[str]) -> dict[str, Any]:
    """The ``--input`` files by input name; a library without its manifest names its inputs as
    TVM's VM does, so an ONNX name ("input.1") is taken for its VM name ("input_1")."""
    import numpy as np

    from convtune.tuner.measure.runtime import vm_parameter_name

    feeds: dict[str, Any] = {}
    for text in inputs:
        name, sep, path = text.partition("=")
        if not sep:
            if len(names) != 1:
                raise ConvtuneError(
                    f"the model has inputs {', '.join(names)}: use --input NAME=file.npy"
                )
            name, path = names[0], text
        if name not in names and vm_parameter_name(name) in names:
            name = vm_parameter_name(name)
        if name not in names:
            raise ConvtuneError(
                f"unknown input {name!r}; the model's inputs are {', '.join(names)}"
            )
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ConvtuneError(f"cannot read {path}: {exc}") from None
    return feeds


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Create or migrate the database schema to the latest version."""
    from convtune.db.migrate import upgrade
    from convtune.db.session import default_database_url

    upgrade(db)
    console.print(f"database at head: {db or default_database_url()}")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Default: $CONVTUNE_HOST or 127.0.0.1.")] = None,
    port: Annotated[int | None, typer.Option(help="Default: $CONVTUNE_PORT or 8000.")] = None,
    workers: Annotated[
        int | None, typer.Option(min=0, help="Worker processes to start (default 1).")
    ] = None,
    db: DbOption = None,
) -> None:
    """Run the tuning service (API, dashboard) and one tuning worker, on embedded defaults."""
    from convtune.service.app.core.config import Settings
    from convtune.service.app.main import serve as run_service

    overrides = {"host": host, "port": port, "workers": workers, "database_url": db}
    run_service(Settings(**{k: v for k, v in overrides.items() if v is not None}))


@app.command()
def worker(
    once: Annotated[bool, typer.Option(help="Run at most one job, then exit.")] = False,
) -> None:
    """Claim queued tuning jobs from the database and run them (settings from CONVTUNE_*)."""
    from convtune.service.worker import main as worker_main

    worker_main(["--once"] if once else [])


def main() -> None:
    app()


if __name__ == "__main__":
    main()
