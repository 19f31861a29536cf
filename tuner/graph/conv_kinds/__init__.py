"""The conv kinds of the blocked layout pass, in the order it asks them (``base.py`` has the
contract). Adding a kind, or an algorithm such as Winograd (``variant_of`` its base kind): one
module here with a :class:`~.base.ConvKind` subclass, and one line in ``CONV_KINDS``.
"""

from __future__ import annotations

from .amx import Bf16AmxKind, Bf16AmxStemKind, Int8AmxKind, Int8AmxStemKind
from .base import ConvKind, ConvOperands, ConvSite, Decision
from .dense import DenseKind
from .depthwise import DepthwiseKind
from .dot import Bf16Kind, Bf16StemKind, Int8Kind, Int8StemKind, dot_refusal, rewrite_refusal
from .padded_out import PaddedOutputKind, PaddedStemKind, PaddedWideKind
from .stem import StemKind
from .winograd import Bf16WinogradKind, WinogradKind

#: Base kinds are asked in this order (the first that answers decides; dense, the catch-all,
#: last); variants are asked after their base kind decided to block a conv.
CONV_KINDS: tuple[ConvKind, ...] = (
    Int8AmxKind(),
    Int8AmxStemKind(),
    Int8StemKind(),
    Int8Kind(),
    Bf16AmxKind(),
    Bf16AmxStemKind(),
    Bf16StemKind(),
    Bf16Kind(),
    Bf16WinogradKind(),
    DepthwiseKind(),
    StemKind(),
    WinogradKind(),
    PaddedOutputKind(),
    PaddedStemKind(),
    PaddedWideKind(),
    DenseKind(),
)


def base_kind(site: ConvSite) -> tuple[ConvKind, Decision]:
    """The base kind of a conv and its decision (the catch-all kind always answers)."""
    for kind in CONV_KINDS:
        if kind.variant_of is None:
            decision = kind.decide(site)
            if decision is not None:
                return kind, decision
    raise LookupError(f"no conv kind answers for {site.call.op}")  # the catch-all is missing


def variants_of(kind: ConvKind) -> list[ConvKind]:
    """The alternative algorithms registered for a base kind."""
    return [variant for variant in CONV_KINDS if variant.variant_of == kind.name]


__all__ = [
    "CONV_KINDS",
    "ConvKind",
    "ConvOperands",
    "ConvSite",
    "Decision",
    "base_kind",
    "dot_refusal",
    "rewrite_refusal",
    "variants_of",
]
