"""Workload extraction: ONNX → Relax → fused TIR tasks, each tied back to the ONNX nodes it covers.

TVM's frontend keeps no ONNX node names, so the link is made by structure: every Conv, Gemm and
MatMul becomes exactly one *anchor* block (a multiply-accumulate reduction over two operands) inside
one fused TIR function. An anchor's spatial extents hold the node's output elements (in NCHW or a
blocked NCHW[x]c layout) and its reduction
extent is ``Cin/groups·kh·kw`` (conv) or ``K`` (Gemm/MatMul); ONNX nodes are matched to the fused
call sites in graph order by that signature.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import onnx
import tvm
import tvm.relax.frontend.onnx  # registers relax.frontend.onnx
from tvm import relax, s_tir, tirx
from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.analysis import estimate_tir_flops
from tvm.target import Target
from tvm_ffi import structural_hash

from convtune.schedules.ops.annotations import SCHEDULED
from convtune.schedules.ops.isa import (
    has_amx_bf16,
    has_amx_int8,
    has_bf16,
    has_vnni,
    vector_lanes,
)
from convtune.schedules.ops.winograd import TILE_SIZES
from convtune.schedules.ops.winograd_conv import is_winograd_nchwc, winograd_tile
from convtune.tuner.errors import UnsupportedOpError, error_line
from convtune.tuner.graph.bf16 import bf16_convs
from convtune.tuner.graph.denormals import flush_denormal_constants
from convtune.tuner.graph.fake_quantize import fake_quantize_pass
from convtune.tuner.graph.flops import node_flops, node_key, static_shapes
from convtune.tuner.graph.ingest import IngestedModel
from convtune.tuner.graph.inplace_concat import write_concats_in_place
from convtune.tuner.graph.layout import ConvBlockingError, ConvLayout, LayoutPlan, blocked_layout
from convtune.tuner.graph.lookup_tables import elementwise_table_lookups, lookup_tables
from convtune.tuner.graph.lrn import fuse_local_response_norms
from convtune.tuner.graph.matmul_padding import pad_matmul_columns, padded_columns
from convtune.tuner.graph.pad_pattern import padding_is_not_elementwise
from convtune.tuner.graph.quantized import GEMV_OUTPUT_ALIGN, integer_convs, singleton_qparams
from convtune.tuner.graph.reciprocal_quantize import legalize_quantize
from convtune.tuner.graph.wide_means import legalize_mean
from convtune.tuner.options import DEFAULT_LAYOUT, Algorithm, Layout, Precision

ANCHOR_OPS = {"Conv": "conv", "ConvTranspose": "conv", "Gemm": "gemm", "MatMul": "matmul"}


@dataclass(frozen=True)
class RelaxModel:
    """The model as Relax, its weights embedded as constants (folded and packed at build time).

    ``plan`` says how each conv2d is laid out (None: plain NCHW asked for); ``fallbacks`` holds one
    line per fallback taken on the way (a conv kept NCHW, or the whole model), for the user.
    """

    mod: IRModule
    plan: LayoutPlan | None = None
    fallbacks: tuple[str, ...] = ()
    #: Denormal weights set to zero (``denormals.py``).
    denormals_flushed: int = 0

    def layout_summary(self) -> dict[str, Any]:
        """What the manifest and the CLI report: per conv its layout, per model the transforms."""
        notes = {"fallbacks": list(self.fallbacks), "denormals_flushed": self.denormals_flushed}
        if self.plan is None:
            return {"layout": "nchw", "transforms": 0, **notes}
        return {**self.plan.as_dict(), **notes}


@dataclass
class ModelTask:
    """One fused TIR function of the model: what MetaSchedule tunes and the database keys."""

    index: int
    task: ms.ExtractedTask
    shash: str
    flops: float
    kind: str = "other"
    op: str = ""
    description: dict[str, Any] = field(default_factory=dict)
    onnx_nodes: list[str] = field(default_factory=list)
    #: The model's conv2d ops (graph order, as ``LayoutPlan.convs``) this task computes.
    convs: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.task.task_name)

    @property
    def mod(self) -> IRModule:
        return self.task.dispatched[0]

    @property
    def algorithm(self) -> Algorithm:
        """How the task's convolution computes (direct unless it is a Winograd kernel)."""
        return Algorithm.WINOGRAD if self.winograd_tile else Algorithm.DIRECT

    @property
    def is_alternative(self) -> bool:
        """Whether the task is another algorithm for convs a direct task also computes: the
        build picks one per conv (tuner/algorithms.py), and the search measures these last."""
        return self.algorithm is not Algorithm.DIRECT

    @cached_property
    def winograd_tile(self) -> int:
        """The output tile m of a Winograd F(m×m, 3×3) task; 0 for any other task. Read off the
        TIR once: the search sorts by it and the build's choice reads it per candidate."""
        return winograd_tile(self.mod)

    @property
    def occurrences(self) -> int:
        return int(self.task.weight)

    @property
    def shape_text(self) -> str:
        """A short human form of the workload, e.g. ``1x64x56x56 * 64x64x3x3 s1 p1``; the task's
        name when its description lacks what the form needs (a label never stops a job)."""
        try:
            return _shape_text(self.kind, self.description) or self.name
        except (KeyError, TypeError, ValueError):
            return self.name

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.name,
            "shash": self.shash,
            "kind": self.kind,
            "op": self.op,
            "shape": self.shape_text,
            "description": self.description,
            "onnx_nodes": list(self.onnx_nodes),
            "occurrences": self.occurrences,
            "flops": self.flops,
            "algorithm": self.algorithm.value if self.kind == "conv" else None,
            "winograd_tile": self.winograd_tile or None,
        }


def _shape_text(kind: str, d: dict[str, Any]) -> str:
    if kind == "conv":
        op = "*ᵀ" if d.get("transposed") else "*"
        text = f"{_dims(d['input'])} {op} {_dims(d['weight'])} s{_dims(d['strides'], ',')}"
        # .get: descriptions stored by earlier versions lack keys (ConvTranspose had no pads).
        if any(d.get("pads", ())):
            text += f" p{_dims(d['pads'], ',')}"
        if any(x != 1 for x in d.get("dilations", ())):
            text += f" d{_dims(d['dilations'], ',')}"
        if d.get("groups", 1) != 1:
            text += f" g{d['groups']}"
        return text
    if kind in ("gemm", "matmul"):
        return f"M={d['M']} N={d['N']} K={d['K']}"
    return ""


def _dims(values: Sequence[int], sep: str = "x") -> str:
    return sep.join(str(v) for v in values)


def to_relax(
    ingested: IngestedModel, target: Target | None = None, precision: Precision = Precision.FP32
) -> RelaxModel:
    """Convert with TVM's ONNX frontend; a converter failure names the op and node. With a
    ``target``, the QDQ convs it can run as integer convs become such (``quantized.py``), and
    with ``Precision.BF16`` the fp32 convs it can run in bf16 (``bf16.py``)."""
    try:
        mod = relax.frontend.onnx.from_onnx(ingested.model)
    except Exception as exc:  # the frontend raises bare Exceptions of many kinds
        raise UnsupportedOpError(
            f"the TVM ONNX frontend could not convert the model: {error_line(exc)}"
        ) from None
    notes: list[str] = []
    if target is not None:
        try:
            mod, integer = integer_convs(
                mod, vector_lanes(target), has_vnni(target), has_amx_int8(target)
            )
            notes = integer.notes()
            if integer.quantized:
                mod = singleton_qparams(mod)
        except Exception as exc:  # the QDQ graph still runs as it is, in fp32
            notes = [f"int8: QDQ convs left in fp32, the integer rewrite failed: {error_line(exc)}"]
    try:
        mod, _ = lookup_tables(mod)
    except Exception as exc:  # the activations still run as their fp32 chains
        notes.append(f"int8: activations left as fp32 chains, tables failed: {error_line(exc)}")
    try:
        mod, _ = fuse_local_response_norms(mod)
    except Exception as exc:  # the frontend's decomposition still computes it
        notes.append(f"LRN left as the frontend's eight ops, its kernel failed: {error_line(exc)}")
    # Inference BatchNorm becomes a scale of the conv weights and a bias: one fused kernel per
    # Conv+BN+ReLU instead of a conv and a separate memory-bound pass.
    # Folding the scaled weights to constants here lets the layout pass (tuner/graph/layout.py)
    # pack them with numpy: a weight that is still arithmetic would be packed at run time.
    # A BatchNorm that follows no conv (DenseNet's pre-activation ones) becomes a per-channel
    # multiply-add of constants, which the blocked layout carries (batch_norm it cannot).
    folded = relax.transform.FoldConstant()(
        relax.transform.DecomposeOpsForInference()(
            relax.transform.FoldConstant()(relax.transform.FoldBatchnormToConv2D()(mod))
        )
    )
    if target is not None:
        folded, _ = pad_matmul_columns(folded, vector_lanes(target))
    if Precision.parse(precision) is Precision.BF16:
        if target is None:
            notes.append("bf16: every conv stays fp32: bf16 convs need the blocked layout")
        else:
            try:
                folded, converted = bf16_convs(
                    folded, vector_lanes(target), has_bf16(target), has_amx_bf16(target)
                )
                notes += converted.notes()
            except Exception as exc:  # the model still runs, in fp32
                notes.append(f"bf16: every conv stays fp32, the rewrite failed: {error_line(exc)}")
    return RelaxModel(mod=folded, fallbacks=tuple(notes))


def fusion_passes() -> list[tvm.transform.Pass]:
    """Lower and fuse, as TVM's ``compile_relax`` does before applying the database (large
    means summed in fp64: :mod:`~convtune.tuner.graph.wide_means`), after
    :mod:`~convtune.tuner.graph.fake_quantize`'s quantize → dequantize pairs as float
    arithmetic, plus :func:`~convtune.tuner.graph.lookup_tables.elementwise_table_lookups` and
    :func:`~convtune.tuner.graph.pad_pattern.padding_is_not_elementwise` after the pattern
    analysis; ``fuse`` (task extraction) and ``library.build_library`` share it, so task keys
    match."""
    return [
        fake_quantize_pass,
        relax.transform.LegalizeOps(
            {"relax.mean": legalize_mean, "relax.quantize": legalize_quantize}
        ),
        relax.transform.AnnotateTIROpPattern(),
        elementwise_table_lookups,
        padding_is_not_elementwise,
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


def fuse(relax_model: RelaxModel) -> IRModule:
    """The model's fused TIR functions, as the build compiles them (:func:`fusion_passes`).

    ``extract_tasks`` alone does not legalize or fuse and would return no tasks.
    """
    with tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(fusion_passes())(relax_model.mod)


@dataclass(frozen=True)
class _Anchor:
    """The multiply-accumulate block of a fused function: its output extents and reduction size."""

    outputs: int
    reduction: int


def _anchor(func: tirx.PrimFunc) -> _Anchor | None:
    sch = s_tir.Schedule(func)
    for block_rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(block_rv)
        if block.init is None or len(block.reads) < 2:
            continue
        value = getattr(block.body, "value", None)
        if not isinstance(value, tirx.Add) or not isinstance(value.b, tirx.Mul):
            continue
        outputs = math.prod(int(iv.dom.extent) for iv in block.iter_vars if int(iv.iter_type) == 0)
        reduction = math.prod(
            int(iv.dom.extent) for iv in block.iter_vars if int(iv.iter_type) == 2
        )
        return _Anchor(outputs=outputs, reduction=reduction)
    return None


def _call_sites(fused: IRModule) -> list[str]:
    """Names of the TIR functions ``main`` calls, in binding order."""
    names: list[str] = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and expr.op == tvm.ir.Op.get("relax.call_tir"):
            names.append(expr.args[0].name_hint)

    relax.analysis.post_order_visit(fused["main"].body, visit)
    return names


def _conv_keys(
    node: onnx.NodeProto,
    attrs: dict[str, Any],
    x: Sequence[int],
    w: Sequence[int],
    y: Sequence[int],
) -> dict[str, Any]:
    """A Conv's or ConvTranspose's description, ONNX's defaults filled in."""
    rank = len(w) - 2
    return {
        "input": list(x),
        "weight": list(w),
        "output": list(y),
        "strides": list(attrs.get("strides", [1] * rank)),
        "pads": list(attrs.get("pads", [0] * 2 * rank)),
        "dilations": list(attrs.get("dilations", [1] * rank)),
        "groups": int(attrs.get("group", 1)),
        "bias": len(node.input) > 2 and bool(node.input[2]),
    }


def _onnx_anchor(
    node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]
) -> tuple[_Anchor, dict[str, Any]] | None:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Conv":
        x, w = shapes.get(node.input[0]), shapes.get(node.input[1])
        y = shapes.get(node.output[0])
        if x is None or w is None or y is None:
            return None
        desc = _conv_keys(node, attrs, x, w, y)
        if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            desc["auto_pad"] = (
                attrs["auto_pad"].decode()
                if isinstance(attrs["auto_pad"], bytes)
                else attrs["auto_pad"]
            )
        return _Anchor(outputs=math.prod(y), reduction=math.prod(w[1:])), desc
    if node.op_type == "ConvTranspose":
        # TOPI's conv2d_transpose: every output element sums Cin/groups·kh·kw products (weights
        # are Cin × Cout/groups × kh × kw).
        x, w = shapes.get(node.input[0]), shapes.get(node.input[1])
        y = shapes.get(node.output[0])
        if x is None or w is None or y is None:
            return None
        groups = int(attrs.get("group", 1))
        reduction = w[0] // groups * math.prod(w[2:])
        # The same keys as a Conv's: every reader of a conv description (shape_text, the
        # dashboard, the layer page) takes both.
        desc = {
            **_conv_keys(node, attrs, x, w, y),
            "transposed": True,
            "flops": 2.0 * math.prod(y) * reduction,
        }
        return _Anchor(outputs=math.prod(y), reduction=reduction), desc
    if node.op_type in ("Gemm", "MatMul"):
        a, b = shapes.get(node.input[0]), shapes.get(node.input[1])
        y = shapes.get(node.output[0])
        if a is None or b is None or y is None:
            return None
        if node.op_type == "Gemm":
            k = a[0] if attrs.get("transA", 0) else a[1]
            desc = {
                "M": y[0],
                "N": y[1],
                "K": k,
                "transA": int(attrs.get("transA", 0)),
                "transB": int(attrs.get("transB", 0)),
                "alpha": float(attrs.get("alpha", 1.0)),
                "beta": float(attrs.get("beta", 1.0)),
                "bias": len(node.input) > 2 and bool(node.input[2]),
            }
        else:
            k = a[-1]
            desc = {
                "M": a[-2] if len(a) > 1 else 1,
                "N": b[-1] if len(b) > 1 else 1,
                "K": k,
                "batch": list(y[:-2]),
                "a": list(a),
                "b": list(b),
            }
        return _Anchor(outputs=math.prod(y), reduction=int(k)), desc
    return None


def conv_node_names(model: onnx.ModelProto) -> list[str]:
    """Names of the 2-D Conv nodes in graph order: the frontend emits their conv2d in this order,
    which is how ``LayoutPlan.convs`` (Relax order) is tied back to ONNX nodes."""
    shapes = static_shapes(model)
    names = []
    for position, node in enumerate(model.graph.node):
        if node.op_type == "Conv" and len(shapes.get(node.input[1], ())) == 4:
            names.append(node_key(node, position))
    return names


def _conv_label(names: list[str], index: int) -> str:
    return f"Conv {names[index]!r}" if index < len(names) else f"conv2d #{index}"


#: Convs kept NCHW one by one before the whole model falls back.
_MAX_CONV_RETRIES = 8


def model_for_target(
    ingested: IngestedModel,
    target: Target,
    layout: Layout = DEFAULT_LAYOUT,
    winograd_tiles: dict[int, int] | None = None,
    precision: Precision = Precision.FP32,
) -> RelaxModel:
    """The Relax model convtune compiles: converted, BN folded, and with ``Layout.NCHWC`` its
    convolutions in the blocked layout (tuner/graph/layout.py), those of ``winograd_tiles`` (conv
    index → tile) as Winograd where they can be; its weights without denormals (denormals.py).

    The blocked layout never fails a model: a conv whose rewrite fails is retried in NCHW, any
    other failure of the pass compiles the whole model NCHW; ``fallbacks`` says which and why.
    """
    return _without_denormals(_laid_out(ingested, target, layout, winograd_tiles, precision))


def _without_denormals(relax_model: RelaxModel) -> RelaxModel:
    """``relax_model`` with its denormal weights set to zero and counted (``denormals.py``)."""
    mod, flushed = flush_denormal_constants(relax_model.mod)
    return replace(relax_model, mod=mod, denormals_flushed=flushed)


def _laid_out(
    ingested: IngestedModel,
    target: Target,
    layout: Layout,
    winograd_tiles: dict[int, int] | None,
    precision: Precision,
) -> RelaxModel:
    if Layout.parse(layout) is not Layout.NCHWC:
        return _concats_in_place(to_relax(ingested, None, precision))
    relax_model = to_relax(ingested, target, precision)
    names = conv_node_names(ingested.model)
    forced: dict[int, str] = {}
    fallbacks: list[str] = []
    while True:
        try:
            mod, plan = blocked_layout(relax_model.mod, target, forced, winograd_tiles)
            notes = (*relax_model.fallbacks, *fallbacks, *plan.notes)
            return RelaxModel(mod=mod, plan=plan, fallbacks=notes)
        except ConvBlockingError as exc:
            if exc.index in forced or len(forced) >= _MAX_CONV_RETRIES:
                failure = str(exc)
                break
            forced[exc.index] = error_line(exc.cause)
            fallbacks.append(
                f"{_conv_label(names, exc.index)} kept in NCHW: blocking it failed "
                f"({error_line(exc.cause)})"
            )
        except Exception as exc:  # a TVM failure must never reach the user as a traceback
            failure = error_line(exc)
            break
    return nchw_fallback(relax_model, fallbacks, f"the blocked layout pass failed: {failure}")


def nchw_fallback(relax_model: RelaxModel, fallbacks: list[str], why: str) -> RelaxModel:
    """The whole model in plain NCHW, with the reason recorded for the user."""
    message = f"whole model compiled in NCHW: {why}"
    plan = LayoutPlan(lanes=0, fallback=message)
    return _concats_in_place(
        RelaxModel(
            mod=relax_model.mod,
            plan=plan,
            fallbacks=(*fallbacks, message),
            denormals_flushed=relax_model.denormals_flushed,
        )
    )


def _concats_in_place(relax_model: RelaxModel) -> RelaxModel:
    """``relax_model`` (NCHW, not legalized yet) with its concat chains written in place
    (``inplace_concat.py``; the blocked layout pass does it for the blocked model)."""
    mod, chains, note = write_concats_in_place(relax_model.mod)
    if relax_model.plan is not None:
        relax_model.plan.concat_chains = chains
    return replace(relax_model, mod=mod, fallbacks=(*relax_model.fallbacks, *filter(None, [note])))


def extract_tasks(
    ingested: IngestedModel,
    target: Target,
    layout: Layout = DEFAULT_LAYOUT,
    algorithms: Sequence[Algorithm] = (Algorithm.DIRECT,),
    precision: Precision = Precision.FP32,
) -> tuple[RelaxModel, list[ModelTask]]:
    """Every fused TIR task of the model, the anchor ones described by the ONNX nodes they cover.

    With ``Algorithm.WINOGRAD`` in ``algorithms``, the Winograd kernels of every eligible conv
    (one task per tile size) follow the model's own tasks: alternatives the search measures and
    the build picks from (``tuner/algorithms.py``); the returned model computes every conv direct.
    """
    relax_model = model_for_target(ingested, target, layout, precision=precision)
    try:
        fused = fuse(relax_model)
        extracted = ms.relax_integration.extract_tasks(fused, target)
    except Exception as exc:  # never a traceback: the blocked model falls back to NCHW
        if relax_model.plan is None or relax_model.plan.fallback:
            raise _compile_error("task extraction", exc) from None
        relax_model = nchw_fallback(
            _without_denormals(to_relax(ingested)),
            list(relax_model.fallbacks),
            f"task extraction of the blocked model failed: {error_line(exc)}",
        )
        try:
            fused = fuse(relax_model)
            extracted = ms.relax_integration.extract_tasks(fused, target)
        except Exception as exc2:
            raise _compile_error("task extraction", exc2) from None
    tasks: list[ModelTask] = []
    # Kernels built scheduled (the register transposes of channel_blocking.py) are not tasks.
    extracted = [ext for ext in extracted if not ext.dispatched[0]["main"].attrs.get(SCHEDULED)]
    for index, ext in enumerate(extracted):
        mod = ext.dispatched[0]
        task = ModelTask(index=index, task=ext, shash=str(structural_hash(mod)), flops=_flops(mod))
        tasks.append(task)
    try:
        _link_onnx_nodes(ingested.model, fused, tasks, relax_model.plan)
    except Exception as exc:  # names and shapes are for people: the tasks tune without them
        why = f"layers not linked to ONNX nodes (names, shapes left out): {error_line(exc)}"
        relax_model = replace(relax_model, fallbacks=(*relax_model.fallbacks, why))
    if Algorithm.WINOGRAD in algorithms and relax_model.plan and not relax_model.plan.fallback:
        for tile in TILE_SIZES:
            eligible = [c.index for c in relax_model.plan.convs if tile in c.winograd_tile_sizes]
            if not eligible:
                continue
            try:
                tasks += _winograd_tasks(ingested, target, layout, tasks, eligible, tile, precision)
            except Exception as exc:  # the direct kernels stand; say why there is no choice
                why = f"Winograd F({tile}x{tile},3x3) not offered: {error_line(exc)}"
                relax_model = replace(relax_model, fallbacks=(*relax_model.fallbacks, why))
    return relax_model, tasks


def _flops(mod: IRModule) -> float:
    """TVM's FLOP estimate of a task; 0 where its analysis fails on an unusual function (the
    allocation then goes by the other tasks' shares, and the task still tunes)."""
    try:
        return float(estimate_tir_flops(mod))
    except Exception:
        return 0.0


def _winograd_tasks(
    ingested: IngestedModel,
    target: Target,
    layout: Layout,
    tasks: list[ModelTask],
    eligible: list[int],
    tile: int,
    precision: Precision,
) -> list[ModelTask]:
    """The Winograd F(tile×tile) tasks of the ``eligible`` convs, described like their direct
    tasks: the model is planned with every eligible conv Winograd and its new tasks kept."""
    variant = model_for_target(ingested, target, layout, {c: tile for c in eligible}, precision)
    assert variant.plan is not None
    winograd_convs = [c.index for c in variant.plan.convs if c.winograd_tile]
    fused = fuse(variant)
    extracted = ms.relax_integration.extract_tasks(fused, target)
    known = {task.shash for task in tasks}
    found: dict[str, ModelTask] = {}
    for ext in extracted:
        mod = ext.dispatched[0]
        shash = str(structural_hash(mod))
        if shash not in known and is_winograd_nchwc(mod):
            flops = _flops(mod)
            found[shash] = ModelTask(len(tasks) + len(found), ext, shash, flops, kind="conv")
    # Winograd call sites come in graph order, like the convs the plan made Winograd.
    by_func = tasks_by_function(fused, list(found.values()))
    sites = [name for name in _call_sites(fused) if name in by_func]
    if len(sites) != len(winograd_convs):
        raise RuntimeError(f"{len(sites)} Winograd kernels for {len(winograd_convs)} convs")
    for func_name, conv in zip(sites, winograd_convs, strict=True):
        task = by_func[func_name]
        direct = next((t for t in tasks if conv in t.convs), None)
        if direct is None:
            continue
        task.op = direct.op
        task.description = {**direct.description, "winograd_tile": tile}
        task.onnx_nodes += [n for n in direct.onnx_nodes if n not in task.onnx_nodes]
        task.convs.append(conv)
    return [task for task in found.values() if task.convs]


def _padded_anchors(anchor: _Anchor, desc: dict[str, Any]) -> set[_Anchor]:
    """The anchors of a Gemm/MatMul whose weight ``matmul_padding.py`` padded to whole vectors
    (of either width: the pass ran for the target's), or the QDQ rewrite to whole output blocks
    of its integer conv (``quantized.GEMV_OUTPUT_ALIGN``)."""
    columns = int(desc.get("N") or 0)
    if not columns or anchor.outputs % columns:
        return set()
    rows = anchor.outputs // columns
    widths = [padded_columns(columns, lanes) for lanes in (8, 16)]
    widths.append(-(-columns // GEMV_OUTPUT_ALIGN) * GEMV_OUTPUT_ALIGN)
    return {_Anchor(outputs=rows * width, reduction=anchor.reduction) for width in widths}


def _conv_signature(in_channels: int, out_channels: int, groups: int, kernel: Any) -> tuple:
    return (int(in_channels), int(out_channels), int(groups), tuple(int(k) for k in kernel))


class _PlanEntries:
    """The layout plan's entry of each ONNX Conv: the k-th conv of a shape (channels, groups,
    kernel) in the graph is the k-th the layout pass planned of that shape. The pass numbers
    convs in Relax's binding order, which may differ from the ONNX graph's (a model of parallel
    branches: the frontend emitted two branches' first convs before either's second)."""

    def __init__(self, plan: LayoutPlan | None) -> None:
        self.reason = plan.fallback if plan else ""
        self._queues: dict[tuple, list[ConvLayout]] = {}
        # After a whole-model fallback every conv is NCHW: no entry describes one.
        for conv in plan.convs if plan is not None and not plan.fallback else []:
            key = _conv_signature(conv.in_channels, conv.out_channels, conv.groups, conv.kernel)
            self._queues.setdefault(key, []).append(conv)

    def take(self, desc: dict[str, Any]) -> ConvLayout | None:
        """The entry of the next ONNX Conv described by ``desc`` (graph order), if planned."""
        weight = desc["weight"]
        key = _conv_signature(desc["input"][1], weight[0], desc["groups"], weight[2:])
        queue = self._queues.get(key)
        return queue.pop(0) if queue else None


def _conv_layout(entries: _PlanEntries, conv: ConvLayout | None) -> dict[str, str]:
    """``layout`` (and why NCHW, when the blocked layout was asked for) of a conv2d."""
    if conv is None:
        return {"layout": "NCHW", "layout_reason": entries.reason}
    return {"layout": conv.layout, "layout_reason": conv.reason, "precision": conv.precision}


def _computed_anchor(anchor: _Anchor, conv: ConvLayout | None, desc: dict[str, Any]) -> _Anchor:
    """The anchor of a conv (its plan entry ``conv``) as its kernel computes it: with the zero
    filters that pad its output channels to a block, its TIR block has more outputs than the
    ONNX node; with the zero kernel columns that fill an AMX tile row or the zero input channels
    that pad the AMX stem's pixels to 4 (``conv_kinds/amx.py``), a longer reduction."""
    if conv is None:
        return anchor
    outputs, reduction = anchor.outputs, anchor.reduction
    if conv.computed_channels > conv.out_channels:
        outputs = outputs // conv.out_channels * conv.computed_channels
    columns, channels = int(desc["weight"][-1]), int(desc["weight"][1])
    if conv.computed_columns > columns:
        reduction = reduction // columns * conv.computed_columns
    if conv.computed_in_channels > channels:
        reduction = reduction // channels * conv.computed_in_channels
    return _Anchor(outputs=outputs, reduction=reduction)


def _compile_error(stage: str, exc: BaseException) -> UnsupportedOpError:
    """One line for a TVM failure no fallback could avoid, naming the op where TVM names it."""
    return UnsupportedOpError(f"TVM could not compile the model ({stage}): {error_line(exc)}")


def tasks_by_function(fused: IRModule, tasks: list[ModelTask]) -> dict[str, ModelTask]:
    """Map every fused function name to its task (extraction merges structurally equal ones)."""
    by_hash = {structural_hash(task.mod["main"]): task for task in tasks}
    by_func: dict[str, ModelTask] = {}
    for gv, func in fused.functions.items():
        if isinstance(func, tirx.PrimFunc):
            task = by_hash.get(structural_hash(func.with_attr("global_symbol", "main")))
            if task is not None:
                by_func[gv.name_hint] = task
    return by_func


def _link_onnx_nodes(
    model: onnx.ModelProto, fused: IRModule, tasks: list[ModelTask], plan: LayoutPlan | None
) -> None:
    by_func = tasks_by_function(fused, tasks)
    sites: list[tuple[str, _Anchor]] = []
    for func_name in _call_sites(fused):
        func = fused[func_name]
        anchor = _anchor(func) if isinstance(func, tirx.PrimFunc) else None
        if func_name in by_func and anchor is not None:
            sites.append((func_name, anchor))
    used = [False] * len(sites)
    shapes = static_shapes(model)
    entries = _PlanEntries(plan)
    conv_index = -1
    for position, node in enumerate(model.graph.node):
        if node.op_type not in ANCHOR_OPS:
            continue
        if node.op_type == "Conv" and len(shapes.get(node.input[1], ())) == 4:
            conv_index += 1
        found = _onnx_anchor(node, shapes)
        if found is None:
            continue
        anchor, desc = found
        if node.op_type == "Conv":
            planned = entries.take(desc)
            desc.update(_conv_layout(entries, planned))
            anchor = _computed_anchor(anchor, planned, desc)
        elif node.op_type == "ConvTranspose" and plan is not None:
            desc.update(layout="NCHW", layout_reason="ConvTranspose is compiled NCHW")
        anchors = {anchor, *_padded_anchors(anchor, desc)}
        for i, (func_name, site_anchor) in enumerate(sites):
            if not used[i] and site_anchor in anchors:
                used[i] = True
                task = by_func[func_name]
                task.kind = ANCHOR_OPS[node.op_type]
                task.op = node.op_type
                if not task.description:
                    task.description = {"flops": node_flops(node, shapes), **desc}
                name = node_key(node, position)
                if name not in task.onnx_nodes:
                    task.onnx_nodes.append(name)
                if node.op_type == "Conv":
                    task.convs.append(conv_index)
                break
