"""ONNX's own Conv/Gemm conformance cases through ingest → compile_untuned → Artifact.run.

Two sources, both shipped in the onnx wheel (nothing downloaded): the node-test generators
(``onnx.backend.test.case.node``: conv.py, gemm.py) and the PyTorch-exported models under
``onnx/backend/test/data/pytorch-converted`` (test_Conv2d*, test_Linear*). Each case is compared
with its expected outputs under ``verify.compare``'s tolerance.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from convtune.tuner.ingest import load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.runtime import Artifact
from convtune.tuner.target import make_target
from convtune.tuner.verify import compare

CONFORMANCE_OPS = ("Conv", "Gemm")
# PyTorch exports name tensors "0", "1"...; the frontend renames them to valid identifiers.
pytestmark = pytest.mark.filterwarnings("ignore:Renaming name:UserWarning")

PYTORCH_DIR = Path(onnx.__file__).parent / "backend/test/data/pytorch-converted"
PYTORCH_CASES = sorted(
    p.name for pattern in ("test_Conv2d*", "test_Linear*") for p in PYTORCH_DIR.glob(pattern)
)


def _node_cases() -> list:
    """ONNX node test cases whose single node is a Conv or Gemm (one ``data_set`` each)."""
    from onnx.backend.test.case.node import collect_testcases

    # collect_testcases filters by a module global on its FIRST call only; later calls return
    # the same list, so collect everything once and filter here. The generators warn about
    # overflows in unrelated ops (Cast...).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return [c for c in cases if c.model.graph.node[0].op_type in CONFORMANCE_OPS]


def _node_params() -> list:
    params = []
    for case in _node_cases():
        inputs, outputs = case.data_sets[0]
        params.append(pytest.param(case.model, inputs, outputs, id=case.name))
    return params


def _read_tensors(data_set: Path, prefix: str) -> list[np.ndarray]:
    files = sorted(data_set.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    return [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in files]


@pytest.fixture(scope="module")
def target():
    return make_target()


def _check_against_expected(
    model: onnx.ModelProto,
    data_sets: Sequence[tuple[Sequence[np.ndarray], Sequence[np.ndarray]]],
    target,
    out_dir: Path,
) -> None:
    ingested = load_model(model.SerializeToString(), name=model.graph.name or "case")
    names = [spec.name for spec in ingested.inputs]
    artifact = Artifact.load(compile_untuned(ingested, target, out_dir), names)
    for inputs, expected in data_sets:
        assert len(inputs) == len(names)
        ours = artifact.run(dict(zip(names, inputs, strict=True)))
        result = compare(
            ours, [np.asarray(x) for x in expected], [s.name for s in ingested.outputs], seed=0
        )
        assert result.passed, result


@pytest.mark.parametrize(("model", "inputs", "outputs"), _node_params())
def test_onnx_node_case(model, inputs, outputs, target, tmp_path: Path) -> None:
    _check_against_expected(model, [(inputs, outputs)], target, tmp_path)


def _pytorch_case(name: str) -> tuple[onnx.ModelProto, list]:
    case_dir = PYTORCH_DIR / name
    data_sets = [
        (_read_tensors(d, "input"), _read_tensors(d, "output"))
        for d in sorted(case_dir.glob("test_data_set_*"))
    ]
    assert data_sets, f"{case_dir} has no test_data_set_*"
    return onnx.load(str(case_dir / "model.onnx")), data_sets


@pytest.mark.parametrize("name", PYTORCH_CASES)
def test_pytorch_converted(name: str, target, tmp_path: Path) -> None:
    """As shipped: IR 3 models that also list their weights as graph inputs."""
    model, data_sets = _pytorch_case(name)
    _check_against_expected(model, data_sets, target, tmp_path)


def test_all_shipped_cases_were_found() -> None:
    """A renamed or missing onnx test directory must not silently shrink the suite."""
    node_names = {case.name for case in _node_cases()}
    assert {"test_conv_with_autopad_same", "test_gemm_all_attributes"} <= node_names
    assert len(node_names) >= 15
    assert {"test_Conv2d", "test_Conv2d_groups", "test_Linear"} <= set(PYTORCH_CASES)
    assert len(PYTORCH_CASES) >= 13
