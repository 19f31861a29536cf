"""The generic space: its knobs reach MetaSchedule's rules, and the vector width follows the ISA."""

from __future__ import annotations

import re

from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from convtune.schedules.generic import GenericSpace, SpaceConfig
from convtune.schedules.isa import vector_lanes
from convtune.tuner.extract import extract_tasks
from convtune.tuner.ingest import load_model
from convtune.tuner.options import Layout
from tests.models import conv_net, to_bytes


def test_vector_lanes_follow_the_isa() -> None:
    assert vector_lanes(Target({"kind": "llvm", "mcpu": "znver4"})) == 16
    assert vector_lanes(Target({"kind": "llvm", "mcpu": "haswell"})) == 8


def _design_traces(config: SpaceConfig, target: Target) -> list[str]:
    ingested = load_model(to_bytes(conv_net(in_channels=3, out_channels=8, size=8)))
    _, tasks = extract_tasks(ingested, target, Layout.NCHW)
    conv = next(task for task in tasks if task.kind == "conv")
    generator = GenericSpace(config).generator(target)
    ms.TuneContext(mod=conv.mod, target=target, space_generator=generator, task_name="conv")
    return [str(sch.trace) for sch in generator.generate_design_space(conv.mod)]


def test_config_knobs_reach_the_generated_schedules() -> None:
    target = Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    config = SpaceConfig(unroll_steps=(0, 16), max_innermost_factor=8, vector_registers=2)
    traces = _design_traces(config, target)
    assert traces
    for trace in traces:
        assert "candidates=[0, 16]" in trace
        assert "max_innermost_factor=8" in trace
        assert "max_innermost_factor=64" not in trace
        vectorize = [int(v) for v in re.findall(r'"meta_schedule.vectorize", ann_val=(\d+)', trace)]
        assert vectorize and all(v == 16 * 2 for v in vectorize)
