"""Trials per minute: this host's LocalRunner vs a fleet of RPC devices on this machine.

Starts a TVM RPC tracker and ``devices`` ``convtune rpc-server`` processes on loopback, each
pinned to its own core with ``taskset`` and measuring with one thread, then tunes the same small
CNN from an empty database with the same seed, alternating local and fleet ``--rounds`` times.
A round's rate is trials recorded / search wall time (from the ``search_planned`` event to
``build_started``); building and verification are not counted. Builders are local in both
configurations (``--threads`` processes), so on a machine whose cores also host the devices
they compete with the measurements: this shows where scaling stops, not the speed of a fleet of
separate machines.

    .venv/bin/python -m bench.rpc_scaling --trials-per-task 8 --rounds 2
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from convtune.db.migrate import upgrade
from convtune.db.session import make_engine
from convtune.service.app.fleets import FleetCreate, create_fleet
from convtune.tuner.events import BuildStarted, Event, EventKind
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.measure.fleet import Fleet, FleetUnavailable
from convtune.tuner.measure.rpc import fleet_devices
from convtune.tuner.options import Layout, TuneOptions
from convtune.tuner.pipeline import tune_model
from tests.models import three_conv_cnn, to_bytes

REPORTS = pathlib.Path(__file__).resolve().parent / "reports"
BIN = pathlib.Path(sys.executable).parent
KEY = "bench"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("timed out starting the tracker or a device")
        time.sleep(0.5)


class LoopbackFleet:
    """A tracker and pinned devices as separate process groups; all killed on exit."""

    def __init__(self, devices: int) -> None:
        self.port = _free_port()
        self.processes: list[subprocess.Popen[bytes]] = []
        self._spawn(
            [str(BIN / "python"), "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
             "--port", str(self.port), "--port-end", str(self.port + 1), "--silent"]
        )  # fmt: skip
        self.fleet = Fleet("bench", "127.0.0.1", self.port, KEY)
        _wait(self._tracker_up, 60)
        cores = sorted(os.sched_getaffinity(0))
        for i in range(devices):
            port = _free_port()
            self._spawn(
                ["taskset", "-c", str(cores[i % len(cores)]), str(BIN / "convtune"), "rpc-server",
                 "--tracker", f"127.0.0.1:{self.port}", "--key", KEY, "--host", "127.0.0.1",
                 "--port", str(port), "--port-end", str(port + 1), "--threads", "1"]
            )  # fmt: skip
        _wait(lambda: len(fleet_devices(self.fleet)) == devices, 120)

    def _tracker_up(self) -> bool:
        try:
            fleet_devices(self.fleet)
            return True
        except FleetUnavailable:
            return False

    def _spawn(self, args: list[str]) -> None:
        self.processes.append(
            subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
        )

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def tune_round(fleet: Fleet | None, args: argparse.Namespace) -> dict[str, Any]:
    """One tuning run from an empty database; trials and search seconds."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="convtune-rpcbench-"))
    url = f"sqlite:///{work / 'bench.db'}"
    upgrade(url)
    engine = make_engine(url)
    times: dict[EventKind, float] = {}
    measured: list[int] = []

    def on_event(event: Event) -> None:
        times.setdefault(event.kind, time.monotonic())
        if isinstance(event, BuildStarted):
            measured.append(event.trials_measured)

    try:
        if fleet is not None:
            from sqlalchemy.orm import Session

            with Session(engine) as session:
                create_fleet(
                    session,
                    FleetCreate(
                        name=fleet.name, tracker=fleet.tracker, key=fleet.key, measure_peak=False
                    ),
                )
        model = three_conv_cnn(size=32, channels=(16, 32, 32, 64))
        tune_model(
            load_model(to_bytes(model), name="cnn3"),
            work / "out",
            TuneOptions(
                trials_per_task=args.trials_per_task,
                threads=args.threads,
                seed=args.seed,
                layout=Layout.NCHW,
                fleet=fleet.name if fleet is not None else None,
            ),
            engine=engine,
            on_event=on_event,
        )
    finally:
        engine.dispose()
        shutil.rmtree(work, ignore_errors=True)
    seconds = times[EventKind.BUILD_STARTED] - times[EventKind.SEARCH_PLANNED]
    return {"trials": measured[0], "seconds": seconds, "per_minute": measured[0] * 60 / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials-per-task", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="local builders; local runner's")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    loopback = LoopbackFleet(args.devices)
    rows: dict[str, list[dict[str, Any]]] = {"local": [], "fleet": []}
    try:
        for round_ in range(args.rounds):
            for name, fleet in (("local", None), ("fleet", loopback.fleet)):
                row = tune_round(fleet, args)
                rows[name].append(row)
                print(f"round {round_ + 1} {name}: {json.dumps(row)}", flush=True)
    finally:
        loopback.close()
    summary = {
        name: statistics.median(r["per_minute"] for r in runs) for name, runs in rows.items()
    }
    lines = [
        f"# RPC scaling, {dt.date.today()} (`python -m bench.rpc_scaling "
        f"--trials-per-task {args.trials_per_task} --rounds {args.rounds} "
        f"--devices {args.devices} --threads {args.threads}`)",
        "",
        f"Machine: {os.cpu_count()} logical CPUs, shared with other jobs (load average "
        f"{os.getloadavg()[0]:.1f} at the end). Search only (no build/verify); fresh database "
        "per round.",
        "",
        "| runner | round | trials | search s | trials / min |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, runs in rows.items():
        for i, r in enumerate(runs, 1):
            lines.append(
                f"| {name} | {i} | {r['trials']} | {r['seconds']:.1f} | {r['per_minute']:.1f} |"
            )
    lines += [
        "",
        f"Median trials/min: local {summary['local']:.1f}, fleet of {args.devices} "
        f"{summary['fleet']:.1f} (ratio {summary['fleet'] / summary['local']:.2f}).",
    ]
    REPORTS.mkdir(exist_ok=True)
    path = REPORTS / f"rpc-scaling-{dt.date.today()}-{args.devices}dev.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
