"""The whole job: a model in, a tuned, verified artifact out. CLI and workers both call this."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
from sqlalchemy import delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from convtune.db.models import ArtifactRow, ModelRow, ModelWorkloadRow, Timing
from convtune.db.ms_database import SQLDatabase
from convtune.tuner.algorithms import choose_winograd, memory_bandwidth
from convtune.tuner.artifact_files import MANIFEST_FORMAT, MANIFEST_NAME, file_sha256
from convtune.tuner.code_version import code_version
from convtune.tuner.errors import ConvtuneError, error_line
from convtune.tuner.events import (
    BuildCancelled,
    BuildFallback,
    BuildStarted,
    Compared,
    Confirmed,
    Done,
    Event,
    EventSink,
    Extracted,
    LayoutFallback,
    Verified,
)
from convtune.tuner.graph.extract import ModelTask, RelaxModel, extract_tasks, model_for_target
from convtune.tuner.graph.ingest import IngestedModel
from convtune.tuner.library import build_library, copy_library
from convtune.tuner.measure.fleet import Fleet, FleetUnavailable, find_fleet
from convtune.tuner.measure.runtime import Artifact, set_threads
from convtune.tuner.measure.timers import CandidateTimer, LocalTimer
from convtune.tuner.measure.verify import Verification, verify_artifact
from convtune.tuner.options import (
    ALL_ALGORITHMS,
    DEFAULT_LAYOUT,
    Algorithm,
    Layout,
    Precision,
    TuneOptions,
)
from convtune.tuner.peer_check import check_against_onnxruntime
from convtune.tuner.search.confirm import (
    ConfirmReport,
    confirm_reserve_minutes,
    confirm_tasks,
    not_confirmed,
)
from convtune.tuner.search.driver import SearchResult, run_search
from convtune.tuner.search.space_check import DroppedSpace
from convtune.tuner.target import make_target, target_threads


@dataclass
class TuneResult:
    artifact_id: int
    model_id: int
    so_path: Path
    manifest: dict[str, Any]
    search: SearchResult = field(default_factory=SearchResult)


@dataclass
class PreparedModel:
    """A model extracted for one target, its tasks registered in the database."""

    model_id: int
    target: Target
    relax_model: RelaxModel
    tasks: list[ModelTask]
    workload_ids: list[int]  # one per task, same order
    database: SQLDatabase


def prepare_model(
    ingested: IngestedModel,
    *,
    engine: Engine,
    target: str | None,
    stored_path: str | None,
    layout: Layout = DEFAULT_LAYOUT,
    algorithms: Sequence[Algorithm] = ALL_ALGORITHMS,
    precision: Precision = Precision.FP32,
) -> PreparedModel:
    tvm_target = make_target(target)
    relax_model, tasks = extract_tasks(ingested, tvm_target, layout, algorithms, precision)
    database = SQLDatabase(engine, tvm_target)
    workload_ids = [database.records.workload_id(task.mod, task.name) for task in tasks]
    with Session(engine) as session, session.begin():
        model = session.scalars(select(ModelRow).where(ModelRow.sha256 == ingested.sha256)).first()
        if model is None:
            model = ModelRow(
                sha256=ingested.sha256,
                name=ingested.name,
                size_bytes=ingested.size_bytes,
                path=stored_path or "",
                input_shapes={spec.name: list(spec.shape) for spec in ingested.inputs},
                inputs=[_spec_dict(spec) for spec in ingested.inputs],
                outputs=[_spec_dict(spec) for spec in ingested.outputs],
            )
            session.add(model)
            session.flush()
        elif stored_path and not model.path:
            model.path = stored_path
        session.execute(delete(ModelWorkloadRow).where(ModelWorkloadRow.model_id == model.id))
        for task, workload_id in zip(tasks, workload_ids, strict=True):
            session.add(
                ModelWorkloadRow(
                    model_id=model.id,
                    workload_id=workload_id,
                    kind=task.kind,
                    op=task.op or "fused",
                    description={
                        **task.description,
                        "task": task.name,
                        "shape": task.shape_text,
                        # Tasks of the same convs are alternatives (tuner/algorithms.py).
                        "convs": list(task.convs),
                    },
                    onnx_nodes=list(task.onnx_nodes),
                    occurrences=task.occurrences,
                    flops=task.flops,
                    position=task.index,
                )
            )
        model_id = model.id
    return PreparedModel(model_id, tvm_target, relax_model, tasks, workload_ids, database)


def register_model(
    ingested: IngestedModel, *, engine: Engine, stored_path: str | None, target: str | None = None
) -> int:
    """Store the model and its workloads (for ``target``, default this host); returns its id."""
    return prepare_model(ingested, engine=engine, target=target, stored_path=stored_path).model_id


def _spec_dict(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, "shape": list(spec.shape), "dtype": spec.dtype}


def layer_figures(
    prepared: PreparedModel, dropped: Sequence[DroppedSpace] = ()
) -> list[dict[str, Any]]:
    """Per task: what it implements and the record a build uses (``confirmed`` when it was
    re-measured beside its rivals, tuner/search/confirm.py; else the fastest single measurement),
    and
    the spaces its search left out (``dropped_spaces``: space, reason)."""
    rows = []
    for task, wid in zip(prepared.tasks, prepared.workload_ids, strict=True):
        best = prepared.database.records.chosen_record(wid)
        rows.append(
            {
                **task.as_dict(),
                "dropped_spaces": [
                    {"space": d.space, "reason": d.reason} for d in dropped if d.task == task.name
                ],
                "workload_id": wid,
                "record_id": best.id if best is not None else None,
                "trials": prepared.database.records.count_trials(wid),
                "best_ms": best.mean_sec * 1e3 if best is not None and best.mean_sec else None,
                "best_gflops": best.gflops if best is not None else None,
                "space": best.space if best is not None else None,
                "confirmed": best is not None and best.timing == Timing.CONFIRMED,
            }
        )
    return rows


def build_key(
    prepared: PreparedModel,
    layout: Layout,
    layers: list[dict[str, Any]],
    winograd: dict[int, int] | None = None,
) -> str:
    """What the library of ``prepared`` is a function of: code versions, target, layout, the
    record chosen for every task and the convs built as Winograd. Equal keys build equal
    libraries."""
    identity = {
        "winograd": sorted((winograd or {}).items()),
        "convtune": code_version(),
        "tvm": tvm.__version__,
        "target": str(prepared.target),
        "layout": layout.value,
        "records": sorted((row["workload_id"], row["record_id"] or 0) for row in layers),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def reusable_library(engine: Engine, prepared: PreparedModel, key: str) -> ArtifactRow | None:
    """A verified artifact of this model and target built under ``key`` whose library is still
    on disk, unchanged: a re-upload of a tuned model is then served without a rebuild."""
    with Session(engine) as session:
        rows = session.scalars(
            select(ArtifactRow)
            .where(
                ArtifactRow.model_id == prepared.model_id,
                ArtifactRow.target_id == prepared.database.records.target_id,
                ArtifactRow.verified.is_(True),
            )
            .order_by(ArtifactRow.id.desc())
        ).all()
        for row in rows:
            path = Path(row.path)
            built_so = (row.manifest or {}).get("build_key") == key and path.is_file()
            if built_so and file_sha256(path) == row.sha256:
                session.expunge(row)
                return row
    return None


def candidate_timer(fleet: Fleet | None, threads: int) -> CandidateTimer:
    """Where confirmation times the candidates: where the search measured them (one device of
    the fleet, or this host)."""
    if fleet is None:
        return LocalTimer(threads)
    from convtune.tuner.measure.timers import FleetTimer

    return FleetTimer(fleet)


def tune_model(
    ingested: IngestedModel,
    out_dir: Path,
    options: TuneOptions,
    *,
    engine: Engine,
    job_id: int | None = None,
    on_event: EventSink | None = None,
    should_stop: Callable[[], bool] | None = None,
    cancel: Callable[[], bool] | None = None,
    stored_path: str | None = None,
) -> TuneResult:
    """Extract, search (resuming from the database), build, verify; returns the stored artifact.

    Raises ``VerificationError`` if the artifact disagrees with onnxruntime: no artifact row is
    written then, and the library is removed. With ``options.fleet``, trials are measured on the
    fleet's devices and the artifact is verified on one of them too; ``FleetUnavailable`` when
    the fleet cannot measure (the job pauses; what was measured is recorded).

    ``should_stop`` ends the search (and confirmation) at its next measured batch; the artifact
    is built from what was measured. ``cancel``, asked once the search has returned (right after
    the ``build_started`` event), raises ``BuildCancelled`` instead of building.
    """

    def emit(event: Event) -> None:
        if on_event is not None:
            on_event(event)

    fleet = find_fleet(engine, options.fleet) if options.fleet else None
    prepared = prepare_model(
        ingested,
        engine=engine,
        target=options.target or (fleet.target if fleet else None),
        stored_path=stored_path,
        layout=options.layout,
        algorithms=options.algorithms,
        precision=options.precision,
    )
    threads = target_threads(prepared.target, options.threads)
    layout_plan = prepared.relax_model.layout_summary()
    emit(
        Extracted(
            model_id=prepared.model_id,
            tasks=[t.as_dict() for t in prepared.tasks],
            layout={k: v for k, v in layout_plan.items() if k != "convs"},
        )
    )
    for message in prepared.relax_model.fallbacks:
        emit(LayoutFallback(message=message))
    # The budget covers the search and the confirmation after it: the search leaves it a share.
    budget = options.budget_minutes
    deadline = time.monotonic() + budget * 60.0 if budget is not None else None
    search_minutes = budget
    if budget is not None and options.confirm:
        search_minutes = budget - confirm_reserve_minutes(prepared.tasks, budget)
    search = run_search(
        prepared.tasks,
        prepared.database,
        prepared.target,
        trials_per_task=options.trials_per_task,
        threads=threads,
        budget_minutes=search_minutes,
        seed=options.seed,
        retune=options.retune,
        job_id=job_id,
        on_event=emit,
        should_stop=should_stop,
        fleet=fleet,
    )
    if fleet is not None and search.paused:
        raise FleetUnavailable(f"fleet {fleet.name} {search.reason}")
    if not options.confirm:
        report, said = ConfirmReport(), not_confirmed("the job asked for none")
    else:
        try:
            report = confirm_tasks(
                prepared.tasks,
                prepared.workload_ids,
                prepared.database,
                prepared.target,
                threads=threads,
                timer=candidate_timer(fleet, threads),
                should_stop=should_stop,
                deadline=deadline,
            )
            said = report.summary()
        except ConvtuneError as exc:
            # Confirming only improves a choice the search already made: build without it.
            report, said = ConfirmReport(), not_confirmed(str(exc))
    emit(
        Confirmed(
            summary=said,
            tasks=[c.as_dict() for c in report.confirmations],
            out_of_time=report.out_of_time,
        )
    )
    layers = layer_figures(prepared, search.dropped)
    winograd = choose_winograd(
        prepared.tasks,
        {row["shash"]: row["best_ms"] for row in layers},
        memory_bandwidth(engine, prepared.target, threads),
    )
    relax_model = prepared.relax_model
    if winograd:
        relax_model = model_for_target(
            ingested, prepared.target, options.layout, winograd, options.precision
        )
        layout_plan = relax_model.layout_summary()
    key = build_key(prepared, options.layout, layers, winograd)
    # Nothing new measured and the same records chosen: the library built before is this one.
    reused = reusable_library(engine, prepared, key) if fleet is None else None
    emit(
        BuildStarted(
            trials_measured=search.trials_measured,
            reason=search.reason,
            winograd_convs=len(winograd),
            reused_artifact=reused.id if reused is not None else None,
        )
    )
    # The search has returned; stop here rather than build an artifact nobody wants.
    if cancel is not None and cancel():
        raise BuildCancelled()
    set_threads(threads)
    attempts = build_attempts(ingested, prepared, options.layout, relax_model, winograd, reused)
    so_path, verification, fallback = build_verified(
        attempts, ingested, out_dir, target=prepared.target, threads=threads, seed=options.seed,
        emit=emit, precision=options.precision,
    )  # fmt: skip
    if fallback is not None:
        if fallback.winograd_dropped:
            winograd, layout_plan = {}, fallback.relax_model.layout_summary()
        # Not the tuned build: a later job with the same records builds again, not reuses this.
        key = "fallback:" + build_key(prepared, options.layout, layers, winograd)
    try:
        on_device = None
        if fleet is not None:
            from convtune.tuner.measure.on_fleet import verify_on_fleet

            try:
                remote, device = verify_on_fleet(
                    so_path, ingested, fleet, threads=threads, seed=options.seed,
                    precision=options.precision,
                )  # fmt: skip
            except FleetUnavailable as exc:
                raise FleetUnavailable(
                    f"fleet {fleet.name} paused before verifying on a device: {exc.message}"
                ) from None
            on_device = {"fleet": fleet.name, "device": device, **remote.as_dict()}
    except Exception:
        so_path.unlink(missing_ok=True)
        raise
    emit(Verified(**verification.as_dict(), on_device=on_device))
    check = None
    if options.compare and fleet is None:  # a fleet's artifact runs on its devices, not here
        check = check_against_onnxruntime(
            ingested, so_path, target=prepared.target, threads=threads, layout=options.layout,
            winograd=winograd, precision=options.precision,
        )  # fmt: skip
        emit(Compared(**check.as_dict()))
    manifest = {
        "format": MANIFEST_FORMAT,
        "model": {"name": ingested.name, "sha256": ingested.sha256},
        "inputs": [_spec_dict(s) for s in ingested.inputs],
        "outputs": [_spec_dict(s) for s in ingested.outputs],
        "target": prepared.target.export(),
        "threads": threads,
        "layout": options.layout.value,
        "algorithms": [a.value for a in options.algorithms],
        "precision": options.precision.value,
        # Conv index (graph order) → Winograd tile, for everything that rebuilds the model's
        # functions (the profile); the per-conv detail is in layout_plan.
        "winograd": {str(conv): tile for conv, tile in sorted(winograd.items())},
        "layout_plan": layout_plan,
        "tvm_version": tvm.__version__,
        "host": {"machine": platform.machine(), "cpu": str(prepared.target.attrs.get("mcpu", ""))},
        "library": {"file": so_path.name, "sha256": file_sha256(so_path)},
        "verification": {**verification.as_dict(), "on_device": on_device},
        "search": {
            "trials_measured": search.trials_measured,
            "stopped_early": search.stopped_early,
            "reason": search.reason,
            "trials_per_task": options.trials_per_task,
            "budget_minutes": options.budget_minutes,
            "seed": options.seed,
            # How the kernels that were chosen were timed (db.models.Timing).
            "timing": prepared.database.records.timing.value,
        },
        "untuned_tasks": untuned_tasks(prepared.tasks, layers, winograd),
        # Spaces left out of a task's search and why (tuner/search/space_check.py), one line each.
        "dropped_spaces": [d.as_dict() for d in search.dropped],
        # How the library was built when the tuned build could not be (None: as tuned).
        "build_fallback": fallback.reason if fallback is not None else None,
        "build_key": key,
        # The artifact timed beside onnxruntime on the job's threads (tuner/peer_check.py).
        "peer_check": check.as_dict() if check is not None else None,
        "reused_from_artifact": reused.id if reused is not None else None,
        "layers": layers,
    }
    (out_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, default=_json_default))
    with Session(engine) as session, session.begin():
        artifact = ArtifactRow(
            model_id=prepared.model_id,
            target_id=prepared.database.records.target_id,
            sha256=manifest["library"]["sha256"],
            path=str(so_path.resolve()),
            manifest=json.loads(json.dumps(manifest, default=_json_default)),
            verified=True,
            max_abs_err=verification.max_abs_err,
        )
        session.add(artifact)
        session.flush()
        artifact_id = artifact.id
    emit(Done(artifact_id=artifact_id, so_path=str(so_path)))
    return TuneResult(artifact_id, prepared.model_id, so_path, manifest, search)


def untuned_tasks(
    tasks: Sequence[ModelTask], layers: Sequence[dict[str, Any]], winograd: dict[int, int]
) -> list[str]:
    """Tasks the library runs with no record (``schedules/untuned.py``'s default schedule, or
    TVM's unscheduled loops where that does not apply): an alternative kernel the
    build did not pick (a Winograd task of a conv built direct) does not run at all."""
    built_alternatives = set(winograd)
    names = []
    for task, row in zip(tasks, layers, strict=True):
        runs = not task.is_alternative or built_alternatives.intersection(task.convs)
        if runs and row["best_ms"] is None:
            names.append(row["task"])
    return names


@dataclass(frozen=True)
class BuildAttempt:
    """One way to build the library, tried in order until one builds and verifies."""

    relax_model: RelaxModel
    database: Any  # a MetaSchedule Database: the tuned records, or none at all
    #: Why this attempt is not the tuned build (None for the first, as tuned).
    reason: str | None = None
    #: This attempt computes every conv direct, though the search chose Winograd for some.
    winograd_dropped: bool = False
    #: A verified library built before under the same build key (copied, not rebuilt).
    reused: Path | None = None


def build_attempts(
    ingested: IngestedModel,
    prepared: PreparedModel,
    layout: Layout,
    relax_model: RelaxModel,
    winograd: dict[int, int],
    reused: ArtifactRow | None,
) -> list[BuildAttempt]:
    """The tuned build; then, if Winograd convs were chosen, the same records with every conv
    direct (Winograd's rounding is the likeliest to miss the tolerance); then TVM's unscheduled
    functions for every task, which builds wherever the frontend converted the model."""
    attempts = [
        BuildAttempt(relax_model, prepared.database, reused=Path(reused.path) if reused else None)
    ]
    direct = prepared.relax_model
    if winograd:
        attempts.append(
            BuildAttempt(direct, prepared.database, "every conv direct", winograd_dropped=True)
        )
    attempts.append(
        BuildAttempt(
            direct,
            ms.database.MemoryDatabase(),
            "TVM's default schedules (no tuning record applied)",
            winograd_dropped=bool(winograd),
        )
    )
    return attempts


def build_verified(
    attempts: Sequence[BuildAttempt],
    ingested: IngestedModel,
    out_dir: Path,
    *,
    target: Target,
    threads: int,
    seed: int,
    emit: EventSink,
    precision: Precision = Precision.FP32,
) -> tuple[Path, Verification, BuildAttempt | None]:
    """The first of ``attempts`` that builds and matches onnxruntime: its library, verification
    and, when it is not the first, the attempt (its ``reason`` said in a ``build_fallback``
    event). The last attempt's error is raised, as one line, when none does."""
    names = [s.name for s in ingested.inputs]
    failure: ConvtuneError | None = None
    for attempt in attempts:
        if failure is not None:
            emit(BuildFallback(message=f"building with {attempt.reason}: {failure}"))
        so_path: Path | None = None
        try:
            if attempt.reused is not None:
                so_path = copy_library(attempt.reused, out_dir)
            else:
                so_path = build_library(attempt.relax_model, attempt.database, target, out_dir)
            artifact = Artifact.load(so_path, names)
            verification = verify_artifact(
                artifact, ingested, threads=threads, seed=seed, precision=precision
            )
        except Exception as exc:
            if so_path is not None:
                so_path.unlink(missing_ok=True)
            if isinstance(exc, ConvtuneError):
                failure = exc
            else:
                failure = ConvtuneError(f"the build failed: {error_line(exc)}")
            continue
        return so_path, verification, attempt if attempt is not attempts[0] else None
    assert failure is not None
    raise failure


def _json_default(value: Any) -> Any:
    if isinstance(value, (tvm.ir.Array, tuple)):
        return list(value)
    if isinstance(value, tvm.ir.Map):
        return dict(value)
    return str(value)
