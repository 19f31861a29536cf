"""Which algorithm each convolution is built with, chosen from what the search measured.

A conv that may run as Winograd has several tasks: its direct kernel and one Winograd kernel per
tile size (``extract.extract_tasks``). Each is tuned like any task; the build then gives every
such conv the algorithm whose best kernel is fastest.

In a model the weights of a layer were last read one inference ago and come from memory, and
Winograd's transformed weights are α²/9 times the direct ones (4× for F(4×4)). Trials are timed
with the weights flushed from the caches (``db.models.CURRENT_TIMING``), so a measured time
already pays for streaming them; before that, timed warm, ResNet-50's 512→512 3×3 conv measured
0.88 ms as F(4×4) against 1.19 ms direct on a Zen 4, though its 37.7 MB of F(4×4) weights take
1.45 ms to stream at 26 GB/s. Records timed warm are no longer read, but the bound stays as a
floor: each candidate is judged by the larger of its measured time and the time to read its
weights at the machine's memory bandwidth.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Engine
from tvm.target import Target

from convtune.schedules.ops.winograd_conv import weight_itemsize
from convtune.tuner.graph.extract import ModelTask

#: fp32 bytes.
FP32_BYTES = 4


@dataclass(frozen=True)
class Candidate:
    """One way to compute one conv: its task's best time and the weights it streams."""

    tile: int  # 0: the direct convolution
    measured_ms: float
    weight_bytes: int

    def estimate_ms(self, bandwidth_gbs: float) -> float:
        return max(self.measured_ms, self.weight_bytes / (bandwidth_gbs * 1e6))


def weight_bytes(task: ModelTask, itemsize: int = FP32_BYTES) -> int:
    """Bytes of the conv's weights as the task reads them: CO·CI·3·3, or CO·CI·α² transformed,
    of ``itemsize`` bytes each."""
    co, ci, kh, kw = task.description["weight"]
    taps = (task.winograd_tile + 2) ** 2 if task.winograd_tile else kh * kw
    return int(co * ci * taps * itemsize)


def choose_winograd(
    tasks: Sequence[ModelTask], best_ms: Mapping[str, float | None], bandwidth_gbs: float
) -> dict[int, int]:
    """Conv index → Winograd tile for every conv whose best Winograd kernel beats its direct one
    (``best_ms`` by task ``shash``; a task never measured is no candidate). A conv's weights
    are of the element size its Winograd kernels read (2 bytes for ``--precision bf16``), the
    direct kernel's precision too."""
    itemsize = {
        conv: weight_itemsize(task.mod)
        for task in tasks
        if task.winograd_tile
        for conv in task.convs
    }
    candidates: dict[int, list[Candidate]] = {}
    for task in tasks:
        measured = best_ms.get(task.shash)
        if measured is None:
            continue
        for conv in itemsize.keys() & set(task.convs):
            candidates.setdefault(conv, []).append(
                Candidate(task.winograd_tile, measured, weight_bytes(task, itemsize[conv]))
            )
    chosen = {}
    for conv, options in candidates.items():
        best = min(options, key=lambda c: (c.estimate_ms(bandwidth_gbs), c.tile))
        if best.tile:
            chosen[conv] = best.tile
    return chosen


def memory_bandwidth(engine: Engine, target: Target, threads: int) -> float:
    """GB/s: the stream-triad bandwidth stored for ``target`` (``convtune peak``), else measured
    now in a fraction of a second."""
    from convtune.tuner.measure.peak import measure_bandwidth
    from convtune.tuner.measure.results import stored_peak

    stored = stored_peak(engine, target)
    if stored is not None and stored.bandwidth_gbs:
        return float(stored.bandwidth_gbs)
    return measure_bandwidth(threads, repeats=2)


def time_with_alternatives(layers: Iterable[tuple[Sequence[int], float | None]]) -> float:
    """The model's time from per-task times (``None``: unknown): a sum in which tasks computing
    the same convs (``convs``, a direct kernel and its Winograd alternatives) count once, with
    the fastest known of them, as the build would choose."""
    total = 0.0
    fastest: dict[tuple[int, ...], float] = {}
    for convs, seconds in layers:
        if not convs:
            total += seconds or 0.0
        elif seconds is not None:
            key = tuple(sorted(convs))
            fastest[key] = min(fastest.get(key, seconds), seconds)
    return total + sum(fastest.values())


def manifest_winograd(manifest: Mapping[str, object]) -> dict[int, int]:
    """The convs an artifact's build made Winograd (conv index → tile), from its manifest."""
    chosen = manifest.get("winograd") or {}
    assert isinstance(chosen, dict)
    return {int(conv): int(tile) for conv, tile in chosen.items()}
