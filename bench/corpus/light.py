"""Corpus entries: to be filled in."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Entry

ENTRIES: tuple[Entry, ...] = ()
