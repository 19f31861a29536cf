"""Constant folding of shape subgraphs and ``Constant`` nodes in an ONNX graph.

Exporters compute reshape targets at run time (``Shape -> Gather -> Concat -> Reshape``) so that one
model serves every batch size. Once input shapes are pinned those computations are constants, and
TVM's ONNX frontend needs them as constants: it refuses a ``Reshape`` whose shape is a computed
tensor. This module folds them; it is deliberately small and conservative:

- a ``Constant`` node becomes an initializer of the same name (moved, never copied);
- ``Shape``/``Size`` of a tensor whose inferred shape is fully static become int64 initializers;
- any other deterministic ai.onnx node whose inputs are all constant is evaluated alone with
  ``onnx.reference.ReferenceEvaluator`` and replaced by its outputs, but only when every output
  holds at most ``max_elements`` elements: shape arithmetic is tiny, and folding e.g. a
  ``Transpose`` of a big weight would just store a second copy of it;
- passes repeat (with strict, data-propagating shape inference in between) until nothing changes.

Nodes that are not folded keep their names, inputs and outputs. Initializers that no node or
graph output uses any more are dropped.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

DEFAULT_MAX_ELEMENTS = 4096

# Folding these would freeze one random draw into the model.
_NONDETERMINISTIC = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)
_SHAPE_OPS = frozenset({"Shape", "Size"})
_MAX_PASSES = 32


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Strict, data-propagating ONNX shape inference (raises on any inconsistency)."""
    return onnx.shape_inference.infer_shapes(
        model, check_type=True, strict_mode=True, data_prop=True
    )


def fold_constants(
    model: onnx.ModelProto, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> onnx.ModelProto:
    """Return a copy of ``model`` with shape subgraphs and Constant nodes folded to initializers.

    ``model`` should already have static input shapes (otherwise ``Shape`` stays unfolded). The
    result is shape-inferred. Raises whatever strict shape inference raises on an inconsistent
    model (callers turn that into a user-facing error).
    """
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    # Folded values become initializers that are not graph inputs, which IR < 4 does not allow
    # (shape inference would not see them).
    folded.ir_version = max(folded.ir_version, 4)
    for _ in range(_MAX_PASSES):
        folded = infer_shapes(folded)
        if not _fold_pass(folded, max_elements):
            break
    _drop_unused_initializers(folded.graph)
    return infer_shapes(folded)


def _fold_pass(model: onnx.ModelProto, max_elements: int) -> bool:
    """Fold, in place, every foldable node of the main graph; return whether any was folded."""
    graph = model.graph
    constants: dict[str, np.ndarray | None] = {t.name: None for t in graph.initializer}
    static_shapes = _static_shapes(graph)
    graph_outputs = {o.name for o in graph.output}
    opsets = list(model.opset_import)

    kept: list[onnx.NodeProto] = []
    new_initializers: list[onnx.TensorProto] = []
    for node in graph.node:
        values = None
        is_output = bool(graph_outputs.intersection(node.output))
        if node.domain in ("", "ai.onnx") and not (is_output and node.op_type == "Identity"):
            values = _try_fold(node, constants, static_shapes, opsets, graph, max_elements)
        if values is None:
            kept.append(node)
            continue
        for name, value in zip(node.output, values, strict=True):
            if name in graph_outputs:
                # A graph output stays a node's output: an Identity of the folded value (the
                # frontend would turn a Shape output into a shape, which no artifact returns).
                stored = _unused_name(f"{name}__folded", graph)
                new_initializers.append(numpy_helper.from_array(value, name=stored))
                kept.append(helper.make_node("Identity", [stored], [name], name=node.name))
                continue
            constants[name] = value
            new_initializers.append(numpy_helper.from_array(value, name=name))
    if not new_initializers:
        return False
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(new_initializers)
    # Stale inferred types of folded values would shadow the initializers' own types.
    folded_names = {t.name for t in new_initializers}
    kept_info = [vi for vi in graph.value_info if vi.name not in folded_names]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    return True


def _try_fold(
    node: onnx.NodeProto,
    constants: dict[str, np.ndarray | None],
    static_shapes: dict[str, tuple[int, ...]],
    opsets: list[onnx.OperatorSetIdProto],
    graph: onnx.GraphProto,
    max_elements: int,
) -> list[np.ndarray] | None:
    """The output values of ``node`` if it can and should be folded, else None."""
    op = node.op_type
    if op == "Constant":
        if any(a.name == "sparse_value" for a in node.attribute):
            return None  # densifying could be huge; the frontend handles the node itself
        return _evaluate(node, {}, opsets)
    if op in _SHAPE_OPS and node.input[0] in static_shapes:
        shape = static_shapes[node.input[0]]
        if op == "Size":
            return [np.array(_size(shape), dtype=np.int64)]
        attrs = {a.name: a.i for a in node.attribute}
        # ONNX Shape's start/end follow Python slice semantics (negative from the end, clamped).
        return [np.array(shape[attrs.get("start", 0) : attrs.get("end")], dtype=np.int64)]
    if op in _NONDETERMINISTIC or _has_subgraph(node):
        return None
    inputs = [name for name in node.input if name]
    if not inputs or any(name not in constants for name in inputs):
        return None
    # Decide from inferred shapes before evaluating: an output of unknown size could be huge
    # (ConstantOfShape, Tile, Range...), and this also avoids decoding weights for nothing.
    outputs = [o for o in node.output if o]
    if any(o not in static_shapes or _size(static_shapes[o]) > max_elements for o in outputs):
        return None
    feeds = {name: _constant_value(name, constants, graph) for name in inputs}
    values = _evaluate(node, feeds, opsets)
    if values is None or any(v.size > max_elements for v in values):
        return None
    return values


def _unused_name(base: str, graph: onnx.GraphProto) -> str:
    used = {t.name for t in graph.initializer}
    used.update(name for node in graph.node for name in [*node.input, *node.output])
    name, i = base, 0
    while name in used:
        i += 1
        name = f"{base}{i}"
    return name


def _size(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def _evaluate(
    node: onnx.NodeProto, feeds: dict[str, np.ndarray], opsets: list[onnx.OperatorSetIdProto]
) -> list[np.ndarray] | None:
    """Run one node with the reference evaluator under the model's own opsets; None on failure."""
    try:
        inputs = [
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for name, v in feeds.items()
        ]
        outputs = [helper.make_empty_tensor_value_info(name) for name in node.output if name]
        graph = helper.make_graph([node], "fold", inputs, outputs)
        single = helper.make_model(graph, opset_imports=opsets)
        results = ReferenceEvaluator(single).run(None, feeds)
    except Exception:  # any failure only means "not foldable": the node stays in the graph
        return None
    if len(results) != len(node.output) or not all(isinstance(r, np.ndarray) for r in results):
        return None  # optional/unused outputs or sequences: leave the node alone
    return [np.asarray(r) for r in results]


def _constant_value(
    name: str, constants: dict[str, np.ndarray | None], graph: onnx.GraphProto
) -> np.ndarray:
    """Value of a constant, decoding an original initializer lazily (most are never needed)."""
    value = constants[name]
    if value is None:
        tensor = next(t for t in graph.initializer if t.name == name)
        value = numpy_helper.to_array(tensor)
        constants[name] = value
    return value


def _static_shapes(graph: onnx.GraphProto) -> dict[str, tuple[int, ...]]:
    """Names whose inferred tensor shape is fully static, mapped to that shape."""
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(d.dim_value for d in dims)
    for tensor in graph.initializer:
        shapes[tensor.name] = tuple(tensor.dims)
    return shapes


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    )


def _subgraphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """Every graph nested in ``graph``'s node attributes, recursively."""
    for node in graph.node:
        for attr in node.attribute:
            nested = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in nested:
                yield sub
                yield from _subgraphs(sub)


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Remove initializers no node (at any nesting depth) or graph output refers to."""
    used = {o.name for o in graph.output}
    for g in [graph, *_subgraphs(graph)]:
        used.update(name for node in g.node for name in node.input)
    kept = [t for t in graph.initializer if t.name in used]
    if len(kept) == len(graph.initializer):
        return
    dropped = {t.name for t in graph.initializer} - used
    del graph.initializer[:]
    graph.initializer.extend(kept)
    # IR < 4 models also list initializers as graph inputs; an orphan there would become a
    # real input that nothing feeds.
    inputs = [vi for vi in graph.input if vi.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)
