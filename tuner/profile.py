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
import math
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import onnxruntime as ort

from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.child import load_feeds, run_child, save_feeds, tvm_process_env
from convtune.tuner.measure.reference import ort_session
from convtune.tuner.options import DEFAULT_LAYOUT, Layout

if TYPE_CHECKING:
    from tvm.ir import IRModule
    from tvm.target import Target

    from convtune.tuner.graph.ingest import IngestedModel

_KERNEL_SUFFIX = "_kernel_time"
_NCHWC_SUFFIX = "_nchwc"
#: Ops onnxruntime folds into the conv before them (so their output may name the fused kernel).
_FOLDED_INTO_CONV = frozenset(
    {"BatchNormalization", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "Tanh"}
)
#: Binary ops onnxruntime fuses into a conv: a residual Add (the NCHWc conv's ``Sum`` input) and
#: a Mul/Add by a constant (ConvMulFusion/ConvAddFusion: Caffe2-style BN as Mul + Add).
_FUSED_BINARY = frozenset({"Add", "Sum", "Mul", "Sub", "Div"})
#: Anchor class of an ONNX op and of an onnxruntime kernel (the ``op_name`` of its profile event):
#: a fused or layout-converted kernel keeps its class, which the last matching pass relies on.
_ONNX_CLASS = {
    "Conv": "conv",
    "ConvTranspose": "conv_transpose",
    "Gemm": "dense",
    "MatMul": "dense",
}
_KERNEL_CLASS = {
    **_ONNX_CLASS,
    "FusedConv": "conv",
    "NhwcFusedConv": "conv",
    "FusedGemm": "dense",
    "FusedMatMul": "dense",
}
_TOKEN = re.compile(r"_token_\d+$")

_LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


class _NodeResolver:
    """Maps onnxruntime kernel names to ONNX node keys (:func:`node_key`) of the original graph.

    Measured on onnxruntime 1.32 (fp32, CPU, full optimisation): a kernel keeps its node's name
    when nothing was fused; an NCHWc conv is named ``<tensor>_nchwc`` after the output of the last
    op fused into it (a BatchNormalization, an activation, or a residual Add's input); a MatMul+Add
    becomes ``<matmul>/MatMulAddFusion``; unnamed nodes (every model of the ONNX model zoo) give
    names onnxruntime makes up. Three passes, each over kernels in execution order:

    1. names that lead to exactly one ONNX node (directly, or from a tensor back through the ops
       folded into a conv);
    2. names that lead to several anchors (a residual Add whose both inputs are convs): the first
       one no other kernel claimed;
    3. kernels of an anchor class (``op_name`` Conv/FusedConv/Gemm/…) still unmatched: the next
       unclaimed ONNX anchor node of that class in graph order (onnxruntime keeps the order).

    Anything else (``ReorderInput``/``ReorderOutput``) keeps onnxruntime's name.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        from convtune.tuner.graph.flops import node_key

        nodes = list(model.graph.node)
        self.key = {id(n): node_key(n, i) for i, n in enumerate(nodes)}
        self.node = {node_key(n, i): n for i, n in enumerate(nodes)}
        self.node.update({n.name: n for n in nodes if n.name and n.name not in self.node})
        self.producer = {out: n for n in nodes for out in n.output if out}
        self.anchors = [self.key[id(n)] for n in nodes if n.op_type in _ONNX_CLASS]

    def _walk(self, start: onnx.NodeProto) -> list[str]:
        """Anchor keys reached from ``start`` back through folded ops and residual adds."""
        found: list[str] = []
        queue, seen = [start], set()
        while queue:
            node = queue.pop(0)
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.op_type in _ONNX_CLASS:
                found.append(self.key[id(node)])
            elif node.op_type in _FOLDED_INTO_CONV or node.op_type in _FUSED_BINARY:
                inputs = node.input[:1] if node.op_type in _FOLDED_INTO_CONV else node.input
                queue.extend(p for i in inputs if (p := self.producer.get(i)) is not None)
        return found or [self.key[id(start)]]

    def candidates(self, kernel: str) -> list[str]:
        exact = self.node.get(kernel)
        if exact is not None:  # the node ran as its own kernel
            return [self.key[id(exact)]]
        names = [kernel, kernel.removesuffix(_NCHWC_SUFFIX), _TOKEN.sub("", kernel)]
        if "/" in kernel:
            names.append(kernel.rsplit("/", 1)[0])  # "<matmul>/MatMulAddFusion"
        for name in names:
            node = self.node.get(name)
            if node is not None:
                if node.op_type in _ONNX_CLASS:
                    return [self.key[id(node)]]
                return self._walk(node)
            producer = self.producer.get(name)
            if producer is not None:
                return self._walk(producer)
        return []

    def resolve(self, kernels: list[tuple[str, str]]) -> dict[str, str]:
        """``(kernel name, op_name)`` pairs in execution order → kernel name to ONNX node key."""
        mapping: dict[str, str] = {}
        claimed: set[str] = set()
        ambiguous: list[tuple[str, str, list[str]]] = []
        for name, op in kernels:
            found = self.candidates(name)
            if len(found) == 1:
                mapping[name] = found[0]
                claimed.add(found[0])
            else:
                ambiguous.append((name, op, found))
        unmatched: list[tuple[str, str]] = []
        for name, op, found in ambiguous:
            unclaimed = [key for key in found if key not in claimed]
            if found:
                mapping[name] = (unclaimed or found)[0]
                claimed.add(mapping[name])
            else:
                unmatched.append((name, op))
        for name, op in unmatched:
            cls = _KERNEL_CLASS.get(op)
            nxt: str | None = next(
                (
                    key
                    for key in self.anchors
                    if key not in claimed and _ONNX_CLASS[self.node[key].op_type] == cls
                ),
                None,
            )
            mapping[name] = nxt if cls is not None and nxt is not None else name
            claimed.add(mapping[name])
        return mapping


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
    kernels = sorted(
        (
            e
            for e in events
            if e.get("cat") == "Node" and e.get("name", "").endswith(_KERNEL_SUFFIX)
        ),
        key=lambda e: e["ts"],
    )
    order: dict[str, str] = {}
    for e in kernels:
        order.setdefault(
            e["name"].removesuffix(_KERNEL_SUFFIX), e.get("args", {}).get("op_name", "")
        )
    mapping = resolve.resolve(list(order.items()))
    totals: list[dict[str, float]] = [{} for _ in runs]
    for e in kernels:
        for i, (start, end) in enumerate(runs):
            if start <= e["ts"] <= end:
                key = mapping[e["name"].removesuffix(_KERNEL_SUFFIX)]
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
    end_to_end: bool = True,
) -> tuple[dict[str, float], float]:
    """Median milliseconds per ONNX node name over ``runs`` profiled runs (after one warm-up), and
    the median milliseconds of a whole run of an unprofiled session, its runs alternating with
    the profiled ones (as :func:`tvm_layer_times` pairs TVM's); NaN with ``end_to_end=False``,
    which builds no second session (for callers that use the nodes only).

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
        profiled = ort_session(model_bytes, threads, opts)
        plain = None
        if end_to_end:
            plain_opts = ort.SessionOptions()
            plain_opts.graph_optimization_level = _LEVELS[optimization]
            plain = ort_session(model_bytes, threads, plain_opts)
        inputs = dict(feeds)
        whole = []
        for _ in range(runs + 1):  # the first of each pays allocation: warm-up
            profiled.run(None, inputs)
            if plain is not None:
                started = time.perf_counter()
                plain.run(None, inputs)
                whole.append(time.perf_counter() - started)
        events = _load_trace(profiled.end_profiling())
    per_run = _per_run_totals(events, resolve)[1:]
    names = {name for run in per_run for name in run}
    nodes = {
        name: statistics.median(run.get(name, 0.0) for run in per_run) / 1e3
        for name in sorted(names)
    }
    return nodes, statistics.median(whole[1:]) * 1e3 if whole else math.nan


_VM_BUILTIN_PREFIX = "vm.builtin."


def _vm_args(vm: object, feeds: Mapping[str, np.ndarray], device: object) -> list:
    """Feeds ordered as the parameters of the VM's ``main`` (the ONNX graph input names)."""
    import tvm

    from convtune.tuner.measure.runtime import vm_parameter_name, vm_parameter_names

    names = vm_parameter_names(vm)
    by_param = {vm_parameter_name(name): name for name in feeds}
    by_param.update({name: name for name in feeds})
    missing = [n for n in names if n not in by_param]
    if missing:
        raise ConvtuneError(f"profile: missing input(s) {', '.join(missing)}")
    return [tvm.runtime.tensor(np.ascontiguousarray(feeds[by_param[n]]), device) for n in names]


def _warm_vm(
    vm_module_path: str | os.PathLike[str],
    feeds: Mapping[str, np.ndarray],
    threads: int,
    runs: int,
) -> tuple[Any, list]:
    """The library's Relax VM and its arguments, after one warm-up run."""
    import tvm
    from tvm import relax

    from convtune.tuner.measure.runtime import load_library, set_threads

    if runs < 1:
        raise ConvtuneError(f"profile: runs must be >= 1, got {runs}")
    path = pathlib.Path(vm_module_path)
    if not path.is_file():
        raise ConvtuneError(f"profile: no such library: {path}")
    set_threads(threads)
    device = tvm.cpu()
    vm = relax.VirtualMachine(load_library(path), device)
    args = _vm_args(vm, feeds, device)
    vm["main"](*args)
    return vm, args


def tvm_layer_times(
    vm_module_path: str | os.PathLike[str],
    feeds: Mapping[str, np.ndarray],
    threads: int,
    *,
    runs: int = 5,
) -> tuple[dict[str, float], float]:
    """Median milliseconds per compiled function (fused TIR kernel) of a built Relax VM library,
    and the median milliseconds of a whole un-instrumented run of ``main``.

    ``vm_module_path`` is a library exported by ``Executable.export_library``; ``feeds`` are keyed
    by the names of ``main``'s parameters. After one warm-up run, ``runs`` instrumented runs
    alternate with ``runs`` plain ones, so that the end-to-end figure and the kernels' figures
    see the same machine: measured in separate passes seconds apart, a burst of other work in one
    of them showed a ResNet-50 on a Zen 5 VM 3.8 ms "outside kernels" (16%) that a paired pass
    a minute later put at 0. A function called several times in a run (one kernel shared by
    identical layers) reports the sum of its calls. VM builtins (allocation, reshape views) are
    left out.
    """
    vm, args = _warm_vm(vm_module_path, feeds, threads, runs)

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

    main = vm["main"]
    per_run: list[dict[str, float]] = []
    whole: list[float] = []
    for _ in range(runs):
        vm.set_instrument(instrument)
        current = {}
        main(*args)
        per_run.append(current)
        vm.set_instrument(None)
        started = time.perf_counter()
        main(*args)
        whole.append(time.perf_counter() - started)
    names = {name for run in per_run for name in run}
    kernels = {
        name: statistics.median(run.get(name, 0.0) for run in per_run) * 1e3
        for name in sorted(names)
    }
    return kernels, statistics.median(whole) * 1e3


#: How far the instrumented kernels may sum above an un-instrumented run before the pass counts
#: as disturbed. An undisturbed ResNet-50 pass sums 2-4% above (each call's timestamps include
#: the hook's own return); one taken by ``bench/run.py`` right after a tuning run on a Zen 4 VM
#: summed 63.7 ms against 34.5 end to end, and the same artifact a minute later 35.3 against 34.2.
DISTURBED_EXCESS = 0.15
#: What a disturbed profile says of itself (CLI warning, reports, the outside-kernels row).
DISTURBED_NOTE = (
    "other work took the cores while the layers were timed; profile again on a quiet machine"
)
#: Passes of :func:`consistent_times` at most: noise from other tenants comes in bursts.
PROFILE_PASSES = 3


def least_disturbed(passes: list[tuple[dict[str, float], float]]) -> tuple[int, bool]:
    """Index of the pass (per-kernel ms, end-to-end ms) whose kernels sum closest to (or below)
    its end-to-end time, and whether even that one sums more than :data:`DISTURBED_EXCESS`
    above it."""
    if not passes:
        raise ConvtuneError("profile: no pass to choose from")
    excess = [sum(layers.values()) / e2e - 1.0 if e2e > 0 else 0.0 for layers, e2e in passes]
    best = min(range(len(passes)), key=excess.__getitem__)
    return best, excess[best] > DISTURBED_EXCESS


@dataclass(frozen=True)
class KernelTimes:
    """One runtime's profile of a model: per kernel (or ONNX node), end to end, and whether the
    kernels still summed above the end-to-end time after :func:`consistent_times`' passes."""

    kernels: dict[str, float]
    end_to_end_ms: float
    disturbed: bool


def consistent_times(
    measure: Callable[[], tuple[dict[str, float], float]], passes: int = PROFILE_PASSES
) -> KernelTimes:
    """``measure()`` (per-kernel ms, end-to-end ms: :func:`tvm_layer_times` or
    :func:`ort_node_times`), checked against itself.

    A pass whose kernels sum to more than its end-to-end time by :data:`DISTURBED_EXCESS` was
    slowed by other work, so it is measured again, up to ``passes`` passes, and the least
    disturbed one is kept, flagged if even it is still disturbed (the caller says so rather than
    print numbers that do not add up).
    """
    taken: list[tuple[dict[str, float], float]] = []
    for _ in range(max(1, passes)):
        taken.append(measure())
        index, disturbed = least_disturbed(taken)
        if not disturbed:
            break
    kernels, end_to_end = taken[index]
    return KernelTimes(kernels, end_to_end, disturbed)


# ---------------------------------------------------------------------------------------------
# each measurement in a fresh process of its own (see convtune.tuner.measure.child)
# ---------------------------------------------------------------------------------------------

_TVM_LAYERS, _ORT_NODES = "tvm-layers", "ort-nodes"


def _child_main(spec_json: str) -> None:
    """One measurement of :func:`profile_model` in this fresh process, printed as one JSON line."""
    spec = json.loads(spec_json)
    feeds, threads, runs = load_feeds(spec), spec["threads"], spec["runs"]
    if spec["kind"] == _TVM_LAYERS:
        times = consistent_times(
            lambda: tvm_layer_times(spec["library"], feeds, threads, runs=runs)
        )
    else:
        model_bytes = Path(spec["model"]).read_bytes()
        times = consistent_times(lambda: ort_node_times(model_bytes, feeds, threads, runs))
    print(json.dumps(asdict(times)))


def _measure_in_children(
    ingested: IngestedModel,
    so_path: Path,
    feeds: Mapping[str, np.ndarray],
    threads: int,
    runs: int,
) -> tuple[KernelTimes, KernelTimes]:
    """:func:`consistent_times` of ``so_path``'s kernels and of onnxruntime's nodes of the model,
    each in a new process."""
    with tempfile.TemporaryDirectory(prefix="convtune-profile-") as tmp:
        model_path = Path(tmp) / "model.onnx"
        model_path.write_bytes(ingested.model.SerializeToString())
        base = {
            **save_feeds(Path(tmp), [s.name for s in ingested.inputs], feeds),
            "threads": threads,
            "runs": runs,
        }
        tvm = run_child(
            "convtune.tuner.profile",
            {**base, "kind": _TVM_LAYERS, "library": str(so_path)},
            what="profile: the TVM layers",
            env=tvm_process_env(threads),
        )
        ort_nodes = run_child(
            "convtune.tuner.profile",
            {**base, "kind": _ORT_NODES, "model": str(model_path)},
            what="profile: onnxruntime's nodes",
        )
    return KernelTimes(**tvm), KernelTimes(**ort_nodes)


# ---------------------------------------------------------------------------------------------
# model-level profile: TVM layers mapped to ONNX nodes, next to onnxruntime's nodes
# ---------------------------------------------------------------------------------------------

#: Layer name of the row that collects onnxruntime kernels no TVM layer covers (pooling, layout).
ORT_OTHER = "(onnxruntime: other nodes)"
#: Layer name of the row holding the end-to-end time no TVM kernel accounts for.
OUTSIDE_KERNELS = "(outside kernels)"
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


def task_precision(mod: IRModule, description: Mapping[str, Any]) -> str:
    """What a task's kernel multiplies: its conv's plan entry says ("int8", "bf16", "fp32"),
    else the dot-product conv block in its TIR (a QDQ classifier Gemm, made a 1×1 conv), else
    fp32."""
    # (imported here: the profile's children load this module without TVM)
    from tvm.s_tir import Schedule

    from convtune.schedules.ops.amx_conv import AMX_CONV_BLOCKS
    from convtune.schedules.ops.dot_conv import FORMATS
    from convtune.schedules.ops.nchwc import block_names

    if "precision" in description:
        return str(description["precision"])
    names = block_names(Schedule(mod))
    for fmt in FORMATS:
        if fmt.block in names or AMX_CONV_BLOCKS[fmt] in names:
            return fmt.precision
    return "fp32"


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
    winograd: dict[int, int] | None = None,
    precision: str = "fp32",
    dot_peaks: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Per-layer rows of the compiled library ``so_path`` (tuned or not) of ``ingested``.

    One row per fused TIR task of ``extract_tasks`` that runs (structurally equal layers share a
    task and a row; ``calls`` counts them) and per compiled function no task covers, slowest
    first, then :data:`OUTSIDE_KERNELS` (``ms`` = the median end-to-end time of un-instrumented
    runs, also in ``end_to_end_ms``, minus the kernels' sum, at least 0; ``disturbed`` when the
    kernels still summed above it after :func:`consistent_times`' passes), then
    :data:`ORT_OTHER` (onnxruntime's nodes no row took, with its own ``end_to_end_ms`` and
    ``disturbed``).
    ``ms`` is the summed median time of the task's functions in
    one run; ``ort_ms`` sums onnxruntime's per-node medians over the row's ``onnx_nodes`` (None
    for rows without ONNX nodes); ``flops`` = per-call FLOPs × calls; ``gflops`` = flops / ms;
    ``share`` = ms / total TVM ms. ``target`` must be the one ``so_path`` was built for: task
    extraction names the functions the same way the build did, and ``winograd`` must be the
    convs the build made Winograd (the manifest's ``winograd``), ``precision`` the build's.
    ``pct_peak`` is of ``peak_gflops`` (fp32), or, for a task whose kernel multiplies int8 or
    bf16 (:func:`task_precision`), of that precision's entry of ``dot_peaks`` where it has one.
    Each Conv/Gemm/MatMul ONNX node is in exactly one row's ``onnx_nodes``; the alternatives the
    build did not pick have no row.
    """
    from convtune.tuner.graph.extract import (
        extract_tasks,
        fuse,
        model_for_target,
        tasks_by_function,
    )
    from convtune.tuner.measure.verify import random_feeds
    from convtune.tuner.options import Algorithm, Precision

    feeds = random_feeds(ingested.inputs, seed=0)
    algorithms = tuple(Algorithm) if winograd else (Algorithm.DIRECT,)
    built_in = Precision.parse(precision)
    relax_model, tasks = extract_tasks(ingested, target, layout, algorithms, built_in)
    if winograd:
        relax_model = model_for_target(ingested, target, layout, winograd, built_in)
    task_of = {name: t.name for name, t in tasks_by_function(fuse(relax_model), tasks).items()}
    built = set(task_of.values())
    ours, theirs = _measure_in_children(ingested, so_path, feeds, threads, runs)
    ort_ms = theirs.kernels

    per_row: dict[str, float] = {}
    for symbol, ms in ours.kernels.items():
        key = task_of.get(symbol, symbol)
        per_row[key] = per_row.get(key, 0.0) + ms
    total = sum(per_row.values())
    rows: list[dict[str, Any]] = []
    attributed: set[str] = set()

    def add(
        layer: str,
        op: str,
        shape: str,
        nodes: list[str],
        calls: int,
        flops: float,
        multiplies: str = "fp32",
    ) -> None:
        ms = per_row.get(layer)
        known = [ort_ms[n] for n in nodes if n in ort_ms]
        attributed.update(nodes)
        gflops = flops / ms / 1e6 if ms and flops else None
        roof = (dot_peaks or {}).get(multiplies, peak_gflops)
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
                "pct_peak": 100.0 * gflops / roof if gflops and roof else None,
                "share": ms / total if ms is not None and total else None,
            }
        )

    for task in tasks:
        anchor = task.kind != "other"
        if task.name not in built and task.name not in per_row:
            continue  # an alternative not built, or a VM builtin (a reshape view): nothing runs
        add(
            task.name,
            task.op if anchor else _op_label(task.name),
            task.shape_text if anchor else _output_shape(task.mod["main"]),
            list(task.onnx_nodes),
            task.occurrences,
            task.flops * task.occurrences,
            task_precision(task.mod, task.description),
        )
    for symbol in per_row.keys() - {t.name for t in tasks}:
        add(symbol, _op_label(symbol), "", [], 1, 0.0)
    rows.sort(key=lambda row: -(row["ms"] or 0.0))
    # What no kernel accounts for: VM dispatch, allocation, the Python call. Measured on
    # un-instrumented runs, so the hook's own cost is not in it (0 when noise makes the sum of
    # kernels exceed the end-to-end time).
    shape = f"end to end {ours.end_to_end_ms:.3f} ms"
    if ours.disturbed:
        shape += f"; kernels sum to {total:.3f} ms: {DISTURBED_NOTE}"
    rows.append(
        {
            "layer": OUTSIDE_KERNELS, "op": "", "shape": shape,
            "onnx_nodes": [], "calls": 0, "flops": 0.0,
            "ms": max(0.0, ours.end_to_end_ms - total),
            "ort_ms": None, "gflops": None, "pct_peak": None, "share": None,
            "end_to_end_ms": ours.end_to_end_ms, "disturbed": ours.disturbed,
        }
    )  # fmt: skip
    rest = sum(ms for name, ms in ort_ms.items() if name not in attributed)
    ort_shape = f"end to end {theirs.end_to_end_ms:.3f} ms"
    if theirs.disturbed:
        ort_shape += f"; nodes sum to {sum(ort_ms.values()):.3f} ms: {DISTURBED_NOTE}"
    rows.append(
        {
            "layer": ORT_OTHER, "op": "", "shape": ort_shape, "onnx_nodes": [], "calls": 0,
            "flops": 0.0, "ms": None, "ort_ms": rest, "gflops": None, "pct_peak": None,
            "share": None, "end_to_end_ms": theirs.end_to_end_ms, "disturbed": theirs.disturbed,
        }
    )  # fmt: skip
    return rows


if __name__ == "__main__":
    _child_main(sys.argv[1])
