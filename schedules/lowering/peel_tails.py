"""Functions with loops whose last, partial vector is peeled (``ops.annotations.PEEL_TAIL``)
get int32 indices before TVM lowers them.

TVM's LoopPartition finds a loop to peel by the variable its ``pragma_loop_partition_hint``
attribute names; NarrowDataType, which runs just before it, narrows an int64 loop variable to
int32 without renaming the attribute's, so the hint was lost in every task Relax emits (int64
shapes): the row's tail stayed a condition inside the vectorized loop, which TVM masked or
scalarized (PP-OCRv5's 40×18385 Softmax, row-reduce space: 1.23 ms with int64 indices, 0.115
with int32, Zen 5; the unscheduled function takes 0.90). Narrowed first
(``ForceNarrowIndexToInt32``), the loop keeps the variable its hint names. Only such functions
are narrowed: the others lower as before.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.transform import ForceNarrowIndexToInt32

from ..ops.annotations import PEEL_TAIL


def peels_tails(func: tirx.PrimFunc) -> bool:
    """Whether a loop of ``func`` asks for its partial last iteration to be peeled."""
    found: list[bool] = []

    def on_for(loop: tirx.For) -> tirx.For:
        if PEEL_TAIL in loop.annotations:
            found.append(True)
        return loop

    tvm_ffi.structural_map(func.body, (tirx.For, on_for))
    return bool(found)


def narrow_peeled(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with int32 indices if it peels a loop's tail, else ``func``."""
    if not peels_tails(func):
        return func
    narrowed = ForceNarrowIndexToInt32()(tvm.IRModule({"main": func}))
    return narrowed["main"]


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="convtune.NarrowPeeledLoops")
def NarrowPeeledLoops(func: tirx.PrimFunc, mod: Any, ctx: Any) -> tirx.PrimFunc:
    """The pass form of :func:`narrow_peeled`."""
    return narrow_peeled(func)


__all__ = ["NarrowPeeledLoops", "narrow_peeled", "peels_tails"]
