"""The model as a shared library: built with the best recorded schedules, or with none at all.

The untuned build (no schedules: every kernel is TVM's unscheduled loop nest) goes through the same
``model_for_target`` → ``build_library`` path as a tuned artifact, with an empty MetaSchedule
database. Conformance tests use it to check the compile path itself; ``convtune bench`` uses it as
the baseline tuning must beat.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from .artifact_files import LIBRARY_NAME
from .extract import RelaxModel, model_for_target
from .ingest import IngestedModel
from .options import DEFAULT_LAYOUT, Layout


def build_library(
    relax_model: RelaxModel, database: ms.Database, target: Target, out_dir: Path
) -> Path:
    """Compile with every task's best schedule from ``database``; returns the ``.so`` path.

    A task without a successful record compiles to TVM's unscheduled loops: callers list such tasks
    (``untuned``) in the manifest instead of hiding them.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    executable = ms.relax_integration.compile_relax(database, relax_model.mod, target, params=None)
    so_path = out_dir / LIBRARY_NAME
    # Written under a temporary name: a half-written library must never look like an artifact.
    partial = out_dir / f".{LIBRARY_NAME}.partial.so"
    executable.export_library(str(partial))
    partial.replace(so_path)
    return so_path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def compile_untuned(
    ingested: IngestedModel, target: Target, out_dir: Path, layout: Layout = DEFAULT_LAYOUT
) -> Path:
    """Build ``ingested`` for ``target`` without any tuning record; returns ``out_dir/model.so``.

    Raises ``UnsupportedOpError`` when the TVM frontend cannot convert the model.
    """
    relax_model = model_for_target(ingested, target, layout)
    return build_library(relax_model, ms.database.MemoryDatabase(), target, Path(out_dir))
