"""Small convolutions, a family of hand-written schedules for them, and real measurements.

The cost-model tests need records whose quality differs by a known amount without running a
search: each conv gets a naive schedule (the unscheduled loop nest), middle ones (tiled, only
vectorised) and a good one (output channels tiled and unrolled, the output row vectorised).
None is parallel: on a machine shared with other test processes, multi-threaded timings of
sub-millisecond kernels are noise. Each is compiled and timed with TVM, and stored like a trial.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te, topi
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from convtune.db.ms_database import SQLDatabase
from convtune.tuner.target import host_target_spec

# This host's CPU: the records are measured here.
TARGET = Target({**host_target_spec(), "num-cores": 2})
# (channels, size): small enough to compile in well under a second.
TRAIN_CONVS = [(16, 16), (32, 8), (24, 12), (48, 8)]
NEW_CONV = (32, 12)
VARIANTS = ("naive", "tiled", "vector", "good")


def conv(channels: int, size: int) -> tvm.IRModule:
    """A 3×3, stride 1, pad 1 NCHW convolution with ``channels`` in and out, as TIR."""
    data = te.placeholder((1, channels, size, size), name="data")
    weight = te.placeholder((channels, channels, 3, 3), name="weight")
    out = topi.nn.conv2d_nchw(data, weight, stride=1, padding=1, dilation=1)
    return tvm.IRModule({"main": te.create_prim_func([data, weight, out])})


def schedule(mod: tvm.IRModule, variant: str) -> Schedule:
    """One of ``VARIANTS`` of the conv in ``mod``."""
    sch = Schedule(mod)
    if variant == "naive":
        return sch
    block = sch.get_sblock("conv2d_nchw")
    n, f, y, x, rc, ry, rx = sch.get_loops(block)
    if variant == "vector":
        sch.reorder(n, f, y, rc, ry, rx, x)
        sch.vectorize(x)
        return sch
    fo, fi = sch.split(f, factors=[None, 8])
    if variant == "tiled":
        sch.reorder(n, fo, y, rc, ry, rx, fi, x)
        return sch
    sch.reorder(n, fo, y, rc, ry, rx, fi, x)
    sch.vectorize(x)
    sch.unroll(fi)
    return sch


def measure(sch: Schedule, repeat: int = 5) -> list[float]:
    """Run times (s) of the scheduled conv, measured with TVM's evaluator."""
    library = tvm.compile(sch.mod, target=TARGET)
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [
        tvm.runtime.tensor(rng.standard_normal([int(d) for d in arg.shape], dtype="float32"), dev)
        for arg in ArgInfo.from_prim_func(sch.mod["main"])
    ]
    timer = library.mod.time_evaluator("main", dev, number=3, repeat=repeat, min_repeat_ms=5)
    return [float(t) for t in timer(*args).results]


def record_variants(
    database: SQLDatabase, mod: tvm.IRModule, variants: tuple[str, ...] = VARIANTS
) -> dict[str, float]:
    """Measure and store each variant of ``mod`` as a trial; returns variant -> mean seconds."""
    workload_id = database.records.workload_id(mod, "conv")
    args_info = [arg.as_json() for arg in ArgInfo.from_prim_func(mod["main"])]
    means = {}
    for index, variant in enumerate(variants):
        sch = schedule(mod, variant)
        run_secs = measure(sch)
        database.records.record_trial(
            workload_id,
            trace_json=sch.trace.as_json(),
            run_secs=run_secs,
            args_info_json=args_info,
            error=None,
            trial_index=index,
            space="test",
            job_id=None,
            flops=None,
        )
        means[variant] = sum(run_secs) / len(run_secs)
    return means
