"""The default schedule of untuned kernels (schedules/untuned.py): the same results as the
unscheduled loops, with parallel rows and vector lanes where the rule says so."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import tvm_ffi
from tvm import s_tir, te, tirx, topi
from tvm.ir import IRModule
from tvm.script import tirx as T

from convtune.schedules.ops.isa import vector_lanes
from convtune.schedules.spaces.lrn import SPACE_NAME as LRN_SPACE
from convtune.schedules.spaces.lrn import lrn_kind
from convtune.schedules.spaces.registry import space_of
from convtune.schedules.untuned import DEFAULT_SCHEDULE, PARALLEL_MIN_WORK, default_schedule
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.target import make_target
from tests import models
from tests.schedules.kernels import assert_close, random_args, run

LANES = 16


def _bn_relu() -> list[te.Tensor]:
    """A pre-activation BatchNorm and ReLU of a blocked tensor: four elementwise producers."""
    x = te.placeholder((1, 6, 14, 14, LANES), name="x")
    mean = te.placeholder((1, 6, 1, 1, LANES), name="mean")
    scale = te.placeholder((1, 6, 1, 1, LANES), name="scale")
    shifted = te.compute(x.shape, lambda n, c, h, w, b: x[n, c, h, w, b] - mean[n, c, 0, 0, b])
    scaled = te.compute(x.shape, lambda *i: shifted(*i) * scale[i[0], i[1], 0, 0, i[4]])
    return [x, mean, scale, te.compute(x.shape, lambda *i: te.max(scaled(*i), 0.0))]


def _concat() -> list[te.Tensor]:
    a = te.placeholder((1, 4, 28, 28, LANES), name="a")
    b = te.placeholder((1, 2, 28, 28, LANES), name="b")
    return [a, b, topi.concatenate([a, b], axis=1)]


def _max_pool() -> list[te.Tensor]:
    """3x3 stride-2 max pool of a blocked tensor, with its padding as a producer block."""
    x = te.placeholder((1, 2, 28, 28, LANES), name="x")
    return [x, topi.nn.pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max", layout="NCHW16c")]


def _avg_pool() -> list[te.Tensor]:
    """2x2 average pool: a sum, then its elementwise division."""
    x = te.placeholder((1, 3, 28, 28, LANES), name="x")
    return [x, topi.nn.pool2d(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "avg", layout="NCHW16c")]


def _global_mean() -> list[te.Tensor]:
    """GlobalAveragePool of a blocked tensor: a sum over the image, then its division."""
    x = te.placeholder((1, 64, 7, 7, LANES), name="x")
    total = topi.sum(x, axis=(2, 3), keepdims=True)
    return [x, te.compute(total.shape, lambda *i: total(*i) / 49.0, name="mean")]


def _unblock() -> list[te.Tensor]:
    """NCHW16c to NCHW: its reads stride by the block along the output's rows."""
    x = te.placeholder((1, 2, 56, 56, LANES), name="x")
    out = te.compute(
        (1, 2 * LANES, 56, 56), lambda n, c, h, w: x[n, c // LANES, h, w, c % LANES], name="out"
    )
    return [x, out]


def _tiny() -> list[te.Tensor]:
    """Too little work to wake the pool: one thread, vector lanes."""
    x = te.placeholder((1, 1024), name="x")
    return [x, te.compute(x.shape, lambda *i: x(*i) * 2.0, name="out")]


def _softmax() -> list[te.Tensor]:
    x = te.placeholder((4, 1000), name="x")
    return [x, topi.nn.softmax(x)]


def _mod(build: Callable[[], list[te.Tensor]]) -> IRModule:
    return IRModule({"main": te.create_prim_func(build())})


def _loop_kinds(func: tirx.PrimFunc) -> set[tirx.ForKind]:
    kinds: set[tirx.ForKind] = set()

    def on_for(loop: tirx.For) -> None:
        kinds.add(loop.kind)

    tvm_ffi.structural_walk(func.body, (tirx.For, on_for))
    return kinds


def _work(mod: IRModule) -> int:
    """Iterations of the output block's loops, reductions included (the rule's measure)."""
    sch = s_tir.Schedule(mod)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    return max(
        int(np.prod([int(iv.dom.extent) for iv in sch.get(block).iter_vars])) for block in blocks
    )


@pytest.mark.parametrize(
    ("build", "vectorized"),
    [
        (_bn_relu, True),
        (_concat, True),
        (_max_pool, True),
        (_avg_pool, True),
        (_global_mean, True),
        (_unblock, False),
        (_tiny, True),
    ],
    ids=["bn_relu", "concat", "max_pool", "avg_pool", "global_mean", "unblock", "tiny"],
)
def test_default_schedule_computes_the_same_in_parallel_rows(
    build: Callable[[], list[te.Tensor]], vectorized: bool
) -> None:
    mod = _mod(build)
    sch = default_schedule(mod["main"], LANES)
    assert sch is not None
    kinds = _loop_kinds(sch.mod["main"])
    assert (tirx.ForKind.VECTORIZED in kinds) is vectorized
    assert (tirx.ForKind.PARALLEL in kinds) is (_work(mod) >= PARALLEL_MIN_WORK)
    args = random_args(mod)
    np.testing.assert_allclose(run(sch.mod, args), run(mod, args), rtol=1e-5, atol=1e-6)


def test_default_schedule_declines_two_reductions() -> None:
    """Softmax (a max and a sum over the row) is the row-reduction space's, not this rule's."""
    assert default_schedule(_mod(_softmax)["main"], LANES) is None


@T.prim_func(private=True, s_tir=True)
def _blocked_shuffle(
    x: T.Buffer((1, 17, 7, 7, 8), "float32"), out: T.Buffer((1, 17, 7, 7, 8), "float32")
) -> None:
    """A channel shuffle of an NCHW8c tensor (4 groups of 34 channels), as Relax lowers
    ShuffleNet's blocked shuffle: a layout transform whose every lane goes to another block."""
    for n, c, h, w, b in T.grid(1, 17, 7, 7, 8):
        with T.sblock("shuffle"):
            vn, vc, vh, vw, vb = T.axis.remap("SSSSS", [n, c, h, w, b])
            out[
                vn,
                ((vc * 8 + vb) % 34 * 4 + (vc * 8 + vb) // 34) // 8,
                vh,
                vw,
                ((vc * 8 + vb) % 34 * 4 + (vc * 8 + vb) // 34) % 8,
            ] = x[vn, vc, vh, vw, vb]


def test_default_schedule_declines_scattered_writes() -> None:
    """Parallel rows of the blocked shuffle ran 30× slower than its unscheduled loops (Zen 4)."""
    assert default_schedule(_blocked_shuffle, LANES) is None


def test_default_schedule_names_its_space_and_replays() -> None:
    """The search records the rule's schedule as the ``default`` space, and the build replays
    its trace on the task's function to the same kernel."""
    mod = _mod(_max_pool)
    sch = default_schedule(mod["main"], LANES)
    assert sch is not None
    trace = sch.trace.as_json()
    assert space_of(str(trace)) == DEFAULT_SCHEDULE
    fresh = s_tir.Schedule(mod)
    s_tir.Trace.apply_json_to_schedule(trace, fresh)
    assert tvm_ffi.structural_equal(fresh.mod, sch.mod), "the trace did not replay"


@pytest.mark.parametrize(("channels", "kind"), [(32, "blocked"), (20, "nchw")])
def test_an_untuned_lrn_kernel_gets_its_spaces_design(channels: int, kind: str) -> None:
    """Our LRN kernels, the blocked one included (whose window of squares the rule left
    scalar), untuned: the LRN space's vector design, recorded as the default schedule, the
    same results as the unscheduled kernel."""
    target = make_target(None)
    model = models.lrn_model(channels, 5, spatial=54)
    _, tasks = extract_tasks(load_model(models.to_bytes(model)), target, "nchwc")
    (task,) = [task for task in tasks if lrn_kind(task.mod) == kind]
    sch = default_schedule(task.mod["main"], vector_lanes(target))
    assert sch is not None
    kinds = _loop_kinds(sch.mod["main"])
    assert tirx.ForKind.VECTORIZED in kinds and tirx.ForKind.PARALLEL in kinds
    trace = str(sch.trace.as_json())
    assert f'"{LRN_SPACE}"' in trace.replace('\\"', '"')
    assert space_of(trace) == DEFAULT_SCHEDULE
    args = random_args(task.mod)
    assert_close(run(sch.mod, args), run(task.mod, args))
