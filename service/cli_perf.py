"""Performance commands (``convtune peak``) for the main CLI to mount.

The main CLI calls ``app.add_typer(perf_app)``; without a name, typer merges these commands into
the top level of ``convtune``.
"""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.peak import PeakResult, measure_peak
from rich.console import Console
from rich.table import Table

perf_app = typer.Typer(help="Machine peak and performance measurements.")


def peak_table(result: PeakResult) -> Table:
    """The peak as a two-column table (also what the dashboard's text export shows)."""
    table = Table(title="fp32 peak (FMA microbenchmark)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("GFLOP/s, 1 core", f"{result.gflops_per_core:.1f}")
    table.add_row(f"GFLOP/s, {result.threads} threads", f"{result.gflops_all:.1f}")
    table.add_row(
        f"ms per GFLOP at peak, {result.threads} threads", f"{1e3 / result.gflops_all:.2f}"
    )
    table.add_row("method", result.method)
    return table


@perf_app.command("peak")
def peak(
    threads: Annotated[
        int, typer.Option(help="Threads for the all-cores figure (default: all CPUs).")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Measure the fp32 FMA peak of this machine, on one core and on THREADS cores."""
    try:
        result = measure_peak(threads or os.cpu_count() or 1)
    except ConvtuneError as err:
        typer.echo(f"error: {err.message}", err=True)
        raise typer.Exit(err.exit_code) from None
    if as_json:
        typer.echo(json.dumps(result.as_dict()))
    else:
        Console().print(peak_table(result))
