"""Old-opset PyTorch and tf2onnx exports, built with ``onnx.helper`` in the exporters' own idioms.

Small (32-64 px inputs, 8-32 channels, seeded weights) so that a test can tune every task, and
written node by node the way the exporters wrote them (issue #35):

- ``salient_seg_opset11``: a U²-Net-like salient-object segmenter as PyTorch 1.6 wrote it at
  opset 11: Conv + standalone BatchNormalization + Relu blocks, a dilated 3×3, ceil-mode MaxPools
  (60 → 30 → 15 → 8), and bilinear ``F.interpolate(x, size=skip.shape[2:])``: a size computed by
  ``Shape → Gather → Unsqueeze → Concat`` and ``Resize(x, roi=[], scales=[], sizes)`` with empty
  Constant ``roi``/``scales``, ``pytorch_half_pixel`` coordinates;
- ``face_det_opset9``: a CenterFace-like anchor-free face detector at opset 9, IR 3 (every
  initializer also a graph input): MobileNetV2 inverted residuals with ReLU6 as attribute-form
  ``Clip``, a ConvTranspose neck each followed by a standalone BatchNormalization, a nearest
  ``Upsample`` FPN skip, a per-channel PReLU (``nn.PReLU(C)``), and heatmap, scale, offset and
  landmark heads;
- ``sr_x2_opset9``: a ×2 super-resolution net at opset 9: unpadded 3×3 convs with LeakyRelu,
  skip connections cropped by attribute-form ``Slice``, squeeze-excitation, a ConvTranspose with
  pads (3) larger than its stride (2), an ``Upsample`` of the input as global residual, and an
  attribute-form ``Clip`` to [0, 1];
- ``tf2onnx_nhwc_cnn``: a tf2onnx-style opset-13 CNN over an NHWC input: every Conv wrapped in
  ``Transpose`` to NCHW and back, bias ``Add`` and Relu in NHWC, 3×1 and 1×3 kernels, a
  ``Reshape`` flatten and a MatMul classifier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import Entry

SEED = 0


class _Graph:
    """Nodes and seeded weights under construction, with PyTorch-style numeric names."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self) -> str:
        self.count += 1
        return str(self.count)

    def weight(self, value: np.ndarray, name: str | None = None) -> str:
        name = name or f"w{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def const(self, value: Any, dtype: Any = np.int64) -> str:
        """A ``Constant`` node, as PyTorch writes shape arithmetic."""
        out = self.fresh()
        tensor = numpy_helper.from_array(np.asarray(value, dtype=dtype), f"c{out}")
        self.nodes.append(helper.make_node("Constant", [], [out], value=tensor))
        return out

    def op(self, op: str, inputs: Sequence[str], n_out: int = 1, **attrs: Any) -> list[str]:
        outputs = [self.fresh() for _ in range(n_out)]
        name = f"{op}_{outputs[0]}"
        self.nodes.append(helper.make_node(op, list(inputs), outputs, name=name, **attrs))
        return outputs

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        k: tuple[int, int] = (3, 3),
        stride: int = 1,
        pad: Sequence[int] | None = None,
        dilation: int = 1,
        group: int = 1,
        bias: bool = True,
    ) -> str:
        fan_in = cin // group * k[0] * k[1]
        w = self.weight(
            (self.rng.standard_normal((cout, cin // group, *k)) / np.sqrt(fan_in)).astype(
                np.float32
            )
        )
        inputs = [x, w]
        if bias:
            inputs.append(self.weight((0.1 * self.rng.standard_normal(cout)).astype(np.float32)))
        if pad is None:
            pad = [dilation * (k[0] // 2), dilation * (k[1] // 2)] * 2
        return self.op(
            "Conv",
            inputs,
            kernel_shape=list(k),
            strides=[stride, stride],
            pads=list(pad),
            dilations=[dilation, dilation],
            group=group,
        )[0]

    def bn(self, x: str, c: int) -> str:
        r = self.rng
        params = [
            (1 + 0.1 * r.standard_normal(c)).astype(np.float32),
            (0.1 * r.standard_normal(c)).astype(np.float32),
            (0.1 * r.standard_normal(c)).astype(np.float32),
            (0.5 + r.random(c)).astype(np.float32),
        ]
        return self.op("BatchNormalization", [x, *map(self.weight, params)], epsilon=1e-5)[0]

    def model(
        self,
        name: str,
        inputs: Sequence[tuple[str, Sequence[int]]],
        outputs: Sequence[tuple[str, str]],
        opset: int,
        ir_version: int,
        weights_as_inputs: bool = False,
    ) -> onnx.ModelProto:
        graph_inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
        if weights_as_inputs:
            graph_inputs += [
                helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in self.inits
            ]
        graph = helper.make_graph(
            self.nodes,
            name,
            graph_inputs,
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o, _ in outputs],
            self.inits,
        )
        # Output names as the exporter's output_names.
        renames = {src: dst for src, dst in outputs}
        for node in graph.node:
            node.output[:] = [renames.get(o, o) for o in node.output]
        for vi, (_, dst) in zip(graph.output, outputs, strict=True):
            vi.name = dst
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", opset)],
            producer_name="pytorch" if "nhwc" not in name else "tf2onnx",
        )
        model.ir_version = ir_version
        inferred = onnx.shape_inference.infer_shapes(model)
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
        return model


# ---------------------------------------------------------------------------------------------
# salient-object segmenter, opset 11
# ---------------------------------------------------------------------------------------------


def _rebnconv(g: _Graph, x: str, cin: int, cout: int, dilation: int = 1) -> str:
    return g.op("Relu", [g.bn(g.conv(x, cin, cout, dilation=dilation, bias=True), cout)])[0]


def _upsample_like(g: _Graph, x: str, like: str) -> str:
    """``F.interpolate(x, size=like.shape[2:], mode="bilinear")`` as PyTorch 1.6 exported it."""
    shape = g.op("Shape", [like])[0]
    dims = []
    for axis in (2, 3):
        got = g.op("Gather", [shape, g.const(axis)], axis=0)[0]
        dims.append(g.op("Unsqueeze", [got], axes=[0])[0])
    hw = g.op("Concat", dims, axis=0)[0]
    x_shape = g.op("Shape", [x])[0]
    nc = g.op("Slice", [x_shape, g.const([0]), g.const([2]), g.const([0])])[0]
    sizes = g.op("Concat", [nc, g.op("Cast", [hw], to=TensorProto.INT64)[0]], axis=0)[0]
    roi = g.const(np.zeros(0), dtype=np.float32)
    scales = g.const(np.zeros(0), dtype=np.float32)
    return g.op(
        "Resize",
        [x, roi, scales, sizes],
        mode="linear",
        coordinate_transformation_mode="pytorch_half_pixel",
        nearest_mode="floor",
    )[0]


def salient_seg_opset11() -> onnx.ModelProto:
    g = _Graph()
    x = "input"
    hx = _rebnconv(g, x, 3, 16)  # 60
    e1 = _rebnconv(g, hx, 16, 8)
    p1 = g.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)[0]  # 30
    e2 = _rebnconv(g, p1, 8, 8)
    p2 = g.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)[0]  # 15
    e3 = _rebnconv(g, p2, 8, 8)
    p3 = g.op("MaxPool", [e3], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)[0]  # 8
    e4 = _rebnconv(g, p3, 8, 8, dilation=2)
    d3 = _rebnconv(g, g.op("Concat", [_upsample_like(g, e4, e3), e3], axis=1)[0], 16, 8)
    d2 = _rebnconv(g, g.op("Concat", [_upsample_like(g, d3, e2), e2], axis=1)[0], 16, 8)
    d1 = _rebnconv(g, g.op("Concat", [_upsample_like(g, d2, e1), e1], axis=1)[0], 16, 16)
    block = g.op("Add", [d1, hx])[0]
    side = g.conv(block, 16, 1, k=(3, 3))
    mask = g.op("Sigmoid", [side])[0]
    return g.model(
        "salient_seg",
        [(x, [1, 3, 60, 60])],
        [(mask, "mask")],
        opset=11,
        ir_version=6,
    )


# ---------------------------------------------------------------------------------------------
# anchor-free face detector, opset 9
# ---------------------------------------------------------------------------------------------


def _relu6(g: _Graph, x: str) -> str:
    return g.op("Clip", [x], min=0.0, max=6.0)[0]  # opset < 11: bounds are attributes


def _inverted_residual(g: _Graph, x: str, cin: int, cout: int, stride: int, expand: int) -> str:
    mid = cin * expand
    h = _relu6(g, g.bn(g.conv(x, cin, mid, k=(1, 1), bias=False), mid))
    h = _relu6(g, g.bn(g.conv(h, mid, mid, stride=stride, group=mid, bias=False), mid))
    h = g.bn(g.conv(h, mid, cout, k=(1, 1), bias=False), cout)
    return g.op("Add", [x, h])[0] if stride == 1 and cin == cout else h


def _up(g: _Graph, x: str, c: int) -> str:
    """ConvTranspose ×2, then a standalone BatchNormalization and Relu (not folded)."""
    w = g.weight((g.rng.standard_normal((c, c, 4, 4)) / np.sqrt(c * 4)).astype(np.float32))
    up = g.op(
        "ConvTranspose",
        [x, w],
        kernel_shape=[4, 4],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        output_padding=[0, 0],
    )[0]
    return g.op("Relu", [g.bn(up, c)])[0]


def face_det_opset9() -> onnx.ModelProto:
    g = _Graph(seed=1)
    x = "input.1"
    s = _relu6(g, g.bn(g.conv(x, 3, 16, stride=2, bias=False), 16))  # 32
    c1 = _inverted_residual(g, s, 16, 16, 1, 2)
    c2 = _inverted_residual(g, c1, 16, 24, 2, 2)  # 16
    c2 = _inverted_residual(g, c2, 24, 24, 1, 2)
    c3 = _inverted_residual(g, c2, 24, 32, 2, 2)  # 8
    lat = g.conv(c2, 24, 32, k=(1, 1), bias=False)
    n2 = g.op("Add", [_up(g, c3, 32), lat])[0]  # 16
    lat1 = g.conv(c1, 16, 32, k=(1, 1), bias=False)
    # FPN skip by F.interpolate(scale_factor=2): opset 9 writes Upsample with Constant scales
    skip = g.op("Upsample", [n2, g.const([1.0, 1.0, 2.0, 2.0], dtype=np.float32)], mode="nearest")
    n1 = g.op("Add", [g.op("Add", [_up(g, n2, 32), lat1])[0], skip[0]])[0]  # 32
    # nn.PReLU(16): one slope per channel, stored (C, 1, 1)
    slope = g.weight((0.25 + 0.05 * g.rng.standard_normal((16, 1, 1))).astype(np.float32))
    feat = g.op("PRelu", [g.bn(g.conv(n1, 32, 16, bias=False), 16), slope])[0]
    heatmap = g.op("Sigmoid", [g.conv(feat, 16, 1, k=(1, 1))])[0]
    scale = g.conv(feat, 16, 2, k=(1, 1))
    offset = g.conv(feat, 16, 2, k=(1, 1))
    landmarks = g.conv(feat, 16, 10, k=(1, 1))
    return g.model(
        "face_det",
        [(x, [1, 3, 64, 64])],
        [(heatmap, "537"), (scale, "538"), (offset, "539"), (landmarks, "540")],
        opset=9,
        ir_version=3,
        weights_as_inputs=True,
    )


# ---------------------------------------------------------------------------------------------
# ×2 super-resolution, opset 9
# ---------------------------------------------------------------------------------------------


def _crop(g: _Graph, x: str, border: int) -> str:
    """``x[:, :, b:-b, b:-b]`` as opset-9 PyTorch wrote it: attribute-form Slice."""
    return g.op("Slice", [x], axes=[2, 3], starts=[border, border], ends=[-border, -border])[0]


def _squeeze_excite(g: _Graph, x: str, c: int) -> str:
    pooled = g.op("GlobalAveragePool", [x])[0]
    squeezed = g.op("Relu", [g.conv(pooled, c, c // 4, k=(1, 1))])[0]
    gate = g.op("Sigmoid", [g.conv(squeezed, c // 4, c, k=(1, 1))])[0]
    return g.op("Mul", [x, gate])[0]


def sr_x2_opset9() -> onnx.ModelProto:
    g = _Graph(seed=2)
    x = "input"
    h0 = g.op("LeakyRelu", [g.conv(x, 3, 16, pad=[0, 0, 0, 0])], alpha=0.1)[0]  # 30
    h1 = g.op("LeakyRelu", [g.conv(h0, 16, 16, pad=[0, 0, 0, 0])], alpha=0.1)[0]  # 28
    h1 = g.op("Add", [_crop(g, h0, 1), _squeeze_excite(g, h1, 16)])[0]
    h2 = g.op("LeakyRelu", [g.conv(h1, 16, 16, pad=[0, 0, 0, 0])], alpha=0.1)[0]  # 26
    h2 = g.op("Add", [_crop(g, h1, 1), h2])[0]
    w = g.weight((g.rng.standard_normal((16, 3, 4, 4)) / 8).astype(np.float32))
    b = g.weight((0.1 * g.rng.standard_normal(3)).astype(np.float32))
    # (26 - 1)·2 - 2·3 + 4 = 48: pads 3 larger than the stride 2
    up = g.op("ConvTranspose", [h2, w, b], kernel_shape=[4, 4], strides=[2, 2], pads=[3, 3, 3, 3])[
        0
    ]
    scales = g.const([1.0, 1.0, 2.0, 2.0], dtype=np.float32)
    base = g.op("Upsample", [x, scales], mode="nearest")[0]  # 64
    out = g.op("Add", [_crop(g, base, 8), up])[0]
    out = g.op("Clip", [out], min=0.0, max=1.0)[0]
    return g.model("sr_x2", [(x, [1, 3, 32, 32])], [(out, "output")], opset=9, ir_version=4)


# ---------------------------------------------------------------------------------------------
# tf2onnx NHWC CNN, opset 13
# ---------------------------------------------------------------------------------------------


def _nhwc_conv(g: _Graph, x: str, cin: int, cout: int, k: tuple[int, int], stride: int) -> str:
    """tf2onnx's NHWC Conv2D: Transpose to NCHW, Conv without bias, Transpose back, then the
    BiasAdd and Relu in NHWC."""
    nchw = g.op("Transpose", [x], perm=[0, 3, 1, 2])[0]
    conv = g.conv(nchw, cin, cout, k=k, stride=stride, bias=False)
    nhwc = g.op("Transpose", [conv], perm=[0, 2, 3, 1])[0]
    bias = g.weight((0.1 * g.rng.standard_normal(cout)).astype(np.float32))
    return g.op("Relu", [g.op("Add", [nhwc, bias])[0]])[0]


def tf2onnx_nhwc_cnn() -> onnx.ModelProto:
    g = _Graph(seed=3)
    x = "input_1:0"
    h = _nhwc_conv(g, x, 1, 16, (3, 3), 1)  # 32×32
    h = _nhwc_conv(g, h, 16, 16, (3, 1), 1)
    h = _nhwc_conv(g, h, 16, 16, (1, 3), 1)
    h = g.op(
        "MaxPool",
        [g.op("Transpose", [h], perm=[0, 3, 1, 2])[0]],
        kernel_shape=[2, 2],
        strides=[2, 2],
    )[0]
    h = g.op("Transpose", [h], perm=[0, 2, 3, 1])[0]  # 16×16, NHWC
    h = _nhwc_conv(g, h, 16, 32, (3, 3), 2)  # 8×8
    h = _nhwc_conv(g, h, 32, 32, (3, 1), 1)
    h = _nhwc_conv(g, h, 32, 32, (1, 3), 1)
    pooled = g.op("ReduceMean", [h], axes=[1, 2], keepdims=0)[0]
    flat = g.op("Reshape", [pooled, g.weight(np.array([-1, 32], dtype=np.int64), "shape")])[0]
    w = g.weight((g.rng.standard_normal((32, 10)) / 6).astype(np.float32))
    b = g.weight((0.1 * g.rng.standard_normal(10)).astype(np.float32))
    logits = g.op("Add", [g.op("MatMul", [flat, w])[0], b])[0]
    probs = g.op("Softmax", [logits], axis=-1)[0]
    return g.model(
        "tf2onnx_nhwc", [(x, [1, 32, 32, 1])], [(probs, "Identity:0")], opset=13, ir_version=7
    )


def _entries() -> tuple[Entry, ...]:
    return (
        Entry(
            "salient_seg_opset11",
            source="built",
            load=salient_seg_opset11,
            about="U²-Net-like, opset 11: dilated 3×3, ceil-mode pools, bilinear Resize to a "
            "Shape-computed size with empty roi/scales",
        ),
        Entry(
            "face_det_opset9",
            source="built",
            load=face_det_opset9,
            about="CenterFace-like, opset 9, IR 3: MobileNetV2 with Clip ReLU6, ConvTranspose "
            "neck with standalone BatchNorm, Upsample skip, per-channel PReLU, weights as inputs",
        ),
        Entry(
            "sr_x2_opset9",
            source="built",
            load=sr_x2_opset9,
            about="×2 super-resolution, opset 9: unpadded convs, attribute-form Slice crops, "
            "squeeze-excitation, LeakyRelu, ConvTranspose pads > stride, Upsample, Clip",
        ),
        Entry(
            "tf2onnx_nhwc_cnn",
            source="built",
            load=tf2onnx_nhwc_cnn,
            about="tf2onnx opset 13, NHWC input: Transpose around every Conv, 3×1 and 1×3 "
            "kernels, NHWC bias Add, MatMul classifier",
        ),
    )


ENTRIES: tuple[Entry, ...] = _entries()
