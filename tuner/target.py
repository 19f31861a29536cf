"""Targets: this host by default, and the familiar CLI spelling that TVM 0.27 no longer parses."""

from __future__ import annotations

import json
import shlex
from typing import Any

import psutil
from tvm.target import Target, codegen

from convtune.tuner.cpu_flags import cpu_flags
from convtune.tuner.errors import ConvtuneError

_INT_OPTIONS = {"num-cores", "opt-level"}
_LIST_OPTIONS = {"mattr", "keys", "libs"}


def physical_cores() -> int:
    return psutil.cpu_count(logical=False) or psutil.cpu_count() or 1


def _flag_key(name: str) -> str:
    # LLVM spells "avx512vnni", "amx-tile"; /proc/cpuinfo "avx512_vnni", "amx_tile".
    return name.replace("_", "").replace("-", "")


#: LLVM features whose cpuinfo flag has the same name up to "_"/"-", so a missing flag means the
#: CPU (or the hypervisor) does not offer the feature.
_VECTOR_FEATURE_PREFIXES = ("avx", "amx")
_VECTOR_FEATURES = {"fma", "f16c", "gfni", "vaes", "vpclmulqdq"}


def _implied_features(mcpu: str) -> set[str]:
    """The features LLVM's ``mcpu`` implies on this machine's triple."""
    target = Target({"kind": "llvm", "mcpu": mcpu, "mtriple": codegen.llvm_get_system_triple()})
    return {str(feature) for feature in codegen.llvm_get_cpu_features(target)}


def masked_features(mcpu: str, flags: set[str]) -> list[str]:
    """The vector features LLVM's ``mcpu`` implies that ``flags`` (/proc/cpuinfo) lack.

    A VM may hide part of its CPU: an AMD EPYC Zen 4 guest (family 25 model 17, which LLVM names
    ``znver4``) was seen without any AVX-512 flag (2026-12-03). Compiled for ``znver4`` alone,
    every candidate and the model trapped on an invalid opcode. Names with a dot (``avx10.1-512``)
    have no cpuinfo twin and are left alone, as is everything when ``flags`` is empty.
    """
    if not flags:
        return []
    have = {_flag_key(flag) for flag in flags}
    return sorted(
        feature
        for feature in _implied_features(mcpu)
        if "." not in feature
        and (feature.startswith(_VECTOR_FEATURE_PREFIXES) or feature in _VECTOR_FEATURES)
        and _flag_key(feature) not in have
    )


#: LLVM features a VM's CPU may offer beyond what LLVM's name for it implies: an AMX Xeon guest
#: reports family 6 model 167, which LLVM names ``rocketlake`` (no AMX, no AVX-512 BF16 or FP16),
#: while its flags are a Sapphire Rapids host's (2026-12-03 and 2026-12-05).
_OFFERED_FEATURES = ("amx-tile", "amx-int8", "amx-bf16", "avx512bf16", "avx512fp16")


def offered_features(mcpu: str, flags: set[str]) -> list[str]:
    """The features of :data:`_OFFERED_FEATURES` that ``flags`` (/proc/cpuinfo) have and LLVM's
    ``mcpu`` does not imply."""
    have = {_flag_key(flag) for flag in flags}
    implied = _implied_features(mcpu)
    return [f for f in _OFFERED_FEATURES if _flag_key(f) in have and f not in implied]


def host_target_spec() -> dict[str, Any]:
    """This host as an LLVM target: its CPU name, minus the vector features it does not offer,
    plus those it offers that the name does not imply."""
    mcpu = codegen.llvm_get_system_cpu()
    spec: dict[str, Any] = {"kind": "llvm", "mcpu": mcpu, "num-cores": physical_cores()}
    flags = cpu_flags()
    mattr = [f"-{feature}" for feature in masked_features(mcpu, flags)]
    mattr += [f"+{feature}" for feature in offered_features(mcpu, flags)]
    if mattr:
        spec["mattr"] = mattr
    return spec


def parse_target_spec(text: str | None) -> dict[str, Any]:
    """Turn ``None``, a JSON dict or ``"llvm -mcpu=znver4 -num-cores=2"`` into a target dict."""
    if text is None or not text.strip():
        return host_target_spec()
    text = text.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConvtuneError(f"target is not valid JSON: {exc.msg}") from None
        if not isinstance(parsed, dict) or "kind" not in parsed:
            raise ConvtuneError('a JSON target needs a "kind", e.g. {"kind": "llvm"}')
        return parsed
    words = shlex.split(text)
    kind, options = words[0], words[1:]
    if kind != "llvm":
        raise ConvtuneError(f"target kind {kind!r} is not supported: convtune tunes CPUs ('llvm')")
    spec: dict[str, Any] = {"kind": kind}
    for option in options:
        key, sep, value = option.lstrip("-").partition("=")
        if not sep:
            raise ConvtuneError(f"target option {option!r} must look like -key=value")
        if key in _INT_OPTIONS:
            try:
                spec[key] = int(value)
            except ValueError:
                raise ConvtuneError(
                    f"target option -{key} needs an integer, got {value!r}"
                ) from None
        elif key in _LIST_OPTIONS:
            spec[key] = value.split(",")
        else:
            spec[key] = value
    if "mcpu" in spec and not codegen.llvm_is_valid_cpu(
        spec["mcpu"], spec.get("mtriple") or codegen.llvm_get_system_triple()
    ):
        raise ConvtuneError(f"LLVM does not know the CPU {spec['mcpu']!r}")
    return spec


def make_target(text: str | None = None) -> Target:
    spec = parse_target_spec(text)
    try:
        return Target(spec)
    except (ValueError, RuntimeError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConvtuneError(f"invalid target {spec}: {first_line}") from None


def target_threads(target: Target, threads: int | None) -> int:
    """Threads to tune and run with: asked for, else the target's cores, else this host's."""
    if threads is not None:
        if threads < 1:
            raise ConvtuneError(f"--threads must be at least 1, got {threads}")
        return threads
    cores = target.attrs.get("num-cores")
    return int(cores) if cores else physical_cores()
