"""Verification against onnxruntime: an artifact that disagrees is never served.

Tolerance: ``|ours - ref| <= atol + rtol·|ref|``, ``rtol = 1e-4``, ``atol = 1e-4·max(1, max|ref|)``.
The absolute part scales with the output's magnitude because fp32 reductions summed in a different
order (tiling, vectorisation) differ by a few ULPs of the running sum, not of each output element.
A model built with ``--precision bf16`` (``tuner/graph/bf16.py``) rounds each conv's inputs and
weights to bf16's 8 significant bits, so its outputs get ``rtol = atol = BF16_RTOL`` (3%) instead:
ResNet-50's logits differ from onnxruntime's fp32 by 0.24% of their range (2026-12-04, Zen 4),
and the top-1 agreement of a (batch, classes) output is reported.

An output of a quantized (QDQ) model that a DequantizeLinear produces is compared in its
quantization steps instead: onnxruntime requantizes each layer with its own float arithmetic and
rounding (``QLinearConv``'s fixed-point scale, ties to even) and convtune with its own (the scale
product in fp32 in the epilogue), so a value on a rounding boundary lands one step apart, and a
step in one layer moves later ones. Such an output passes when every element is within
:data:`QUANT_STEPS` steps of onnxruntime's plus the steps by which onnxruntime's own two
executions of the same QDQ graph differ (:func:`reference_spread`; 0 on ResNet-50): on a
YOLO-style detector quantized by ``quantize_static`` (one scale for box pixels and class scores, a
DFL softmax between quantize pairs), onnxruntime's integer kernels and its spec-exact float QDQ
graph disagree by 22 steps on the same input, and convtune's build by 15 from the first, so no
fixed few-step gate holds there for any implementation. The verification reports the largest
difference in steps, the tolerance applied and, for a (batch, classes) output, how often the
top-1 class agrees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from convtune.tuner.errors import VerificationError
from convtune.tuner.graph.ingest import IngestedModel, TensorSpec
from convtune.tuner.measure.reference import ort_session
from convtune.tuner.measure.runtime import Artifact

RTOL = 1e-4
ATOL = 1e-4
#: ``--precision bf16``: rtol and atol (× max|ref|) of an output. bf16 keeps 8 significant bits,
#: so each conv's inputs and weights are rounded by up to 2^-9 (0.2%) relative; over a deep net
#: the errors add up to about a percent of the output's range (ResNet-50: see docs/spaces.md).
BF16_RTOL = 3e-2
#: Quantization steps a QDQ model's dequantized output may differ by (module docstring).
QUANT_STEPS = 4.0


@dataclass(frozen=True)
class Verification:
    passed: bool
    max_abs_err: float
    max_rel_err: float
    rtol: float
    atol: float
    seed: int
    worst_output: str
    #: For a QDQ model's quantized outputs: the largest difference in quantization steps.
    max_steps: float | None = None
    #: For its (batch, classes) outputs: the share of rows whose top-1 class agrees.
    top1_agreement: float | None = None
    #: The steps allowed on the output of ``max_steps``: QUANT_STEPS + onnxruntime's own spread.
    step_tolerance: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def quantization_steps(model: onnx.ModelProto) -> dict[str, float]:
    """The quantization step of each graph output a DequantizeLinear with a constant scalar
    scale produces (a QDQ model's dequantized outputs)."""
    constants = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute:
            constants[node.output[0]] = node.attribute[0].t
    outputs = {o.name for o in model.graph.output}
    steps = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.output[0] in outputs:
            scale = constants.get(node.input[1])
            if scale is not None:
                value = numpy_helper.to_array(scale)
                if value.size == 1:
                    steps[node.output[0]] = float(value.reshape(()))
    return steps


def random_feeds(inputs: tuple[TensorSpec, ...], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {spec.name: rng.standard_normal(spec.shape).astype(spec.dtype) for spec in inputs}


def reference_outputs(
    ingested: IngestedModel, feeds: dict[str, np.ndarray], threads: int, *, optimized: bool = True
) -> list[np.ndarray]:
    """onnxruntime's outputs; ``optimized=False`` runs the graph as the ONNX spec defines it,
    with graph optimisations off (a QDQ model's DQ → op → Q in fp32, no ``QLinearConv``)."""
    options = None
    if not optimized:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort_session(ingested.model.SerializeToString(), threads, options)
    return [np.asarray(x) for x in session.run(None, feeds)]


def reference_spread(
    ingested: IngestedModel,
    feeds: dict[str, np.ndarray],
    reference: Sequence[np.ndarray],
    steps: dict[str, float],
    threads: int,
) -> dict[str, float]:
    """For each quantized output (``steps``): the largest difference, in its steps, between
    ``reference`` (onnxruntime as it runs by default) and onnxruntime running the same graph
    unoptimized; both are correct executions of the QDQ model (module docstring)."""
    if not steps:
        return {}
    spec = reference_outputs(ingested, feeds, threads, optimized=False)
    names = [o.name for o in ingested.outputs]
    spread = {}
    for name, ref, exact in zip(names, reference, spec, strict=True):
        if name in steps and ref.shape == exact.shape:
            diff = np.abs(ref.astype(np.float64) - exact.astype(np.float64))
            spread[name] = float(np.nanmax(diff, initial=0.0)) / steps[name]
    return spread


def compare(
    ours: Sequence[np.ndarray],
    reference: Sequence[np.ndarray],
    names: Sequence[str],
    seed: int,
    steps: dict[str, float] | None = None,
    spread: dict[str, float] | None = None,
    precision: str = "fp32",
) -> Verification:
    """Each output within the tolerance (module docstring); ``steps`` holds the quantization
    step of the outputs compared in steps, ``spread`` onnxruntime's own difference on them;
    with ``precision`` "bf16" the others are compared with :data:`BF16_RTOL`."""
    steps, spread = steps or {}, spread or {}
    rtol, atol_factor = tolerances(precision)
    max_steps: float | None = None
    step_tolerance: float | None = None
    agreement: list[float] = []
    if len(ours) != len(reference):
        return Verification(
            False, float("inf"), float("inf"), rtol, atol_factor, seed, "output count"
        )
    worst = ("", 0.0, 0.0)
    passed = True
    for name, got, ref in zip(names, ours, reference, strict=True):
        if got.shape != ref.shape:
            return Verification(False, float("inf"), float("inf"), rtol, atol_factor, seed, name)
        got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
        # NaN where the reference has NaN, and the same infinity where it has one, agree (pow or
        # sqrt of a negative number); any other non-finite value on either side fails, and reads
        # as an infinite error, not as 0 (NaN compares false with everything, so a max over NaNs
        # would hide it).
        same_special = (np.isnan(got64) & np.isnan(ref64)) | (np.isinf(ref64) & (got64 == ref64))
        finite = np.isfinite(got64) & np.isfinite(ref64)
        magnitude = np.abs(ref64[finite])
        atol = atol_factor * max(1.0, float(magnitude.max()) if magnitude.size else 1.0)
        if not np.all(finite | same_special):
            abs_err = rel_err = float("inf")
            passed = False
        else:
            diff = np.abs(got64[finite] - ref64[finite])
            abs_err = float(diff.max()) if diff.size else 0.0
            rel_err = float((diff / np.maximum(magnitude, 1e-30)).max()) if diff.size else 0.0
            if name in steps:
                in_steps = abs_err / steps[name]
                allowed = QUANT_STEPS + spread.get(name, 0.0)
                if max_steps is None or in_steps >= max_steps:
                    max_steps, step_tolerance = in_steps, allowed
                passed = passed and in_steps <= allowed + 1e-3
                if ref64.ndim == 2 and ref64.shape[1] > 1:
                    agreement.append(float(np.mean(got64.argmax(1) == ref64.argmax(1))))
            else:
                if not np.all(diff <= atol + rtol * magnitude):
                    passed = False
                if ref64.ndim == 2 and ref64.shape[1] > 1 and precision != "fp32":
                    agreement.append(float(np.mean(got64.argmax(1) == ref64.argmax(1))))
        if abs_err >= worst[1]:
            worst = (name, abs_err, rel_err)
    top1 = float(np.mean(agreement)) if agreement else None
    return Verification(
        passed, worst[1], worst[2], rtol, atol_factor, seed, worst[0], max_steps, top1,
        step_tolerance,
    )  # fmt: skip


def tolerances(precision: str) -> tuple[float, float]:
    """(rtol, atol factor) of a non-quantized output of a model built in ``precision``."""
    return (BF16_RTOL, BF16_RTOL) if precision == "bf16" else (RTOL, ATOL)


def check_outputs(
    outputs: Sequence[np.ndarray],
    ingested: IngestedModel,
    feeds: dict[str, np.ndarray],
    *,
    threads: int,
    seed: int,
    where: str = "",
    precision: str = "fp32",
) -> Verification:
    """Compare the artifact's ``outputs`` on ``feeds`` with onnxruntime's; raises
    ``VerificationError`` on a mismatch (``where`` names the device that ran them, if remote)."""
    reference = reference_outputs(ingested, feeds, threads)
    steps = quantization_steps(ingested.model)
    names = [spec.name for spec in ingested.outputs]
    spread = reference_spread(ingested, feeds, reference, steps, threads)
    result = compare(outputs, reference, names, seed, steps, spread, precision)
    if not result.passed:
        tolerance = (
            f"{result.step_tolerance:.3g} quantization steps; {result.max_steps:.3g} found"
            if result.max_steps is not None
            else f"rtol={result.rtol}, atol={result.atol}·max|ref|"
        )
        raise VerificationError(
            f"artifact disagrees with onnxruntime{where} on output '{result.worst_output}': "
            f"max abs error {result.max_abs_err:.3g} (tolerance {tolerance})"
        )
    return result


def verify_artifact(
    artifact: Artifact,
    ingested: IngestedModel,
    *,
    threads: int,
    seed: int = 0,
    precision: str = "fp32",
) -> Verification:
    """Run both on the same seeded inputs; raises ``VerificationError`` on a mismatch."""
    feeds = random_feeds(ingested.inputs, seed)
    outputs = artifact.run(feeds)
    return check_outputs(outputs, ingested, feeds, threads=threads, seed=seed, precision=precision)
