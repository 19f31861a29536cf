"""Channel counts held in 64-channel blocks (``NCHW64c``) on targets whose AMX tiles multiply
int8: a tile row is 64 bytes, one pixel's channels of such a block.

In ``NCHW16c`` the tile row of a 1-column kernel holds one pixel's 16 u8 channels (K = 16), a
quarter of what a ``tdpbusd`` multiplies in the same 16 cycles, and a 3×3 conv packs four
16-channel pixels of a kernel row (one of them a zero column) where a 64-channel pixel fills the
row alone. Measured on an Emerald Rapids VM (2026-12-06, 2 threads, each conv with its
requantizing epilogue, best design of the ``int8-amx`` space, ``NCHW16c`` in and out against
``NCHW64c``): 256→64 1×1 at 56² 0.063 → 0.040 ms, 512→128 1×1 at 28² 0.053 → 0.044, 1024→256
1×1 at 14² 0.054 → 0.030, 2048→512 1×1 at 7² 0.117 → 0.042, 64→64 3×3 at 56² 0.151 → 0.079.

A count is held so when every conv that reads or writes its tensors is an AMX int8 conv
(``conv_kinds/amx.py``: the op reads 64-channel pixels and writes 64-channel blocks, the stem
included) and at least one reads them; the ops between (quantize, dequantize, the elementwise
epilogues, pooling, means, Resize) take any block. A count that any other conv reads or writes
(a VNNI conv, an fp32 conv) keeps its register-wide block, and so do all the counts of a
channel Concat, Split or slice unless every one of them is held in 64: the layout pass splits
and slices only by whole blocks of the source's, and concatenates pieces of other blocks in the
smallest one and re-blocks the whole (YOLOv8's C2f splits 64 channels into two 32s).

A conv that reads and writes one pixel (a classifier's Gemm, which the QDQ rewrite makes a VNNI
conv of one pixel) takes no part: at one pixel every block is the same bytes, and the layout pass
hands it its tensors in the blocks its kernel reads and writes by a reshape
(:func:`one_pixel`). ResNet-50's classifier reads 2048 channels and writes 1024 (1000 classes
padded); without this rule both counts stayed in 16-channel blocks for the whole of stages 3
and 4.
"""

from __future__ import annotations

from tvm import relax
from tvm.ir import IRModule, Op
from tvm.ir.expr import GenericConst

from convtune.schedules.ops.amx import tile_rows
from convtune.schedules.ops.amx_conv import amx_refusal, stem_refusal
from convtune.schedules.ops.dot_conv import INT8

from .rewrite import static_shape

#: Channels of a tile-wide block: a 64-byte tile row of u8.
TILE_BLOCK = 64

_CONV2D = Op.get("relax.nn.conv2d")
#: Ops that join or cut tensors along channels: the counts of one are held alike or not at all.
_CHANNEL_CUTS = frozenset(Op.get(f"relax.{name}") for name in ("concat", "split", "strided_slice"))


def _static(expr: relax.Expr) -> tuple[int, ...] | None:
    return static_shape(expr.ty)


def one_pixel(x_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """Whether a conv reads and writes a single pixel: the blocks of its tensors are then one
    layout, and any block of the same channels is a reshape away."""
    return tuple(x_shape[2:]) == (1, 1) and tuple(out_shape[2:]) == (1, 1)


def _amx_roles(call: relax.Call) -> tuple[bool, bool]:
    """Whether the AMX int8 op computes ``call`` reading 64-channel pixels, and whether it
    computes it at all (then it can write 64-channel blocks)."""
    x_shape, w_shape, out = _static(call.args[0]), _static(call.args[1]), _static(call)
    if x_shape is None or w_shape is None or out is None:
        return False, False
    if str(call.args[0].ty.dtype) != INT8.data_dtype:
        return False, False
    if not isinstance(call.args[1], GenericConst) or tile_rows(out[3]) is None:
        return False, False
    attrs = call.attrs
    groups = int(attrs.groups)
    if not amx_refusal(x_shape[1], w_shape[0], w_shape[2:], attrs.dilation, groups):
        return x_shape[1] % TILE_BLOCK == 0, True
    stem = not stem_refusal(x_shape, w_shape, out[3], attrs.dilation, groups, INT8)
    return False, stem


def tile_blocked_counts(mod: IRModule, amx: tuple[str, ...]) -> frozenset[int]:
    """The channel counts of ``mod`` held in ``NCHW64c`` on a target whose tiles multiply
    ``amx`` (see the module doc); none without AMX-INT8."""
    if INT8.precision not in amx:
        return frozenset()
    read: set[int] = set()
    refused: set[int] = set()
    groups: list[set[int]] = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and expr.op in _CHANNEL_CUTS:
            groups.append(_channel_counts(expr))
        if not (isinstance(expr, relax.Call) and expr.op == _CONV2D):
            return
        x_shape, w_shape, out = _static(expr.args[0]), _static(expr.args[1]), _static(expr)
        if x_shape is not None and out is not None and one_pixel(x_shape, out):
            return
        reads_tiles, computes = _amx_roles(expr)
        if x_shape is not None:
            (read if reads_tiles else refused).add(x_shape[1])
        if w_shape is not None and not computes:
            refused.add(w_shape[0])

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    held = {c for c in read - refused if c % TILE_BLOCK == 0}
    while True:  # a group with one count not held releases the others, which may free more
        released = set().union(*(g for g in groups if g & held and not g <= held))
        if not released & held:
            return frozenset(held)
        held -= released


def _channel_counts(call: relax.Call) -> set[int]:
    """The channel counts of the 4-D tensors a Concat, Split or slice reads and makes (all of
    them, whatever its axis: a cut along another axis only widens the group)."""
    types = [
        *_fields(call.args[0].ty),  # Concat's tuple, or the tensor a Split or slice cuts
        *_fields(call.ty),
    ]
    shapes = [static_shape(ty) for ty in types]
    return {shape[1] for shape in shapes if shape is not None and len(shape) == 4}


def _fields(ty: object) -> list[object]:
    return list(ty.fields) if isinstance(ty, relax.TupleType) else [ty]


__all__ = ["TILE_BLOCK", "one_pixel", "tile_blocked_counts"]
