"""The options of a tuning job, each defined once: the CLI, the API schema, the worker, the
extractor and the manifest all take their names, choices and defaults from here.

This module imports nothing heavy: the CLI's ``--help`` and the API process read it without TVM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

_Choice = TypeVar("_Choice", bound=StrEnum)


def _parse(cls: type[_Choice], value: str, what: str) -> _Choice:
    """``value`` as a member of ``cls``; a ``ConvtuneError`` naming the choices otherwise."""
    try:
        return cls(value)
    except ValueError:
        from convtune.tuner.errors import ConvtuneError

        choices = ", ".join(repr(v.value) for v in cls)
        raise ConvtuneError(f"unknown {what} {value!r}: use one of {choices}") from None


class Layout(StrEnum):
    """Data layout the model's convolutions are compiled in."""

    #: Plain NCHW everywhere; only the generic MetaSchedule space.
    NCHW = "nchw"
    #: Blocked NCHW[x]c (x = the target's fp32 lanes) for convolutions whose channels divide by x,
    #: carried across the graph (tuner/graph/layout.py); the rest stay NCHW.
    NCHWC = "nchwc"

    @classmethod
    def parse(cls, value: str | Layout) -> Layout:
        """``value`` as a Layout; a ``ConvtuneError`` naming the choices otherwise."""
        return _parse(cls, value, "layout")


DEFAULT_LAYOUT = Layout.NCHWC


class Algorithm(StrEnum):
    """How a convolution layer computes: recorded per layer in the manifest."""

    #: The direct convolution (every space in schedules/ except Winograd's).
    DIRECT = "direct"
    #: Winograd F(m×m, 3×3) for blocked 3×3 stride-1 convs (schedules/ops/winograd_conv.py): fewer
    #: multiplies, larger rounding error (schedules/ops/winograd.py); tuned next to the direct
    #: kernel and built where it is faster (tuner/algorithms.py).
    WINOGRAD = "winograd"

    @classmethod
    def parse_list(cls, values: str | Sequence[str | Algorithm]) -> tuple[Algorithm, ...]:
        """``"direct,winograd"`` or a sequence of names as Algorithms; the direct convolution is
        always among them (every conv can run it). A ``ConvtuneError`` names the choices."""
        names = values.split(",") if isinstance(values, str) else list(values)
        parsed = [_parse(cls, str(name).strip(), "algorithm") for name in names]
        return tuple(a for a in cls if a is cls.DIRECT or a in parsed)


ALL_ALGORITHMS = tuple(Algorithm)


class Precision(StrEnum):
    """What the model's fp32 convolutions multiply in (a QDQ model's int8 convs stay int8)."""

    FP32 = "fp32"
    #: Opt-in: bf16 inputs and weights, fp32 sums (tuner/graph/bf16.py), on AVX-512 BF16 CPUs;
    #: verification allows the larger error (tuner/measure/verify.py, BF16_RTOL).
    BF16 = "bf16"

    @classmethod
    def parse(cls, value: str | Precision) -> Precision:
        """``value`` as a Precision; a ``ConvtuneError`` naming the choices otherwise."""
        return _parse(cls, value, "precision")


# Elementwise and pooling tasks have small spaces that converge in a few trials.
OTHER_TASK_TRIALS = 8


def task_budget(kind: str, trials_per_task: int) -> int:
    """Trials a task of ``kind`` ("conv", "gemm", "matmul" or "other") gets from a job."""
    return trials_per_task if kind != "other" else min(trials_per_task, OTHER_TASK_TRIALS)


@dataclass
class TuneOptions:
    """What a job asks for. Defaults here are the defaults of the CLI, the API and the worker."""

    target: str | None = None
    trials_per_task: int = 64
    #: Minutes for the search and the confirmation after it (the build and verification follow).
    budget_minutes: float | None = None
    threads: int | None = None
    seed: int = 0
    retune: bool = False
    layout: Layout = DEFAULT_LAYOUT
    #: The convolution algorithms the search may choose from, per layer by measurement.
    algorithms: tuple[Algorithm, ...] = ALL_ALGORITHMS
    precision: Precision = Precision.FP32
    #: A registered fleet (``convtune fleets add``) whose RPC devices measure; None: this host.
    fleet: str | None = None
    #: Re-measure each task's fastest records side by side before the build
    #: (tuner/search/confirm.py,
    #: within ``budget_minutes``: the search leaves it time); off: nothing is re-measured, and
    #: the build takes the fastest single measurements where no earlier job confirmed a record.
    confirm: bool = True
    #: After verification, time the artifact beside onnxruntime on the job's threads and, when
    #: it is slower, name the layers of the gap (tuner/peer_check.py): the job's last line.
    compare: bool = True

    def __post_init__(self) -> None:
        self.layout = Layout.parse(self.layout)
        self.algorithms = Algorithm.parse_list(self.algorithms)
        self.precision = Precision.parse(self.precision)

    @classmethod
    def from_dict(cls, values: dict[str, object]) -> TuneOptions:
        """Options from a stored job row's JSON: unknown keys ignored, missing ones defaulted."""
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in values.items() if k in known and v is not None})  # type: ignore[arg-type]
