"""Job options are defined once (tuner/options.py) and every layer takes them from there."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from convtune.service.app.schemas import JobCreate
from convtune.service.cli import tune
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.options import (
    DEFAULT_LAYOUT,
    OTHER_TASK_TRIALS,
    Algorithm,
    Layout,
    Precision,
    TuneOptions,
    task_budget,
)


def test_layout_parse_accepts_values_and_names_the_choices_otherwise() -> None:
    assert Layout.parse("nchw") is Layout.NCHW
    assert Layout.parse(Layout.NCHWC) is Layout.NCHWC
    with pytest.raises(ConvtuneError, match=r"unknown layout 'nhwc'.*'nchw', 'nchwc'"):
        Layout.parse("nhwc")


def test_precision_is_fp32_unless_asked_and_names_the_choices() -> None:
    assert TuneOptions().precision is Precision.FP32
    assert TuneOptions.from_dict({"precision": "bf16"}).precision is Precision.BF16
    assert JobCreate(precision="bf16").precision is Precision.BF16  # type: ignore[arg-type]
    with pytest.raises(ConvtuneError, match=r"unknown precision 'fp16'.*'fp32', 'bf16'"):
        TuneOptions(precision="fp16")  # type: ignore[arg-type]


def test_tune_options_from_a_stored_job_row() -> None:
    options = TuneOptions.from_dict(
        {"trials_per_task": 3, "layout": "nchw", "budget_minutes": None, "from_the_future": 1}
    )
    assert options.trials_per_task == 3
    assert options.layout is Layout.NCHW
    assert options.budget_minutes is None
    assert TuneOptions.from_dict({}) == TuneOptions()
    with pytest.raises(ConvtuneError):
        TuneOptions(layout="blocked")  # type: ignore[arg-type]


def test_api_defaults_are_the_engine_defaults() -> None:
    body, engine = JobCreate(), TuneOptions()
    assert body.trials_per_task == engine.trials_per_task
    assert body.seed == engine.seed and body.retune == engine.retune
    assert body.layout is DEFAULT_LAYOUT == engine.layout
    assert tuple(body.algorithms) == engine.algorithms
    assert JobCreate(algorithms=[]).algorithms == [Algorithm.DIRECT]  # direct is always allowed
    # What the API stores is what the worker reads back.
    assert TuneOptions.from_dict(body.model_dump(mode="json")).layout is DEFAULT_LAYOUT


def test_every_option_reaches_the_api_and_the_cli_with_the_engine_default() -> None:
    engine, body = TuneOptions(), JobCreate()
    cli = inspect.signature(tune).parameters
    for field in dataclasses.fields(TuneOptions):
        expected = getattr(engine, field.name)
        api = getattr(body, field.name)
        assert (tuple(api) if isinstance(api, list) else api) == expected, field.name
        assert field.name in cli, f"convtune tune has no --{field.name.replace('_', '-')}"
        default = cli[field.name].default
        if field.name == "algorithms":
            default = Algorithm.parse_list(default)
        assert default == expected, field.name


@pytest.mark.parametrize(
    ("kind", "per_task", "expected"),
    [("conv", 64, 64), ("gemm", 3, 3), ("other", 64, OTHER_TASK_TRIALS), ("other", 2, 2)],
)
def test_task_budget(kind: str, per_task: int, expected: int) -> None:
    assert task_budget(kind, per_task) == expected
