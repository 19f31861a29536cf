"""Untuned compilation: the model built with no schedules at all (the "untuned TVM" baseline).

It goes through the same ``model_for_target`` → ``build_library`` path as a tuned artifact, with an
empty MetaSchedule database, so every kernel is TVM's unscheduled loop nest. Conformance tests use
it to check the compile path itself; ``convtune bench`` uses it as the baseline tuning must beat.
"""

from __future__ import annotations

from pathlib import Path

from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from .build import build_library
from .extract import model_for_target
from .ingest import IngestedModel


def compile_untuned(
    ingested: IngestedModel, target: Target, out_dir: Path, layout: str = "nchwc"
) -> Path:
    """Build ``ingested`` for ``target`` without any tuning record; returns ``out_dir/model.so``.

    Raises ``UnsupportedOpError`` when the TVM frontend cannot convert the model.
    """
    relax_model = model_for_target(ingested, target, layout)
    return build_library(relax_model, ms.database.MemoryDatabase(), target, Path(out_dir))
