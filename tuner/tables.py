"""Report tables, defined once: the same columns print in the terminal and in Markdown reports.

A :class:`Column` says where a cell's value comes from and how it is formatted; ``markdown`` and
``rich_table`` render a list of row dicts with it. ``convtune bench``/``profile`` and
``bench/run.py`` share :data:`BENCH_COLUMNS` and :data:`PROFILE_COLUMNS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

MISSING = "–"


def fmt(value: float | None, spec: str) -> str:
    """``value`` formatted with ``spec``; the dash for a missing figure."""
    return MISSING if value is None else format(value, spec)


def clock(seconds: float) -> str:
    """A duration as a clock reads, ``1:05`` or ``2:01:05`` (negative: ``0:00``): the CLI's live
    view, the server log and the dashboard print elapsed time, budget left and ETA alike."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[dict[str, Any]], Any]
    spec: str = ""  # format spec for numbers; "" = str()
    numeric: bool = True
    suffix: str = ""

    def cell(self, row: dict[str, Any]) -> str:
        value = self.value(row)
        if not self.spec:
            return MISSING if value is None else f"{value}{self.suffix}"
        return fmt(value, self.spec) + (self.suffix if value is not None else "")


def _key(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: row.get(name)


def _scaled(name: str, factor: float) -> Callable[[dict[str, Any]], Any]:
    return lambda row: None if not row.get(name) else row[name] * factor


def short_nodes(nodes: Sequence[str], shown: int = 3) -> str:
    """The first ``shown`` node names and how many more."""
    extra = f" +{len(nodes) - shown}" if len(nodes) > shown else ""
    return ", ".join(nodes[:shown]) + extra


#: One row per contender of ``ModelBench.as_dict()["results"]`` with ``name`` added.
BENCH_COLUMNS: tuple[Column, ...] = (
    Column("contender", _key("name"), numeric=False),
    Column("median ms", _key("median_ms"), ".2f"),
    Column("p10 ms", _key("p10_ms"), ".2f"),
    Column("p90 ms", _key("p90_ms"), ".2f"),
    Column("rounds", _key("rounds")),
    Column("GFLOP/s", _key("gflops"), ".1f"),
    Column("% peak", _key("pct_peak"), ".1f"),
    Column("time / onnxruntime", _key("time_vs_ort"), ".2f"),
    Column("time / best peer", _key("time_vs_best_peer"), ".2f"),
)

#: One row per layer of ``profile_model``.
PROFILE_COLUMNS: tuple[Column, ...] = (
    Column("layer", _key("layer"), numeric=False),
    Column("op", _key("op"), numeric=False),
    Column("shape", _key("shape"), numeric=False),
    Column("ONNX nodes", lambda row: short_nodes(row["onnx_nodes"]), numeric=False),
    Column("MFLOP", _scaled("flops", 1e-6), ".1f"),
    Column("our ms", _key("ms"), ".3f"),
    Column("ort ms", _key("ort_ms"), ".3f"),
    Column("GFLOP/s", _key("gflops"), ".1f"),
    Column("% peak", _key("pct_peak"), ".1f"),
    Column("share", _scaled("share", 100.0), ".1f", suffix="%"),
)


def bench_rows(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """``ModelBench.as_dict()`` as table rows, contenders in run order."""
    return [{"name": name, **figures} for name, figures in bench["results"].items()]


def markdown(columns: Sequence[Column], rows: Sequence[dict[str, Any]]) -> list[str]:
    """A GitHub-flavoured Markdown table, numbers right-aligned."""
    lines = [
        "| " + " | ".join(c.header for c in columns) + " |",
        "|" + "|".join("---:" if c.numeric else "---" for c in columns) + "|",
    ]
    lines += ["| " + " | ".join(c.cell(row) for c in columns) + " |" for row in rows]
    return lines


def rich_table(columns: Sequence[Column], rows: Sequence[dict[str, Any]], title: str) -> Table:
    """The same table for the terminal."""
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c.header, justify="right" if c.numeric else "left")
    for row in rows:
        table.add_row(*(c.cell(row) for c in columns))
    return table


def layout_label(description: dict[str, Any], missing: str = "") -> str:
    """A conv layer's layout as the tables show it, naming Winograd where a task is one and the
    precision where it is not fp32 (an int8 conv of a QDQ model)."""
    layout = str(description.get("layout", missing))
    if description.get("precision", "fp32") != "fp32":
        layout = f"{layout} · {description['precision']}"
    tile = description.get("winograd_tile")
    return f"{layout} · Winograd F({tile}×{tile},3×3)" if tile else layout
