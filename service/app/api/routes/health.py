"""``GET /healthz``: 200 when the database answers, 503 when it does not."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from ...core.errors import ApiError
from ..deps import EngineDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(engine: EngineDep) -> dict[str, str]:
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        message = f"the database does not answer ({type(exc).__name__})"
        raise ApiError(503, "database_unreachable", message) from None
    return {"status": "ok", "database": engine.dialect.name}
