"""The blocked pool space: which tasks it takes, and that every sketch computes what TIR does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from tvm import s_tir

from convtune.schedules.spaces.blocked_pool import SPACE_NAME, BlockedPoolSpace, pool_sketches
from convtune.schedules.spaces.registry import applicable, space_of
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.target import make_target
from tests import models
from tests.schedules.kernels import AVX512, assert_close, random_args, run


def _pooling_net(batch: int, size: int, channels: int, seed: int = 0) -> onnx.ModelProto:
    """Conv → MaxPool 3×3 s2 p1 → AveragePool 2×2 s1 → Softmax over channels, and a
    GlobalAveragePool branch: three pools over blocked tensors and a reduction that is not one."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((channels, 3, 3, 3)) * 0.3).astype(np.float32)
    nodes = [
        helper.make_node(
            "Conv", ["x", "W"], ["c"], name="conv0", kernel_shape=[3, 3], pads=[1] * 4
        ),
        helper.make_node(
            "MaxPool",
            ["c"],
            ["m"],
            name="maxpool",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1] * 4,
        ),
        helper.make_node("AveragePool", ["m"], ["a"], name="avgpool", kernel_shape=[2, 2]),
        helper.make_node("Softmax", ["a"], ["s"], name="softmax", axis=1),
        helper.make_node("GlobalAveragePool", ["c"], ["g"], name="gap"),
    ]
    pooled = (size - 1) // 2 + 1 - 1
    return models.make_model(
        nodes,
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 3, size, size])],
        [
            helper.make_tensor_value_info(
                "s", onnx.TensorProto.FLOAT, [batch, channels, pooled, pooled]
            ),
            helper.make_tensor_value_info("g", onnx.TensorProto.FLOAT, [batch, channels, 1, 1]),
        ],
        [onnx.numpy_helper.from_array(weight, "W")],
        name="pooling",
    )


CONFIGS = {
    "16c-odd-batch2": dict(batch=2, size=15, channels=16),
    "32c": dict(batch=1, size=20, channels=32),
    "8c-half-block": dict(batch=1, size=13, channels=24),
}


def _pool_tasks(config: dict) -> list:
    ingested = load_model(models.to_bytes(_pooling_net(**config)))
    _, tasks = extract_tasks(ingested, make_target(AVX512), "nchwc")
    return tasks


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_space_takes_blocked_pools_and_nothing_else(name: str) -> None:
    tasks = _pool_tasks(CONFIGS[name])
    taken = {task.name for task in tasks if BlockedPoolSpace().applies_to(task.mod)}
    # The max pool, the average pool and the global mean; not the conv, not the softmax.
    assert len(taken) == 3, [t.name for t in tasks]
    assert not any(task.kind == "conv" for task in tasks if task.name in taken)
    assert not any("softmax" in task.name for task in tasks if task.name in taken)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_sketch_equals_the_unscheduled_kernel(name: str) -> None:
    tasks = [t for t in _pool_tasks(CONFIGS[name]) if BlockedPoolSpace().applies_to(t.mod)]
    padded = 0
    for task in tasks:
        assert SPACE_NAME in [s.name for s in applicable(task.mod)]
        args = random_args(task.mod)
        reference = run(task.mod, args)
        for seed in (1, 2):
            sketches = pool_sketches(s_tir.Schedule(task.mod, seed=seed))
            padded += len(sketches) == 2  # the max pool: padding as a pass, and inlined
            for sch in sketches:
                assert space_of(str(sch.trace)) == SPACE_NAME
                assert_close(run(sch.mod, args), reference)
    assert padded == 2


def test_nchw_reductions_are_left_to_the_generic_space() -> None:
    ingested = load_model(models.to_bytes(_pooling_net(batch=1, size=12, channels=16)))
    _, tasks = extract_tasks(ingested, make_target(AVX512), "nchw")
    assert not any(BlockedPoolSpace().applies_to(task.mod) for task in tasks)
