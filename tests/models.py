"""Small ONNX test models built with ``onnx.helper`` and seeded numpy weights.

Every builder returns a checked ``onnx.ModelProto`` (opset 17, IR 8: what onnxruntime and TVM's
frontend both accept) whose weights are deterministic for a given ``seed``. Graph input is ``"x"``
and graph output is ``"y"`` unless stated otherwise. Nothing here downloads anything.

Helpers for tests: :func:`to_bytes`, :func:`random_inputs` (seeded feeds matching the static input
shapes) and :func:`run_onnxruntime` (reference outputs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8

Dim = int | str  # a str is a symbolic (dynamic) dim, e.g. "N"


# ---------------------------------------------------------------------------------------------
# building blocks
# ---------------------------------------------------------------------------------------------


def _weights(rng: np.random.Generator, shape: Sequence[int], scale: float | None = None):
    """He-style scaled normal weights so activations stay O(1) through several layers."""
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
    std = scale if scale is not None else float(np.sqrt(2.0 / max(fan_in, 1)))
    return (rng.standard_normal(shape) * std).astype(np.float32)


def _init(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name=name)


def _vi(name: str, shape: Sequence[Dim] | None, elem_type: int = TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem_type, None if shape is None else list(shape))


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[TensorProto] = (),
    name: str = "test_model",
    opset: int = OPSET,
    check: bool = True,
) -> onnx.ModelProto:
    """Assemble and (by default) ``onnx.checker``-check a single-graph ai.onnx model."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="convtune-tests"
    )
    model.ir_version = IR_VERSION
    if check:
        onnx.checker.check_model(model)
    return model


def _conv_out(size: int, kernel: int, stride: int, pad_total: int, dilation: int) -> int:
    return (size + pad_total - dilation * (kernel - 1) - 1) // stride + 1


# ---------------------------------------------------------------------------------------------
# convolutions
# ---------------------------------------------------------------------------------------------


def conv_net(
    *,
    batch: Dim = 1,
    in_channels: int = 3,
    out_channels: int = 6,
    size: int | tuple[int, int] = 16,
    kernel: int | tuple[int, int] = 3,
    strides: int | tuple[int, int] = 1,
    pads: int | tuple[int, int, int, int] = 1,
    dilations: int | tuple[int, int] = 1,
    group: int = 1,
    bias: bool = True,
    relu: bool = True,
    seed: int = 0,
    name: str = "conv_net",
) -> onnx.ModelProto:
    """One NCHW Conv (optionally + bias, + Relu): ``x[batch,in_channels,H,W] -> y``.

    The default 3 → 6 channels stay NCHW on every host (8 would be an output-blocked stem on an
    AVX2 host, one more task than on AVX-512), so tests that count tasks hold on both.

    ``pads`` is either one int for all sides or ONNX order ``(top, left, bottom, right)``.
    ``batch`` may be a string to make the batch dim dynamic (e.g. ``"N"``).
    """
    h, w = (size, size) if isinstance(size, int) else size
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    sh, sw = (strides, strides) if isinstance(strides, int) else strides
    dh, dw = (dilations, dilations) if isinstance(dilations, int) else dilations
    pad4 = (pads,) * 4 if isinstance(pads, int) else tuple(pads)
    if in_channels % group or out_channels % group:
        raise ValueError("in_channels and out_channels must be divisible by group")
    rng = np.random.default_rng(seed)
    inits = [_init("W", _weights(rng, (out_channels, in_channels // group, kh, kw)))]
    conv_inputs = ["x", "W"]
    if bias:
        inits.append(_init("B", (rng.standard_normal(out_channels) * 0.1).astype(np.float32)))
        conv_inputs.append("B")
    conv_out = "conv_out" if relu else "y"
    nodes = [
        helper.make_node(
            "Conv",
            conv_inputs,
            [conv_out],
            name="conv0",
            kernel_shape=[kh, kw],
            strides=[sh, sw],
            pads=list(pad4),
            dilations=[dh, dw],
            group=group,
        )
    ]
    if relu:
        nodes.append(helper.make_node("Relu", [conv_out], ["y"], name="relu0"))
    oh = _conv_out(h, kh, sh, pad4[0] + pad4[2], dh)
    ow = _conv_out(w, kw, sw, pad4[1] + pad4[3], dw)
    return make_model(
        nodes,
        [_vi("x", [batch, in_channels, h, w])],
        [_vi("y", [batch, out_channels, oh, ow])],
        inits,
        name=name,
    )


def grouped_conv(seed: int = 0) -> onnx.ModelProto:
    """Conv with group=4: 16 -> 16 channels, 3x3, 12x12."""
    return conv_net(in_channels=16, out_channels=16, size=12, group=4, seed=seed, name="grouped")


def depthwise_conv(seed: int = 0) -> onnx.ModelProto:
    """Depthwise 3x3 conv (group == channels == 8), stride 2."""
    return conv_net(
        in_channels=8, out_channels=8, size=16, group=8, strides=2, seed=seed, name="depthwise"
    )


def dilated_conv(seed: int = 0) -> onnx.ModelProto:
    """3x3 conv with dilation 2 and pad 2 (same-size output)."""
    return conv_net(
        in_channels=4, out_channels=8, size=14, dilations=2, pads=2, seed=seed, name="dilated"
    )


def asymmetric_pad_conv(seed: int = 0) -> onnx.ModelProto:
    """3x3 stride-2 conv with pads (top,left,bottom,right) = (0,0,1,1), as TF 'SAME' exports."""
    return conv_net(
        in_channels=3,
        out_channels=8,
        size=15,
        strides=2,
        pads=(0, 0, 1, 1),
        seed=seed,
        name="asym_pad",
    )


def three_conv_cnn(
    *,
    batch: Dim = 1,
    size: int = 16,
    channels: tuple[int, int, int, int] = (3, 8, 16, 16),
    seed: int = 0,
) -> onnx.ModelProto:
    """A small classifier: 3 x (Conv+Relu) -> GlobalAveragePool -> Flatten -> Gemm(10).

    Convs with the default ``channels``: 3->8 (3x3, pad 1), 8->16 (3x3, stride 2, pad 1),
    16->16 (1x1).
    """
    c0, c1, c2, c3 = channels
    rng = np.random.default_rng(seed)
    inits = [
        _init("W0", _weights(rng, (c1, c0, 3, 3))),
        _init("B0", np.zeros(c1, np.float32)),
        _init("W1", _weights(rng, (c2, c1, 3, 3))),
        _init("B1", (rng.standard_normal(c2) * 0.1).astype(np.float32)),
        _init("W2", _weights(rng, (c3, c2, 1, 1))),
        _init("B2", (rng.standard_normal(c3) * 0.1).astype(np.float32)),
        _init("Wfc", _weights(rng, (10, c3))),
        _init("Bfc", np.zeros(10, np.float32)),
    ]
    nodes = [
        helper.make_node(
            "Conv", ["x", "W0", "B0"], ["c0"], name="conv0", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node(
            "Conv",
            ["r0", "W1", "B1"],
            ["c1"],
            name="conv1",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], name="conv2", kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "Wfc", "Bfc"], ["y"], name="fc", transB=1),
    ]
    return make_model(
        nodes, [_vi("x", [batch, c0, size, size])], [_vi("y", [batch, 10])], inits, name="cnn3"
    )


# ---------------------------------------------------------------------------------------------
# dense layers
# ---------------------------------------------------------------------------------------------


def gemm_model(
    *,
    m: int = 4,
    k: int = 16,
    n: int = 8,
    trans_a: bool = False,
    trans_b: bool = True,
    alpha: float = 1.0,
    beta: float = 1.0,
    bias: bool = True,
    seed: int = 0,
) -> onnx.ModelProto:
    """``y = alpha * op(x) @ op(B) + beta * C``; x is ``[m,k]`` (``[k,m]`` if trans_a)."""
    rng = np.random.default_rng(seed)
    b_shape = (n, k) if trans_b else (k, n)
    inits = [_init("B", _weights(rng, b_shape, scale=0.25))]
    inputs = ["x", "B"]
    if bias:
        inits.append(_init("C", (rng.standard_normal(n) * 0.1).astype(np.float32)))
        inputs.append("C")
    node = helper.make_node(
        "Gemm",
        inputs,
        ["y"],
        name="gemm0",
        transA=int(trans_a),
        transB=int(trans_b),
        alpha=float(alpha),
        beta=float(beta),
    )
    x_shape = [k, m] if trans_a else [m, k]
    return make_model([node], [_vi("x", x_shape)], [_vi("y", [m, n])], inits, name="gemm")


def matmul_model(
    *, batch: Sequence[int] = (), m: int = 4, k: int = 16, n: int = 8, seed: int = 0
) -> onnx.ModelProto:
    """``y = x @ W`` with x ``[*batch, m, k]`` and a constant ``W[k, n]``."""
    rng = np.random.default_rng(seed)
    node = helper.make_node("MatMul", ["x", "W"], ["y"], name="matmul0")
    return make_model(
        [node],
        [_vi("x", [*batch, m, k])],
        [_vi("y", [*batch, m, n])],
        [_init("W", _weights(rng, (k, n), scale=0.25))],
        name="matmul",
    )


# ---------------------------------------------------------------------------------------------
# shape subgraphs, constants, dynamic dims
# ---------------------------------------------------------------------------------------------


def dynamic_reshape_model(*, size: int = 8, classes: int = 5, seed: int = 0) -> onnx.ModelProto:
    """PyTorch-style flatten with a dynamic batch ``"N"``: the shape of the Reshape is computed.

    ``x[N,3,size,size] -> Conv(4) -> Relu -> Shape -> Gather(0) -> Unsqueeze -> Concat([.., -1])
    -> Reshape -> Gemm(classes) -> y[N,classes]``. TVM's frontend cannot convert the Reshape
    until the shape subgraph is folded to a constant.
    """
    rng = np.random.default_rng(seed)
    feat = 4 * size * size
    inits = [
        _init("W", _weights(rng, (4, 3, 3, 3))),
        _init("B", (rng.standard_normal(4) * 0.1).astype(np.float32)),
        _init("gather_idx", np.array(0, np.int64)),
        _init("unsq_axes", np.array([0], np.int64)),
        _init("minus_one", np.array([-1], np.int64)),
        _init("Wfc", _weights(rng, (classes, feat))),
        _init("Bfc", np.zeros(classes, np.float32)),
    ]
    nodes = [
        helper.make_node(
            "Conv", ["x", "W", "B"], ["c"], name="conv0", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["c"], ["r"], name="relu0"),
        helper.make_node("Shape", ["r"], ["shape"], name="shape0"),
        helper.make_node("Gather", ["shape", "gather_idx"], ["batch"], name="gather0", axis=0),
        helper.make_node("Unsqueeze", ["batch", "unsq_axes"], ["batch1"], name="unsqueeze0"),
        helper.make_node("Concat", ["batch1", "minus_one"], ["new_shape"], name="concat0", axis=0),
        helper.make_node("Reshape", ["r", "new_shape"], ["flat"], name="reshape0"),
        helper.make_node("Gemm", ["flat", "Wfc", "Bfc"], ["y"], name="fc", transB=1),
    ]
    return make_model(
        nodes,
        [_vi("x", ["N", 3, size, size])],
        [_vi("y", ["N", classes])],
        inits,
        name="dyn_reshape",
    )


def constant_weight_model(seed: int = 0) -> onnx.ModelProto:
    """A Conv whose weight and bias come from ``Constant`` nodes instead of initializers."""
    rng = np.random.default_rng(seed)
    weight = _weights(rng, (6, 3, 3, 3))
    bias = (rng.standard_normal(6) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["W"], name="const_w", value=_init("W", weight)),
        helper.make_node("Constant", [], ["B"], name="const_b", value=_init("B", bias)),
        helper.make_node(
            "Conv", ["x", "W", "B"], ["y"], name="conv0", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
    ]
    return make_model(nodes, [_vi("x", [1, 3, 10, 10])], [_vi("y", [1, 6, 10, 10])], name="cw")


# ---------------------------------------------------------------------------------------------
# other CNN layers
# ---------------------------------------------------------------------------------------------


def batchnorm_model(seed: int = 0) -> onnx.ModelProto:
    """Conv(3->8, no bias) -> BatchNormalization (inference) -> Relu, on 12x12."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("W", _weights(rng, (8, 3, 3, 3))),
        _init("scale", (1.0 + rng.standard_normal(8) * 0.1).astype(np.float32)),
        _init("bn_b", (rng.standard_normal(8) * 0.1).astype(np.float32)),
        _init("mean", (rng.standard_normal(8) * 0.1).astype(np.float32)),
        _init("var", (0.5 + rng.random(8)).astype(np.float32)),
    ]
    nodes = [
        helper.make_node(
            "Conv", ["x", "W"], ["c"], name="conv0", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node(
            "BatchNormalization",
            ["c", "scale", "bn_b", "mean", "var"],
            ["bn"],
            name="bn0",
            epsilon=1e-5,
        ),
        helper.make_node("Relu", ["bn"], ["y"], name="relu0"),
    ]
    return make_model(
        nodes, [_vi("x", [1, 3, 12, 12])], [_vi("y", [1, 8, 12, 12])], inits, name="bn"
    )


def maxpool_model() -> onnx.ModelProto:
    """MaxPool 3x3 stride 2 pad 1 on ``x[1,4,16,16] -> y[1,4,8,8]`` (ResNet stem pooling)."""
    node = helper.make_node(
        "MaxPool",
        ["x"],
        ["y"],
        name="pool0",
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    return make_model([node], [_vi("x", [1, 4, 16, 16])], [_vi("y", [1, 4, 8, 8])], name="maxpool")


def global_avgpool_model(size: int = 7, channels: int = 8) -> onnx.ModelProto:
    """GlobalAveragePool ``x[1,channels,size,size] -> y[1,channels,1,1]``."""
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap0")
    x = _vi("x", [1, channels, size, size])
    return make_model([node], [x], [_vi("y", [1, channels, 1, 1])], name="gap")


def lrn_model(
    channels: int = 32, size: int = 5, *, spatial: int = 9, seed: int = 0
) -> onnx.ModelProto:
    """A 3×3 conv to ``channels`` → ReLU → LRN of ``size`` (AlexNet's α, β and bias) → a 1×1
    conv back to 8 channels, so the LRN sits between two convs as in AlexNet and GoogLeNet."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node(
            "LRN", ["r"], ["n"], name="lrn", size=size, alpha=1e-3, beta=0.75, bias=1.0
        ),
        helper.make_node("Conv", ["n", "W2"], ["y"], name="conv2"),
    ]
    inits = [
        _init("W1", (rng.standard_normal((channels, 3, 3, 3)) * 2.0).astype(np.float32)),
        _init("W2", (rng.standard_normal((8, channels, 1, 1)) * 0.3).astype(np.float32)),
    ]
    return make_model(
        nodes,
        [_vi("x", [1, 3, spatial, spatial])],
        [_vi("y", [1, 8, spatial, spatial])],
        inits,
        name="lrn",
    )


def flatten_model() -> onnx.ModelProto:
    """Flatten(axis=1) ``x[2,4,3,3] -> y[2,36]``."""
    node = helper.make_node("Flatten", ["x"], ["y"], name="flatten0", axis=1)
    return make_model([node], [_vi("x", [2, 4, 3, 3])], [_vi("y", [2, 36])], name="flatten")


def concat_model(seed: int = 0) -> onnx.ModelProto:
    """Two conv branches (1x1 -> 4 ch, 3x3 -> 6 ch) concatenated on channels: ``y[1,10,8,8]``."""
    rng = np.random.default_rng(seed)
    inits = [_init("Wa", _weights(rng, (4, 3, 1, 1))), _init("Wb", _weights(rng, (6, 3, 3, 3)))]
    nodes = [
        helper.make_node("Conv", ["x", "Wa"], ["a"], name="branch_a", kernel_shape=[1, 1]),
        helper.make_node(
            "Conv", ["x", "Wb"], ["b"], name="branch_b", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Concat", ["a", "b"], ["y"], name="concat0", axis=1),
    ]
    return make_model(
        nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 10, 8, 8])], inits, name="concat"
    )


def dense_block_model(
    *, stem: int = 32, growth: int = 16, layers: int = 4, size: int = 8, seed: int = 0
) -> onnx.ModelProto:
    """A DenseNet block as the Caffe2 export writes it: each layer (scale-shift, Relu, 1x1 conv,
    Relu, 3x3 conv) concatenates its ``growth`` channels onto the previous concat, a chain of
    ``layers`` concats; ``y`` is the last. ``first`` reads the first concat again at the end, after
    every later layer has written its channels: ``Relu(first concat)``."""
    rng = np.random.default_rng(seed)
    inits = [_init("W_stem", _weights(rng, (stem, 3, 3, 3)))]
    nodes = [
        helper.make_node("Conv", ["x", "W_stem"], ["c0"], name="stem", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
    ]  # fmt: skip
    channels = stem
    for i in range(layers):
        scale = _init(f"s{i}", rng.uniform(0.5, 1.5, (1, channels, 1, 1)).astype(np.float32))
        shift = _init(f"b{i}", rng.uniform(-0.5, 0.5, (1, channels, 1, 1)).astype(np.float32))
        inits += [
            scale,
            shift,
            _init(f"W{i}a", _weights(rng, (2 * growth, channels, 1, 1))),
            _init(f"W{i}b", _weights(rng, (growth, 2 * growth, 3, 3))),
        ]
        nodes += [
            helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"m{i}"], name=f"scale{i}"),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"shift{i}"),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}"),
            helper.make_node("Conv", [f"r{i}", f"W{i}a"], [f"p{i}"], name=f"bottleneck{i}",
                             kernel_shape=[1, 1]),
            helper.make_node("Relu", [f"p{i}"], [f"q{i}"], name=f"relu{i}b"),
            helper.make_node("Conv", [f"q{i}", f"W{i}b"], [f"f{i}"], name=f"features{i}",
                             kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Concat", [f"c{i}", f"f{i}"], [f"c{i + 1}"], name=f"concat{i}",
                             axis=1),
        ]  # fmt: skip
        channels += growth
    nodes += [
        helper.make_node("Identity", [f"c{layers}"], ["y"], name="out"),
        helper.make_node("Relu", ["c1"], ["first"], name="first_again"),
    ]
    return make_model(
        nodes,
        [_vi("x", [1, 3, size, size])],
        [_vi("y", [1, channels, size, size]), _vi("first", [1, stem + growth, size, size])],
        inits,
        name="dense_block",
    )


def resize_model() -> onnx.ModelProto:
    """Nearest-neighbour 2x upsampling with Resize (scales as an initializer): 6x6 -> 12x12."""
    inits = [_init("scales", np.array([1, 1, 2, 2], np.float32))]
    node = helper.make_node(
        "Resize",
        ["x", "", "scales"],
        ["y"],
        name="resize0",
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    return make_model(
        [node], [_vi("x", [1, 4, 6, 6])], [_vi("y", [1, 4, 12, 12])], inits, name="resize"
    )


def silu_model(
    seed: int = 0, *, in_channels: int = 3, out_channels: int = 8, size: int = 10
) -> onnx.ModelProto:
    """Conv -> x * Sigmoid(x) (SiLU/Swish as exported by PyTorch for EfficientNet/YOLO)."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("W", _weights(rng, (out_channels, in_channels, 3, 3))),
        _init("B", rng.normal(0, 0.1, out_channels).astype(np.float32)),
    ]
    nodes = [
        helper.make_node(
            "Conv", ["x", "W", "B"], ["c"], name="conv0", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid0"),
        helper.make_node("Mul", ["c", "s"], ["y"], name="mul0"),
    ]
    return make_model(
        nodes,
        [_vi("x", [1, in_channels, size, size])],
        [_vi("y", [1, out_channels, size, size])],
        inits,
        name="silu",
    )


def inverted_residual_net(*, batch: int = 2, channels: int = 32, size: int = 9, seed: int = 0):
    """Mobile blocks at a small size: 1×1 expand (×2) → Clip(0, 6) → 3×3 depthwise s1 → Clip →
    squeeze-excitation (GlobalAveragePool, 1×1, Relu, 1×1, HardSigmoid, Mul) → 1×1 project →
    residual Add → 5×5 depthwise s2 → HardSwish. Odd spatial size, ``batch`` images."""
    rng = np.random.default_rng(seed)
    hidden, squeeze = channels * 2, 8
    inits: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def conv(x: str, name: str, out_ch: int, in_ch: int, k: int, stride: int = 1, group: int = 1):
        inits.append(_init(f"{name}.w", _weights(rng, (out_ch, in_ch // group, k, k))))
        inits.append(_init(f"{name}.b", (rng.standard_normal(out_ch) * 0.1).astype(np.float32)))
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}.w", f"{name}.b"],
                [name],
                name=name,
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[k // 2] * 4,
                group=group,
            )
        )
        return name

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    inits += [_init("zero", np.array(0.0, np.float32)), _init("six", np.array(6.0, np.float32))]
    x = node("Clip", [conv("x", "expand", hidden, channels, 1), "zero", "six"], "expand.relu6")
    x = node("Clip", [conv(x, "dw1", hidden, hidden, 3, group=hidden), "zero", "six"], "dw1.relu6")
    s = node("GlobalAveragePool", [x], "se.pool")
    s = node("Relu", [conv(s, "se.fc1", squeeze, hidden, 1)], "se.relu")
    s = node("HardSigmoid", [conv(s, "se.fc2", hidden, squeeze, 1)], "se.gate", alpha=1 / 6)
    x = node("Mul", [x, s], "se.scale")
    x = node("Add", [conv(x, "project", channels, hidden, 1), "x"], "residual")
    x = conv(x, "dw2", channels, channels, 5, stride=2, group=channels)
    node("HardSwish", [x], "y")
    out = _conv_out(size, 5, 2, 4, 1)
    return make_model(
        nodes,
        [_vi("x", [batch, channels, size, size])],
        [_vi("y", [batch, channels, out, out])],
        inits,
        name="inverted_residual",
    )


# ---------------------------------------------------------------------------------------------
# helpers for tests
# ---------------------------------------------------------------------------------------------


def to_bytes(model: onnx.ModelProto) -> bytes:
    """Serialized model, as a user would upload it."""
    return model.SerializeToString()


def with_conv_weights(
    model: onnx.ModelProto, transform: Callable[[np.ndarray], np.ndarray]
) -> onnx.ModelProto:
    """A copy of ``model`` whose 4-D initializers (conv weights) are ``transform``ed."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for index, tensor in enumerate(copy.graph.initializer):
        array = numpy_helper.to_array(tensor)
        if array.ndim == 4:
            new = numpy_helper.from_array(transform(array).astype(array.dtype), tensor.name)
            copy.graph.initializer[index].CopyFrom(new)
    return copy


def static_input_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Shapes of the non-initializer graph inputs; raises ValueError on a dynamic dim."""
    init_names = {t.name for t in model.graph.initializer}
    shapes = {}
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise ValueError(f"input {vi.name!r} has a dynamic dim; pass shapes explicitly")
        shapes[vi.name] = tuple(d.dim_value for d in dims)
    return shapes


def random_inputs(
    model: onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Seeded float32 feeds for every graph input (``shapes`` overrides/pins dynamic dims)."""
    rng = np.random.default_rng(seed)
    all_shapes: Mapping[str, Sequence[int]] = dict(shapes or {}) or static_input_shapes(model)
    return {
        name: rng.standard_normal(tuple(shape)).astype(np.float32)
        for name, shape in all_shapes.items()
    }


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run ``model`` on onnxruntime's CPU provider with all graph optimizations (reference)."""
    import onnxruntime as ort  # local: importing ort is slow and not every test needs it

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(
        to_bytes(model), sess_options=options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, dict(feeds))
