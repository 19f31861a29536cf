"""AMX tiles for convs: ``tdpbusd`` (u8 × s8 → s32) and ``tdpbf16ps`` (bf16 × bf16 → fp32) as
three TVM tensor intrinsics.

An AMX core has eight tile registers of up to 16 rows × 64 bytes and a matrix unit that
computes ``C[M×16] += A[M×K] · B[K×16]`` (``B`` packed as K/4 rows of sixteen 4-byte groups,
four u8 or two bf16: the layout of a VNNI or ``vdpbf16ps`` weight tile) in one instruction.
Measured on a Sapphire-Rapids-class Xeon VM (2026-12-05, one core): one ``tdpbusd`` costs
5.0 ns whatever M (7 to 16) and K (16 to 64 bytes), so 3,234 GMAC/s at M = 16, K = 64; 802 at
K = 16; against about 450 for ``vpdpbusd`` on zmm.

The AMX conv (``amx_conv.py``) keeps activations in ``NCHW16c``: a tile row is ``taps``
consecutive input pixels of sixteen channels (K = 16 · taps elements), rows are consecutive
output pixels of an output row, ``stride`` input pixels apart, and a weight tile is K/4 bytes
rows of sixteen output channels × a group. The accumulators stay in tile registers across the whole
reduction, which a tensor intrinsic cannot express, so the three intrinsics of a register block
(``m_tiles`` × ``n_tiles`` accumulators, at most four) agree on fixed registers:

- **init** (the reduction's init block): call the block's tile configuration (moved to the
  start of each parallel task by ``schedules/lowering/amx_tiles.py``) and zero the accumulators
  ``tmm0..3``;
- **update** (one reduction step): per pixel tile its rows into ``tmm4``/``tmm5``, per output
  chunk its weight tile into ``tmm6``/``tmm7`` (loaded once when there are at most two), and a
  product per accumulator;
- **store** (the copy of the accumulators out): ``tilestored`` each into the conv's output,
  which the space lays out pixel-major so the tiles of a block are one region.

Their descriptions read and write the ``local`` accumulator buffer like the compute does, so
tensorize matches them; their implementations never touch it (LLVM drops the unused array).

Linux grants a process the tile state only on request (``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``; without it the first tile instruction traps). The tile configuration
function asks once per loaded kernel (a flag in the kernel's module) and is LLVM IR linked into
the kernels that call it (``schedules/lowering/amx_tiles.py``).
"""

# TVMScript's buffer annotations are calls, which mypy reads as invalid types.
# mypy: disable-error-code="valid-type"

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tvm import tirx
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from .dot_conv import INT8, DotFormat

#: Input channels per pixel of a tile row: one ``NCHW16c`` block.
AMX_K = 16
#: Output channels per accumulator tile (sixteen s32 or fp32 columns, 64 bytes a row).
AMX_N = 16
#: Bytes of a weight tile's row: sixteen output channels of one 4-byte group.
_WEIGHT_ROW_BYTES = 64
#: The tile product of each dot format (by its precision).
PRODUCTS = {"int8": "llvm.x86.tdpbusd", "bf16": "llvm.x86.tdpbf16ps"}
#: Most rows of a tile.
MAX_ROWS = 16
#: Accumulator tiles per register block (tmm0..3); the inputs take tmm4, tmm5, the weights
#: tmm6, tmm7.
MAX_ACCUMULATORS = 4
_INPUT_TILES = 2

#: Fewest rows a tile may have: below, a tile product (the same 16 cycles at any row count)
#: does less work than a zmm ``vpdpbusd`` register block.
MIN_ROWS = 4

_CONFIG_PREFIX = "convtune_amx_tiles"
_CONFIG_NAME = re.compile(rf"{_CONFIG_PREFIX}_m(\d+)_k(\d+)$")
#: ``arch_prctl`` (x86-64 syscall 158), ``ARCH_REQ_XCOMP_PERM`` (0x1023), ``XFEATURE_XTILEDATA``.
_ARCH_PRCTL, _REQ_XCOMP_PERM, _XTILEDATA = 158, 0x1023, 18


@dataclass(frozen=True)
class AmxBlock:
    """One register block: ``m_tiles`` × ``n_tiles`` accumulator tiles, each ``rows`` pixels
    of an output row × 16 output channels.

    A tile row reads ``taps`` consecutive input pixels of ``pixel_channels`` channels of ``fmt``
    (K = channels · taps elements: 16 a pixel, 4 for the stem's ``NCHW4c``, ``amx_conv.py``);
    consecutive rows start ``stride`` input pixels apart."""

    rows: int
    m_tiles: int
    n_tiles: int = 1
    stride: int = 1
    taps: int = 1
    fmt: DotFormat = INT8
    pixel_channels: int = AMX_K

    @property
    def pixels(self) -> int:
        return self.rows * self.m_tiles

    @property
    def depth(self) -> int:
        """K: the bytes of a tile row."""
        return self.pixel_channels * self.taps * 4 // self.fmt.group

    @property
    def input_pixels(self) -> int:
        """The input pixels the block's rows read."""
        return (self.pixels - 1) * self.stride + self.taps

    @property
    def config_function(self) -> str:
        return f"{_CONFIG_PREFIX}_m{self.rows}_k{self.depth}"

    def intrinsics(self) -> tuple[str, str, str]:
        """The names of its (init, update, store) intrinsics, registered on first use."""
        suffix = (
            f"{self.fmt.precision}_m{self.rows}x{self.m_tiles}_n{self.n_tiles}"
            f"_s{self.stride}_t{self.taps}_c{self.pixel_channels}"
        )
        names = (f"convtune_amx_init_{suffix}", f"convtune_amx_update_{suffix}",
                 f"convtune_amx_store_{suffix}")  # fmt: skip
        if not _registered(names[0]):
            _register(self, names)
        return names


def tile_rows(out_width: int) -> int | None:
    """The rows of a tile for output rows ``out_width`` pixels wide: the widest divisor up to
    16, None when that is under :data:`MIN_ROWS` (a prime width over 16, or a narrow one)."""
    rows = max(d for d in range(1, MAX_ROWS + 1) if out_width % d == 0)
    return rows if rows >= MIN_ROWS else None


def _registered(name: str) -> bool:
    try:
        TensorIntrin.get(name)
    except ValueError:
        return False
    return True


def _tile_config_ir(name: str, rows: int, k: int) -> str:
    """LLVM IR of ``name``: ask once for the tile state, then load the tile configuration
    (palette 1; accumulators ``rows`` × 64 bytes, inputs ``rows`` × ``k``, weights ``k/4`` ×
    64); and of its keep and restore functions (:func:`keep_functions`)."""
    flag = f"@{name}_granted"
    keep, restore = keep_functions(name)
    weight = (k // 4, _WEIGHT_ROW_BYTES)
    tiles = [(rows, 64)] * MAX_ACCUMULATORS + [(rows, k)] * _INPUT_TILES + [weight] * 2
    stores = []
    for t, (tile_rows, colsb) in enumerate(tiles):
        stores += [
            f"  %colsb{t} = getelementptr i8, ptr %cfg, i32 {16 + 2 * t}",
            f"  store i16 {colsb}, ptr %colsb{t}",
            f"  %rows{t} = getelementptr i8, ptr %cfg, i32 {48 + t}",
            f"  store i8 {tile_rows}, ptr %rows{t}",
        ]
    body = "\n".join(stores)
    return f"""{flag} = internal global i32 0
declare i64 @syscall(i64, ...)
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.sttilecfg(ptr)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
define internal i32 @{keep}(ptr %kept) alwaysinline {{
entry:
  call void @llvm.x86.sttilecfg(ptr %kept)
  ret i32 0
}}
define internal i32 @{restore}(ptr %kept) alwaysinline {{
entry:
  call void @llvm.x86.ldtilecfg(ptr %kept)
  ret i32 0
}}
define internal i32 @{name}() alwaysinline {{
entry:
  %cfg = alloca [64 x i8], align 64
  %granted = load i32, ptr {flag}
  %asked = icmp ne i32 %granted, 0
  br i1 %asked, label %configure, label %ask
ask:
  %status = call i64 (i64, ...) @syscall(i64 {_ARCH_PRCTL}, i64 {_REQ_XCOMP_PERM}, i64 {_XTILEDATA})
  store i32 1, ptr {flag}
  br label %configure
configure:
  call void @llvm.memset.p0.i64(ptr %cfg, i8 0, i64 64, i1 false)
  store i8 1, ptr %cfg
{body}
  call void @llvm.x86.ldtilecfg(ptr %cfg)
  ret i32 0
}}
"""


def keep_functions(config: str) -> tuple[str, str]:
    """The functions linked with tile configuration ``config`` that store the thread's tile
    configuration into a 64-byte buffer (``sttilecfg``; zeros: the tiles' initial state) and
    load it back from there.

    onnxruntime's AMX kernels load their configuration once per thread and trust it after:
    run in one process after one of ours (the job's comparison with onnxruntime, or a user's
    program that runs both), its next ``tdpbusd`` met our tile shapes and died of SIGILL
    (Emerald Rapids VM, 2026-12-06). So each parallel task of ours keeps the configuration it
    found and loads it back at its end (``schedules/lowering/amx_tiles.py``)."""
    return f"{config}_keep", f"{config}_restore"


def tile_config_ir(name: str) -> str | None:
    """The LLVM IR of a tile configuration function named by :attr:`AmxBlock.config_function`,
    None for any other name."""
    match = _CONFIG_NAME.match(name)
    if match is None:
        return None
    return _tile_config_ir(name, int(match.group(1)), int(match.group(2)))


def is_tile_config(name: str) -> bool:
    return _CONFIG_NAME.match(name) is not None


def _register(block: AmxBlock, names: tuple[str, str, str]) -> None:
    rows, m_tiles, n_tiles, pixels = block.rows, block.m_tiles, block.n_tiles, block.pixels
    stride, in_pixels, groups = block.stride, block.input_pixels, block.depth // 4
    config = block.config_function
    fmt = block.fmt
    data_dtype, weight_dtype, acc, group = (
        fmt.data_dtype,
        fmt.weight_dtype,
        fmt.acc_dtype,
        fmt.group,
    )
    element = 4 // group
    channels = block.pixel_channels
    per_pixel = channels // group  # groups of a pixel's channels in a tile row
    zero = tirx.const(0, acc)
    data_bits, weight_bits = (
        "uint16" if dtype == "bfloat16" else dtype for dtype in (data_dtype, weight_dtype)
    )
    instruction = PRODUCTS[fmt.precision]
    # The accumulators' rows: ``rows`` pixels of one tile, all n_tiles × 16 channels a pixel.
    row_bytes = n_tiles * AMX_N * 4

    # With one output chunk the block has no loop over chunks (the schedule's split leaves a
    # unit loop, which blockize drops): the descriptions then iterate pixels and lanes only.
    @T.prim_func(s_tir=True)
    def init_desc(
        C: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:pixels, 0:n_tiles, 0:AMX_N])
            for n, m, c in T.grid(n_tiles, pixels, AMX_N):
                with T.sblock("init"):
                    vn, vm, vc = T.axis.remap("SSS", [n, m, c])
                    C[vm, vn, vc] = zero

    @T.prim_func(s_tir=True)
    def init_desc_one(
        C: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:pixels, 0:n_tiles, 0:AMX_N])
            for m, c in T.grid(pixels, AMX_N):
                with T.sblock("init"):
                    vm, vc = T.axis.remap("SS", [m, c])
                    C[vm, 0, vc] = zero

    @T.prim_func(s_tir=True)
    def init_impl(
        C: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:pixels, 0:n_tiles, 0:AMX_N])
            T.evaluate(T.call_extern("int32", config))
            for t in T.unroll(m_tiles * n_tiles):
                T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tilezero", T.uint8(t)))

    # A tile row of pixel m is the input pixels m·stride .. m·stride + taps - 1, 16 channels
    # each: its group q is channels g·(q mod 16/g) .. of pixel m·stride + q div (16/g).
    @T.prim_func(s_tir=True)
    def update_desc(
        A: T.Buffer((in_pixels, channels), data_dtype, offset_factor=1),
        B: T.Buffer((n_tiles, groups, AMX_N, group), weight_dtype, offset_factor=1),
        C: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(
                C[0:pixels, 0:n_tiles, 0:AMX_N], A[0:in_pixels, 0:channels],
                B[0:n_tiles, 0:groups, 0:AMX_N, 0:group],
            )  # fmt: skip
            T.writes(C[0:pixels, 0:n_tiles, 0:AMX_N])
            for n, m, c, g, lane in T.grid(n_tiles, pixels, AMX_N, groups, group):
                with T.sblock("update"):
                    vn, vm, vc, vg, vl = T.axis.remap("SSSRR", [n, m, c, g, lane])
                    C[vm, vn, vc] = C[vm, vn, vc] + T.Cast(
                        acc, A[vm * stride + vg // per_pixel, vg % per_pixel * group + vl]
                    ) * T.Cast(acc, B[vn, vg, vc, vl])

    @T.prim_func(s_tir=True)
    def update_desc_one(
        A: T.Buffer((in_pixels, channels), data_dtype, offset_factor=1),
        B: T.Buffer((n_tiles, groups, AMX_N, group), weight_dtype, offset_factor=1),
        C: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(
                C[0:pixels, 0:n_tiles, 0:AMX_N], A[0:in_pixels, 0:channels],
                B[0:n_tiles, 0:groups, 0:AMX_N, 0:group],
            )  # fmt: skip
            T.writes(C[0:pixels, 0:n_tiles, 0:AMX_N])
            for m, c, g, lane in T.grid(pixels, AMX_N, groups, group):
                with T.sblock("update"):
                    vm, vc, vg, vl = T.axis.remap("SSRR", [m, c, g, lane])
                    C[vm, 0, vc] = C[vm, 0, vc] + T.Cast(
                        acc, A[vm * stride + vg // per_pixel, vg % per_pixel * group + vl]
                    ) * T.Cast(acc, B[0, vg, vc, vl])

    def load(tile: int, pointer: Any, stride_bytes: int) -> Any:
        return T.call_llvm_intrin(
            "void", "llvm.x86.tileloadd64", T.uint8(tile), pointer, T.int64(stride_bytes)
        )

    def product(c: Any, a: Any, b: Any) -> Any:
        return T.call_llvm_intrin("void", instruction, T.uint8(c), T.uint8(a), T.uint8(b))

    # Tiles: accumulators 0..3 (m, n) → m·n_tiles + n; inputs 4, 5; weights 6, 7. With more
    # than two of a kind the loads alternate between its two registers.
    @T.prim_func(s_tir=True)
    def update_impl(
        A: T.Buffer((in_pixels, channels), data_dtype, offset_factor=1),
        B: T.Buffer((n_tiles, groups, AMX_N, group), weight_dtype, offset_factor=1),
        C: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(
                C[0:pixels, 0:n_tiles, 0:AMX_N], A[0:in_pixels, 0:channels],
                B[0:n_tiles, 0:groups, 0:AMX_N, 0:group],
            )  # fmt: skip
            T.writes(C[0:pixels, 0:n_tiles, 0:AMX_N])
            # Pointers through views of the storage type: TVM's bf16 legalization stores bf16
            # as uint16 but would type a bf16 buffer's pointer as fp32, which it then refuses.
            A_bits = T.decl_buffer(A.shape, data_bits, data=A.data, elem_offset=A.elem_offset)
            B_bits = T.decl_buffer(B.shape, weight_bits, data=B.data, elem_offset=B.elem_offset)
            for tm in T.unroll(m_tiles):
                T.evaluate(
                    load(4 + tm % 2, A_bits.access_ptr("r", offset=tm * rows * stride * channels),
                         stride * channels * element)
                )  # fmt: skip
                for tn in T.unroll(n_tiles):
                    if tm == 0 or n_tiles > 2:
                        offset = tn * groups * AMX_N * group
                        T.evaluate(
                            load(6 + tn % 2, B_bits.access_ptr("r", offset=offset),
                                 _WEIGHT_ROW_BYTES)
                        )  # fmt: skip
                    T.evaluate(product(tm * n_tiles + tn, 4 + tm % 2, 6 + tn % 2))

    @T.prim_func(s_tir=True)
    def store_desc(
        C: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1, scope="local"),
        D: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:pixels, 0:n_tiles, 0:AMX_N])
            T.writes(D[0:pixels, 0:n_tiles, 0:AMX_N])
            for n, m, c in T.grid(n_tiles, pixels, AMX_N):
                with T.sblock("store"):
                    vn, vm, vc = T.axis.remap("SSS", [n, m, c])
                    D[vm, vn, vc] = C[vm, vn, vc]

    @T.prim_func(s_tir=True)
    def store_desc_one(
        C: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1, scope="local"),
        D: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:pixels, 0:n_tiles, 0:AMX_N])
            T.writes(D[0:pixels, 0:n_tiles, 0:AMX_N])
            for m, c in T.grid(pixels, AMX_N):
                with T.sblock("store"):
                    vm, vc = T.axis.remap("SS", [m, c])
                    D[vm, 0, vc] = C[vm, 0, vc]

    @T.prim_func(s_tir=True)
    def store_impl(
        C: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1, scope="local"),
        D: T.Buffer((pixels, n_tiles, AMX_N), acc, offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:pixels, 0:n_tiles, 0:AMX_N])
            T.writes(D[0:pixels, 0:n_tiles, 0:AMX_N])
            for tm in T.unroll(m_tiles):
                for tn in T.unroll(n_tiles):
                    T.evaluate(
                        T.call_llvm_intrin(
                            "void", "llvm.x86.tilestored64", T.uint8(tm * n_tiles + tn),
                            D.access_ptr("w", offset=(tm * rows * n_tiles + tn) * AMX_N),
                            T.int64(row_bytes),
                        )
                    )  # fmt: skip

    one = n_tiles == 1
    init, update, store = names
    TensorIntrin.register(init, init_desc_one if one else init_desc, init_impl, override=True)
    TensorIntrin.register(
        update, update_desc_one if one else update_desc, update_impl, override=True
    )
    TensorIntrin.register(store, store_desc_one if one else store_desc, store_impl, override=True)


__all__ = [
    "AMX_K",
    "AMX_N",
    "MAX_ACCUMULATORS",
    "MAX_ROWS",
    "MIN_ROWS",
    "PRODUCTS",
    "AmxBlock",
    "is_tile_config",
    "keep_functions",
    "tile_config_ir",
    "tile_rows",
]
