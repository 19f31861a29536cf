"""The AVX-512 BF16 dot product (``vdpbf16ps``) as a TVM tensor intrinsic with ``local``
accumulators.

Registered on import; ``schedules/spaces/bf16_dot.py`` tensorizes with it. ``vdpbf16ps`` adds
the products of two bf16 pairs to each of sixteen fp32 lanes: one broadcast pair of input
channels against a 16×2 weight tile, the same shape as VNNI's ``dot_16x4``.

TVM 0.27 cannot call LLVM's intrinsic itself: LLVM 22 types its operands ``<32 x bfloat>``, and
TVM's CPU lowering turns every bf16 value into ``uint16`` (``BF16StorageLegalize``) before code
generation, so a direct ``call_llvm_pure_intrin`` fails LLVM's verifier ("Call parameter type
does not match function signature"). The intrinsic instead calls :data:`DPBF16PS_FUNCTION` on the
bits (``<32 x i16>``), a function in LLVM IR (:data:`DPBF16PS_LLVM_IR`) that bitcasts them and
calls the instruction; ``schedules/lowering/bf16_dot.py`` links it into every function that
calls it, and LLVM inlines it (checked in the assembly: ``vdpbf16ps`` on zmm, no call).
"""

# TVMScript's buffer annotations are calls, which mypy reads as invalid types.
# mypy: disable-error-code="valid-type"

from __future__ import annotations

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

BF16_LOCAL_INTRIN = "convtune_dot_16x2_bf16_local"
DPBF16PS_FUNCTION = "convtune_dpbf16ps"
DPBF16PS_LLVM_IR = f"""
define internal <16 x float> @{DPBF16PS_FUNCTION}(<16 x float> %acc, <32 x i16> %a, <32 x i16> %b)
    alwaysinline {{
  %a.bf16 = bitcast <32 x i16> %a to <32 x bfloat>
  %b.bf16 = bitcast <32 x i16> %b to <32 x bfloat>
  %sum = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(
      <16 x float> %acc, <32 x bfloat> %a.bf16, <32 x bfloat> %b.bf16)
  ret <16 x float> %sum
}}
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
"""


@T.prim_func(s_tir=True)
def _dot_desc(
    A: T.Buffer((2,), "bfloat16", offset_factor=1),
    B: T.Buffer((16, 2), "bfloat16", offset_factor=1),
    C: T.Buffer((16,), "float32", offset_factor=1, scope="local"),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:2], B[0:16, 0:2])
        T.writes(C[0:16])
        for i in T.serial(0, 16):
            for k in T.serial(0, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.cast(A[vk], "float32") * T.cast(B[vi, vk], "float32")


@T.prim_func(s_tir=True)
def _dot_bf16(
    A: T.Buffer((2,), "bfloat16", offset_factor=1),
    B: T.Buffer((16, 2), "bfloat16", offset_factor=1),
    C: T.Buffer((16,), "float32", offset_factor=1, scope="local"),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:2], B[0:16, 0:2])
        T.writes(C[0:16])
        # The bits, read through uint16 views: TVM's bf16 legalization would widen bf16 loads.
        A_bits = T.decl_buffer((2,), "uint16", data=A.data, elem_offset=A.elem_offset)
        B_bits = T.decl_buffer((16, 2), "uint16", data=B.data, elem_offset=B.elem_offset)
        pair = T.reinterpret(A_bits.vload([0], "uint16x2"), dtype="uint32")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_pure_extern(
            "float32x16",
            DPBF16PS_FUNCTION,
            C.vload([0], dtype="float32x16"),
            T.reinterpret(T.broadcast(pair, 16), dtype="uint16x32"),
            B_bits.vload([0, 0], dtype="uint16x32"),
        )


TensorIntrin.register(BF16_LOCAL_INTRIN, _dot_desc, _dot_bf16, override=True)
