"""Where performance results live in the database: the target's peak, an artifact's bench/profile.

The peak belongs to a ``targets`` row (keyed by :func:`convtune.db.ms_database.target_key`, the
same key the tuning database uses, so tuning records and the roofline meet on one row). Bench and
profile results belong to the ``artifacts`` row whose library has the same sha256 as the file
that was measured: a copied or moved ``model.so`` is still recognised, a rebuilt one is not.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from tvm.target import Target

from convtune.db.models import ArtifactRow, TargetRow
from convtune.db.ms_database import target_key, to_plain
from convtune.tuner.artifact_files import file_sha256
from convtune.tuner.measure.peak import PeakResult

_STORED_METHOD = "stored in the database"


def _target_row(session: Session, target: Target) -> TargetRow | None:
    return session.scalars(select(TargetRow).where(TargetRow.key == target_key(target))).first()


def store_peak(engine: Engine, target: Target, result: PeakResult) -> int:
    """Record ``result`` on ``target``'s row (created if missing); returns the row id."""
    for _ in range(2):  # a concurrent writer may insert the same target between our read and add
        with Session(engine) as session:
            row = _target_row(session, target)
            if row is None:
                row = TargetRow(key=target_key(target), spec=to_plain(target.export()))
                session.add(row)
            row.peak_gflops_per_core = result.gflops_per_core
            row.peak_gflops_all = result.gflops_all
            row.peak_threads = result.threads
            row.peak_spread = result.spread
            if result.bandwidth_gbs is not None:
                row.bandwidth_gbs = result.bandwidth_gbs
            row.dot_peaks = dict(result.dot_peaks) or None
            row.peak_measured_at = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
            try:
                session.commit()
            except IntegrityError:
                session.rollback()
                continue
            return row.id
    raise RuntimeError("store_peak: target row vanished while storing")  # pragma: no cover


def stored_peak(engine: Engine, target: Target) -> PeakResult | None:
    """The peak last stored for ``target``, or None if it was never measured."""
    with Session(engine) as session:
        row = _target_row(session, target)
        if row is None or row.peak_gflops_all is None or row.peak_gflops_per_core is None:
            return None
        return PeakResult(
            gflops_per_core=row.peak_gflops_per_core,
            gflops_all=row.peak_gflops_all,
            threads=row.peak_threads or 1,
            method=_STORED_METHOD,
            spread=row.peak_spread,
            bandwidth_gbs=row.bandwidth_gbs,
            dot_peaks={k: float(v) for k, v in (row.dot_peaks or {}).items()},
        )


def peak_for_threads(peak: PeakResult, threads: int) -> float:
    """GFLOP/s to judge a run on ``threads`` threads against.

    The measured all-cores figure for as many threads as it was measured with, or more (extra
    threads add no FMA units); the one-core figure times ``threads`` for fewer.
    """
    if threads >= peak.threads:
        return peak.gflops_all
    return peak.gflops_per_core * threads


def dot_peaks_for_threads(peak: PeakResult, threads: int) -> dict[str, float]:
    """Precision → G operations/s of its dot product on ``threads`` threads: the all-cores
    figures, scaled down linearly for fewer threads (they are measured on all cores only)."""
    share = min(1.0, threads / peak.threads)
    return {precision: rate * share for precision, rate in peak.dot_peaks.items()}


def resolve_peak(
    engine: Engine, target: Target, threads: int, *, store: bool
) -> tuple[PeakResult, str]:
    """The peak to judge ``threads`` threads against, and where it came from.

    The stored one for ``target`` if any; else measured now — fully and stored (``store=True``,
    as a benchmark run does), or quickly and not stored (a one-off ``convtune bench``).
    """
    from convtune.tuner.measure.peak import measure_machine, measure_peak

    found = stored_peak(engine, target)
    if found is not None:
        return found, "database"
    if store:
        measured = measure_machine(threads)  # the peak and the memory bandwidth
        store_peak(engine, target, measured)
        return measured, "measured now and stored"
    quick = measure_peak(threads, repeats=2, seconds=0.05)
    return quick, "measured now (run `convtune peak` to store one)"


def find_artifact(engine: Engine, so_path: Path) -> int | None:
    """Id of the newest artifact row whose library has ``so_path``'s sha256, else None."""
    digest = file_sha256(so_path)
    with Session(engine) as session:
        query = select(ArtifactRow.id).where(ArtifactRow.sha256 == digest).order_by(ArtifactRow.id)
        ids = list(session.scalars(query))
    return ids[-1] if ids else None


def store_artifact_results(
    engine: Engine, artifact_id: int, *, bench: Any = None, profile: Any = None
) -> None:
    """Replace the artifact's ``bench`` and/or ``profile`` JSON (a None argument is left alone)."""
    with Session(engine) as session, session.begin():
        row = session.get(ArtifactRow, artifact_id)
        if row is None:
            raise LookupError(f"no artifact {artifact_id}")
        if bench is not None:
            row.bench = bench
        if profile is not None:
            row.profile = profile
