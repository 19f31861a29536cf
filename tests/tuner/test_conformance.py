"""ONNX's own conformance cases for the CNN ops, through ingest → compile_untuned → Artifact.run.

Sources, all shipped in the onnx wheel (nothing downloaded): the node-test generators
(``onnx.backend.test.case.node``) and the PyTorch exports under ``onnx/backend/test/data``
(``pytorch-converted``, ``pytorch-operator``), 1-D/2-D only. A case is in when every node of its
graph is a CNN op (:data:`CNN_OPS`, which includes the helpers of the attention expansions).

As a real export has them, a case's parameter inputs (integer inputs such as pads, starts, axes,
shape, sizes; and Resize's ``scales``/``roi``, Clip's bounds, Pad's value) become initializers
holding the test's own values. Each case also runs at the oldest opset ``onnx.version_converter``
brings it down to (9 where it can), the opsets PyTorch 1.x wrote, when onnxruntime still gives
the expected outputs for that variant.

Speed: compiling costs about a second per model, mostly LLVM and the link; the cases are therefore
ingested one by one (cheap) and compiled in groups (one model holding up to ``GROUP_SIZE`` cases
side by side, prefixed names), bisected when a group fails to build; a variant whose ingested
graph is identical to one already seen reuses that outcome.

Outcomes: ``pass``; ``refused_dtype`` (ingest's one line on a non-float32 input or tensor, by
design); ``refused`` (any other one-line ConvtuneError); ``crash`` (any other exception); ``wrong``.
The suite fails on any crash or wrong result, and on a refusal that is not by dtype.
``python -m tests.tuner.test_conformance`` prints the tally and writes docs/conformance.md.
"""

from __future__ import annotations

import hashlib
import re
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx.compose
import onnx.version_converter
import pytest
from onnx import helper, numpy_helper

from convtune.tuner.errors import ConvtuneError
from convtune.tuner.graph.ingest import IngestedModel, TensorSpec, load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import compare
from convtune.tuner.target import make_target

# PyTorch exports name tensors "0", "1"...; the frontend renames them to valid identifiers.
pytestmark = pytest.mark.filterwarnings("ignore:Renaming name:UserWarning")

DATA_DIR = Path(onnx.__file__).parent / "backend/test/data"
DOC = Path(__file__).resolve().parents[2] / "docs/conformance.md"
GROUP_SIZE = 48
OLDEST_OPSET = 9

CNN_OPS = frozenset(
    {
        # convolution, pooling, normalization
        "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
        "LpPool", "BatchNormalization", "InstanceNormalization", "LpNormalization",
        "Dropout",
        # activations and Softmax
        "Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu",
        "Selu", "Celu", "Softplus", "Softsign", "Mish", "Gelu", "ThresholdedRelu", "Clip",
        "Softmax", "LogSoftmax", "Hardmax",
        # resampling and rearrangement
        "Resize", "Upsample", "SpaceToDepth", "DepthToSpace", "Pad",
        # shape ops
        "Reshape", "Flatten", "Transpose", "Concat", "Split", "Squeeze", "Unsqueeze", "Slice",
        "Shape", "Size", "Expand", "Gather", "Identity", "Tile", "Constant", "ConstantOfShape",
        "Cast", "CastLike", "Range", "Where", "Trilu",
        # elementwise math and reductions
        "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Abs", "Neg", "Reciprocal",
        "Min", "Max", "Sum", "Mean", "Floor", "Ceil", "Erf", "Sign", "Equal", "Less", "Greater",
        "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "ReduceMean", "ReduceSum",
        "ReduceMax", "ReduceMin",
        # dense
        "Gemm", "MatMul",
    }
)  # fmt: skip
# Parameter inputs a real export stores as constants, when floating point (integer inputs other
# than the first always are).
_FLOAT_PARAMS = frozenset({"scales", "roi", "min", "max", "constant_value", "value"})
_PYTORCH_SKIP = ("3d", "3D", "Conv3d", "BatchNorm3d", "MaxPool3d", "AvgPool3d")


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    data_sets: list[tuple[list[np.ndarray], list[np.ndarray]]]


# Refused by design, like a non-float32 dtype: ingest's one line for a zero-size input dim and
# for a graph without inputs (a constant: nothing to tune).
DESIGN_REFUSALS = (r"^input '[^']+' has a zero-size dimension", r"^the model has no inputs")
# What the frontend truly cannot do, refused before tuning with one line naming node and op.
OP_REFUSALS = (
    # TVM resizes to an integral size and takes out/in as the scale; ONNX keeps the given scale
    r"^Resize node \S+: scale \S+ on an input of \d+ gives a non-integral output size and "
    r"samples outside the input",
    r"^Resize node \S+: antialiased \w+ downsampling is not supported by TVM$",
    r"^MaxPool node \S+: its Indices output .* is not supported",
)
KINDS = ("pass", "refused_dtype", "refused_design", "refused_op", "refused", "crash", "wrong")


@dataclass
class Outcome:
    kind: str  # one of KINDS
    detail: str = ""


@dataclass
class _Ready:
    """A case that ingested: its model and what to feed and expect."""

    case: Case
    ingested: IngestedModel
    data_sets: list[tuple[list[np.ndarray], list[np.ndarray]]]
    children: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# collection
# ---------------------------------------------------------------------------------------------


def _is_cnn_graph(model: onnx.ModelProto) -> bool:
    ops = {node.op_type for node in model.graph.node}
    return bool(ops) and ops <= CNN_OPS


def _node_cases() -> list[Case]:
    from onnx.backend.test.case.node import collect_testcases

    # collect_testcases filters by a module global on its FIRST call only; later calls return
    # the same list, so collect everything once and filter here. The generators warn about
    # overflows in unrelated ops (Cast...).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return [
        Case(c.name, c.model, [(list(i), list(o)) for i, o in c.data_sets])
        for c in cases
        if _is_cnn_graph(c.model) and _plain_tensors(c.data_sets)
    ]


def _plain_tensors(data_sets) -> bool:
    """Only numeric tensors (no sequences, optionals or strings) in and out."""
    return all(
        isinstance(x, np.ndarray) and x.dtype != object
        for inputs, outputs in data_sets
        for x in [*inputs, *outputs]
    )


def _read_tensors(data_set: Path, prefix: str) -> list[np.ndarray]:
    files = sorted(data_set.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    return [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in files]


def _pytorch_cases() -> list[Case]:
    cases = []
    for folder in ("pytorch-converted", "pytorch-operator"):
        for case_dir in sorted((DATA_DIR / folder).iterdir()):
            if any(tag in case_dir.name for tag in _PYTORCH_SKIP):
                continue
            model = onnx.load(str(case_dir / "model.onnx"))
            if not _is_cnn_graph(model):
                continue
            data_sets = [
                (_read_tensors(d, "input"), _read_tensors(d, "output"))
                for d in sorted(case_dir.glob("test_data_set_*"))
            ]
            cases.append(Case(f"{folder}/{case_dir.name}", model, data_sets))
    return cases


def _params_as_initializers(case: Case) -> Case:
    """Parameter inputs (integer inputs after the first, float scales/roi/bounds) become
    initializers holding the first data set's values; the data sets lose those inputs."""
    graph = case.model.graph
    init_names = {t.name for t in graph.initializer}
    real = [vi for vi in graph.input if vi.name not in init_names]
    move: list[int] = []
    for i, vi in enumerate(real):
        elem = vi.type.tensor_type.elem_type
        is_int = elem not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)
        if i > 0 and (is_int or vi.name in _FLOAT_PARAMS):
            move.append(i)
    if not move or not case.data_sets or len(case.data_sets[0][0]) != len(real):
        return case
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    values = case.data_sets[0][0]
    moved = {real[i].name for i in move}
    for i in move:
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(values[i]), real[i].name))
    kept = [vi for vi in model.graph.input if vi.name not in moved]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.ir_version = max(model.ir_version, 4)
    data_sets = [
        ([x for j, x in enumerate(inputs) if j not in move], outputs)
        for inputs, outputs in case.data_sets
    ]
    return Case(case.name, model, data_sets)


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _ort_outputs(model: onnx.ModelProto, data_sets) -> list[list[np.ndarray]] | None:
    """onnxruntime's outputs for each data set, or None when it cannot run the model."""
    import onnxruntime as ort

    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 4
        session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return [
            [np.asarray(x) for x in session.run(None, dict(zip(names, inputs, strict=True)))]
            for inputs, _ in data_sets
        ]
    except Exception:
        return None


def _with_ort_reference(case: Case) -> Case:
    """convtune verifies against onnxruntime: where onnxruntime disagrees with a case's expected
    outputs (align_corners at a non-integral scale: ONNX divides by scale·W - 1, onnxruntime by
    the output size - 1), its outputs are the reference, and the case name says so."""
    if _ort_matches(case.model, case.data_sets):
        return case
    got = _ort_outputs(case.model, case.data_sets)
    if got is None:
        return case
    data_sets = [(inputs, outs) for (inputs, _), outs in zip(case.data_sets, got, strict=True)]
    return Case(f"{case.name}[ort]", case.model, data_sets)


def _ort_matches(model: onnx.ModelProto, data_sets) -> bool:
    """Whether onnxruntime gives the case's expected outputs for ``model`` (a converted variant
    that it does not is a converter bug, not a test of ours)."""
    import onnxruntime as ort

    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 4
        session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        for inputs, expected in data_sets:
            got = session.run(None, dict(zip(names, inputs, strict=True)))
            if len(got) != len(expected):
                return False
            for g, e in zip(got, expected, strict=True):
                g, e = np.asarray(g), np.asarray(e)
                if g.shape != e.shape or g.dtype != e.dtype:
                    return False
                if not np.allclose(g, e, rtol=1e-3, atol=1e-4, equal_nan=True):
                    return False
    except Exception:
        return False
    return True


def _oldest_variant(case: Case) -> Case | None:
    """``case`` at the oldest opset (from 9 up) that version_converter reaches and onnxruntime
    still agrees with; None when the case is at that opset already or none works."""
    native = _opset(case.model)
    for version in range(OLDEST_OPSET, native):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                converted = onnx.version_converter.convert_version(case.model, version)
            onnx.checker.check_model(converted)
            # A variant ONNX's own inference disagrees with (ceil-mode pools changed their
            # output size in opset 19) is the converter's bug, not an old export.
            onnx.shape_inference.infer_shapes(converted, strict_mode=True)
        except Exception:
            continue
        if _ort_matches(converted, case.data_sets):
            name = case.name.removesuffix("[ort]")
            return Case(f"{name}@opset{version}", converted, case.data_sets)
        return None
    return None


def all_cases(only: str = "") -> list[Case]:
    """Every case (whose name holds ``only``) and its oldest-opset variant, parameters as
    initializers."""
    base = [
        _with_ort_reference(_params_as_initializers(c))
        for c in [*_node_cases(), *_pytorch_cases()]
        if only in c.name
    ]
    cases: list[Case] = []
    for case in base:
        cases.append(case)
        variant = _oldest_variant(case)
        if variant is not None:
            cases.append(variant)
    return cases


# ---------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------


def _refusal(message: str) -> Outcome:
    """A one-line ConvtuneError, classified."""
    if "\n" in message:
        return Outcome("crash", f"multi-line refusal: {message!r}")
    if "has dtype" in message and "convtune tunes float32" in message:
        return Outcome("refused_dtype", message)
    if any(re.search(pattern, message) for pattern in DESIGN_REFUSALS):
        return Outcome("refused_design", message)
    if any(re.search(pattern, message) for pattern in OP_REFUSALS):
        return Outcome("refused_op", message)
    return Outcome("refused", message)


def _ingest(case: Case) -> _Ready | Outcome:
    try:
        ingested = load_model(case.model.SerializeToString(), name="case")
    except ConvtuneError as err:
        return _refusal(str(err))
    except Exception as err:
        return Outcome("crash", f"ingest: {type(err).__name__}: {_line(err)}")
    data_sets = case.data_sets
    if any(len(inputs) != len(ingested.inputs) for inputs, _ in data_sets):
        return Outcome("crash", "input count changed by ingest")
    return _Ready(case, ingested, data_sets)


def _line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines() or [type(err).__name__])[-1][:200]


def _graph_key(ingested: IngestedModel) -> str:
    model = onnx.ModelProto()
    model.CopyFrom(ingested.model)
    model.graph.name = ""
    model.ClearField("producer_name")
    model.ClearField("producer_version")
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def _merge(ready: Sequence[_Ready]) -> IngestedModel:
    """One model holding every case of ``ready`` side by side (names prefixed ``c<i>_``)."""
    if len(ready) == 1:
        return ready[0].ingested
    graph = helper.make_graph([], "group", [], [])
    inputs: list[TensorSpec] = []
    outputs: list[TensorSpec] = []
    opsets: dict[str, int] = {}
    ir_version = 3
    for i, item in enumerate(ready):
        prefix = f"c{i}_"
        model = onnx.compose.add_prefix(item.ingested.model, prefix)
        graph.node.extend(model.graph.node)
        graph.input.extend(model.graph.input)
        graph.output.extend(model.graph.output)
        graph.initializer.extend(model.graph.initializer)
        graph.value_info.extend(model.graph.value_info)
        for o in model.opset_import:
            opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
        ir_version = max(ir_version, model.ir_version)
        inputs += [TensorSpec(prefix + s.name, s.shape, s.dtype) for s in item.ingested.inputs]
        outputs += [TensorSpec(prefix + s.name, s.shape, s.dtype) for s in item.ingested.outputs]
    merged = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()]
    )
    merged.ir_version = ir_version
    return IngestedModel(merged, "", 0, "group", tuple(inputs), tuple(outputs))


def _build(ready: Sequence[_Ready], target, out_dir: Path) -> Artifact | Outcome:
    ingested = _merge(ready)
    try:
        path = compile_untuned(ingested, target, out_dir)
        return Artifact.load(path, [s.name for s in ingested.inputs])
    except ConvtuneError as err:
        return _refusal(str(err))
    except Exception as err:
        return Outcome("crash", f"compile: {type(err).__name__}: {_line(err)}")


def _run_group(ready: Sequence[_Ready], target, out_dir: Path, results: dict[str, Outcome]) -> None:
    """Build ``ready`` as one model and compare each case; bisect a group that fails to build."""
    built = _build(ready, target, out_dir / f"g{len(results)}_{len(ready)}")
    if isinstance(built, Outcome):
        if len(ready) == 1:
            results[ready[0].case.name] = built
            return
        half = len(ready) // 2
        _run_group(ready[:half], target, out_dir, results)
        _run_group(ready[half:], target, out_dir, results)
        return
    rounds = max(len(r.data_sets) for r in ready)
    verdicts: dict[str, Outcome] = {r.case.name: Outcome("pass") for r in ready}
    for k in range(rounds):
        feeds: dict[str, np.ndarray] = {}
        name_index = 0
        for item in ready:
            inputs = item.data_sets[min(k, len(item.data_sets) - 1)][0]
            for value in inputs:
                feeds[built.input_names[name_index]] = np.asarray(value)
                name_index += 1
        try:
            got = built.run(feeds)
        except Exception as err:
            if len(ready) == 1:
                results[ready[0].case.name] = Outcome("crash", f"run: {_line(err)}")
                return
            half = len(ready) // 2
            _run_group(ready[:half], target, out_dir, results)
            _run_group(ready[half:], target, out_dir, results)
            return
        at = 0
        for item in ready:
            expected = item.data_sets[min(k, len(item.data_sets) - 1)][1]
            count = len(item.ingested.outputs)
            ours = got[at : at + count]
            at += count
            names = [s.name for s in item.ingested.outputs]
            result = compare(ours, [np.asarray(x) for x in expected], names, seed=0)
            if not result.passed and verdicts[item.case.name].kind == "pass":
                verdicts[item.case.name] = Outcome(
                    "wrong", f"max abs err {result.max_abs_err:.3g} on {result.worst_output}"
                )
    results.update(verdicts)


def run_cases(cases: Sequence[Case], target, out_dir: Path) -> dict[str, Outcome]:
    results: dict[str, Outcome] = {}
    ready_by_key: dict[str, _Ready] = {}
    duplicates: dict[str, str] = {}
    groups: dict[tuple, list[_Ready]] = {}
    for case in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _ingest(case)
        if isinstance(got, Outcome):
            results[case.name] = got
            continue
        key = _graph_key(got.ingested)
        first = ready_by_key.get(key)
        if first is not None and _same_data(first.data_sets, got.data_sets):
            duplicates[case.name] = first.case.name
            continue
        ready_by_key[key] = got
        opsets = tuple(sorted((o.domain, o.version) for o in got.ingested.model.opset_import))
        groups.setdefault(opsets, []).append(got)
    for members in groups.values():
        for start in range(0, len(members), GROUP_SIZE):
            _run_group(members[start : start + GROUP_SIZE], target, out_dir, results)
    for name, original in duplicates.items():
        results[name] = results[original]
    return results


def _same_data(a, b) -> bool:
    if len(a) != len(b):
        return False
    for (ia, oa), (ib, ob) in zip(a, b, strict=True):
        for x, y in zip([*ia, *oa], [*ib, *ob], strict=True):
            x, y = np.asarray(x), np.asarray(y)
            if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=True):
                return False
    return True


def tally(results: dict[str, Outcome]) -> Counter:
    return Counter(outcome.kind for outcome in results.values())


# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def conformance_results(tmp_path_factory) -> dict[str, Outcome]:
    return run_cases(all_cases(), make_target(), tmp_path_factory.mktemp("conformance"))


def test_no_case_crashes_or_is_wrong(conformance_results) -> None:
    bad = {
        name: f"{o.kind}: {o.detail}"
        for name, o in conformance_results.items()
        if o.kind in ("crash", "wrong")
    }
    assert not bad, bad


def test_refusals_are_expected_one_liners(conformance_results) -> None:
    """Only dtype, design (zero-size, no input) and the listed op refusals, each one line."""
    refused = {n: o.detail for n, o in conformance_results.items() if o.kind == "refused"}
    assert not refused, refused
    for name, outcome in conformance_results.items():
        if outcome.kind.startswith("refused"):
            assert outcome.detail and "\n" not in outcome.detail, name


def test_all_shipped_cases_were_found(conformance_results) -> None:
    """A renamed or missing onnx test directory must not silently shrink the suite."""
    names = set(conformance_results)
    assert {"test_conv_with_autopad_same", "test_gemm_all_attributes"} <= names
    assert {"pytorch-converted/test_Conv2d", "pytorch-operator/test_operator_index"} <= names
    assert any(name.endswith("@opset9") for name in names)
    assert len(names) >= 600


# ---------------------------------------------------------------------------------------------
# the tally in docs/conformance.md
# ---------------------------------------------------------------------------------------------


def write_doc(results: dict[str, Outcome], seconds: float) -> str:
    counts = tally(results)
    variants = sum(1 for name in results if "@opset" in name)
    lines = [
        "# ONNX conformance of the CNN ops",
        "",
        "Every ONNX node case and every 1-D/2-D `pytorch-converted`/`pytorch-operator` case",
        "whose ops are all CNN ops, with parameter inputs as initializers, plus each case at the",
        "oldest opset `onnx.version_converter` reaches (9 where it can), through ingest →",
        "`compile_untuned` → `Artifact.run` → `verify.compare`. Written by",
        "`python -m tests.tuner.test_conformance`; `tests/tuner/test_conformance.py` fails on",
        "any crash, wrong result or refusal not by design.",
        "",
        f"{len(results)} cases ({variants} of them old-opset variants), {seconds:.0f} s here:",
        "",
        "| outcome | cases |",
        "|---|---|",
    ]
    labels = {
        "pass": "pass",
        "refused_dtype": "refused by design: a non-float32 input or tensor",
        "refused_design": "refused by design: a zero-size input dim, or no input at all",
        "refused_op": "other refusals: what TVM cannot do, one line naming node and op",
        "refused": "other refusals: anything else (the test fails)",
        "crash": "crash (the test fails)",
        "wrong": "wrong (the test fails)",
    }
    for kind in KINDS:
        lines.append(f"| {labels[kind]} | {counts.get(kind, 0)} |")
    lines += [
        "",
        "Before #35 (main at ef70453, the same harness, with LayerNormalization and",
        "GroupNormalization then in the op set: 1353 cases): 980 pass, 223 refused by dtype,",
        "79 other refusals (25 of them zero-size inputs or no input), 27 crashes, 44 wrong",
        "(19 of those LayerNormalization's training-only Mean/InvStdDev outputs). The",
        "normalizer's target opset, measured over these cases: 11, 13, 17 and 18 pass alike",
        "(1070), and the legacy corpus imports at 17, which is kept.",
    ]
    by_ort = sorted(n for n in results if "[ort]" in n)
    if by_ort:
        lines += [
            "",
            "Compared with onnxruntime's outputs, which convtune verifies against, where they",
            "differ from the case's expected ones: " + ", ".join(f"`{n}`" for n in by_ort) + ".",
        ]
    others = [(n, o) for n, o in sorted(results.items()) if o.kind not in ("pass", "refused_dtype")]
    if others:
        lines += ["", "Every case not passing, other than by dtype:", ""]
        lines += [f"- `{n}`: {o.kind}: {o.detail}" for n, o in others]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    """``[FILTER] [--target-opset N]``: only cases whose name holds FILTER (no doc written);
    ``--target-opset`` overrides the normalizer's opset (to measure which is best)."""
    args = list(argv)
    if "--target-opset" in args:
        at = args.index("--target-opset")
        from convtune.tuner.graph import normalize

        normalize.TARGET_OPSET = int(args[at + 1])
        del args[at : at + 2]
    only = args[0] if args else ""
    start = time.perf_counter()
    cases = all_cases(only)
    collected = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        results = run_cases(cases, make_target(), Path(tmp))
    seconds = time.perf_counter() - start
    for name, outcome in sorted(results.items()):
        if outcome.kind not in ("pass", "refused_dtype"):
            print(f"{outcome.kind:8} {name}: {outcome.detail}")
    print(dict(tally(results)), f"{len(cases)} cases, collect {collected:.0f} s, {seconds:.0f} s")
    if not only and len(args) == len(argv):
        DOC.write_text(write_doc(results, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def test_compare_accepts_nan_and_inf_where_the_reference_has_them() -> None:
    """pow/sqrt of negative numbers: NaN on both sides agree; a NaN or inf of ours alone fails."""
    ref = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    assert compare([ref.copy()], [ref], ["y"], seed=0).passed
    ours = ref.copy()
    ours[0] = np.nan
    assert not compare([ours], [ref], ["y"], seed=0).passed
    ours = ref.copy()
    ours[2] = -np.inf
    assert not compare([ours], [ref], ["y"], seed=0).passed
