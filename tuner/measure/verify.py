"""Verification against onnxruntime: an artifact that disagrees is never served.

Tolerance: ``|ours - ref| <= atol + rtol·|ref|``, ``rtol = 1e-4``, ``atol = 1e-4·max(1, max|ref|)``.
The absolute part scales with the output's magnitude because fp32 reductions summed in a different
order (tiling, vectorisation) differ by a few ULPs of the running sum, not of each output element.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from convtune.tuner.errors import VerificationError
from convtune.tuner.graph.ingest import IngestedModel, TensorSpec
from convtune.tuner.measure.reference import ort_session
from convtune.tuner.measure.runtime import Artifact

RTOL = 1e-4
ATOL = 1e-4


@dataclass(frozen=True)
class Verification:
    passed: bool
    max_abs_err: float
    max_rel_err: float
    rtol: float
    atol: float
    seed: int
    worst_output: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def random_feeds(inputs: tuple[TensorSpec, ...], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {spec.name: rng.standard_normal(spec.shape).astype(spec.dtype) for spec in inputs}


def reference_outputs(
    ingested: IngestedModel, feeds: dict[str, np.ndarray], threads: int
) -> list[np.ndarray]:
    session = ort_session(ingested.model.SerializeToString(), threads)
    return [np.asarray(x) for x in session.run(None, feeds)]


def compare(
    ours: Sequence[np.ndarray], reference: Sequence[np.ndarray], names: Sequence[str], seed: int
) -> Verification:
    if len(ours) != len(reference):
        return Verification(False, float("inf"), float("inf"), RTOL, ATOL, seed, "output count")
    worst = ("", 0.0, 0.0)
    passed = True
    for name, got, ref in zip(names, ours, reference, strict=True):
        if got.shape != ref.shape:
            return Verification(False, float("inf"), float("inf"), RTOL, ATOL, seed, name)
        got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
        # NaN where the reference has NaN, and the same infinity where it has one, agree (pow or
        # sqrt of a negative number); any other non-finite value on either side fails, and reads
        # as an infinite error, not as 0 (NaN compares false with everything, so a max over NaNs
        # would hide it).
        same_special = (np.isnan(got64) & np.isnan(ref64)) | (np.isinf(ref64) & (got64 == ref64))
        finite = np.isfinite(got64) & np.isfinite(ref64)
        magnitude = np.abs(ref64[finite])
        atol = ATOL * max(1.0, float(magnitude.max()) if magnitude.size else 1.0)
        if not np.all(finite | same_special):
            abs_err = rel_err = float("inf")
            passed = False
        else:
            diff = np.abs(got64[finite] - ref64[finite])
            abs_err = float(diff.max()) if diff.size else 0.0
            rel_err = float((diff / np.maximum(magnitude, 1e-30)).max()) if diff.size else 0.0
            if not np.all(diff <= atol + RTOL * magnitude):
                passed = False
        if abs_err >= worst[1]:
            worst = (name, abs_err, rel_err)
    return Verification(passed, worst[1], worst[2], RTOL, ATOL, seed, worst[0])


def check_outputs(
    outputs: Sequence[np.ndarray],
    ingested: IngestedModel,
    feeds: dict[str, np.ndarray],
    *,
    threads: int,
    seed: int,
    where: str = "",
) -> Verification:
    """Compare the artifact's ``outputs`` on ``feeds`` with onnxruntime's; raises
    ``VerificationError`` on a mismatch (``where`` names the device that ran them, if remote)."""
    result = compare(
        outputs,
        reference_outputs(ingested, feeds, threads),
        [spec.name for spec in ingested.outputs],
        seed,
    )
    if not result.passed:
        raise VerificationError(
            f"artifact disagrees with onnxruntime{where} on output '{result.worst_output}': "
            f"max abs error {result.max_abs_err:.3g} (tolerance rtol={RTOL}, atol={ATOL}·max|ref|)"
        )
    return result


def verify_artifact(
    artifact: Artifact, ingested: IngestedModel, *, threads: int, seed: int = 0
) -> Verification:
    """Run both on the same seeded inputs; raises ``VerificationError`` on a mismatch."""
    feeds = random_feeds(ingested.inputs, seed)
    return check_outputs(artifact.run(feeds), ingested, feeds, threads=threads, seed=seed)
