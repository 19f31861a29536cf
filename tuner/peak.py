"""Machine fp32 peak from a generated FMA microbenchmark (the roofline every GFLOP/s is judged by).

A C kernel keeps :data:`ACCUMULATORS` independent vector accumulators busy with fused
multiply-adds (enough to hide the FMA latency on every x86 core since Haswell), is compiled with the
system gcc into a temporary shared library and called through ctypes, which releases the GIL, so
Python threads run it truly in parallel. AVX-512 is used when /proc/cpuinfo lists ``avx512f``,
AVX2 otherwise.
"""

from __future__ import annotations

import ctypes
import functools
import pathlib
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from convtune.tuner.errors import ConvtuneError

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
class PeakResult:
    """Best measured fp32 GFLOP/s on one core and on ``threads`` cores together."""

    gflops_per_core: float
    gflops_all: float
    threads: int
    method: str

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def cpu_flags() -> set[str]:
    """The ``flags`` of the first processor in /proc/cpuinfo (empty set if unreadable)."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def best_isa(flags: set[str] | None = None) -> str:
    """``"avx512f"`` if available, else ``"avx2"``; raises if the CPU has neither FMA flavour."""
    flags = cpu_flags() if flags is None else flags
    if "avx512f" in flags:
        return "avx512f"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    raise ConvtuneError("peak: this CPU has neither AVX-512 nor AVX2+FMA")


@functools.cache
def _kernel(isa: str) -> Callable[[int], float]:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise ConvtuneError("peak: no C compiler (gcc) found on PATH")
    flags, defines = _ISAS[isa]
    with tempfile.TemporaryDirectory(prefix="convtune-peak-") as tmp:
        src, lib = pathlib.Path(tmp, "fma.c"), pathlib.Path(tmp, "libfma.so")
        src.write_text(defines + _KERNEL_C.replace("__NACC__", str(ACCUMULATORS)))
        cmd = [gcc, "-O2", *flags, "-shared", "-fPIC", "-o", str(lib), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ConvtuneError(f"peak: gcc failed: {proc.stderr.strip().splitlines()[-1]}")
        # Once loaded the mapping survives the file's removal with the temp dir.
        fn = ctypes.CDLL(str(lib)).fma_loop
    fn.argtypes = [ctypes.c_int64]
    fn.restype = ctypes.c_float
    return fn


def _flops_per_iter(isa: str) -> int:
    return ACCUMULATORS * _LANES[isa] * 2


def _run_parallel(fn: Callable[[int], float], iters: int, threads: int) -> float:
    """Wall seconds for ``threads`` concurrent calls of ``fn(iters)``, timed from a common start."""
    barrier = threading.Barrier(threads + 1)

    def work() -> None:
        barrier.wait()
        fn(iters)

    workers = [threading.Thread(target=work) for _ in range(threads)]
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
    fn = _kernel(isa)
    fn(10_000)  # page in, wake the core from idle clocks
    probe_iters = 1_000_000
    probe = min(_run_parallel(fn, probe_iters, 1) for _ in range(3))
    iters = max(probe_iters, int(probe_iters * seconds / probe))
    work = _flops_per_iter(isa) * iters

    def best(n: int) -> float:
        return min(_run_parallel(fn, iters, n) for _ in range(repeats))

    one = work / best(1) / 1e9
    many = work * threads / best(threads) / 1e9 if threads > 1 else one
    method = f"{isa} FMA microbenchmark, {ACCUMULATORS} accumulators, gcc -O2, best of {repeats}"
    return PeakResult(gflops_per_core=one, gflops_all=many, threads=threads, method=method)
