"""Jinja2 filters: how numbers read on the pages ("—" for anything not measured)."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment

DASH = "—"


def num(value: float | None, digits: int = 2) -> str:
    return DASH if value is None else f"{value:,.{digits}f}"


def pct(value: float | None, digits: int = 1) -> str:
    """A fraction (0.25) as a percentage ("25.0 %")."""
    return DASH if value is None else f"{100.0 * value:.{digits}f} %"


def flops(value: float | None) -> str:
    """FLOPs with an SI prefix: 1.5e9 → "1.50 G"."""
    if value is None:
        return DASH
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}"
    return f"{value:.0f}"


def size(value: int | None) -> str:
    if value is None:
        return DASH
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


def gap_class(gap: float | None) -> str:
    """CSS class of a layer's time / onnxruntime's: faster, within 10 %, slower, far slower."""
    if gap is None:
        return "gap-none"
    if gap < 0.9:
        return "gap-faster"
    if gap <= 1.1:
        return "gap-even"
    return "gap-slower" if gap <= 2.0 else "gap-far"


def install_filters(env: Environment) -> None:
    filters: dict[str, Any] = {
        "num": num,
        "pct": pct,
        "flops": flops,
        "size": size,
        "gap_class": gap_class,
    }
    env.filters.update(filters)
