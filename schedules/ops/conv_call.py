"""Relax ``conv2d`` calls of the blocked layout: built with a packed weight, lowered to our TE.

Every blocked conv kind (dense NCHW{x}c, depthwise, the output-blocked stem) is a Relax conv2d
whose layouts say which kind it is; the layout pass builds them with :func:`conv2d_call` and the
legalizer lowers each kind to its TE compute with :func:`lower_conv2d`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvm import relax
from tvm.relax import BlockBuilder, Call, Expr


def attr_dtype(dtype: object) -> str | None:
    """An op attribute's ``out_dtype``, or None where it is unset (the input's dtype then)."""
    text = str(dtype)
    return None if text in ("", "None", "void") else text


def conv2d_call(
    data: Expr,
    weight: Expr,
    attrs: Any,
    *,
    groups: int,
    data_layout: str,
    kernel_layout: str,
    out_layout: str,
) -> Expr:
    """``conv2d(data, weight)`` with the strides, padding, dilation and dtype of the original
    conv's ``attrs`` and the given layouts (``weight`` already packed for ``kernel_layout``)."""
    return relax.op.nn.conv2d(
        data,
        weight,
        strides=attrs.strides,
        padding=attrs.padding,
        dilation=attrs.dilation,
        groups=groups,
        data_layout=data_layout,
        kernel_layout=kernel_layout,
        out_layout=out_layout,
        out_dtype=attr_dtype(attrs.out_dtype),
    )


def lower_conv2d(
    bb: BlockBuilder, call: Call, compute: Callable[..., Any], name: str, *layouts: Any
) -> Expr:
    """Emit ``compute(data, weight, strides, padding, dilation, *layouts, out_dtype)`` for the
    Relax conv2d ``call``, as a PrimFunc named ``name``."""
    attrs = call.attrs
    return bb.call_te(
        compute,
        call.args[0],
        call.args[1],
        attrs.strides,
        attrs.padding,
        attrs.dilation,
        *layouts,
        attr_dtype(attrs.out_dtype) or str(call.ty.dtype),
        primfunc_name_hint=name,
    )
