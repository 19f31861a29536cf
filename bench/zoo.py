"""Benchmark model zoo: ResNet-18, ResNet-50 v1.5, MobileNetV2, EfficientNet-B0 and
MobileNetV3-Large built with ``onnx.helper``.

The graphs mirror a PyTorch eval-mode export (opset 17, NCHW float32, batch 1, 224×224):
Conv (no bias) → BatchNormalization → Relu (Clip(0, 6) for MobileNetV2, Sigmoid·Mul = SiLU for
EfficientNet, HardSwish or Relu for MobileNetV3), residual Add → Relu, squeeze-excitation
(GlobalAveragePool → 1×1 Conv → act → 1×1 Conv → Sigmoid/HardSigmoid → Mul) in the EfficientNet
and MobileNetV3 blocks, GlobalAveragePool → Flatten → Gemm (1000 classes). Weights are seeded and
He-initialised, BatchNorm statistics are seeded and realistic, so activations stay finite and well
scaled.

FLOP convention (see ``convtune.tuner.graph.flops``): 2 per multiply-add of Conv/Gemm, +1 per bias
add;
BatchNorm/Relu/pool/Add count 0. With it ResNet-50 v1.5 is 8.18 GFLOP, as usually quoted.

``python bench/zoo.py`` prints each model's GFLOP, Conv/Gemm counts and unique workloads.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import sys
import tempfile
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from convtune.tuner.graph.flops import model_flops, static_shapes

OPSET = 17
#: Bump when a generator changes: cached files are keyed by it.
ZOO_VERSION = 1
CACHE_DIR = pathlib.Path(__file__).resolve().parent / ".cache"
INPUT_NAME, OUTPUT_NAME = "input", "output"
INPUT_SHAPE = (1, 3, 224, 224)
NUM_CLASSES = 1000


class _GraphBuilder:
    """Appends nodes and seeded initializers; every tensor/node gets a PyTorch-like dotted name."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.channels: dict[str, int] = {INPUT_NAME: INPUT_SHAPE[1]}

    def _init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def conv_bn(
        self,
        x: str,
        name: str,
        out_ch: int,
        kernel: int,
        *,
        stride: int = 1,
        groups: int = 1,
        act: str | None = "relu",
        bn_scale: float = 1.0,
    ) -> str:
        """Conv(no bias) → BatchNormalization → optional activation; returns the output name.

        ``bn_scale`` shrinks the BN gamma of the last conv of a residual branch so that the sum
        of a deep residual stack grows slowly (what trained networks look like).
        """
        in_ch = self.channels[x]
        fan_in = in_ch // groups * kernel * kernel
        weight = self.rng.standard_normal((out_ch, in_ch // groups, kernel, kernel))
        weight *= np.sqrt(2.0 / fan_in)
        pad = kernel // 2
        conv_out = f"{name}.out"
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, self._init(f"{name}.weight", weight)],
                [conv_out],
                name=name,
                dilations=[1, 1],
                group=groups,
                kernel_shape=[kernel, kernel],
                pads=[pad] * 4,
                strides=[stride, stride],
            )
        )
        # torchvision names: layer1.0.conv2 is followed by layer1.0.bn2.
        *prefix, last = name.split(".")
        bn_name = ".".join([*prefix, "bn" + last[4:]]) if last.startswith("conv") else f"{name}.bn"
        gamma = self.rng.uniform(0.5, 1.5, out_ch) * bn_scale
        beta = self.rng.normal(0.0, 0.1, out_ch)
        mean = self.rng.normal(0.0, 0.2, out_ch)
        var = self.rng.uniform(0.5, 2.0, out_ch)
        bn_out = f"{bn_name}.out"
        self.nodes.append(
            helper.make_node(
                "BatchNormalization",
                [
                    conv_out,
                    self._init(f"{bn_name}.weight", gamma),
                    self._init(f"{bn_name}.bias", beta),
                    self._init(f"{bn_name}.running_mean", mean),
                    self._init(f"{bn_name}.running_var", var),
                ],
                [bn_out],
                name=f"{bn_name}",
                epsilon=1e-5,
                momentum=0.9,
            )
        )
        self.channels[bn_out] = out_ch
        return self.activation(bn_out, name, act) if act else bn_out

    def activation(self, x: str, name: str, act: str) -> str:
        out = f"{name}.{act}"
        if act == "relu":
            self.nodes.append(helper.make_node("Relu", [x], [out], name=out))
        elif act == "relu6":
            lo = self._init(f"{name}.clip_min", np.array(0.0))
            hi = self._init(f"{name}.clip_max", np.array(6.0))
            self.nodes.append(helper.make_node("Clip", [x, lo, hi], [out], name=out))
        elif act == "silu":
            # torch.nn.SiLU exports as Sigmoid → Mul at opset 17.
            gate = f"{name}.sigmoid"
            self.nodes.append(helper.make_node("Sigmoid", [x], [gate], name=gate))
            self.nodes.append(helper.make_node("Mul", [x, gate], [out], name=out))
        elif act in ("sigmoid", "hardswish"):
            op = {"sigmoid": "Sigmoid", "hardswish": "HardSwish"}[act]
            self.nodes.append(helper.make_node(op, [x], [out], name=out))
        elif act == "hardsigmoid":
            # torch.nn.Hardsigmoid: relu6(x + 3) / 6.
            self.nodes.append(
                helper.make_node("HardSigmoid", [x], [out], name=out, alpha=1.0 / 6, beta=0.5)
            )
        else:
            raise ValueError(f"unknown activation {act}")
        self.channels[out] = self.channels[x]
        return out

    def conv_bias(self, x: str, name: str, out_ch: int) -> str:
        """A 1×1 Conv with bias and no BatchNorm (the squeeze-excitation and head layers)."""
        in_ch = self.channels[x]
        weight = self.rng.standard_normal((out_ch, in_ch, 1, 1)) * np.sqrt(2.0 / in_ch)
        bias = self.rng.normal(0.0, 0.1, out_ch)
        out = f"{name}.out"
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, self._init(f"{name}.weight", weight), self._init(f"{name}.bias", bias)],
                [out],
                name=name,
                kernel_shape=[1, 1],
            )
        )
        self.channels[out] = out_ch
        return out

    def squeeze_excite(self, x: str, name: str, squeeze: int, act: str, gate: str) -> str:
        """x · gate(conv(act(conv(GlobalAveragePool(x))))): per-channel attention."""
        pooled = f"{name}.avgpool"
        self.nodes.append(helper.make_node("GlobalAveragePool", [x], [pooled], name=pooled))
        self.channels[pooled] = self.channels[x]
        s = self.activation(self.conv_bias(pooled, f"{name}.fc1", squeeze), f"{name}.fc1", act)
        s = self.conv_bias(s, f"{name}.fc2", self.channels[x])
        s = self.activation(s, f"{name}.fc2", gate)
        out = f"{name}.scale"
        self.nodes.append(helper.make_node("Mul", [x, s], [out], name=out))
        self.channels[out] = self.channels[x]
        return out

    def add(self, a: str, b: str, name: str, act: str | None = None) -> str:
        out = f"{name}.add"
        self.nodes.append(helper.make_node("Add", [a, b], [out], name=out))
        self.channels[out] = self.channels[a]
        return self.activation(out, name, act) if act else out

    def max_pool(self, x: str, name: str) -> str:
        out = f"{name}.out"
        self.nodes.append(
            helper.make_node(
                "MaxPool", [x], [out], name=name, kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]
            )
        )
        self.channels[out] = self.channels[x]
        return out

    def classifier(self, x: str, hidden: tuple[int, str] | None = None) -> str:
        """GlobalAveragePool → Flatten → Gemm(transB=1) to :data:`NUM_CLASSES` logits;
        ``hidden = (features, act)`` adds a 1×1 conv + activation after the pool (MobileNetV3's
        960 → 1280 Linear + HardSwish, a Conv on the 1×1 map)."""
        self.nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap.out"], name="gap"))
        self.channels["gap.out"] = self.channels[x]
        pooled = "gap.out"
        if hidden is not None:
            features, act = hidden
            pooled = self.activation(self.conv_bias(pooled, "head", features), "head", act)
        in_features = self.channels[pooled]
        self.nodes.append(
            helper.make_node("Flatten", [pooled], ["flatten.out"], name="flatten", axis=1)
        )
        bound = 1.0 / np.sqrt(in_features)
        weight = self.rng.uniform(-bound, bound, (NUM_CLASSES, in_features))
        bias = self.rng.uniform(-bound, bound, NUM_CLASSES)
        self.nodes.append(
            helper.make_node(
                "Gemm",
                ["flatten.out", self._init("fc.weight", weight), self._init("fc.bias", bias)],
                [OUTPUT_NAME],
                name="fc",
                alpha=1.0,
                beta=1.0,
                transB=1,
            )
        )
        return OUTPUT_NAME

    def model(self, graph_name: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            graph_name,
            [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, INPUT_SHAPE)],
            [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, (1, NUM_CLASSES))],
            self.inits,
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="convtune.bench.zoo",
            producer_version=str(ZOO_VERSION),
        )
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def _resnet_stem(b: _GraphBuilder) -> str:
    x = b.conv_bn(INPUT_NAME, "conv1", 64, 7, stride=2)
    return b.max_pool(x, "maxpool")


def _basic_block(b: _GraphBuilder, x: str, name: str, planes: int, stride: int) -> str:
    out = b.conv_bn(x, f"{name}.conv1", planes, 3, stride=stride)
    out = b.conv_bn(out, f"{name}.conv2", planes, 3, act=None, bn_scale=0.5)
    shortcut = x
    if stride != 1 or b.channels[x] != planes:
        shortcut = b.conv_bn(x, f"{name}.downsample", planes, 1, stride=stride, act=None)
    return b.add(out, shortcut, name, act="relu")


def _bottleneck_v15(b: _GraphBuilder, x: str, name: str, planes: int, stride: int) -> str:
    """v1.5: the stride sits on the 3×3 conv, not on the first 1×1 (torchvision's ResNet-50)."""
    out = b.conv_bn(x, f"{name}.conv1", planes, 1)
    out = b.conv_bn(out, f"{name}.conv2", planes, 3, stride=stride)
    out = b.conv_bn(out, f"{name}.conv3", planes * 4, 1, act=None, bn_scale=0.3)
    shortcut = x
    if stride != 1 or b.channels[x] != planes * 4:
        shortcut = b.conv_bn(x, f"{name}.downsample", planes * 4, 1, stride=stride, act=None)
    return b.add(out, shortcut, name, act="relu")


def _resnet(seed: int, name: str, block: Callable, depths: Sequence[int]) -> onnx.ModelProto:
    b = _GraphBuilder(seed)
    x = _resnet_stem(b)
    for stage, (planes, depth) in enumerate(zip((64, 128, 256, 512), depths, strict=True), 1):
        for i in range(depth):
            stride = 2 if stage > 1 and i == 0 else 1
            x = block(b, x, f"layer{stage}.{i}", planes, stride)
    b.classifier(x)
    return b.model(name)


def resnet18() -> onnx.ModelProto:
    return _resnet(18, "resnet18", _basic_block, (2, 2, 2, 2))


def resnet50() -> onnx.ModelProto:
    return _resnet(50, "resnet50_v1.5", _bottleneck_v15, (3, 4, 6, 3))


def _inverted_residual(
    b: _GraphBuilder,
    x: str,
    name: str,
    *,
    expanded: int,
    out_ch: int,
    kernel: int,
    stride: int,
    act: str,
    se: tuple[int, str, str] | None = None,
) -> str:
    """MobileNet's block: 1×1 expand (skipped when ``expanded`` equals the input channels) →
    k×k depthwise → optional squeeze-excitation ``(squeeze, act, gate)`` → linear 1×1 project,
    plus the input when the shapes allow it."""
    in_ch = b.channels[x]
    out = x
    if expanded != in_ch:
        out = b.conv_bn(out, f"{name}.expand", expanded, 1, act=act)
    out = b.conv_bn(out, f"{name}.dw", expanded, kernel, stride=stride, groups=expanded, act=act)
    if se is not None:
        out = b.squeeze_excite(out, f"{name}.se", *se)
    out = b.conv_bn(out, f"{name}.project", out_ch, 1, act=None, bn_scale=0.5)
    return b.add(out, x, name) if stride == 1 and in_ch == out_ch else out


#: MobileNetV2 inverted-residual settings: expansion t, channels c, repeats n, first stride s.
_MBV2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                  (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip


def mobilenetv2() -> onnx.ModelProto:
    b = _GraphBuilder(2)
    x = b.conv_bn(INPUT_NAME, "features.0", 32, 3, stride=2, act="relu6")
    index = 1
    for t, c, n, s in _MBV2_SETTINGS:
        for i in range(n):
            expanded = b.channels[x] * t
            stride = s if i == 0 else 1
            x = _inverted_residual(
                b, x, f"features.{index}", expanded=expanded, out_ch=c, kernel=3, stride=stride,
                act="relu6",
            )  # fmt: skip
            index += 1
    x = b.conv_bn(x, f"features.{index}", 1280, 1, act="relu6")
    b.classifier(x)
    return b.model("mobilenetv2")


def _make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: nearest multiple of ``divisor``, never 10% below."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


#: EfficientNet-B0 MBConv stages: expansion t, kernel k, channels c, repeats n, first stride s.
_EFFNET_B0_SETTINGS = ((1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 3, 2),
                       (6, 5, 112, 3, 1), (6, 5, 192, 4, 2), (6, 3, 320, 1, 1))  # fmt: skip


def efficientnet_b0() -> onnx.ModelProto:
    """EfficientNet-B0 (torchvision layout, 0.39 GMAC = 0.77 GFLOP): MBConv = 1×1 expand → k×k
    depthwise (3×3 and 5×5) → squeeze-excitation (block input / 4, SiLU, Sigmoid) → 1×1
    project; SiLU activations."""
    b = _GraphBuilder(3)
    x = b.conv_bn(INPUT_NAME, "features.0", 32, 3, stride=2, act="silu")
    index = 1
    for t, k, c, n, s in _EFFNET_B0_SETTINGS:
        for i in range(n):
            in_ch = b.channels[x]
            stride = s if i == 0 else 1
            x = _inverted_residual(
                b, x, f"features.{index}", expanded=in_ch * t, out_ch=c, kernel=k, stride=stride,
                act="silu", se=(max(1, in_ch // 4), "silu", "sigmoid"),
            )  # fmt: skip
            index += 1
    x = b.conv_bn(x, f"features.{index}", 1280, 1, act="silu")
    b.classifier(x)
    return b.model("efficientnet_b0")


#: MobileNetV3-Large bnecks: kernel, expanded channels, out channels, SE, activation, stride.
_MBV3_LARGE_SETTINGS = (
    (3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2),
    (3, 72, 24, False, "relu", 1), (5, 72, 40, True, "relu", 2),
    (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
    (3, 240, 80, False, "hardswish", 2), (3, 200, 80, False, "hardswish", 1),
    (3, 184, 80, False, "hardswish", 1), (3, 184, 80, False, "hardswish", 1),
    (3, 480, 112, True, "hardswish", 1), (3, 672, 112, True, "hardswish", 1),
    (5, 672, 160, True, "hardswish", 2), (5, 960, 160, True, "hardswish", 1),
    (5, 960, 160, True, "hardswish", 1),
)  # fmt: skip


def mobilenetv3_large() -> onnx.ModelProto:
    """MobileNetV3-Large (torchvision layout, 0.22 GMAC = 0.43 GFLOP): bnecks with ReLU or
    HardSwish, 3×3 and 5×5 depthwise convs, squeeze-excitation (ReLU, HardSigmoid), a
    960 → 1280 HardSwish head."""
    b = _GraphBuilder(4)
    x = b.conv_bn(INPUT_NAME, "features.0", 16, 3, stride=2, act="hardswish")
    for index, (k, exp, c, se, act, stride) in enumerate(_MBV3_LARGE_SETTINGS, 1):
        x = _inverted_residual(
            b, x, f"features.{index}", expanded=exp, out_ch=c, kernel=k, stride=stride, act=act,
            se=(_make_divisible(exp / 4), "relu", "hardsigmoid") if se else None,
        )  # fmt: skip
    x = b.conv_bn(x, "features.16", 960, 1, act="hardswish")
    b.classifier(x, hidden=(1280, "hardswish"))
    return b.model("mobilenetv3_large")


BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet18": resnet18,
    "resnet50": resnet50,
    "mobilenetv2": mobilenetv2,
    "efficientnet_b0": efficientnet_b0,
    "mobilenetv3": mobilenetv3_large,
}


def zoo_model(name: str) -> pathlib.Path:
    """Path of the zoo model ``name`` (one of :data:`BUILDERS`), generated into ``bench/.cache``.

    The file is written atomically once and then reused; generation is deterministic, so the bytes
    are identical on every machine and every call.
    """
    if name not in BUILDERS:
        raise KeyError(f"unknown zoo model '{name}', expected one of {sorted(BUILDERS)}")
    path = CACHE_DIR / f"{name}-v{ZOO_VERSION}.onnx"
    if not path.exists():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        data = BUILDERS[name]().SerializeToString(deterministic=True)
        # Write-then-rename so that concurrent callers never see a half-written file.
        fd, tmp = tempfile.mkstemp(dir=CACHE_DIR, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return path


def workload_key(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> tuple:
    """Identity of a workload: op type, shapes of all inputs and outputs, and attributes."""
    attrs = tuple(sorted((a.name, str(helper.get_attribute_value(a))) for a in node.attribute))
    return (
        node.op_type,
        tuple(shapes.get(i) for i in node.input),
        tuple(shapes.get(o) for o in node.output),
        attrs,
    )


def describe(model: onnx.ModelProto) -> dict[str, float | int]:
    """GFLOP, Conv and Gemm counts, and number of unique Conv/Gemm workloads of a model."""
    shapes = static_shapes(onnx.shape_inference.infer_shapes(model))
    tuned = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm")]
    return {
        "gflop": model_flops(model).gflops,
        "conv": sum(n.op_type == "Conv" for n in tuned),
        "gemm": sum(n.op_type == "Gemm" for n in tuned),
        "unique_workloads": len({workload_key(n, shapes) for n in tuned}),
    }


def main() -> None:
    print(f"{'model':<12} {'GFLOP':>7} {'Conv':>5} {'Gemm':>5} {'unique':>7}  sha256[:12]  path")
    for name in BUILDERS:
        path = zoo_model(name)
        info = describe(onnx.load(path))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        print(
            f"{name:<12} {info['gflop']:>7.3f} {info['conv']:>5} {info['gemm']:>5} "
            f"{info['unique_workloads']:>7}  {digest}  {path}"
        )


if __name__ == "__main__":
    main()
    sys.exit(0)
