"""The LRN space: which tasks it takes (the NCHW and the blocked LRN kernel, nothing else), and
that its designs compute what the unscheduled kernel does, through MetaSchedule's
postprocessors as the search builds them."""

from __future__ import annotations

import pytest
from tvm import s_tir

from convtune.schedules.ops.isa import vector_lanes
from convtune.schedules.spaces.lrn import SPACE_NAME, LrnSpace, design_spaces, lrn_kind
from convtune.schedules.spaces.registry import applicable, space_of
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.target import make_target
from tests import models
from tests.schedules.kernels import assert_close, postprocessed_designs, random_args, run


@pytest.mark.parametrize(("channels", "kind"), [(32, "blocked"), (20, "nchw")])
def test_the_space_takes_the_lrn_kernel_and_its_designs_compute_the_same(
    channels: int, kind: str
) -> None:
    # 54×54 maps as AlexNet's: no whole number of vectors per row or map.
    target = make_target(None)
    model = models.lrn_model(channels, 5, spatial=54)
    _, tasks = extract_tasks(load_model(models.to_bytes(model)), target, "nchwc")
    taken = [task for task in tasks if LrnSpace().applies_to(task.mod)]
    assert len(taken) == 1 and len(tasks) > 1, [t.name for t in tasks]
    (task,) = taken
    assert lrn_kind(task.mod) == kind
    assert SPACE_NAME in [space.name for space in applicable(task.mod)]
    args = random_args(task.mod)
    reference = run(task.mod, args)
    for sch in design_spaces(s_tir.Schedule(task.mod, seed=1), vector_lanes(target)):
        assert space_of(str(sch.trace.as_json())) == SPACE_NAME
        assert_close(run(sch.mod, args), reference)
    designs = postprocessed_designs(LrnSpace(), task.mod, target)
    assert designs
    for design in designs:
        assert_close(run(design.mod, args), reference)
