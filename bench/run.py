"""Baseline benchmark (``make bench``): machine peak and onnxruntime on the zoo, side by side.

For each zoo model, onnxruntime with 1 and with all threads runs interleaved; the report gives the
median, the spread and the fraction of the FMA peak reached (model GFLOP / time / peak). Written to
``bench/reports/baseline-<utc time>.json`` (gitignored) and printed as a table. Tuned TVM artifacts
join the interleaved set once the artifact format is fixed.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import sys

import numpy as np
import onnx
from rich.console import Console
from rich.table import Table

from convtune.tuner.bench import interleaved, ort_session
from convtune.tuner.flops import model_flops
from convtune.tuner.peak import measure_peak

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from bench.zoo import BUILDERS, INPUT_NAME, INPUT_SHAPE, zoo_model

REPORTS = pathlib.Path(__file__).resolve().parent / "reports"


def main(rounds: int = 15) -> dict:
    cores = os.cpu_count() or 1
    peak = measure_peak(cores)
    feeds = {INPUT_NAME: np.random.default_rng(0).standard_normal(INPUT_SHAPE, dtype=np.float32)}
    report: dict = {"peak": peak.as_dict(), "models": {}}
    table = Table(title=f"onnxruntime on the zoo (peak {peak.gflops_all:.0f} GFLOP/s, {cores} thr)")
    for col in ("model", "GFLOP", "threads", "median ms", "spread", "% of peak"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name in BUILDERS:
        data = zoo_model(name).read_bytes()
        gflop = model_flops(onnx.load_from_string(data)).gflops
        thread_counts = sorted({1, cores})
        sessions = {t: ort_session(data, t) for t in thread_counts}
        runners = {f"ort-{t}": (lambda s=s: s.run(None, feeds)) for t, s in sessions.items()}
        stats = interleaved(runners, warmup=3, rounds=rounds, min_round_s=0.05)
        report["models"][name] = {"gflop": gflop, **{k: v.as_dict() for k, v in stats.items()}}
        for t in thread_counts:
            s = stats[f"ort-{t}"]
            peak_t = peak.gflops_per_core if t == 1 else peak.gflops_all
            fraction = gflop / s.median / peak_t
            table.add_row(
                name, f"{gflop:.2f}", str(t), f"{s.median * 1e3:.2f}", f"{s.spread:.1%}",
                f"{fraction:.0%}",
            )  # fmt: skip
    Console().print(table)
    REPORTS.mkdir(exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = REPORTS / f"baseline-{stamp}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"report: {out}")
    return report


if __name__ == "__main__":
    main()
