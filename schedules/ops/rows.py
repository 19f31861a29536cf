"""Elementwise blocks over rows: rows in parallel, the last axis in vectors, its tail peeled.

Shared by the spaces whose output block cannot sit under their kernel's loops: the row
reductions' normalisation (``row-reduce``) and a MatMul's epilogue that slices its padded
columns away (``matmul-regblock``).
"""

from __future__ import annotations

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import ExprRV, SBlockRV

from .annotations import PEEL_TAIL


def sample_width(sch: Schedule, vectors: tuple[int, ...], lanes: int) -> ExprRV:
    """A loop width of ``v`` vectors, ``v`` drawn from ``vectors``: a decision whose value is
    the width itself (a trace with ``v · lanes`` in it does not serialize to JSON)."""
    widths = [v * lanes for v in vectors]
    return sch.sample_categorical(widths, [1.0 / len(widths)] * len(widths))


def parallel_rows(
    sch: Schedule, block: SBlockRV, lanes: int, vectors: tuple[int, ...] = (1, 2, 4)
) -> None:
    """``block``'s leading loops fused and parallel, its last loop split into a sampled number
    of ``vectors`` and vectorized, the partial last vector peeled; a last axis narrower than a
    vector (a mean's division, one value per row) is parallel with the rest."""
    *rows, last = sch.get_loops(block)
    if int(sch.get(last).extent) < lanes:
        sch.parallel(sch.fuse(*rows, last) if rows else last)
        return
    outer, inner = sch.split(last, [None, sample_width(sch, vectors, lanes)])
    sch.annotate(outer, PEEL_TAIL, 1)
    sch.vectorize(inner)
    if rows:
        sch.parallel(sch.fuse(*rows) if len(rows) > 1 else rows[0])
