"""Model ingest: turn uploaded bytes into a checked, static-shape ONNX model ready for TVM.

``load_model`` is the one door every model goes through (CLI and REST). It refuses, with one
line naming the offending thing, anything convtune cannot tune: bytes that are not ONNX, models that
fail ``onnx.checker``, external-data tensors (their paths point at the uploader's disk and are never
opened), non-float32 inputs and float16/bfloat16/float8/complex/string tensors, ops TVM's ONNX
frontend cannot convert, dynamic input dims that were not pinned, and inputs larger than
``MAX_INPUT_ELEMENTS``. What it returns has pinned input shapes, old opsets and exporter idioms
normalized (``tuner/graph/normalize.py``, checked by onnxruntime), folded shape subgraphs
(``tuner/graph/fold.py``) and inferred static shapes everywhere.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx.inliner
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper

from convtune.tuner.errors import ConvtuneError, InvalidModelError, UnsupportedOpError
from convtune.tuner.graph.fold import fold_constants
from convtune.tuner.graph.normalize import normalize

MAX_INPUT_ELEMENTS = 2**31
"""Cap on the total number of elements over all graph inputs (a pinned 10^12 is a typo)."""

_ALLOWED_DTYPES = frozenset(
    {
        TensorProto.FLOAT,
        TensorProto.DOUBLE,
        TensorProto.BOOL,
        TensorProto.INT8,
        TensorProto.INT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.UINT8,
        TensorProto.UINT16,
        TensorProto.UINT32,
        TensorProto.UINT64,
    }
)
# Contrib ops of com.microsoft that the frontend's converter table implements.
_MICROSOFT_OPS = frozenset(
    {
        "Attention",
        "BiasGelu",
        "EmbedLayerNormalization",
        "FastGelu",
        "Gelu",
        "MatMulInteger16",
        "SkipLayerNormalization",
    }
)
# ai.onnx ops whose name the table holds but whose converter implements the com.microsoft op
# of the same name (ai.onnx Attention-23 has different inputs and semantics).
_MICROSOFT_SEMANTICS = frozenset({"Attention"})
_ONNX_DOMAINS = ("", "ai.onnx")
_ZIP_MAGIC = b"PK\x03\x04"
_MIN_IR_VERSION = 3  # the TVM frontend refuses older models


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: name, static shape and numpy dtype name (e.g. ``"float32"``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class IngestedModel:
    """A model that passed every ingest check.

    ``model`` is checked, has pinned input shapes, folded shape subgraphs and inferred shapes;
    ``sha256``/``size_bytes`` describe the ORIGINAL bytes as uploaded (the content address).
    """

    model: onnx.ModelProto
    sha256: str
    size_bytes: int
    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------


def parse_input_shape(text: str, option: str = "--input-shape") -> tuple[str, tuple[int, ...]]:
    """Parse a ``--input-shape`` value ``NAME=D1,D2,...`` (e.g. ``input=1,3,224,224``).

    The name is everything before the LAST ``=`` (ONNX names may contain ``=``); dims must be
    positive integers. Raises ``ConvtuneError`` on anything else.
    """
    name, sep, dims_text = text.rpartition("=")
    name = name.strip()
    if not sep or not name:
        raise ConvtuneError(
            f"invalid {option} {_q(text)}: expected NAME=D1,D2,... e.g. input=1,3,224,224"
        )
    parts = [p.strip() for p in dims_text.split(",")]
    if not all(re.fullmatch(r"[0-9]+", p) for p in parts) or any(int(p) <= 0 for p in parts):
        raise ConvtuneError(
            f"invalid {option} {_q(text)}: dimensions must be positive integers "
            "separated by commas, e.g. input=1,3,224,224"
        )
    return name, tuple(int(p) for p in parts)


def load_model(
    source: str | os.PathLike[str] | bytes,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    name: str | None = None,
    shape_option: str = "--input-shape",
) -> IngestedModel:
    """Validate and prepare a model from a file path or its raw bytes.

    ``input_shapes`` pins dynamic input dims (also checked against fixed ones); messages about
    them name ``shape_option``, the way the caller's user sets them (the CLI's flag, the API's
    form field). ``name``
    defaults to the file stem, then the graph name. Raises ``InvalidModelError`` or
    ``UnsupportedOpError`` (one line each) for anything convtune cannot tune, ``ConvtuneError``
    for an unreadable path.
    """
    data, stem = _read_source(source)
    model = _parse(data)
    _refuse_external_data(model)
    _check_dtypes(model)
    # Pinned before the checker, which rejects unknown-rank inputs that an override may fix.
    model = _pin_input_shapes(model, input_shapes or {}, shape_option)
    _check(model)
    model = _weights_as_constants(model)
    if model.functions:
        # The frontend does not know model-local functions; inlining makes their ops visible.
        model = onnx.inliner.inline_local_functions(model)
    # Old opsets and exporter idioms into the forms the frontend takes, checked by onnxruntime.
    model, _ = normalize(model)
    check_supported_ops(model)
    model = _sums_as_adds(model)
    try:
        folded = fold_constants(model)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as err:
        raise InvalidModelError(f"shape inference failed: {_one_line(err)}") from None
    # Inference may reveal intermediates (e.g. a Cast to float16) that no declaration showed.
    _check_value_dtypes(folded.graph)
    return IngestedModel(
        model=folded,
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        name=_clean(name or stem or folded.graph.name or "model"),
        inputs=tuple(_spec(vi, "input") for vi in _real_inputs(folded.graph)),
        outputs=tuple(_spec(vi, "output") for vi in folded.graph.output),
    )


def check_supported_ops(model: onnx.ModelProto) -> None:
    """Raise ``UnsupportedOpError`` if any node (including in If branches) cannot be converted.

    Checks against the converter table of ``tvm.relax.frontend.onnx``. The frontend looks ops up
    by name only, ignoring domains, so domains are checked here: ai.onnx ops must be standard
    ONNX ops the table holds, com.microsoft ops must be contrib ops the table implements, and
    every other domain (including model-local functions) is unsupported.
    """
    offenders: list[tuple[onnx.NodeProto, int]] = [
        (node, index) for node, index in _all_nodes(model.graph) if not _op_supported(node)
    ]
    if not offenders:
        return
    node, index = offenders[0]
    message = f"op {_op_label(node)} (node {_node_label(node, index)}) is not supported by the "
    message += "TVM ONNX frontend"
    others = sorted({_op_label(n) for n, _ in offenders} - {_op_label(node)})
    if others:
        message += f"; also unsupported: {', '.join(others)}"
    raise UnsupportedOpError(message)


# ---------------------------------------------------------------------------------------------
# reading and parsing
# ---------------------------------------------------------------------------------------------


def _read_source(source: str | os.PathLike[str] | bytes) -> tuple[bytes, str | None]:
    """Bytes of the model and the file stem (None for raw bytes)."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source), None
    path = Path(source)
    try:
        return path.read_bytes(), path.stem
    except OSError as err:
        raise ConvtuneError(f"cannot read model file {_q(str(path))}: {err.strerror}") from None


def _parse(data: bytes) -> onnx.ModelProto:
    """Decode protobuf bytes; never follows external-data references (there is no base path)."""
    if not data:
        raise InvalidModelError("not an ONNX model: the file is empty")
    if data.startswith(_ZIP_MAGIC):
        raise InvalidModelError("not an ONNX model: this is a zip archive; upload the .onnx file")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise InvalidModelError(f"not an ONNX model: protobuf decoding failed ({err})") from None
    # Protobuf accepts many random byte strings as some message; a model needs these at least.
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise InvalidModelError(
            "not an ONNX model: no ir_version, graph or opset_import (is the file truncated?)"
        )
    if model.ir_version < _MIN_IR_VERSION:
        raise InvalidModelError(
            f"ONNX IR version {model.ir_version} is too old; re-export with IR version >= 3"
        )
    if not model.graph.node:
        raise InvalidModelError(f"graph {_q(model.graph.name)} has no nodes")
    return model


def _check(model: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as err:
        raise InvalidModelError(f"onnx.checker rejected the model: {_one_line(err)}") from None


def _refuse_external_data(model: onnx.ModelProto) -> None:
    for tensor in _all_tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL or tensor.external_data:
            raise InvalidModelError(
                f"tensor {_q(tensor.name)} stores its data in an external file; external-data "
                "models are not accepted, save the model with all weights inside the .onnx file"
            )


# ---------------------------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------------------------


def _check_dtypes(model: onnx.ModelProto) -> None:
    """Inputs must be float32; no tensor anywhere may use a dtype convtune does not tune."""
    for vi in _real_inputs(model.graph):
        if not vi.type.HasField("tensor_type"):
            raise InvalidModelError(f"input {_q(vi.name)} is not a tensor")
        elem = vi.type.tensor_type.elem_type
        if elem != TensorProto.FLOAT:
            raise InvalidModelError(
                f"input {_q(vi.name)} has dtype {_dtype_name(elem)}; convtune tunes float32 "
                "models and needs float32 inputs"
            )
    for tensor in _all_tensors(model):
        _require_allowed_dtype("tensor", tensor.name, tensor.data_type)
    for graph in _all_graphs(model.graph):
        _check_value_dtypes(graph)


def _check_value_dtypes(graph: onnx.GraphProto) -> None:
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            _require_allowed_dtype("tensor", vi.name, vi.type.tensor_type.elem_type)


def _require_allowed_dtype(kind: str, name: str, elem_type: int) -> None:
    if elem_type not in _ALLOWED_DTYPES:
        raise InvalidModelError(
            f"{kind} {_q(name)} has dtype {_dtype_name(elem_type)}; convtune tunes float32 "
            "models only (convert the model to float32)"
        )


def _dtype_name(elem_type: int) -> str:
    """numpy-style name: float32, float16, bfloat16, float8e4m3fn, complex64, string..."""
    special: dict[int, str] = {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64"}
    if elem_type in special:
        return special[elem_type]
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"unknown({elem_type})"


# ---------------------------------------------------------------------------------------------
# input shapes
# ---------------------------------------------------------------------------------------------


def _pin_input_shapes(
    model: onnx.ModelProto, overrides: Mapping[str, Sequence[int]], option: str = "--input-shape"
) -> onnx.ModelProto:
    """Copy of ``model`` whose inputs all have static dims (overrides applied and checked).

    A symbol pinned on one input (e.g. ``N``) also pins the same symbol on the other inputs.
    """
    inputs = _real_inputs(model.graph)
    if not inputs:
        raise InvalidModelError("the model has no inputs (every graph input is an initializer)")
    names = [vi.name for vi in inputs]
    for name in overrides:
        if name not in names:
            valid = ", ".join(_q(n) for n in names)
            raise InvalidModelError(
                f"{option} names unknown input {_q(name)}; the model's inputs are: {valid}"
            )
    symbols: dict[str, int] = {}
    for vi in inputs:
        if vi.name in overrides:
            symbols.update(_check_override(vi, tuple(overrides[vi.name]), option))

    shapes: dict[str, tuple[int, ...]] = {}
    for vi in inputs:
        if vi.name in overrides:
            shapes[vi.name] = tuple(int(d) for d in overrides[vi.name])
        else:
            shapes[vi.name] = _static_or_raise(vi, symbols, option)
    _check_element_count(shapes)

    pinned = onnx.ModelProto()
    pinned.CopyFrom(model)
    for vi in _real_inputs(pinned.graph):
        shape = vi.type.tensor_type.shape
        shape.ClearField("dim")
        for value in shapes[vi.name]:
            shape.dim.add().dim_value = value
    # An exporter's -1 elsewhere (outputs, value_info) would contradict the pinned sizes in
    # shape inference: it is a dynamic size there too, left for inference to fill.
    for vi in [*pinned.graph.output, *pinned.graph.value_info]:
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value < 0:
                dim.ClearField("dim_value")
    return pinned


def _check_override(
    vi: onnx.ValueInfoProto, dims: tuple[int, ...], option: str = "--input-shape"
) -> dict[str, int]:
    """Validate an override against the declared shape; return the symbols it binds."""
    flag = f"{option} {_clean(vi.name)}={','.join(str(d) for d in dims)}"
    if not dims or any(not isinstance(d, int) or d <= 0 for d in dims):
        raise InvalidModelError(f"{flag}: dimensions must be positive integers")
    if not vi.type.tensor_type.HasField("shape"):
        return {}  # unknown rank: any override is acceptable
    declared = vi.type.tensor_type.shape.dim
    if len(declared) != len(dims):
        raise InvalidModelError(
            f"{flag} has rank {len(dims)} but input {_q(vi.name)} has rank {len(declared)} "
            f"(shape {_shape_text(vi)})"
        )
    bound: dict[str, int] = {}
    for axis, (dim, value) in enumerate(zip(declared, dims, strict=True)):
        # A negative size is an exporter's "dynamic" (PaddleOCR's -1): any override fits it.
        if _fixed(dim) and dim.dim_value != value:
            raise InvalidModelError(
                f"{flag} conflicts with input {_q(vi.name)} shape {_shape_text(vi)} at dim "
                f"{axis} ({value} != {dim.dim_value})"
            )
        if dim.HasField("dim_param"):
            bound[dim.dim_param] = value
    return bound


def _fixed(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """Whether ``dim`` is a static size (a symbol, an empty dim and -1 are all dynamic)."""
    return dim.HasField("dim_value") and dim.dim_value > 0


def _static_or_raise(
    vi: onnx.ValueInfoProto, symbols: Mapping[str, int], option: str = "--input-shape"
) -> tuple[int, ...]:
    tensor_type = vi.type.tensor_type
    if not tensor_type.HasField("shape"):
        raise InvalidModelError(
            f"input {_q(vi.name)} has unknown rank; "
            f"pin it with {option} {_clean(vi.name)}=D1,D2,..."
        )
    dims: list[int] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value > 0:
            dims.append(dim.dim_value)
        elif dim.HasField("dim_param") and dim.dim_param in symbols:
            dims.append(symbols[dim.dim_param])
        elif dim.HasField("dim_value") and dim.dim_value == 0:
            raise InvalidModelError(
                f"input {_q(vi.name)} has a zero-size dimension (shape {_shape_text(vi)})"
            )
        else:
            # A dynamic batch (axis 0) is 1 for latency tuning; any other dynamic size (an
            # image's H, W) has no safe guess: it stays named for the user to fill in.
            unknown = [
                d.dim_param or "?"
                for axis, d in enumerate(tensor_type.shape.dim)
                if axis and not _fixed(d) and d.dim_param not in symbols
            ]
            suggestion = ",".join(
                str(d.dim_value)
                if _fixed(d)
                else str(symbols[d.dim_param])
                if d.dim_param in symbols
                else "1"
                if axis == 0
                else d.dim_param or "?"
                for axis, d in enumerate(tensor_type.shape.dim)
            )
            fill = f" with {', '.join(unknown)} set to the size to tune for" if unknown else ""
            raise InvalidModelError(
                f"input {_q(vi.name)} has a dynamic dimension {_q(dim.dim_param or '?')} "
                f"(shape {_shape_text(vi)}); pin it with "
                f"{option} {_clean(vi.name)}={suggestion}{fill}"
            )
    return tuple(dims)


def _check_element_count(shapes: Mapping[str, tuple[int, ...]]) -> None:
    total = 0
    for name, shape in shapes.items():
        count = 1
        for d in shape:
            count *= d
        if count > MAX_INPUT_ELEMENTS:
            raise InvalidModelError(
                f"input {_q(name)} shape [{','.join(map(str, shape))}] has {count} elements; "
                f"convtune accepts at most {MAX_INPUT_ELEMENTS} (2^31) input elements"
            )
        total += count
    if total > MAX_INPUT_ELEMENTS:
        raise InvalidModelError(
            f"the inputs hold {total} elements in total; convtune accepts at most "
            f"{MAX_INPUT_ELEMENTS} (2^31) input elements"
        )


def _shape_text(vi: onnx.ValueInfoProto) -> str:
    dims = vi.type.tensor_type.shape.dim
    text = ",".join(
        str(d.dim_value) if d.HasField("dim_value") else _clean(d.dim_param or "?") for d in dims
    )
    return f"[{text}]"


def _spec(vi: onnx.ValueInfoProto, kind: str) -> TensorSpec:
    """Static spec of an input/output of the folded, inferred model."""
    tensor_type = vi.type.tensor_type
    dims = tensor_type.shape.dim
    if not tensor_type.HasField("shape") or not all(d.HasField("dim_value") for d in dims):
        raise InvalidModelError(
            f"{kind} {_q(vi.name)} has a shape that depends on the input data "
            f"({_shape_text(vi) if tensor_type.HasField('shape') else 'unknown rank'}); "
            "convtune needs static shapes"
        )
    dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name
    return TensorSpec(name=vi.name, shape=tuple(d.dim_value for d in dims), dtype=dtype)


# ---------------------------------------------------------------------------------------------
# ops
# ---------------------------------------------------------------------------------------------


@functools.cache
def _frontend_ops() -> frozenset[str]:
    # Imported lazily: TVM takes a while to import and most ingest errors never need it.
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    # "If" is converted by the importer itself rather than through the table.
    return frozenset(_get_convert_map()) | {"If", "Constant"}


def _op_supported(node: onnx.NodeProto) -> bool:
    op, domain = node.op_type, node.domain
    if domain in _ONNX_DOMAINS:
        return (
            op in _frontend_ops()
            and op not in _MICROSOFT_SEMANTICS
            and onnx.defs.has(op, domain="")
        )
    if domain == "com.microsoft":
        return op in _MICROSOFT_OPS and op in _frontend_ops()
    return False


def _op_label(node: onnx.NodeProto) -> str:
    if node.domain in _ONNX_DOMAINS:
        return _q(node.op_type)
    return f"{_q(node.op_type)} of domain {_q(node.domain)}"


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return _q(node.name) if node.name else f"#{index}"


# ---------------------------------------------------------------------------------------------
# graph walking
# ---------------------------------------------------------------------------------------------


def _weights_as_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop graph inputs that are initializers (IR < 4 lists weights as inputs too).

    Such an input is only a default a caller could override; convtune compiles weights in, and
    TVM's frontend would otherwise turn each into a duplicate runtime parameter. IR 4 is the first
    version that allows initializers that are not inputs.
    """
    weights = {t.name for t in model.graph.initializer}
    if not any(vi.name in weights for vi in model.graph.input):
        return model
    kept = [vi for vi in model.graph.input if vi.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.ir_version = max(model.ir_version, 4)
    return model


def _sums_as_adds(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite each n-input ``Sum`` of the main graph as a chain of ``Add`` (same broadcasting,
    same summation order).

    TVM's frontend turns Sum into broadcast_to → stack → sum over a new axis: a 5-D detour that
    no layout can carry, so the residual Sums of Caffe2 ResNet-50 and ShuffleNet cost two layout
    transforms each; an Add chain stays blocked (tuner/graph/layout.py).
    """
    if not any(
        node.op_type == "Sum" and node.domain in ("", "ai.onnx") for node in model.graph.node
    ):
        return model
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        if node.op_type != "Sum" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            nodes.append(node)
            continue
        acc = node.input[0]
        for i, term in enumerate(node.input[1:], start=1):
            last = i == len(node.input) - 1
            out = node.output[0] if last else f"{node.output[0]}/sum{i}"
            name = node.name if last else f"{node.name}/sum{i}"
            nodes.append(onnx.helper.make_node("Add", [acc, term], [out], name=name))
            acc = out
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _real_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (IR < 4 lists weights as inputs too)."""
    init_names = {t.name for t in graph.initializer}
    return [vi for vi in graph.input if vi.name not in init_names]


def _all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every graph nested in node attributes, depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else attr.graphs:
                yield from _all_graphs(sub)


def _all_nodes(graph: onnx.GraphProto) -> Iterator[tuple[onnx.NodeProto, int]]:
    """Every node with its index in its own graph; outer graph nodes before nested ones."""
    for sub in _all_graphs(graph):
        yield from ((node, i) for i, node in enumerate(sub.node))


def _all_tensors(model: onnx.ModelProto) -> Iterator[TensorProto]:
    """Initializers, sparse initializers and node-attribute tensors of every graph and function."""
    node_lists = [f.node for f in model.functions]
    for graph in _all_graphs(model.graph):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        node_lists.append(graph.node)
    for nodes in node_lists:
        for node in nodes:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                if attr.HasField("sparse_tensor"):
                    yield attr.sparse_tensor.values
                    yield attr.sparse_tensor.indices


# ---------------------------------------------------------------------------------------------
# one-line messages
# ---------------------------------------------------------------------------------------------


def _clean(text: str, limit: int = 120) -> str:
    """Printable, single-line, bounded version of a name taken from an untrusted model."""
    printable = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return printable if len(printable) <= limit else printable[: limit - 3] + "..."


def _q(text: str) -> str:
    return f"'{_clean(text)}'"


def _one_line(err: BaseException, limit: int = 300) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
