"""Kernels alone, interleaved: each space's best of a few sampled schedules against onnxruntime.

On a shared machine the tuner's measurements (taken minutes apart) are not comparable; here the
candidates of every registered space (``schedules/spaces/registry.py``, the generic one aside)
applicable to one conv task are sampled, each space's fastest is kept,
and those kernels and onnxruntime's session (one Conv, its NCHWc reorders included) are timed
round after round in one process.

    .venv/bin/python -m bench.kernels --match "3→64 7×7" --match "64→256 1×1 s1 @56"
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import numpy as np
import tvm
from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from bench.spaces import describe, save_report, single_conv, unique_convs
from convtune.schedules.spaces.base import DEFAULT_SPACE, ScheduleSpace
from convtune.schedules.spaces.registry import applicable
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.measure.reference import ort_session
from convtune.tuner.measure.runtime import set_threads
from convtune.tuner.measure.verify import random_feeds
from convtune.tuner.target import make_target, physical_cores


def space_schedules(space: ScheduleSpace, mod: IRModule, seed: int, target: Target) -> list:
    """The design spaces of ``space`` for the task ``mod``, their decisions sampled from
    ``seed`` (as the search's first population draws them)."""
    generator = space.generator(target)
    ms.TuneContext(
        mod=mod, target=target, space_generator=generator, task_name="task", rand_state=seed
    )
    return list(generator.generate_design_space(mod))


def kernel_timer(mod, target):
    lib = tvm.compile(mod, target=target).jit()
    rng = np.random.default_rng(0)
    args = [
        tvm.runtime.tensor(rng.standard_normal([int(d) for d in i.shape]).astype("float32"))
        for i in ArgInfo.from_prim_func(mod["main"])
    ]
    evaluator = lib.time_evaluator("main", tvm.cpu(), number=5, repeat=1, min_repeat_ms=20)
    return lambda: float(evaluator(*args).mean)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--match", action="append", default=[])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=physical_cores())
    args = parser.parse_args(argv)
    set_threads(args.threads)
    target = make_target(None)
    rows = []
    for entry in unique_convs():
        if args.match and not any(m in describe(entry) for m in args.match):
            continue
        model = single_conv(entry)
        _, tasks = extract_tasks(load_model(model.SerializeToString()), target, "nchwc")
        task = next(t for t in tasks if t.kind == "conv")
        best: dict[str, tuple[float, Callable[[], float]]] = {}
        # Every registered space but the generic one, whose sketches are not worth sampling.
        for space in applicable(task.mod):
            if space.name == DEFAULT_SPACE:
                continue
            for seed in range(1, args.seeds + 1):
                for sch in space_schedules(space, task.mod, seed, target):
                    measure = kernel_timer(sch.mod, target)
                    seconds = min(measure() for _ in range(3))
                    if space.name not in best or seconds < best[space.name][0]:
                        best[space.name] = (seconds, measure)
        feeds = random_feeds(load_model(model.SerializeToString()).inputs)
        session = ort_session(model.SerializeToString(), args.threads)

        def ort(s=session, f=feeds) -> float:
            started = time.perf_counter()
            for _ in range(5):
                s.run(None, f)
            return (time.perf_counter() - started) / 5

        timers = {name: measure for name, (_, measure) in best.items()} | {"onnxruntime": ort}
        samples: dict[str, list[float]] = {name: [] for name in timers}
        for _ in range(args.rounds):
            for name, measure in timers.items():
                samples[name].append(measure())
        gflop = entry["flops"] / 1e9
        row = {"workload": describe(entry), "count": entry["count"], "gflop": gflop}
        for name, values in samples.items():
            row[name] = {
                "median_ms": float(np.median(values)) * 1e3,
                "p10_ms": float(np.percentile(values, 10)) * 1e3,
                "gflops": gflop / float(np.median(values)),
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    report, stem = save_report("kernels", rows)
    date = report["date"]
    lines = [
        f"# Kernels alone vs onnxruntime, interleaved ({args.threads} threads, {date})",
        "",
        "GFLOP/s at the median of interleaved rounds (p10 in brackets); onnxruntime's figure is",
        "its whole one-Conv session (its NCHWc reorders included).",
        "",
        "| workload | space | GFLOP/s | median ms (p10) | / onnxruntime (median, p10) |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        peer = row["onnxruntime"]
        for name, figures in row.items():
            if not isinstance(figures, dict):
                continue
            median, p10 = figures["median_ms"], figures["p10_ms"]
            lines.append(
                f"| {row['workload']} | {name} | {figures['gflops']:.0f} | "
                f"{median:.3f} ({p10:.3f}) | "
                f"{peer['median_ms'] / median:.2f}, {peer['p10_ms'] / p10:.2f} |"
            )
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
