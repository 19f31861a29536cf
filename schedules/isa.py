"""What the target's vector unit offers the schedules: fp32 lanes per register."""

from __future__ import annotations

from tvm.target import Target, codegen


def vector_lanes(target: Target) -> int:
    """fp32 lanes of the widest vector unit the target CPU has (16 on AVX-512, 8 on AVX2)."""
    mcpu = str(target.attrs.get("mcpu", "")) or codegen.llvm_get_system_cpu()
    triple = str(target.attrs.get("mtriple", "")) or codegen.llvm_get_system_triple()
    if codegen.llvm_cpu_has_features(
        ["avx512f"], Target({"kind": "llvm", "mcpu": mcpu, "mtriple": triple})
    ):
        return 16
    return 8
