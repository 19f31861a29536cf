"""The job's last step: the verified artifact timed against onnxruntime, and the gap explained.

A job that verifies can still be slower than the runtime its user already has: ResNet-50 ending
in Softmax verified and printed ``ok`` while it ran 5.6× slower than onnxruntime, its Softmax
kernel alone 183 ms (issue 30). So every job ends by timing the artifact beside onnxruntime on
the job's threads (interleaved in one process, onnxruntime not spinning: the same conditions for
both, ``bench.bench_model``), and when it is slower, profiles both per layer
(``profile.profile_model``) and names the layers that account for the gap. Its one line ends the
CLI's output and is stored in the manifest and as the job's ``compared`` event.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convtune.tuner.bench import ORT, TUNED, bench_model
from convtune.tuner.errors import error_line
from convtune.tuner.options import Layout
from convtune.tuner.profile import ORT_OTHER, OUTSIDE_KERNELS, profile_model

if TYPE_CHECKING:
    from tvm.target import Target

    from convtune.tuner.graph.ingest import IngestedModel

#: Interleaved rounds of the comparison (each at least ``bench_model``'s 50 ms).
ROUNDS = 10
#: Layers named when the artifact is slower.
GAP_LAYERS = 3
#: The row that takes every non-anchor kernel and the time outside kernels, against
#: onnxruntime's nodes that no layer row took (its Softmax, pools, reshapes...).
REST = "(other ops and time outside kernels)"


@dataclass(frozen=True)
class LayerGap:
    layer: str
    op: str
    shape: str
    ms: float
    ort_ms: float

    @property
    def gap_ms(self) -> float:
        return self.ms - self.ort_ms


@dataclass(frozen=True)
class PeerCheck:
    """The artifact's median time against onnxruntime's, and when slower the widest gaps."""

    threads: int
    ms: float | None = None
    ort_ms: float | None = None
    gaps: list[LayerGap] = field(default_factory=list)
    #: Why the comparison could not be made (one line); the artifact stands.
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        return self.ms / self.ort_ms if self.ms and self.ort_ms else None

    def line(self) -> str:
        if self.ratio is None:
            return f"not timed against onnxruntime: {self.error or 'no figure'}"
        text = (
            f"{self.ms:.3f} ms against onnxruntime's {self.ort_ms:.3f} ms on {self.threads} "
            f"thread(s): {self.ratio:.2f}×"
        )
        if self.gaps:
            text += "; the gap is in " + ", ".join(
                f"{g.layer} ({g.ms:.3f} vs {g.ort_ms:.3f} ms)" for g in self.gaps
            )
        return text

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.update(ratio=self.ratio, message=self.line())
        return doc


def widest_gaps(rows: list[dict[str, Any]], limit: int = GAP_LAYERS) -> list[LayerGap]:
    """The ``limit`` profile rows (``profile_model``'s) where ours exceeds onnxruntime's most,
    only those slower than onnxruntime's; rows without an onnxruntime figure are summed into
    :data:`REST` against onnxruntime's unattributed nodes."""
    gaps: list[LayerGap] = []
    rest_ms, rest_ort = 0.0, 0.0
    for row in rows:
        if row["layer"] == ORT_OTHER:
            rest_ort += row["ort_ms"] or 0.0
        elif row["ort_ms"] is None or row["layer"] == OUTSIDE_KERNELS:
            rest_ms += row["ms"] or 0.0
        elif row["ms"] is not None:
            gaps.append(LayerGap(row["layer"], row["op"], row["shape"], row["ms"], row["ort_ms"]))
    gaps.append(LayerGap(REST, "", "", rest_ms, rest_ort))
    slower = [g for g in gaps if g.gap_ms > 0]
    return sorted(slower, key=lambda g: -g.gap_ms)[:limit]


def check_against_onnxruntime(
    ingested: IngestedModel,
    so_path: Path,
    *,
    target: Target,
    threads: int,
    layout: Layout,
    winograd: dict[int, int],
    rounds: int = ROUNDS,
    precision: str = "fp32",
) -> PeerCheck:
    """Time ``so_path`` beside onnxruntime; profile both when it is slower. Never raises: a
    failure to measure is the check's ``error``, since the verified artifact stands."""
    try:
        doc = bench_model(
            ingested,
            threads=threads,
            peak_gflops=0.0,
            peak_source="not needed",
            artifact=so_path,
            rounds=rounds,
            openvino=False,
        ).as_dict()
        ms, ort_ms = doc["results"][TUNED]["median_ms"], doc["results"][ORT]["median_ms"]
    except Exception as exc:
        return PeerCheck(threads, error=error_line(exc))
    if ms <= ort_ms:
        return PeerCheck(threads, ms, ort_ms)
    try:
        rows = profile_model(
            ingested,
            so_path,
            target=target,
            threads=threads,
            peak_gflops=0.0,
            layout=layout,
            winograd=winograd,
            precision=precision,
        )
    except Exception as exc:
        return PeerCheck(threads, ms, ort_ms, error=f"profile failed: {error_line(exc)}")
    return PeerCheck(threads, ms, ort_ms, widest_gaps(rows))
