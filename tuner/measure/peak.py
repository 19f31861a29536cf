"""Machine fp32 peak from a generated FMA microbenchmark (the roofline every GFLOP/s is judged by).

A C kernel keeps :data:`ACCUMULATORS` independent vector accumulators busy with fused
multiply-adds (enough to hide the FMA latency on every x86 core since Haswell), is compiled with the
system gcc into a temporary shared library and called through ctypes, which releases the GIL, so
Python threads run it truly in parallel. AVX-512 is used when /proc/cpuinfo lists ``avx512f``,
AVX2 otherwise.

The int8 and bf16 convs have roofs of their own: the dot-product instructions (:data:`DOT_PEAKS`:
``vpdpbusd``, 64 u8×s8 multiply-adds a zmm; ``vdpbf16ps``, 32 bf16 ones) timed the same way. Their
ratio to the FMA peak is the core's, not the ISA's: on Zen 4 (2026-12-06) ``vpdpbusd`` ran one
zmm a cycle like the FMA, 462 GOP/s against 116 GFLOP/s on one core, 4×.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from convtune.tuner.cpu_flags import cpu_flags
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.native import compile_c

ACCUMULATORS = 12

# VEC/LANES/SET1/FMA are defined per ISA; the accumulators start different so no two are
# provably equal, and converge to c/(1-b) ~ 1 so no denormal ever slows the loop.
_KERNEL_C = """
#include <immintrin.h>
#include <stdint.h>
#define ACC __NACC__
float fma_loop(int64_t iters) {
    VEC acc[ACC];
    for (int j = 0; j < ACC; ++j) acc[j] = SET1(1.0f + 0.01f * (float)j);
    const VEC b = SET1(0.999999f), c = SET1(1e-6f);
    for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
        for (int j = 0; j < ACC; ++j) acc[j] = FMA(acc[j], b, c);
    }
    float out[LANES], total = 0.0f;
    for (int j = 1; j < ACC; ++j) acc[0] = ADD(acc[0], acc[j]);
    STORE(out, acc[0]);
    for (int k = 0; k < LANES; ++k) total += out[k];
    return total;
}
"""

_ISAS = {
    "avx512f": (
        ["-mavx512f", "-mfma"],
        "#define VEC __m512\n#define LANES 16\n#define SET1 _mm512_set1_ps\n"
        "#define FMA _mm512_fmadd_ps\n#define ADD _mm512_add_ps\n#define STORE _mm512_storeu_ps\n",
    ),
    "avx2": (
        ["-mavx2", "-mfma"],
        "#define VEC __m256\n#define LANES 8\n#define SET1 _mm256_set1_ps\n"
        "#define FMA _mm256_fmadd_ps\n#define ADD _mm256_add_ps\n#define STORE _mm256_storeu_ps\n",
    ),
}
_LANES = {"avx512f": 16, "avx2": 8}


@dataclass(frozen=True)
class DotPeak:
    """One dot-product instruction to time: the precision it multiplies, its name, the
    /proc/cpuinfo flag it needs, gcc's flags, and its C (``DOT(acc, a, b)``, the operands
    ``A``/``B`` of type ``OPERAND``)."""

    precision: str
    instruction: str
    flag: str
    gcc_flags: tuple[str, ...]
    defines: str
    #: Operations (a multiply-add counts two) per instruction.
    ops: int


#: The dot-product peaks ``convtune peak`` measures where the CPU has the instruction.
DOT_PEAKS = (
    DotPeak(
        "int8",
        "vpdpbusd",
        "avx512_vnni",
        ("-mavx512f", "-mavx512vnni"),
        "#define VEC __m512i\n#define OPERAND __m512i\n#define ZERO _mm512_setzero_si512\n"
        "#define DOT _mm512_dpbusd_epi32\n#define A _mm512_set1_epi32(0x01010101)\n"
        "#define B A\n#define TOTAL(v) (float)_mm512_reduce_add_epi32(v)\n"
        "#define ADD _mm512_add_epi32\n",
        16 * 4 * 2,
    ),
    DotPeak(
        "bf16",
        "vdpbf16ps",
        "avx512_bf16",
        ("-mavx512f", "-mavx512bf16"),
        "#define VEC __m512\n#define OPERAND __m512bh\n#define ZERO _mm512_setzero_ps\n"
        "#define DOT _mm512_dpbf16_ps\n"
        "#define A _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-6f), _mm512_set1_ps(1e-6f))\n"
        "#define B _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f))\n"
        "#define TOTAL(v) _mm512_reduce_add_ps(v)\n#define ADD _mm512_add_ps\n",
        16 * 2 * 2,
    ),
)

# The accumulators grow by small steps (u8 ones, bf16 1e-6), far from overflow or infinity.
_DOT_KERNEL_C = """
#include <immintrin.h>
#include <stdint.h>
#define ACC __NACC__
float dot_loop(int64_t iters) {
    VEC acc[ACC];
    for (int j = 0; j < ACC; ++j) acc[j] = ZERO();
    const OPERAND a = A, b = B;
    for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
        for (int j = 0; j < ACC; ++j) acc[j] = DOT(acc[j], a, b);
    }
    for (int j = 1; j < ACC; ++j) acc[0] = ADD(acc[0], acc[j]);
    return TOTAL(acc[0]);
}
"""


#: Relative spread of the repeated all-threads runs above which the figure is not trusted.
MAX_SPREAD = 0.05
#: 1-minute load average per CPU above which other processes are taking cores.
MAX_LOAD_PER_CPU = 0.25


@dataclass(frozen=True)
class PeakResult:
    """Best measured fp32 GFLOP/s on one core and on ``threads`` cores together.

    ``spread`` is (best − worst) / best of the repeated all-threads runs; ``load`` the 1-minute
    load average before measuring; ``bandwidth_gbs`` the stream-triad memory bandwidth on
    ``threads`` threads (None when not measured); ``warnings`` say why the figure may be low.
    """

    gflops_per_core: float
    gflops_all: float
    threads: int
    method: str
    spread: float | None = None
    load: float | None = None
    bandwidth_gbs: float | None = None
    warnings: tuple[str, ...] = ()
    #: Precision → G operations/s of its dot-product instruction on ``threads`` threads
    #: (:data:`DOT_PEAKS`, the ones the CPU has; empty when not measured).
    dot_peaks: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["warnings"] = list(self.warnings)
        return out


def load_average() -> float | None:
    """The 1-minute load average (None where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def quietness_warnings(spread: float | None, load: float | None, cpus: int) -> list[str]:
    """Why a measurement taken with this spread and load may read low (empty: trust it)."""
    out = []
    if spread is not None and spread > MAX_SPREAD:
        out.append(
            f"repeated runs spread by {100 * spread:.0f}% (> {100 * MAX_SPREAD:.0f}%): "
            "other work shared the cores"
        )
    if load is not None and load > MAX_LOAD_PER_CPU * cpus:
        out.append(
            f"load average {load:.2f} on {cpus} CPUs before measuring: other processes were "
            "running; measure again on a quiet machine"
        )
    return out


def best_isa(flags: set[str] | None = None) -> str:
    """``"avx512f"`` if available, else ``"avx2"``; raises if the CPU has neither FMA flavour."""
    flags = cpu_flags() if flags is None else flags
    if "avx512f" in flags:
        return "avx512f"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    raise ConvtuneError("peak: this CPU has neither AVX-512 nor AVX2+FMA")


def _loop(source: str, flags: list[str], prefix: str, symbol: str) -> Callable[[int], float]:
    """The ``float symbol(int64_t iters)`` loop of ``source`` compiled with ``flags``."""
    fn = getattr(compile_c(source, flags, prefix), symbol)
    fn.argtypes = [ctypes.c_int64]
    fn.restype = ctypes.c_float
    return fn


def _calibrated_iters(fn: Callable[[int], float], seconds: float) -> int:
    """Iterations of ``fn`` that take about ``seconds`` on one thread (at least a million),
    after a first call that pages the code in and wakes the core from idle clocks."""
    fn(10_000)
    probe_iters = 1_000_000
    probe = min(_run_parallel(fn, probe_iters, 1) for _ in range(3))
    return max(probe_iters, int(probe_iters * seconds / probe))


@functools.cache
def _kernel(isa: str) -> Callable[[int], float]:
    flags, defines = _ISAS[isa]
    source = defines + _KERNEL_C.replace("__NACC__", str(ACCUMULATORS))
    return _loop(source, flags, "peak", "fma_loop")


def _flops_per_iter(isa: str) -> int:
    return ACCUMULATORS * _LANES[isa] * 2


def _run_parallel(fn: Callable[[int], object], iters: int, threads: int) -> float:
    """Wall seconds for ``threads`` concurrent calls of ``fn(iters)``, timed from a common start."""
    return _run_all([lambda: fn(iters)] * threads)


def _run_all(calls: Sequence[Callable[[], object]]) -> float:
    """Wall seconds for running every call on its own thread, timed from a common start."""
    barrier = threading.Barrier(len(calls) + 1)

    def work(call: Callable[[], object]) -> None:
        barrier.wait()
        call()

    workers = [threading.Thread(target=work, args=(call,)) for call in calls]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    return time.perf_counter() - start


def measure_peak(
    threads: int, *, isa: str | None = None, repeats: int = 5, seconds: float = 0.2
) -> PeakResult:
    """Best of ``repeats`` runs of ~``seconds`` each, on one thread then on ``threads`` threads.

    ``gflops_all`` is the aggregate rate of ``threads`` threads running at once (so it reflects
    how many physical cores and how much turbo headroom are really there). ``isa`` forces
    ``"avx512f"`` or ``"avx2"`` (default: the widest the CPU has). Zen 4 double-pumps 512-bit FMAs,
    so both give the same figure there; Zen 5 and Intel server cores double it with AVX-512.
    """
    if threads < 1:
        raise ConvtuneError(f"peak: threads must be >= 1, got {threads}")
    if isa is None:
        isa = best_isa()
    elif isa not in _ISAS:
        raise ConvtuneError(f"peak: unknown isa '{isa}', expected one of {sorted(_ISAS)}")
    elif isa == "avx512f" and "avx512f" not in cpu_flags():
        raise ConvtuneError("peak: this CPU has no AVX-512")
    load = load_average()
    fn = _kernel(isa)
    iters = _calibrated_iters(fn, seconds)
    work = _flops_per_iter(isa) * iters

    def times(n: int) -> list[float]:
        return [_run_parallel(fn, iters, n) for _ in range(repeats)]

    one_times = times(1)
    many_times = times(threads) if threads > 1 else one_times
    one = work / min(one_times) / 1e9
    many = work * threads / min(many_times) / 1e9
    spread = 1.0 - min(many_times) / max(many_times)
    method = f"{isa} FMA microbenchmark, {ACCUMULATORS} accumulators, gcc -O2, best of {repeats}"
    return PeakResult(
        gflops_per_core=one,
        gflops_all=many,
        threads=threads,
        method=method,
        spread=spread,
        load=load,
        warnings=tuple(quietness_warnings(spread, load, os.cpu_count() or threads)),
    )


# ---------------------------------------------------------------------------------------------
# memory bandwidth: the roofline's slope
# ---------------------------------------------------------------------------------------------

_TRIAD_C = """
#include <stdint.h>
void triad(float *restrict a, const float *restrict b, const float *restrict c,
           int64_t n, float s, int reps) {
    for (int r = 0; r < reps; ++r)
        for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}
"""
#: Elements per array: 3 × 64 MiB, far beyond any L3 of the machines this runs on.
TRIAD_ELEMENTS = 16 * 1024 * 1024


@functools.cache
def _triad() -> Callable[..., None]:
    fn = compile_c(_TRIAD_C, ["-march=native"], "bandwidth").triad
    ptr = ctypes.POINTER(ctypes.c_float)
    fn.argtypes = [ptr, ptr, ptr, ctypes.c_int64, ctypes.c_float, ctypes.c_int]
    fn.restype = None
    return fn


def measure_bandwidth(threads: int, *, repeats: int = 5, elements: int = TRIAD_ELEMENTS) -> float:
    """STREAM-triad memory bandwidth in GB/s (``a = b + s·c``, 12 bytes per element as STREAM
    counts), ``threads`` threads on disjoint slices, best of ``repeats``."""
    import numpy as np

    if threads < 1:
        raise ConvtuneError(f"bandwidth: threads must be >= 1, got {threads}")
    fn = _triad()
    arrays = [np.full(elements, v, dtype=np.float32) for v in (0.0, 1.0, 2.0)]
    ptr = ctypes.POINTER(ctypes.c_float)
    step = -(-elements // threads)
    calls = []
    for start in range(0, elements, step):
        n = min(step, elements - start)
        a, b, c = (x[start:].ctypes.data_as(ptr) for x in arrays)
        calls.append(functools.partial(fn, a, b, c, n, 0.5, 1))
    _run_all(calls)  # fault the pages in
    best = min(_run_all(calls) for _ in range(repeats))
    return 12.0 * elements / best / 1e9


@functools.cache
def _dot_kernel(precision: str) -> Callable[[int], float]:
    dot = next(d for d in DOT_PEAKS if d.precision == precision)
    source = dot.defines + _DOT_KERNEL_C.replace("__NACC__", str(ACCUMULATORS))
    return _loop(source, list(dot.gcc_flags), f"peak-{precision}", "dot_loop")


def measure_dot_peaks(
    threads: int, *, repeats: int = 5, seconds: float = 0.2, flags: set[str] | None = None
) -> dict[str, float]:
    """Precision → G operations/s of each of :data:`DOT_PEAKS` the CPU has (``flags``:
    /proc/cpuinfo's), ``threads`` threads at once, best of ``repeats`` runs of ~``seconds``."""
    flags = cpu_flags() if flags is None else flags
    found = {}
    for dot in DOT_PEAKS:
        if dot.flag not in flags:
            continue
        fn = _dot_kernel(dot.precision)
        iters = _calibrated_iters(fn, seconds)
        best = min(_run_parallel(fn, iters, threads) for _ in range(repeats))
        found[dot.precision] = ACCUMULATORS * dot.ops * iters * threads / best / 1e9
    return found


def measure_machine(threads: int, *, repeats: int = 5, seconds: float = 0.2) -> PeakResult:
    """The FMA peak, the dot-product peaks and the triad bandwidth together: what ``convtune
    peak`` stores."""
    peak = measure_peak(threads, repeats=repeats, seconds=seconds)
    dots = measure_dot_peaks(threads, repeats=repeats, seconds=seconds)
    bandwidth = measure_bandwidth(threads, repeats=repeats)
    return PeakResult(**{**peak.__dict__, "bandwidth_gbs": bandwidth, "dot_peaks": dots})
