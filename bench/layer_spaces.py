"""Per conv workload of a tuned model: the best kernel each schedule space and algorithm found.

Read from the database alone (tuning records, the model's workloads, the artifact's stored
profile), so it needs no tuning of its own: ``bench/run.py`` puts it in every report, and it can
be drawn again for any tuned model:

    .venv/bin/python -m bench.layer_spaces --db sqlite:////tmp/r50.sqlite --model resnet50

A row is one direct conv task (its convs share a workload); its columns are the fastest
measured trial of each direct space, and of each Winograd tile whose task covers the same convs
(``ModelTask.convs``), in ms per call, as the tuner measured them (kernel alone, timed under
``db.models.CURRENT_TIMING``: weights flushed from the caches before each run). ``confirmed`` is
the fastest figure of the conv's kernels re-measured side by side before the build
(``tuner/search/confirm.py``), where a confirmation counts. ``built`` is the chosen kernel inside
the
model (``convtune profile``), ``onnxruntime`` its Conv node by its own profiler, both per call.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from convtune.db.models import ArtifactRow, ModelRow, ModelWorkloadRow, TuningRecordRow
from convtune.db.session import make_engine
from convtune.tuner.tables import fmt, short_nodes


def winograd_column(tile: int) -> str:
    return f"Winograd F({tile}×{tile})"


def _best_by_space(session: Session, workload_ids: list[int]) -> dict[int, dict[str, float]]:
    record = TuningRecordRow
    rows = session.execute(
        select(record.workload_id, record.space, func.min(record.mean_sec))
        .where(record.workload_id.in_(workload_ids), record.mean_sec.is_not(None), record.timed())
        .group_by(record.workload_id, record.space)
    ).all()
    best: dict[int, dict[str, float]] = {}
    for wid, space, sec in rows:
        best.setdefault(wid, {})[str(space)] = float(sec) * 1e3
    return best


def _confirmed_ms(session: Session, workload_ids: list[int]) -> dict[int, float]:
    """Per workload, the confirmed figure the build takes (ms, ``tuner/search/confirm.py``), where a
    confirmation counts."""
    found = {}
    for wid in workload_ids:
        row = session.scalars(TuningRecordRow.confirmed_query(wid)).first()
        if row is not None and row.mean_sec is not None:
            found[wid] = row.mean_sec * 1e3
    return found


def _per_call(profile: list[dict[str, Any]], nodes: set[str], key: str) -> float | None:
    """``key`` (ms, summed over a profile row's ONNX nodes) per call, from the row that runs
    ``nodes``."""
    for row in profile:
        names = set(row.get("onnx_nodes") or [])
        if names & nodes and row.get(key) is not None:
            return float(row[key]) / len(names)
    return None


def conv_space_rows(engine: Engine, model_id: int) -> list[dict[str, Any]]:
    """One row per direct conv task of the model, biggest total time first."""
    with Session(engine) as session:
        tasks = session.scalars(
            select(ModelWorkloadRow).where(
                ModelWorkloadRow.model_id == model_id,
                ModelWorkloadRow.kind == "conv",
                ModelWorkloadRow.workload_id.is_not(None),
            )
        ).all()
        artifact = session.scalars(
            select(ArtifactRow)
            .where(ArtifactRow.model_id == model_id)
            .order_by(ArtifactRow.id.desc())
        ).first()
        profile = list(artifact.profile or []) if artifact is not None else []
        best = _best_by_space(session, [t.workload_id for t in tasks if t.workload_id])
        confirmed = _confirmed_ms(session, [t.workload_id for t in tasks if t.workload_id])
    alternatives = [t for t in tasks if t.description.get("winograd_tile")]
    rows = []
    for task in tasks:
        if task.description.get("winograd_tile"):
            continue
        convs = set(task.description.get("convs") or [])
        kernels = dict(best.get(task.workload_id or -1, {}))
        rivals = [task]
        for alt in alternatives:
            if convs & set(alt.description.get("convs") or []):
                rivals.append(alt)
                found = best.get(alt.workload_id or -1, {})
                if found:
                    column = winograd_column(int(alt.description["winograd_tile"]))
                    kernels[column] = min(found.values())
        side_by_side = [confirmed[r.workload_id] for r in rivals if r.workload_id in confirmed]
        nodes = set(task.onnx_nodes)
        rows.append(
            {
                "workload": task.description.get("shape", task.op),
                "nodes": list(task.onnx_nodes),
                "occurrences": task.occurrences,
                "kernels_ms": kernels,
                "confirmed_ms": min(side_by_side, default=None),
                "built_ms": _per_call(profile, nodes, "ms"),
                "ort_ms": _per_call(profile, nodes, "ort_ms"),
            }
        )
    rows.sort(key=lambda r: -(r["occurrences"] * min(r["kernels_ms"].values(), default=0.0)))
    return rows


def conv_space_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The table: columns are every space and tile any row measured."""
    columns = sorted({name for row in rows for name in row["kernels_ms"]})
    lines = [
        "| conv | ONNX nodes | × | "
        + " | ".join(columns)
        + " | best / onnxruntime | confirmed | built | onnxruntime |",
        "|---|---|---:|" + "---:|" * len(columns) + "---:|---:|---:|---:|",
    ]
    for row in rows:
        kernels = row["kernels_ms"]
        best = min(kernels.values(), default=None)
        ort = row["ort_ms"]
        cells = [
            f"**{kernels[c]:.3f}**" if c in kernels and kernels[c] == best else
            fmt(kernels.get(c), ".3f")
            for c in columns
        ]  # fmt: skip
        ratio = best / ort if best is not None and ort else None
        lines.append(
            f"| {row['workload']} | {short_nodes(row['nodes'], 2)} | {row['occurrences']} | "
            + " | ".join(cells)
            + f" | {fmt(ratio, '.2f')} | {fmt(row['confirmed_ms'], '.3f')}"
            + f" | {fmt(row['built_ms'], '.3f')} | {fmt(ort, '.3f')} |"
        )  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="database URL of the tuning run")
    parser.add_argument("--model", required=True, help="model name as stored")
    args = parser.parse_args(argv)
    engine = make_engine(args.db)
    with Session(engine) as session:
        model_id = session.scalar(
            select(ModelRow.id).where(ModelRow.name == args.model).order_by(ModelRow.id.desc())
        )
    if model_id is None:
        print(f"no model named {args.model!r} in {args.db}", file=sys.stderr)
        return 2
    print("\n".join(conv_space_markdown(conv_space_rows(engine, model_id))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
