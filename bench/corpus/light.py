"""The onnx wheel's model zoo: every ``light_*.onnx`` in ``onnx/backend/test/data/light``.

Real architectures (AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet,
VGG-19, ZFNet-512; opset 9, Caffe2-exported, most ending in Softmax) whose weights the wheel
stores as ConstantOfShape fills. :func:`light_model` replaces each fill with a seeded random
Constant: a constant weight would hide a wrong channel order or layout.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import Entry

WEIGHT_SEED = 0


def light_dir() -> pathlib.Path:
    """The installed onnx wheel's ``backend/test/data/light`` folder."""
    return pathlib.Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def light_model(path: pathlib.Path, seed: int = WEIGHT_SEED) -> onnx.ModelProto:
    """``path`` with each ConstantOfShape weight replaced by a seeded random Constant.

    Scaled by 1/sqrt(fan-in) so activations stay O(1) through deep nets; 1-D tensors (biases,
    BatchNorm parameters) are drawn from [0.5, 1.5]. Shape inputs only ConstantOfShape used are
    dropped.
    """
    model = onnx.load(str(path))
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in model.graph.initializer}
    nodes = []
    replaced: set[str] = set()
    for node in model.graph.node:
        shape_name = node.input[0] if node.input else ""
        if node.op_type != "ConstantOfShape" or shape_name not in inits:
            nodes.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[shape_name]))
        if len(shape) > 1:
            value = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        else:
            # Biases and BatchNorm scale/shift/mean/variance: a variance must be positive.
            value = rng.uniform(0.5, 1.5, shape)
        nodes.append(
            helper.make_node(
                "Constant",
                [],
                [node.output[0]],
                name=node.name or node.output[0],
                value=numpy_helper.from_array(value.astype(np.float32), node.output[0]),
            )
        )
        replaced.add(shape_name)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    used = {name for node in model.graph.node for name in node.input}
    dropped = replaced - used
    kept = [t for t in model.graph.initializer if t.name not in dropped]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    inputs = [vi for vi in model.graph.input if vi.name not in dropped]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    return model


ABOUT = {
    "light_bvlc_alexnet": "AlexNet: 11×11/4 stem, grouped-free convs, LRN, three Gemms, Softmax",
    "light_densenet121": "DenseNet-121: 58 Concats of growing channel counts, BN as Mul+Add",
    "light_inception_v1": "GoogLeNet: four-branch Concat blocks, LRN, Gemm, Softmax",
    "light_inception_v2": "Inception v2: BN as Unsqueeze/Mul/Add, AveragePools, Gemm, Softmax",
    "light_resnet50": "Caffe2 ResNet-50: BN, Sum residuals, Gemm, Softmax",
    "light_shufflenet": (
        "ShuffleNet: grouped convs, channel shuffle (Reshape/Transpose), Sum, Softmax"
    ),
    "light_squeezenet": "SqueezeNet 1.0: Fire modules (Concat), GlobalAveragePool, Softmax",
    "light_vgg19": "VGG-19: sixteen 3×3 convs, three Gemms, Softmax",
    "light_zfnet512": "ZFNet-512: 7×7/2 stem, LRN, three Gemms, Softmax",
}


def _entry(path: pathlib.Path) -> Entry:
    def load() -> onnx.ModelProto:
        return light_model(path)

    return Entry(
        name=path.stem,
        source=f"onnx:{path.name}",
        load=load,
        input_shapes={},  # all static 1×3×224×224
        about=ABOUT.get(path.stem, "onnx wheel model zoo, seeded weights"),
    )


ENTRIES: tuple[Entry, ...] = tuple(_entry(p) for p in sorted(light_dir().glob("light_*.onnx")))
