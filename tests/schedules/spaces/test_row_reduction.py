"""The row-reduction space: which tasks it takes (Softmax and LayerNorm over the last axis,
not MatMul, not short rows, not a channel Softmax), and that every design computes what the
unscheduled TIR does, row tails included (no row here is a whole number of vectors)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import IRModule, s_tir, te

from convtune.schedules.spaces.registry import applicable, space_of
from convtune.schedules.spaces.row_reduction import (
    SPACE_NAME,
    RowReductionSpace,
    row_sketches,
)
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.target import make_target
from tests import models
from tests.schedules.kernels import (
    AVX512,
    assert_close,
    postprocessed_designs,
    random_args,
    run,
)

ROWS, WIDTH, CLASSES, SHORT = 6, 200, 300, 40


def _recogniser_tail(seed: int = 0) -> onnx.ModelProto:
    """An OCR recogniser's tail: LayerNorm over the features (ReduceMean, Sub, Pow,
    ReduceMean, Add, Sqrt, Div, Mul, Add), a MatMul to the classes and a Softmax over them;
    a short Softmax over 40 columns beside it, and a Softmax over the channels of an image."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((WIDTH, CLASSES)) * 0.1).astype(np.float32)
    short = (rng.standard_normal((WIDTH, SHORT)) * 0.1).astype(np.float32)
    inits = [
        numpy_helper.from_array(weight, "W"),
        numpy_helper.from_array(short, "S"),
        numpy_helper.from_array(np.array([2.0], np.float32), "two"),
        numpy_helper.from_array(np.array([1e-5], np.float32), "eps"),
        numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1], keepdims=1),
        helper.make_node("Sub", ["x", "mean"], ["centred"]),
        helper.make_node("Pow", ["centred", "two"], ["squares"]),
        helper.make_node("ReduceMean", ["squares"], ["variance"], axes=[-1], keepdims=1),
        helper.make_node("Add", ["variance", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["deviation"]),
        helper.make_node("Div", ["centred", "deviation"], ["normal"]),
        helper.make_node("Mul", ["normal", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], ["normed"]),
        helper.make_node("MatMul", ["normed", "W"], ["logits"], name="classes"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["normed", "S"], ["short_logits"], name="short"),
        helper.make_node("Softmax", ["short_logits"], ["short_probs"], axis=-1),
        helper.make_node("Softmax", ["image"], ["image_probs"], axis=1),
    ]
    return models.make_model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ROWS, WIDTH]),
            helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 96, 5, 7]),
        ],
        [
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, ROWS, CLASSES]),
            helper.make_tensor_value_info("short_probs", TensorProto.FLOAT, [1, ROWS, SHORT]),
            helper.make_tensor_value_info("image_probs", TensorProto.FLOAT, [1, 96, 5, 7]),
        ],
        inits,
        name="recogniser_tail",
        opset=17,
    )


@pytest.fixture(scope="module")
def tasks() -> list:
    ingested = load_model(models.to_bytes(_recogniser_tail()))
    _, found = extract_tasks(ingested, make_target(AVX512), "nchwc")
    return found


def test_the_space_takes_row_reductions_and_nothing_else(tasks: list) -> None:
    taken = [task for task in tasks if RowReductionSpace().applies_to(task.mod)]
    names = [task.name for task in taken]
    # The long Softmax and LayerNorm's two means (each fused with its elementwise neighbours).
    assert sum("softmax" in name for name in names) == 1, names
    assert sum("mean" in name for name in names) == 2, names
    assert not any(task.kind != "other" for task in taken), names
    # Left to the generic space: the MatMuls, the 40-column Softmax, the channel Softmax.
    others = [task for task in tasks if task not in taken]
    assert sum("softmax" in task.name for task in others) == 2, [t.name for t in others]
    assert sum(task.kind != "other" for task in others) == 2, [t.name for t in others]


def test_every_design_equals_the_unscheduled_kernel(tasks: list) -> None:
    taken = [task for task in tasks if RowReductionSpace().applies_to(task.mod)]
    assert taken
    for task in taken:
        assert SPACE_NAME in [space.name for space in applicable(task.mod)]
        args = random_args(task.mod)
        reference = run(task.mod, args)
        decisions = set()
        for seed in range(1, 7):
            designs = row_sketches(s_tir.Schedule(task.mod, seed=seed), lanes=16)
            # Softmax's exp, read by its sum and by the output, also gets a design of its own.
            assert len(designs) == (2 if "softmax" in task.name else 1), task.name
            for index, sch in enumerate(designs):
                decisions.add((index, *(int(v) for v in sch.trace.decisions.values())))
                assert space_of(str(sch.trace.as_json())) == SPACE_NAME
                assert_close(run(sch.mod, args), reference)
            if len(designs) == 2:
                inline, materialized = (_block_names(sch) for sch in designs)
                assert not any("exp" in n and "sum" not in n for n in inline), inline
                assert any("exp" in n and "sum" not in n for n in materialized), materialized
        assert len(decisions) > 1, task.name  # the seeds tried more than one design


def _block_names(sch: s_tir.Schedule) -> list[str]:
    return [str(sch.get(b).name_hint) for b in sch.get_child_blocks(sch.get_sblock("root"))]


def test_a_sum_whose_row_is_no_whole_number_of_vectors() -> None:
    """An 80-element row summed in 32- or 64-lane accumulators: the peeled tail adds its 16
    (or 16 and 48) elements once, and nothing past the row (an earlier schedule, placing the
    reduction under a shared row loop, read past it and returned NaN)."""
    x = te.placeholder((1, 3, 80), name="x")
    k = te.reduce_axis((0, 80), "k")
    y = te.compute((1, 3), lambda a, b: te.sum(x[a, b, k], axis=k), name="y")
    mod = IRModule({"main": te.create_prim_func([x, y])})
    args = random_args(mod)
    expected = args[0].sum(axis=-1)
    widths = set()
    for seed in range(1, 12):
        (sch,) = row_sketches(s_tir.Schedule(mod, seed=seed), lanes=16)
        widths.add(int(next(iter(sch.trace.decisions.values()))))
        np.testing.assert_allclose(run(sch.mod, args), expected, rtol=1e-5, atol=1e-5)
    assert widths == {0, 1, 2}


def test_the_generated_designs_pass_metaschedules_postprocessors(tasks: list) -> None:
    """What the search builds: the space generator's designs through LLVM's postprocessors
    (the reduction decomposed, the vectorize/parallel annotations rewritten), still equal to
    the unscheduled kernel."""
    target = make_target(None)
    for task in [t for t in tasks if RowReductionSpace().applies_to(t.mod)]:
        designs = postprocessed_designs(RowReductionSpace(), task.mod, target)
        assert len(designs) == (2 if "softmax" in task.name else 1), task.name
        args = random_args(task.mod)
        reference = run(task.mod, args)
        for design in designs:
            assert_close(run(design.mod, args), reference)
