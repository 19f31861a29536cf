"""The FMA microbenchmark against an independent fp32 workload: numpy's BLAS sgemm."""

import json
import os
import subprocess
import sys

import pytest
import typer
from sqlalchemy import select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from convtune.db.models import TargetRow
from convtune.db.ms_database import target_key
from convtune.db.session import make_engine
from convtune.service.cli_perf import perf_app
from convtune.tuner.cpu_flags import cpu_flags
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.peak import (
    DOT_PEAKS,
    TRIAD_ELEMENTS,
    PeakResult,
    best_isa,
    measure_bandwidth,
    measure_dot_peaks,
    measure_peak,
    quietness_warnings,
)
from convtune.tuner.measure.results import (
    dot_peaks_for_threads,
    peak_for_threads,
    store_peak,
    stored_peak,
)
from convtune.tuner.target import make_target

_NUMPY_SGEMM = """
import time, numpy as np
rng = np.random.default_rng(0)
a = rng.standard_normal((1024, 1024), dtype=np.float32)
b = rng.standard_normal((1024, 1024), dtype=np.float32)
a @ b
best = float("inf")
for _ in range(10):
    start = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - start)
print(2 * 1024**3 / best / 1e9)
"""


def _numpy_sgemm_gflops_one_thread() -> float:
    """numpy's sgemm GFLOP/s with OpenBLAS pinned to one thread (set before numpy loads)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _NUMPY_SGEMM], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def test_peak_bounds_numpy_sgemm():
    """What can honestly be asserted about a BLAS we do not control, on one core each.

    One thread on both sides: a multi-threaded BLAS collapses when other processes share the
    cores, a single-threaded one only loses time slices, which best-of-N filters out.
    Upper: no fp32 code beats the FMA peak. Lower: OpenBLAS may pick AVX2 kernels even on
    AVX-512 CPUs (it does on Zen 5, whose 512-bit FMA doubles the AVX2 rate), so numpy is only
    bound to reach half of the AVX2 peak - any BLAS worth the name does.
    """
    best, avx2, numpy_gflops = 0.0, 0.0, 0.0
    # Interleaved rounds, best of each: other processes on a shared machine only slow a run.
    for _ in range(3):
        best = max(best, measure_peak(1, repeats=3, seconds=0.05).gflops_per_core)
        avx2 = max(avx2, measure_peak(1, isa="avx2", repeats=3, seconds=0.05).gflops_per_core)
        numpy_gflops = max(numpy_gflops, _numpy_sgemm_gflops_one_thread())
    # A peak sample that lost its time slices to the other test worker reads low (45.9 against
    # numpy's 78.2 on a Zen 3 VM, whose peak is 90): more samples, since contention only ever
    # lowers a figure, until the peak is above numpy's or ten more have not lifted it.
    for _ in range(10):
        if numpy_gflops <= best * 1.1:
            break
        best = max(best, measure_peak(1, repeats=3, seconds=0.2).gflops_per_core)
    assert numpy_gflops <= best * 1.1, (numpy_gflops, best)
    assert numpy_gflops >= avx2 / 2, (numpy_gflops, avx2)
    assert best >= 0.9 * avx2  # wider vectors are never slower


def test_all_threads_figure():
    cores = os.cpu_count() or 1
    result = measure_peak(cores, repeats=3, seconds=0.05)
    assert result.threads == cores
    assert best_isa() in result.method
    # Never more than linear scaling. Contention from other processes only lowers a figure, so
    # the per-core rate is the best of two measurements taken around the all-threads one.
    per_core = max(result.gflops_per_core, measure_peak(1, repeats=3, seconds=0.05).gflops_all)
    assert result.gflops_all <= 1.15 * cores * per_core


@pytest.mark.skipif("avx512_vnni" not in cpu_flags(), reason="the host CPU has no AVX-512 VNNI")
def test_the_int8_dot_peak_beats_the_fp32_fma_peak():
    """``vpdpbusd`` does 64 multiply-adds where an FMA does 16: on every core that has it at
    least one a cycle, its roof is above the FMA's (4× on Zen 4, 2026-12-06; 2× on Intel cores
    with two FMA units and VNNI on one). Best of interleaved rounds, one thread each."""
    fma, int8 = 0.0, 0.0
    for _ in range(3):
        fma = max(fma, measure_peak(1, repeats=3, seconds=0.05).gflops_per_core)
        int8 = max(int8, measure_dot_peaks(1, repeats=3, seconds=0.05)["int8"])
    assert 1.5 * fma < int8 < 4.5 * fma, (fma, int8)


def test_dot_peaks_follow_the_cpu_flags():
    assert measure_dot_peaks(1, flags=set()) == {}
    flags = cpu_flags()
    found = measure_dot_peaks(1, repeats=1, seconds=0.01, flags=flags)
    assert set(found) == {d.precision for d in DOT_PEAKS if d.flag in flags}
    assert all(rate > 1.0 for rate in found.values())


def test_dot_peaks_are_stored_and_scaled_to_threads(db_engine):
    peak = PeakResult(
        gflops_per_core=100.0,
        gflops_all=190.0,
        threads=2,
        method="m",
        dot_peaks={"int8": 760.0, "bf16": 380.0},
    )
    store_peak(db_engine, make_target(None), peak)
    stored = stored_peak(db_engine, make_target(None))
    assert stored is not None and stored.dot_peaks == {"int8": 760.0, "bf16": 380.0}
    assert dot_peaks_for_threads(stored, 2) == {"int8": 760.0, "bf16": 380.0}
    assert dot_peaks_for_threads(stored, 1) == {"int8": 380.0, "bf16": 190.0}
    assert dot_peaks_for_threads(stored, 4) == {"int8": 760.0, "bf16": 380.0}


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


def test_peak_cli_json_and_table(tmp_path):
    db = ["--db", f"sqlite:///{tmp_path / 'c.db'}"]
    runner = CliRunner()
    result = runner.invoke(_cli(), ["peak", "--threads", "1", "--json", *db])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # warnings about load go to stderr
    assert data["threads"] == 1
    assert data["gflops_all"] == data["gflops_per_core"] > 1.0
    table = runner.invoke(_cli(), ["peak", "--threads", "1", *db])
    assert table.exit_code == 0
    assert "GFLOP/s, 1 core" in table.output


def test_peak_cli_user_error_is_one_line():
    result = CliRunner().invoke(_cli(), ["peak", "--threads", "-1"])
    assert result.exit_code == 2
    assert "threads must be >= 1" in result.output
    assert "Traceback" not in result.output


def test_peak_cli_stores_on_this_hosts_target(db_url):
    """The measured peak lands on the host target's row, the one tuning records hang off."""
    runner = CliRunner()
    first = runner.invoke(_cli(), ["peak", "--threads", "2", "--json", "--db", db_url])
    assert first.exit_code == 0, first.output
    engine = make_engine(db_url)
    try:
        stored = stored_peak(engine, make_target(None))
        measured = json.loads(first.stdout)
        assert stored is not None
        assert stored.gflops_all == pytest.approx(measured["gflops_all"])
        assert stored.gflops_per_core == pytest.approx(measured["gflops_per_core"])
        assert stored.threads == 2
        assert stored.spread == pytest.approx(measured["spread"]) and 0 <= stored.spread < 1
        assert stored.bandwidth_gbs == pytest.approx(measured["bandwidth_gbs"])
        assert stored.bandwidth_gbs > 0
        assert stored.dot_peaks == pytest.approx(measured["dot_peaks"])
        assert set(stored.dot_peaks) == {d.precision for d in DOT_PEAKS if d.flag in cpu_flags()}
        # Measuring again updates the same row rather than adding a target.
        again = runner.invoke(_cli(), ["peak", "--threads", "1", "--json", "--db", db_url])
        assert again.exit_code == 0, again.output
        with Session(engine) as session:
            rows = session.scalars(select(TargetRow)).all()
        assert len(rows) == 1
        assert rows[0].key == target_key(make_target(None))
        assert rows[0].peak_threads == 1 and rows[0].peak_measured_at is not None
    finally:
        engine.dispose()


def test_peak_for_threads():
    peak = PeakResult(gflops_per_core=100.0, gflops_all=180.0, threads=2, method="m")
    assert peak_for_threads(peak, 1) == 100.0
    assert peak_for_threads(peak, 2) == 180.0
    assert peak_for_threads(peak, 8) == 180.0  # more threads than cores add no FMA units


def test_quietness_warnings():
    assert quietness_warnings(0.01, 0.1, 2) == []
    [spread] = quietness_warnings(0.2, 0.1, 2)
    assert "spread by 20%" in spread
    [load] = quietness_warnings(0.01, 3.5, 2)
    assert "load average 3.50 on 2 CPUs" in load
    assert len(quietness_warnings(None, None, 2)) == 0


def test_measured_peak_reports_its_spread_and_load():
    result = measure_peak(1, repeats=3, seconds=0.05)
    assert result.spread is not None and 0.0 <= result.spread < 1.0
    assert result.load == pytest.approx(os.getloadavg()[0], abs=5.0)
    assert list(result.warnings) == quietness_warnings(result.spread, result.load, os.cpu_count())


def test_triad_bandwidth_against_numpy_copy():
    """The triad counts 12 bytes per element; a numpy copy of a 64 MiB array (8 bytes per element,
    one thread) bounds it from below. Not by half: the triad's stores also read their line first
    (16 bytes move for the 12 it counts) where the copy may stream past the cache, and on a Zen 5
    the copy measured 46 GB/s against the triad's 22.5 (0.49×). A unit or loop-count error would
    be off by far more than 3×."""
    import time

    import numpy as np

    triad = measure_bandwidth(1, repeats=3)
    src = np.ones(TRIAD_ELEMENTS, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    copy_gbs = 8.0 * TRIAD_ELEMENTS / best / 1e9
    assert copy_gbs / 3 <= triad <= 4.0 * copy_gbs, (triad, copy_gbs)
