"""What the API hands an extraction child: plain data, pickled across the process boundary.

Its own module so that the child (``extract_child``) and the parent (``extraction``) both import
it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from .limits import ModelLimits


@dataclass(frozen=True)
class ExtractRequest:
    """What the child needs: all plain data (it is pickled to the child)."""

    upload_path: str
    stored_path: str
    sha256: str
    name: str | None
    input_shapes: dict[str, tuple[int, ...]]
    owner: str
    database_url: str
    busy_timeout: float
    busy_retries: int
    limits: ModelLimits
