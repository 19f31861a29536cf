"""MatMul/Gemm weights padded to whole vectors (tuner/graph/matmul_padding.py): which are, that the
task keeps its ONNX node, that its tiles can now be vectors, and that the model still computes
what onnxruntime computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tvm_ffi
from tvm.s_tir import Schedule

from convtune.schedules.ops.isa import accumulator_limit
from convtune.schedules.spaces.matmul_regblock import COLUMN_VECTORS, design_spaces
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.graph.matmul_padding import padded_columns
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import compare
from convtune.tuner.target import make_target
from tests import models

AVX512 = "llvm -mcpu=znver4 -num-cores=2"


def test_columns_round_up_to_whole_vectors_above_one_vector() -> None:
    # Wide: to a multiple of 12 vectors when that adds at most 1/64 of the columns.
    assert padded_columns(18385, 16) == 18432 == 16 * 12 * 96
    assert padded_columns(18385, 8) == 18432
    assert padded_columns(18710, 8) == 18720 == 8 * 12 * 195  # 2339 whole vectors are prime
    # 200 columns of 8 lanes are 25 vectors; 12 or 6 of them would add 16 or 8 columns (> 1/64).
    assert padded_columns(197, 8) == 200
    assert padded_columns(37, 16) == 48
    assert padded_columns(64, 16) == 64  # already whole
    assert padded_columns(4, 16) == 4  # a narrow head stays narrow


def _anchor_columns(task) -> int:
    """The extent of the matmul block's last spatial axis in the task's TIR."""
    func = task.mod["main"]
    extents = []

    def visit(node) -> None:
        if hasattr(node, "iter_vars") and getattr(node, "init", None) is not None:
            spatial = [iv for iv in node.iter_vars if int(iv.iter_type) == 0]
            extents.append(int(spatial[-1].dom.extent))

    tvm_ffi.structural_walk(func.body, (object, visit))
    return extents[0]


@pytest.mark.parametrize(
    ("name", "model", "columns"),
    [
        ("matmul", models.matmul_model(m=5, k=24, n=37), 37),
        ("gemm", models.gemm_model(m=3, k=20, n=45, trans_b=True), 45),
    ],
)
def test_padded_product_keeps_its_node_and_matches_onnxruntime(
    name: str, model, columns: int, tmp_path: Path
) -> None:
    ingested = load_model(models.to_bytes(model))
    _, tasks = extract_tasks(ingested, make_target(AVX512))
    (task,) = [t for t in tasks if t.kind in ("matmul", "gemm")]
    assert task.onnx_nodes == [f"{name}0"]
    assert task.description["N"] == columns  # the node as the user wrote it
    assert _anchor_columns(task) == padded_columns(columns, 16)

    feeds = models.random_inputs(model, seed=4)
    ours = Artifact.load(compile_untuned(ingested, make_target(), tmp_path), ["x"]).run(feeds)
    reference = [np.asarray(r) for r in models.run_onnxruntime(model, feeds)]
    assert ours[0].shape == reference[0].shape
    result = compare(ours, reference, ["y"], seed=4)
    assert result.passed, result


def test_whole_vector_columns_are_left_alone() -> None:
    ingested = load_model(models.to_bytes(models.matmul_model(m=5, k=24, n=32)))
    _, tasks = extract_tasks(ingested, make_target(AVX512))
    (task,) = [t for t in tasks if t.kind == "matmul"]
    assert _anchor_columns(task) == 32


def test_a_wide_class_head_gets_every_register_block_on_avx2() -> None:
    """RapidOCR v6's 18,710 classes were 2,339 vectors of 8 lanes (a prime): the register block
    could hold one column vector only. Padded to 2,340 vectors, it has a design per count."""
    model = models.matmul_model(m=40, k=120, n=18710)
    ingested = load_model(models.to_bytes(model))
    target = make_target("llvm -mcpu=znver3 -num-cores=2")
    _, tasks = extract_tasks(ingested, target)
    (task,) = [t for t in tasks if t.kind == "matmul"]
    assert _anchor_columns(task) == 18720
    designs = design_spaces(Schedule(task.mod), lanes=8, max_block=accumulator_limit(target))
    assert len(designs) == len(COLUMN_VECTORS)  # 40 rows: no panel or split designs
