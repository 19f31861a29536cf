"""The blocked dense conv op (``NCHW{a}c`` in, ``NCHW{b}c`` out, any window, stride, dilation,
groups): its weight packing, Relax call and legalization with TOPI's ``conv2d_NCHWc`` compute,
whose block (:data:`~convtune.schedules.ops.nchwc.CONV_BLOCK`) the register-blocked spaces
schedule. TVM's own legalization refuses blocked conv layouts, hence
:func:`legalize_blocked_conv2d`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import topi
from tvm.relax import BlockBuilder, Call, Expr

from .conv_call import conv2d_call, lower_conv2d
from .nchwc import CONV_BLOCK


def block_weight(weight: np.ndarray, in_block: int, out_block: int | None = None) -> np.ndarray:
    """OIHW → OIHW{a}i{b}o: (O/b, I/a, H, W, a, b); ``out_block`` defaults to ``in_block``."""
    b = in_block if out_block is None else out_block
    o, i, h, w = weight.shape
    return np.ascontiguousarray(
        weight.reshape(o // b, b, i // in_block, in_block, h, w).transpose(0, 2, 4, 5, 3, 1)
    )


def weight_to_blocked(in_block: int, out_block: int) -> Any:
    """The index map OIHW → OIHW{a}i{b}o of a weight that is no constant (a ``layout_transform``
    at run time)."""
    a, b = in_block, out_block
    return lambda o, i, h, w: (o // b, i // a, h, w, i % a, o % b)


def reblock(block: int, new_block: int) -> Any:
    """The index map of an activation NCHW{block}c → NCHW{new_block}c (its channel count a
    multiple of both), one pass."""

    def index(n: Any, c: Any, h: Any, w: Any, b: Any) -> tuple[Any, ...]:
        channel = c * block + b
        return (n, channel // new_block, h, w, channel % new_block)

    return index


def blocked_conv2d(data: Expr, packed: Expr, attrs: Any, in_block: int, out_block: int) -> Expr:
    """The Relax conv2d of ``data`` (``NCHW{a}c``) with the packed weight (``OIHW{a}i{b}o``) and
    the strides/padding/dilation/groups of ``attrs``, its output in ``NCHW{b}c``."""
    a, b = in_block, out_block
    return conv2d_call(
        data,
        packed,
        attrs,
        groups=int(attrs.groups),
        data_layout=f"NCHW{a}c",
        kernel_layout=f"OIHW{a}i{b}o",
        out_layout=f"NCHW{b}c",
    )


def is_blocked_conv2d_call(call: Call) -> bool:
    """Whether a Relax conv2d call has a blocked data layout (``NCHW{a}c``)."""
    return len(str(call.attrs.data_layout)) != 4


def legalize_blocked_conv2d(bb: BlockBuilder, call: Call) -> Expr:
    """Lower a blocked Relax conv2d with TOPI's ``conv2d_NCHWc``."""
    attrs = call.attrs
    return lower_conv2d(
        bb, call, topi.nn.conv2d_NCHWc, CONV_BLOCK, attrs.data_layout, attrs.out_layout
    )


__all__ = [
    "block_weight",
    "blocked_conv2d",
    "is_blocked_conv2d_call",
    "legalize_blocked_conv2d",
    "weight_to_blocked",
]
