"""What the target's vector unit offers the schedules: fp32 lanes per register, and how many
accumulators a register-blocked kernel may keep."""

from __future__ import annotations

from tvm.target import Target, codegen

#: Accumulator registers a register block may use, by fp32 lanes. AVX-512: 28 of the 32 zmm
#: (the rest hold a weight vector and broadcasts). AVX2: 14 of the 16 ymm, measured on Zen 3
#: (2026-11-30, a cold MobileNetV2 search): a block of 14 was the best of 3 of 14 blocked conv
#: layers, a block above 14 the best of none of the 13 layers where both were measured (they
#: spill, at down to a tenth of the speed), and such candidates took 18 of the first 320 trials.
ACCUMULATORS = {16: 28, 8: 14}


def _mcpu(target: Target) -> str:
    """The target's CPU name, the host's when it names none."""
    return str(target.attrs.get("mcpu", "")) or codegen.llvm_get_system_cpu()


def has_feature(target: Target, feature: str) -> bool:
    mcpu = _mcpu(target)
    triple = str(target.attrs.get("mtriple", "")) or codegen.llvm_get_system_triple()
    # -mattr counts: a VM's znver4 without AVX-512 is "znver4" with "-avx512f" (tuner/target.py).
    mattr = [str(attr) for attr in target.attrs.get("mattr", [])]
    spec = {"kind": "llvm", "mcpu": mcpu, "mtriple": triple, "mattr": mattr}
    return bool(codegen.llvm_cpu_has_features([feature], Target(spec)))


def has_avx512(target: Target) -> bool:
    return has_feature(target, "avx512f")


def has_vnni(target: Target) -> bool:
    """Whether the target CPU has AVX-512 VNNI (``vpdpbusd`` on zmm): Cascade Lake and later
    Xeons, Zen 4 and Zen 5 (LLVM's ``znver4`` lists it)."""
    return has_feature(target, "avx512vnni")


def has_vbmi(target: Target) -> bool:
    """Whether the target CPU has AVX-512 VBMI (``vpermi2b``, byte permutes across a zmm): Ice
    Lake and later Xeons, Zen 4 and Zen 5; not Cascade Lake, which has VNNI."""
    return has_feature(target, "avx512vbmi")


def has_amx_int8(target: Target) -> bool:
    """Whether the target CPU has AMX tiles with the int8 product (``tdpbusd``): Sapphire Rapids
    and later Xeons (``schedules/ops/amx.py``)."""
    return has_feature(target, "amx-tile") and has_feature(target, "amx-int8")


def has_amx_bf16(target: Target) -> bool:
    """Whether the target CPU has AMX tiles with the bf16 product (``tdpbf16ps``): Sapphire
    Rapids and later Xeons."""
    return has_feature(target, "amx-tile") and has_feature(target, "amx-bf16")


def amx_precisions(target: Target) -> tuple[str, ...]:
    """The dot formats (by precision: "int8", "bf16") whose products the target's AMX tiles
    compute; empty without AMX."""
    offered = (("int8", has_amx_int8), ("bf16", has_amx_bf16))
    return tuple(precision for precision, has in offered if has(target))


def has_bf16(target: Target) -> bool:
    """Whether the target CPU has AVX-512 BF16 (``vdpbf16ps`` on zmm): Cooper Lake, Sapphire
    Rapids and later Xeons, Zen 4 and Zen 5."""
    return has_feature(target, "avx512bf16")


#: CPUs whose 512-bit FMA is two 256-bit halves (LLVM's scheduling model of Zen 4): a half
#: register does as many fp32 FMAs per cycle as a whole one there.
_SPLIT_512_FMA = frozenset({"znver4"})


def full_width_fma(target: Target) -> bool:
    """Whether a 16-lane FMA does twice the work per cycle of an 8-lane one on ``target``: an
    AVX-512 CPU whose 512-bit FMA units are full width (Zen 5, Xeon Scalable), not Zen 4's."""
    return has_avx512(target) and _mcpu(target) not in _SPLIT_512_FMA


def vector_lanes(target: Target) -> int:
    """fp32 lanes of the widest vector unit the target CPU has (16 on AVX-512, 8 on AVX2)."""
    return 16 if has_avx512(target) else 8


def accumulator_limit(target: Target) -> int:
    """The most accumulators (vector registers) a register block may have on ``target``."""
    return ACCUMULATORS[vector_lanes(target)]
