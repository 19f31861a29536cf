"""Graph-level blocked layout: convolutions in NCHW[x]c, planned per convolution (NeoCPU, ATC'19).

Relax's ``ConvertLayout`` is all-or-nothing and crashes on common graphs (``Expected nested to
match tuple`` on Concat/Split tuples: SqueezeNet, Inception, VGG19, AlexNet; ``Invalid SLayout``
on ShuffleNet and the Caffe2 ResNet-50). This pass is ours and cannot fail a model:

- a tensor of C channels is blocked by :func:`channel_block`: x = the target's fp32 lanes when x
  divides C, else half a register (x/2) when that divides it, so MobileNet's and EfficientNet's
  24-, 40-, 72- and 120-channel stages are blocked too (by 8 on AVX-512; they were NCHW, and the
  24-channel stage of MobileNetV2 alone cost 0.46 ms more than onnxruntime's, more than the
  whole model's gap). A tensor's block is a function of its channel count, so every op on
  same-shaped tensors sees the same block; a count whose grouped convs have groups the half
  register divides and the whole one does not takes the half register (ShuffleNet's 544
  channels in groups of 136: :func:`half_blocked_counts`);
- each ``conv2d`` is decided alone, by the conv kinds of ``conv_kinds/`` (one module per kind,
  registered in ``CONV_KINDS``): blocked (``NCHW{a}c`` data, ``OIHW{a}i{b}o`` weights,
  ``NCHW{b}c`` out, a and b the blocks of its input and output) when its input and output
  channels per group divide by their blocks (``dense``, or its variant ``winograd`` where the
  caller asks); a depthwise conv of blockable channels runs blocked too (``depthwise``), and a
  conv with fewer input channels than its output's block (the RGB stem) reads NCHW and writes
  blocked (``stem``). Otherwise (odd channel counts) it stays NCHW and ``LayoutPlan.convs`` says
  why: padding channels up to a block would only compute zeros;
- a blocked result stays blocked through the ops that can carry it: elementwise unary ops,
  binary ops with a same-shape blocked operand or a per-channel/scalar constant (bias, folded
  BatchNorm, residual add, SiLU/HardSwish arithmetic), max/avg pooling (ceil_mode and
  count_include_pad included), the spatial mean of GlobalAveragePool, Concat and Split along
  channels when every piece is a whole number of blocks, Resize, Dropout, and a DCR
  depth-to-space (reshape, permute, reshape: the upsampling ConvTranspose of DB and U-Net heads
  after ``normalize``) whose output channels are a whole number of blocks, and ShuffleNet's
  channel shuffle (``pixel_shuffle``; in fp32 two register transposes, out of the blocks and
  back in shuffled order);
- any other op gets its operands back in NCHW through one ``layout_transform`` per tensor
  (cached: a tensor read by several NCHW ops is transformed once). So the graph becomes blocked
  islands with transforms only at their edges, and an op the pass does not know merely costs a
  transform.

Weight and constant layouts are rearranged with numpy at build time, so no transform of a weight
ever reaches the compiled model. TVM's own legalization refuses blocked conv layouts, so each
conv kind legalizes the calls it built (the dense one with TOPI's ``conv2d_NCHWc`` compute);
MetaSchedule then tiles that loop nest, whose innermost output-channel axis is exactly one vector
register wide.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule, Op
from tvm.ir.expr import GenericConst
from tvm.relax import BlockBuilder, Call, Expr
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.target import Target
from tvm.tirx import IndexMap

from convtune.schedules.ops.channel_blocking import (
    channel_blocking_kernel,
    reblocking_kernel,
    transposable,
)
from convtune.schedules.ops.conv_call import attr_dtype
from convtune.schedules.ops.dense import reblock
from convtune.schedules.ops.dot_conv import format_of_data
from convtune.schedules.ops.isa import amx_precisions, full_width_fma, vector_lanes

from .conv_kinds import CONV_KINDS, ConvKind, ConvOperands, ConvSite, base_kind, variants_of
from .fake_quantize import fake_quantize_pairs
from .inplace_concat import write_concats_in_place
from .lookup_tables import is_table_lookup, legalize_table_lookup
from .lrn import blocked_lrn_call, lrn_params
from .pixel_shuffle import CHANNEL_SHUFFLE_AXES, ChannelShuffle, Shuffle, shuffled_position
from .reciprocal_quantize import legalize_quantize
from .rewrite import static_shape
from .tile_blocks import TILE_BLOCK, one_pixel, tile_blocked_counts
from .topi_pad import constant_pad
from .wide_means import legalize_mean

_CONV2D = Op.get("relax.nn.conv2d")
_LAYOUT_TRANSFORM = Op.get("relax.layout_transform")

#: Ops whose only tensor operand may be in any layout: they act element by element.
_UNARY = frozenset(
    f"relax.{name}"
    for name in (
        "nn.relu",
        "nn.silu",
        "nn.gelu",
        "nn.gelu_tanh",
        "nn.leakyrelu",
        "nn.softplus",
        "clip",
        "sigmoid",
        "tanh",
        "exp",
        "sqrt",
        "rsqrt",
        "negative",
        "abs",
        "erf",
        "log",
        "square",
        "round",
        "floor",
        "ceil",
        "astype",
    )
)
#: Broadcasting binary ops: blocked when the other operand is blocked too, or a constant that
#: is a scalar or varies only along channels.
_BINARY = frozenset(
    f"relax.{name}"
    for name in (
        "add",
        "subtract",
        "multiply",
        "divide",
        "maximum",
        "minimum",
        "power",
    )
)
#: Quantize/dequantize: element by element when their scale and zero point are scalars.
_QDQ = frozenset({"relax.quantize", "relax.dequantize"})
#: Pre-legalized scalar bounds the ONNX frontend emits for Clip, by PrimFunc name.
_SCALAR_TIR = {"maximum": relax.op.maximum, "minimum": relax.op.minimum}
_POOL2D = frozenset({"relax.nn.max_pool2d", "relax.nn.avg_pool2d"})


@dataclass
class ConvLayout:
    """How one conv2d of the model (in graph order) is compiled, and why."""

    index: int
    layout: str
    in_channels: int
    out_channels: int
    groups: int
    reason: str = ""
    #: Its kernel's (height, width), () where the weight's shape is not static.
    kernel: tuple[int, ...] = ()
    #: The Winograd output tiles m of F(m×m, 3×3) it may run as (conv_kinds/winograd.py: a
    #: blocked 3×3 stride-1 conv; fp32 F(2×2) and F(4×4), bf16 F(2×2)); () where none.
    winograd_tile_sizes: tuple[int, ...] = ()
    #: Its Winograd output tile m of F(m×m, 3×3), or 0 where it runs the direct convolution.
    winograd_tile: int = 0
    #: The output channels its kernel computes: more than ``out_channels`` where zero filters
    #: pad them to a block (conv_kinds/padded_out.py); 0 until it is planned blocked.
    computed_channels: int = 0
    #: What it multiplies: "int8" (u8×s8→s32) or "bf16" (``conv_kinds/dot.py``), or "fp32".
    precision: str = "fp32"
    #: The kernel columns its reduction runs over: more than the kernel's where zero columns
    #: fill an AMX tile row (``conv_kinds/amx.py``); 0 until it is planned blocked.
    computed_columns: int = 0
    #: The input channels its reduction runs over: more than ``in_channels`` where zero
    #: channels pad the AMX stem's pixels to 4 (``conv_kinds/amx.py``); 0 until planned.
    computed_in_channels: int = 0

    @property
    def blocked(self) -> bool:
        return self.layout != "NCHW"

    @property
    def winograd_eligible(self) -> bool:
        return bool(self.winograd_tile_sizes)

    @property
    def algorithm(self) -> str:
        """What the conv computes, as the manifest and the dashboard show it."""
        tile = self.winograd_tile
        return f"winograd F({tile}x{tile},3x3)" if tile else "direct"

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "layout": self.layout,
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "groups": self.groups,
            "reason": self.reason,
            "algorithm": self.algorithm,
            "winograd_eligible": self.winograd_eligible,
            "computed_channels": self.computed_channels or self.out_channels,
            "precision": self.precision,
        }


@dataclass
class LayoutPlan:
    """What the blocked-layout pass did to a model: per conv its layout, and the transforms left."""

    lanes: int
    #: Whether the target's whole-register FMA does twice a half register's work
    #: (``isa.full_width_fma``): half-blocked conv outputs are then computed padded.
    full_width_fma: bool = False
    #: The precisions the target's AMX tiles multiply ("int8", "bf16"): such convs then pack
    #: their kernel columns into the reduction (``conv_kinds/amx.py``).
    amx: tuple[str, ...] = ()
    convs: list[ConvLayout] = field(default_factory=list)
    #: ``layout_transform`` calls on activations at run time (island edges).
    transforms: int = 0
    #: Why a broader fallback happened (whole model NCHW), empty when none did.
    fallback: str = ""
    #: Convs the caller forced to NCHW after a failure, with the failure text.
    forced_nchw: dict[int, str] = field(default_factory=dict)
    #: Convs (graph order) the caller asks to run as Winograd, with their output tile; only
    #: eligible ones do (``ConvLayout.winograd_eligible``).
    winograd_tiles: dict[int, int] = field(default_factory=dict)
    #: Channel counts held in half-register blocks for grouped convs (:func:`half_blocked_counts`).
    half_blocked: list[int] = field(default_factory=list)
    #: Channel counts held in 64-channel blocks for AMX int8 convs (``tile_blocks.py``).
    tile_blocked: list[int] = field(default_factory=list)
    #: Concat chains written in place (``inplace_concat.py``).
    concat_chains: int = 0
    #: One line per optional rewrite that fell back (the model runs without it).
    notes: list[str] = field(default_factory=list)
    #: The conv (graph order) whose rewrite raised, and what it raised.
    failure: tuple[int, BaseException] | None = field(default=None, repr=False)

    @property
    def blocked_convs(self) -> int:
        return sum(c.blocked for c in self.convs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "lanes": self.lanes,
            "blocked_convs": self.blocked_convs,
            "nchw_convs": len(self.convs) - self.blocked_convs,
            "transforms": self.transforms,
            "half_blocked": self.half_blocked,
            "tile_blocked": self.tile_blocked,
            "concat_chains": self.concat_chains,
            "fallback": self.fallback,
            "convs": [c.as_dict() for c in self.convs],
        }


class ConvBlockingError(RuntimeError):
    """Blocking conv2d number ``index`` (graph order) failed; the caller may retry without it."""

    def __init__(self, index: int, cause: BaseException) -> None:
        super().__init__(f"conv2d #{index}: {_first_line(cause)}")
        self.index = index
        self.cause = cause


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _shape(expr: Expr) -> tuple[int, ...] | None:
    """Static shape of a tensor expression, None when unknown or symbolic."""
    return static_shape(expr.ty)


def _scalar(expr: Expr) -> bool:
    return isinstance(expr, GenericConst) and expr.value.numpy().size == 1


def channel_block(
    channels: int,
    lanes: int,
    half_blocked: frozenset[int] = frozenset(),
    tile_blocked: frozenset[int] = frozenset(),
) -> int | None:
    """The block (NCHW{block}c) a tensor of ``channels`` is held in on a target of ``lanes`` fp32
    lanes: a whole register when it divides the channels, else half of one if that is still 8
    lanes (a ymm register), else None (NCHW). A count in ``half_blocked``
    (:func:`half_blocked_counts`: a grouped conv's groups split its whole blocks) takes the
    half register first; a count in ``tile_blocked`` (``tile_blocks.py``: only AMX int8 convs
    read and write it) is held in blocks of a 64-byte tile row.

    Half a register is the AVX2 width on an AVX-512 machine: half the FMA throughput per
    instruction, but the 1x1 and depthwise convs of these narrow stages are bound by memory,
    and in NCHW their vector axis was the image width, with unaligned loads at every tap. An
    AVX2 target gets no 4-lane blocks: nothing measured them, and the channel counts they would
    add (multiples of 4, not of 8) are squeeze-excitation bottlenecks of 1x1 pixel."""
    if channels in tile_blocked:
        return TILE_BLOCK
    blocks = channel_blocks(lanes)
    if channels in half_blocked:
        blocks = blocks[::-1]
    return next((block for block in blocks if channels % block == 0), None)


def half_blocked_counts(mod: IRModule, lanes: int) -> frozenset[int]:
    """The channel counts of ``mod`` held in half-register blocks so that a grouped conv runs
    blocked: a grouped (not depthwise) conv whose channels per group the half register divides
    and the whole one does not, on either side. ShuffleNet's 544-channel tensors split into
    four groups of 136 (17 blocks of 8, 8.5 of 16): in 16-channel blocks its grouped 1×1 convs
    stayed NCHW, 0.25 ms each at 7×7 against onnxruntime's 0.09 (AMX Xeon, 2026-12-05). Every
    tensor of such a count is half-blocked, so elementwise ops between them still agree."""
    half = lanes // 2
    if half < 8:
        return frozenset()
    counts: set[int] = set()

    def visit(expr: Expr) -> None:
        if not (isinstance(expr, Call) and expr.op == _CONV2D):
            return
        groups = int(expr.attrs.groups)
        x_shape, w_shape = _shape(expr.args[0]), _shape(expr.args[1])
        if groups == 1 or x_shape is None or w_shape is None or groups == x_shape[1]:
            return
        for channels in (x_shape[1], w_shape[0]):
            per_group = channels // groups
            if per_group % lanes and per_group % half == 0:
                counts.add(channels)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return frozenset(counts)


def channel_blocks(lanes: int) -> tuple[int, ...]:
    """The blocks a tensor may have on a target of ``lanes`` fp32 lanes, widest first: a whole
    register, and half of one if that is still 8 lanes (:func:`channel_block`)."""
    return (lanes, lanes // 2) if lanes // 2 >= 8 else (lanes,)


def _to_blocked(block: int) -> Callable[..., tuple[Any, ...]]:
    return lambda n, c, h, w: (n, c // block, h, w, c % block)


def _shuffled_to_blocked(block: int, groups: int, channels: int) -> Callable[..., tuple[Any, ...]]:
    """NCHW → NCHW{block}c through ShuffleNet's channel shuffle in ``groups``
    (:func:`~.pixel_shuffle.shuffled_position`)."""

    def index(n: Any, c: Any, h: Any, w: Any) -> tuple[Any, ...]:
        shuffled = shuffled_position(c, channels, groups)
        return (n, shuffled // block, h, w, shuffled % block)

    return index


def _to_nchw(block: int) -> Callable[..., tuple[Any, ...]]:
    return lambda n, c, h, w, b: (n, c * block + b, h, w)


def _block_constant(value: np.ndarray, channels: int, block: int) -> np.ndarray | None:
    """A constant broadcast against an NCHW tensor of ``channels``, rearranged to broadcast
    against its NCHW{x}c form; None if it varies along an axis that cannot be carried."""
    if value.ndim == 0 or value.size == 1:
        return value.reshape(()) if value.ndim == 0 else value.reshape((1,) * 5)
    if value.ndim > 4:
        return None
    v4 = value.reshape((1,) * (4 - value.ndim) + value.shape)
    n, c, h, w = v4.shape
    if c == channels:
        return np.ascontiguousarray(v4.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))
    if c == 1:
        return v4.reshape(n, 1, h, w, 1)
    return None


@dataclass
class _Blocked:
    """A tensor held in NCHW{block}c: the new variable, its NCHW channel count and its block."""

    var: relax.Var
    channels: int
    block: int


@mutator
class _BlockingMutator(PyExprMutator):
    """Rewrites one Relax function; see the module docstring for the rules."""

    def __init__(self, mod: IRModule, plan: LayoutPlan, forced_nchw: frozenset[int]) -> None:
        super().__init__(mod)
        self.plan = plan
        self.lanes = plan.lanes
        self.half_blocked = frozenset(plan.half_blocked)
        self.tile_blocked = frozenset(plan.tile_blocked)
        self.forced_nchw = forced_nchw
        # old var -> its blocked version (that var has NO NCHW binding until one is needed)
        self.blocked: dict[relax.Var, _Blocked] = {}
        # old var bound to a tuple of blocked tensors (a Split) -> new tuple var, channels
        self.blocked_tuples: dict[relax.Var, tuple[relax.Var, list[int]]] = {}
        # old var of a depth-to-space's intermediate -> its blocked value, the shuffle, and
        # whether it is past the permutation
        self.shuffled: dict[relax.Var, tuple[relax.Var, Shuffle | ChannelShuffle, bool]] = {}
        # old var bound to a tuple literal -> its blocked fields by index
        self.tuple_fields: dict[relax.Var, dict[int, _Blocked]] = {}
        self.nchw_cache: dict[relax.Var, relax.Var] = {}
        self.block_cache: dict[relax.Var, relax.Var] = {}
        self.conv_count = 0

    def _block(self, channels: int) -> int | None:
        return channel_block(channels, self.lanes, self.half_blocked, self.tile_blocked)

    def _kernel_block(self, channels: int, at_one_pixel: bool) -> int | None:
        """The block a conv's kernel reads or writes ``channels`` in: the block its tensors are
        held in, except at one pixel (``tile_blocks.one_pixel``), where the kernel takes the
        register-wide block and a reshape joins it to the held one."""
        if at_one_pixel:
            return channel_block(channels, self.lanes, self.half_blocked)
        return self._block(channels)

    def _known_block(self, channels: int) -> int:
        """The block of a tensor this pass has already blocked (so its channels have one)."""
        block = self._block(channels)
        assert block is not None, channels
        return block

    def _held(self, var: relax.Var, channels: int) -> _Blocked:
        return _Blocked(var, channels, self._known_block(channels))

    # --- layout materialization -----------------------------------------------------------------

    def _nchw(self, var: relax.Var) -> Expr:
        """The NCHW value of an old var that was only computed blocked (one transform, cached)."""
        cached = self.nchw_cache.get(var)
        if cached is not None:
            return cached
        if var in self.blocked:
            new = self.builder_.emit(
                relax.op.layout_transform(self.blocked[var].var, _to_nchw(self.blocked[var].block)),
                name_hint=f"{var.name}_nchw",
            )
        elif var in self.shuffled:
            value, shuffle, moved = self.shuffled[var]
            new = self.builder_.emit(shuffle.unblocked(value, moved), name_hint=f"{var.name}_nchw")
        else:
            tup, channels = self.blocked_tuples[var]
            items = [
                self.builder_.emit(
                    relax.op.layout_transform(
                        relax.TupleGetItem(tup, i), _to_nchw(self._known_block(c))
                    )
                )
                for i, c in enumerate(channels)
            ]
            new = self.builder_.emit(relax.Tuple(items), name_hint=f"{var.name}_nchw")
        self.nchw_cache[var] = new
        return new

    def visit_var_(self, var: relax.Var) -> Expr:
        if var in self.blocked or var in self.blocked_tuples or var in self.shuffled:
            return self._nchw(var)
        return super().visit_var_(var)

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> Expr:
        if var in self.blocked or var in self.blocked_tuples or var in self.shuffled:
            return self._nchw(var)
        return super().visit_dataflow_var_(var)

    def _as_blocked(self, expr: Expr) -> _Blocked | None:
        """``expr`` (an old var) in blocked form: existing, or transformed once if it is a 4-D
        tensor whose channels have a block; None otherwise."""
        if isinstance(expr, relax.Var) and expr in self.blocked:
            return self.blocked[expr]
        shape = _shape(expr)
        block = self._block(shape[1]) if shape is not None and len(shape) == 4 else None
        if shape is None or block is None:
            return None
        if isinstance(expr, GenericConst):
            data = _block_constant(expr.value.numpy(), shape[1], block)
            assert data is not None
            return _Blocked(relax.const(data, str(expr.ty.dtype)), shape[1], block)
        if not isinstance(expr, relax.Var):
            return None
        cached = self.block_cache.get(expr)
        if cached is None:
            source, index = self.visit_expr(expr), _to_blocked(block)
            shuffle = self._nchw_channel_shuffle(source)
            if shuffle is not None:
                # ShuffleNet's channel shuffle in NCHW before the move into blocks: one pass
                # does both (the shuffle's own ops die unless another op reads them).
                source, groups = shuffle
                index = _shuffled_to_blocked(block, groups, shape[1])
            cached = self.builder_.emit(
                relax.op.layout_transform(source, index), name_hint=f"{expr.name}_blocked"
            )
            self.block_cache[expr] = cached
        return _Blocked(cached, shape[1], block)

    def _nchw_channel_shuffle(self, value: Expr) -> tuple[Expr, int] | None:
        """(source, groups) when ``value`` (emitted here) is a channel shuffle of an NCHW
        tensor: reshape to (N, g, C/g, H, W), swap the two channel axes, reshape back."""
        calls: list[Call] = []
        for op_name in ("relax.reshape", "relax.permute_dims", "relax.reshape"):
            if not isinstance(value, relax.Var):
                return None
            bound = self.lookup_binding(value)
            if not (isinstance(bound, Call) and isinstance(bound.op, Op)):
                return None
            if bound.op.name != op_name:
                return None
            calls.append(bound)
            value = bound.args[0]
        merged, swapped, split = calls
        source_shape, split_shape = _shape(value), _shape(split)
        if source_shape is None or source_shape != _shape(merged) or len(source_shape) != 4:
            return None
        axes = [int(a) for a in swapped.attrs.axes] if swapped.attrs.axes is not None else []
        if (
            axes != list(CHANNEL_SHUFFLE_AXES)
            or ChannelShuffle.of_split(source_shape, 1, split_shape) is None
        ):
            return None
        assert split_shape is not None
        return value, split_shape[1]

    # --- bindings -------------------------------------------------------------------------------

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value, var = binding.value, binding.var
        is_call = isinstance(value, Call) and isinstance(value.op, Op)
        if is_call and self._rewrite_call(var, value):
            if not isinstance(var, relax.DataflowVar) and var in self.blocked:
                # A function output is NCHW: the blocked value is transformed back into it.
                held = self.blocked[var]
                back = relax.op.layout_transform(held.var, _to_nchw(held.block))
                emit = (
                    self.builder_.emit_output
                    if self.builder_.current_block_is_dataflow()
                    else self.builder_.emit
                )
                self.nchw_cache[var] = emit(back, name_hint=var.name)
            return
        if (
            isinstance(var, relax.DataflowVar)
            and isinstance(value, relax.TupleGetItem)
            and value.tuple_value in self.blocked_tuples
        ):
            tup, channels = self.blocked_tuples[value.tuple_value]
            new = self.builder_.emit(relax.TupleGetItem(tup, value.index), name_hint=var.name)
            self.blocked[var] = self._held(new, channels[value.index])
            return
        if isinstance(var, relax.DataflowVar) and isinstance(value, relax.Tuple):
            fields = {
                index: self.blocked[field]
                for index, field in enumerate(value.fields)
                if isinstance(field, relax.Var) and field in self.blocked
            }
            if fields:
                self.tuple_fields[var] = fields
        if (
            isinstance(var, relax.DataflowVar)
            and isinstance(value, relax.TupleGetItem)
            and value.index in self.tuple_fields.get(value.tuple_value, {})
        ):
            # The field of a tuple built here is the blocked tensor itself: a BatchNorm's
            # decomposition leaves (output, mean, variance)[0], and its output went to NCHW
            # and back (PP-OCR det's head BN at 160², 24 channels: 0.19 + 0.25 ms on Zen 5).
            # The tuple, used by nothing else, leaves with the dead code.
            self.blocked[var] = self.tuple_fields[value.tuple_value][value.index]
            return
        super().visit_var_binding_(binding)

    def _rewrite_call(self, var: relax.Var, call: Call) -> bool | None:
        name = call.op.name
        if name == "relax.call_tir":
            return (
                self._scalar_call_tir(var, call)
                or self._pad_call_tir(var, call)
                or self._lrn_call_tir(var, call)
            )
        if name == "relax.nn.conv2d":
            return self._conv2d(var, call)
        if not any(
            isinstance(a, relax.Var) and (a in self.blocked or a in self.shuffled)
            for a in _tensor_args(call)
        ) and not self._strided_pool_alone(call):
            return None
        if name in ("relax.reshape", "relax.permute_dims"):
            return self._depth_to_space(var, call)
        if not isinstance(var, relax.DataflowVar) and name in ("relax.split", "relax.nn.dropout"):
            return None  # a tuple output: left as is
        return self._carry(var, call, name)

    def _strided_pool_alone(self, call: Call) -> bool:
        """Whether ``call`` is a strided max/avg pool of an NCHW fp32 tensor to block alone,
        between register transposes. In NCHW its vector axis is the output row, read at the
        stride: ShuffleNet's 3×3 stride-2 average pool of 136×28×28 took 0.042 ms tuned, the
        blocked one of 24×56×56 0.0045 (Zen 4); the transforms into and out of 8-blocks take
        0.005 and 0.002."""
        if call.op.name not in _POOL2D or str(call.attrs.layout) != "NCHW":
            return False
        shape = _shape(call.args[0])
        if shape is None or len(shape) != 4 or all(int(s) == 1 for s in call.attrs.strides):
            return False
        block = self._block(shape[1])
        dtype = str(call.args[0].ty.dtype)
        return block is not None and transposable(block, self.lanes, dtype)

    def _scalar_call_tir(self, var: relax.Var, call: Call) -> bool | None:
        """``call_tir(maximum|minimum, (x, scalar))``: the frontend's Clip with constant bounds
        (ReLU6), emitted pre-legalized; as the Relax op it carries the blocked layout."""
        func, args = call.args[0], call.args[1]
        if not isinstance(func, tvm.ir.GlobalVar) or not isinstance(args, relax.Tuple):
            return None
        op = _SCALAR_TIR.get(func.name_hint.rstrip("0123456789_"))
        if op is None or len(args.fields) != 2:
            return None
        x, bound = args.fields
        if not isinstance(x, relax.Var) or x not in self.blocked:
            return None
        if not isinstance(bound, GenericConst) or _shape(bound) != () or _shape(call) != _shape(x):
            return None
        src = self.blocked[x]
        return self._emit_blocked(var, op(src.var, bound), src.channels)

    def _emit_blocked(self, var: relax.Var, expr: Expr, channels: int) -> bool:
        new = self.builder_.emit(expr, name_hint=var.name)
        self.blocked[var] = self._held(new, channels)
        return True

    def _conv2d(self, var: relax.Var, call: Call) -> bool | None:
        index = self.conv_count
        self.conv_count += 1
        x_shape, w_shape = _shape(call.args[0]), _shape(call.args[1])
        groups = int(call.attrs.groups)
        entry = ConvLayout(
            index=index,
            layout="NCHW",
            in_channels=x_shape[1] if x_shape else 0,
            out_channels=w_shape[0] if w_shape else 0,
            groups=groups,
            kernel=tuple(w_shape[2:]) if w_shape else (),
        )
        self.plan.convs.append(entry)
        site, reason = self._site(call, x_shape, w_shape, groups)
        kind: ConvKind | None = None
        if site is not None:
            base, decision = base_kind(site)
            kind, reason = (base if decision.blocked else None), decision.reason
        if kind is not None and index in self.forced_nchw:
            kind, reason = None, f"kept NCHW after a failure: {self.plan.forced_nchw[index]}"
        if kind is not None and site is not None:
            for variant in variants_of(kind):
                if variant.decide(site) is not None:
                    entry.winograd_tile_sizes = variant.tiles
                    tile = self.plan.winograd_tiles.get(index, 0)
                    if tile in variant.tiles:
                        entry.winograd_tile, kind = tile, variant
        if kind is None or site is None:
            entry.reason = reason
            return None
        try:
            self._emit_blocked_conv(var, site, kind, entry.winograd_tile)
        except Exception as exc:  # an op the struct-info inference refuses: this conv only
            # Raised through TVM's FFI, which rewraps it: the plan keeps the identity.
            self.plan.failure = (index, exc)
            raise
        entry.computed_channels = kind.out_channels(site)
        entry.computed_columns = kind.computed_columns(site)
        entry.computed_in_channels = kind.computed_in_channels(site)
        dot = format_of_data(str(site.call.args[0].ty.dtype))
        entry.precision = dot.precision if dot is not None else "fp32"
        in_layout = f"NCHW{site.in_block}c" if kind.reads_blocked else "NCHW"
        out_layout = f"NCHW{self.blocked[var].block}c" if kind.writes_blocked else "NCHW"
        if not (kind.reads_blocked or kind.writes_blocked):
            # NCHW on both sides of a blocked kernel (the padded stem): name the kernel's block.
            computed = self._known_block(entry.computed_channels)
            entry.layout = f"NCHW→NCHW{computed}c→NCHW"
        else:
            entry.layout = out_layout if in_layout == out_layout else f"{in_layout}→{out_layout}"
        entry.reason = reason
        return True

    def _site(
        self,
        call: Call,
        x_shape: tuple[int, ...] | None,
        w_shape: tuple[int, ...] | None,
        groups: int,
    ) -> tuple[ConvSite | None, str]:
        """The conv as the conv kinds see it, or None and why it stays NCHW whatever its kind."""
        attrs = call.attrs
        if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
            return None, f"already {attrs.data_layout}"
        if x_shape is None or w_shape is None:
            return None, "dynamic shape"
        data = call.args[0]
        out_shape = _shape(call)
        at_one_pixel = out_shape is not None and one_pixel(x_shape, out_shape)
        site = ConvSite(
            call=call,
            x_shape=x_shape,
            w_shape=w_shape,
            groups=groups,
            in_block=self._kernel_block(x_shape[1], at_one_pixel),
            out_block=self._kernel_block(w_shape[0], at_one_pixel),
            smallest=min(channel_blocks(self.lanes)),
            input_blocked=isinstance(data, relax.Var) and data in self.blocked,
            lanes=self.lanes,
            full_width_fma=self.plan.full_width_fma,
            amx=self.plan.amx,
        )
        return site, ""

    def _emit_blocked_conv(self, var: relax.Var, site: ConvSite, kind: ConvKind, tile: int) -> None:
        """Emit the conv of ``site`` as ``kind`` builds it (its output blocked)."""
        call = site.call
        out_shape = _shape(call)
        assert out_shape is not None
        at_one_pixel = one_pixel(site.x_shape, out_shape)
        out_block = self._kernel_block(kind.out_channels(site), at_one_pixel)
        assert out_block is not None
        if kind.reads_blocked:
            held = self._as_blocked(call.args[0])
            assert held is not None and site.in_block is not None
            data = self._reblocked(held.var, held.block, site.in_block)
            data_block: int | None = site.in_block
        else:
            data, data_block = self.visit_expr(call.args[0]), None
        weight = call.args[1]
        if not isinstance(weight, GenericConst):
            weight = self.visit_expr(weight)
        operands = ConvOperands(data, data_block, weight, out_block, tile)
        built = kind.build(self.builder_, site, operands)
        if kind.writes_blocked:
            if at_one_pixel:  # the kernel's block, reshaped to the one its tensors are held in
                held_block = self._known_block(out_shape[1])
                emitted = self.builder_.emit(built)
                # The block the kind wrote, not the one it computed in: the padded kind
                # computes 24 channels as 32 in 16-channel blocks and returns 8-channel ones.
                shape = static_shape(emitted.ty)
                written = shape[-1] if shape is not None else out_block
                built = self._reblocked(emitted, written, held_block)
            self._emit_blocked(var, built, out_shape[1])
        else:
            self._emit_nchw(var, built)

    def _emit_nchw(self, var: relax.Var, expr: Expr) -> None:
        """Bind ``var`` to an NCHW value computed from blocked ones (a function output is
        emitted as one)."""
        dataflow = self.builder_.current_block_is_dataflow()
        output = dataflow and not isinstance(var, relax.DataflowVar)
        emit = self.builder_.emit_output if output else self.builder_.emit
        self.set_var_remap(var, emit(expr, name_hint=var.name))

    def _blocked_call_tir(self, call: Call) -> tuple[object, _Blocked] | None:
        """The callee and the blocked operand of ``call_tir(f, (x,))`` whose one operand ``x`` is
        held blocked; None for any other ``call_tir``."""
        func, args = call.args[0], call.args[1]
        if not isinstance(func, tvm.ir.GlobalVar) or not isinstance(args, relax.Tuple):
            return None
        if len(args.fields) != 1 or not isinstance(args.fields[0], relax.Var):
            return None
        src = self.blocked.get(args.fields[0])
        return None if src is None else (self.builder_.get()[func], src)

    def _pad_call_tir(self, var: relax.Var, call: Call) -> bool | None:
        """``call_tir(pad, (x,))``: the frontend's constant Pad (``topi_pad``); padding only
        rows and columns, it carries the blocked layout as ``relax.nn.pad``."""
        found = self._blocked_call_tir(call)
        if found is None:
            return None
        prim, src = found
        pad = constant_pad(prim) if isinstance(prim, tvm.tirx.PrimFunc) else None
        if pad is None or len(pad.before) != 4:
            return None
        if any(pad.before[:2] + pad.after[:2]):  # batch or channels
            return None
        (_, _, top, left), (_, _, bottom, right) = pad.before, pad.after
        widths = [0, 0, 0, 0, top, bottom, left, right, 0, 0]
        expr = relax.op.nn.pad(src.var, widths, "constant", pad.value)
        return self._emit_blocked(var, expr, src.channels)

    def _lrn_call_tir(self, var: relax.Var, call: Call) -> bool | None:
        """``call_tir(local_response_norm, (x,))`` (``lrn.py``) on a blocked ``x``: the blocked
        kernel, whose window reaches into the neighbouring blocks."""
        found = self._blocked_call_tir(call)
        if found is None:
            return None
        prim, src = found
        params = lrn_params(prim)
        if params is None or src.channels % src.block:
            return None
        expr = blocked_lrn_call(self.builder_, src.var, src.channels, params)
        return self._emit_blocked(var, expr, src.channels)

    def _carry(self, var: relax.Var, call: Call, name: str) -> bool | None:
        """Emit ``call`` on blocked operands if its op can carry the layout; None otherwise."""
        out_shape = _shape(call)
        args = call.args
        if name == "relax.nn.dropout":
            # (output, mask), both shaped like the input; the identity at inference.
            src = self.blocked[args[0]]
            new = self.builder_.emit(relax.Call(call.op, [src.var], call.attrs), name_hint=var.name)
            self.blocked_tuples[var] = (new, [src.channels, src.channels])
            return True
        if name in _UNARY or (name in _QDQ and all(_scalar(a) for a in args[1:])):
            unary = self.blocked.get(args[0]) if isinstance(args[0], relax.Var) else None
            if unary is None or out_shape is None or len(out_shape) != 4:
                return None
            new_call = relax.Call(call.op, [unary.var, *args[1:]], call.attrs, call.ty_args)
            return self._emit_blocked(var, new_call, unary.channels)
        if name == "relax.take" and is_table_lookup(call):
            # A quantized activation's table (lookup_tables.py): element by element on the index.
            index = self.blocked.get(args[1]) if isinstance(args[1], relax.Var) else None
            if index is None or out_shape is None or len(out_shape) != 4:
                return None
            new_call = relax.Call(call.op, [args[0], index.var], call.attrs, call.ty_args)
            return self._emit_blocked(var, new_call, index.channels)
        if name in _BINARY:
            if out_shape is None or len(out_shape) != 4:
                return None
            block = self._block(out_shape[1])
            if block is None:
                return None
            operands: list[Expr] = []
            for arg in args:
                shape = _shape(arg)
                if isinstance(arg, relax.Var) and arg in self.blocked:
                    operands.append(self.blocked[arg].var)
                elif isinstance(arg, GenericConst):
                    data = _block_constant(arg.value.numpy(), out_shape[1], block)
                    if data is None:
                        return None
                    operands.append(relax.const(data, str(arg.ty.dtype)))
                elif shape == out_shape:
                    blocked = self._as_blocked(arg)
                    if blocked is None:
                        return None
                    operands.append(blocked.var)
                else:
                    return None
            return self._emit_blocked(var, relax.Call(call.op, operands, call.attrs), out_shape[1])
        if name == "relax.nn.prelu":
            return self._prelu(var, call, out_shape)
        if name in _POOL2D:
            attrs = call.attrs
            if str(attrs.layout) != "NCHW" or out_shape is None:
                return None
            pooled = self._as_blocked(args[0])  # blocked already, or a strided pool's input
            if pooled is None:
                return None
            layout = f"NCHW{pooled.block}c"
            op = relax.op.nn.max_pool2d if name == "relax.nn.max_pool2d" else relax.op.nn.avg_pool2d
            expr = op(
                pooled.var,
                pool_size=attrs.pool_size,
                strides=attrs.strides,
                padding=attrs.padding,
                dilation=attrs.dilation,
                ceil_mode=bool(attrs.ceil_mode),
                count_include_pad=bool(attrs.count_include_pad),
                layout=layout,
                out_layout=layout,
            )
            return self._emit_blocked(var, expr, pooled.channels)
        if name == "relax.nn.adaptive_avg_pool2d":
            attrs = call.attrs
            src = self.blocked[args[0]]
            if str(attrs.layout) != "NCHW":
                return None
            expr = relax.op.nn.adaptive_avg_pool2d(
                src.var,
                output_size=attrs.output_size,
                layout=f"NCHW{src.block}c",
                out_layout=f"NCHW{src.block}c",
            )
            return self._emit_blocked(var, expr, src.channels)
        if name in ("relax.mean", "relax.max", "relax.sum"):
            # GlobalAveragePool/-MaxPool: a keepdims reduction over H and W.
            attrs = call.attrs
            axes = sorted(int(a) % 4 for a in (attrs.axis or []))
            if axes != [2, 3] or not bool(attrs.keepdims):
                return None
            src = self.blocked[args[0]]
            reduce = {"relax.mean": relax.op.mean, "relax.max": relax.op.max}.get(
                name, relax.op.sum
            )
            return self._emit_blocked(
                var, reduce(src.var, axis=[2, 3], keepdims=True), src.channels
            )
        if name == "relax.image.resize2d":
            attrs = call.attrs
            src = self.blocked[args[0]]
            if str(attrs.layout) != "NCHW":
                return None
            expr = relax.op.image.resize2d(
                src.var,
                args[1],
                roi=[float(v) for v in attrs.roi],
                layout=f"NCHW{src.block}c",
                method=str(attrs.method),
                coordinate_transformation_mode=str(attrs.coordinate_transformation_mode),
                rounding_method=str(attrs.rounding_method),
                cubic_alpha=float(attrs.cubic_alpha),
                cubic_exclude=int(attrs.cubic_exclude),
                extrapolation_value=float(attrs.extrapolation_value),
                out_dtype=attr_dtype(attrs.out_dtype),
            )
            return self._emit_blocked(var, expr, src.channels)
        if name == "relax.nn.pad":
            # Spatial padding (a quantized conv's input padded with its zero point).
            attrs = call.attrs
            widths = [int(w) for w in attrs.pad_width]
            src = self.blocked[args[0]]
            if len(widths) != 8 or any(widths[:4]):
                return None
            expr = relax.op.nn.pad(
                src.var, [*widths, 0, 0], str(attrs.pad_mode), float(attrs.pad_value)
            )
            return self._emit_blocked(var, expr, src.channels)
        if name == "relax.concat":
            return self._concat(var, call, out_shape)
        if name == "relax.split":
            return self._split(var, call)
        if name == "relax.strided_slice":
            return self._slice(var, call, out_shape)
        return None

    def _prelu(self, var: relax.Var, call: Call, out_shape: tuple[int, ...] | None) -> bool | None:
        """PReLU with a constant slope per channel (or one slope), as ``x > 0 ? x : x * slope``
        on the blocked tensor: ``nn.prelu`` names one slope axis, which NCHW{x}c splits in two.
        Elementwise, it fuses into the conv's epilogue; as ``nn.prelu`` it went to NCHW and back
        after every conv of MTCNN's P-Net, two transforms and a kernel each (30% of its time)."""
        x, slope = call.args
        src = self.blocked.get(x) if isinstance(x, relax.Var) else None
        if src is None or out_shape is None or len(out_shape) != 4:
            return None
        if not isinstance(slope, GenericConst):
            return None
        values = slope.value.numpy()
        if values.size != 1 and not (values.size == src.channels and int(call.attrs.axis) == 1):
            return None
        per_channel = values.reshape((1, -1, 1, 1)) if values.size != 1 else values.reshape(())
        data = _block_constant(per_channel, src.channels, src.block)
        if data is None:
            return None
        dtype = str(slope.ty.dtype)
        negative = relax.op.multiply(src.var, relax.const(data, dtype))
        positive = relax.op.greater(src.var, relax.const(0.0, dtype))
        return self._emit_blocked(var, relax.op.where(positive, src.var, negative), src.channels)

    def _depth_to_space(self, var: relax.Var, call: Call) -> bool | None:
        """One of a DCR depth-to-space's three ops on a blocked tensor, carried blocked
        (``pixel_shuffle``); any other reshape or permutation gets NCHW operands."""
        src, out_shape = call.args[0], _shape(call)
        if not isinstance(src, relax.Var) or not isinstance(var, relax.DataflowVar):
            return None
        if src in self.blocked:  # the split of the channels into (s1, s2, C)
            held = self.blocked[src]
            in_shape = _shape(src)
            if call.op.name != "relax.reshape" or in_shape is None:
                return None
            # C not a whole number of the source's blocks (PP-OCR's 24-channel head from a
            # 96-channel NCHW16c conv): re-blocked at the low resolution in the shuffle's own
            # fused pass. Through NCHW it was a transform to NCHW at 80², the shuffle, and one
            # back to NCHW8c at 160²: 0.10 + 0.30 + 0.25 ms of PP-OCRv5 det's 4.65 (Zen 5).
            started: Shuffle | ChannelShuffle | None = next(
                (
                    found
                    for block in channel_blocks(self.lanes)
                    if block <= held.block
                    and (found := Shuffle.of_split(in_shape, block, out_shape)) is not None
                ),
                None,
            ) or ChannelShuffle.of_split(in_shape, held.block, out_shape)
            if started is None:
                return None
            source = self._reblocked(held.var, held.block, started.block)
            new = self.builder_.emit(started.split(source), name_hint=var.name)
            self.shuffled[var] = (new, started, False)
            return True
        value, shuffle, moved = self.shuffled[src]
        if call.op.name == "relax.permute_dims" and not moved:
            axes = call.attrs.axes
            if axes is None or tuple(int(a) for a in axes) != shuffle.axes:
                return None
            new = self.builder_.emit(shuffle.move(value), name_hint=var.name)
            self.shuffled[var] = (new, shuffle, True)
            return True
        if call.op.name == "relax.reshape" and moved and out_shape == shuffle.merged_shape:
            return self._emit_blocked(var, self._merged(value, shuffle), shuffle.channels)
        return None

    def _merged(self, value: Expr, shuffle: Shuffle | ChannelShuffle) -> Expr:
        """The shuffle's last step on its blocked ``value``. A channel shuffle moves lanes
        between blocks: TVM's gather from block to block took 0.015 ms for ShuffleNet's
        544×7×7 (8-blocks), two register transposes (out of the blocks, back into them in
        shuffled order) 0.006 (Zen 4)."""
        if not isinstance(shuffle, ChannelShuffle) or not transposable(
            shuffle.block, self.lanes, str(value.ty.dtype)
        ):
            return shuffle.merge(value)
        nchw = self.builder_.emit(relax.op.layout_transform(value, _to_nchw(shuffle.block)))
        index = _shuffled_to_blocked(shuffle.block, shuffle.groups, shuffle.channels)
        return relax.op.layout_transform(nchw, index)

    def _concat(self, var: relax.Var, call: Call, out_shape: tuple[int, ...] | None) -> bool | None:
        tensors = call.args[0]
        if not isinstance(tensors, relax.Tuple) or out_shape is None or len(out_shape) != 4:
            return None
        block = self._block(out_shape[1])
        if int(call.attrs.axis) % 4 != 1 or block is None:
            return None
        shapes = [_shape(item) for item in tensors.fields]
        blocks = [None if shape is None else self._block(shape[1]) for shape in shapes]
        if any(b is None for b in blocks):
            return None
        if not all(isinstance(item, relax.Var) and item in self.blocked for item in tensors.fields):
            # A piece held in NCHW would be blocked for the concat, and the whole, read by NCHW
            # ops, unblocked again: ShuffleNet's branch concats became 34 islands of transforms
            # once its stem's BatchNorm stayed blocked. Concatenated in NCHW instead.
            return None
        # Pieces of 24 and 24 channels (NCHW8c) make 48 (NCHW16c): concatenated in the
        # smallest block of all, and the whole re-blocked once, blocked to blocked. Through NCHW
        # it was three full-resolution transforms: PP-OCRv6's stem concat at 160², 1.7 ms of 28.
        common = min(block, *(b for b in blocks if b is not None))
        parts = []
        for item in tensors.fields:
            blocked = self._as_blocked(item)
            if blocked is None:
                return None
            parts.append(self._reblocked(blocked.var, blocked.block, common))
        whole = relax.op.concat(parts, axis=1)
        if common != block:
            whole = relax.op.layout_transform(
                self.builder_.emit(whole, name_hint=f"{var.name}_{common}c"),
                reblock(common, block),
            )
        return self._emit_blocked(var, whole, out_shape[1])

    def _reblocked(self, value: Expr, block: int, new_block: int) -> Expr:
        """A blocked ``value`` in NCHW{new_block}c (itself if ``block`` is that already; a
        reshape at one pixel, where both blocks are the same bytes)."""
        if block == new_block:
            return value
        shape = static_shape(value.ty)
        if shape is not None and shape[2:4] == (1, 1):
            pixel = (shape[0], shape[1] * block // new_block, 1, 1, new_block)
            return self.builder_.emit(relax.op.reshape(value, pixel))
        return self.builder_.emit(relax.op.layout_transform(value, reblock(block, new_block)))

    def _split(self, var: relax.Var, call: Call) -> bool | None:
        attrs = call.attrs
        src = self.blocked[call.args[0]]
        if int(attrs.axis) % 4 != 1:
            return None
        fields = call.ty.fields
        sizes = [_shape(relax.Var("f", f)) for f in fields]
        if any(s is None or self._block(s[1]) != src.block for s in sizes):
            return None
        channels = [s[1] for s in sizes if s is not None]
        indices = list(np.cumsum(channels)[:-1] // src.block)
        new = self.builder_.emit(
            relax.op.split(src.var, [int(i) for i in indices], axis=1),
            name_hint=var.name,
        )
        self.blocked_tuples[var] = (new, channels)
        return True

    def _slice(self, var: relax.Var, call: Call, out_shape: tuple[int, ...] | None) -> bool | None:
        src = self.blocked[call.args[0]]
        if out_shape is None or len(out_shape) != 4:
            return None
        try:
            axes = [a % 4 for a in _ints_of(call.args[1])]
            begin = _ints_of(call.args[2])
            end = _ints_of(call.args[3])
            strides = _ints_of(call.args[4]) if len(call.args) > 4 else [1] * len(axes)
        except (AttributeError, TypeError, ValueError):
            return None
        block = src.block
        if self._block(out_shape[1]) != block:
            return None
        new_begin, new_end = [], []
        for axis, b, e, s in zip(axes, begin, end, strides, strict=True):
            if axis == 0:
                return None
            if axis == 1:
                e = min(e, src.channels)
                if s != 1 or b < 0 or b % block or e % block:
                    return None
                b, e = b // block, e // block
            new_begin.append(b)
            new_end.append(e)
        expr = relax.op.strided_slice(
            src.var, axes, new_begin, new_end, strides, assume_inbound=False
        )
        return self._emit_blocked(var, expr, out_shape[1])


def _ints_of(expr: Expr) -> list[int]:
    """Integers of a static tuple/shape argument (strided_slice axes, begin, end, strides)."""
    if isinstance(expr, relax.ShapeExpr):
        return [int(v) for v in expr.values]
    return [int(f.value) for f in expr.fields]


def _tensor_args(call: Call) -> list[Expr]:
    args: list[Expr] = []
    for arg in call.args:
        if isinstance(arg, relax.Tuple):
            args.extend(arg.fields)
        else:
            args.append(arg)
    return args


def _count_transforms(func: relax.Function) -> int:
    count = 0

    def visit(expr: Expr) -> None:
        nonlocal count
        if isinstance(expr, Call) and expr.op == _LAYOUT_TRANSFORM:
            count += 1

    relax.analysis.post_order_visit(func.body, visit)
    return count


def plan_blocked_layout(
    mod: IRModule,
    target: Target,
    forced_nchw: dict[int, str] | None = None,
    winograd_tiles: dict[int, int] | None = None,
) -> tuple[IRModule, LayoutPlan]:
    """``mod`` with its blockable convolutions in ``NCHW{x}c``, not yet legalized, and the plan.

    ``forced_nchw`` keeps the listed convs (graph order) NCHW with the given reason;
    ``winograd_tiles`` runs the listed eligible ones as Winograd with the given tile. Raises
    ``ConvBlockingError`` naming the conv whose rewrite failed; callers retry without it.
    """
    lanes = vector_lanes(target)
    amx = amx_precisions(target)
    plan = LayoutPlan(
        lanes=lanes,
        full_width_fma=full_width_fma(target),
        amx=amx,
        forced_nchw=dict(forced_nchw or {}),
        winograd_tiles=dict(winograd_tiles or {}),
        half_blocked=sorted(half_blocked_counts(mod, lanes)),
        tile_blocked=sorted(tile_blocked_counts(mod, amx)),
    )
    rewriter = _BlockingMutator(mod, plan, frozenset(plan.forced_nchw))
    try:
        for gv, func in mod.functions.items():
            if isinstance(func, relax.Function):
                new_func = rewriter.visit_expr(func)
                rewriter.builder_.update_func(gv, new_func)
    except Exception:
        if plan.failure is not None:
            raise ConvBlockingError(*plan.failure) from None
        raise
    out = rewriter.builder_.get()
    out = relax.transform.DeadCodeElimination()(out)
    plan.transforms = sum(
        _count_transforms(f) for f in out.functions.values() if isinstance(f, relax.Function)
    )
    return out, plan


def _legalize_conv2d(bb: BlockBuilder, call: Call) -> Expr:
    """A conv2d call lowered by the conv kind that built it, else by TVM (an NCHW conv)."""
    for kind in CONV_KINDS:
        if kind.legalizes(call):
            return kind.legalize(bb, call)
    return _CONV2D.get_attr("FLegalize")(bb, call)


def _channel_blocking(call: Call, lanes: int) -> tuple[tuple[int, ...], int, bool, int] | None:
    """(NCHW shape, block, to_blocked, shuffle groups) of a ``layout_transform`` of a tensor
    into or out of ``NCHW{block}c``, maybe through a channel shuffle on the way in, that the
    register transpose computes, else None."""
    source, result = _shape(call.args[0]), _shape(call)
    if source is None or result is None or call.attrs.pad_value is not None:
        return None
    if len(source) == 4 and len(result) == 5:
        shape, block, to_blocked, index = source, result[4], True, _to_blocked(result[4])
    elif len(source) == 5 and len(result) == 4:
        shape, block, to_blocked, index = result, source[4], False, _to_nchw(source[4])
    else:
        return None
    if not transposable(block, lanes, str(call.args[0].ty.dtype)):
        return None
    index_map = call.attrs.index_map
    if index_map.is_equivalent_to(IndexMap.from_func(index)):
        return shape, block, to_blocked, 1
    channels = shape[1]
    for groups in range(2, channels) if to_blocked else ():
        if channels % groups == 0 and index_map.is_equivalent_to(
            IndexMap.from_func(_shuffled_to_blocked(block, groups, channels))
        ):
            return shape, block, to_blocked, groups
    return None


def _reblocking(call: Call) -> tuple[tuple[int, ...], int, int] | None:
    """(NCHW shape, block, new block) of a ``layout_transform`` NCHW{block}c →
    NCHW{new_block}c that :func:`reblocking_kernel` copies, else None."""
    source, result = _shape(call.args[0]), _shape(call)
    if source is None or result is None or len(source) != 5 or len(result) != 5:
        return None
    block, new_block = source[4], result[4]
    channels = source[1] * block
    if call.attrs.pad_value is not None or result[1] * new_block != channels:
        return None
    if max(block, new_block) % min(block, new_block):
        return None  # runs of the narrower block would straddle the wider one's blocks
    if not call.attrs.index_map.is_equivalent_to(IndexMap.from_func(reblock(block, new_block))):
        return None
    return (source[0], channels, source[2], source[3]), block, new_block


def _legalize_layout_transform(bb: BlockBuilder, call: Call, lanes: int) -> Expr:
    """An activation's move into or out of the blocked layout as the register transpose
    (``schedules/ops/channel_blocking.py``), from blocks to blocks of another width as a copy
    of runs of channels, any other layout transform by TVM."""
    moved = _reblocking(call)
    if moved is not None:
        shape, block, new_block = moved
        kernel = reblocking_kernel(shape, block, new_block, str(call.args[0].ty.dtype))
        return relax.call_tir(bb.add_func(kernel, "reblock"), [call.args[0]], call.ty)
    found = _channel_blocking(call, lanes)
    if found is None:
        return _LAYOUT_TRANSFORM.get_attr("FLegalize")(bb, call)
    shape, block, to_blocked, groups = found
    kernel = channel_blocking_kernel(
        shape, block, lanes, to_blocked=to_blocked, shuffle_groups=groups
    )
    gvar = bb.add_func(kernel, "to_blocked" if to_blocked else "to_nchw")
    return relax.call_tir(gvar, [call.args[0]], call.ty)


def legalize(mod: IRModule, target: Target) -> IRModule:
    """Lower every op to TIR, the blocked conv2d with TOPI's ``conv2d_NCHWc``, transforms of
    activations into and out of blocks as register transposes, a quantize that only its
    dequantize reads as float arithmetic (``fake_quantize.py``)."""
    lanes = vector_lanes(target)
    mod, _ = fake_quantize_pairs(mod)
    with target:
        return relax.transform.LegalizeOps(
            {
                "relax.nn.conv2d": _legalize_conv2d,
                "relax.layout_transform": partial(_legalize_layout_transform, lanes=lanes),
                "relax.take": legalize_table_lookup,
                "relax.mean": legalize_mean,
                "relax.quantize": legalize_quantize,
            }
        )(mod)


def blocked_layout(
    mod: IRModule,
    target: Target,
    forced_nchw: dict[int, str] | None = None,
    winograd_tiles: dict[int, int] | None = None,
) -> tuple[IRModule, LayoutPlan]:
    """The model with its convolutions in ``NCHW{x}c`` (x = the target's fp32 lanes), legalized."""
    out, plan = plan_blocked_layout(mod, target, forced_nchw, winograd_tiles)
    out, plan.concat_chains, note = write_concats_in_place(out)
    plan.notes += [note] if note else []
    return legalize(out, target), plan


__all__ = [
    "ConvBlockingError",
    "ConvLayout",
    "LayoutPlan",
    "blocked_layout",
    "channel_block",
    "channel_blocks",
    "legalize",
    "plan_blocked_layout",
]
