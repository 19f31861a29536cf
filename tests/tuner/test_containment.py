"""No exception from one schedule space, one task or one helper ends a job (issue 30).

The forced failures are real: each space's generator is wrapped so that its design raises on one
task (as the Winograd space's did on a YOLO SiLU epilogue), and a real search, build and
verification run around it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.space_generator import PySpaceGenerator
from tvm_ffi import structural_hash

from convtune.schedules.ops.isa import vector_lanes
from convtune.schedules.spaces.registry import SPACES
from convtune.schedules.untuned import DEFAULT_SCHEDULE, default_schedule
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.options import Precision, TuneOptions
from convtune.tuner.peer_check import REST, widest_gaps
from convtune.tuner.pipeline import tune_model
from convtune.tuner.profile import ORT_OTHER, OUTSIDE_KERNELS
from convtune.tuner.search.space_check import check_task_spaces
from convtune.tuner.target import make_target
from tests.models import _init, _vi, _weights, make_model, to_bytes

FORCED = "forced failure for the containment test"


def every_space_net(seed: int = 0) -> onnx.ModelProto:
    """One small graph with a task for every registered space: an RGB stem, a depthwise conv, 1×1
    and 3×3 stride-1 convs (blocked, Winograd-eligible), quantized (QDQ) 1×1 and 5×5 convs added
    back to the 3×3's output (int8 convs on a VNNI CPU; on an AMX one the 1×1 runs on tiles and
    the 5×5, wider than a tile row, on VNNI), an fp32 5×5 added too (bf16-dot's in a bf16 job on
    an AMX CPU, whose tiles take the other convs), an LRN, a max-pool, a 512-channel reduction,
    and a classifier ending in Softmax."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("w_stem", _weights(rng, (16, 3, 3, 3))),
        _init("w_dw", _weights(rng, (16, 1, 3, 3))),
        _init("w_pw", _weights(rng, (32, 16, 1, 1))),
        _init("w_3x3", _weights(rng, (32, 32, 3, 3))),
        _init("w_wide", _weights(rng, (512, 32, 1, 1))),
        _init("w_narrow", _weights(rng, (32, 512, 1, 1))),
        # 64 classes: whole vectors for the MatMul space, a row long enough for row-reduce
        _init("w_fc", _weights(rng, (64, 32))),
        _init("b_fc", np.zeros(64, np.float32)),
        _init("q_w", rng.integers(-127, 128, (32, 32, 1, 1)).astype(np.int8)),
        _init("q_w5", rng.integers(-127, 128, (32, 32, 5, 5)).astype(np.int8)),
        _init("q_w_scale", np.array(0.01, np.float32)),
        _init("q_w_zero", np.array(0, np.int8)),
        _init("q_x_scale", np.array(0.05, np.float32)),
        _init("q_x_zero", np.array(0, np.uint8)),
        _init("w_5x5", _weights(rng, (32, 32, 5, 5))),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w_stem"], ["s"], strides=[2, 2], pads=[1] * 4),
        helper.make_node("Relu", ["s"], ["s_r"]),
        helper.make_node("Conv", ["s_r", "w_dw"], ["d"], group=16, pads=[1] * 4),
        helper.make_node("Relu", ["d"], ["d_r"]),
        helper.make_node("Conv", ["d_r", "w_pw"], ["p"]),
        helper.make_node("Relu", ["p"], ["p_r"]),
        helper.make_node("Conv", ["p_r", "w_3x3"], ["c"], pads=[1] * 4),
        helper.make_node("Relu", ["c"], ["c_r"]),
        helper.make_node("QuantizeLinear", ["c_r", "q_x_scale", "q_x_zero"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "q_x_scale", "q_x_zero"], ["q_dq"]),
        helper.make_node("DequantizeLinear", ["q_w", "q_w_scale", "q_w_zero"], ["q_w_dq"]),
        helper.make_node("Conv", ["q_dq", "q_w_dq"], ["qc"]),
        helper.make_node("DequantizeLinear", ["q_w5", "q_w_scale", "q_w_zero"], ["q_w5_dq"]),
        helper.make_node("Conv", ["q_dq", "q_w5_dq"], ["qc5"], pads=[2] * 4),
        helper.make_node("Add", ["qc", "qc5"], ["qc_sum"]),
        helper.make_node("Add", ["c_r", "qc_sum"], ["c_qsum"]),
        # fp32 5×5: with --precision bf16 on an AMX CPU, wider than a tile row: bf16-dot's
        helper.make_node("Conv", ["c_r", "w_5x5"], ["c5"], pads=[2] * 4),
        helper.make_node("Add", ["c_qsum", "c5"], ["c_sum"]),
        helper.make_node("LRN", ["c_sum"], ["c_lrn"], size=5),
        helper.make_node("MaxPool", ["c_lrn"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["m", "w_wide"], ["wd"]),
        helper.make_node("Relu", ["wd"], ["wd_r"]),
        helper.make_node("Conv", ["wd_r", "w_narrow"], ["n"]),  # 32 input blocks: kblock
        helper.make_node("GlobalAveragePool", ["n"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w_fc", "b_fc"], ["l"], transB=1),
        helper.make_node("Softmax", ["l"], ["y"], axis=1),
    ]
    return make_model(nodes, [_vi("x", (1, 3, 32, 32))], [_vi("y", (1, 64))], inits)


@derived_object
class FailOn(PySpaceGenerator):
    """``inner``, except that generating designs for the task ``victim`` (structural hash)
    raises."""

    def __init__(self, inner, victim: int) -> None:
        # The inner generator's rules, postprocessors and mutators (every space of ours gives
        # them explicitly), so candidates are post-processed as the space's own are.
        self.sch_rules, self.postprocs = inner.sch_rules, inner.postprocs
        self.mutator_probs = inner.mutator_probs
        self.inner = inner
        self.victim = victim

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def generate_design_space(self, mod):
        if structural_hash(mod) == self.victim:
            raise RuntimeError(FORCED)
        return self.inner.generate_design_space(mod)

    def clone(self):
        return FailOn(self.inner.clone(), self.victim)


def _victims(tasks, target) -> dict[str, object]:
    """Per registered space ``target`` can run, the first task it applies to (the test model must
    cover them all)."""
    victims = {}
    for space in (s for s in SPACES if s.available(target)):
        for task in tasks:
            if space.applies_to(task.mod):
                victims[space.name] = task
                break
    return victims


def test_a_space_whose_design_raises_is_dropped_for_that_task_only() -> None:
    target = make_target(None)
    ingested = load_model(to_bytes(every_space_net()))
    _, tasks = extract_tasks(ingested, target, algorithms=TuneOptions().algorithms)
    victims = _victims(tasks, target)
    # The bf16 space's tasks exist only in a --precision bf16 job.
    _, bf16_tasks = extract_tasks(ingested, target, precision=Precision.BF16)
    victims |= {k: v for k, v in _victims(bf16_tasks, target).items() if k not in victims}
    available = {s.name for s in SPACES if s.available(target)}
    assert set(victims) == available, "the model no longer covers every space"
    space = next(s for s in SPACES if s.name == "nchwc-regblock")
    victim = victims[space.name]

    class Failing(type(space)):  # type: ignore[misc]
        def generator(self, target):
            return FailOn(super().generator(target), structural_hash(victim.mod))

    failing = Failing()
    checked = check_task_spaces(
        [(t.index, t.name, t.mod) for t in tasks], target, [failing, *SPACES[:1]]
    )
    [dropped] = checked.dropped
    assert (dropped.space, dropped.task) == (space.name, victim.name)
    assert FORCED in dropped.reason and "\n" not in dropped.reason
    assert failing not in checked.of(victim.index)
    others = [t for t in tasks if t is not victim and space.applies_to(t.mod)]
    assert all(failing in checked.of(t.index) for t in others)


@pytest.mark.slow
def test_a_forced_failure_in_every_space_still_gives_a_verified_artifact(
    tmp_path, sqlite_engine, monkeypatch
) -> None:
    """Every space raises on one task at once: each is dropped for that task with an event
    naming both, the search goes on in the others, and the artifact verifies."""
    target = make_target(None)
    model = every_space_net()
    ingested = load_model(to_bytes(model))
    _, tasks = extract_tasks(ingested, target, algorithms=TuneOptions().algorithms)
    victims = _victims(tasks, target)
    for space in (s for s in SPACES if s.name in victims):
        original = space.generator
        victim = structural_hash(victims[space.name].mod)
        monkeypatch.setattr(
            space,
            "generator",
            lambda target, original=original, victim=victim: FailOn(original(target), victim),
        )
    seen: list[tuple[str, dict]] = []
    result = tune_model(
        ingested,
        tmp_path / "out",
        TuneOptions(trials_per_task=1, seed=0, confirm=False),
        engine=sqlite_engine,
        on_event=lambda event: seen.append((event.kind, event.as_dict())),
    )
    assert result.manifest["verification"]["passed"]
    dropped = {(p["space"], p["task"]) for kind, p in seen if kind == "space_dropped"}
    for space, task in victims.items():
        assert (space, task.name) in dropped, (space, task.name, dropped)
    assert {(d["space"], d["task"]) for d in result.manifest["dropped_spaces"]} == dropped
    messages = [p["message"] for kind, p in seen if kind == "space_dropped"]
    assert all(FORCED in m and "\n" not in m for m in messages)
    # The layers say what their search left out.
    by_task = {row["task"]: row for row in result.manifest["layers"]}
    for space, task in victims.items():
        assert space in [d["space"] for d in by_task[task.name]["dropped_spaces"]]
    # The job's last step timed it against onnxruntime.
    check = result.manifest["peer_check"]
    assert check["ms"] > 0 and check["ort_ms"] > 0 and "onnxruntime" in check["message"]
    assert_no_slower_than_unscheduled(sqlite_engine, result.manifest["layers"])


def assert_no_slower_than_unscheduled(engine, layers: list[dict]) -> None:
    """The Softmax (and every other non-anchor task searched) had its floor measured once (its
    unscheduled function, and the default rule's schedule where the rule applies), and the
    record the build uses is never slower than either; no anchor uses them."""
    from convtune.db.ms_database import SQLDatabase

    database_target = make_target(None)
    database = SQLDatabase(engine, database_target)
    others = [row for row in layers if row["kind"] == "other"]
    assert any("softmax" in row["task"] for row in others), layers
    for row in others:
        if row["best_ms"] is None and row["dropped_spaces"]:
            continue  # every space dropped: it was never searched, and runs unscheduled
        wid = row["workload_id"]
        mod = database.records.workload(wid).mod
        floors = 1 + (default_schedule(mod["main"], vector_lanes(database_target)) is not None)
        assert database.records.count_trials(wid, DEFAULT_SCHEDULE) == floors, row["task"]
        floor = min(
            r.mean_sec
            for r in database.records.fastest_records(wid, 1000)
            if r.space == DEFAULT_SCHEDULE and r.mean_sec is not None
        )
        assert row["best_ms"] is not None and row["best_ms"] <= floor * 1e3 + 1e-12, row
    anchors = [row for row in layers if row["kind"] != "other"]
    assert all(row["space"] != DEFAULT_SCHEDULE for row in anchors)


def _row(layer: str, ms: float | None, ort_ms: float | None) -> dict:
    return {"layer": layer, "op": "", "shape": "", "ms": ms, "ort_ms": ort_ms}


def test_the_gap_names_the_layers_slower_than_onnxruntime_widest_first() -> None:
    rows = [
        _row("conv_a", 1.0, 0.4),  # 0.6 slower
        _row("conv_b", 0.2, 0.5),  # faster: never named
        _row("gemm", 0.9, 0.8),  # 0.1 slower
        _row("softmax", 3.0, None),  # no onnxruntime node of its own
        _row(OUTSIDE_KERNELS, 0.5, None),
        _row(ORT_OTHER, None, 0.3),
    ]
    gaps = widest_gaps(rows, limit=2)
    assert [g.layer for g in gaps] == [REST, "conv_a"]
    assert gaps[0].ms == pytest.approx(3.5) and gaps[0].ort_ms == pytest.approx(0.3)
    assert [g.layer for g in widest_gaps(rows, limit=5)] == [REST, "conv_a", "gemm"]
