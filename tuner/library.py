"""The model as a shared library: built with the best recorded schedules, or with none at all.

A tuned build gives every kernel without a record the default schedule of
``schedules/untuned.py`` (parallel rows, vector lanes) rather than TVM's unscheduled loop nest.
The untuned build (no schedules: every kernel is TVM's unscheduled loop nest) goes through the same
``model_for_target`` → ``build_library`` path as a tuned artifact, with an empty MetaSchedule
database and no default schedule. Conformance tests use it to check the compile path itself;
``convtune bench`` uses it as the baseline tuning must beat.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from convtune.schedules.lowering.pipeline import use_convtune_lowering
from convtune.schedules.untuned import untuned_default_pass
from convtune.tuner.artifact_files import LIBRARY_NAME
from convtune.tuner.graph.extract import RelaxModel, fusion_passes, model_for_target
from convtune.tuner.graph.ingest import IngestedModel
from convtune.tuner.options import DEFAULT_LAYOUT, Layout, Precision


def build_library(
    relax_model: RelaxModel,
    database: ms.Database,
    target: Target,
    out_dir: Path,
    *,
    default_schedules: bool = True,
) -> Path:
    """Compile with every task's best schedule from ``database``; returns the ``.so`` path.

    A task without a successful record gets the default schedule of ``schedules/untuned.py``
    where it applies (``default_schedules``), else TVM's unscheduled loops: callers list such
    tasks (``untuned``) in the manifest instead of hiding them.
    """
    use_convtune_lowering()  # as its candidates were lowered when measured
    with target, database, tvm.transform.PassContext(opt_level=3):
        pipeline = _pipeline(target, default_schedules)  # ApplyDatabase reads the target here
        executable = relax.build(relax_model.mod, target=target, relax_pipeline=pipeline)
    return _publish(out_dir, lambda partial: executable.export_library(str(partial)))


def _pipeline(target: Target, default_schedules: bool) -> tvm.transform.Pass:
    """TVM's ``compile_relax`` pipeline with our fusion passes (``extract.fusion_passes``, which
    task extraction runs too): fuse, apply the database's schedules (and the default one to the
    functions it has none for), lower and finalize."""
    defaults = [untuned_default_pass(target)] if default_schedules else []
    passes = [
        *relax.pipeline.library_dispatch_passes(target),
        *fusion_passes(),
        relax.transform.MetaScheduleApplyDatabase(),
        *defaults,
        # compile_relax's CPU lowering: TVM registers no dataflow_lower_passes for cpu_generic.
        relax.transform.RewriteDataflowReshape(),
        relax.transform.ToNonDataflow(),
        relax.transform.RemovePurityChecking(),
        relax.transform.CallTIRRewrite(),
        relax.transform.StaticPlanBlockMemory(),
        relax.transform.LowerAllocTensor(),
        relax.transform.KillAfterLastUse(),
        relax.transform.LowerRuntimeBuiltin(),
        relax.transform.ComputePrimValue(),
        relax.transform.VMShapeLower(),
        relax.transform.AttachGlobalSymbol(),
    ]
    return tvm.transform.Sequential(passes)


def copy_library(built: Path, out_dir: Path) -> Path:
    """``built`` (a library built before with the same key) as ``out_dir/model.so``."""
    return _publish(out_dir, lambda partial: shutil.copyfile(built, partial))


def _publish(out_dir: Path, write: Callable[[Path], object]) -> Path:
    """``out_dir/model.so``, written by ``write`` under a temporary name and renamed: a
    half-written library must never look like an artifact."""
    out_dir.mkdir(parents=True, exist_ok=True)
    so_path = out_dir / LIBRARY_NAME
    partial = out_dir / f".{LIBRARY_NAME}.partial.so"
    write(partial)
    partial.replace(so_path)
    return so_path


def compile_untuned(
    ingested: IngestedModel,
    target: Target,
    out_dir: Path,
    layout: Layout = DEFAULT_LAYOUT,
    precision: Precision = Precision.FP32,
) -> Path:
    """Build ``ingested`` for ``target`` without any tuning record; returns ``out_dir/model.so``.

    Raises ``UnsupportedOpError`` when the TVM frontend cannot convert the model.
    """
    relax_model = model_for_target(ingested, target, layout, precision=precision)
    return build_library(
        relax_model, ms.database.MemoryDatabase(), target, Path(out_dir), default_schedules=False
    )
