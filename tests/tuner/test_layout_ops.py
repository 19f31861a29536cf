"""The per-conv blocked layout (tuner/graph/layout.py) on the ops real CNNs put between convs.

Each graph is a small conv → op → conv neighbourhood built with ``onnx.helper``; it is compiled
untuned in the default (blocked) layout and must compute what onnxruntime computes. The plan must
block the convs that can be blocked and leave only the layout transforms the op needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from tvm.s_tir import meta_schedule as ms

from convtune.tuner.graph.extract import extract_tasks, model_for_target
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.graph.layout import channel_block, channel_blocks
from convtune.tuner.library import build_library
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import compare
from convtune.tuner.target import make_target
from tests import models

#: The plan is made for an AVX-512 target on every host, so its blocks (16 lanes, 8 for the
#: half blocks of 24- or 40-channel tensors) and transform counts are the same on an AVX2 host;
#: the artifact is built for the host, which runs any block size.
PLAN_TARGET = "llvm -mcpu=znver4 -num-cores=2"
LANES = 16


class Net:
    """A graph under construction: seeded weights, auto-named nodes, ``x[1,C,S,S]`` input."""

    def __init__(self, channels: int = 16, size: int = 8, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.input_shape = [1, channels, size, size]
        self.count = 0

    def _name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, array: np.ndarray) -> str:
        name = self._name("k")
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], outputs: int = 1, **attrs) -> str | list[str]:
        name = self._name(op_type.lower())
        outs = [f"{name}_out{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: int = 3,
        *,
        stride: int = 1,
        group: int = 1,
        act: str | None = "Relu",
    ) -> str:
        fan_in = cin // group * kernel * kernel
        w = (
            self.rng.standard_normal((cout, cin // group, kernel, kernel)) / np.sqrt(fan_in)
        ).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        y = self.op(
            "Conv",
            [x, self.const(w), self.const(b)],
            kernel_shape=[kernel, kernel],
            pads=[kernel // 2] * 4,
            strides=[stride, stride],
            group=group,
        )
        assert isinstance(y, str)
        if act is not None:
            out = self.op(act, [y])
            assert isinstance(out, str)
            return out
        return y

    def model(self, output: str | Sequence[str], name: str) -> onnx.ModelProto:
        outs = [output] if isinstance(output, str) else list(output)
        inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, self.input_shape)]
        draft = models.make_model(self.nodes, inputs, [], self.inits, name=name, check=False)
        draft.graph.output.extend(helper.ValueInfoProto(name=o) for o in outs)
        inferred = onnx.shape_inference.infer_shapes(draft, strict_mode=True)
        known = {vi.name: vi for vi in inferred.graph.value_info}
        return models.make_model(
            self.nodes, inputs, [known[o] for o in outs], self.inits, name=name
        )


def _ints(values: Sequence[int]) -> np.ndarray:
    return np.array(values, np.int64)


@dataclass(frozen=True)
class Case:
    build: Callable[[], onnx.ModelProto]
    #: convs the plan must block, and the layout transforms left at island edges (the graph
    #: input and output count: a blocked first conv needs one, an NCHW-only op needs two).
    blocked: int
    transforms: int


def concat() -> onnx.ModelProto:
    n = Net()
    a, b = n.conv("x", 16, 32), n.conv("x", 16, 16, kernel=1)
    c = n.op("Concat", [a, b], axis=1)
    return n.model(n.conv(c, 48, 32), "concat")


def concat_unaligned() -> onnx.ModelProto:
    n = Net()
    a, b = n.conv("x", 16, 32), n.conv("x", 16, 4, kernel=1)  # 4 channels: padded to 8
    c = n.op("Concat", [a, b], axis=1)
    return n.model(n.conv(c, 36, 32), "concat_unaligned")


def concat_mixed_blocks() -> onnx.ModelProto:
    """32 channels (blocks of 16) and 8 (one half block): the 40-channel whole is blocked by 8,
    so the 32 channels are re-blocked by 8 (blocked to blocked) and the conv after the concat
    reads 8-blocks."""
    n = Net()
    a, b = n.conv("x", 16, 32), n.conv("x", 16, 8, kernel=1)
    c = n.op("Concat", [a, b], axis=1)
    return n.model(n.conv(c, 40, 32), "concat_mixed_blocks")


def concat_half_blocks() -> onnx.ModelProto:
    """PP-OCRv6's stem: a MaxPool and a conv of 24 channels each (half blocks) concatenated to
    48 (whole blocks): concatenated by 8 and the whole re-blocked by 16 once."""
    n = Net(size=16)
    stem = n.conv("x", 16, 24, stride=2)
    pooled = n.op("MaxPool", [stem], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1])
    c = n.op("Concat", [pooled, n.conv(stem, 24, 24)], axis=1)
    return n.model(n.conv(c, 48, 32), "concat_half_blocks")


def split() -> onnx.ModelProto:
    n = Net()
    a = n.conv("x", 16, 64)
    p, q = n.op("Split", [a, n.const(_ints([32, 32]))], outputs=2, axis=1)
    return n.model(n.op("Add", [n.conv(p, 32, 32), n.conv(q, 32, 32)]), "split")


def split_unaligned() -> onnx.ModelProto:
    n = Net()
    a = n.conv("x", 16, 64)
    p, q = n.op("Split", [a, n.const(_ints([20, 44]))], outputs=2, axis=1)
    return n.model([n.conv(p, 20, 16), n.conv(q, 44, 16)], "split_unaligned")


def split_mixed_blocks() -> onnx.ModelProto:
    """64 channels (blocks of 16) split into 24 + 40 (blocks of 8): split in NCHW, each piece
    then blocked by 8 for its conv."""
    n = Net()
    a = n.conv("x", 16, 64)
    p, q = n.op("Split", [a, n.const(_ints([24, 40]))], outputs=2, axis=1)
    return n.model([n.conv(p, 24, 16), n.conv(q, 40, 16)], "split_mixed_blocks")


def slice_channels() -> onnx.ModelProto:
    n = Net()
    a = n.conv("x", 16, 64)
    s = n.op("Slice", [a, n.const(_ints([16])), n.const(_ints([48])), n.const(_ints([1]))])
    t = n.op("Slice", [s, n.const(_ints([1, 1])), n.const(_ints([7, 7])), n.const(_ints([2, 3]))])
    return n.model(n.conv(t, 32, 16), "slice_channels")


def resize(mode: str) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        n = Net()
        a = n.conv("x", 16, 32)
        scales = n.const(np.array([1, 1, 2, 2], np.float32))
        extra = {"nearest_mode": "floor"} if mode == "nearest" else {}
        ctm = "asymmetric" if mode == "nearest" else "half_pixel"
        r = n.op("Resize", [a, "", scales], mode=mode, coordinate_transformation_mode=ctm, **extra)
        return n.model(n.conv(r, 32, 16), f"resize_{mode}")

    return build


def upsample() -> onnx.ModelProto:
    """Opset 9 Upsample as old exports wrote it; the frontend's Resize path."""
    n = Net()
    a = n.conv("x", 16, 32)
    u = n.op("Resize", [a, "", n.const(np.array([1, 1, 2, 2], np.float32))], mode="nearest")
    return n.model(n.conv(u, 32, 16), "upsample")


def maxpool_ceil() -> onnx.ModelProto:
    n = Net(size=15)
    a = n.conv("x", 16, 32)
    p = n.op("MaxPool", [a], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    return n.model(n.conv(p, 32, 32), "maxpool_ceil")


def avgpool_pad() -> onnx.ModelProto:
    n = Net()
    a = n.conv("x", 16, 32)
    p = n.op(
        "AveragePool",
        [a],
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        count_include_pad=1,
    )
    return n.model(n.conv(p, 32, 32), "avgpool_pad")


def squeeze_excite() -> onnx.ModelProto:
    """GlobalAveragePool → 1x1 convs → Sigmoid scaling the feature map (SE block)."""
    n = Net()
    a = n.conv("x", 16, 32)
    g = n.op("GlobalAveragePool", [a])
    s = n.conv(n.conv(g, 32, 16, kernel=1), 16, 32, kernel=1, act="Sigmoid")
    return n.model(n.conv(n.op("Mul", [a, s]), 32, 16), "squeeze_excite")


def squeeze_excite_unblockable() -> onnx.ModelProto:
    """EfficientNet's SE: a squeeze to 20 channels (no block divides them), SiLU, excitation
    back to 48 with Sigmoid, scaling the map. The excitation reads NCHW and writes blocked, so
    the gate and the map it scales stay blocked: transforms only on the pooled pixel."""
    n = Net()
    a = n.conv("x", 16, 48)
    g = n.op("GlobalAveragePool", [a])
    squeezed = n.conv(g, 48, 20, kernel=1)
    squeezed = n.op("Mul", [squeezed, n.op("Sigmoid", [squeezed])])
    s = n.conv(squeezed, 20, 48, kernel=1, act="Sigmoid")
    return n.model(n.conv(n.op("Mul", [a, s]), 48, 16), "squeeze_excite_unblockable")


def lrn() -> onnx.ModelProto:
    n = Net()
    a = n.conv("x", 16, 32)
    r = n.op("LRN", [a], size=5, alpha=1e-4, beta=0.75, bias=1.0)
    return n.model(n.conv(r, 32, 32), "lrn")


def sum_many() -> onnx.ModelProto:
    n = Net()
    parts = [n.conv("x", 16, 32, kernel=k) for k in (1, 3, 1)]
    return n.model(n.conv(n.op("Sum", parts), 32, 16), "sum_many")


def dropout() -> onnx.ModelProto:
    n = Net()
    d = n.op("Dropout", [n.conv("x", 16, 32)])
    return n.model(n.conv(d, 32, 16), "dropout")


def flatten_gemm() -> onnx.ModelProto:
    n = Net(size=4)
    a = n.conv(n.conv("x", 16, 32), 32, 16)
    f = n.op("Flatten", [a], axis=1)
    w = (n.rng.standard_normal((10, 16 * 16)) * 0.05).astype(np.float32)
    return n.model(n.op("Gemm", [f, n.const(w)], transB=1), "flatten_gemm")


def reshape_after_conv() -> onnx.ModelProto:
    n = Net()
    a = n.conv(n.conv("x", 16, 32), 32, 16)
    return n.model(n.op("Reshape", [a, n.const(_ints([1, 16, 64]))]), "reshape")


def channel_shuffle() -> onnx.ModelProto:
    n = Net()
    a = n.conv("x", 16, 32)
    r = n.op("Reshape", [a, n.const(_ints([1, 2, 16, 8, 8]))])
    t = n.op("Transpose", [r], perm=[0, 2, 1, 3, 4])
    s = n.op("Reshape", [t, n.const(_ints([1, 32, 8, 8]))])
    return n.model(n.conv(s, 32, 16), "channel_shuffle")


def grouped_half_blocks() -> onnx.ModelProto:
    """A grouped 1x1 conv of 24 channels per group on 48-channel tensors (ShuffleNet's 544 in
    four groups of 136): 48 is half-blocked, so the grouped conv and the residual Add around
    it stay blocked."""
    n = Net()
    a = n.conv("x", 16, 48)
    b = n.conv(a, 48, 48, kernel=1, group=2)
    return n.model(n.conv(n.op("Add", [a, b]), 48, 16), "grouped_half_blocks")


def channel_shuffle_side_use() -> onnx.ModelProto:
    """The shuffle's swapped stage is also a model output: it is rebuilt in NCHW from the
    blocked source for that reader alone."""
    n = Net()
    a = n.conv("x", 16, 32)
    r = n.op("Reshape", [a, n.const(_ints([1, 2, 16, 8, 8]))])
    t = n.op("Transpose", [r], perm=[0, 2, 1, 3, 4])
    s = n.op("Reshape", [t, n.const(_ints([1, 32, 8, 8]))])
    return n.model([n.conv(s, 32, 16), t], "channel_shuffle_side_use")


def activation(kind: str) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        n = Net()
        a = n.conv("x", 16, 32, act=None)
        if kind == "silu":
            y = n.op("Mul", [a, n.op("Sigmoid", [a])])
        elif kind == "relu6":
            y = n.op("Clip", [a, n.const(np.float32(0)), n.const(np.float32(6))])
        elif kind == "prelu":
            slope = (n.rng.random((32, 1, 1)) * 0.3).astype(np.float32)
            y = n.op("PRelu", [a, n.const(slope)])
        elif kind == "leakyrelu":
            y = n.op("LeakyRelu", [a], alpha=0.1)
        elif kind == "softmax":
            y = n.op("Softmax", [a], axis=1)
        else:
            y = n.op({"hardswish": "HardSwish", "sigmoid": "Sigmoid"}[kind], [a])
        assert isinstance(y, str)
        return n.model(n.conv(y, 32, 16), kind)

    return build


def conv_transpose() -> onnx.ModelProto:
    n = Net()
    a = n.conv("x", 16, 32)
    w = (n.rng.standard_normal((32, 16, 2, 2)) * 0.2).astype(np.float32)
    t = n.op("ConvTranspose", [a, n.const(w)], kernel_shape=[2, 2], strides=[2, 2])
    return n.model(n.conv(t, 16, 16), "conv_transpose")


def depth_to_space(mode: str) -> Callable[[], onnx.ModelProto]:
    """ONNX DepthToSpace between blocked convs: DCR moves whole blocks (carried blocked); CRD
    (PyTorch's PixelShuffle) interleaves channels within a block, so it runs NCHW."""

    def build() -> onnx.ModelProto:
        n = Net()
        a = n.conv("x", 16, 64)
        up = n.op("DepthToSpace", [a], blocksize=2, mode=mode)
        return n.model(n.conv(up, 16, 16), f"depth_to_space_{mode.lower()}")

    return build


def depth_to_space_half_blocks() -> onnx.ModelProto:
    """A DCR shuffle to 24 channels from a 96-channel NCHW16c conv (PP-OCR det's head): 24 is
    no whole number of 16-lane blocks, so the source is re-blocked to 8 lanes at the low
    resolution and the shuffle moves 8-lane vectors; before, it ran NCHW (two transforms)."""
    n = Net()
    a = n.conv("x", 16, 96, kernel=1)
    up = n.op("DepthToSpace", [a], blocksize=2, mode="DCR")
    return n.model(n.conv(up, 24, 16), "depth_to_space_half_blocks")


def pad_between_convs() -> onnx.ModelProto:
    """ONNX Pad of the rows and columns (bottom and right by 1, PP-OCRv6's stem) between
    blocked convs: the frontend emits it as TOPI's pad, read back and carried blocked."""
    n = Net()
    a = n.conv("x", 16, 16)
    padded = n.op("Pad", [a, n.const(_ints([0, 0, 0, 0, 0, 0, 1, 1]))])
    return n.model(n.conv(padded, 16, 16, kernel=2), "pad_between_convs")


def depth_to_space_side_use() -> onnx.ModelProto:
    """A DCR shuffle whose permuted 6-D tensor is also read by another op: that reader gets it
    back unblocked, the shuffle itself stays blocked."""
    n = Net()
    a = n.conv("x", 16, 64)
    split = n.op("Reshape", [a, n.const(_ints([1, 2, 2, 16, 8, 8]))])
    moved = n.op("Transpose", [split], perm=[0, 3, 4, 1, 5, 2])
    up = n.op("Reshape", [moved, n.const(_ints([1, 16, 16, 16]))])
    side = n.op("ReduceMax", [n.op("Neg", [moved])], axes=[3, 5], keepdims=0)
    return n.model([n.conv(up, 16, 16), side], "depth_to_space_side_use")


def batchnorm_after_add() -> onnx.ModelProto:
    """A BatchNormalization no conv precedes (DB heads put one after their upsampling): its
    decomposition's (output, mean, variance) tuple must not stop the blocked layout."""
    n = Net()
    a = n.conv("x", 16, 32)
    s = n.op("Add", [a, n.conv(a, 32, 32)])
    rng = np.random.default_rng(3)
    scale, bias, mean = (n.const(rng.standard_normal(32).astype(np.float32)) for _ in range(3))
    var = n.const(rng.uniform(0.5, 2.0, 32).astype(np.float32))
    bn = n.op("BatchNormalization", [s, scale, bias, mean, var])
    return n.model(n.conv(n.op("Relu", [bn]), 32, 16), "batchnorm_after_add")


def conv_transpose_overlapping() -> onnx.ModelProto:
    """A 4x4 stride-2 ConvTranspose (FCN upsampling): the normalizer's sub-pixel form, a 2x2
    conv to its four output phases, a pixel shuffle and a slice of its pads."""
    n = Net()
    a = n.conv("x", 16, 32)
    w = (n.rng.standard_normal((32, 16, 4, 4)) * 0.2).astype(np.float32)
    t = n.op(
        "ConvTranspose", [a, n.const(w)], kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1]
    )
    return n.model(n.conv(t, 16, 16), "conv_transpose_overlapping")


def depthwise_grouped() -> onnx.ModelProto:
    n = Net()
    a = n.conv("x", 16, 32)
    d = n.conv(a, 32, 32, group=32)  # depthwise of 32 channels: blocked
    g = n.conv(d, 32, 64, kernel=1)
    return n.model(n.conv(g, 64, 64, group=2), "depthwise_grouped")  # 32/group: blocked


def depthwise_between_grouped() -> onnx.ModelProto:
    """ShuffleNet's unit: grouped 1x1 convs of 6 channels per group (NCHW) around a stride-2
    depthwise conv of 24 channels, blocked alone (NCHW8c) between two register transposes.
    The image is 10x10: 100 pixels and 25 after the stride, neither a multiple of 16."""
    n = Net(size=10)
    g = n.conv("x", 16, 24, kernel=1, group=4)
    d = n.conv(g, 24, 24, stride=2, group=24, act=None)
    return n.model(n.conv(d, 24, 24, kernel=1, group=4), "depthwise_between_grouped")


def shuffle_into_depthwise() -> onnx.ModelProto:
    """ShuffleNet's unit in full: the channel shuffle of the grouped conv's NCHW output (4
    groups of 6) and the move into blocks of the depthwise conv after it are one pass."""
    n = Net(size=10)
    g = n.conv("x", 16, 24, kernel=1, group=4)
    r = n.op("Reshape", [g, n.const(_ints([1, 4, 6, 10, 10]))])
    t = n.op("Transpose", [r], perm=[0, 2, 1, 3, 4])
    s = n.op("Reshape", [t, n.const(_ints([1, 24, 10, 10]))])
    d = n.conv(s, 24, 24, group=24, act=None)
    return n.model(n.conv(d, 24, 24, kernel=1, group=4), "shuffle_into_depthwise")


def strided_pool_alone() -> onnx.ModelProto:
    """ShuffleNet's shortcut: a 3x3 stride-2 average pool of a grouped conv's NCHW output (6
    channels per group), blocked alone between two register transposes."""
    n = Net(size=10)
    g = n.conv("x", 16, 24, kernel=1, group=4)
    p = n.op("AveragePool", [g], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return n.model(n.conv(p, 24, 24, kernel=1, group=4), "strided_pool_alone")


def stem_depthwise_odd() -> onnx.ModelProto:
    """RGB stem (NCHW in, blocked out), a blocked depthwise, then 20 channels: padded to 24
    (NCHW out), read NCHW by a stem-kind conv."""
    n = Net(channels=3, size=12)
    s = n.conv("x", 3, 16, stride=2)
    d = n.conv(s, 16, 16, group=16)
    o = n.conv(d, 16, 20, kernel=1)
    return n.model(n.conv(o, 20, 32), "stem_depthwise_odd")


def odd_channels() -> onnx.ModelProto:
    n = Net()
    a = n.conv("x", 16, 20)  # 20 is no multiple of 16 nor of 8: padded to 24, NCHW out
    return n.model(n.conv(n.conv(a, 20, 32), 32, 32), "odd_channels")


def narrow_stem_prelu() -> onnx.ModelProto:
    """MTCNN P-Net's start: a 3→10 conv (no block divides 10: computed as 16 by the stem kernel,
    NCHW out), PReLU, MaxPool, a 10→16 stem, PReLU carried blocked into a 16→32 conv."""
    n = Net(channels=3, size=14)

    def prelu(x: str, channels: int) -> str:
        slope = (n.rng.random((channels, 1, 1)) * 0.3).astype(np.float32)
        y = n.op("PRelu", [x, n.const(slope)])
        assert isinstance(y, str)
        return y

    a = prelu(n.conv("x", 3, 10, act=None), 10)
    pooled = n.op("MaxPool", [a], kernel_shape=[2, 2], strides=[2, 2])
    assert isinstance(pooled, str)
    b = prelu(n.conv(pooled, 10, 16, act=None), 16)
    return n.model(n.conv(b, 16, 32), "narrow_stem_prelu")


def inverted_residuals_half_blocks() -> onnx.ModelProto:
    """MobileNetV2's 24-channel stage: 24 = 3 half blocks. The stem writes 8-blocks, the
    expand reads 8-blocks and writes 16-blocks (144), the depthwise keeps 16, the project goes
    back to 8, the residual add and a stride-2 5x5 depthwise at 40 channels stay in 8-blocks."""
    n = Net(channels=3, size=14)
    x = n.conv("x", 3, 24, stride=2)
    for _ in range(2):
        e = n.conv(x, 24, 144, kernel=1, act="Relu")
        d = n.conv(e, 144, 144, group=144)
        x = n.op("Add", [x, n.conv(d, 144, 24, kernel=1, act=None)])
    w = n.conv(x, 24, 40, kernel=1)
    d = n.conv(w, 40, 40, kernel=5, stride=2, group=40)
    pooled = n.op("MaxPool", [d], kernel_shape=[2, 2], strides=[1, 1])
    return n.model(n.conv(pooled, 40, 32, kernel=1), "inverted_residuals_half_blocks")


def yolo_head() -> onnx.ModelProto:
    """A YOLOv8-style neck/head: SiLU convs, C2f Split/Concat, nearest Upsample, and boxes via
    Reshape/Transpose/Concat of two scales."""
    n = Net(size=16)

    def silu_conv(x: str, cin: int, cout: int, **kw) -> str:
        c = n.conv(x, cin, cout, act=None, **kw)
        out = n.op("Mul", [c, n.op("Sigmoid", [c])])
        assert isinstance(out, str)
        return out

    p3 = silu_conv("x", 16, 32)
    p4 = silu_conv(p3, 32, 64, stride=2)
    a, b = n.op(
        "Split", [silu_conv(p4, 64, 64, kernel=1), n.const(_ints([32, 32]))], outputs=2, axis=1
    )
    c2f = silu_conv(n.op("Concat", [a, b, silu_conv(b, 32, 32)], axis=1), 96, 64, kernel=1)
    up = n.op("Resize", [c2f, "", n.const(np.array([1, 1, 2, 2], np.float32))], mode="nearest")
    f3 = silu_conv(n.op("Concat", [up, p3], axis=1), 96, 32)
    boxes = []
    for feature, channels, size in ((f3, 32, 16), (c2f, 64, 8)):
        head = n.conv(silu_conv(feature, channels, 32), 32, 21, kernel=1, act=None)
        flat = n.op("Reshape", [head, n.const(_ints([1, 21, size * size]))])
        boxes.append(flat)
    cat = n.op("Concat", boxes, axis=2)
    return n.model(n.op("Transpose", [cat], perm=[0, 2, 1]), "yolo_head")


def unet_decoder() -> onnx.ModelProto:
    """Encoder convs with a skip, ConvTranspose up, Concat with the skip, convs."""
    n = Net(size=16)
    e1 = n.conv(n.conv("x", 16, 32), 32, 32)
    e2 = n.conv(n.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]), 32, 64)
    w = (n.rng.standard_normal((64, 32, 2, 2)) * 0.1).astype(np.float32)
    up = n.op("ConvTranspose", [e2, n.const(w)], kernel_shape=[2, 2], strides=[2, 2])
    d1 = n.conv(n.conv(n.op("Concat", [up, e1], axis=1), 64, 32), 32, 32)
    return n.model(n.conv(d1, 32, 2, kernel=1, act="Sigmoid"), "unet_decoder")


CASES: dict[str, Case] = {
    "concat": Case(concat, blocked=3, transforms=2),
    "concat_unaligned": Case(concat_unaligned, blocked=3, transforms=4),
    # the input's, the output's and one 16 → 8 re-blocking of the 32-channel piece
    "concat_mixed_blocks": Case(concat_mixed_blocks, blocked=3, transforms=3),
    # the input's, the output's and one 8 → 16 re-blocking of the whole
    "concat_half_blocks": Case(concat_half_blocks, blocked=3, transforms=3),
    "split": Case(split, blocked=3, transforms=2),
    "split_unaligned": Case(split_unaligned, blocked=3, transforms=4),
    "split_mixed_blocks": Case(split_mixed_blocks, blocked=3, transforms=6),
    "slice_channels": Case(slice_channels, blocked=2, transforms=2),
    "resize_nearest": Case(resize("nearest"), blocked=2, transforms=2),
    "resize_linear": Case(resize("linear"), blocked=2, transforms=2),
    "upsample": Case(upsample, blocked=2, transforms=2),
    "maxpool_ceil": Case(maxpool_ceil, blocked=2, transforms=2),
    "avgpool_count_include_pad": Case(avgpool_pad, blocked=2, transforms=2),
    "squeeze_excite": Case(squeeze_excite, blocked=4, transforms=2),
    # only the pooled pixel goes to NCHW for the squeeze; the excitation writes blocked
    "squeeze_excite_unblockable": Case(squeeze_excite_unblockable, blocked=4, transforms=3),
    # one blocked LRN kernel (tuner/graph/lrn.py): input in, output out
    "lrn": Case(lrn, blocked=2, transforms=2),
    "sum_many": Case(sum_many, blocked=4, transforms=2),
    "dropout": Case(dropout, blocked=2, transforms=2),
    "flatten_gemm": Case(flatten_gemm, blocked=2, transforms=2),
    "reshape_after_conv": Case(reshape_after_conv, blocked=2, transforms=2),
    # input in, output out, and the shuffle itself: two register transposes, out of the
    # blocks and back into them in shuffled order (was one gather from block to block, and
    # before that the shuffle in NCHW between a transform to NCHW and one back)
    "channel_shuffle": Case(channel_shuffle, blocked=2, transforms=4),
    # and the side reader's NCHW copy of the source
    "channel_shuffle_side_use": Case(channel_shuffle_side_use, blocked=2, transforms=5),
    # input in, output out: the 48-channel tensors in NCHW8c (tuner/graph/layout.py's
    # half_blocked_counts), the grouped conv blocked between them
    "grouped_half_blocks": Case(grouped_half_blocks, blocked=3, transforms=2),
    "silu": Case(activation("silu"), blocked=2, transforms=2),
    "hardswish": Case(activation("hardswish"), blocked=2, transforms=2),
    "sigmoid": Case(activation("sigmoid"), blocked=2, transforms=2),
    "relu6": Case(activation("relu6"), blocked=2, transforms=2),
    "prelu": Case(activation("prelu"), blocked=2, transforms=2),
    "leakyrelu": Case(activation("leakyrelu"), blocked=2, transforms=2),
    "softmax": Case(activation("softmax"), blocked=2, transforms=4),
    # kernel == stride: a blocked 1x1 conv and a depth-to-space carried blocked
    "conv_transpose": Case(conv_transpose, blocked=3, transforms=2),
    "depth_to_space_dcr": Case(depth_to_space("DCR"), blocked=2, transforms=2),
    "depth_to_space_crd": Case(depth_to_space("CRD"), blocked=2, transforms=4),
    # input in, output out, and the side reader's unblocked copy (no layout_transform: a
    # permute and a reshape)
    "depth_to_space_side_use": Case(depth_to_space_side_use, blocked=2, transforms=2),
    # input in, output out, and the 96-channel source re-blocked 16 -> 8 lanes at 8x8
    "depth_to_space_half_blocks": Case(depth_to_space_half_blocks, blocked=2, transforms=3),
    "pad_between_convs": Case(pad_between_convs, blocked=2, transforms=2),
    # The decomposition's (output, mean, variance)[0] is read as the blocked output itself:
    # input in, output out (canonicalizing the bindings instead broke ShuffleNet's channel
    # shuffle on AVX2, 9 -> 33 transforms)
    "batchnorm_after_add": Case(batchnorm_after_add, blocked=3, transforms=2),
    # a blocked conv of its four output phases, a shuffle and a slice carried blocked
    "conv_transpose_overlapping": Case(conv_transpose_overlapping, blocked=3, transforms=2),
    "depthwise_grouped": Case(depthwise_grouped, blocked=4, transforms=2),
    # into and out of the depthwise conv (was NCHW: 0 blocked before the register transposes)
    "depthwise_between_grouped": Case(depthwise_between_grouped, blocked=1, transforms=2),
    # the same two, the first of them through the channel shuffle (was 2 with the shuffle
    # in NCHW before it)
    "shuffle_into_depthwise": Case(shuffle_into_depthwise, blocked=1, transforms=2),
    # into and out of the pool (was 0: the pool in NCHW)
    "strided_pool_alone": Case(strided_pool_alone, blocked=0, transforms=2),
    # the stem needs no transform in; the padded 20-channel conv writes NCHW (its own
    # transform), the 20→32 conv reads it NCHW, and its blocked output goes back to NCHW
    "stem_depthwise_odd": Case(stem_depthwise_odd, blocked=4, transforms=2),
    "odd_channels": Case(odd_channels, blocked=3, transforms=3),
    # the padded stem's own (its 10 real channels written NCHW, in its kernel), and output
    # out; the 10→16 stem reads NCHW and the PReLU after it stays blocked (was 3: PReLU to NCHW
    # and back)
    "narrow_stem_prelu": Case(narrow_stem_prelu, blocked=3, transforms=2),
    "inverted_residuals_half_blocks": Case(
        inverted_residuals_half_blocks, blocked=10, transforms=1
    ),
    "yolo_head": Case(yolo_head, blocked=10, transforms=3),
    "unet_decoder": Case(unet_decoder, blocked=7, transforms=2),
}


@pytest.fixture(scope="module")
def target():
    return make_target(PLAN_TARGET)


@pytest.fixture(scope="module")
def host():
    return make_target()


@pytest.mark.parametrize("name", CASES)
def test_blocked_neighbourhood_matches_onnxruntime(name: str, target, host, tmp_path: Path) -> None:
    case = CASES[name]
    original = case.build()
    ingested = load_model(models.to_bytes(original))
    relax_model = model_for_target(ingested, target)
    plan = relax_model.plan
    assert plan is not None and not relax_model.fallbacks, relax_model.fallbacks
    assert plan.blocked_convs == case.blocked, [c.as_dict() for c in plan.convs]
    assert plan.transforms == case.transforms
    for conv in plan.convs:
        assert conv.blocked or conv.reason, conv  # every NCHW conv says why
    so_path = build_library(relax_model, ms.database.MemoryDatabase(), host, tmp_path)
    feeds = models.random_inputs(original, seed=1)
    ours = Artifact.load(so_path, ["x"]).run(feeds)
    reference = [np.asarray(r) for r in models.run_onnxruntime(original, feeds)]
    assert [o.shape for o in ours] == [r.shape for r in reference]
    result = compare(ours, reference, [o.name for o in ingested.outputs], seed=1)
    assert result.passed, result


def test_each_conv_task_names_its_layout(target) -> None:
    ingested = load_model(models.to_bytes(stem_depthwise_odd()))
    _, tasks = extract_tasks(ingested, target)
    by_node = {node: t for t in tasks if t.kind == "conv" for node in t.onnx_nodes}
    order = [n.name for n in ingested.model.graph.node if n.op_type == "Conv"]
    described = [
        (by_node[n].description["layout"], by_node[n].description["layout_reason"]) for n in order
    ]
    blocked = f"NCHW{LANES}c"
    assert [layout for layout, _ in described] == [
        f"NCHW→{blocked}",
        blocked,
        f"{blocked}→NCHW",  # 16 → 20 channels, computed as 24
        f"NCHW→{blocked}",  # 20 → 32, the 20 channels read NCHW
    ]
    assert "stem" in described[0][1] and "depthwise" in described[1][1]
    assert "20 output channels computed as 24" in described[2][1]
    assert "20 input channels" in described[3][1] and "stem" in described[3][1]
    # Each conv is its own task, tied to its node: the padded one although its kernel
    # computes 24 channels where the ONNX node has 20.
    assert len({id(by_node[n]) for n in order}) == len(order)


def test_a_tensor_is_blocked_by_a_whole_register_else_half_of_one() -> None:
    assert channel_block(48, 16) == 16
    assert channel_block(24, 16) == 8  # MobileNetV2's 24-channel stage on AVX-512
    assert channel_block(20, 16) is None
    assert channel_block(24, 8) == 8
    assert channel_block(12, 8) is None  # no 4-lane blocks on AVX2
    # What an NCHW conv's reason names as the smallest block: 8 on both.
    assert channel_blocks(16) == (16, 8) and channel_blocks(8) == (8,)


def test_a_channel_shuffle_moves_into_blocks_in_one_pass(target) -> None:
    """The shuffle's reshape, transpose and reshape leave the model: the kernel moving the
    grouped conv's output into blocks reads its planes in shuffled order."""
    ingested = load_model(models.to_bytes(shuffle_into_depthwise()))
    mod = model_for_target(ingested, target).mod
    names = [gvar.name_hint for gvar in mod.functions]
    assert not [name for name in names if "transpose" in name], names
    assert [name for name in names if name.startswith("to_blocked")], names


def test_half_blocked_outputs_are_computed_padded_where_the_whole_register_is_faster(
    host, tmp_path: Path
) -> None:
    """On a CPU whose 512-bit FMA is full width the 144→24 projections compute 32 channels in
    16-channel blocks and move the 24 real ones into 8-blocks; on Zen 4 (two 256-bit halves)
    they stay 8-blocked. Either way the model matches onnxruntime."""
    original = inverted_residuals_half_blocks()
    ingested = load_model(models.to_bytes(original))
    for mcpu, padded in (("znver5", True), ("znver4", False)):
        plan = model_for_target(ingested, make_target(f"llvm -mcpu={mcpu} -num-cores=2")).plan
        assert plan is not None
        projects = [c for c in plan.convs if (c.in_channels, c.out_channels) == (144, 24)]
        assert len(projects) == 2
        for conv in projects:
            assert conv.layout == "NCHW16c→NCHW8c"
            assert conv.computed_channels == (32 if padded else 24), conv
            assert ("24 output channels computed as 32" in conv.reason) == padded, conv.reason
        # the same islands: the moves out of the 16-blocks are reshapes, no transform
        assert (plan.blocked_convs, plan.transforms) == (10, 1)
    relax_model = model_for_target(ingested, make_target("llvm -mcpu=znver5 -num-cores=2"))
    so_path = build_library(relax_model, ms.database.MemoryDatabase(), host, tmp_path)
    feeds = models.random_inputs(original, seed=1)
    ours = Artifact.load(so_path, ["x"]).run(feeds)
    reference = [np.asarray(r) for r in models.run_onnxruntime(original, feeds)]
    assert compare(ours, reference, [o.name for o in ingested.outputs], seed=1).passed


def squeeze_excitation_half_bottleneck() -> onnx.ModelProto:
    """PP-OCRv6's squeeze-excitation: a global mean of 96 channels, a one-pixel 96→24 1×1
    conv (24 = 3 half blocks), 24→96 back, hard-sigmoid, the product."""
    n = Net(channels=16, size=6)
    x = n.conv("x", 16, 96, kernel=1, act="Relu")
    mean = n.op("ReduceMean", [x], axes=[2, 3], keepdims=1)
    squeezed = n.conv(mean, 96, 24, kernel=1, act="Relu")
    gate = n.op("HardSigmoid", [n.conv(squeezed, 24, 96, kernel=1, act=None)])
    return n.model(n.conv(n.op("Mul", [x, gate]), 96, 16, kernel=1), "se_half_bottleneck")


def test_a_one_pixel_conv_into_half_blocks_is_blocked_where_it_is_computed_padded(
    host, tmp_path: Path
) -> None:
    """On a full-width-FMA CPU the one-pixel 96→24 conv is computed as 32 channels and
    returned in 8-channel blocks; the one-pixel reshape into the held block must start from
    those (it started from 16 and PP-OCRv6 small rec's conv fell back to NCHW)."""
    original = squeeze_excitation_half_bottleneck()
    ingested = load_model(models.to_bytes(original))
    relax_model = model_for_target(ingested, make_target("llvm -mcpu=znver5 -num-cores=2"))
    plan = relax_model.plan
    assert plan is not None and not plan.fallback
    (squeeze,) = [c for c in plan.convs if (c.in_channels, c.out_channels) == (96, 24)]
    assert squeeze.layout.endswith("NCHW8c") and squeeze.computed_channels == 32, squeeze
    assert plan.blocked_convs == len(plan.convs)
    so_path = build_library(relax_model, ms.database.MemoryDatabase(), host, tmp_path)
    feeds = models.random_inputs(original, seed=1)
    ours = Artifact.load(so_path, ["x"]).run(feeds)
    reference = [np.asarray(r) for r in models.run_onnxruntime(original, feeds)]
    assert compare(ours, reference, [o.name for o in ingested.outputs], seed=1).passed


def test_a_concat_of_half_blocks_is_reblocked_by_a_copy_of_runs(target) -> None:
    """The 8 → 16 re-blocking of the whole concat is the copy of 8-channel runs
    (``channel_blocking.reblocking_kernel``), not TVM's gather."""
    mod = model_for_target(load_model(models.to_bytes(concat_half_blocks())), target).mod
    names = [gvar.name_hint for gvar in mod.functions]
    assert [name for name in names if name.startswith("reblock")], names
    assert not [name for name in names if "layout_transform" in name], names
