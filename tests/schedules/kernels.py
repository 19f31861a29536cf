"""Helpers for the kernel tests: one task of a small model, its arguments, and running it.

A scheduled kernel is checked against the unscheduled TIR of the same task: the same fp32
products, summed in another order, so they agree within verify.py's tolerance.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import numpy as np
import tvm
from tvm import te
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from convtune.schedules.lowering.pipeline import use_convtune_lowering
from convtune.schedules.ops import annotations
from convtune.schedules.ops.nchwc import conv_extents
from convtune.schedules.spaces.base import ScheduleSpace
from convtune.tuner.graph.extract import ModelTask, extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.measure.verify import ATOL, RTOL
from convtune.tuner.target import make_target
from tests.models import conv_net, to_bytes

#: An AVX-512 target to plan layouts for on any host: its 16-lane blocks and 8-lane half blocks
#: meet in one conv (NCHW16c in, NCHW8c out) only there; the kernels still run on the host.
AVX512 = "llvm -mcpu=znver4 -num-cores=2"


def conv_task(
    config: dict, applies: Callable[[IRModule], bool], target: str | None = None
) -> ModelTask:
    """The one task of ``conv_net(**config)`` in the blocked layout for which ``applies``, the
    layout planned for ``target`` (this host by default)."""
    ingested = load_model(to_bytes(conv_net(**config)))
    _, tasks = extract_tasks(ingested, make_target(target), "nchwc")
    found = [task for task in tasks if applies(task.mod)]
    assert len(found) == 1 and found[0].onnx_nodes == ["conv0"]
    return found[0]


def gemm_schedule(rows: int, blocks: int, depth: int, lanes: int) -> Schedule:
    """An unscheduled small GEMM, the shape of a register block's work: ``C[i, o, :] =
    Σ_k A[i, k] W[o, k, :]`` (``rows`` × ``depth`` by ``blocks`` × ``depth`` × ``lanes``)."""
    a = te.placeholder((rows, depth), name="A")
    w = te.placeholder((blocks, depth, lanes), name="W")
    k = te.reduce_axis((0, depth), "k")
    c = te.compute(
        (rows, blocks, lanes), lambda i, o, b: te.sum(a[i, k] * w[o, k, b], axis=k), name="C"
    )
    return Schedule(IRModule({"main": te.create_prim_func([a, w, c])}))


def random_args(mod: IRModule, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal([int(d) for d in info.shape]).astype("float32")
        for info in ArgInfo.from_prim_func(mod["main"])
    ]


def run(mod: IRModule, args: list[np.ndarray]) -> np.ndarray:
    """The last argument (TIR's destination) after running ``mod`` on copies of ``args``,
    lowered as the builder lowers it."""
    use_convtune_lowering()
    lib = tvm.compile(mod, target=make_target(None))
    device = tvm.cpu()
    tensors = [tvm.runtime.tensor(a.copy(), device) for a in args]
    lib(*tensors)
    return tensors[-1].numpy()


def assembly(mod: IRModule) -> str:
    """``mod``'s x86 assembly, lowered as the builder lowers it."""
    use_convtune_lowering()
    return tvm.compile(mod, target=make_target(None)).mod.inspect_source("asm")


def assert_close(got: np.ndarray, reference: np.ndarray) -> None:
    """verify.py's tolerance policy: the absolute part scales with the output's magnitude."""
    atol = ATOL * max(1.0, float(np.abs(reference).max()))
    np.testing.assert_allclose(got, reference, rtol=RTOL, atol=atol)


def postprocessed_designs(space: ScheduleSpace, mod: IRModule, target: Target) -> list[Schedule]:
    """``space``'s designs for the task ``mod`` through its postprocessors, as the search builds
    them; a postprocessor that refuses one fails the caller."""
    generator = space.generator(target)
    ms.TuneContext(mod=mod, target=target, space_generator=generator, task_name="task")
    designs = list(generator.generate_design_space(mod))
    for design in designs:
        assert all(postproc.apply(design) for postproc in generator.postprocs)
    return designs


def tile_limits(space: ScheduleSpace, task: IRModule, target: Target) -> set[int]:
    """``max_innermost_factor`` of every tile the space's design spaces sample on ``target``."""
    generator = space.generator(target)
    ms.TuneContext(mod=task, target=target, space_generator=generator, task_name="task")
    traces = [str(sch.trace) for sch in generator.generate_design_space(task)]
    return {int(v) for trace in traces for v in re.findall(r"max_innermost_factor=(\d+)", trace)}


def distance_decision(sch: Schedule) -> tuple[object, list[int]]:
    """The trace's prefetch-distance decision and its candidates: the categorical sample that
    a prefetch annotation takes its value from."""
    insts = list(sch.trace.insts)
    values = [
        inst.inputs[1]
        for inst in insts
        if inst.kind.name == "Annotate"
        and str(inst.attrs[0]).startswith(annotations.SOURCE_ANNOTATION)
    ]
    for inst in insts:
        if inst.kind.name == "SampleCategorical" and any(
            inst.outputs[0].same_as(v) for v in values
        ):
            return inst, [int(c) for c in inst.attrs[0]]
    raise AssertionError("no prefetch decision in the trace")


def with_each_distance(design: Schedule, mod: IRModule) -> Iterator[tuple[int, IRModule]]:
    """``design``'s trace replayed on ``mod`` with its prefetch distance forced to each of its
    candidates, in order: (distance, scheduled module)."""
    decision, distances = distance_decision(design)
    for index, distance in enumerate(distances):
        trace = design.trace.with_decision(decision, index, remove_postproc=True)
        sch = Schedule(mod)
        trace.apply_to_schedule(sch, remove_postproc=True)
        yield distance, sch.mod


def column_tile(sch: Schedule) -> int | None:
    """The column tile a design sampled where its columns are peeled (``split_columns``; None
    where the tile is perfect): the candidate its categorical decision (an index) picked, the
    prefetch distances' (0-2) aside."""
    tiles = [
        [int(c) for c in inst.attrs[0]][int(index)]
        for inst, index in sch.trace.decisions.items()
        if inst.kind.name == "SampleCategorical" and 0 not in [int(c) for c in inst.attrs[0]]
    ]
    assert len(tiles) <= 1, tiles
    return tiles[0] if tiles else None


def check_peeled_columns(
    mod: IRModule, designs: Callable[[Schedule], list[Schedule]], seeds: range = range(1, 12)
) -> dict[int, set[int]]:
    """Run each design of ``designs(Schedule(mod, seed))`` over ``seeds`` whose column tile
    leaves a partial last tile, once per (design index, width), against the unscheduled
    kernel; the widths each design index with peeled columns drew."""
    args = random_args(mod)
    reference = run(mod, args)
    extents = conv_extents(mod)
    assert extents is not None
    drawn: dict[int, set[int]] = {}
    for seed in seeds:
        for index, sch in enumerate(designs(Schedule(mod, seed=seed))):
            width = column_tile(sch)
            if width is None or width in drawn.setdefault(index, set()):
                continue
            drawn[index].add(width)
            if extents["ow"] % width:
                assert_close(run(sch.mod, args), reference)
    return {index: widths for index, widths in drawn.items() if widths}
