"""Old-opset PyTorch and tf2onnx exports (bench/corpus/legacy.py) tune with default options and
verify against onnxruntime (issue #35).

Before the import normalizer (tuner/normalize.py) none of them got through: the opset-11
segmenter was refused for its empty Resize ``scales``, the opset-9 super-resolution net for its
attribute-form Slice, the opset-9 face detector crashed in the frontend, and the tf2onnx CNN's
layout transforms are the #35 item 5 baseline.
"""

from __future__ import annotations

import pytest

from bench.corpus import legacy
from convtune.tuner.ingest import load_model
from convtune.tuner.options import TuneOptions
from convtune.tuner.pipeline import tune_model

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Renaming name:UserWarning")]


@pytest.mark.parametrize("entry", legacy.ENTRIES, ids=lambda e: e.name)
def test_legacy_export_tunes_and_verifies(entry, tmp_path, sqlite_engine) -> None:
    ingested = load_model(
        entry.load().SerializeToString(), dict(entry.input_shapes), name=entry.name
    )
    result = tune_model(
        ingested,
        tmp_path / "out",
        TuneOptions(trials_per_task=1, seed=0),
        engine=sqlite_engine,
    )
    assert result.manifest["verification"]["passed"]
