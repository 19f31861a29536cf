"""The 2-D register block of blocked convolutions: ``oc_inner`` output-channel chunks ×
``oh_inner`` rows × sampled columns of accumulators, shared by the spaces ``nchwc-regblock2d``
and ``stem-nchw-nchwc`` (``schedules/spaces/nchwc_regblock2d.py`` explains the kernel and its
measurements) and bounding the blocks of ``nchwc-kblock``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import LoopRV, SBlockRV

from .annotations import PEEL_TAIL, sample_weight_prefetch
from .nchwc import MAX_REGISTER_BLOCK, accumulate_locally, epilogue_at

OC_BLOCKS = (1, 2, 4)
#: Output-channel chunks per block for a layer none of ``OC_BLOCKS`` but 1 divides: ImageNet's
#: 1000 classes are 125 chunks of 8 (SqueezeNet's last conv, 512→1000 1×1 at 13×13, AVX2,
#: Zen 4, 2026-12-06: 5 chunks × 2 columns 1.17 ms, 1 chunk × 13 columns 1.47).
ODD_OC_BLOCKS = (3, 5)
ROW_BLOCKS = (1, 2)
ORDERS = ("oc-outer", "rows-outer")
#: Input-channel blocks ahead whose weights are prefetched during the reduction (0: none).
#: Zen 5, 2026-12-02, 4 chunks × 7 columns, weights flushed, no prefetch against one block
#: ahead: 2048→512 1×1 at 7×7 0.53 against 0.27 ms, 512→2048 0.56 against 0.27, 512→512 3×3
#: at 7×7 1.42 against 0.72; at 14×14 (1024→256, 256→1024) no change, and three blocks ahead
#: lost everywhere (0.36 and 0.58 ms at 14×14).
WEIGHT_PREFETCH_DISTANCES = (0, 1, 2)


#: The fraction of the register block (or of the whole loop, if shorter) that its largest
#: dividing tile must fill; below it the tile may also leave a partial last one, peeled.
WHOLE_TILE_FILL = 2 / 3


def peeled_tiles(extent: int, limit: int) -> list[int]:
    """The tiles of a loop of ``extent`` into a register block of at most ``limit``: empty
    where a divisor fills :data:`WHOLE_TILE_FILL` of it (the perfect tiles serve); else the
    divisors up to ``limit`` and every width from half of it on, whose last tile is partial.

    13 columns (SqueezeNet's and the YOLOs' 13×13 maps) into 7 accumulators (two
    output-channel chunks on AVX2) had only the 1-column tile, one broadcast per two FMAs.
    Zen 4 with AVX2 only (2026-12-06, 2 threads, warm): 512→64 1×1 at 13×13 in 2 chunks × 5
    columns (5 + 5 + 3) 0.070 ms, against 0.094 for the best perfect tile (1 chunk × 13) and
    0.233 for 2 chunks × 1; 96→96 3×3 0.194 against 0.236; 64→256 3×3 0.340 against 0.597."""
    reach = min(limit, extent)
    divisors = [d for d in range(1, reach + 1) if extent % d == 0]
    if divisors[-1] >= WHOLE_TILE_FILL * reach:
        return []
    return sorted(set(divisors) | set(range(-(-limit // 2), reach + 1)))


def split_columns(sch: Schedule, loop: LoopRV, limit: int) -> tuple[LoopRV, LoopRV]:
    """``loop`` split into (outer, inner) with a sampled inner tile of at most ``limit``: a
    perfect tile where one fills the block (:func:`peeled_tiles`), else a width whose partial
    last tile TVM's LoopPartition peels, so the full tiles run without a condition."""
    tiles = peeled_tiles(int(sch.get(loop).extent), limit)
    if not tiles:
        outer, inner = sch.split(
            loop, sch.sample_perfect_tile(loop, n=2, max_innermost_factor=limit)
        )
        return outer, inner
    width = sch.sample_categorical(tiles, [1.0 / len(tiles)] * len(tiles))
    outer, inner = sch.split(loop, [None, width])
    sch.annotate(outer, PEEL_TAIL, 1)
    return outer, inner


def output_chunk_blocks(oc_chunks: int) -> list[int]:
    """The output-channel chunks a register block may hold for a layer of ``oc_chunks``: those
    of :data:`OC_BLOCKS` dividing it, or, where only 1 does, :data:`ODD_OC_BLOCKS` too."""
    blocks = [oc for oc in OC_BLOCKS if oc_chunks % oc == 0]
    if blocks == [1]:
        blocks += [oc for oc in ODD_OC_BLOCKS if oc_chunks % oc == 0]
    return blocks


def block_shapes(oc_chunks: int, rows: int) -> list[tuple[int, int]]:
    """The (oc_inner, oh_inner) pairs of a register block for a layer of ``oc_chunks`` output
    chunks and ``rows`` output rows: the chunks of :func:`output_chunk_blocks`, the rows of
    :data:`ROW_BLOCKS` dividing ``rows``."""
    return [
        (oc, oh) for oc, oh in product(output_chunk_blocks(oc_chunks), ROW_BLOCKS) if rows % oh == 0
    ]


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
    ow_outer, ow_in = split_columns(sch, ow, max(1, max_block // (block.oc * block.rows)))
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
