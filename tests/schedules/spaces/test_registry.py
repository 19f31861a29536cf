"""The schedule-space registry: lookup, which spaces apply to which task, and a new space plugged
into a real search through the extension point alone."""

from __future__ import annotations

from typing import ClassVar

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import ScheduleFn, SpaceGenerator
from tvm.target import Target

from convtune.db.migrate import upgrade
from convtune.db.models import TuningRecordRow
from convtune.db.ms_database import SQLDatabase
from convtune.db.session import make_engine
from convtune.schedules.spaces.base import DEFAULT_SPACE, ScheduleSpace, mark_space
from convtune.schedules.spaces.generic import GenericSpace
from convtune.schedules.spaces.nchwc_kblock import SWEEP_LIMITS, ReductionBlockedConvSpace
from convtune.schedules.spaces.nchwc_regblock import RegisterBlockedConvSpace
from convtune.schedules.spaces.nchwc_regblock2d import RegisterBlock2DConvSpace
from convtune.schedules.spaces.registry import SPACES, applicable, get_space, space_of, union_space
from convtune.schedules.spaces.stem_nchw_nchwc import StemConvSpace
from convtune.schedules.spaces.winograd_nchwc import WinogradConvSpace
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.options import Algorithm, Layout
from convtune.tuner.search.driver import run_search
from convtune.tuner.target import make_target
from tests.models import conv_net, to_bytes
from tests.schedules.kernels import AVX512, conv_task, tile_limits


@pytest.fixture(scope="module")
def blocked_model_tasks():
    ingested = load_model(to_bytes(conv_net(in_channels=16, out_channels=32, size=8)))
    _, tasks = extract_tasks(ingested, make_target(None), Layout.NCHWC, tuple(Algorithm))
    return tasks


def test_names_are_unique_and_looked_up_by_name_or_instance() -> None:
    names = [space.name for space in SPACES]
    assert len(names) == len(set(names))
    assert DEFAULT_SPACE in names
    for space in SPACES:
        assert get_space(space.name) is space
        assert get_space(space) is space
    with pytest.raises(KeyError, match="unknown schedule space 'nope'"):
        get_space("nope")


def test_applicable_spaces_follow_the_task(blocked_model_tasks) -> None:
    kinds = {}
    for task in blocked_model_tasks:
        kind = f"{task.kind}-winograd" if task.winograd_tile else task.kind
        kinds[kind] = [space.name for space in applicable(task.mod)]
    assert kinds["conv-winograd"] == [WinogradConvSpace.name]
    assert kinds["conv"] == [
        GenericSpace.name,
        RegisterBlockedConvSpace.name,
        RegisterBlock2DConvSpace.name,
    ]
    others = [names for kind, names in kinds.items() if not kind.startswith("conv")]
    assert all(names == [GenericSpace.name] for names in others)


@pytest.mark.parametrize("winograd", [False, True])
def test_space_of_reads_the_mark_off_real_traces(blocked_model_tasks, winograd) -> None:
    conv = next(
        task
        for task in blocked_model_tasks
        if task.kind == "conv" and bool(task.winograd_tile) == winograd
    )
    target = make_target(None)
    for space in applicable(conv.mod):
        generator = space.generator(target)
        generator._initialize_with_tune_context(_context(conv.mod, target, generator))
        for sch in generator.generate_design_space(conv.mod):
            assert space_of(str(sch.trace.as_json())) == space.name
            assert space_of(str(sch.trace)) == space.name
    assert union_space(conv.mod, target) is not None


def _context(mod: IRModule, target: Target, generator: SpaceGenerator):
    from tvm.s_tir import meta_schedule as ms

    return ms.TuneContext(mod=mod, target=target, space_generator=generator, task_name="t")


class UnrollOnlySpace(ScheduleSpace):
    """A space written for this test: the generic schedule of any task, marked as its own."""

    name: ClassVar[str] = "test-unroll-only"
    seed_trials: ClassVar[int] = 2

    def applies_to(self, mod: IRModule) -> bool:
        return True

    def generator(self, target: Target) -> SpaceGenerator:
        def schedule(sch: Schedule) -> None:
            root = sch.get_sblock("root")
            mark_space(sch, sch.get_child_blocks(root)[0], self.name)

        return ScheduleFn(schedule, sch_rules=[], postprocs="llvm", mutator_probs="llvm")


def test_a_new_space_is_searched_and_recorded_through_the_extension_point(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    engine = make_engine(url)
    ingested = load_model(to_bytes(conv_net(in_channels=3, out_channels=8, size=8)))
    target = make_target(None)
    _, tasks = extract_tasks(ingested, target, Layout.NCHW)
    conv = [task for task in tasks if task.kind == "conv"]
    database = SQLDatabase(engine, target)
    result = run_search(
        conv, database, target, trials_per_task=3, threads=1,
        spaces=(GenericSpace(), UnrollOnlySpace()),
    )  # fmt: skip
    assert result.trials_measured == 3
    with Session(engine) as session:
        spaces = list(session.scalars(select(TuningRecordRow.space).order_by(TuningRecordRow.id)))
    # Its seed pass first (the unscheduled kernel is its only schedule), then the union.
    assert spaces[0] == UnrollOnlySpace.name
    assert spaces.count(UnrollOnlySpace.name) == 1
    assert DEFAULT_SPACE in spaces[1:]
    engine.dispose()


@pytest.mark.parametrize(
    ("space", "config", "fewest", "others"),
    [
        (
            RegisterBlockedConvSpace(),
            dict(in_channels=16, out_channels=16, size=56, kernel=1),
            1,
            (),
        ),
        # its smallest block spans 2 output-channel chunks or 2 rows
        (
            RegisterBlock2DConvSpace(),
            dict(in_channels=16, out_channels=32, size=56, kernel=1),
            2,
            (),
        ),
        # its chunk and row-sweep tiles have limits of their own
        (
            ReductionBlockedConvSpace(),
            dict(in_channels=512, out_channels=16, size=56, kernel=1),
            1,
            SWEEP_LIMITS,
        ),
        (StemConvSpace(), dict(in_channels=3, out_channels=16, size=56, kernel=7, pads=3), 1, ()),
    ],
    ids=lambda v: v.name if isinstance(v, ScheduleSpace) else "",
)
def test_register_blocks_fit_the_targets_registers(
    space: ScheduleSpace, config: dict, fewest: int, others: tuple[int, ...]
) -> None:
    """The same task (planned for AVX-512, so its loops are alike) gets blocks of at most 28
    accumulators for an AVX-512 target and 14 for an AVX2 one (isa.ACCUMULATORS): the longest
    column block is that over the fewest chunks × rows a design space has."""
    task = conv_task({"pads": 0, **config}, space.applies_to, AVX512).mod
    for mcpu, limit in (("znver4", 28), ("znver3", 14)):
        target = Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
        limits = tile_limits(space, task, target) - set(others)
        assert limits and max(limits) == limit // fewest, (mcpu, limits)
