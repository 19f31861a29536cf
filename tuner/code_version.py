"""Which code produced a stored result: the release and a digest of the source that computes.

Built libraries, the untuned baselines, exhaustion marks and saved cost models are reused when
their key matches. Keyed on the release alone, a checkout changed between runs (every
development install, a patched deployment) served a library built by other code: a re-upload of
a tuned model returned the old ``model.so`` after a schedule fix, and a task marked exhausted by
the old spaces was never searched by the new ones. The digest covers ``tuner`` and
``schedules``, the code that extracts, schedules and builds; a change to the service or the
database layer leaves every key as it was.
"""

from __future__ import annotations

import functools
import hashlib
from importlib.metadata import version
from pathlib import Path

#: The packages whose source decides what is built and measured.
COMPUTING_PACKAGES = ("tuner", "schedules")
#: Hex digits of the source digest in a version string (a ``String(64)`` column holds it).
DIGEST_CHARS = 12


def source_digest(root: Path, packages: tuple[str, ...] = COMPUTING_PACKAGES) -> str:
    """SHA-256 over every ``.py`` file under ``root/<package>``, each named by its relative path,
    in sorted order: equal trees give equal digests wherever they are installed."""
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def code_version() -> str:
    """``<release>+<digest>``: what every cached result is keyed on (read once per process)."""
    root = Path(__file__).resolve().parents[1]
    return f"{version('convtune')}+{source_digest(root)[:DIGEST_CHARS]}"
