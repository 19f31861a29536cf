"""A job says where it fell back and how it compares with onnxruntime (the API's JobOut)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from convtune.db.models import JobEventRow, JobRow, ModelRow
from convtune.service.app.crud import job_out


def test_a_job_lists_its_fallback_lines_and_its_check_against_onnxruntime(db_engine) -> None:
    with Session(db_engine) as session, session.begin():
        model = ModelRow(
            sha256="1" * 64, name="m", size_bytes=1, path="/m", input_shapes={}, inputs=[],
            outputs=[],
        )  # fmt: skip
        session.add(model)
        session.flush()
        job = JobRow(model_id=model.id, options={})
        session.add(job)
        session.flush()
        events = [
            ("space_dropped", {"message": "space winograd-nchwc dropped for task t: boom"}),
            ("trial_batch", {"message": "not a note"}),
            ("compared", {"ratio": 1.5, "message": "first"}),
            ("build_fallback", {"message": "building with every conv direct: wrong result"}),
            ("compared", {"ratio": 0.9, "message": "last"}),
        ]
        for kind, payload in events:
            session.add(JobEventRow(job_id=job.id, kind=kind, payload=payload))
        job_id = job.id
    with Session(db_engine) as session:
        out = job_out(session, session.get(JobRow, job_id))
    assert out.notes == [
        "space winograd-nchwc dropped for task t: boom",
        "building with every conv direct: wrong result",
    ]
    assert out.peer_check == {"ratio": 0.9, "message": "last"}
