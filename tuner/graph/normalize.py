"""Import normalizer: old opsets and exporter idioms rewritten into what TVM's ONNX frontend takes.

Runs in ingest after the input shapes are pinned and before constant folding and the frontend.
Each rewrite is small and local; every model it changed is run by onnxruntime before and after,
on seeded inputs, and a rewrite that changes the outputs refuses the model with one line naming
it (``UnsupportedOpError``) before any tuning starts.

Rewrites, in order:

- ``opset``: ``onnx.version_converter`` to :data:`TARGET_OPSET`. Its adapters turn the
  attribute-form Slice, Clip, Pad, Split, Squeeze, Unsqueeze and the opset-9 Upsample into their
  input forms. The target was measured over tests/tuner/test_conformance.py's cases (every case
  also at opset 9): see docs/conformance.md.
- ``resize``: Resize inputs that are empty initializers (PyTorch's empty ``roi``/``scales``)
  become omitted; ``sizes`` with ``axes`` or ``keep_aspect_ratio_policy``, and Shape-computed
  sizes, become the full static output size the pinned shapes give; ``half_pixel_symmetric``
  at an integral scale is ``half_pixel``. A scale that gives no integral size, and antialiased
  downsampling, are refused (TVM resizes to a size, with the size ratio as the scale).
- ``legacy-prelu``: before opset 7 a 1-D PRelu slope was per channel (``nn.PReLU(C)`` as
  PyTorch exported it at opset 6); the frontend read it numpy-style and asserted. Reshaped to
  (C, 1, ...) before the upgrade; a (C, 1, 1) slope is the frontend's own per-axis nn.prelu.
- ``convtranspose``: ``output_shape`` becomes explicit pads (and output_padding); pads
  larger than the stride are the frontend's business (it handles them).
- ``subpixel-convtranspose``: a ConvTranspose becomes a Conv computing every output phase, a
  pixel shuffle and a Slice of its pads, for speed: TVM compiles ConvTranspose NCHW in no space
  of ours, the Conv runs blocked (measured in the function's docstring).
- ``pointwise-gemv``: a 1x1 Conv of a 1x1 image with a classifier's weights (at least
  :data:`GEMV_MIN_WEIGHTS`) becomes Reshape, Gemm and Reshape, for speed: a matrix-vector
  product the matmul space streams, not a conv with one pixel to block over.
- ``lpnorm``: LpNormalization becomes ``x / ReduceL1|ReduceL2(x, axis)``.
- ``batchnorm``: a BatchNormalization in training mode (batch statistics, and the running
  statistics outputs) is spelled out.
- ``spacetodepth``: SpaceToDepth's CRD mode (opset 26), which the frontend ignores, as
  Reshape/Transpose/Reshape.
- ``celu``: Celu, which the frontend lacks, as ``alpha·Elu(x / alpha)``.
- ``maxpool-indices``: an Indices output nothing reads is dropped; one the graph reads is refused.
- ``pow``: a constant integer exponent of a float Pow becomes float (the frontend needs one dtype).
- ``tile``: Tile as Reshape/Expand/Reshape (TVM's tile is miscompiled for ``mcpu=znver5``).
- ``empty-attrs``: empty list attributes (version_converter's ``axes=[]``) dropped.
- ``concat-empty``: zero-size Concat pieces dropped (TVM cannot load an empty constant).
- ``dropout``: an inference Dropout whose mask nothing reads is an Identity. TVM's frontend
  keeps it as an op that fuses into the Gemm before it as a second output, and the matmul
  space's epilogue cannot inline it: AlexNet's 9216→4096 layer was left to the generic space,
  85 ms of a 109 ms model on a Zen 3 VM.
- ``transposes``: tf2onnx's Transposes around each conv pushed down through elementwise ops
  until they cancel, and through a Reduce (the NHWC global mean) onto its small output.
- ``unit-transposes``: a Transpose that moves only axes of size 1 (an NHWC grayscale input to
  NCHW) becomes a Reshape, a view rather than a copy kernel.

Initializers listed as graph inputs stop being inputs in ingest (``_weights_as_constants``), and
Shape-computed sizes fold at the pinned shapes in ``tuner/graph/fold.py``.

Tools compared before writing the rewrites by hand (2026-12-03, onnx 1.23, TVM 0.27). The set:
the 105 conformance cases that crashed, gave wrong results or were refused other than by dtype or
zero-size dims on main before this module, and the 4 legacy corpus exports. Each tool's output
went through the old ingest and the frontend; "converts" is the frontend accepting the model
(the conformance suite then checks the values):

| tool | converts | tool failed | time | weight |
|---|---|---|---|---|
| nothing | 49/109 | - | - | - |
| onnx.version_converter to 17 | 53/109 | 2 | 1.1 s | in the onnx wheel |
| onnxslim 0.1.98 | 47/109 | 32 | 12.8 s | 1.3 MB + sympy 30 MB + mpmath |
| onnxsim 0.8.1 | 27/109 | 2 | 7.9 s | 28 MB native wheel |
| onnxscript 0.7.2 optimizer | 27/109 | 2 | 1.6 s | 3.7 MB + onnx_ir |
| this module (version_converter + rewrites) | 83/109 | - | - | none |

The optimizers fold constants and fuse patterns (fold.py already folds what the frontend needs)
but none rewrites the idioms the frontend chokes on: empty Resize inputs, Resize axes/policies,
legacy PRelu, ConvTranspose output_shape, LpNormalization, SpaceToDepth CRD, MaxPool Indices.
So ``onnx.version_converter`` plus the rewrites here, and no new dependency. The 26 left are
refusals with one line: Resize at non-integral scales or antialiased downsampling, MaxPool's
Indices read by the graph, and graphs without inputs (see docs/conformance.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import onnx
import onnx.version_converter
from onnx import helper, numpy_helper

from convtune.tuner.errors import UnsupportedOpError

TARGET_OPSET = 17
"""The default-domain opset models are converted up to (never down); measured over the
conformance cases (docs/conformance.md): 17 passes the most."""

_ONNX = ("", "ai.onnx")
_CHECK_SEED = 0
_RTOL = 1e-4
_ATOL = 1e-4


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------


def normalize(model: onnx.ModelProto, check: bool = True) -> tuple[onnx.ModelProto, list[str]]:
    """The normalized copy of ``model`` (static input shapes expected) and the rewrites applied.

    With ``check``, onnxruntime must give the same outputs for the result as for ``model`` on
    seeded inputs; if it does not, raises ``UnsupportedOpError`` naming the first rewrite that
    changed them. Raises ``UnsupportedOpError`` for an idiom no rewrite can express.
    """
    steps: list[tuple[str, onnx.ModelProto]] = []
    current = model
    for name, rewrite in _REWRITES:
        changed = rewrite(current)
        if changed is not None:
            current = changed
            steps.append((name, current))
    applied = [name for name, _ in steps]
    if check and steps:
        _check_with_ort(model, steps)
    return current, applied


# ---------------------------------------------------------------------------------------------
# opset
# ---------------------------------------------------------------------------------------------


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in _ONNX), 1)


def _upgrade_opset(model: onnx.ModelProto) -> onnx.ModelProto | None:
    if _opset(model) >= TARGET_OPSET:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = onnx.version_converter.convert_version(model, TARGET_OPSET)
        onnx.checker.check_model(converted)
    except Exception:  # no adapter for some node: the frontend gets the model as it is
        return None
    return converted


# ---------------------------------------------------------------------------------------------
# graph helpers
# ---------------------------------------------------------------------------------------------


class _Graph:
    """The main graph's constants and static shapes, and a way to add constants."""

    def __init__(self, model: onnx.ModelProto, infer: bool = True) -> None:
        self.model = model
        self.graph = model.graph
        self.inits = {t.name: t for t in model.graph.initializer}
        try:
            inferred = onnx.shape_inference.infer_shapes(model, data_prop=True) if infer else model
        except Exception:
            inferred = model
        self.shapes: dict[str, tuple[int, ...]] = {}
        for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
            tt = vi.type.tensor_type
            static = vi.type.HasField("tensor_type") and tt.HasField("shape")
            if static and all(d.HasField("dim_value") for d in tt.shape.dim):
                self.shapes[vi.name] = tuple(d.dim_value for d in tt.shape.dim)
        for t in model.graph.initializer:
            self.shapes[t.name] = tuple(t.dims)
        self._names = {n for node in model.graph.node for n in [*node.input, *node.output]}
        self._names |= set(self.inits)
        self._counter = 0

    def const(self, name: str) -> np.ndarray | None:
        tensor = self.inits.get(name)
        if tensor is not None:
            return numpy_helper.to_array(tensor)
        for node in self.graph.node:
            if node.op_type == "Constant" and node.output[0] == name:
                for attr in node.attribute:
                    if attr.name == "value":
                        return numpy_helper.to_array(attr.t)
        return None

    def fresh(self, base: str) -> str:
        while True:
            self._counter += 1
            name = f"{base}__n{self._counter}"
            if name not in self._names:
                self._names.add(name)
                return name

    def add_const(self, base: str, value: np.ndarray) -> str:
        name = self.fresh(base)
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        self.inits[name] = self.graph.initializer[-1]
        return name


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _set_attr(node: onnx.NodeProto, name: str, value) -> None:
    _del_attr(node, name)
    node.attribute.append(helper.make_attribute(name, value))


def _del_attr(node: onnx.NodeProto, name: str) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)


def _label(node: onnx.NodeProto, index: int) -> str:
    return f"'{node.name}'" if node.name else f"#{index}"


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _replace_nodes(
    model: onnx.ModelProto,
    op_type: str,
    lower: Callable[[_Graph, onnx.NodeProto, int], list[onnx.NodeProto] | None],
) -> onnx.ModelProto | None:
    """Copy of ``model`` with each ``op_type`` node replaced by ``lower``'s nodes (None keeps it),
    or None when no node was replaced."""
    if not any(n.op_type == op_type and n.domain in _ONNX for n in model.graph.node):
        return None
    out = _copy(model)
    g = _Graph(out)
    nodes: list[onnx.NodeProto] = []
    changed = False
    for index, node in enumerate(list(out.graph.node)):
        new = lower(g, node, index) if node.op_type == op_type and node.domain in _ONNX else None
        if new is None:
            nodes.append(node)
        else:
            nodes.extend(new)
            changed = True
    if not changed:
        return None
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


# ---------------------------------------------------------------------------------------------
# Resize
# ---------------------------------------------------------------------------------------------


def _resize(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "Resize", _lower_resize)


def _lower_resize(g: _Graph, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
    if _opset(g.model) < 11:
        return None
    inputs = list(node.input) + [""] * (4 - len(node.input))
    x, roi, scales, sizes = inputs[:4]
    attrs = _attrs(node)
    changed = False
    for slot in (1, 2, 3):
        value = g.const(inputs[slot]) if inputs[slot] else None
        if value is not None and value.size == 0:
            inputs[slot] = ""
            changed = True
    roi, scales, sizes = inputs[1:4]
    in_shape = g.shapes.get(x)
    out_shape = g.shapes.get(node.output[0])
    if in_shape is None or out_shape is None:
        return _rebuilt(node, inputs, changed)
    where = f"Resize node {_label(node, index)}"
    mode = attrs.get("mode", b"nearest")
    coord = attrs.get("coordinate_transformation_mode", b"half_pixel")
    if scales:
        scale = g.const(scales)
        if scale is None:
            return _rebuilt(node, inputs, changed)
        axes = attrs.get("axes")
        full = np.ones(len(in_shape), dtype=np.float64)
        if axes is not None:
            for axis, s in zip(axes, scale.tolist(), strict=True):
                full[axis % len(in_shape)] = s
        else:
            full[:] = scale
        exact = all(
            abs(s * d - o) < 1e-6 * max(1, o)
            for s, d, o in zip(full, in_shape, out_shape, strict=True)
        )
    else:
        exact = True
        full = np.array(out_shape, dtype=np.float64) / np.array(in_shape, dtype=np.float64)
    downsampling = any(s < 1 for s in full)
    if attrs.get("antialias", 0) and downsampling and mode != b"nearest":
        raise UnsupportedOpError(
            f"{where}: antialiased {mode.decode()} downsampling is not supported by TVM"
        )
    # ONNX's align_corners divides by scale·W - 1, onnxruntime (the reference convtune verifies
    # against) and TVM by the output size - 1: only an output length of 1 needs a rewrite.
    single = any(o == 1 < d for d, o in zip(in_shape[2:], out_shape[2:], strict=True))
    if (not exact and coord != b"align_corners") or (coord == b"align_corners" and single):
        return _crop_resize(g, node, x, in_shape, out_shape, full, where)
    if attrs.get("antialias", 0):
        _del_attr(node, "antialias")
        changed = True
    if coord == b"half_pixel_symmetric":
        _set_attr(node, "coordinate_transformation_mode", "half_pixel")
        changed = True
    if (
        sizes
        and not scales
        and ("axes" in attrs or "keep_aspect_ratio_policy" in attrs or g.const(sizes) is None)
    ):
        inputs[3] = g.add_const(f"{node.output[0]}_sizes", np.array(out_shape, dtype=np.int64))
        _del_attr(node, "axes")
        _del_attr(node, "keep_aspect_ratio_policy")
        changed = True
    elif scales and "axes" in attrs:
        inputs[2] = g.add_const(f"{node.output[0]}_scales", full.astype(np.float32))
        _del_attr(node, "axes")
        changed = True
    if "axes" in attrs and roi:
        # roi lists starts then ends of the given axes only; the others take the whole extent.
        part = g.const(roi)
        if part is not None and part.size:
            rank, axes = len(in_shape), [a % len(in_shape) for a in attrs["axes"]]
            whole = np.array([0.0] * rank + [1.0] * rank, dtype=part.dtype)
            for i, axis in enumerate(axes):
                whole[axis] = part[i]
                whole[rank + axis] = part[len(axes) + i]
            inputs[1] = g.add_const(f"{node.output[0]}_roi", whole)
            changed = True
    return _rebuilt(node, inputs, changed)


def _crop_resize(
    g: _Graph,
    node: onnx.NodeProto,
    x: str,
    in_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    scales: np.ndarray,
    where: str,
) -> list[onnx.NodeProto]:
    """The Resize as ``tf_crop_and_resize`` to its output size, with a roi that reproduces
    ONNX's source coordinate ``a + b·x`` on each axis.

    TVM maps output to input coordinates with the size ratio; ONNX uses the given scale, which
    differs when the scale gives no integral size (0.6 of 4 is 2.4 → 2). tf_crop_and_resize's
    coordinate is ``start·(W-1) + x·(end-start)·(W-1)/(out-1)``: any affine map, as long as it
    stays inside the input (it extrapolates outside, where ONNX clamps); else refused.
    """
    attrs = _attrs(node)
    coord = attrs.get("coordinate_transformation_mode", b"half_pixel").decode()
    rank = len(in_shape)
    if any(s != 1 for s in scales[:2]):
        raise UnsupportedOpError(f"{where}: resizing the batch or channel axis is not supported")
    starts, ends = [0.0] * rank, [1.0] * rank
    for axis in range(2, rank):
        width, out, s = in_shape[axis], out_shape[axis], float(scales[axis])
        if coord in ("half_pixel", "pytorch_half_pixel"):
            a, b = 0.5 / s - 0.5, 1 / s
            if coord == "pytorch_half_pixel" and out == 1:
                a, b = 0.0, 0.0
        elif coord == "half_pixel_symmetric":
            adjustment = out / (s * width)
            a, b = width / 2 * (1 - adjustment) + 0.5 / s - 0.5, 1 / s
        elif coord == "asymmetric":
            a, b = 0.0, 1 / s
        elif coord == "align_corners":
            a, b = 0.0, (width - 1) / (out - 1) if out > 1 else 0.0
        elif coord == "tf_half_pixel_for_nn":
            a, b = 0.5 / s, 1 / s
        else:
            raise UnsupportedOpError(
                f"{where}: {coord} at scale {s:g} gives a non-integral output size; TVM resizes "
                "to integral sizes only"
            )
        last = a + b * (out - 1)
        if width == 1:
            continue
        if min(a, last) < -1e-6 or max(a, last) > width - 1 + 1e-6:
            raise UnsupportedOpError(
                f"{where}: scale {s:g} on an input of {width} gives a non-integral output size "
                "and samples outside the input; TVM resizes to integral sizes only"
            )
        starts[axis] = min(max(a, 0.0), width - 1) / (width - 1)
        ends[axis] = starts[axis] + b * (out - 1) / (width - 1) if out > 1 else starts[axis]
    # An output length of 1 divides by zero in TVM's tf_crop_and_resize: resized to 2 (the
    # first at the coordinate, the second at the input's end) and the first kept; to 3 when the
    # input has 2, as onnxruntime skips an axis whose size does not change.
    single = [axis for axis in range(2, rank) if out_shape[axis] == 1]
    resized = [
        (3 if in_shape[axis] == 2 else 2) if axis in single else d
        for axis, d in enumerate(out_shape)
    ]
    roi = g.add_const(f"{node.output[0]}_roi", np.array(starts + ends, dtype=np.float32))
    sizes = g.add_const(f"{node.output[0]}_sizes", np.array(resized, dtype=np.int64))
    keep = {"mode", "cubic_coeff_a", "exclude_outside", "nearest_mode"}
    kept = {k: v for k, v in attrs.items() if k in keep}
    y = node.output[0]
    resize_out = g.fresh(f"{y}_two") if single else y
    nodes = [
        helper.make_node(
            "Resize",
            [x, roi, "", sizes],
            [resize_out],
            name=node.name,
            coordinate_transformation_mode="tf_crop_and_resize",
            extrapolation_value=0.0,
            **kept,
        )
    ]
    if single:
        zeros = g.add_const(f"{y}_starts", np.zeros(len(single), dtype=np.int64))
        ones = g.add_const(f"{y}_ends", np.ones(len(single), dtype=np.int64))
        axes = g.add_const(f"{y}_axes", np.array(single, dtype=np.int64))
        nodes.append(helper.make_node("Slice", [resize_out, zeros, ones, axes], [y]))
    return nodes


def _rebuilt(node: onnx.NodeProto, inputs: list[str], changed: bool) -> list[onnx.NodeProto] | None:
    if not changed:
        return None
    while inputs and not inputs[-1]:
        inputs.pop()
    del node.input[:]
    node.input.extend(inputs)
    return [node]


# ---------------------------------------------------------------------------------------------
# PRelu, ConvTranspose, LpNormalization, DepthToSpace, BatchNormalization
# ---------------------------------------------------------------------------------------------


def _convtranspose(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "ConvTranspose", _lower_convtranspose)


def _lower_convtranspose(
    g: _Graph, node: onnx.NodeProto, index: int
) -> list[onnx.NodeProto] | None:
    attrs = _attrs(node)
    if "output_shape" not in attrs:
        return None
    in_shape = g.shapes.get(node.input[0])
    w_shape = g.shapes.get(node.input[1])
    if in_shape is None or w_shape is None:
        return None
    spatial = len(in_shape) - 2
    strides = list(attrs.get("strides", [1] * spatial))
    dilations = list(attrs.get("dilations", [1] * spatial))
    kernel = list(attrs.get("kernel_shape", w_shape[2:]))
    out_pad = list(attrs.get("output_padding", [0] * spatial))
    target = list(attrs["output_shape"])[-spatial:]
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    begins, ends = [], []
    for i in range(spatial):
        full = strides[i] * (in_shape[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1
        total = full - target[i]
        if total < 0:
            out_pad[i] += -total
            total = 0
        if auto_pad == b"SAME_LOWER":
            begins.append(total - total // 2)
            ends.append(total // 2)
        else:
            begins.append(total // 2)
            ends.append(total - total // 2)
    if any(p >= s for p, s in zip(out_pad, strides, strict=True)):
        return None  # not expressible: left to the frontend
    _del_attr(node, "output_shape")
    _del_attr(node, "auto_pad")
    _set_attr(node, "pads", begins + ends)
    if any(out_pad):
        _set_attr(node, "output_padding", out_pad)
    return [node]


def _subpixel_convtranspose(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "ConvTranspose", _lower_subpixel_convtranspose)


def _lower_subpixel_convtranspose(
    g: _Graph, node: onnx.NodeProto, index: int
) -> list[onnx.NodeProto] | None:
    """A 2-D ConvTranspose (one group, no dilation) as a Conv to ``Cout·sh·sw`` channels, a
    pixel shuffle (Reshape/Transpose/Reshape) and, where it pads, a Slice. TVM compiles
    ConvTranspose NCHW with no space of ours, where the Conv runs blocked like any other and
    the shuffle stays blocked (``pixel_shuffle.py``).

    Output pixel ``s·q + r`` (phase ``r``) of the unpadded result sums ``x[q - t]·W[s·t + r]``
    over ``t < T = ceil(K / s)``: per phase a ``T``-tap correlation of the input, so one Conv of
    kernel ``T`` (the taps reversed, the kernel padded with zeros to ``s·T``, padding ``T - 1``)
    computes every phase as channel ``(rh, rw, co)``, which the shuffle interleaves; the Slice
    takes the ConvTranspose's pads off. A kernel equal to the stride (DB and U-Net heads) is a
    1×1 Conv and no Slice. Measured: PP-OCRv5's detector spent 4.6 of its 13.2 ms in two 2×2
    stride-2 ones (24→24 at 80×80: 3.28 ms against onnxruntime's 0.49; Zen 4, 2026-12-03);
    a face detector's 4×4 stride-2 pad-1 one (32→32 at 8×8) took 0.200 ms against 0.042."""
    attrs = _attrs(node)
    x_shape, w = g.shapes.get(node.input[0]), g.const(node.input[1])
    if x_shape is None or w is None or len(x_shape) != 4 or w.ndim != 4:
        return None
    cin, cout, kh, kw = w.shape
    sh, sw = (int(s) for s in attrs.get("strides", [1, 1]))
    pads = [int(p) for p in attrs.get("pads", [0] * 4)]
    out_pad = [int(p) for p in attrs.get("output_padding", [0, 0])]
    if (
        attrs.get("group", 1) != 1
        or list(attrs.get("dilations", [1, 1])) != [1, 1]
        or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")
        or "output_shape" in attrs
        or kh < sh
        or kw < sw
    ):
        return None
    n, _, h, width = x_shape
    th, tw = -(-kh // sh), -(-kw // sw)
    q_h, q_w = h + th - 1, width + tw - 1
    out_h = sh * (h - 1) + kh - pads[0] - pads[2] + out_pad[0]
    out_w = sw * (width - 1) + kw - pads[1] - pads[3] + out_pad[1]
    if pads[0] + out_h > sh * q_h or pads[1] + out_w > sw * q_w:
        return None
    y, base = node.output[0], node.name or node.output[0]
    # Kernel index s·t + r, t reversed (the Conv correlates): channel (rh, rw, co) of the Conv
    # is phase (rh, rw) of output channel co, the order (DCR) the layout pass carries blocked.
    padded = np.zeros((cin, cout, sh * th, sw * tw), w.dtype)
    padded[:, :, :kh, :kw] = w
    taps = padded.reshape(cin, cout, th, sh, tw, sw)[:, :, ::-1, :, ::-1, :]
    weight = taps.transpose(3, 5, 1, 0, 2, 4).reshape(sh * sw * cout, cin, th, tw)
    inputs = [node.input[0], g.add_const(f"{y}_wphases", np.ascontiguousarray(weight))]
    if len(node.input) > 2 and node.input[2]:
        bias = g.const(node.input[2])
        if bias is None:
            return None
        inputs.append(g.add_const(f"{y}_bphases", np.tile(bias, sh * sw)))
    phases = g.fresh(f"{y}_phases")
    conv_pads = [th - 1, tw - 1, th - 1, tw - 1]
    nodes = [
        helper.make_node(
            "Conv", inputs, [phases], kernel_shape=[th, tw], pads=conv_pads, name=f"{base}/phases"
        )
    ]
    full = phases
    if sh * sw > 1:
        split, moved, full = g.fresh(f"{y}_split"), g.fresh(f"{y}_moved"), g.fresh(f"{y}_full")
        shape6 = g.add_const(f"{y}_shape6", np.array([n, sh, sw, cout, q_h, q_w], np.int64))
        shape4 = g.add_const(f"{y}_shape4", np.array([n, cout, q_h * sh, q_w * sw], np.int64))
        nodes += [
            helper.make_node("Reshape", [phases, shape6], [split], name=f"{base}/split"),
            # (n, i, j, co, h, w) -> (n, co, h, i, w, j): phase (i, j) of pixel (h, w) lands at
            # (h·sh + i, w·sw + j).
            helper.make_node(
                "Transpose", [split], [moved], perm=[0, 3, 4, 1, 5, 2], name=f"{base}/shuffle"
            ),
            helper.make_node("Reshape", [moved, shape4], [full], name=f"{base}/merge"),
        ]
    if (pads[0], pads[1], out_h, out_w) == (0, 0, q_h * sh, q_w * sw):
        nodes[-1].output[0] = y
        nodes[-1].name = node.name
        return nodes
    starts = g.add_const(f"{y}_starts", np.array([pads[0], pads[1]], np.int64))
    ends = g.add_const(f"{y}_ends", np.array([pads[0] + out_h, pads[1] + out_w], np.int64))
    axes = g.add_const(f"{y}_axes", np.array([2, 3], np.int64))
    return [*nodes, helper.make_node("Slice", [full, starts, ends, axes], [y], name=node.name)]


def _lpnorm(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "LpNormalization", _lower_lpnorm)


def _lower_lpnorm(g: _Graph, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
    attrs = _attrs(node)
    p = attrs.get("p", 2)
    axis = attrs.get("axis", -1)
    if p not in (1, 2):
        return None
    x, y = node.input[0], node.output[0]
    norm = g.fresh(f"{y}_norm")
    reduce_op = "ReduceL1" if p == 1 else "ReduceL2"
    base = node.name or y
    if _opset(g.model) >= 18:
        axes = g.add_const(f"{y}_axes", np.array([axis], dtype=np.int64))
        reduce = helper.make_node(reduce_op, [x, axes], [norm], keepdims=1, name=f"{base}/norm")
    else:
        reduce = helper.make_node(
            reduce_op, [x], [norm], axes=[axis], keepdims=1, name=f"{base}/norm"
        )
    # A zero norm divides zero by zero: ONNX's reference gives 0 there, as x / max(norm, tiny).
    tiny = g.add_const(f"{y}_tiny", np.array(np.finfo(np.float32).tiny, dtype=np.float32))
    safe = g.fresh(f"{y}_safe")
    return [
        reduce,
        helper.make_node("Max", [norm, tiny], [safe], name=f"{base}/guard"),
        helper.make_node("Div", [x, safe], [y], name=node.name),
    ]


def _batchnorm(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "BatchNormalization", _lower_batchnorm)


def _lower_batchnorm(g: _Graph, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
    attrs = _attrs(node)
    if not attrs.get("training_mode", 0):
        return None
    shape = g.shapes.get(node.input[0])
    if shape is None:
        return None
    x, scale, bias = node.input[0], node.input[1], node.input[2]
    y = node.output[0]
    eps = float(attrs.get("epsilon", 1e-5))
    axes = [0, *range(2, len(shape))]
    cshape = [1, shape[1]] + [1] * (len(shape) - 2)
    base = node.name or y
    names = {
        k: g.fresh(f"{y}_{k}")
        for k in ("mean", "xc", "sq", "var", "ve", "std", "n", "s", "b", "ys")
    }
    eps_name = g.add_const(f"{y}_eps", np.array(eps, dtype=np.float32))
    cshape_name = g.add_const(f"{y}_cshape", np.array(cshape, dtype=np.int64))
    axes_kw: dict = {}
    mean_inputs = [x]
    var_inputs = [names["sq"]]
    if _opset(g.model) >= 18:
        axes_name = g.add_const(f"{y}_axes", np.array(axes, dtype=np.int64))
        mean_inputs.append(axes_name)
        var_inputs.append(axes_name)
    else:
        axes_kw = {"axes": axes}
    return [
        helper.make_node("ReduceMean", mean_inputs, [names["mean"]], keepdims=1, **axes_kw),
        helper.make_node("Sub", [x, names["mean"]], [names["xc"]]),
        helper.make_node("Mul", [names["xc"], names["xc"]], [names["sq"]]),
        helper.make_node("ReduceMean", var_inputs, [names["var"]], keepdims=1, **axes_kw),
        helper.make_node("Add", [names["var"], eps_name], [names["ve"]]),
        helper.make_node("Sqrt", [names["ve"]], [names["std"]]),
        helper.make_node("Div", [names["xc"], names["std"]], [names["n"]]),
        helper.make_node("Reshape", [scale, cshape_name], [names["s"]]),
        helper.make_node("Reshape", [bias, cshape_name], [names["b"]]),
        helper.make_node("Mul", [names["n"], names["s"]], [names["ys"]]),
        helper.make_node("Add", [names["ys"], names["b"]], [y], name=base),
        *_running_stats(g, node, names["mean"], names["var"], float(attrs.get("momentum", 0.9))),
    ]


def _running_stats(
    g: _Graph, node: onnx.NodeProto, mean: str, var: str, momentum: float
) -> list[onnx.NodeProto]:
    """BatchNormalization's optional running_mean/running_var outputs in training mode:
    ``running · momentum + batch · (1 - momentum)`` over the per-channel batch statistics."""
    nodes: list[onnx.NodeProto] = []
    m = g.add_const(f"{node.output[0]}_momentum", np.array(momentum, dtype=np.float32))
    rest = g.add_const(f"{node.output[0]}_rest", np.array(1 - momentum, dtype=np.float32))
    for slot, batch in ((1, mean), (2, var)):
        if len(node.output) <= slot or not node.output[slot]:
            continue
        flat, old, new = (g.fresh(f"{node.output[slot]}_{k}") for k in ("flat", "old", "new"))
        nodes += [
            helper.make_node("Flatten", [batch], [flat], axis=0),
            helper.make_node("Mul", [node.input[2 + slot], m], [old]),
            helper.make_node("Mul", [flat, rest], [new]),
            helper.make_node("Add", [old, new], [f"{node.output[slot]}__2d"]),
        ]
        shape = g.add_const(f"{node.output[slot]}_shape", np.array([-1], dtype=np.int64))
        nodes.append(
            helper.make_node("Reshape", [f"{node.output[slot]}__2d", shape], [node.output[slot]])
        )
    return nodes


def _space_to_depth(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "SpaceToDepth", _lower_space_to_depth)


def _lower_space_to_depth(
    g: _Graph, node: onnx.NodeProto, index: int
) -> list[onnx.NodeProto] | None:
    """SpaceToDepth's CRD mode (opset 26), which the frontend ignores."""
    attrs = _attrs(node)
    if attrs.get("mode", b"DCR") != b"CRD":
        return None
    shape = g.shapes.get(node.input[0])
    if shape is None or len(shape) != 4:
        return None
    b, c, h, w = shape
    bs = int(attrs["blocksize"])
    x, y = node.input[0], node.output[0]
    base = node.name or y
    s1 = g.add_const(f"{y}_shape6", np.array([b, c, h // bs, bs, w // bs, bs], dtype=np.int64))
    s2 = g.add_const(f"{y}_shape4", np.array([b, c * bs * bs, h // bs, w // bs], dtype=np.int64))
    r1, t1 = g.fresh(f"{y}_r"), g.fresh(f"{y}_t")
    return [
        helper.make_node("Reshape", [x, s1], [r1], name=f"{base}/split"),
        helper.make_node("Transpose", [r1], [t1], perm=[0, 1, 3, 5, 2, 4], name=f"{base}/perm"),
        helper.make_node("Reshape", [t1, s2], [y], name=node.name),
    ]


def _celu(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "Celu", _lower_celu)


def _lower_celu(g: _Graph, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
    """Celu(x, a) = a·Elu(x / a): the frontend has Elu, not Celu."""
    alpha = float(_attrs(node).get("alpha", 1.0))
    x, y = node.input[0], node.output[0]
    base = node.name or y
    a = g.add_const(f"{y}_alpha", np.array(alpha, dtype=np.float32))
    scaled, elu = g.fresh(f"{y}_scaled"), g.fresh(f"{y}_elu")
    return [
        helper.make_node("Div", [x, a], [scaled], name=f"{base}/scale"),
        helper.make_node("Elu", [scaled], [elu], alpha=1.0, name=f"{base}/elu"),
        helper.make_node("Mul", [elu, a], [y], name=node.name),
    ]


def _maxpool_indices(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "MaxPool", _lower_maxpool)


def _lower_maxpool(g: _Graph, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
    """An Indices output nothing reads is dropped; one that is read is refused."""
    if len(node.output) < 2 or not node.output[1]:
        return None
    used = {name for n in g.graph.node for name in n.input} | {o.name for o in g.graph.output}
    if node.output[1] in used:
        raise UnsupportedOpError(
            f"MaxPool node {_label(node, index)}: its Indices output (argmax positions) is not "
            "supported by the TVM ONNX frontend"
        )
    del node.output[1:]
    return [node]


def _pow_exponent(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "Pow", _lower_pow)


def _lower_pow(g: _Graph, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
    """A constant integer exponent of a float base becomes a float constant (the frontend's
    power needs one dtype on both sides)."""
    exponent = g.const(node.input[1])
    if exponent is None or exponent.dtype.kind not in "iu":
        return None
    node.input[1] = g.add_const(f"{node.input[1]}_float", exponent.astype(np.float32))
    return [node]


def _tile(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "Tile", _lower_tile)


def _lower_tile(g: _Graph, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
    """Tile as Reshape → Expand → Reshape: TVM's tile (``x[i % d]`` per element) is
    miscompiled for ``mcpu=znver5`` targets (wrong values, 2026-12; plain ``llvm`` is right),
    and the broadcast form has no modulo."""
    reps = g.const(node.input[1])
    shape = g.shapes.get(node.input[0])
    if reps is None or shape is None or len(reps) != len(shape):
        return None
    x, y = node.input[0], node.output[0]
    base = node.name or y
    spread = [v for d in shape for v in (1, d)]
    tiled = [v for r, d in zip(reps.tolist(), shape, strict=True) for v in (r, d)]
    final = [r * d for r, d in zip(reps.tolist(), shape, strict=True)]
    s1 = g.add_const(f"{y}_spread", np.array(spread, dtype=np.int64))
    s2 = g.add_const(f"{y}_tiled", np.array(tiled, dtype=np.int64))
    s3 = g.add_const(f"{y}_shape", np.array(final, dtype=np.int64))
    r1, e1 = g.fresh(f"{y}_r"), g.fresh(f"{y}_e")
    return [
        helper.make_node("Reshape", [x, s1], [r1], name=f"{base}/spread"),
        helper.make_node("Expand", [r1, s2], [e1], name=f"{base}/expand"),
        helper.make_node("Reshape", [e1, s3], [y], name=node.name),
    ]


def _concat_empty(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "Concat", _lower_concat)


def _lower_concat(g: _Graph, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
    """Zero-size pieces of a Concat dropped (a causal conv's empty initial state): TVM cannot
    load a library holding an empty constant."""
    sizes = [g.shapes.get(name) for name in node.input]
    empty = [s is not None and 0 in s for s in sizes]
    if not any(empty) or all(empty):
        return None
    kept = [name for name, e in zip(node.input, empty, strict=True) if not e]
    del node.input[:]
    node.input.extend(kept)
    if len(kept) == 1:
        return [helper.make_node("Identity", kept, list(node.output), name=node.name)]
    return [node]


def _empty_list_attrs(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """Empty list attributes (``axes=[]``, which version_converter writes for a Reduce over all
    axes) dropped: the frontend cannot parse them, and absent means the same."""
    lists = (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS, onnx.AttributeProto.STRINGS)

    def empty(a: onnx.AttributeProto) -> bool:
        return a.type in lists and not (a.ints or a.floats or a.strings)

    if not any(empty(a) for n in model.graph.node for a in n.attribute):
        return None
    out = _copy(model)
    for node in out.graph.node:
        kept = [a for a in node.attribute if not empty(a)]
        if len(kept) != len(node.attribute):
            del node.attribute[:]
            node.attribute.extend(kept)
    return out


_UNARY = frozenset(
    {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "HardSigmoid", "HardSwish", "Neg", "Abs"}
    | {"Exp", "Sqrt", "Identity", "Softplus", "Selu", "Clip"}
)
_BINARY = frozenset({"Add", "Sub", "Mul", "Div"})
_REDUCES = frozenset({"ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum"})
_MAX_SINKS = 256


def _sink_transposes(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """tf2onnx's NHWC idiom, ``Conv → Transpose(to NHWC) → bias Add → Relu → Transpose(to NCHW)
    → Conv``, with the Transposes pushed down through elementwise ops (a constant operand
    transposed to match) until they meet their inverse and both go: one layout transform per
    boundary instead of two per conv (issue #35 item 5)."""
    if not any(n.op_type == "Transpose" for n in model.graph.node):
        return None
    out = _copy(model)
    changed = False
    for _ in range(_MAX_SINKS):
        if not _sink_one(out):
            break
        changed = True
    return out if changed else None


def _sink_one(model: onnx.ModelProto) -> bool:
    """One step: cancel an inverse Transpose pair or swap a Transpose with its only consumer."""
    g = _Graph(model, infer=False)
    graph = model.graph
    outputs = {o.name for o in graph.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for t in graph.node:
        if t.op_type != "Transpose" or t.output[0] in outputs:
            continue
        perm = list(_attrs(t).get("perm", []))
        users = consumers.get(t.output[0], [])
        if not perm or len(users) != 1:
            continue
        user = users[0]
        if user.op_type == "Transpose":
            inner = list(_attrs(user).get("perm", []))
            if len(inner) != len(perm) or [perm[i] for i in inner] != list(range(len(perm))):
                continue
            if user.output[0] in outputs:
                continue  # the pair's output is a graph output: an Identity would keep it
            for node in graph.node:
                node.input[:] = [t.input[0] if n == user.output[0] else n for n in node.input]
            _remove(graph, [t, user])
            return True
        if user.op_type in _REDUCES and user.input[0] == t.output[0]:
            lowered = _reduce_before_transpose(g, t, user, perm)
            if lowered is None:
                continue
            nodes = []
            for node in graph.node:
                if node is user:
                    nodes.extend(lowered)
                elif node is not t:
                    nodes.append(node)
            del graph.node[:]
            graph.node.extend(nodes)
            _drop_value_info(graph)
            return True
        if not _swappable(g, user, t.output[0], len(perm)):
            continue
        inverse = list(np.argsort(perm))
        for i, name in enumerate(user.input):
            if name == t.output[0]:
                user.input[i] = t.input[0]
            elif i > 0 and user.op_type in _BINARY:
                value = g.const(name)
                assert value is not None
                full = value.reshape((1,) * (len(perm) - value.ndim) + value.shape)
                user.input[i] = g.add_const(
                    f"{name}_t", np.ascontiguousarray(full.transpose(inverse))
                )
        moved = g.fresh(f"{user.output[0]}_pre")
        final = user.output[0]
        user.output[0] = moved
        t.input[0] = moved
        t.output[0] = final
        nodes = [n for n in graph.node if n is not t]
        at = next(i for i, n in enumerate(nodes) if n is user)
        nodes.insert(at + 1, t)
        del graph.node[:]
        graph.node.extend(nodes)
        _drop_value_info(graph)
        return True
    return False


def _reduce_axes(g: _Graph, node: onnx.NodeProto, rank: int) -> list[int] | None:
    """The axes a Reduce node reduces (attribute or constant input), None if not static or empty
    (empty reduces everything, or nothing under ``noop_with_empty_axes``)."""
    attrs = _attrs(node)
    if len(node.input) > 1 and node.input[1]:
        value = g.const(node.input[1])
        axes = [] if value is None else [int(a) for a in value.reshape(-1)]
    else:
        axes = [int(a) for a in attrs.get("axes", [])]
    return sorted({a % rank for a in axes}) or None


def _reduce_before_transpose(
    g: _Graph, t: onnx.NodeProto, reduce: onnx.NodeProto, perm: list[int]
) -> list[onnx.NodeProto] | None:
    """``Reduce(Transpose(x, perm), axes)`` as the Reduce of ``x`` over the axes they came from
    (kept, so that the blocked layout reduces NCHWc in place: the global mean of an NHWC head)
    followed by the Transpose, now of the reduced tensor (where only its size-1 axes move, the
    ``unit-transposes`` pass makes it a Reshape). tf2onnx's global average pool: ``to_nchw``,
    the transpose to NHWC and the mean, three kernels over the whole feature map, became one
    blocked mean."""
    rank = len(perm)
    axes = _reduce_axes(g, reduce, rank)
    if axes is None:
        return None
    keepdims = bool(_attrs(reduce).get("keepdims", 1))
    source = sorted(perm[a] for a in axes)
    final = reduce.output[0]
    reduced = g.fresh(f"{final}_pre")
    inputs = [t.input[0]]
    if len(reduce.input) > 1 and reduce.input[1]:
        inputs.append(g.add_const(f"{reduce.input[1]}_t", np.array(source, dtype=np.int64)))
    attrs = {**_attrs(reduce), "keepdims": 1}
    if "axes" in attrs:
        attrs["axes"] = source
    nodes = [helper.make_node(reduce.op_type, inputs, [reduced], name=reduce.name, **attrs)]
    transposed = final if keepdims else g.fresh(f"{final}_t")
    nodes.append(helper.make_node("Transpose", [reduced], [transposed], perm=perm))
    if not keepdims:
        dropped = g.add_const(f"{final}_axes", np.array(axes, dtype=np.int64))
        nodes.append(helper.make_node("Squeeze", [transposed, dropped], [final]))
    return nodes


def _dropout(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "Dropout", _lower_dropout)


def _lower_dropout(g: _Graph, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
    """Dropout at inference (no ``training_mode``, or a constant false one) is the identity; one
    whose mask output is read, or that may train, stays."""
    if len(node.output) > 1 and node.output[1]:
        read = any(node.output[1] in n.input for n in g.graph.node)
        if read or node.output[1] in {o.name for o in g.graph.output}:
            return None
    if len(node.input) > 2 and node.input[2]:
        training = g.const(node.input[2])
        if training is None or bool(training.reshape(-1)[0]):
            return None
    return [helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name)]


def _unit_transposes(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "Transpose", _lower_unit_transpose)


def _lower_unit_transpose(
    g: _Graph, node: onnx.NodeProto, index: int
) -> list[onnx.NodeProto] | None:
    """A Transpose whose axes longer than 1 keep their order is a Reshape (TVM's build makes a
    reshape a view; a transpose is a copy kernel). tf2onnx's grayscale input, NHWC (1, H, W, 1)
    to NCHW, is one."""
    shape = g.shapes.get(node.input[0])
    perm = [int(p) for p in _attrs(node).get("perm", [])]
    if shape is None or sorted(perm) != list(range(len(shape))):
        return None
    moving = [p for p in perm if shape[p] != 1]
    if moving != sorted(moving):
        return None
    target = g.add_const(f"{node.output[0]}_shape", np.array([shape[p] for p in perm], np.int64))
    return [helper.make_node("Reshape", [node.input[0], target], list(node.output), name=node.name)]


def _swappable(g: _Graph, node: onnx.NodeProto, x: str, rank: int) -> bool:
    if node.domain not in _ONNX or len(node.output) != 1:
        return False
    if node.op_type in _UNARY:
        # Clip's bounds are scalars; every other input must be the transposed tensor itself.
        bounds = [g.const(n) for n in node.input[1:] if n]
        return node.input[0] == x and all(b is not None and b.size == 1 for b in bounds)
    if node.op_type in _BINARY and node.input[0] == x and len(node.input) == 2:
        other = g.const(node.input[1])
        return other is not None and other.ndim <= rank and node.input[1] != x
    return False


def _remove(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    kept = [n for n in graph.node if all(n is not r for r in nodes)]
    del graph.node[:]
    graph.node.extend(kept)


def _drop_value_info(graph: onnx.GraphProto) -> None:
    """Inferred shapes go stale when a Transpose moves; fold.py infers them again."""
    del graph.value_info[:]


def _legacy_prelu(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """Before opset 7, PRelu's 1-D slope was per channel (axis 1); from 7 it broadcasts
    numpy-style (to the last axis). Reshaped to (C, 1, ...) before the opset upgrade."""
    if _opset(model) >= 7:
        return None
    return _replace_nodes(model, "PRelu", _lower_legacy_prelu)


def _lower_legacy_prelu(g: _Graph, node: onnx.NodeProto, index: int) -> list[onnx.NodeProto] | None:
    slope = g.const(node.input[1])
    shape = g.shapes.get(node.input[0])
    if slope is None or shape is None or slope.ndim != 1 or slope.size == 1 or len(shape) < 3:
        return None
    if slope.size != shape[1]:
        return None
    channel = slope.reshape((slope.size,) + (1,) * (len(shape) - 2))
    node.input[1] = g.add_const(f"{node.input[1]}_channel", channel)
    return [node]


#: Fewest weights of a 1x1 Conv at one pixel that ``pointwise-gemv`` turns into a Gemm: a
#: classifier's (DenseNet's 1024→1000, MobileNetV3's 960→1280), not a squeeze-excitation
#: bottleneck's (at most 960→240 in the corpus), which stays a conv between blocked tensors.
GEMV_MIN_WEIGHTS = 1 << 19


def _pointwise_gemv(model: onnx.ModelProto) -> onnx.ModelProto | None:
    return _replace_nodes(model, "Conv", _lower_pointwise_gemv)


def _lower_pointwise_gemv(
    g: _Graph, node: onnx.NodeProto, index: int
) -> list[onnx.NodeProto] | None:
    """A 1x1 Conv of a 1x1 image with at least :data:`GEMV_MIN_WEIGHTS` weights (a classifier
    after global pooling) as Reshape, Gemm and Reshape: a matrix-vector product, bound by
    reading the weights once, which the matmul space's column panels stream in order. As a
    conv its loop nest has one pixel to block over: DenseNet-121's 1024→1000 took 1.40 ms
    against onnxruntime's 0.17 (AMX Xeon, 2026-12-05)."""
    attrs = _attrs(node)
    x_shape, w = g.shapes.get(node.input[0]), g.const(node.input[1])
    if x_shape is None or w is None or len(x_shape) != 4 or w.ndim != 4:
        return None
    n, channels, height, width = x_shape
    out_channels = w.shape[0]
    if (
        (height, width) != (1, 1)
        or w.shape[1:] != (channels, 1, 1)
        or w.size < GEMV_MIN_WEIGHTS
        or attrs.get("group", 1) != 1
        or any(int(p) for p in attrs.get("pads", []))
        or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID")
    ):
        return None
    y, base = node.output[0], node.name or node.output[0]
    rows, product = g.fresh(f"{y}_rows"), g.fresh(f"{y}_product")
    inputs = [rows, g.add_const(f"{y}_w2d", np.ascontiguousarray(w.reshape(out_channels, -1)))]
    if len(node.input) > 2 and node.input[2]:
        inputs.append(node.input[2])
    shape2 = g.add_const(f"{y}_shape2", np.array([n, channels], np.int64))
    shape4 = g.add_const(f"{y}_shape4", np.array([n, out_channels, 1, 1], np.int64))
    return [
        helper.make_node("Reshape", [node.input[0], shape2], [rows], name=f"{base}/rows"),
        helper.make_node("Gemm", inputs, [product], transB=1, name=node.name),
        helper.make_node("Reshape", [product, shape4], [y], name=f"{base}/pixels"),
    ]


_REWRITES: tuple[tuple[str, Callable[[onnx.ModelProto], onnx.ModelProto | None]], ...] = (
    ("legacy-prelu", _legacy_prelu),
    ("opset", _upgrade_opset),
    ("resize", _resize),
    ("convtranspose", _convtranspose),
    ("subpixel-convtranspose", _subpixel_convtranspose),
    ("pointwise-gemv", _pointwise_gemv),
    ("lpnorm", _lpnorm),
    ("batchnorm", _batchnorm),
    ("spacetodepth", _space_to_depth),
    ("celu", _celu),
    ("maxpool-indices", _maxpool_indices),
    ("pow", _pow_exponent),
    ("tile", _tile),
    ("empty-attrs", _empty_list_attrs),
    ("concat-empty", _concat_empty),
    ("dropout", _dropout),
    ("transposes", _sink_transposes),
    ("unit-transposes", _unit_transposes),
)


# ---------------------------------------------------------------------------------------------
# the onnxruntime check
# ---------------------------------------------------------------------------------------------


def _check_with_ort(original: onnx.ModelProto, steps: list[tuple[str, onnx.ModelProto]]) -> None:
    """Refuse when onnxruntime's outputs for the last step differ from the original's; the
    message names the first step whose outputs differ."""
    feeds = _seeded_feeds(original)
    reference = _ort_run(original, feeds)
    if reference is None:
        return  # onnxruntime cannot run the original: the final verification is the check
    if _same(reference, _ort_run(steps[-1][1], feeds)):
        return
    for name, model in steps:
        if not _same(reference, _ort_run(model, feeds)):
            raise UnsupportedOpError(
                f"the import rewrite '{name}' changes the model's outputs under onnxruntime; "
                "convtune cannot import this model"
            )
    raise UnsupportedOpError(
        f"the import rewrites ({', '.join(n for n, _ in steps)}) change the model's outputs "
        "under onnxruntime; convtune cannot import this model"
    )


def _seeded_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(_CHECK_SEED)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    import onnxruntime as ort

    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 4
        session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
        return [np.asarray(x) for x in session.run(None, feeds)]
    except Exception:
        return None


def _same(a: list[np.ndarray], b: list[np.ndarray] | None) -> bool:
    if b is None or len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return False
        if x.dtype.kind == "f" or y.dtype.kind == "f":
            atol = _ATOL * max(1.0, float(np.nanmax(np.abs(x), initial=0.0)))
            if not np.allclose(x, y, rtol=_RTOL, atol=atol, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return True
