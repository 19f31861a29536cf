"""Floating-point operation counts of the compute-heavy ONNX nodes (Conv, Gemm, MatMul).

Convention (used everywhere in convtune, and the one that gives the well-known 8.18 GFLOP of
ResNet-50 v1.5): one multiply-add is 2 FLOPs; a bias or ``beta*C`` addition is 1 FLOP per output
element; a scaling by ``alpha``/``beta`` other than 1 adds 1 FLOP per output element.
Every other op (BatchNormalization, Relu, pooling, Add...) counts 0: they are memory-bound and not
what convtune tunes, and counting them would make GFLOP/s figures incomparable with the literature.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from convtune.tuner.errors import InvalidModelError

Shape = tuple[int, ...]

#: Op types whose FLOPs are counted; everything else is 0 by convention.
COUNTED_OPS = frozenset({"Conv", "Gemm", "MatMul"})


def conv_flops(
    *,
    batch: int,
    in_channels: int,
    out_channels: int,
    out_spatial: Sequence[int],
    kernel: Sequence[int],
    groups: int = 1,
    bias: bool = False,
) -> float:
    """FLOPs of an N-d convolution producing ``batch × out_channels × prod(out_spatial)`` values.

    Each output sums ``in_channels/groups × prod(kernel)`` products (2 FLOPs per multiply-add);
    ``bias`` adds one FLOP per output element.
    """
    if groups < 1 or in_channels % groups or out_channels % groups:
        raise InvalidModelError(
            f"conv channels {in_channels}->{out_channels} are not divisible by groups={groups}"
        )
    outputs = batch * out_channels * math.prod(out_spatial)
    macs = outputs * (in_channels // groups) * math.prod(kernel)
    return float(2 * macs + (outputs if bias else 0))


def conv_output_spatial(
    in_spatial: Sequence[int],
    kernel: Sequence[int],
    *,
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    auto_pad: str = "NOTSET",
) -> Shape:
    """Spatial output size of an ONNX Conv (``pads`` is ``[begin..., end...]``)."""
    rank = len(in_spatial)
    out = []
    for i in range(rank):
        eff_k = (kernel[i] - 1) * dilations[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-in_spatial[i] // strides[i]))
        elif auto_pad == "VALID":
            out.append((in_spatial[i] - eff_k) // strides[i] + 1)
        else:
            padded = in_spatial[i] + pads[i] + pads[i + rank]
            out.append((padded - eff_k) // strides[i] + 1)
    return tuple(out)


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _shape(node: onnx.NodeProto, shapes: Mapping[str, Shape], index: int) -> Shape:
    name = node.input[index]
    if name not in shapes:
        raise InvalidModelError(
            f"{node.op_type} node '{node.name}': no static shape for input '{name}'"
        )
    return tuple(shapes[name])


def _has_input(node: onnx.NodeProto, index: int) -> bool:
    return len(node.input) > index and node.input[index] != ""


def _conv_node_flops(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> float:
    x, w = _shape(node, shapes, 0), _shape(node, shapes, 1)
    attrs = _attrs(node)
    rank = len(x) - 2
    kernel = tuple(attrs.get("kernel_shape", w[2:]))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    out_spatial = conv_output_spatial(
        x[2:],
        kernel,
        strides=tuple(attrs.get("strides", (1,) * rank)),
        dilations=tuple(attrs.get("dilations", (1,) * rank)),
        pads=tuple(attrs.get("pads", (0,) * (2 * rank))),
        auto_pad=auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad),
    )
    return conv_flops(
        batch=x[0],
        in_channels=x[1],
        out_channels=w[0],
        out_spatial=out_spatial,
        kernel=kernel,
        groups=int(attrs.get("group", 1)),
        bias=_has_input(node, 2),
    )


def _gemm_node_flops(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> float:
    a, b = _shape(node, shapes, 0), _shape(node, shapes, 1)
    attrs = _attrs(node)
    m, k = (a[1], a[0]) if attrs.get("transA", 0) else a
    n = b[0] if attrs.get("transB", 0) else b[1]
    outputs = m * n
    flops = 2 * m * n * k
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        flops += outputs
    if _has_input(node, 2) and beta != 0.0:
        flops += outputs * (1 if beta == 1.0 else 2)
    return float(flops)


def _matmul_node_flops(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> float:
    a, b = _shape(node, shapes, 0), _shape(node, shapes, 1)
    # numpy semantics: a 1-D operand is promoted to a matrix, batch dims broadcast.
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    m, k = a2[-2:]
    n = b2[-1]
    batch_a, batch_b = a2[:-2], b2[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = (1,) * (width - len(batch_a)) + batch_a
    batch_b = (1,) * (width - len(batch_b)) + batch_b
    batch = math.prod(max(da, db) for da, db in zip(batch_a, batch_b, strict=True))
    return float(2 * batch * m * n * k)


_COUNTERS = {"Conv": _conv_node_flops, "Gemm": _gemm_node_flops, "MatMul": _matmul_node_flops}


def node_flops(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> float:
    """FLOPs of one node; 0.0 for op types outside :data:`COUNTED_OPS`.

    ``shapes`` maps tensor names to static shapes (see :func:`static_shapes`). Raises
    :class:`InvalidModelError` if a counted node's input shape is missing.
    """
    counter = _COUNTERS.get(node.op_type)
    return counter(node, shapes) if counter else 0.0


def static_shapes(model: onnx.ModelProto) -> dict[str, Shape]:
    """Static shapes of every tensor of a shape-inferred model (dims with a value only).

    Tensors with a symbolic or unknown dim are left out.
    """
    graph = model.graph
    shapes: dict[str, Shape] = {init.name: tuple(init.dims) for init in graph.initializer}
    for info in (*graph.input, *graph.value_info, *graph.output):
        tensor_type = info.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = tuple(d.dim_value for d in dims)
    return shapes


def node_key(node: onnx.NodeProto, index: int) -> str:
    """The node name, or ``"<op_type>_<index>"`` for unnamed nodes (ONNX names are optional)."""
    return node.name or f"{node.op_type}_{index}"


@dataclass(frozen=True)
class FlopSummary:
    """FLOPs of a model: ``total``, per op type, and per node (counted ops only)."""

    total: float
    by_op_type: dict[str, float] = field(default_factory=dict)
    by_node: dict[str, float] = field(default_factory=dict)

    @property
    def gflops(self) -> float:
        return self.total / 1e9


def model_flops(model: onnx.ModelProto) -> FlopSummary:
    """FLOPs of the main graph's Conv/Gemm/MatMul nodes; shape inference is run here."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = static_shapes(inferred)
    by_op: dict[str, float] = {}
    by_node: dict[str, float] = {}
    for index, node in enumerate(inferred.graph.node):
        if node.op_type not in COUNTED_OPS:
            continue
        flops = node_flops(node, shapes)
        by_op[node.op_type] = by_op.get(node.op_type, 0.0) + flops
        by_node[node_key(node, index)] = flops
    return FlopSummary(total=sum(by_node.values()), by_op_type=by_op, by_node=by_node)
