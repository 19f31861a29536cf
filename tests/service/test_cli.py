"""The installed ``convtune`` console script: user mistakes end in one ``error:`` line, exit 2.

Each test runs the real script in a subprocess (what a user types), so typer/rich rendering and
the exit path are covered, not just the exceptions. Ingest errors go through ``convtune workloads``,
which needs no tuning; ``run`` errors use an untuned artifact built by ``compile_untuned``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from convtune.tuner.artifact_files import MANIFEST_NAME
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.target import make_target
from tests import models


def _convtune() -> str:
    """The console script of this venv (next to the interpreter), else the one on PATH."""
    candidate = Path(sys.executable).with_name("convtune")
    found = str(candidate) if candidate.is_file() else shutil.which("convtune")
    assert found, "the convtune console script is not installed (pip install -e .)"
    return found


def convtune(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # A wide terminal so rich never wraps a message; the test asserts it is one line anyway.
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [_convtune(), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def assert_user_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit 2, stderr is exactly one ``error:`` line holding every fragment, no traceback."""
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {result.stderr!r}"
    assert lines[0].startswith("error:"), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _single_node(op: str, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    return models.make_model(
        [helper.make_node(op, ["x"], ["y"], name=f"{op.lower()}0")],
        [helper.make_tensor_value_info("x", dtype, [1, 4])],
        [helper.make_tensor_value_info("y", dtype, [1, 4])],
    )


# ---------------------------------------------------------------------------------------------
# ingest errors, through `convtune workloads`
# ---------------------------------------------------------------------------------------------


def test_not_an_onnx_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.onnx"
    path.write_text("these are my notes, not a model\n")
    assert_user_error(convtune("workloads", path, cwd=tmp_path), "not an ONNX model")


def test_missing_model_file(tmp_path: Path) -> None:
    result = convtune("workloads", "absent.onnx", cwd=tmp_path)
    assert_user_error(result, "cannot read model file", "absent.onnx")


def test_external_data(tmp_path: Path) -> None:
    model = models.conv_net(size=8)
    weight = model.graph.initializer[0]
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", "weights.bin"
    path = _save(model, tmp_path / "external.onnx")
    assert_user_error(convtune("workloads", path, cwd=tmp_path), "'W'", "external")


def test_unsupported_op(tmp_path: Path) -> None:
    # Det: no TVM converter, and no rewrite of the normalizer (Celu, used first, is lowered now).
    det = models.make_model(
        [helper.make_node("Det", ["x"], ["y"], name="det0")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    path = _save(det, tmp_path / "det.onnx")
    assert_user_error(convtune("workloads", path, cwd=tmp_path), "Det", "det0", "not supported")


def test_unsupported_dtype(tmp_path: Path) -> None:
    path = _save(_single_node("Relu", TensorProto.FLOAT16), tmp_path / "half.onnx")
    assert_user_error(convtune("workloads", path, cwd=tmp_path), "'x'", "float16", "float32")


def test_dynamic_shape_without_override(tmp_path: Path) -> None:
    path = _save(models.dynamic_reshape_model(), tmp_path / "dynamic.onnx")
    line = assert_user_error(convtune("workloads", path, cwd=tmp_path), "'x'", "--input-shape")
    assert "N" in line.split(";")[0]  # the symbolic dim that needs pinning is named


@pytest.mark.parametrize("value", ["x=1,a,8,8", "x=1,0,8,8", "1,3,8,8", "=1,3,8,8"])
def test_bad_input_shape(value: str, tmp_path: Path) -> None:
    path = _save(models.dynamic_reshape_model(), tmp_path / "dynamic.onnx")
    result = convtune("workloads", path, "--input-shape", value, cwd=tmp_path)
    assert_user_error(result, "--input-shape", value)


def test_input_shape_conflicting_rank(tmp_path: Path) -> None:
    path = _save(models.dynamic_reshape_model(), tmp_path / "dynamic.onnx")
    result = convtune("workloads", path, "--input-shape", "x=1,3,8", cwd=tmp_path)
    assert_user_error(result, "rank 3", "rank 4")


def test_unknown_input_name(tmp_path: Path) -> None:
    path = _save(models.dynamic_reshape_model(), tmp_path / "dynamic.onnx")
    result = convtune("workloads", path, "--input-shape", "image=1,3,8,8", cwd=tmp_path)
    assert_user_error(result, "unknown input 'image'", "'x'")


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        ("cuda", "'cuda' is not supported"),
        ("llvm -mcpu=notacpu", "'notacpu'"),
        ("llvm -num-cores=two", "-num-cores"),
        ('{"kind": "llvm", "mcpu": 3}', "mcpu"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_target(target: str, fragment: str, tmp_path: Path) -> None:
    path = _save(models.conv_net(size=8), tmp_path / "conv.onnx")
    result = convtune("workloads", path, "--target", target, cwd=tmp_path)
    assert_user_error(result, fragment)


def test_workloads_json_lists_each_conv_once(tmp_path: Path) -> None:
    path = _save(models.three_conv_cnn(), tmp_path / "cnn3.onnx")
    result = convtune("workloads", path, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["model"] == "cnn3"
    rows = document["workloads"]
    linked = [node for row in rows for node in row["onnx_nodes"]]
    for conv in ("conv0", "conv1", "conv2"):
        assert linked.count(conv) == 1, linked
        (row,) = [r for r in rows if conv in r["onnx_nodes"]]
        assert (row["kind"], row["op"]) == ("conv", "Conv")
    assert [r["description"]["strides"] for r in rows if "conv1" in r["onnx_nodes"]] == [[2, 2]]
    assert linked.count("fc") == 1


# ---------------------------------------------------------------------------------------------
# `convtune run`
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untuned build of a small conv with the manifest fields ``run`` reads."""
    out = tmp_path_factory.mktemp("artifact")
    ingested = load_model(models.to_bytes(models.conv_net(size=8)))
    so_path = compile_untuned(ingested, make_target(), out)
    specs = {
        key: [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in group]
        for key, group in (("inputs", ingested.inputs), ("outputs", ingested.outputs))
    }
    (out / MANIFEST_NAME).write_text(json.dumps({**specs, "threads": 1}))
    return so_path


def test_run_missing_artifact(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    missing = tmp_path / "nowhere" / "model.so"
    result = convtune("run", missing, "--input", "x.npy", cwd=tmp_path)
    assert_user_error(result, str(missing))


def test_run_wrong_input_name(artifact: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    result = convtune("run", artifact, "--input", "image=x.npy", cwd=tmp_path)
    assert_user_error(result, "unknown input 'image'", "x")


def test_run_unreadable_input_file(artifact: Path, tmp_path: Path) -> None:
    result = convtune("run", artifact, "--input", "x=absent.npy", cwd=tmp_path)
    assert_user_error(result, "absent.npy")


def test_run_prints_output_shape(artifact: Path, tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = convtune("run", artifact, "--input", "x.npy", "--output", "y.npz", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("y: shape [1, 6, 8, 8] float32")
    (expected,) = models.run_onnxruntime(models.conv_net(size=8), {"x": x})
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("with_manifest", [True, False], ids=["download-names", "library-alone"])
def test_run_what_a_download_saved(artifact: Path, tmp_path: Path, with_manifest: bool) -> None:
    """The service's download names (``artifact-1.so`` + ``artifact-1.manifest.json``) run as
    saved; a library saved alone runs too, its input names read from the library itself."""
    shutil.copy(artifact, tmp_path / "artifact-1.so")
    if with_manifest:
        shutil.copy(artifact.with_name(MANIFEST_NAME), tmp_path / "artifact-1.manifest.json")
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = convtune("run", "artifact-1.so", "--input", "x.npy", "--output", "y.npz", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    name = "y" if with_manifest else "output_0"
    assert result.stdout.startswith(f"{name}: shape [1, 6, 8, 8] float32")
    (expected,) = models.run_onnxruntime(models.conv_net(size=8), {"x": x})
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")[name], expected, rtol=1e-4, atol=1e-4)


def test_layout_line_names_every_block_size(capsys) -> None:
    from convtune.service.cli import _print_layout

    convs = [{"layout": "NCHW→NCHW8c"}, {"layout": "NCHW16c"}, {"layout": "NCHW"}]
    layout = {"convs": convs, "blocked_convs": 2, "transforms": 1, "fallbacks": ["kept NCHW"]}
    _print_layout(layout)
    out = capsys.readouterr().err  # the CLI's notes go to stderr, its tables to stdout
    assert "layout: 2 of 3 convs blocked (NCHW16c, NCHW8c), 1 layout transforms" in out
    assert "warning: kept NCHW" in out


def test_run_takes_a_legacy_onnx_input_name_for_the_librarys(tmp_path: Path) -> None:
    """A library saved without its manifest names its inputs as TVM's VM does: a legacy
    export's "input.1" is "input_1"; ``--input input.1=…`` is taken for it."""
    from convtune.service.cli import _read_feeds

    np.save(tmp_path / "a.npy", np.ones((1, 3), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((2,), np.float32))
    feeds = _read_feeds(
        [f"input.1={tmp_path / 'a.npy'}", f"mask={tmp_path / 'b.npy'}"], ["input_1", "mask"]
    )
    assert sorted(feeds) == ["input_1", "mask"] and feeds["input_1"].shape == (1, 3)
    with pytest.raises(ConvtuneError, match=r"unknown input 'input\.2'"):
        _read_feeds([f"input.2={tmp_path / 'a.npy'}"], ["input_1"])
