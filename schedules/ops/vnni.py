"""The VNNI dot product as a TVM tensor intrinsic whose accumulators are ``local``.

Registered on import; ``schedules/spaces/int8_vnni.py`` tensorizes with it.
"""

# TVMScript's buffer annotations are calls, which mypy reads as invalid types.
# mypy: disable-error-code="valid-type"

from __future__ import annotations

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

#: ``dot_16x4_vnni`` accumulating into a ``local`` buffer: TVM's intrinsic matches global
#: accumulators only, and the register block keeps its accumulators local (a stack array LLVM
#: holds in zmm registers, ``accumulate_locally``). TVM's also passes ``<16 x i32>`` operands,
#: which LLVM 22's ``vpdpbusd.512`` (``<64 x i8>`` operands) refuses: "Call parameter type does
#: not match function signature".
VNNI_LOCAL_INTRIN = "convtune_dot_16x4_vnni_local"


@T.prim_func(s_tir=True)
def _dot_desc(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1, scope="local"),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        for i in T.serial(0, 16):
            for k in T.serial(0, 4):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")


@T.prim_func(s_tir=True)
def _dot_vnni(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1, scope="local"),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        A_i32 = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
            C.vload([0], dtype="int32x16"),
            T.reinterpret(T.broadcast(A_i32, 16), dtype="uint8x64"),
            B.vload([0, 0], dtype="int8x64"),
            dtype="int32x16",
        )


TensorIntrin.register(VNNI_LOCAL_INTRIN, _dot_desc, _dot_vnni, override=True)
