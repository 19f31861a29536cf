"""The ONNX frontend's constant Pad, read back off the TIR it was emitted as.

TVM's importer emits an ONNX ``Pad`` in constant mode as ``call_tir`` of TOPI's ``pad`` (one
``PadInput`` block: ``out[i] = if_then_else(in bounds, data[i - before], value)``), not as
``relax.nn.pad``, so no pass sees its widths. :func:`constant_pad` recovers them, which lets the
layout pass carry a spatial pad on a blocked tensor: PP-OCRv6's stem pads its 24-channel map to
161² for a 2×2 conv, and went to NCHW and back around the pad (0.19 + 0.16 ms of 12.7, Zen 5).
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.ir import Call
from tvm.ir.expr import TensorLoad
from tvm.ir.prim.expr import FloatImm, IntImm
from tvm.s_tir import Schedule

#: TOPI's name for the block of ``topi.nn.pad``.
PAD_BLOCK = "PadInput"


@dataclass(frozen=True)
class ConstantPad:
    """Widths before and after each axis, and the value padded with."""

    before: tuple[int, ...]
    after: tuple[int, ...]
    value: float


def constant_pad(func: tirx.PrimFunc) -> ConstantPad | None:
    """The widths and value of ``func`` if it is TOPI's constant pad of one tensor, else None."""
    if len(func.params) != 2:
        return None
    sch = Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    if len(blocks) != 1 or sch.get(blocks[0]).name_hint != PAD_BLOCK:
        return None
    block = sch.get(blocks[0])
    store = block.body
    if not isinstance(store, tirx.BufferStore) or not isinstance(store.value, Call):
        return None
    call = store.value
    if not str(call.op.name).endswith(".if_then_else") or len(call.args) != 3:
        return None
    _, load, value = call.args
    if not isinstance(load, TensorLoad) or not isinstance(value, FloatImm | IntImm):
        return None
    out_shape = [int(d) for d in store.buffer.shape]
    in_shape = [int(d) for d in load.source.shape]
    if len(in_shape) != len(out_shape) or len(block.iter_vars) != len(out_shape):
        return None
    analyzer = tvm.sym.Analyzer()
    before = []
    for iter_var, index in zip(block.iter_vars, load.indices, strict=True):
        offset = analyzer.simplify(iter_var.var - index)
        if not isinstance(offset, IntImm):
            return None
        before.append(int(offset))
    after = [o - i - b for o, i, b in zip(out_shape, in_shape, before, strict=True)]
    if any(width < 0 for width in (*before, *after)):
        return None
    return ConstantPad(tuple(before), tuple(after), float(value.value))
