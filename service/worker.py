"""The tuning worker: claims queued jobs from the database and runs ``tune_model`` on them.

``python -m convtune.service.worker [--once]`` runs one with settings from ``CONVTUNE_*``.

Contract:
- One measurement at a time per host: a worker holds an ``fcntl`` lock on
  ``<data_dir>/measure.lock`` from before it claims a job until the job ends, so a second worker
  on the host leaves queued jobs to workers on other hosts instead of corrupting timings.
- While it runs a job, a thread refreshes ``heartbeat_at`` every ``heartbeat_seconds``; any worker
  puts ``running`` jobs whose heartbeat is older than ``stale_after_seconds`` back in the queue
  (``attempts`` + 1). The engine resumes from the trials already committed to the database.
- A cancel request, SIGTERM/SIGINT, or losing the job to such a requeue stops the search at its
  next measured batch and never builds: cancelled → ``cancelled``; SIGTERM → back to ``queued``.
- A job attempt that runs ``max_job_minutes`` (wall clock) stops its search there; the artifact
  is built from what was measured and the job succeeds with a ``time_cap`` event.
- Idle or busy, the worker heartbeats its row in ``workers`` (``/healthz`` counts live ones).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from convtune.db.models import JobRow, JobStatus, ModelRow
from convtune.db.session import make_engine, session_factory
from convtune.service.app import queue
from convtune.service.app.core.config import Settings
from convtune.service.progress import TuneProgress
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.events import (
    BuildCancelled,
    Event,
    Measured,
    MeasureFailed,
    MeasureStarted,
    Paused,
    TimeCap,
    TrialBatch,
)
from convtune.tuner.measure.fleet import FleetUnavailable
from convtune.tuner.options import TuneOptions

log = logging.getLogger("convtune.worker")

# A job paused because its fleet cannot measure is claimed again after this many queue polls.
FLEET_RETRY_POLLS = 30


class _JobWatch:
    """Heartbeats one job from a thread and answers ``should_stop`` for the engine."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        job_id: int,
        worker_id: str,
        period: float,
        shutdown: threading.Event,
        cap_seconds: float = float("inf"),
    ) -> None:
        self.sessions = sessions
        self.job_id = job_id
        self.worker_id = worker_id
        self.period = period
        self.shutdown = shutdown
        self.cancelled = False
        self.lost = False
        self.deadline = time.monotonic() + cap_seconds
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{job_id}", daemon=True)

    def __enter__(self) -> _JobWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self.period):
            try:
                beat = queue.heartbeat(self.sessions, self.job_id, self.worker_id)
            except Exception:  # A database hiccup must not kill the heartbeat thread.
                log.exception("job %d: heartbeat failed", self.job_id)
                continue
            self.cancelled = self.cancelled or beat.cancel_requested
            self.lost = self.lost or not beat.alive

    @property
    def capped(self) -> bool:
        return time.monotonic() >= self.deadline

    def aborting(self) -> bool:
        """Stop and build nothing: cancelled, taken over, or the worker is shutting down."""
        return self.cancelled or self.lost or self.shutdown.is_set()

    def should_stop(self) -> bool:
        """Stop searching (the engine asks after each measured batch)."""
        return self.aborting() or self.capped


@contextmanager
def host_lock(path: Path, shutdown: threading.Event, poll: float) -> Iterator[bool]:
    """Hold the host's measurement lock; yields False if ``shutdown`` came first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if shutdown.wait(poll):
                    yield False
                    return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def job_log_path(data_dir: Path, job_id: int) -> Path:
    """Where a job's TVM output goes (downloadable from its dashboard page)."""
    return data_dir / "logs" / f"job-{job_id}.log"


_MS_LOGGER = "tvm.s_tir.meta_schedule"


@contextmanager
def tvm_output_to(path: Path) -> Iterator[None]:
    """Send TVM's logging and everything written to standard output during a job to ``path``.

    MetaSchedule logs its task tables, per-candidate INFO lines and TIR dumps through ``tvm.*``
    loggers that propagate to the worker's root handler (5,476 server-log lines for one 36-trial
    job), configures a console handler on ``sys.stdout`` at every ``tune_tasks``, and its
    builder/runner processes inherit file descriptor 1. A handler on the ``tvm`` logger that
    does not propagate, and fd 1 pointed at the job's log file, catch all three; the worker's
    own lines go to stderr and stay in the server log.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tvm_logger = logging.getLogger("tvm")
    ms_logger = logging.getLogger(_MS_LOGGER)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved_level, saved_propagate = tvm_logger.level, tvm_logger.propagate
    tvm_logger.addHandler(handler)
    tvm_logger.setLevel(logging.INFO)
    tvm_logger.propagate = False
    ms_logger.setLevel(logging.INFO)  # its console handler takes this level: no DEBUG dumps
    sys.stdout.flush()
    saved_fd = os.dup(1)
    with open(path, "ab") as out:
        os.dup2(out.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
            tvm_logger.removeHandler(handler)
            handler.close()
            tvm_logger.setLevel(saved_level)
            tvm_logger.propagate = saved_propagate
            # MetaSchedule left its console handler on its logger: warnings only from now on.
            ms_logger.setLevel(logging.WARNING)


def make_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """One worker process's state: settings, database handles, identity, shutdown flag."""

    def __init__(self, settings: Settings, shutdown: threading.Event | None = None) -> None:
        self.settings = settings
        self.engine = make_engine(settings.resolved_database_url())
        self.sessions = session_factory(self.engine)
        self.worker_id = make_worker_id()
        self.shutdown = shutdown or threading.Event()
        self.job_id: int | None = None
        self._closed = threading.Event()
        self._presence = threading.Thread(target=self._beat, name="presence", daemon=True)

    def start_presence(self) -> None:
        """Register in ``workers`` and keep the row fresh from a thread until shutdown."""
        queue.worker_alive(self.sessions, self.worker_id, pid=os.getpid())
        self._presence.start()

    def _beat(self) -> None:
        while not self._closed.wait(self.settings.heartbeat_seconds):
            try:
                queue.worker_alive(self.sessions, self.worker_id, job_id=self.job_id)
                # Rows of killed workers: gone after ten stale periods.
                queue.prune_workers(self.sessions, 10 * self.settings.stale_after_seconds)
            except Exception:  # a database hiccup must not end the presence thread
                log.exception("worker heartbeat failed")

    def requeue_stale(self) -> list[int]:
        return queue.requeue_stale(
            self.sessions, self.settings.stale_after_seconds, self.settings.max_attempts
        )

    def run_one(self) -> int | None:
        """Claim and run one job (holding the host lock); its id, or None if the queue was empty."""
        self.requeue_stale()
        with host_lock(self.settings.lock_path, self.shutdown, self.settings.poll_seconds) as ok:
            if not ok:
                return None
            job_id = queue.claim_next(self.sessions, self.worker_id)
            if job_id is not None:
                self.job_id = job_id
                try:
                    self._run_job(job_id)
                finally:
                    self.job_id = None
            return job_id

    def _run_job(self, job_id: int) -> None:
        log.info("job %d: claimed by %s", job_id, self.worker_id)
        watch = _JobWatch(
            self.sessions,
            job_id,
            self.worker_id,
            self.settings.heartbeat_seconds,
            self.shutdown,
            cap_seconds=self.settings.max_job_minutes * 60,
        )
        try:
            with watch:
                artifact_id = self._tune(job_id, watch)
        except BuildCancelled:  # its cancel hook: the search returned and nothing was built
            self._stopped(job_id, watch)
            return
        except FleetUnavailable as exc:  # trials so far are recorded; resume when it is back
            log.warning("job %d paused: %s", job_id, exc.message)
            queue.record_event(self.sessions, job_id, Paused(reason=exc.message))
            queue.release(self.sessions, job_id, self.worker_id, f"paused: {exc.message}")
            self.shutdown.wait(FLEET_RETRY_POLLS * self.settings.poll_seconds)
            return
        except ConvtuneError as exc:
            log.warning("job %d failed: %s", job_id, exc.message)
            queue.finish(self.sessions, job_id, self.worker_id, JobStatus.FAILED, error=exc.message)
            return
        except Exception as exc:
            log.error("job %d crashed:\n%s", job_id, traceback.format_exc())
            first_line = (str(exc).strip().splitlines() or [""])[0]
            message = f"internal error: {type(exc).__name__}: {first_line}"
            queue.finish(self.sessions, job_id, self.worker_id, JobStatus.FAILED, error=message)
            return
        if watch.aborting():
            # The search stopped early but the artifact was already being built: keep it.
            self._stopped(job_id, watch, artifact_id=artifact_id)
            return
        payload = None
        if watch.capped:
            cap = self.settings.max_job_minutes
            payload = {"time_cap_minutes": cap}
            queue.record_event(self.sessions, job_id, TimeCap(time_cap_minutes=cap))
            log.warning("job %d: stopped at the wall-clock cap of %g min", job_id, cap)
        queue.finish(
            self.sessions,
            job_id,
            self.worker_id,
            JobStatus.SUCCEEDED,
            artifact_id=artifact_id,
            payload=payload,
        )
        log.info("job %d: succeeded, artifact %d", job_id, artifact_id)

    def _stopped(self, job_id: int, watch: _JobWatch, artifact_id: int | None = None) -> None:
        if watch.lost:
            log.warning("job %d: taken over by another worker; leaving it", job_id)
        elif watch.cancelled:
            queue.finish(
                self.sessions, job_id, self.worker_id, JobStatus.CANCELLED, artifact_id=artifact_id
            )
            log.info("job %d: cancelled", job_id)
        else:
            queue.release(self.sessions, job_id, self.worker_id, "worker shutting down")
            log.info("job %d: handed back to the queue", job_id)

    def _tune(self, job_id: int, watch: _JobWatch) -> int:
        # Imported here: TVM takes a second to load and an idle worker does not need it.
        from convtune.tuner.graph.ingest import load_model
        from convtune.tuner.pipeline import tune_model

        with self.sessions() as session:
            job = session.get(JobRow, job_id)
            assert job is not None
            model = session.get(ModelRow, job.model_id)
            assert model is not None
            options = dict(job.options)
            model_path, input_shapes, name = model.path, model.input_shapes, model.name
        if not model_path or not Path(model_path).is_file():
            raise ConvtuneError(f"the stored model file {model_path!r} is missing")
        ingested = load_model(model_path, input_shapes=input_shapes or None, name=name)
        tune_options = TuneOptions.from_dict(options)
        progress = TuneProgress(budget_minutes=tune_options.budget_minutes)

        def on_event(event: Event) -> None:
            queue.record_event(self.sessions, job_id, event)
            progress.update(event)
            if isinstance(event, TrialBatch):
                log.info("job %d: %s", job_id, progress.batch_line())
            elif event.notice is not None:
                log.warning("job %d: %s", job_id, event.notice)
            elif event.is_phase:
                log.info("job %d: %s · %s", job_id, progress.phase, progress.summary())

        with tvm_output_to(job_log_path(self.settings.data_dir, job_id)):
            result = tune_model(
                ingested,
                self.settings.artifacts_dir / f"job-{job_id}",
                tune_options,
                engine=self.engine,
                job_id=job_id,
                on_event=on_event,
                should_stop=watch.should_stop,
                # Once the search returned: a job cancelled, lost or shut down is not built (a job
                # at its time cap is wanted: it builds what it found).
                cancel=watch.aborting,
                stored_path=model_path,
            )
            self._measure(job_id, result, ingested, tune_options)
        return result.artifact_id

    def _measure(self, job_id: int, result: Any, ingested: Any, options: TuneOptions) -> None:
        """Bench + per-layer profile of the new artifact against onnxruntime, on the job's
        threads, before the job is marked done (the page following its events then shows them).
        A failure here is logged and recorded; the verified artifact stands."""
        from convtune.service.cli_perf import measure_artifact
        from convtune.tuner.algorithms import manifest_winograd
        from convtune.tuner.target import make_target

        threads = int(result.manifest["threads"])
        queue.record_event(self.sessions, job_id, MeasureStarted(threads=threads))
        try:
            doc = measure_artifact(
                self.engine,
                ingested,
                result.so_path,
                artifact_id=result.artifact_id,
                target=make_target(options.target),
                threads=threads,
                layout=options.layout,
                winograd=manifest_winograd(result.manifest),
                precision=options.precision,
            )
        except Exception as exc:
            log.warning(
                "job %d: bench/profile of artifact %d failed: %s", job_id, result.artifact_id, exc
            )
            queue.record_event(self.sessions, job_id, MeasureFailed(error=str(exc)[:500]))
            return
        tuned = doc["results"].get("tuned", {})
        log.info(
            "job %d: artifact %d runs in %.3f ms, %.2fx onnxruntime (%d threads)",
            job_id, result.artifact_id, tuned.get("median_ms", float("nan")),
            tuned.get("time_vs_ort") or float("nan"), threads,
        )  # fmt: skip
        queue.record_event(
            self.sessions,
            job_id,
            Measured(median_ms=tuned.get("median_ms"), time_vs_ort=tuned.get("time_vs_ort")),
        )

    def close(self) -> None:
        self._closed.set()
        if self._presence.is_alive():
            self._presence.join()
        with contextlib.suppress(Exception):
            queue.worker_gone(self.sessions, self.worker_id)
        self.engine.dispose()


def run_worker(
    settings: Settings, *, once: bool = False, shutdown: threading.Event | None = None
) -> int | None:
    """Claim and run jobs until ``shutdown`` is set (SIGTERM/SIGINT when run as a program).

    With ``once``, run at most one job and return its id (None if the queue was empty).
    """
    settings.ensure_dirs()
    worker = Worker(settings, shutdown)
    worker.start_presence()
    log.info("worker %s polling %s", worker.worker_id, settings.resolved_database_url())
    try:
        while not worker.shutdown.is_set():
            job_id = worker.run_one()
            if once:
                return job_id
            if job_id is None:
                worker.shutdown.wait(settings.poll_seconds)
        return None
    finally:
        worker.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m convtune.service.worker")
    parser.add_argument("--once", action="store_true", help="run at most one job, then exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    shutdown = threading.Event()

    def _stop(signum: int, _frame: object) -> None:
        log.info("signal %d: finishing up", signum)
        shutdown.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    started = time.monotonic()
    run_worker(Settings(), once=args.once, shutdown=shutdown)
    log.info("worker exiting after %.0f s", time.monotonic() - started)


if __name__ == "__main__":
    main()
