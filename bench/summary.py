"""Corpus summary: one table over several ``bench/run.py`` reports, the way issue #31 judges them.

For each model: our isolated time, each peer's, the ratio to the best peer, and the three layers
with the largest gap to onnxruntime's node (``peer_check.widest_gaps``, as the tune job's own
check names them); below the table, the geometric mean of the ratios. Kernels onnxruntime has no
node for (layout transforms, elementwise ops it fuses into its convs) compete there as one row
against its unattributed nodes; their own total is a column, since on small detectors it is where
a win or a loss can hide.

    python bench/summary.py bench/reports/2026-12-03-*.json --out bench/reports/corpus.md
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from convtune.tuner.peer_check import LayerGap, widest_gaps
from convtune.tuner.profile import ORT_OTHER, OUTSIDE_KERNELS
from convtune.tuner.tables import fmt

#: Peers in the order of the table's columns.
PEERS = ("onnxruntime", "openvino")


def describe(gap: LayerGap) -> str:
    return f"{gap.shape}: {gap.ms:.3f} vs {gap.ort_ms:.3f} ms"


def unmatched_ms(profile: Iterable[dict[str, Any]]) -> float:
    """Our time in kernels with no onnxruntime node to compare with (transforms, fused
    elementwise, resize, pooling)."""
    return sum(
        row["ms"]
        for row in profile
        if row.get("ms") is not None
        and row.get("ort_ms") is None
        and row["layer"] not in (ORT_OTHER, OUTSIDE_KERNELS)
    )


def gaps_markdown(profile: Sequence[dict[str, Any]]) -> list[str]:
    """The per-model report's "largest gaps" section."""
    gaps = widest_gaps(list(profile))
    lines = ["## Largest gaps to onnxruntime's nodes", ""]
    if not gaps:
        return [*lines, "No layer is slower than its onnxruntime node.", ""]
    lines += [f"{i}. `{g.layer}` {describe(g)} (+{g.gap_ms:.3f} ms)" for i, g in enumerate(gaps, 1)]
    return [*lines, f"\nIn kernels with no onnxruntime node: {unmatched_ms(profile):.3f} ms.", ""]


@dataclass(frozen=True)
class ModelLine:
    """One row of the corpus table, read from a report JSON."""

    model: str
    ours_ms: float
    peer_ms: dict[str, float]
    best_peer: str
    gaps: list[LayerGap]
    unmatched_ms: float
    spread: float

    @property
    def vs_best_peer(self) -> float:
        return self.ours_ms / self.peer_ms[self.best_peer]

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> ModelLine:
        bench = report.get("bench_isolated")
        if not bench:
            raise ValueError(f"{report['model']}: the report has no isolated bench")
        results = bench["results"]
        peers = {p: results[p]["median_ms"] for p in PEERS if p in results}
        return cls(
            model=report["model"],
            ours_ms=results["tuned"]["median_ms"],
            peer_ms=peers,
            best_peer=min(peers, key=peers.__getitem__),
            gaps=widest_gaps(report["profile"]),
            unmatched_ms=unmatched_ms(report["profile"]),
            spread=max(r.get("spread", 0.0) for r in results.values()),
        )


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary_markdown(reports: Sequence[dict[str, Any]], title: str) -> list[str]:
    """The corpus table and its geometric mean; a model benched under load (a contender's rounds
    spread by more than 20%) is marked, since its ratio is not a speed claim."""
    lines_ = [ModelLine.from_report(r) for r in reports]
    machine = reports[0]["machine"]
    md = [
        f"# {title}",
        "",
        f"Machine: {machine['cpu']} ({machine.get('llvm_cpu')}), {machine['logical_cpus']} "
        "logical CPUs. Isolated best-configuration bench (median of round medians), fp32, "
        "batch 1.",
        "",
        "| model | convtune ms | onnxruntime ms | OpenVINO ms | vs best peer "
        "| no-node kernels ms | largest gaps to onnxruntime's nodes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for line in lines_:
        flag = " (disturbed)" if line.spread > 0.2 else ""
        gaps = "; ".join(f"{describe(g)} (+{g.gap_ms:.3f})" for g in line.gaps) or "none"
        md.append(
            f"| {line.model}{flag} | {line.ours_ms:.2f} | "
            + " | ".join(fmt(line.peer_ms.get(p), ".2f") for p in PEERS)
            + f" | {line.vs_best_peer:.2f}× {line.best_peer} | {line.unmatched_ms:.2f} | {gaps} |"
        )
    ratios = [line.vs_best_peer for line in lines_]
    md += [
        "",
        f"Geometric mean over {len(ratios)} model(s): **{geometric_mean(ratios):.2f}× the best "
        f"peer**; at or under 1.0×: {sum(r <= 1.0 for r in ratios)} of {len(ratios)}.",
        "",
    ]
    return md


def main(argv: Sequence[str] | None = None) -> pathlib.Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("reports", nargs="+", type=pathlib.Path, help="bench/run.py JSONs")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="the .md to write")
    parser.add_argument("--title", default="Real-export corpus against the peers")
    args = parser.parse_args(argv)
    reports = [json.loads(p.read_text()) for p in args.reports]
    args.out.write_text("\n".join(summary_markdown(reports, args.title)))
    print(args.out.read_text())
    return args.out


if __name__ == "__main__":
    main()
