"""The FMA microbenchmark against an independent fp32 workload: numpy's BLAS sgemm."""

import json
import os
import time

import numpy as np
import pytest
import typer
from convtune.service.cli_perf import perf_app
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.peak import best_isa, measure_peak
from typer.testing import CliRunner


def _numpy_sgemm_gflops(n: int = 1024, repeats: int = 10) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm up OpenBLAS's thread pool
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def test_peak_bounds_numpy_sgemm():
    """What can honestly be asserted about a BLAS we do not control.

    Upper: no fp32 code on these cores beats the FMA peak (numpy may use fewer threads than all
    cores, never more). Lower: OpenBLAS may pick AVX2 kernels even on AVX-512 CPUs (it does on
    Zen 5, whose 512-bit FMA doubles the AVX2 rate), so numpy is only bound to reach half of the
    *single-core AVX2* peak - any BLAS worth the name does, with one thread or more.
    """
    cores = os.cpu_count() or 1
    # Interleaved, best of each: other processes on this shared machine only ever slow a run.
    numpy_runs = [_numpy_sgemm_gflops()]
    best = measure_peak(cores, repeats=3, seconds=0.1)
    numpy_runs.append(_numpy_sgemm_gflops())
    avx2 = measure_peak(1, isa="avx2", repeats=3, seconds=0.1)
    numpy_runs.append(_numpy_sgemm_gflops())
    numpy_gflops = max(numpy_runs)
    assert numpy_gflops <= best.gflops_all * 1.1, (numpy_gflops, best)
    assert numpy_gflops >= avx2.gflops_per_core / 2, (numpy_gflops, avx2)
    # Wider vectors are never slower, and several threads never lose to one by much.
    assert best.gflops_per_core >= 0.9 * avx2.gflops_per_core
    assert best.gflops_all >= 0.9 * best.gflops_per_core
    assert best.gflops_all <= 1.15 * cores * best.gflops_per_core
    assert best.threads == cores
    assert best_isa() in best.method


def test_fallback_selection_and_user_errors():
    assert best_isa({"avx2", "fma", "sse2"}) == "avx2"
    assert best_isa({"avx512f", "avx2", "fma"}) == "avx512f"
    with pytest.raises(ConvtuneError, match="neither AVX-512 nor AVX2"):
        best_isa({"sse2"})
    with pytest.raises(ConvtuneError, match="threads must be >= 1"):
        measure_peak(0)
    with pytest.raises(ConvtuneError, match="unknown isa 'neon'"):
        measure_peak(1, isa="neon")


def _cli() -> typer.Typer:
    """perf_app mounted the way the main CLI mounts it (merged into the top level)."""
    app = typer.Typer()

    @app.command()
    def version() -> None:  # a second command, so "peak" must be named as in convtune's CLI
        typer.echo("0")

    app.add_typer(perf_app)
    return app


def test_peak_cli_json_and_table():
    runner = CliRunner()
    result = runner.invoke(_cli(), ["peak", "--threads", "1", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["threads"] == 1
    assert data["gflops_all"] == data["gflops_per_core"] > 1.0
    table = runner.invoke(_cli(), ["peak", "--threads", "1"])
    assert table.exit_code == 0
    assert "GFLOP/s, 1 core" in table.output


def test_peak_cli_user_error_is_one_line():
    result = CliRunner().invoke(_cli(), ["peak", "--threads", "-1"])
    assert result.exit_code == 2
    assert "threads must be >= 1" in result.output
    assert "Traceback" not in result.output
