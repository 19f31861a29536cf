"""Where candidates are measured: this host (MetaSchedule's ``LocalRunner``) or a fleet's devices.

``make_runner`` is the one place the search gets its runner from. For a fleet it returns a
``FleetRunner``, which differs from MetaSchedule's ``RPCRunner`` where that one falls short:

- ``RPCRunner`` measures one candidate at a time (``max_workers`` defaults to 1) and reports
  only ``run_secs`` or an error string per candidate: nothing says which device measured it. Here
  one pool process per device registered at start requests devices from the tracker in parallel,
  and :func:`measured_by` tells the recorder the device address of each candidate.
- A device that dies mid-measurement (its session stops answering) costs only its candidate,
  which is requested again once from the tracker, which has dropped the dead device by then; a
  run error on a device that still answers is the candidate's own error and is not retried.
- A tracker that cannot be reached, or a key with no free device for ``wait`` seconds, leaves
  the candidate unmeasured, not failed: :func:`measured_by` says so, the recorder skips it and
  the search pauses (nothing recorded, nothing lost; the resumed job proposes it again).
- ``RPCRunner``'s pool has no timeout, so a tracker request for a key with no device blocks
  forever; here the pool kills a measurement after ``wait + 2·session_timeout`` seconds.

The measuring steps themselves (upload, random-filled arguments, ``time_evaluator``, clean-up)
are MetaSchedule's own ``rpc_runner`` defaults.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
from dataclasses import dataclass

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, RunnerInput, RunnerResult
from tvm.s_tir.meta_schedule.runner.rpc_runner import (
    default_alloc_argument,
    default_cleanup,
    default_run_evaluator,
    default_upload_module,
)
from tvm.s_tir.meta_schedule.runner.runner import PyRunner, PyRunnerFuture, RunnerFuture
from tvm.support.popen_pool import PopenPoolExecutor

from convtune.tuner.measure.fleet import Fleet, FleetUnavailable
from convtune.tuner.measure.rpc import DeviceLost, fleet_devices, request_device, session_answers

log = logging.getLogger(__name__)

# A local measurement's wall-clock limit (MetaSchedule's LocalRunner).
LOCAL_TIMEOUT_SEC = 30.0
# What a fleet measurement gets: the session (upload, link, time) and the wait for a free device.
SESSION_TIMEOUT_SEC = 60.0
DEVICE_WAIT_SEC = 300.0


@dataclass(frozen=True)
class Outcome:
    """One candidate's measurement on a fleet, as the pool process returns it (picklable)."""

    costs: list[float] | None = None
    error: str | None = None
    device: str | None = None
    unmeasured: str | None = None  # why it was not measured at all (tracker gone, no device)


def measure_candidate(
    fleet: Fleet,
    evaluator: EvaluatorConfig,
    artifact_path: str,
    device_type: str,
    args_info: tuple[object, ...],
    session_timeout: float,
    wait: float,
) -> Outcome:
    """Measure one built candidate on a free device of ``fleet`` (runs in a pool process)."""
    lost: list[str] = []
    remote_path = os.path.basename(artifact_path)
    for _ in range(2):  # the first device, and one more if it went away mid-measurement
        try:
            session, device = request_device(fleet, session_timeout=session_timeout, wait=wait)
        except FleetUnavailable as exc:
            return Outcome(unmeasured=exc.message)
        except DeviceLost as exc:
            log.warning("device %s went away while connecting for %s", exc.device, remote_path)
            lost.append(exc.device)
            continue
        try:
            module = default_upload_module(session, artifact_path, remote_path)
            dev = session.device(device_type, 0)
            args = default_alloc_argument(session, dev, list(args_info), 1)
            costs = default_run_evaluator(session, module, dev, evaluator, args)
            default_cleanup(session, remote_path)
            return Outcome(costs=[float(c) for c in costs], device=device)
        except Exception as exc:  # TVM raises RPC and kernel failures alike as TVMError
            if session_answers(session):
                return Outcome(error=f"run failed on {device}: {exc}", device=device)
            log.warning("device %s went away while measuring %s", device, remote_path)
            lost.append(device)
    return Outcome(
        error=f"device(s) {', '.join(lost)} went away while measuring (retried once)",
        device=lost[-1] if lost else None,
    )


@derived_object
class FleetRunnerFuture(PyRunnerFuture):
    """One candidate's pending measurement; records its device on the runner when read."""

    def __init__(
        self, future: concurrent.futures.Future[Outcome], runner: FleetRunner, artifact: str
    ) -> None:
        super().__init__()
        self.future = future
        self.runner = runner
        self.artifact = artifact

    def done(self) -> bool:
        return bool(self.future.done())

    def result(self) -> RunnerResult:
        try:
            outcome = self.future.result()
        except TimeoutError:
            outcome = Outcome(unmeasured=f"measurement on fleet {self.runner.fleet.name} timed out")
        except Exception as exc:  # the pool process died
            outcome = Outcome(error=f"measurement process failed: {exc}")
        return self.runner.note(self.artifact, outcome)


@derived_object
class FleetRunner(PyRunner):
    """Measures candidates on the devices of ``fleet``, ``workers`` at a time."""

    def __init__(
        self,
        fleet: Fleet,
        evaluator: EvaluatorConfig,
        *,
        workers: int,
        session_timeout: float = SESSION_TIMEOUT_SEC,
        wait: float = DEVICE_WAIT_SEC,
    ) -> None:
        super().__init__()
        self.fleet = fleet
        self.evaluator = evaluator
        self.session_timeout = session_timeout
        self.wait = wait
        self.pool = PopenPoolExecutor(
            max_workers=workers, timeout=wait + 2 * session_timeout + 30.0
        )
        self.devices: dict[str, str] = {}  # artifact path -> device address
        self.unmeasured: dict[str, str] = {}  # artifact path -> why it was not measured

    def run(self, runner_inputs: list[RunnerInput]) -> list[RunnerFuture]:
        futures: list[RunnerFuture] = []
        for item in runner_inputs:
            artifact = str(item.artifact_path)
            future = self.pool.submit(
                measure_candidate,
                self.fleet,
                self.evaluator,
                artifact,
                str(item.device_type),
                tuple(arg.as_json() for arg in item.args_info),
                self.session_timeout,
                self.wait,
            )
            futures.append(FleetRunnerFuture(future, self, artifact))
        return futures

    def note(self, artifact: str, outcome: Outcome) -> RunnerResult:
        if outcome.device is not None:
            self.devices[artifact] = outcome.device
        if outcome.unmeasured is not None:
            self.unmeasured[artifact] = outcome.unmeasured
            return RunnerResult(None, f"not measured: {outcome.unmeasured}")
        return RunnerResult(outcome.costs, outcome.error)

    def shutdown(self) -> None:
        self.pool.shutdown()


def make_runner(fleet: Fleet | None, evaluator: EvaluatorConfig) -> ms.runner.Runner:
    """This host's ``LocalRunner`` without a fleet; else a ``FleetRunner`` with one pool process
    per device registered now (``FleetUnavailable`` if the tracker is down or has none)."""
    if fleet is None:
        return ms.runner.LocalRunner(timeout_sec=LOCAL_TIMEOUT_SEC, evaluator_config=evaluator)
    devices = fleet_devices(fleet)
    if not devices:
        raise FleetUnavailable(
            f"fleet {fleet.name}: no device registered under key {fleet.key!r} at tracker "
            f"{fleet.tracker} (start one with `convtune rpc-server`)"
        )
    return FleetRunner(fleet, evaluator, workers=len(devices))


@dataclass(frozen=True)
class Measured:
    device: str | None
    unmeasured: str | None = None


def measured_by(runner: ms.runner.Runner, artifact_path: str | None) -> Measured:
    """Which device measured the candidate built at ``artifact_path`` (or why none did)."""
    if not isinstance(runner, FleetRunner):
        return Measured(f"local:{socket.gethostname()}")
    path = str(artifact_path)  # read once per candidate: forget it, the path may be reused
    return Measured(runner.devices.pop(path, None), runner.unmeasured.pop(path, None))


def shutdown_runner(runner: ms.runner.Runner) -> None:
    if isinstance(runner, FleetRunner):
        runner.shutdown()
