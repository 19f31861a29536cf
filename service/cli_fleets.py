"""Fleet commands for the main CLI to mount: ``convtune fleets add|list`` and ``rpc-server``.

``fleets_app`` is mounted as the ``fleets`` group, ``device_app`` merged into the top level (like
``cli_perf``). TVM loads only inside the commands: ``convtune --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from convtune.service.cli_common import DbOption, open_database, user_errors

fleets_app = typer.Typer(
    help="Fleets of RPC measuring devices (TVM tracker + `convtune rpc-server`).",
    no_args_is_help=True,
)
device_app = typer.Typer()

TrackerOption = Annotated[str, typer.Option("--tracker", help="The TVM RPC tracker, HOST:PORT.")]
KeyOption = Annotated[str, typer.Option("--key", help="The devices' RPC key, e.g. epyc-znver4.")]


@fleets_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="A name jobs refer to (--fleet NAME).")],
    tracker: TrackerOption,
    key: KeyOption,
    target: Annotated[
        str | None,
        typer.Option(help='The devices\' target, e.g. "llvm -mcpu=znver4 -num-cores=2".'),
    ] = None,
    peak: Annotated[
        bool, typer.Option(help="Measure the fp32 peak on one device now (needs one running).")
    ] = True,
    db: DbOption = None,
) -> None:
    """Register a fleet and measure its peak on one of its devices through RPC."""
    from sqlalchemy.orm import Session

    from convtune.service.app.fleets import FleetCreate, create_fleet

    with user_errors():
        engine = open_database(db)
        body = FleetCreate(name=name, tracker=tracker, key=key, target=target, measure_peak=peak)
        with Session(engine) as session:
            row = create_fleet(session, body)
            text = f"fleet {row.name}: tracker {row.tracker_host}:{row.tracker_port} key {row.key}"
            if row.peak_gflops_all is not None:
                text += (
                    f", peak {row.peak_gflops_all:.1f} GFLOP/s on {row.peak_threads} threads "
                    f"({row.peak_gflops_per_core:.1f} per core) measured on {row.peak_device}"
                )
    print(text)


@fleets_app.command("list")
def list_(db: DbOption = None) -> None:
    """Every fleet: tracker, key, peak, and the devices the tracker has now."""
    from sqlalchemy.orm import Session

    from convtune.service.app.fleets import fleet_out, list_fleets, live_status
    from convtune.tuner.measure.fleet import Fleet

    with user_errors():
        engine = open_database(db)
        with Session(engine) as session:
            rows = [
                fleet_out(row, live_status(Fleet.from_row(row))) for row in list_fleets(session)
            ]
    table = Table(title=f"{len(rows)} fleet(s)", title_justify="left")
    for column in ("name", "tracker", "key", "target", "peak GFLOP/s", "devices", "free", "status"):
        table.add_column(column)
    for fleet in rows:
        peak = (
            f"{fleet.peak_gflops_all:.1f} ({fleet.peak_threads} thr)"
            if fleet.peak_gflops_all is not None
            else "-"
        )
        table.add_row(
            fleet.name,
            fleet.tracker,
            fleet.key,
            fleet.target or "-",
            peak,
            ", ".join(fleet.devices or []) or "-",
            "-" if fleet.free is None else str(fleet.free),
            fleet.status,
        )
    Console().print(table)


@device_app.command("rpc-server")
def rpc_server(
    tracker: TrackerOption,
    key: KeyOption,
    threads: Annotated[
        int | None, typer.Option(min=1, help="Threads every measurement uses (default: cores).")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="First port to try.")] = 9090,
    port_end: Annotated[int, typer.Option(help="Ports tried: [port, port-end).")] = 9199,
    custom_addr: Annotated[
        str | None, typer.Option(help="Address the tracker hands out (e.g. behind NAT).")
    ] = None,
) -> None:
    """Serve as a measuring device of a fleet: TVM's RPC server, registered at the tracker."""
    with user_errors():
        from convtune.tuner.measure.device_server import serve
        from convtune.tuner.target import physical_cores

        serve(
            tracker,
            key,
            threads=threads or physical_cores(),
            host=host,
            port=port,
            port_end=port_end,
            custom_addr=custom_addr,
        )
