"""``convtune bench`` and ``convtune profile`` through the real CLI, on a tiny real model.

The "tuned" artifact here is a real TVM library (the untuned build, which is what a zero-trial
tuning run produces) with a manifest and an ``artifacts`` row, so the commands find it and store
their results on it exactly as they would for a tuned one.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from convtune.db.migrate import upgrade
from convtune.db.models import ArtifactRow, ModelRow
from convtune.db.session import make_engine
from convtune.service.cli import app
from convtune.service.cli_perf import conv_precision, warn_over_peak
from convtune.tuner.artifact_files import file_sha256
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.peak import PeakResult
from convtune.tuner.measure.reference import openvino_version
from convtune.tuner.measure.results import store_peak
from convtune.tuner.target import make_target
from tests.models import conv_net, three_conv_cnn, to_bytes


@dataclass
class Known:
    model: Path
    so_path: Path
    db_url: str
    artifact_id: int


@pytest.fixture
def known(tmp_path, monkeypatch) -> Known:
    """A model file, a built library with manifest, and its artifact row in a fresh database."""
    monkeypatch.setenv("CONVTUNE_DATA_DIR", str(tmp_path / "data"))  # the untuned-build cache
    model = tmp_path / "cnn3.onnx"
    model.write_bytes(to_bytes(three_conv_cnn()))
    ingested = load_model(model)
    target = make_target(None)
    so_path = compile_untuned(ingested, target, tmp_path / "out")
    manifest = {
        "model": {"name": ingested.name, "sha256": ingested.sha256},
        "inputs": [
            {"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in ingested.inputs
        ],
        "threads": 1,
        "layers": [],
    }
    (so_path.parent / "manifest.json").write_text(json.dumps(manifest))
    db_url = f"sqlite:///{tmp_path / 'c.db'}"
    upgrade(db_url)
    engine = make_engine(db_url)
    target_id = store_peak(engine, target, PeakResult(100.0, 180.0, 2, "test"))
    with Session(engine) as session, session.begin():
        row = ModelRow(sha256=ingested.sha256, name=ingested.name, size_bytes=1, path="",
                       input_shapes={}, inputs=[], outputs=[])  # fmt: skip
        session.add(row)
        session.flush()
        artifact = ArtifactRow(model_id=row.id, target_id=target_id, sha256=file_sha256(so_path),
                               path=str(so_path), manifest=manifest, verified=True)  # fmt: skip
        session.add(artifact)
        session.flush()
        artifact_id = artifact.id
    engine.dispose()
    return Known(model, so_path, db_url, artifact_id)


def _stored(known: Known) -> ArtifactRow:
    engine = make_engine(known.db_url)
    try:
        with Session(engine) as session:
            return session.get(ArtifactRow, known.artifact_id)
    finally:
        engine.dispose()


def _invoke(*args: str):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result


#: OpenVINO is an optional peer: a column when installed (the bench extra), a note otherwise.
PEER_OPENVINO = ["openvino"] if openvino_version() else []


def test_bench_json_is_one_line_in_run_order_and_stored(known):
    result = _invoke(
        "bench", known.model, "--artifact", known.so_path, "--rounds", 3, "--warmup", 1,
        "--json", "--db", known.db_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert doc["order"] == ["tuned", "untuned", "onnxruntime", *PEER_OPENVINO]
    assert doc["mode"] == "interleaved"
    assert doc["threads"] == 1  # the manifest's
    assert doc["peak_source"] == "database" and doc["peak_gflops"] == 100.0  # 1-core figure
    assert doc["gflop"] > 0
    for name in doc["order"]:
        r = doc["results"][name]
        assert r["rounds"] == 3
        assert r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
        assert r["gflops"] == pytest.approx(doc["gflop"] / r["median_ms"] * 1e3)
    assert doc["results"]["onnxruntime"]["time_vs_ort"] == 1.0
    # The same library timed twice in one interleaved run: the two medians agree.
    tuned, untuned = (doc["results"][k]["median_ms"] for k in ("tuned", "untuned"))
    assert 0.5 < tuned / untuned < 2.0
    assert doc["artifact_id"] == known.artifact_id
    assert _stored(known).bench == {k: v for k, v in doc.items() if k != "artifact_id"}


def test_bench_without_artifact_or_untuned_runs_onnxruntime_alone(known):
    result = _invoke(
        "bench", known.model, "--skip-untuned", "--no-openvino", "--threads", 2, "--rounds", 2,
        "--json", "--db", known.db_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["order"] == ["onnxruntime"] and doc["threads"] == 2
    assert doc["best_peer"] == "onnxruntime" and doc["notes"] == []
    assert doc["peak_gflops"] == 180.0 and doc["artifact_id"] is None


def test_isolated_bench_reports_round_medians_and_ratios_to_the_best_peer(known):
    result = _invoke(
        "bench", known.model, "--artifact", known.so_path, "--isolated", "--rounds", 2,
        "--json", "--db", known.db_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["mode"] == "isolated"
    # No untuned build in isolated mode: ours and the peers, each in its own process per round.
    assert doc["order"] == ["tuned", "onnxruntime", *PEER_OPENVINO]
    assert (doc["notes"] == []) == bool(PEER_OPENVINO)
    results = doc["results"]
    for name in doc["order"]:
        r = results[name]
        assert r["rounds"] == 2 and len(r["round_medians_ms"]) == 2
        # A contender's figure is the median of its round medians.
        assert r["median_ms"] == pytest.approx(sum(r["round_medians_ms"]) / 2)
    peers = [n for n in ("onnxruntime", "openvino") if n in results]
    best = min(peers, key=lambda n: results[n]["median_ms"])
    assert doc["best_peer"] == best
    for name in doc["order"]:
        ratio = results[name]["median_ms"] / results[best]["median_ms"]
        assert results[name]["time_vs_best_peer"] == pytest.approx(ratio)
        ort_ratio = results[name]["median_ms"] / results["onnxruntime"]["median_ms"]
        assert results[name]["time_vs_ort"] == pytest.approx(ort_ratio)
    assert _stored(known).bench["mode"] == "isolated"


def test_profile_writes_json_csv_and_stores_rows(known, tmp_path):
    out_json, out_csv = tmp_path / "p.json", tmp_path / "p.csv"
    result = _invoke(
        "profile", known.model, "--artifact", known.so_path, "--runs", 2,
        "--json", out_json, "--csv", out_csv, "--db", known.db_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(out_json.read_text())
    for row in rows:
        assert {"onnx_nodes", "op", "ms", "ort_ms", "gflops"} <= set(row)
        assert isinstance(row["onnx_nodes"], list)
    listed = sorted(n for row in rows for n in row["onnx_nodes"])
    assert listed == ["conv0", "conv1", "conv2", "fc"]
    with out_csv.open() as handle:
        csv_rows = list(csv.DictReader(handle))
    assert [r["layer"] for r in csv_rows] == [r["layer"] for r in rows]
    assert {"onnx_nodes", "op", "ms", "ort_ms", "gflops"} <= set(csv_rows[0])
    assert _stored(known).profile == rows
    assert "conv0" in result.stdout  # the table names the ONNX nodes


def test_artifact_of_another_model_is_a_one_line_error(known, tmp_path):
    other = tmp_path / "other.onnx"
    other.write_bytes(to_bytes(conv_net()))
    result = _invoke("bench", other, "--artifact", known.so_path, "--db", known.db_url)
    assert result.exit_code == 2
    assert "built from another model" in result.output
    assert "Traceback" not in result.output


def test_over_peak_is_a_warning_for_fp32_and_a_note_for_int8_or_bf16(capsys):
    """Above 100% of the fp32 peak: a stale peak for fp32 artifacts, expected for int8/bf16."""
    warn_over_peak([50.0, 180.0], "layer(s) ran")
    err = capsys.readouterr().err
    assert "warning:" in err and "measured under load" in err and "180%" in err
    warn_over_peak([50.0, 180.0], "layer(s) ran", "int8")
    err = capsys.readouterr().err
    assert "warning" not in err and "int8 convs exceed it" in err
    warn_over_peak([50.0, 120.0], "layer(s) ran", "int8", dot_roof=True)
    err = capsys.readouterr().err
    assert "warning" not in err and "the int8 dot product's" in err and "AMX tiles" in err
    warn_over_peak([50.0, None], "layer(s) ran")
    assert capsys.readouterr().err == ""
    qdq = {"precision": "fp32", "layout_plan": {"convs": [{"precision": "int8"}]}}
    assert conv_precision(qdq) == "int8"
    assert conv_precision({"precision": "bf16", "layout_plan": {"convs": []}}) == "bf16"
    assert conv_precision({}) == "fp32"
