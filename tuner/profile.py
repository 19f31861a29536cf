"""Per-layer times: onnxruntime's profiler per ONNX node, TVM's Relax VM per fused function.

With full graph optimisation onnxruntime fuses Conv → BatchNormalization → Relu (and a residual
Add) into one NCHWc kernel named ``<output tensor>_nchwc``. Such a kernel is attributed to the ONNX
node it grew from: the producer of that tensor, walked back through the activations/BatchNorm that
onnxruntime folds into a conv. Kernels with no ONNX counterpart (``ReorderInput``/``ReorderOutput``
layout changes) keep onnxruntime's name, so the times still add up to the whole run.

TVM 0.27 has no VM profiler any more (``vm.profile`` and ``tvm.runtime.profiling`` are gone); the
Relax VM's instrument hook, called before and after every Call instruction, times each compiled
function instead. Host-side overhead of the hook (~1 µs a call) is outside the timed interval
except for the Python call return itself.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import onnxruntime as ort

from convtune.tuner.errors import ConvtuneError
from convtune.tuner.options import DEFAULT_LAYOUT, Layout
from convtune.tuner.reference import ort_session

if TYPE_CHECKING:
    from tvm.target import Target

    from convtune.tuner.ingest import IngestedModel

_KERNEL_SUFFIX = "_kernel_time"
_NCHWC_SUFFIX = "_nchwc"
#: Ops onnxruntime folds into the conv before them (so their output names the fused kernel).
_FOLDED_INTO_CONV = frozenset(
    {"BatchNormalization", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "Tanh"}
)

_LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


class _NodeResolver:
    """Maps onnxruntime kernel names to ONNX node names of the original graph."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.names = {n.name for n in model.graph.node if n.name}
        self.producer = {out: n for n in model.graph.node for out in n.output}

    def __call__(self, kernel: str) -> str:
        if kernel in self.names:
            return kernel
        tensor = kernel.removesuffix(_NCHWC_SUFFIX)
        node = self.producer.get(tensor)
        if node is None or not node.name:
            return kernel
        while node.op_type in _FOLDED_INTO_CONV:
            parent = self.producer.get(node.input[0])
            if parent is None or not parent.name:
                break
            node = parent
        return node.name


def _load_trace(path: str) -> list[dict]:
    trace = json.loads(pathlib.Path(path).read_text())
    # Older onnxruntime versions wrap the events in {"traceEvents": [...]}.
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def _per_run_totals(events: list[dict], resolve: _NodeResolver) -> list[dict[str, float]]:
    """Kernel microseconds summed per resolved name, one dict per ``model_run`` in time order."""
    runs = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    totals: list[dict[str, float]] = [{} for _ in runs]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith(_KERNEL_SUFFIX):
            continue
        for i, (start, end) in enumerate(runs):
            if start <= e["ts"] <= end:
                key = resolve(e["name"].removesuffix(_KERNEL_SUFFIX))
                totals[i][key] = totals[i].get(key, 0.0) + float(e["dur"])
                break
    return totals


def ort_node_times(
    model_bytes: bytes,
    feeds: Mapping[str, np.ndarray],
    threads: int,
    runs: int,
    *,
    optimization: str = "all",
) -> dict[str, float]:
    """Median milliseconds per ONNX node name over ``runs`` profiled runs (after one warm-up).

    A fused kernel's time is reported under the ONNX node it grew from (its Conv); ops folded into
    it do not appear. ``optimization`` is ``"all"`` (what a deployment runs), ``"extended"``,
    ``"basic"`` or ``"none"`` (every ONNX node is its own kernel). A name that appears in only some
    runs counts 0 in the others.
    """
    if runs < 1:
        raise ConvtuneError(f"profile: runs must be >= 1, got {runs}")
    if optimization not in _LEVELS:
        raise ConvtuneError(
            f"profile: unknown optimization '{optimization}', expected one of {list(_LEVELS)}"
        )
    resolve = _NodeResolver(onnx.load_from_string(model_bytes))
    with tempfile.TemporaryDirectory(prefix="convtune-ortprof-") as tmp:
        opts = ort.SessionOptions()
        opts.enable_profiling = True
        opts.profile_file_prefix = str(pathlib.Path(tmp, "ort"))
        opts.graph_optimization_level = _LEVELS[optimization]
        sess = ort_session(model_bytes, threads, opts)
        for _ in range(runs + 1):
            sess.run(None, dict(feeds))
        events = _load_trace(sess.end_profiling())
    per_run = _per_run_totals(events, resolve)[1:]  # the first run pays allocation: warm-up
    names = {name for run in per_run for name in run}
    return {
        name: statistics.median(run.get(name, 0.0) for run in per_run) / 1e3
        for name in sorted(names)
    }


_VM_BUILTIN_PREFIX = "vm.builtin."


def _vm_args(vm: object, feeds: Mapping[str, np.ndarray], device: object) -> list:
    """Feeds ordered as the parameters of the VM's ``main`` (the ONNX graph input names)."""
    import tvm

    arity = vm._get_function_arity("main")  # type: ignore[attr-defined]
    names = [vm._get_function_param_name("main", i) for i in range(arity)]  # type: ignore[attr-defined]
    missing = [n for n in names if n not in feeds]
    if missing:
        raise ConvtuneError(f"profile: missing input(s) {', '.join(missing)}")
    return [tvm.runtime.tensor(np.ascontiguousarray(feeds[n]), device) for n in names]


def tvm_layer_times(
    vm_module_path: str | os.PathLike[str],
    feeds: Mapping[str, np.ndarray],
    threads: int,
    *,
    runs: int = 5,
) -> dict[str, float]:
    """Median milliseconds per compiled function (fused TIR kernel) of a built Relax VM library.

    ``vm_module_path`` is a library exported by ``Executable.export_library``; ``feeds`` are keyed
    by the names of ``main``'s parameters. One un-instrumented warm-up run precedes ``runs`` timed
    runs; a function called several times in a run (one kernel shared by identical layers)
    reports the sum of its calls. VM builtins (allocation, reshape views) are left out.
    """
    import tvm
    from tvm import relax

    from convtune.tuner.runtime import set_threads

    if runs < 1:
        raise ConvtuneError(f"profile: runs must be >= 1, got {runs}")
    path = pathlib.Path(vm_module_path)
    if not path.is_file():
        raise ConvtuneError(f"profile: no such library: {path}")
    set_threads(threads)
    device = tvm.cpu()
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), device)
    args = _vm_args(vm, feeds, device)
    vm["main"](*args)

    starts: list[float] = []
    current: dict[str, float] = {}

    def instrument(func, symbol, before_run, ret_value, *call_args):
        now = time.perf_counter()
        if symbol.startswith(_VM_BUILTIN_PREFIX):
            return 0
        if before_run:
            starts.append(now)
        else:
            current[symbol] = current.get(symbol, 0.0) + now - starts.pop()
        return 0  # VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    per_run: list[dict[str, float]] = []
    for _ in range(runs):
        current = {}
        vm["main"](*args)
        per_run.append(current)
    names = {name for run in per_run for name in run}
    return {
        name: statistics.median(run.get(name, 0.0) for run in per_run) * 1e3
        for name in sorted(names)
    }


# ---------------------------------------------------------------------------------------------
# model-level profile: TVM layers mapped to ONNX nodes, next to onnxruntime's nodes
# ---------------------------------------------------------------------------------------------

#: Layer name of the row that collects onnxruntime kernels no TVM layer covers (pooling, layout).
ORT_OTHER = "(onnxruntime: other nodes)"
PROFILE_COLUMNS = (
    "layer",
    "op",
    "shape",
    "onnx_nodes",
    "calls",
    "flops",
    "ms",
    "ort_ms",
    "gflops",
    "pct_peak",
    "share",
)


def _op_label(function_name: str) -> str:
    """``fused_batch_norm_relu2`` → ``batch_norm_relu``: what a non-anchor kernel computes."""
    return re.sub(r"\d+$", "", function_name.removeprefix("fused_"))


def _output_shape(func: Any) -> str:
    """Shape of a PrimFunc's last parameter (TIR's destination-passing output), e.g. 1x64x56x56."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    args = ArgInfo.from_prim_func(func)
    shape = getattr(args[-1], "shape", None) if args else None
    return "x".join(str(int(d)) for d in shape) if shape is not None else ""


def profile_model(
    ingested: IngestedModel,
    so_path: Path,
    *,
    target: Target,
    threads: int,
    peak_gflops: float,
    runs: int = 5,
    layout: Layout = DEFAULT_LAYOUT,
) -> list[dict[str, Any]]:
    """Per-layer rows of the compiled library ``so_path`` (tuned or not) of ``ingested``.

    One row per fused TIR task of ``extract_tasks`` that runs (structurally equal layers share a
    task and a row; ``calls`` counts them) and per compiled function no task covers, slowest
    first, then :data:`ORT_OTHER`. ``ms`` is the summed median time of the task's functions in
    one run; ``ort_ms`` sums onnxruntime's per-node medians over the row's ``onnx_nodes`` (None
    for rows without ONNX nodes); ``flops`` = per-call FLOPs × calls; ``gflops`` = flops / ms;
    ``share`` = ms / total TVM ms. ``target`` must be the one ``so_path`` was built for: task
    extraction names the functions the same way the build did. Each Conv/Gemm/MatMul ONNX node
    is in exactly one row's ``onnx_nodes``.
    """
    from .extract import extract_tasks, fuse, tasks_by_function
    from .verify import random_feeds

    feeds = random_feeds(ingested.inputs, seed=0)
    relax_model, tasks = extract_tasks(ingested, target, layout)
    task_of = {name: t.name for name, t in tasks_by_function(fuse(relax_model), tasks).items()}
    tvm_ms = tvm_layer_times(so_path, feeds, threads, runs=runs)
    ort_ms = ort_node_times(ingested.model.SerializeToString(), feeds, threads, runs)

    per_row: dict[str, float] = {}
    for symbol, ms in tvm_ms.items():
        key = task_of.get(symbol, symbol)
        per_row[key] = per_row.get(key, 0.0) + ms
    total = sum(per_row.values())
    rows: list[dict[str, Any]] = []
    attributed: set[str] = set()

    def add(layer: str, op: str, shape: str, nodes: list[str], calls: int, flops: float) -> None:
        ms = per_row.get(layer)
        known = [ort_ms[n] for n in nodes if n in ort_ms]
        attributed.update(nodes)
        gflops = flops / ms / 1e6 if ms and flops else None
        rows.append(
            {
                "layer": layer,
                "op": op,
                "shape": shape,
                "onnx_nodes": nodes,
                "calls": calls,
                "flops": flops,
                "ms": ms,
                "ort_ms": sum(known) if known else None,
                "gflops": gflops,
                "pct_peak": 100.0 * gflops / peak_gflops if gflops and peak_gflops else None,
                "share": ms / total if ms is not None and total else None,
            }
        )

    for task in tasks:
        anchor = task.kind != "other"
        if not anchor and task.name not in per_row:
            continue  # became a VM builtin (a reshape view): nothing runs
        add(
            task.name,
            task.op if anchor else _op_label(task.name),
            task.shape_text if anchor else _output_shape(task.mod["main"]),
            list(task.onnx_nodes),
            task.occurrences,
            task.flops * task.occurrences,
        )
    for symbol in per_row.keys() - {t.name for t in tasks}:
        add(symbol, _op_label(symbol), "", [], 1, 0.0)
    rows.sort(key=lambda row: -(row["ms"] or 0.0))
    rest = sum(ms for name, ms in ort_ms.items() if name not in attributed)
    rows.append(
        {
            "layer": ORT_OTHER, "op": "", "shape": "", "onnx_nodes": [], "calls": 0,
            "flops": 0.0, "ms": None, "ort_ms": rest, "gflops": None, "pct_peak": None,
            "share": None,
        }
    )  # fmt: skip
    return rows
