"""``/api/artifacts``: metadata and downloads of built libraries and their manifests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, Response

from convtune.db.models import ArtifactRow
from convtune.tuner.artifact_files import MANIFEST_NAME

from ... import crud
from ...core.errors import ApiError
from ...schemas import ArtifactOut, error_responses
from ..deps import DownloaderDep, ReaderDep, RowId, SessionDep

router = APIRouter(prefix="/artifacts", tags=["artifacts"])

_ERRORS = error_responses(401, 404, 410, 422)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def artifact_out(artifact: ArtifactRow) -> ArtifactOut:
    base = f"/api/artifacts/{artifact.id}/download"
    return ArtifactOut(
        id=artifact.id,
        model_id=artifact.model_id,
        target_id=artifact.target_id,
        sha256=artifact.sha256,
        size_bytes=_size(Path(artifact.path)),
        verified=artifact.verified,
        max_abs_err=artifact.max_abs_err,
        manifest=artifact.manifest,
        created_at=artifact.created_at,
        download_url=base,
        manifest_url=f"{base}?file=manifest",
    )


@router.get("/{artifact_id}", response_model=ArtifactOut, responses=_ERRORS)
def get_artifact(artifact_id: RowId, session: SessionDep, _: ReaderDep) -> ArtifactOut:
    return artifact_out(crud.get_artifact(session, artifact_id))


@router.get(
    "/{artifact_id}/download",
    responses={
        200: {"content": {"application/octet-stream": {}, "application/json": {}}},
        **_ERRORS,
    },
    response_class=Response,
)
def download_artifact(
    artifact_id: RowId,
    session: SessionDep,
    _: DownloaderDep,
    file: Annotated[Literal["library", "manifest"], Query()] = "library",
) -> Response:
    """The ``.so`` (default) or ``?file=manifest``; ``X-Content-SHA256`` is the body's sha256."""
    artifact = crud.get_artifact(session, artifact_id)
    library = Path(artifact.path)
    stem = f"artifact-{artifact.id}"
    if file == "manifest":
        on_disk = library.parent / MANIFEST_NAME
        body = on_disk.read_bytes() if on_disk.is_file() else json.dumps(artifact.manifest).encode()
        return Response(
            body,
            media_type="application/json",
            headers={
                "X-Content-SHA256": hashlib.sha256(body).hexdigest(),
                "Content-Disposition": f'attachment; filename="{stem}.manifest.json"',
            },
        )
    if not library.is_file():
        raise ApiError(410, "artifact_missing", f"the library of artifact {artifact.id} is gone")
    return FileResponse(
        library,
        media_type="application/octet-stream",
        filename=f"{stem}.so",
        headers={"X-Content-SHA256": artifact.sha256},
    )
