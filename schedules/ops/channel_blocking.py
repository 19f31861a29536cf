"""NCHW ↔ NCHW{x}c as a register transpose: the layout transforms at the edges of blocked islands.

TVM's ``te_layout_transform`` of an activation is a gather: whichever loop it vectorizes, one
side of the copy is strided (channels H·W apart in NCHW, or 16 floats apart in the block), so
LLVM loads or stores it one float at a time. MobileNet's, ShuffleNet's and the detectors' island
edges paid for it: NCHW → NCHW16c of 112×56×56 took 0.146 ms after a one-minute tune, 0.025 ms
here; 136×28×28 into 8-channel blocks 0.043 ms, 0.007 here (AMD EPYC Zen 4, 2 threads).

The kernel reads ``x`` channel rows of ``lanes`` pixels (contiguous in NCHW), transposes the
``x × lanes`` tile in registers and writes ``lanes`` pixels of ``x`` channels (contiguous in
NCHW{x}c), or the reverse. The transpose is the butterfly network: stage b (b = x/2 … 1) swaps
the off-diagonal b×b sub-blocks of each pair of rows (i, i + b), one two-register shuffle
(``vpermt2ps``) per row and stage. With x = half the lanes (8-channel blocks on AVX-512) the
network transposes each half of the register alone, and one more shuffle per pair of rows
puts two pixels of 8 channels in one register. The last H·W mod ``lanes`` pixels of each block
of channels are copied one by one.

The kernel is built scheduled (``tirx.is_scheduled``, no blocks): nothing tunes it, and it is
opaque to fusion (``op_pattern``), so it is never merged into a neighbour's function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .annotations import SCHEDULED

#: FuseOps' pattern for an op it must leave alone (``relay::kOpaque``).
OPAQUE = 8
#: Elements a re-blocking copies in parallel from: a 2×48×5×7 one took 0.0027 ms on two
#: threads, 0.0001 on one (TVM's serial gather 0.0007; Zen 5, under load).
_PARALLEL_ELEMENTS = 1 << 15


def transposable(block: int, lanes: int, dtype: str) -> bool:
    """Whether the register transpose handles ``block`` channels on ``lanes`` fp32 lanes."""
    return dtype == "float32" and block in (lanes, lanes // 2) and block >= 2


def _shuffle(x: tirx.PrimExpr, y: tirx.PrimExpr, lanes: Sequence[int]) -> tirx.PrimExpr:
    return tirx.Shuffle([x, y], [tirx.IntImm("int32", lane) for lane in lanes])


def _butterfly(rows: list[tirx.PrimExpr], lanes: int) -> list[tirx.PrimExpr]:
    """Transpose each ``len(rows)``-square block of lanes of ``rows`` (one per register half when
    there are half as many rows as lanes)."""
    span = len(rows) // 2
    while span >= 1:
        out = list(rows)
        for i in range(len(rows)):
            if i & span:
                continue
            low = [lane if not lane & span else lanes + lane - span for lane in range(lanes)]
            high = [lane + span if not lane & span else lanes + lane for lane in range(lanes)]
            out[i] = _shuffle(rows[i], rows[i + span], low)
            out[i + span] = _shuffle(rows[i], rows[i + span], high)
        rows = out
        span //= 2
    return rows


def _halves(lanes: int) -> tuple[list[int], list[int]]:
    """The two-register shuffles taking the first halves of both registers, and the second."""
    half = lanes // 2
    return [*range(half), *range(lanes, lanes + half)], [
        *range(half, lanes),
        *range(lanes + half, 2 * lanes),
    ]


def _pair_halves(rows: list[tirx.PrimExpr], lanes: int) -> list[tirx.PrimExpr]:
    """Rows holding [first half of a, first half of b] for each pair (a, b) of ``rows``, then
    [second halves]: the register order of pixels after :func:`_butterfly` on half-width
    blocks."""
    low, high = _halves(lanes)
    pairs = range(0, len(rows), 2)
    return [_shuffle(rows[i], rows[i + 1], low) for i in pairs] + [
        _shuffle(rows[i], rows[i + 1], high) for i in pairs
    ]


def _unpair_halves(rows: list[tirx.PrimExpr], lanes: int) -> list[tirx.PrimExpr]:
    """The inverse of :func:`_pair_halves`."""
    low, high = _halves(lanes)
    count = len(rows) // 2
    out: list[tirx.PrimExpr] = []
    for k in range(count):
        out.append(_shuffle(rows[k], rows[count + k], low))
        out.append(_shuffle(rows[k], rows[count + k], high))
    return out


def shuffled_channel(channel: Any, channels: int, groups: int) -> Any:
    """The source channel of ``channel`` after ShuffleNet's channel shuffle of ``channels`` in
    ``groups`` (reshape to (g, C/g), swap, reshape back): ``(c mod g)·C/g + c div g``."""
    return channel % groups * (channels // groups) + channel // groups


def channel_blocking_kernel(
    shape: Sequence[int], block: int, lanes: int, *, to_blocked: bool, shuffle_groups: int = 1
) -> tirx.PrimFunc:
    """The scheduled fp32 kernel NCHW ``shape`` → NCHW{block}c (``to_blocked``) or back.

    With ``shuffle_groups`` > 1 (into blocks only), channel c of the blocked result is channel
    :func:`shuffled_channel` of the source: ShuffleNet's channel shuffle and the move into
    blocks in one pass, each row still one source plane. Check :func:`transposable` first;
    ``block`` divides the channels."""
    n, channels, height, width = (int(d) for d in shape)
    assert transposable(block, lanes, "float32") and channels % block == 0
    assert shuffle_groups == 1 or (to_blocked and channels % shuffle_groups == 0)
    pixels = height * width
    groups = n * channels // block
    tiles = pixels // lanes
    nchw = (n, channels, height, width)
    blocked = (n, channels // block, height, width, block)
    with IRBuilder() as builder, T.prim_func(private=True, s_tir=True):
        T.func_attr({"tirx.noalias": True, SCHEDULED: True, "op_pattern": OPAQUE})
        source = T.arg("x", T.Buffer(nchw if to_blocked else blocked, "float32"))
        target = T.arg("y", T.Buffer(blocked if to_blocked else nchw, "float32"))

        def plane(group: tirx.PrimExpr, c: int | tirx.PrimExpr, p: tirx.PrimExpr) -> tirx.PrimExpr:
            channel = group * block + c
            if shuffle_groups > 1:
                # A whole image's channel index: the batch's offset stays outside the shuffle.
                image, channel = channel // channels, channel % channels
                channel = image * channels + shuffled_channel(channel, channels, shuffle_groups)
            return channel * pixels + p

        def packed(group: tirx.PrimExpr, p: tirx.PrimExpr, c: int | tirx.PrimExpr) -> tirx.PrimExpr:
            return (group * pixels + p) * block + c

        # A root block, as Relax's analyses of every called PrimFunc expect.
        with T.sblock("root"):
            flat_source = T.decl_buffer((n * channels * pixels,), "float32", data=source.data)
            flat_target = T.decl_buffer((n * channels * pixels,), "float32", data=target.data)
            if tiles:
                with T.parallel(0, groups * tiles) as tile:
                    group = tile // tiles
                    first = (tile % tiles) * lanes
                    # Loads of whole registers: channel rows of the plane side, or the packed side's
                    # lanes·block floats read as `block` registers.
                    if to_blocked:
                        rows = [
                            flat_source[tirx.Ramp(plane(group, c, first), 1, lanes)]
                            for c in range(block)
                        ]
                        rows = _butterfly(rows, lanes)
                        if block < lanes:
                            rows = _pair_halves(rows, lanes)
                        for k, row in enumerate(rows):
                            at = packed(group, first, 0) + k * lanes
                            T.buffer_store(flat_target, row, [tirx.Ramp(at, 1, lanes)])
                    else:
                        rows = [
                            flat_source[tirx.Ramp(packed(group, first, 0) + k * lanes, 1, lanes)]
                            for k in range(block)
                        ]
                        if block < lanes:
                            rows = _unpair_halves(rows, lanes)
                        rows = _butterfly(rows, lanes)
                        for c, row in enumerate(rows):
                            at = plane(group, c, first)
                            T.buffer_store(flat_target, row, [tirx.Ramp(at, 1, lanes)])
            if pixels % lanes:
                with (
                    T.parallel(0, groups) as group,
                    T.serial(tiles * lanes, pixels) as p,
                    T.serial(0, block) as c,
                ):
                    src, dst = plane(group, c, p), packed(group, p, c)
                    if not to_blocked:
                        src, dst = dst, src
                    T.buffer_store(flat_target, flat_source[src], [dst])
    return builder.get()


def reblocking_kernel(
    shape: Sequence[int], block: int, new_block: int, dtype: str
) -> tirx.PrimFunc:
    """The scheduled kernel NCHW{block}c → NCHW{new_block}c of a tensor of NCHW ``shape``:
    both blocks divide the channels, and the narrower divides the wider.

    Each pixel's ``new_block`` channels are whole runs of ``min(block, new_block)`` channels
    of one source block, so the move is a copy of contiguous runs, one vector each. TVM's
    ``te_layout_transform`` of it computes every element's source block and lane: PP-OCRv6's
    24 + 24-channel stem concat re-blocked 8 → 16 at 160² took 0.084 ms (Zen 5)."""
    n, channels, height, width = (int(d) for d in shape)
    run = min(block, new_block)
    assert channels % block == 0 and channels % new_block == 0 and max(block, new_block) % run == 0
    pixels = height * width
    total = n * channels * pixels
    rows = n * channels // new_block * height
    with IRBuilder() as builder, T.prim_func(private=True, s_tir=True):
        T.func_attr({"tirx.noalias": True, SCHEDULED: True, "op_pattern": OPAQUE})
        source = T.arg("x", T.Buffer((n, channels // block, height, width, block), dtype))
        target = T.arg("y", T.Buffer((n, channels // new_block, height, width, new_block), dtype))
        with T.sblock("root"):
            flat_source = T.decl_buffer((total,), dtype, data=source.data)
            flat_target = T.decl_buffer((total,), dtype, data=target.data)
            # A small tensor is copied by one thread: waking the pool costs more than the copy.
            rows_loop = T.parallel if total >= _PARALLEL_ELEMENTS else T.serial
            with rows_loop(0, rows) as row, T.serial(0, width) as x:
                group, y = row // height, row % height
                pixel = y * width + x
                for j in range(new_block // run):
                    # channel group·new_block + j·run, in the source's block and lane
                    channel = group * new_block + j * run
                    src = ((channel // block) * pixels + pixel) * block + channel % block
                    dst = (group * pixels + pixel) * new_block + j * run
                    T.buffer_store(
                        flat_target,
                        flat_source[tirx.Ramp(src, 1, run)],
                        [tirx.Ramp(dst, 1, run)],
                    )
    return builder.get()
