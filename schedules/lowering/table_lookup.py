"""Vector reads of a 256-entry byte table as ``vpermi2b`` (AVX-512 VBMI), not lane by lane.

The QDQ activations (SiLU, sigmoid, …) are 256-entry u8 tables read in the int8 convs'
epilogues (``tuner/graph/lookup_tables.py``). Vectorized, such a read is a gather of bytes, which
LLVM scalarizes: per 16 outputs, 16 index extractions, loads and inserts. Measured on a Zen 4 VM
(2026-12-06): a QDQ 32→32 1×1 SiLU conv's kernel held 30 ``vpinsrb`` and 24 ``vpextrd`` per
call site where the conv itself was 96 ``vpdpbusd``. With VBMI, a read of up to 64 entries is
two ``vpermi2b`` (each picks from 128 table bytes by the low 7 bits of an index) and a blend by
the top bit, the table held in four zmm registers (loaded once, hoisted by LLVM).

The pass runs after TVM's lowering, on loads whose index is a vector of up to 64 lanes (not a
ramp: those are contiguous loads) into a one-dimensional 256-byte buffer, where the function's
target has VBMI; elsewhere the reads stay LLVM's.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import ir, tirx

from ..ops.isa import has_vbmi

#: Entries of a table the pass reads with ``vpermi2b``: one per u8 value.
TABLE_ENTRIES = 256
#: Bytes of a zmm register: the lanes one ``vpermi2b`` produces.
ZMM_BYTES = 64
VPERMI2B = "llvm.x86.avx512.vpermi2var.qi.512"


def _table_read(load: ir.TensorLoad) -> bool:
    buffer = load.source
    if str(buffer.dtype) not in ("uint8", "int8") or len(buffer.shape) != 1:
        return False
    if not isinstance(buffer.shape[0], tirx.IntImm) or int(buffer.shape[0]) != TABLE_ENTRIES:
        return False
    (index,) = load.indices
    lanes = index.ty.dtype.lanes
    return 1 < lanes <= ZMM_BYTES and ZMM_BYTES % lanes == 0 and not isinstance(index, tirx.Ramp)


def _vector_read(load: ir.TensorLoad) -> tirx.PrimExpr:
    """The value of ``load`` (a table read :func:`_table_read` accepts) by ``vpermi2b``."""
    buffer, (index,) = load.source, load.indices
    lanes = index.ty.dtype.lanes
    wide = f"{buffer.dtype}x{ZMM_BYTES}"
    narrow = tirx.Cast(f"uint8x{lanes}", index)
    indices = narrow
    if lanes < ZMM_BYTES:  # the index vector repeated to a zmm; lanes past ``lanes`` unused
        picks = [tirx.IntImm("int32", i) for i in range(ZMM_BYTES)]
        indices = tirx.Shuffle([narrow] * (ZMM_BYTES // lanes), picks)
    offset_dtype = str(index.ty.dtype).split("x")[0]
    quarters = [
        tirx.BufferLoad(buffer, [tirx.Ramp(tirx.IntImm(offset_dtype, q * ZMM_BYTES), 1, ZMM_BYTES)])
        for q in range(TABLE_ENTRIES // ZMM_BYTES)
    ]
    low = tirx.call_llvm_pure_intrin(wide, VPERMI2B, quarters[0], indices, quarters[1])
    high = tirx.call_llvm_pure_intrin(wide, VPERMI2B, quarters[2], indices, quarters[3])
    top = tirx.GE(indices, tirx.Broadcast(tirx.IntImm("uint8", 128), ZMM_BYTES))
    picked = tirx.Select(top, high, low)
    if lanes == ZMM_BYTES:
        return picked
    return tirx.Shuffle([picked], [tirx.IntImm("int32", i) for i in range(lanes)])


def permute_table_reads(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its vector reads of 256-byte tables as ``vpermi2b`` where its target has
    AVX-512 VBMI."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or not has_vbmi(target):
        return func

    def on_load(load: ir.TensorLoad) -> tirx.PrimExpr:
        return _vector_read(load) if _table_read(load) else load

    return func.with_body(tvm_ffi.structural_map(func.body, (ir.TensorLoad, on_load)))


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="convtune.PermuteTableReads")
def PermuteTableReads(func: tirx.PrimFunc, mod: Any, ctx: Any) -> tirx.PrimFunc:
    """The pass form of :func:`permute_table_reads`."""
    return permute_table_reads(func)


__all__ = ["PermuteTableReads", "permute_table_reads"]
