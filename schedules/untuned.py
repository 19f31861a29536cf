"""The schedule a kernel gets when the search gave it no trial: parallel rows, vector lanes.

TVM has no fallback schedule on CPU: a task without a record compiles to its unscheduled loop
nest, one thread and scalar code. The search spends its budget by expected gain, so a short
tune leaves the zero-FLOP kernels (normalizations without a conv to fold into, concats, pools)
for last. Measured on DenseNet-121 on an AMX Xeon (2 threads): its 58 pre-activation
BatchNorm+ReLU kernels took 0.13-1.7 ms each unscheduled and 0.005-0.08 ms with this schedule
(20-40×); a 3-minute tune left 86 such tasks untuned, 12.5 ms of the model's 41.9.

The rule is deterministic and needs no measurement: elementwise producers inlined, the outer
loops of the output block fused and run in parallel when there is enough work to share, the
innermost loop vectorized (the channel block of an NCHW[x]c tensor) when every read is
contiguous along it (a layout transform's gathers stay scalar); a reduction's loops go inside
the spatial ones so the innermost spatial axis stays the vector one, and one elementwise
consumer of a reduction (average pooling's division) is computed in the reduction's rows. A
function it does not fit (two reductions, as in softmax, whose row-reduction space measures
better; writes scattered across blocks, as in a blocked channel shuffle; symbolic extents)
stays unscheduled, as before.

Our LRN kernels (``ops/lrn.py``) get the one design of their space instead: the rule cannot
vectorize the blocked kernel's window of squares, so an untuned LRN ran its power scalar. A
3-minute cold tune of GoogLeNet (light_inception_v1) on Zen 3 (AVX2, 2 threads, 2026-12-07)
left its first LRN untuned, last by expected gain since its FLOPs are few: 3.13 ms of the
model's 34.9. GoogLeNet's blocked LRNs alone, the rule against the LRN design: 64 channels at
55×55 2.82 against 0.36 ms, 192 channels 7.95 against 1.13.

The search measures this schedule once, beside the unscheduled function, as the floor of every
task that is not a conv, Gemm or MatMul (``tuner/search/strategy.py``): a few generic trials of
a channel shuffle or a max pool can all be slower than it.
"""

from __future__ import annotations

import math

import tvm
from tvm import s_tir, sym, tirx
from tvm.ir import IRModule
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.target import Target
from tvm.tirx.analysis import undefined_vars

from .ops.annotations import SCHEDULED, mark_space
from .ops.isa import vector_lanes
from .spaces.lrn import lrn_kind, schedule_lrn

#: The space name of the schedules no search produced, as the tuning records store it: a task's
#: unscheduled function (an empty trace) and this module's rule, both measured once as the
#: floor of every task that is not a conv, Gemm or MatMul (``tuner/search/strategy.py``).
DEFAULT_SCHEDULE = "default"
#: Kernels of fewer loop iterations than this run on one thread: waking the pool costs more (a
#: 1000-element layout transform took 1.2 µs in parallel against under 1 µs serial).
PARALLEL_MIN_WORK = 4096
#: Longest innermost loop vectorized whole; a longer one is split to one register.
MAX_VECTOR_LOOP = 64


def untuned_default_pass(target: Target) -> tvm.transform.Pass:
    """A module pass giving :func:`default_schedule` to every PrimFunc not scheduled yet (no
    ``tirx.is_scheduled``: MetaSchedule's ``ApplyDatabase`` sets it on the ones it scheduled)."""
    lanes = vector_lanes(target)

    def transform(mod: IRModule, _: tvm.transform.PassContext) -> IRModule:
        functions = {}
        for gvar, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc) and not func.attrs.get(SCHEDULED, False):
                sch = default_schedule(func, lanes)
                if sch is not None:
                    func = sch.mod["main"].with_attr(SCHEDULED, True)
            functions[gvar] = func
        return IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)

    return tvm.transform.module_pass(transform, opt_level=0, name="UntunedDefault")


def default_schedule(func: tirx.PrimFunc, lanes: int) -> s_tir.Schedule | None:
    """``func`` scheduled by the rule of the module docstring, or None when it does not apply."""
    sch = s_tir.Schedule(func)
    try:
        if lrn_kind(sch.mod) is not None:
            schedule_lrn(sch, lanes)
            scheduled: s_tir.Schedule | None = sch
        else:
            scheduled = _schedule(sch, lanes)
    except (ValueError, RuntimeError):  # a ScheduleError or TVM's own: leave the function as is
        return None
    if scheduled is not None:
        # The trace says where it came from when the search measures it (trial_space).
        blocks = scheduled.get_child_blocks(scheduled.get_sblock("root"))
        mark_space(scheduled, blocks[-1], DEFAULT_SCHEDULE)
    return scheduled


def _schedule(sch: s_tir.Schedule, lanes: int) -> s_tir.Schedule | None:
    infos = normalize_prim_func(sch)
    if not infos:
        return None
    reductions = []
    for info in reversed(infos[:-1]):
        if info.is_injective():
            sch.compute_inline(info.block_rv)
        else:
            reductions.append(info)
    last = infos[-1]
    if not reductions:
        _rows(sch, last.block_rv, last.dom_kind(), lanes)
        return sch
    if len(reductions) > 1 or not last.is_injective():
        return None
    # A reduction and its elementwise consumer (avg pool's sum, then the division): the
    # reduction's rows, each finished by the consumer while it is in cache.
    (reduction,) = reductions
    row = _rows(sch, reduction.block_rv, reduction.dom_kind(), lanes)
    if row is None:
        return None
    sch.reverse_compute_at(last.block_rv, row, preserve_unit_loops=True)
    inner = sch.get_loops(last.block_rv)[-1]
    if 1 < _extent(sch, inner) <= MAX_VECTOR_LOOP:
        sch.vectorize(inner)
    return sch


def _rows(
    sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, kinds: str, lanes: int
) -> s_tir.schedule.LoopRV | None:
    """Schedule ``block`` (loops of iterator ``kinds``, S or R): parallel outer spatial loops,
    the innermost spatial one vectorized under any reduction loops; returns the parallel loop."""
    loops = sch.get_loops(block)
    if "O" in kinds or "S" not in kinds or len(loops) != len(kinds):
        raise ValueError(f"loops {len(loops)} of kinds {kinds!r}")
    spatial = [loop for loop, kind in zip(loops, kinds, strict=True) if kind == "S"]
    reduction = [loop for loop, kind in zip(loops, kinds, strict=True) if kind == "R"]
    innermost = sch.get(block).iter_vars[kinds.rindex("S")].var
    if _scatters(sch.get(block), innermost):
        raise ValueError("the block scatters its writes")
    contiguous = _contiguous(sch.get(block), innermost)
    work = math.prod(_extent(sch, loop) for loop in loops)
    outer, inner = spatial[:-1], spatial[-1]
    extent = _extent(sch, inner)
    if extent > MAX_VECTOR_LOOP and extent % lanes == 0 and contiguous:
        rest, inner = sch.split(inner, factors=[None, lanes])
        outer.append(rest)
        extent = lanes
    sch.reorder(*outer, *reduction, inner)
    row = (sch.fuse(*outer) if len(outer) > 1 else outer[0]) if outer else None
    if row is not None and work >= PARALLEL_MIN_WORK:
        sch.parallel(row)
    if contiguous:
        _vector_under_reduction(sch, block, reduction, inner)
    return row


def _contiguous(stmt: s_tir.SBlock, var: tirx.Var) -> bool:
    """Whether ``var`` indexes only the last axis of every buffer the block reads: a vector
    along it loads whole registers. A layout transform's reads stride by the channel block, and
    its gathers took 1.7× the time of scalar loads (24 channels at 56², NCHW16c to NCHW)."""
    return not any(
        _uses(axis.min, var) for region in stmt.reads for axis in list(region.region)[:-1]
    )


def _scatters(stmt: s_tir.SBlock, var: tirx.Var) -> bool:
    """Whether the block writes consecutive ``var`` anywhere but to consecutive elements of the
    last axis. A blocked channel shuffle writes each lane to another block: parallel rows of it
    took 0.22 ms (vectorized 0.17) against 0.0073 for the unscheduled loops (68×7×7×8, Zen 4),
    whose nested loops LLVM turns into running offsets."""
    analyzer = sym.Analyzer()
    for region in stmt.writes:
        *outer, last = list(region.region)
        if any(_uses(axis.min, var) for axis in outer):
            return True
        if _uses(analyzer.simplify(last.min - var), var):
            return True
    return False


def _uses(expr: tirx.PrimExpr, var: tirx.Var) -> bool:
    return any(v.same_as(var) for v in undefined_vars(expr))


def _vector_under_reduction(
    sch: s_tir.Schedule,
    block: s_tir.schedule.SBlockRV,
    reduction: list[s_tir.schedule.LoopRV],
    inner: s_tir.schedule.LoopRV,
) -> None:
    """Vectorize ``inner`` (spatial, below the ``reduction`` loops): one register accumulates
    the window, its initialization a vector store of its own."""
    if not 1 < _extent(sch, inner) <= MAX_VECTOR_LOOP:
        return
    sch.vectorize(inner)
    if reduction:
        # After vectorizing: the update block has no init left, so no primitive takes it after;
        # the init's copy of ``inner`` keeps its vector kind.
        sch.decompose_reduction(block, reduction[0])


def _extent(sch: s_tir.Schedule, loop: s_tir.schedule.LoopRV) -> int:
    extent = sch.get(loop).extent
    if not isinstance(extent, tirx.IntImm):
        raise ValueError("symbolic loop extent")
    return int(extent)
