"""The 2-D register block of blocked convolutions: ``oc_inner`` output-channel chunks ×
``oh_inner`` rows × sampled columns of accumulators, shared by the spaces ``nchwc-regblock2d``
and ``stem-nchw-nchwc`` (``schedules/spaces/nchwc_regblock2d.py`` explains the kernel and its
measurements) and bounding the blocks of ``nchwc-kblock``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from .annotations import sample_weight_prefetch
from .nchwc import MAX_REGISTER_BLOCK, accumulate_locally, epilogue_at

OC_BLOCKS = (1, 2, 4)
ROW_BLOCKS = (1, 2)
ORDERS = ("oc-outer", "rows-outer")
#: Input-channel blocks ahead whose weights are prefetched during the reduction (0: none).
#: Zen 5, 2026-12-02, 4 chunks × 7 columns, weights flushed, no prefetch against one block
#: ahead: 2048→512 1×1 at 7×7 0.53 against 0.27 ms, 512→2048 0.56 against 0.27, 512→512 3×3
#: at 7×7 1.42 against 0.72; at 14×14 (1024→256, 256→1024) no change, and three blocks ahead
#: lost everywhere (0.36 and 0.58 ms at 14×14).
WEIGHT_PREFETCH_DISTANCES = (0, 1, 2)


@dataclass(frozen=True)
class RegisterBlock:
    """One design space: the accumulator block's output-channel chunks and rows, the outer order,
    and whether the kernel window's column loop is unrolled too (stem convs, ``stem_conv.py``)."""

    oc: int
    rows: int
    order: str
    unroll_window: bool = False


def schedule_register_block(
    sch: Schedule,
    conv: SBlockRV,
    output: SBlockRV | None,
    block: RegisterBlock,
    ic_block: int,
    max_block: int = MAX_REGISTER_BLOCK,
) -> None:
    """Tile ``conv`` (loops n, oc_chunk, oh, ow, oc_block, ic, kh, kw) into the 2-D register
    block (in place), sampling the column block; the reduction over ``ic`` is split by
    ``ic_block`` (the input's channel block), or unrolled whole when ``ic_block`` is its extent;
    at most ``max_block`` accumulators in all."""
    n, oc_chunk, oh, ow, oc_block, ic, kh, kw = sch.get_loops(conv)
    oc_outer, oc_in = sch.split(oc_chunk, [None, block.oc])
    oh_outer, oh_in = sch.split(oh, [None, block.rows])
    columns = sch.sample_perfect_tile(
        ow, n=2, max_innermost_factor=max(1, max_block // (block.oc * block.rows))
    )
    ow_outer, ow_in = sch.split(ow, columns)
    if int(sch.get(ic).extent) == ic_block:
        reduction = [ic, kh, kw]
        unrolled = [ic]
    else:
        ic_outer, ic_inner = sch.split(ic, [None, ic_block])
        reduction = [ic_outer, kh, kw, ic_inner]
        unrolled = []
    outer = [oc_outer, oh_outer] if block.order == "oc-outer" else [oh_outer, oc_outer]
    sch.reorder(*outer, ow_outer, *reduction, oh_in, ow_in, oc_in, oc_block)
    if not unrolled:
        # The weights of the input-channel blocks ahead stream in during this block's FMAs.
        sample_weight_prefetch(sch, conv, reduction[0], WEIGHT_PREFETCH_DISTANCES)
    sch.parallel(sch.fuse(n, *outer))
    if block.unroll_window:
        unrolled.append(kw)
    for loop in (*unrolled, oh_in, ow_in, oc_in):
        sch.unroll(loop)
    sch.vectorize(oc_block)
    accumulate_locally(sch, conv, ow_outer)
    epilogue_at(sch, output, ow_outer)
    sch.decompose_reduction(conv, reduction[0])
