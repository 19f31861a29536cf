"""The CPU's feature flags as the kernel reports them (stdlib only: `convtune --help` and
`convtune peak` import it without TVM)."""

from __future__ import annotations

import pathlib


def cpu_flags() -> set[str]:
    """The ``flags`` of the first processor in /proc/cpuinfo (empty set if unreadable)."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()
