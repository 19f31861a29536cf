"""What a job runs on one device of its fleet besides trials: the device's peak, and the
artifact's verification against onnxruntime (run here, on the same seeded inputs)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tvm
from tvm import relax, rpc

from convtune.tuner.graph.ingest import IngestedModel
from convtune.tuner.measure.fleet import Fleet, FleetPeak
from convtune.tuner.measure.rpc import convtune_function, request_device, session_answers
from convtune.tuner.measure.verify import Verification, check_outputs, random_feeds

log = logging.getLogger(__name__)


def measure_fleet_peak(fleet: Fleet, *, wait: float = 60.0) -> FleetPeak:
    """The fp32 FMA peak measured on one free device of the fleet, with its pinned threads."""
    session, device = request_device(fleet, session_timeout=120.0, wait=wait)
    peak = json.loads(convtune_function(session, "convtune.peak", device)())
    return FleetPeak(
        gflops_per_core=float(peak["gflops_per_core"]),
        gflops_all=float(peak["gflops_all"]),
        threads=int(peak["threads"]),
        device=device,
        measured_at=datetime.now(UTC),
    )


def _outputs(value: Any) -> list[Any]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [item for part in value for item in _outputs(part)]


def _run_remote(
    session: rpc.RPCSession, so_path: Path, ingested: IngestedModel, feeds: dict[str, Any]
) -> list[Any]:
    session.upload(str(so_path))
    library = session.load_module(so_path.name)
    remote_cpu = session.cpu(0)
    vm = relax.VirtualMachine(library, remote_cpu)
    # set_input/invoke_stateful: the calling convention the Relax VM supports over RPC.
    vm.set_input("main", *[tvm.runtime.tensor(feeds[s.name], remote_cpu) for s in ingested.inputs])
    vm.invoke_stateful("main")
    outputs = _outputs(vm.get_outputs("main"))
    session.remove(so_path.name)
    return outputs


def verify_on_fleet(
    so_path: Path,
    ingested: IngestedModel,
    fleet: Fleet,
    *,
    threads: int,
    seed: int = 0,
    wait: float = 120.0,
    precision: str = "fp32",
) -> tuple[Verification, str]:
    """Upload the artifact to a device of the fleet, run it there with the Relax VM over RPC on
    the seeded inputs, compare with onnxruntime here; raises ``VerificationError`` on mismatch.

    ``threads`` is onnxruntime's (local); the device runs with its own pinned count. A device
    that goes away meanwhile is replaced once by another of the fleet.
    """
    feeds = random_feeds(ingested.inputs, seed)
    for attempt in range(2):
        session, device = request_device(fleet, session_timeout=300.0, wait=wait)
        try:
            ours = _run_remote(session, so_path, ingested, feeds)
            break
        except Exception:
            if attempt or session_answers(session):
                raise
            log.warning("device %s went away while verifying; asking for another", device)
    where = f" on fleet device {device}"
    result = check_outputs(
        ours, ingested, feeds, threads=threads, seed=seed, where=where, precision=precision
    )
    return result, device
