"""The per-conv space table reads a tuning run back from a real database."""

from __future__ import annotations

from sqlalchemy.orm import Session

from bench.layer_spaces import conv_space_markdown, conv_space_rows, winograd_column
from convtune.db.models import (
    ArtifactRow,
    ModelRow,
    ModelWorkloadRow,
    TargetRow,
    Timing,
    TuningRecordRow,
    WorkloadRow,
)


def _store_run(engine) -> int:
    with Session(engine) as session, session.begin():
        target = TargetRow(key="llvm", spec={"kind": "llvm"})
        model = ModelRow(
            sha256="0" * 64, name="m", size_bytes=1, path="", input_shapes={}, inputs=[], outputs=[]
        )
        session.add_all([target, model])
        session.flush()
        workloads = {}
        for name in ("direct", "wino2", "wino4", "stride2"):
            workloads[name] = WorkloadRow(
                target_id=target.id, shash=name, task_name=name, mod_json="{}"
            )
        session.add_all(workloads.values())
        session.flush()
        tasks = [
            ("direct", {"shape": "3x3 s1", "convs": [0, 1]}, ["c0", "r0", "c1"], 2),
            ("wino2", {"shape": "3x3 s1", "convs": [0, 1], "winograd_tile": 2}, ["c0", "c1"], 2),
            ("wino4", {"shape": "3x3 s1", "convs": [0, 1], "winograd_tile": 4}, ["c0", "c1"], 2),
            ("stride2", {"shape": "3x3 s2", "convs": [2]}, ["c2"], 1),
        ]
        for position, (name, description, nodes, occurrences) in enumerate(tasks):
            session.add(
                ModelWorkloadRow(
                    model_id=model.id,
                    workload_id=workloads[name].id,
                    kind="conv",
                    op="Conv",
                    description=description,
                    onnx_nodes=nodes,
                    occurrences=occurrences,
                    flops=1.0,
                    position=position,
                )
            )
        records = [
            ("direct", "nchwc-regblock", 2e-3),
            ("direct", "nchwc-regblock", 1.5e-3),
            ("direct", "nchwc-regblock2d", 1.8e-3),
            ("direct", "generic", None),  # a failed trial is no figure
            ("wino2", "winograd-nchwc", 1.2e-3),
            ("wino4", "winograd-nchwc", 0.9e-3),
            ("wino4", "winograd-nchwc", 1.1e-3),
            ("stride2", "nchwc-regblock", 0.5e-3),
        ]
        for name, space, sec in records:
            session.add(
                TuningRecordRow(workload_id=workloads[name].id, trace={}, mean_sec=sec, space=space)
            )
        # Re-measured side by side (tuner/search/confirm.py): not a trial, not in the space columns.
        for name, sec in (("direct", 1.4e-3), ("wino4", 1.0e-3)):
            session.add(
                TuningRecordRow(
                    workload_id=workloads[name].id, trace={}, mean_sec=sec, space="s",
                    timing=Timing.CONFIRMED.value,
                )
            )  # fmt: skip
        session.add(
            ArtifactRow(
                model_id=model.id,
                target_id=target.id,
                sha256="1" * 64,
                path="",
                manifest={},
                profile=[
                    {"layer": "w4", "onnx_nodes": ["c0", "c1"], "ms": 2.0, "ort_ms": 4.0},
                    {"layer": "s2", "onnx_nodes": ["c2"], "ms": 0.6, "ort_ms": None},
                ],
            )
        )
        return model.id


def test_rows_join_alternatives_to_their_direct_conv(sqlite_engine):
    rows = conv_space_rows(sqlite_engine, _store_run(sqlite_engine))

    assert [row["workload"] for row in rows] == ["3x3 s1", "3x3 s2"]
    first, second = rows
    assert first["kernels_ms"] == {
        "nchwc-regblock": 1.5,
        "nchwc-regblock2d": 1.8,
        winograd_column(2): 1.2,
        winograd_column(4): 0.9,
    }
    assert first["built_ms"] == 1.0 and first["ort_ms"] == 2.0  # per call: 2 nodes in the row
    assert first["confirmed_ms"] == 1.0  # the faster of the conv's confirmed alternatives
    assert second["kernels_ms"] == {"nchwc-regblock": 0.5}
    assert second["ort_ms"] is None and second["confirmed_ms"] is None

    table = conv_space_markdown(rows)
    assert "**0.900**" in table[2] and "0.45" in table[2]  # best marked; 0.9 / 2.0
    assert table[2].endswith("| 0.45 | 1.000 | 1.000 | 2.000 |")
    assert table[3].endswith("| – | – | 0.600 | – |")
