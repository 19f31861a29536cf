"""The MatMul space: which tasks it takes (MatMul and Gemm with ``B[k, j]``, batched or not,
columns padded and sliced or whole), and that every design computes what the unscheduled TIR
does, through MetaSchedule's postprocessors as the search builds it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import s_tir
from tvm.tirx import FloorDiv

from convtune.schedules.ops.isa import accumulator_limit, vector_lanes
from convtune.schedules.ops.matmul import vector_width
from convtune.schedules.spaces.matmul_regblock import (
    SPACE_NAME,
    MatmulSpace,
    design_spaces,
    matmul_block,
    panel_counts,
    split_counts,
)
from convtune.schedules.spaces.registry import applicable, space_of
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.graph.matmul_padding import padded_columns
from convtune.tuner.target import make_target
from tests import models
from tests.schedules.kernels import assert_close, postprocessed_designs, random_args, run


def _heads(seed: int = 0) -> onnx.ModelProto:
    """A recogniser's heads: a class MatMul to 300 columns (padded to whole vectors and sliced
    back), a MatMul to 120 (whole 8-lane vectors, not 16-lane ones), a Gemm to 48 with ReLU,
    an attention product of two activations (batched, no constant), and a conv beside them."""
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    inits = [
        numpy_helper.from_array(weight(120, 300), "W"),
        numpy_helper.from_array(weight(300), "bias"),
        numpy_helper.from_array(weight(120, 120), "V"),
        numpy_helper.from_array(weight(48, 120), "G"),
        numpy_helper.from_array(weight(48), "gbias"),
        numpy_helper.from_array(weight(8, 3, 3, 3), "K"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["logits"], name="classes"),
        helper.make_node("Add", ["logits", "bias"], ["scores"]),
        helper.make_node("MatMul", ["x", "V"], ["values"], name="values"),
        helper.make_node("Transpose", ["values"], ["keys"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["values", "keys"], ["attention"], name="attention"),
        helper.make_node("Reshape", ["x", "flat_shape"], ["flat"]),
        helper.make_node("Gemm", ["flat", "G", "gbias"], ["g"], name="gemm", transB=1),
        helper.make_node("Relu", ["g"], ["gemm_out"]),
        helper.make_node("Conv", ["image", "K"], ["features"], name="conv", pads=[1, 1, 1, 1]),
    ]
    inits.append(numpy_helper.from_array(np.array([40, 120], np.int64), "flat_shape"))
    return models.make_model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40, 120]),
            helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 8, 8]),
        ],
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 40, 300]),
            helper.make_tensor_value_info("attention", TensorProto.FLOAT, [1, 40, 40]),
            helper.make_tensor_value_info("gemm_out", TensorProto.FLOAT, [40, 48]),
            helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 8, 8, 8]),
        ],
        inits,
        name="heads",
        opset=17,
    )


@pytest.fixture(scope="module")
def tasks() -> list:
    _, found = extract_tasks(load_model(models.to_bytes(_heads())), make_target(None), "nchwc")
    return found


def test_the_space_takes_matmuls_and_nothing_else(tasks: list) -> None:
    taken = {task.name: task for task in tasks if MatmulSpace().applies_to(task.mod)}
    # The class MatMul (300 columns padded to whole vectors, sliced back), the 120-column one
    # (padded too where a vector has 16 lanes, whole with AVX2's 8), the Gemm with its ReLU, and
    # the attention product of two activations.
    assert len(taken) == 4, sorted(taken)
    padded = 2 if 120 % vector_lanes(make_target(None)) else 1
    assert sum("strided_slice" in name for name in taken) == padded, sorted(taken)
    assert sum("relu" in name for name in taken) == 1, sorted(taken)
    assert not any(task.kind == "conv" for task in taken.values())
    assert any(task.kind == "conv" for task in tasks)


def test_every_design_equals_the_unscheduled_kernel(tasks: list) -> None:
    target = make_target(None)
    lanes, limit = vector_lanes(target), accumulator_limit(target)
    designs = 0
    for task in [t for t in tasks if MatmulSpace().applies_to(t.mod)]:
        assert SPACE_NAME in [space.name for space in applicable(task.mod)]
        args = random_args(task.mod)
        reference = run(task.mod, args)
        for seed in (1, 2):
            for sch in design_spaces(s_tir.Schedule(task.mod, seed=seed), lanes, limit):
                assert space_of(str(sch.trace.as_json())) == SPACE_NAME
                assert_close(run(sch.mod, args), reference)
                designs += 1
    assert designs >= 12


def test_the_generated_designs_pass_metaschedules_postprocessors(tasks: list) -> None:
    target = make_target(None)
    for task in [t for t in tasks if MatmulSpace().applies_to(t.mod)]:
        args = random_args(task.mod)
        reference = run(task.mod, args)
        for design in postprocessed_designs(MatmulSpace(), task.mod, target):
            assert_close(run(design.mod, args), reference)


def _weight_read(task) -> tuple[tuple[int, ...], bool]:
    """The shape of what the task's matmul block reads as its right operand, and whether it
    reads it packed (``B[j // w, k, j % w]``)."""
    sch = s_tir.Schedule(task.mod)
    found = matmul_block(sch)
    assert found is not None
    read = sch.get(found[0]).reads[1]
    packed = isinstance(read.region[0].min, FloorDiv)
    return tuple(int(d) for d in read.source.shape), packed


def test_products_of_many_rows_read_their_constant_weight_packed_panel_major(
    tasks: list,
) -> None:
    """40 rows: the class MatMul, the 120-column one and the Gemm read ``B[N/w, K, w]`` (one
    vector of columns contiguous over K); the attention product of two activations has no
    constant to pack."""
    lanes = vector_lanes(make_target(None))
    reads = [_weight_read(t) for t in tasks if MatmulSpace().applies_to(t.mod)]
    packed = [shape for shape, is_packed in reads if is_packed]
    assert len(packed) == 3, reads
    for panels, depth, width in packed:
        assert depth == 120 and width == vector_width(panels * width, lanes)
    columns = sorted(panels * width for panels, _, width in packed)
    assert columns == sorted(padded_columns(n, lanes) for n in (48, 120, 300))
    (attention,) = [shape for shape, is_packed in reads if not is_packed]
    assert attention == (1, 120, 40)


def _classifier(columns: int, seed: int = 0, depth: int = 256) -> onnx.ModelProto:
    """A batch-1 fully connected layer (Gemm with ReLU) from ``depth`` to ``columns``."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((columns, depth)) * 0.1).astype(np.float32)
    bias = (rng.standard_normal(columns) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "W", "b"], ["g"], transB=1),
        helper.make_node("Relu", ["g"], ["y"]),
    ]
    return models.make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, depth])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, columns])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")],
        name="classifier",
        opset=17,
    )


@pytest.mark.parametrize("columns", [256, 200])
def test_a_batch_one_product_gets_column_panels_that_compute_the_same(columns: int) -> None:
    # 256 columns: 16 whole vectors, every panel count divides them; 200: padded to 13
    # vectors and sliced back, no panel count divides them (the last panel is shorter).
    target = make_target(None)
    lanes, limit = vector_lanes(target), accumulator_limit(target)
    model = _classifier(columns)
    _, found = extract_tasks(load_model(models.to_bytes(model)), target, "nchwc")
    (task,) = [t for t in found if MatmulSpace().applies_to(t.mod)]
    assert not _weight_read(task)[1]  # one row: whole rows of B, not packed
    args = random_args(task.mod)
    reference = run(task.mod, args)
    counts = panel_counts(1, -(-columns // lanes) * lanes, lanes)
    assert counts, "a batch-1 product is offered column panels"
    panel_designs = 0
    for seed in (1, 2, 3):
        for sch in design_spaces(s_tir.Schedule(task.mod, seed=seed), lanes, limit):
            assert_close(run(sch.mod, args), reference)
            # The register blocks sample their rows; the panels only their count.
            panel_designs += "sample_perfect_tile" not in str(sch.trace)
    assert panel_designs == 3
    for design in postprocessed_designs(MatmulSpace(), task.mod, target):
        assert_close(run(design.mod, args), reference)


def test_column_panels_are_for_few_rows_and_bounded_accumulators() -> None:
    assert panel_counts(1, 4096, 16) == [2, 4, 8, 16]
    assert panel_counts(5, 4096, 16) == []
    # 64 KB of accumulators at most: 4 rows of 18,400 columns need 4 panels or more.
    assert panel_counts(4, 18400, 16) == [8, 16]
    assert panel_counts(1, 32, 16) == [2]


@pytest.mark.parametrize("columns", [256, 200])
def test_a_deep_batch_one_product_gets_a_split_reduction_that_computes_the_same(
    columns: int,
) -> None:
    # 1024 rows of B: two parts of 512; 200 columns padded to 208 and sliced back after the
    # sum of the parts.
    target = make_target(None)
    lanes, limit = vector_lanes(target), accumulator_limit(target)
    model = _classifier(columns, depth=1024)
    _, found = extract_tasks(load_model(models.to_bytes(model)), target, "nchwc")
    (task,) = [t for t in found if MatmulSpace().applies_to(t.mod)]
    args = random_args(task.mod)
    reference = run(task.mod, args)
    assert split_counts(1, -(-columns // lanes) * lanes, 1024) == [2]
    split_designs = 0
    for seed in (1, 2):
        for sch in design_spaces(s_tir.Schedule(task.mod, seed=seed), lanes, limit):
            assert_close(run(sch.mod, args), reference)
            split_designs += "rfactor" in str(sch.trace)
    assert split_designs == 2
    for design in postprocessed_designs(MatmulSpace(), task.mod, target):
        assert_close(run(design.mod, args), reference)


def test_the_reduction_is_split_for_few_rows_deep_reductions_and_bounded_partials() -> None:
    assert split_counts(1, 4096, 18432) == [2, 4, 8]  # ZFNet's first fully connected layer
    assert split_counts(1, 4096, 4096) == [2, 4, 8]  # each part 512 rows of B at least
    assert split_counts(1, 1008, 1024) == [2]
    assert split_counts(1, 1008, 544) == []  # ShuffleNet's classifier: too shallow to split
    assert split_counts(5, 4096, 18432) == []  # more rows than a batch-1 product
    assert split_counts(1, 32768, 18432) == []  # partial rows over 64 KB
