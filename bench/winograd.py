"""Winograd F(2×2,3×3) / F(4×4,3×3) against the direct blocked kernel on ResNet-50's 3×3 stride-1
convolutions: tuned with the same trial budget, then the best kernels timed interleaved, and
Winograd's error against onnxruntime per layer.

    .venv/bin/python -m bench.winograd --trials 16

Kernels alone (no epilogue, no layout transforms): the direct task is the blocked conv2d_NCHWc
task convtune extracts for the layer; the Winograd tasks take NCHW data and the weights already
transformed (as a build would hold them).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

import numpy as np
import tvm
from onnx import helper
from tvm import te
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm_ffi import structural_hash

from bench.spaces import describe, save_report, single_conv, unique_convs
from convtune.db.migrate import upgrade
from convtune.db.ms_database import SQLDatabase
from convtune.db.session import make_engine
from convtune.schedules import winograd
from convtune.tuner.extract import ModelTask, extract_tasks
from convtune.tuner.ingest import load_model
from convtune.tuner.peak import measure_peak
from convtune.tuner.reference import ort_session
from convtune.tuner.runtime import set_threads
from convtune.tuner.search import run_search
from convtune.tuner.target import make_target, physical_cores
from convtune.tuner.verify import compare


def winograd_task(entry: dict, tile: int, flops: float, target: tvm.target.Target) -> ModelTask:
    x, w = entry["x"], entry["w"]
    attrs = {a.name: helper.get_attribute_value(a) for a in entry["node"].attribute}
    pads = attrs.get("pads", [0, 0, 0, 0])
    alpha = tile + 2
    data = te.placeholder(tuple(x), name="data")
    packed = te.placeholder((alpha, alpha, w[1], w[0]), name="packed")
    out = winograd.conv2d_winograd(data, packed, pads, tile, "float32")
    mod = winograd.without_custom_rules(
        tvm.IRModule({"main": te.create_prim_func([data, packed, out])})
    )
    name = f"winograd_f{tile}_{describe(entry)}"
    extracted = ms.ExtractedTask(name, mod, target, [mod], 1)
    return ModelTask(0, extracted, str(structural_hash(mod)), flops, kind="conv", op="Conv")


def run_kernel(mod: tvm.IRModule, args: list[np.ndarray], target) -> np.ndarray:
    lib = tvm.compile(mod, target=target)
    tensors = [tvm.runtime.tensor(a, tvm.cpu()) for a in args]
    lib(*tensors)
    return tensors[-1].numpy()


def timer(mod: tvm.IRModule, target, rounds: int):
    lib = tvm.compile(mod, target=target).jit()
    rng = np.random.default_rng(0)
    args = [
        tvm.runtime.tensor(
            rng.standard_normal([int(d) for d in info.shape]).astype("float32"), tvm.cpu()
        )
        for info in ArgInfo.from_prim_func(mod["main"])
    ]
    evaluator = lib.time_evaluator("main", tvm.cpu(), number=3, repeat=1, min_repeat_ms=20)
    return lambda: float(evaluator(*args).mean)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--match", action="append", default=[])
    args = parser.parse_args(argv)

    target = make_target(None)
    peak = measure_peak(args.threads)
    set_threads(args.threads)
    work = pathlib.Path(tempfile.mkdtemp(prefix="convtune-winograd-"))
    url = f"sqlite:///{work / 'winograd.db'}"
    upgrade(url)
    database = SQLDatabase(make_engine(url), target)
    entries = [
        e
        for e in unique_convs()
        if e["w"][2:] == (3, 3)
        and "s1 " in describe(e)
        and (not args.match or any(m in describe(e) for m in args.match))
    ]
    rows = []
    for entry in entries:
        model = single_conv(entry)
        ingested = load_model(model.SerializeToString())
        _, tasks = extract_tasks(ingested, target, "nchwc")
        direct = next(t for t in tasks if t.kind == "conv")
        variants = {"direct": direct}
        for tile in winograd.TILE_SIZES:
            variants[f"winograd F({tile}x{tile})"] = winograd_task(
                entry, tile, direct.flops, target
            )
        run_search(
            list(variants.values()), database, target,
            trials_per_task=args.trials, threads=args.threads,
        )  # fmt: skip
        # Error against onnxruntime on the same input and weights (unscheduled kernels: the
        # schedule changes only the order of the sums).
        rng = np.random.default_rng(0)
        x = rng.standard_normal(entry["x"]).astype("float32")
        weight = next(
            np.frombuffer(t.raw_data, "float32").reshape(t.dims) for t in model.graph.initializer
        )
        reference = ort_session(model.SerializeToString(), args.threads).run(None, {"x": x})[0]
        row: dict = {"workload": describe(entry), "count": entry["count"], "variants": {}}
        timers = {}
        for name, task in variants.items():
            best = database.best_record(database.workload_id(task.mod, task.name))
            figures: dict = {"tuned_ms": best.mean_sec * 1e3 if best and best.mean_sec else None}
            if name != "direct":
                tile = int(name.split("(")[1][0])
                packed = winograd.transform_weight(weight, tile)
                out = np.zeros(reference.shape, "float32")
                got = run_kernel(task.mod, [x, packed, out], target)
                check = compare([got], [reference], ["y"], 0)
                figures |= {
                    "max_abs_err": check.max_abs_err,
                    "max_abs_err_over_max_ref": check.max_abs_err / float(np.abs(reference).max()),
                    "passes_default_tolerance": check.passed,
                }
            scheduled = database.query_ir_module(task.mod, target, task.name)
            if scheduled is not None:
                timers[name] = timer(scheduled, target, args.rounds)
            row["variants"][name] = figures
        samples: dict[str, list[float]] = {name: [] for name in timers}
        for _ in range(args.rounds):  # interleaved: A B C A B C ...
            for name, measure in timers.items():
                samples[name].append(measure())
        gflop = direct.flops / 1e9
        for name, values in samples.items():
            median = float(np.median(values))
            row["variants"][name] |= {"ms": median * 1e3, "gflops": gflop / median}
        rows.append(row)
        print(json.dumps(row), flush=True)
    _, stem = save_report(
        "winograd", rows, f"-t{args.trials}",
        threads=args.threads, trials=args.trials, peak_gflops=peak.gflops_all,
    )  # fmt: skip
    names = list(rows[0]["variants"]) if rows else []
    lines = [
        f"# Winograd vs direct blocked kernel, ResNet-50 3×3 s1 convs ({args.trials} trials "
        f"per variant, {args.threads} threads, peak {peak.gflops_all:.0f} GFLOP/s)",
        "",
        "Direct-conv FLOPs over time (effective GFLOP/s), kernels timed interleaved; error = "
        "max |Winograd − onnxruntime| / max |onnxruntime|.",
        "",
        "| workload | × | " + " | ".join(names) + " | " + " | ".join(
            f"{n} error" for n in names if n != "direct"
        ) + " |",
        "|---|---|" + "---|" * (2 * len(names) - 1),
    ]  # fmt: skip
    for row in rows:
        v = row["variants"]
        cells = [f"{v[n]['gflops']:.0f}" if "gflops" in v[n] else "–" for n in names]
        errors = [f"{v[n]['max_abs_err_over_max_ref']:.1e}" for n in names if n != "direct"]
        lines.append(f"| {row['workload']} | {row['count']} | " + " | ".join(cells + errors) + " |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
