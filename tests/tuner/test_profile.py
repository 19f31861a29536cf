"""onnxruntime per-node times, attributed back to the ONNX nodes of the original graph."""

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.qdq import quantize_qdq
from convtune.tuner.bench import untuned_library
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.profile import (
    DISTURBED_EXCESS,
    ORT_OTHER,
    OUTSIDE_KERNELS,
    KernelTimes,
    consistent_times,
    least_disturbed,
    ort_node_times,
    profile_model,
    task_precision,
)
from convtune.tuner.target import make_target
from tests.models import _vi, make_model, three_conv_cnn, to_bytes


def _model() -> bytes:
    """heavy 3×3 conv → BN → Relu → light 1×1 conv → Add(residual) → Relu; names ≠ tensor names."""
    rng = np.random.default_rng(0)

    def init(name, shape, scale=0.1):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    inits = [
        init("w_heavy", (32, 32, 3, 3)),
        init("w_light", (32, 32, 1, 1)),
        init("gamma", (32,)),
        init("beta", (32,)),
        init("mean", (32,)),
        numpy_helper.from_array(np.ones(32, np.float32), "var"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w_heavy"], ["t1"], name="heavy", pads=[1] * 4),
        helper.make_node(
            "BatchNormalization", ["t1", "gamma", "beta", "mean", "var"], ["t2"], name="bn"
        ),
        helper.make_node("Relu", ["t2"], ["t3"], name="relu1"),
        helper.make_node("Conv", ["t3", "w_light"], ["t4"], name="light"),
        helper.make_node("Add", ["t4", "t3"], ["t5"], name="residual"),
        helper.make_node("Relu", ["t5"], ["y"], name="relu2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 32, 56, 56))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 32, 56, 56))],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


FEEDS = {"x": np.random.default_rng(1).standard_normal((1, 32, 56, 56)).astype(np.float32)}


def test_fused_kernels_are_attributed_to_their_conv():
    times, end_to_end = ort_node_times(_model(), FEEDS, threads=1, runs=5)
    assert {"heavy", "light"} <= set(times)
    # BN/Relu/Add were folded into the convs: they have no time of their own.
    assert not {"bn", "relu1", "residual", "relu2"} & set(times)
    # Anything else is a layout kernel onnxruntime added itself.
    assert all(k.startswith("Reorder") for k in set(times) - {"heavy", "light"})
    assert all(v > 0 for v in times.values())
    # 9× the FLOPs: a profiler that misattributes or mixes up nodes fails this.
    assert times["heavy"] > 2 * times["light"]
    # The unprofiled session's whole run, timed beside: about what its nodes add up to.
    assert 0.5 * sum(times.values()) < end_to_end < 2 * sum(times.values())


def test_nodes_only_skips_the_end_to_end_session():
    times, end_to_end = ort_node_times(_model(), FEEDS, threads=1, runs=2, end_to_end=False)
    assert {"heavy", "light"} <= set(times)
    assert math.isnan(end_to_end)


def test_unoptimized_graph_reports_every_onnx_node():
    # Medians of 5 runs: of 2, one run slowed by the other test worker's compile (two workers
    # share the two cores) once made the heavy conv, 9× the FLOPs, look 2.8× faster.
    times, _ = ort_node_times(_model(), FEEDS, threads=1, runs=5, optimization="none")
    assert set(times) == {"heavy", "bn", "relu1", "light", "residual", "relu2"}
    assert times["heavy"] > times["light"]


def test_user_errors():
    with pytest.raises(ConvtuneError, match="runs must be >= 1"):
        ort_node_times(_model(), FEEDS, threads=1, runs=0)
    with pytest.raises(ConvtuneError, match="unknown optimization 'max'"):
        ort_node_times(_model(), FEEDS, threads=1, runs=1, optimization="max")


def _build_fused_library(tmp_path, input_name: str = "x"):
    """A conv net through TVM's frontend and fusion passes, exported like the engine's artifact;
    its input renamed ``input_name``."""
    import tvm
    import tvm.relax.frontend.onnx
    from tvm import relax

    from tests.models import three_conv_cnn

    # 48 pixels: the untuned convs take half a millisecond, so the hook's microseconds per call and
    # a stray interrupt stay small beside them (at 16 the net ran in 80 us and a CI run with a
    # second pytest worker compiling beside it summed its kernels 26% above the whole run).
    model = three_conv_cnn(size=48)
    (graph_input,) = model.graph.input
    for node in model.graph.node:
        node.input[:] = [input_name if n == graph_input.name else n for n in node.input]
    graph_input.name = input_name
    mod = tvm.relax.frontend.onnx.from_onnx(model)
    fuse = tvm.ir.transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )
    path = tmp_path / "model.so"
    relax.build(fuse(mod), target=make_target(None)).export_library(str(path))
    return model, path


def test_tvm_layer_times_per_fused_function(tmp_path):
    from convtune.tuner.profile import tvm_layer_times
    from tests.models import random_inputs

    model, path = _build_fused_library(tmp_path)
    feeds = random_inputs(model)
    times, end_to_end = tvm_layer_times(path, feeds, threads=1, runs=7)
    convs = [name for name in times if "conv2d" in name]
    assert len(convs) >= 2, times
    assert not any(name.startswith("vm.builtin.") for name in times)
    assert all(v > 0 for v in times.values())
    # Untuned convs are naive loops: they dominate everything else in the net.
    assert sum(times[c] for c in convs) > 0.5 * sum(times.values())
    # The whole run is timed beside the kernels (alternating runs): it holds them all, and little
    # else: the naive convs take a fraction of a millisecond, the VM's own work microseconds.
    assert 0.8 * sum(times.values()) < end_to_end < 1.5 * sum(times.values())

    with pytest.raises(ConvtuneError, match="missing input"):
        tvm_layer_times(path, {}, threads=1)
    with pytest.raises(ConvtuneError, match="no such library"):
        tvm_layer_times(tmp_path / "absent.so", feeds, threads=1)


def test_an_input_whose_onnx_name_is_not_an_identifier_is_fed(tmp_path):
    """Legacy exports name their input "input.1"; TVM's VM calls the parameter "input_1"."""
    from convtune.tuner.profile import tvm_layer_times
    from tests.models import random_inputs

    model, path = _build_fused_library(tmp_path, input_name="input.1")
    feeds = random_inputs(model)
    assert list(feeds) == ["input.1"]
    times, end_to_end = tvm_layer_times(path, feeds, threads=1, runs=1)
    assert end_to_end > 0 and any("conv2d" in name for name in times)


# ---------------------------------------------------------------------------------------------
# profile_model: TVM layers of a real untuned build mapped back to ONNX nodes
# ---------------------------------------------------------------------------------------------


def _twin_conv_model() -> onnx.ModelProto:
    """conv a → relu → conv b (same shapes, other weights) → relu → pool → Gemm: a and b share
    one TVM task, so one row must list both."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), n)
        for n, s in (("wa", (8, 8, 3, 3)), ("wb", (8, 8, 3, 3)), ("wfc", (4, 8)))
    ]
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1] * 4),
        helper.make_node("Relu", ["a"], ["ra"], name="relu_a"),
        helper.make_node("Conv", ["ra", "wb"], ["b"], name="conv_b", pads=[1] * 4),
        helper.make_node("Relu", ["b"], ["rb"], name="relu_b"),
        helper.make_node("GlobalAveragePool", ["rb"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "wfc"], ["y"], name="fc", transB=1),
    ]
    return make_model(nodes, [_vi("x", [1, 8, 16, 16])], [_vi("y", [1, 4])], inits, name="twins")


@pytest.mark.parametrize("build", [_twin_conv_model, three_conv_cnn])
def test_profile_rows_cover_every_anchor_node_once(build, tmp_path):
    model = build()
    ingested = load_model(model.SerializeToString())
    target = make_target(None)
    so_path = untuned_library(ingested, target, tmp_path)
    rows = profile_model(ingested, so_path, target=target, threads=1, peak_gflops=100.0, runs=2)

    anchors = [n.name for n in model.graph.node if n.op_type in ("Conv", "Gemm")]
    listed = [name for row in rows for name in row["onnx_nodes"]]
    assert sorted(listed) == sorted(anchors)  # each exactly once
    for row in rows:
        if row["onnx_nodes"]:
            assert row["op"] in ("Conv", "Gemm")
            assert row["ms"] > 0 and row["ort_ms"] > 0 and row["gflops"] > 0
            assert row["calls"] == len(row["onnx_nodes"])
    # Non-anchor kernels (pooling) get rows of their own, with the kernel's output shape.
    assert any(not r["onnx_nodes"] and r["ms"] for r in rows)
    assert rows[-1]["layer"] == ORT_OTHER
    shares = [r["share"] for r in rows if r["share"] is not None]
    assert sum(shares) == pytest.approx(1.0)
    # The time outside kernels is a figure of its own: end to end minus the kernels' sum.
    outside = next(r for r in rows if r["layer"] == OUTSIDE_KERNELS)
    kernels = sum(r["ms"] for r in rows if r["share"] is not None)
    assert outside["ms"] == pytest.approx(max(0.0, outside["end_to_end_ms"] - kernels))
    assert outside["end_to_end_ms"] > 0.5 * kernels
    # A pass that still disagrees with its end-to-end time says so instead of passing for real.
    agrees = kernels <= (1 + DISTURBED_EXCESS) * outside["end_to_end_ms"]
    assert outside["disturbed"] is not agrees
    assert ("kernels sum to" in outside["shape"]) is outside["disturbed"]
    # onnxruntime's row says the same of its nodes against its own unprofiled runs.
    theirs = rows[-1]
    assert theirs["end_to_end_ms"] > 0
    assert ("nodes sum to" in theirs["shape"]) is theirs["disturbed"]


def test_passes_stop_at_the_first_undisturbed_one():
    passes = iter([({"conv": 58.0}, 34.5), ({"conv": 33.0}, 34.0), ({"conv": 30.0}, 34.0)])
    taken = consistent_times(lambda: next(passes), passes=3)
    assert taken == KernelTimes({"conv": 33.0}, 34.0, False)
    assert next(passes) == ({"conv": 30.0}, 34.0)  # the third pass was never measured
    bursts = iter([({"conv": 70.0}, 34.0), ({"conv": 58.0}, 34.5)])
    assert consistent_times(lambda: next(bursts), passes=2) == KernelTimes(
        {"conv": 58.0}, 34.5, True
    )


def test_the_least_disturbed_pass_is_kept_and_flagged_only_when_it_still_disagrees():
    calm = ({"conv": 30.0, "pool": 4.6}, 34.0)  # +1.8%: the hook's own cost
    burst = ({"conv": 58.0, "pool": 5.7}, 34.5)  # +85%: a neighbour took the cores
    assert least_disturbed([burst, calm]) == (1, False)
    assert least_disturbed([calm, burst]) == (0, False)
    # Only bursts: the smallest excess is kept, and flagged.
    worse = ({"conv": 70.0}, 34.0)
    assert least_disturbed([worse, burst]) == (1, True)
    # Kernels summing below end to end (time outside kernels) are the best case, not an error.
    assert least_disturbed([({"conv": 20.0}, 34.0)]) == (0, False)
    with pytest.raises(ConvtuneError):
        least_disturbed([])


def test_profile_groups_structurally_equal_layers(tmp_path):
    model = _twin_conv_model()
    ingested = load_model(model.SerializeToString())
    target = make_target(None)
    _, tasks = extract_tasks(ingested, target)
    so_path = untuned_library(ingested, target, tmp_path)
    rows = profile_model(ingested, so_path, target=target, threads=1, peak_gflops=1.0, runs=2)
    twin = next(r for r in rows if "conv_a" in r["onnx_nodes"])
    assert twin["onnx_nodes"] == ["conv_a", "conv_b"] and twin["calls"] == 2
    per_call = next(t for t in tasks if "conv_a" in t.onnx_nodes).flops
    assert twin["flops"] == pytest.approx(2 * per_call)
    # The untuned 3×3 convs dominate this model: the profile must say so.
    assert twin["share"] == max(r["share"] for r in rows if r["share"] is not None)


def _exported_style_model(named: bool) -> onnx.ModelProto:
    """PyTorch-export names (``/layer1/conv1/Conv``, tensors ``…_output_0``) or none at all (as in
    the ONNX model zoo): a stem, a residual block, a depthwise conv + Clip, a conv whose channels do
    not block (5), a MatMul + Add that onnxruntime fuses into one Gemm."""
    rng = np.random.default_rng(0)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def w(name: str, shape: tuple[int, ...]) -> str:
        array = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        inits.append(numpy_helper.from_array(array, name))
        return name

    def node(op: str, inputs: list[str], path: str, **attrs) -> str:
        out = f"{path}/{op}_output_0"
        nodes.append(
            helper.make_node(op, inputs, [out], name=f"{path}/{op}" if named else "", **attrs)
        )
        return out

    x = node("Conv", ["x", w("stem.w", (16, 3, 3, 3)), w("stem.b", (16,))], "/stem", pads=[1] * 4)
    x = node("Relu", [x], "/stem/relu")
    h = node(
        "Conv", [x, w("c1.w", (16, 16, 3, 3)), w("c1.b", (16,))], "/layer1/conv1", pads=[1] * 4
    )
    h = node("Relu", [h], "/layer1/relu")
    h = node(
        "Conv", [h, w("c2.w", (16, 16, 3, 3)), w("c2.b", (16,))], "/layer1/conv2", pads=[1] * 4
    )
    x = node("Relu", [node("Add", [h, x], "/layer1")], "/layer1/relu_1")
    inits += [
        numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0), ("hi", 6))
    ]
    d = node("Conv", [x, w("dw.w", (16, 1, 3, 3))], "/dw/conv", pads=[1] * 4, group=16)
    d = node("Clip", [d, "lo", "hi"], "/dw/clip")
    o = node("Sigmoid", [node("Conv", [d, w("odd.w", (5, 16, 1, 1))], "/odd/conv")], "/odd/act")
    f = node("Flatten", [node("GlobalAveragePool", [o], "/pool")], "/flatten")
    node("Add", [node("MatMul", [f, w("fc.w", (5, 10))], "/fc"), w("fc.b", (10,))], "/fc_add")
    nodes[-1].output[0] = "y"
    return make_model(nodes, [_vi("x", (1, 3, 32, 32))], [_vi("y", (1, 10))], inits, name="pt")


@pytest.mark.parametrize("named", [True, False], ids=["exported-names", "unnamed"])
def test_every_anchor_node_gets_its_onnxruntime_time(named):
    from convtune.tuner.graph.flops import node_key

    model = _exported_style_model(named)
    anchors = [
        node_key(n, i)
        for i, n in enumerate(model.graph.node)
        if n.op_type in ("Conv", "Gemm", "MatMul")
    ]
    assert len(anchors) == 6
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    times, _ = ort_node_times(model.SerializeToString(), feeds, threads=1, runs=3)
    assert all(times.get(a, 0.0) > 0 for a in anchors), times
    # Fused activations, adds and the BN-less residual leave no time of their own.
    folded = [
        node_key(n, i)
        for i, n in enumerate(model.graph.node)
        if n.op_type in ("Relu", "Clip", "Sigmoid", "Add")
    ]
    assert not set(folded) & set(times), times


def test_conv_transpose_is_linked_and_gets_its_onnxruntime_time():
    """A grouped ConvTranspose (the normalizer's sub-pixel form takes one group only, so it
    stays one) is a tuned layer tied to its ONNX node, and onnxruntime's time for it lands on
    that node."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 8, 3, 3)) * 0.1).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.1).astype(np.float32), "wt"),
    ]
    up_attrs = {"strides": [2, 2], "pads": [1] * 4, "output_padding": [1, 1], "group": 2}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="down", pads=[1] * 4),
        helper.make_node("ConvTranspose", ["c", "wt"], ["y"], name="up", **up_attrs),
    ]
    model = make_model(nodes, [_vi("x", (1, 8, 8, 8))], [_vi("y", (1, 8, 16, 16))], inits)
    ingested = load_model(model.SerializeToString())
    _, tasks = extract_tasks(ingested, make_target(None))
    [up] = [t for t in tasks if t.op == "ConvTranspose"]
    assert up.onnx_nodes == ["up"] and up.kind == "conv"
    assert up.description["flops"] == 2 * 8 * 16 * 16 * (4 // 2) * 3 * 3
    # Described like a Conv: the pipeline's shape text read "pads" and raised KeyError on it.
    assert up.shape_text.startswith("1x4x8x8 *ᵀ 4x4x3x3 s2,2 p1,1,1,1"), up.shape_text
    feeds = {"x": np.ones((1, 8, 8, 8), np.float32)}
    times, _ = ort_node_times(model.SerializeToString(), feeds, threads=1, runs=2)
    assert times["up"] > 0 and times["down"] > 0


def test_a_sub_pixel_conv_transpose_is_a_conv_named_after_its_node():
    """The overlapping one-group ConvTranspose the normalizer rewrites: its Conv of output
    phases is a tuned conv layer named after the ConvTranspose node."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 8, 3, 3)) * 0.1).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal((4, 8, 3, 3)) * 0.1).astype(np.float32), "wt"),
    ]
    up_attrs = {"strides": [2, 2], "pads": [1] * 4, "output_padding": [1, 1]}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="down", pads=[1] * 4),
        helper.make_node("ConvTranspose", ["c", "wt"], ["y"], name="up", **up_attrs),
    ]
    model = make_model(nodes, [_vi("x", (1, 8, 8, 8))], [_vi("y", (1, 8, 16, 16))], inits)
    _, tasks = extract_tasks(load_model(model.SerializeToString()), make_target(None))
    assert not [t for t in tasks if t.op == "ConvTranspose"]
    [phases] = [t for t in tasks if t.onnx_nodes == ["up/phases"]]
    assert phases.op == "Conv" and phases.kind == "conv"


def test_a_library_that_does_not_load_is_a_clear_error(tmp_path):
    # The layers are timed in a process of their own; its failure must reach the caller as a
    # ConvtuneError naming the measurement, not as a child's traceback or a hang.
    model = three_conv_cnn()
    ingested = load_model(model.SerializeToString())
    broken = tmp_path / "model.so"
    broken.write_bytes(b"\x7fELF not really a library")
    with pytest.raises(ConvtuneError, match="profile: the TVM layers failed in its own process"):
        profile_model(ingested, broken, target=make_target(None), threads=1, peak_gflops=1.0)


def test_each_task_is_judged_by_the_roof_of_what_it_multiplies():
    """QDQ convs and the QDQ classifier Gemm multiply int8 (their % peak is of the vpdpbusd
    roof when one is stored); the float model's convs and the elementwise kernels fp32."""
    zen4 = make_target("llvm -mcpu=znver4 -num-cores=2")
    qdq = quantize_qdq(three_conv_cnn(channels=(3, 16, 32, 32)))
    _, tasks = extract_tasks(load_model(to_bytes(qdq)), zen4, "nchwc")
    by_kind: dict[str, set[str]] = {}
    for task in tasks:
        by_kind.setdefault(task.kind, set()).add(task_precision(task.mod, task.description))
    assert by_kind["conv"] == by_kind["gemm"] == {"int8"}
    assert by_kind["other"] == {"fp32"}
    _, float_tasks = extract_tasks(load_model(to_bytes(three_conv_cnn())), zen4, "nchwc")
    assert {task_precision(t.mod, t.description) for t in float_tasks} == {"fp32"}
