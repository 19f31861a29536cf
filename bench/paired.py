"""Paired A/B of two tuned artifacts of one model: which of two builds runs faster here.

An isolated bench (``convtune bench --isolated``) times each contender in its own process, round
after round, and on a machine shared with other tenants its rounds drift by more than the
difference between two builds of one model (Emerald Rapids VM, 2026-12-01: the same artifact's
round medians ran from 30 to 39 ms within ten minutes). Here each artifact stays loaded in its own
process for the whole run, and the two take turns running short batches; every batch of one is
compared with the adjacent batch of the other, so drift slower than a batch cancels out in the
ratio. The idle process waits on a pipe, and a pause before each batch lets its thread pool go
to sleep, so each batch has the cores to itself.

    .venv/bin/python -m bench.paired base/model.so new/model.so --pairs 40

Prints each artifact's median batch time and the median (and quartiles) of the per-pair ratio
``new / base``: below 1, the second artifact is faster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from convtune.tuner.bench import TUNED, contender_env
from convtune.tuner.graph.ingest import TensorSpec
from convtune.tuner.measure.runtime import Artifact, load_manifest, set_threads
from convtune.tuner.measure.verify import random_feeds

#: Seconds between batches: longer than TVM's thread pool spins before it sleeps.
PAUSE_S = 0.3
WARMUP_RUNS = 5


def serve(so_path: str, threads: int) -> None:
    """Child: load ``so_path``, then for each line ``n`` on stdin print the median of n runs."""
    set_threads(threads)
    artifact = Artifact.load(so_path)
    inputs = tuple(
        TensorSpec(spec["name"], tuple(spec["shape"]), spec["dtype"])
        for spec in load_manifest(Path(so_path))["inputs"]
    )
    feeds = random_feeds(inputs)
    run = artifact.runner(feeds)
    for _ in range(WARMUP_RUNS):
        run()
    print("ready", flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(int(line)):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        print(json.dumps(statistics.median(times)), flush=True)


@dataclass
class Contender:
    path: Path
    process: subprocess.Popen[str]
    batch_ms: list[float]

    def batch(self, runs: int) -> None:
        """Pause, then time one batch of ``runs`` runs; its median lands in ``batch_ms``."""
        assert self.process.stdin is not None and self.process.stdout is not None
        time.sleep(PAUSE_S)
        self.process.stdin.write(f"{runs}\n")
        self.process.stdin.flush()
        self.batch_ms.append(float(self.process.stdout.readline()) * 1e3)


def start(path: Path, threads: int) -> Contender:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.paired", "--serve", str(path), "--threads", str(threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=contender_env(TUNED, threads),
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise SystemExit(f"{path}: the artifact did not load")
    return Contender(path, process, [])


def compare(base: Path, new: Path, pairs: int, runs: int, threads: int) -> list[float]:
    """Per-pair ratios new / base; the order within a pair alternates."""
    a, b = start(base, threads), start(new, threads)
    ratios = []
    try:
        for i in range(pairs):
            first, second = (a, b) if i % 2 == 0 else (b, a)
            first.batch(runs)
            second.batch(runs)
            ratios.append(b.batch_ms[-1] / a.batch_ms[-1])
    finally:
        for contender in (a, b):
            contender.process.kill()
    for contender in (a, b):
        print(f"{contender.path}: median batch {statistics.median(contender.batch_ms):.2f} ms")
    q1, median, q3 = np.percentile(ratios, [25, 50, 75])
    faster = sum(r < 1 for r in ratios)
    print(
        f"new / base: median {median:.3f} (quartiles {q1:.3f}-{q3:.3f}); "
        f"new faster in {faster} of {len(ratios)} pairs"
    )
    return ratios


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="*", type=Path, help="base/model.so new/model.so")
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--runs", type=int, default=10, help="Runs per batch.")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.threads)
        return
    if len(args.artifacts) != 2:
        parser.error("give two artifacts: base and new")
    base, new = args.artifacts
    compare(base, new, pairs=args.pairs, runs=args.runs, threads=args.threads)


if __name__ == "__main__":
    main()
