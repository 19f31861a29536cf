"""Export-shaped graphs built with ``onnx.helper``: the structure exporters write, at tunable size.

Each model is written node by node the way its exporter writes it (PyTorch's ``torch.onnx.export``
at opset 17 for the detectors and the U-Net, Paddle's idioms for the DB head), with seeded numpy
weights, narrow channels and 64-96 px inputs so that a test can tune every task:

- ``yolov8_like``: Ultralytics' YOLOv8 export (BN folded into the convs, SiLU as ``x*Sigmoid(x)``,
  C2f = 1×1 conv + Split + bottlenecks + Concat, SPPF = three chained MaxPools + Concat, an FPN/PAN
  neck of Resize(nearest) + Concat, three decoupled heads with 2-class and 64-channel box convs,
  and the DFL decode: Reshape, Transpose, Softmax, a fixed 16→1 1×1 conv, anchors, Sigmoid);
- ``yolov5_focus``: YOLOv5's Focus stem (four strided Slices + Concat: a 12-channel conv input),
  C3 blocks, SPP (three parallel MaxPools), and 1×1 Detect convs with Reshape/Transpose/Sigmoid;
- ``db_text_det``: a DB text detector: MobileNetV3-ish backbone (HardSwish, depthwise convs), FPN
  (1×1 lateral convs, Resize + Add, 3×3 outputs, Resize + Concat) and the DB head (Conv + BN +
  ReLU + ConvTranspose + BN + ReLU + ConvTranspose + Sigmoid);
- ``unet_small``: a U-Net: double 3×3 conv blocks, MaxPool down, up by ConvTranspose and by
  bilinear Resize + 1×1 conv, Concat skips, a 2-class 1×1 head;
- ``mobilenet_softmax``: a depthwise-separable classifier whose export keeps its 1×1000 Softmax
  after the Gemm (the classifier head of the onnx wheel's light models, at tunable size).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import Entry

OPSET = 17
SEED = 0


class Graph:
    """A graph under construction: nodes, seeded initializers, unique names."""

    def __init__(self, name: str, seed: int = SEED) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.counts: dict[str, int] = {}

    def _name(self, op: str) -> str:
        n = self.counts.get(op, 0)
        self.counts[op] = n + 1
        return f"/{op}_{n}"

    def const(self, value: np.ndarray, hint: str = "const") -> str:
        name = f"onnx::{hint}_{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op: str, inputs: Sequence[str], n_out: int = 1, **attrs: Any) -> list[str]:
        node = self._name(op)
        outputs = [f"{node}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outputs, name=node, **attrs))
        return outputs

    def op1(self, op: str, inputs: Sequence[str], **attrs: Any) -> str:
        return self.op(op, inputs, **attrs)[0]

    # Layers -------------------------------------------------------------------------------

    def weight(self, shape: tuple[int, ...], gain: float = 1.0) -> np.ndarray:
        fan_in = int(np.prod(shape[1:]))
        return (self.rng.standard_normal(shape) * gain / np.sqrt(fan_in)).astype(np.float32)

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        k: int = 1,
        s: int = 1,
        g: int = 1,
        bias: bool = True,
        gain: float = 1.5,
    ) -> str:
        """Conv, pads k//2 (PyTorch's ``autopad``), bias as an exporter folds BN into it."""
        w = self.const(self.weight((cout, cin // g, k, k), gain), "conv.weight")
        inputs = [x, w]
        if bias:
            b = self.rng.uniform(-0.1, 0.1, cout).astype(np.float32)
            inputs.append(self.const(b, "conv.bias"))
        p = k // 2
        return self.op1(
            "Conv",
            inputs,
            dilations=[1, 1],
            group=g,
            kernel_shape=[k, k],
            pads=[p, p, p, p],
            strides=[s, s],
        )

    def conv_transpose(self, x: str, cin: int, cout: int, k: int = 2, s: int = 2) -> str:
        w = self.const(self.weight((cin, cout, k, k), 1.5), "convT.weight")
        b = self.const(self.rng.uniform(-0.1, 0.1, cout).astype(np.float32), "convT.bias")
        return self.op1(
            "ConvTranspose",
            [x, w, b],
            dilations=[1, 1],
            group=1,
            kernel_shape=[k, k],
            pads=[0, 0, 0, 0],
            strides=[s, s],
        )

    def bn(self, x: str, c: int) -> str:
        params = [
            self.rng.uniform(0.5, 1.5, c),  # scale
            self.rng.uniform(-0.2, 0.2, c),  # B
            self.rng.uniform(-0.1, 0.1, c),  # mean
            self.rng.uniform(0.5, 1.5, c),  # var
        ]
        names = [self.const(p.astype(np.float32), "bn") for p in params]
        return self.op1("BatchNormalization", [x, *names], epsilon=1e-5, momentum=0.9)

    def silu(self, x: str) -> str:
        """``x * sigmoid(x)``: how torch.onnx writes ``nn.SiLU`` below opset 22."""
        return self.op1("Mul", [x, self.op1("Sigmoid", [x])])

    def conv_silu(self, x: str, cin: int, cout: int, k: int = 1, s: int = 1) -> str:
        """Ultralytics' ``Conv`` after ``fuse()``: Conv (BN folded) + SiLU."""
        return self.silu(self.conv(x, cin, cout, k, s))

    def relu(self, x: str) -> str:
        return self.op1("Relu", [x])

    def maxpool(self, x: str, k: int, s: int) -> str:
        p = (k - 1) // 2 if s == 1 else 0
        return self.op1(
            "MaxPool",
            [x],
            ceil_mode=0,
            dilations=[1, 1],
            kernel_shape=[k, k],
            pads=[p, p, p, p],
            strides=[s, s],
        )

    def concat(self, xs: Sequence[str], axis: int = 1) -> str:
        return self.op1("Concat", xs, axis=axis)

    def split(self, x: str, sizes: Sequence[int], axis: int = 1) -> list[str]:
        """Split with its sizes as an input (opset 13+), as ``Tensor.chunk`` exports."""
        split = self.const(np.array(sizes, dtype=np.int64), "split")
        return self.op("Split", [x, split], n_out=len(sizes), axis=axis)

    def upsample_nearest(self, x: str, scale: int = 2) -> str:
        """``nn.Upsample(scale_factor, mode='nearest')`` at opset 13+: Resize(X, '', scales)."""
        scales = self.const(np.array([1, 1, scale, scale], dtype=np.float32), "scales")
        return self.op1(
            "Resize",
            [x, "", scales],
            coordinate_transformation_mode="asymmetric",
            cubic_coeff_a=-0.75,
            mode="nearest",
            nearest_mode="floor",
        )

    def upsample_bilinear(self, x: str, scale: int = 2) -> str:
        """``F.interpolate(mode='bilinear', align_corners=False)``."""
        scales = self.const(np.array([1, 1, scale, scale], dtype=np.float32), "scales")
        return self.op1(
            "Resize",
            [x, "", scales],
            coordinate_transformation_mode="pytorch_half_pixel",
            cubic_coeff_a=-0.75,
            mode="linear",
            nearest_mode="floor",
        )

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.op1("Reshape", [x, self.const(np.array(shape, dtype=np.int64), "shape")])

    def model(
        self,
        inputs: dict[str, tuple[int, ...]],
        outputs: dict[str, str],
        producer: tuple[str, str] = ("pytorch", "2.1.0"),
    ) -> onnx.ModelProto:
        """The model; ``outputs`` maps graph output names to the values they expose."""
        for out_name, value in outputs.items():
            self.nodes.append(helper.make_node("Identity", [value], [out_name]))
        graph = helper.make_graph(
            self.nodes,
            self.name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
            initializer=self.inits,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8
        )
        model.producer_name, model.producer_version = producer
        model = onnx.shape_inference.infer_shapes(model)
        # Output shapes as the exporter declares them: inferred, not left unknown.
        inferred = {vi.name: vi for vi in model.graph.value_info}
        for out in model.graph.output:
            if out.name in inferred:
                out.type.CopyFrom(inferred[out.name].type)
        del model.graph.value_info[:]
        onnx.checker.check_model(model, full_check=True)
        return model


# YOLOv8 ---------------------------------------------------------------------------------------


def _c2f(g: Graph, x: str, cin: int, cout: int, n: int, shortcut: bool) -> str:
    """Ultralytics C2f: cv1 1×1 → Split in two → n bottlenecks on the last → Concat → cv2."""
    c = cout // 2
    y = g.split(g.conv_silu(x, cin, 2 * c), [c, c])
    for _ in range(n):
        h = g.conv_silu(g.conv_silu(y[-1], c, c, 3), c, c, 3)
        y.append(g.op1("Add", [y[-1], h]) if shortcut else h)
    return g.conv_silu(g.concat(y), (2 + n) * c, cout)


def _sppf(g: Graph, x: str, cin: int, cout: int) -> str:
    c = cin // 2
    y = [g.conv_silu(x, cin, c)]
    for _ in range(3):
        y.append(g.maxpool(y[-1], 5, 1))
    return g.conv_silu(g.concat(y), 4 * c, cout)


def yolov8_like(
    size: int = 64,
    nc: int = 2,
    reg_max: int = 16,
    widths: tuple[int, int, int, int, int] = (8, 16, 24, 32, 48),
    head: tuple[int, int] = (16, 16),
) -> onnx.ModelProto:
    """A YOLOv8 detector, exported with its decode (``output0``: 1×(4+nc)×anchors): by default
    width 0.125 (P1-P5 of 8-48 channels); :func:`yolov8n_like` has YOLOv8n's widths."""
    w1, w2, w3, w4, w5 = widths
    g = Graph("main_graph")
    x = "images"
    x = g.conv_silu(x, 3, w1, 3, 2)  # P1/2
    x = g.conv_silu(x, w1, w2, 3, 2)  # P2/4
    x = _c2f(g, x, w2, w2, 1, True)
    x = g.conv_silu(x, w2, w3, 3, 2)  # P3/8
    p3 = _c2f(g, x, w3, w3, 1, True)
    x = g.conv_silu(p3, w3, w4, 3, 2)  # P4/16
    p4 = _c2f(g, x, w4, w4, 1, True)
    x = g.conv_silu(p4, w4, w5, 3, 2)  # P5/32
    x = _c2f(g, x, w5, w5, 1, True)
    p5 = _sppf(g, x, w5, w5)
    # FPN top-down, then PAN bottom-up
    n4 = _c2f(g, g.concat([g.upsample_nearest(p5), p4]), w5 + w4, w4, 1, False)
    o3 = _c2f(g, g.concat([g.upsample_nearest(n4), p3]), w4 + w3, w3, 1, False)
    o4 = _c2f(g, g.concat([g.conv_silu(o3, w3, w3, 3, 2), n4]), w3 + w4, w4, 1, False)
    o5 = _c2f(g, g.concat([g.conv_silu(o4, w4, w4, 3, 2), p5]), w4 + w5, w5, 1, False)
    # Detect: box (4*reg_max) and class convs per level
    c2, c3 = head
    levels = []
    anchors, strides = [], []
    for feat, ch, stride in ((o3, w3, 8), (o4, w4, 16), (o5, w5, 32)):
        box = g.conv_silu(g.conv_silu(feat, ch, c2, 3), c2, c2, 3)
        box = g.conv(box, c2, 4 * reg_max)
        cls = g.conv_silu(g.conv_silu(feat, ch, c3, 3), c3, c3, 3)
        cls = g.conv(cls, c3, nc)
        levels.append(g.reshape(g.concat([box, cls]), [1, 4 * reg_max + nc, -1]))
        h = w = size // stride
        sy, sx = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        anchors.append(np.stack([sx.ravel(), sy.ravel()]))
        strides.append(np.full(h * w, stride))
    flat = g.concat(levels, axis=2)
    n_anchors = sum(a.shape[1] for a in anchors)
    box, cls = g.split(flat, [4 * reg_max, nc])
    # DFL: softmax over the reg_max bins, expectation by a fixed 1×1 conv
    d = g.reshape(box, [1, 4, reg_max, n_anchors])
    d = g.op1("Softmax", [g.op1("Transpose", [d], perm=[0, 2, 1, 3])], axis=1)
    bins = g.const(np.arange(reg_max, dtype=np.float32).reshape(1, reg_max, 1, 1), "dfl.weight")
    d = g.op1(
        "Conv",
        [d, bins],
        dilations=[1, 1],
        group=1,
        kernel_shape=[1, 1],
        pads=[0] * 4,
        strides=[1, 1],
    )
    d = g.reshape(d, [1, 4, n_anchors])
    # dist2bbox (xywh) × stride
    lt, rb = g.split(d, [2, 2])
    anchor = g.const(np.concatenate(anchors, axis=1)[None].astype(np.float32), "anchors")
    x1y1 = g.op1("Sub", [anchor, lt])
    x2y2 = g.op1("Add", [anchor, rb])
    half = g.const(np.array(2.0, dtype=np.float32), "two")
    c_xy = g.op1("Div", [g.op1("Add", [x1y1, x2y2]), half])
    wh = g.op1("Sub", [x2y2, x1y1])
    stride_c = g.const(np.concatenate(strides)[None].astype(np.float32), "strides")
    dbox = g.op1("Mul", [g.concat([c_xy, wh]), stride_c])
    out = g.concat([dbox, g.op1("Sigmoid", [cls])])
    return g.model({"images": (1, 3, size, size)}, {"output0": out})


def yolov8n_like(size: int = 320) -> onnx.ModelProto:
    """:func:`yolov8_like` at YOLOv8n's widths (16-256 channels, head convs of 64): the int8
    benchmark's detector (``bench/qdq.py``), 2 classes."""
    return yolov8_like(size, widths=(16, 32, 64, 128, 256), head=(64, 64))


# YOLOv5 with the Focus stem --------------------------------------------------------------------


def _c3(g: Graph, x: str, cin: int, cout: int, n: int, shortcut: bool) -> str:
    c = cout // 2
    a = g.conv_silu(x, cin, c)
    for _ in range(n):
        h = g.conv_silu(g.conv_silu(a, c, c), c, c, 3)
        a = g.op1("Add", [a, h]) if shortcut else h
    b = g.conv_silu(x, cin, c)
    return g.conv_silu(g.concat([a, b]), 2 * c, cout)


def yolov5_focus(size: int = 64, nc: int = 2, na: int = 3) -> onnx.ModelProto:
    """YOLOv5 (v3-v5 era, SiLU) with the Focus space-to-depth stem: 3 → 12 channels by four
    strided Slices, then a 3×3 conv on the 12-channel, half-size tensor."""
    g = Graph("main_graph")
    x = "images"
    starts_hw = [(0, 0), (1, 0), (0, 1), (1, 1)]  # x[..., ::2, ::2], [..., 1::2, ::2], ...
    parts = []
    for sh, sw in starts_hw:
        parts.append(
            g.op1(
                "Slice",
                [
                    x,
                    g.const(np.array([sh, sw], dtype=np.int64), "starts"),
                    g.const(np.array([size, size], dtype=np.int64), "ends"),
                    g.const(np.array([2, 3], dtype=np.int64), "axes"),
                    g.const(np.array([2, 2], dtype=np.int64), "steps"),
                ],
            )
        )
    x = g.conv_silu(g.concat(parts), 12, 8, 3)  # Focus conv: 12 channels in
    x = g.conv_silu(x, 8, 16, 3, 2)  # /4
    x = _c3(g, x, 16, 16, 1, True)
    p3 = _c3(g, g.conv_silu(x, 16, 24, 3, 2), 24, 24, 1, True)  # /8
    p4 = _c3(g, g.conv_silu(p3, 24, 32, 3, 2), 32, 32, 1, True)  # /16
    x = g.conv_silu(p4, 32, 48, 3, 2)  # /32
    # SPP: three parallel MaxPools (5, 9, 13) + Concat
    c = 24
    y = g.conv_silu(x, 48, c)
    pools = [g.maxpool(y, k, 1) for k in (5, 9, 13)]
    p5 = g.conv_silu(g.concat([y, *pools]), 4 * c, 48)
    # PANet neck
    h5 = g.conv_silu(p5, 48, 32)
    n4 = _c3(g, g.concat([g.upsample_nearest(h5), p4]), 64, 32, 1, False)
    h4 = g.conv_silu(n4, 32, 24)
    o3 = _c3(g, g.concat([g.upsample_nearest(h4), p3]), 48, 24, 1, False)
    o4 = _c3(g, g.concat([g.conv_silu(o3, 24, 24, 3, 2), h4]), 48, 32, 1, False)
    o5 = _c3(g, g.concat([g.conv_silu(o4, 32, 32, 3, 2), h5]), 64, 48, 1, False)
    # Detect: 1×1 conv to na*(5+nc), view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2), sigmoid
    no = 5 + nc
    outs = []
    for feat, ch, stride in ((o3, 24, 8), (o4, 32, 16), (o5, 48, 32)):
        ny = size // stride
        p = g.reshape(g.conv(feat, ch, na * no), [1, na, no, ny, ny])
        p = g.op1("Sigmoid", [g.op1("Transpose", [p], perm=[0, 1, 3, 4, 2])])
        outs.append(g.reshape(p, [1, -1, no]))
    return g.model({"images": (1, 3, size, size)}, {"output": g.concat(outs, axis=1)})


# DB text detector -----------------------------------------------------------------------------


def _hardswish(g: Graph, x: str) -> str:
    return g.op1("HardSwish", [x])


def _ds_block(g: Graph, x: str, cin: int, cout: int, s: int) -> str:
    """Depthwise 3×3 + BN + ReLU, pointwise + BN + HardSwish (MobileNetV3-small-ish)."""
    x = g.relu(g.bn(g.conv(x, cin, cin, 3, s, g=cin, bias=False), cin))
    return _hardswish(g, g.bn(g.conv(x, cin, cout, bias=False), cout))


def db_text_det(size: int = 64) -> onnx.ModelProto:
    """DBNet: backbone at strides 4..32, FPN to 1/4, the probability-map head."""
    g = Graph("db_text_det")
    x = _hardswish(g, g.bn(g.conv("x", 3, 8, 3, 2, bias=False), 8))  # /2
    c2 = _ds_block(g, x, 8, 16, 2)  # /4
    c3 = _ds_block(g, c2, 16, 24, 2)  # /8
    c4 = _ds_block(g, c3, 24, 32, 2)  # /16
    c5 = _ds_block(g, c4, 32, 48, 2)  # /32
    inner = 32
    in2, in3, in4, in5 = (
        g.conv(c, ch, inner, bias=False) for c, ch in ((c2, 16), (c3, 24), (c4, 32), (c5, 48))
    )
    out4 = g.op1("Add", [in4, g.upsample_nearest(in5)])
    out3 = g.op1("Add", [in3, g.upsample_nearest(out4)])
    out2 = g.op1("Add", [in2, g.upsample_nearest(out3)])
    q = inner // 4
    p5 = g.upsample_nearest(g.conv(in5, inner, q, 3, bias=False), 8)
    p4 = g.upsample_nearest(g.conv(out4, inner, q, 3, bias=False), 4)
    p3 = g.upsample_nearest(g.conv(out3, inner, q, 3, bias=False), 2)
    p2 = g.conv(out2, inner, q, 3, bias=False)
    fuse = g.concat([p5, p4, p3, p2])
    # Head: Conv + BN + ReLU, ConvTranspose + BN + ReLU, ConvTranspose + Sigmoid
    h = g.relu(g.bn(g.conv(fuse, inner, q, 3, bias=False), q))
    h = g.relu(g.bn(g.conv_transpose(h, q, q), q))
    h = g.op1("Sigmoid", [g.conv_transpose(h, q, 1)])
    return g.model({"x": (1, 3, size, size)}, {"maps": h}, producer=("PaddlePaddle", "2.6"))


# U-Net ----------------------------------------------------------------------------------------


def _double_conv(g: Graph, x: str, cin: int, cout: int) -> str:
    x = g.relu(g.conv(x, cin, cout, 3))
    return g.relu(g.conv(x, cout, cout, 3))


def unet_small(size: int = 64, base: int = 8, classes: int = 2) -> onnx.ModelProto:
    """Three levels down, three up; BN folded (torch.onnx.export in eval mode)."""
    g = Graph("main_graph")
    e1 = _double_conv(g, "input", 3, base)
    e2 = _double_conv(g, g.maxpool(e1, 2, 2), base, 2 * base)
    e3 = _double_conv(g, g.maxpool(e2, 2, 2), 2 * base, 4 * base)
    b = _double_conv(g, g.maxpool(e3, 2, 2), 4 * base, 8 * base)
    # up by ConvTranspose (the original U-Net) ...
    d3 = g.conv_transpose(b, 8 * base, 4 * base)
    d3 = _double_conv(g, g.concat([d3, e3]), 8 * base, 4 * base)
    d2 = g.conv_transpose(d3, 4 * base, 2 * base)
    d2 = _double_conv(g, g.concat([d2, e2]), 4 * base, 2 * base)
    # ... and by bilinear Resize + 1×1 conv (the "bilinear=True" variant)
    d1 = g.conv(g.upsample_bilinear(d2), 2 * base, base)
    d1 = _double_conv(g, g.concat([d1, e1]), 2 * base, base)
    return g.model({"input": (1, 3, size, size)}, {"logits": g.conv(d1, base, classes)})


# A classifier ending in Softmax --------------------------------------------------------------


def _relu6(g: Graph, x: str) -> str:
    """``nn.ReLU6`` at opset 11+: Clip with min and max as inputs."""
    lo = g.const(np.array(0.0, dtype=np.float32), "min")
    hi = g.const(np.array(6.0, dtype=np.float32), "max")
    return g.op1("Clip", [x, lo, hi])


def mobilenet_softmax(size: int = 64, classes: int = 1000) -> onnx.ModelProto:
    """A MobileNetV2-ish classifier whose export keeps the Softmax (as Caffe2, Keras and
    ``nn.Sequential(..., nn.Softmax(1))`` exports do): depthwise-separable blocks with ReLU6,
    GlobalAveragePool, Flatten, a 1000-class Gemm and a 1×1000 Softmax."""
    g = Graph("main_graph")
    x = _relu6(g, g.conv("input", 3, 16, 3, 2))
    for cin, cout, s in ((16, 24, 2), (24, 32, 2), (32, 64, 2)):
        x = _relu6(g, g.conv(x, cin, cin, 3, s, g=cin))
        x = g.conv(x, cin, cout)
    x = _relu6(g, g.conv(x, 64, 128))
    x = g.op1("Flatten", [g.op1("GlobalAveragePool", [x])], axis=1)
    w = g.const(g.weight((classes, 128), 1.5), "fc.weight")
    b = g.const(g.rng.uniform(-0.1, 0.1, classes).astype(np.float32), "fc.bias")
    logits = g.op1("Gemm", [x, w, b], alpha=1.0, beta=1.0, transB=1)
    return g.model({"input": (1, 3, size, size)}, {"probs": g.op1("Softmax", [logits], axis=1)})


ENTRIES: tuple[Entry, ...] = (
    Entry(
        "yolov8_like",
        "built",
        yolov8_like,
        {},
        "YOLOv8 export at 64 px: Conv+SiLU (x*Sigmoid), C2f Split/Concat, SPPF MaxPools, "
        "Resize+Concat neck, 64- and 2-channel head convs, DFL Softmax + 16→1 conv",
    ),
    Entry(
        "yolov5_focus",
        "built",
        yolov5_focus,
        {},
        "YOLOv5 export at 64 px: Focus Slice stem (12-channel conv), C3, SPP 5/9/13, "
        "21-channel Detect convs, Reshape/Transpose/Sigmoid",
    ),
    Entry(
        "db_text_det",
        "built",
        db_text_det,
        {},
        "DB text detector at 64 px: HardSwish/depthwise backbone, FPN Resize+Add+Concat, "
        "Conv+BN+ReLU+ConvTranspose+BN+ReLU+ConvTranspose+Sigmoid head",
    ),
    Entry(
        "unet_small",
        "built",
        unet_small,
        {},
        "U-Net at 64 px: 3×3 double convs, MaxPool, ConvTranspose and bilinear Resize up, "
        "Concat skips",
    ),
    Entry(
        "mobilenet_softmax",
        "built",
        mobilenet_softmax,
        {},
        "MobileNetV2-ish classifier at 64 px: ReLU6 as Clip, depthwise convs, "
        "GlobalAveragePool, Flatten, 1000-class Gemm, 1×1000 Softmax",
    ),
)
