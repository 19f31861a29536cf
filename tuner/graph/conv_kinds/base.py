"""The extension point of the blocked layout pass (``tuner/graph/layout.py``): one kind of conv2d.

The pass asks the base kinds of ``CONV_KINDS`` (``__init__.py``) in order which one a conv is;
the first that answers decides whether it runs blocked and why not. A kind that is an
alternative algorithm of another (``variant_of``, e.g. Winograd of "dense") is then asked
whether the conv is eligible for it, and replaces its base kind where the caller asks for it.
The kind builds the conv's blocked Relax op and legalizes the calls it built.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from tvm.ir.expr import GenericConst
from tvm.relax import BlockBuilder, Call, Expr


@dataclass(frozen=True)
class ConvSite:
    """One NCHW/OIHW conv2d of static shape, as the layout pass sees it."""

    call: Call
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    groups: int
    #: The blocks of its input and output channels (``layout.channel_block``), None: no block.
    in_block: int | None
    out_block: int | None
    #: The narrowest block of the target (for the reason a conv stays NCHW).
    smallest: int
    #: Whether its input is held blocked already by the pass.
    input_blocked: bool
    #: The target's fp32 lanes (16 on AVX-512).
    lanes: int = 16
    #: Whether a whole register's FMA does twice a half register's work (``isa.full_width_fma``).
    full_width_fma: bool = False
    #: The precisions the target's AMX tiles multiply (``isa.amx_precisions``).
    amx: tuple[str, ...] = ()

    @property
    def attrs(self) -> Any:
        return self.call.attrs

    @property
    def constant_weight(self) -> bool:
        return isinstance(self.call.args[1], GenericConst)

    def weight_array(self) -> Any:
        """The constant weight as a numpy array (OIHW)."""
        return self.call.args[1].value.numpy()


@dataclass(frozen=True)
class Decision:
    """Whether a conv runs blocked as its kind, and the reason shown in the plan."""

    blocked: bool
    reason: str = ""


@dataclass(frozen=True)
class ConvOperands:
    """What a kind's builder gets: the input (blocked by ``data_block``, or NCHW when the kind
    does not read blocked), the weight (a constant, or the rewritten weight expression), the
    output's block and the algorithm's tile (0: none)."""

    data: Expr
    data_block: int | None
    weight: Expr
    out_block: int
    tile: int = 0


class ConvKind(ABC):
    """One kind of conv2d the blocked layout pass compiles."""

    name: ClassVar[str]
    #: Whether the kind reads its input blocked (``NCHW{a}c``); False: NCHW in (the stem).
    reads_blocked: ClassVar[bool] = True
    #: Whether its output is blocked (``NCHW{b}c``, the rest of the island reads it so);
    #: False: :meth:`build` returns the NCHW output itself (a kind that pads channels).
    writes_blocked: ClassVar[bool] = True
    #: The base kind this one is an alternative algorithm of (None: a base kind).
    variant_of: ClassVar[str | None] = None
    #: For a variant: the output tiles of the algorithm it offers (Winograd's F(m×m) sizes).
    tiles: ClassVar[tuple[int, ...]] = ()

    @abstractmethod
    def decide(self, site: ConvSite) -> Decision | None:
        """None when the conv is not of this kind; else whether it runs blocked, and why. For
        a variant: whether the conv is eligible for it (a blocked decision) or None."""

    def out_channels(self, site: ConvSite) -> int:
        """The output channels the blocked conv computes (the block is chosen for them)."""
        return site.w_shape[0]

    def computed_columns(self, site: ConvSite) -> int:
        """The kernel columns the blocked conv's reduction runs over."""
        return site.w_shape[3]

    def computed_in_channels(self, site: ConvSite) -> int:
        """The input channels the blocked conv's reduction runs over."""
        return site.w_shape[1]

    @abstractmethod
    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        """The conv's Relax expression: its output ``NCHW{b}c``, or NCHW when the kind does not
        :attr:`writes_blocked`."""

    def legalizes(self, call: Call) -> bool:
        """Whether a Relax conv2d call is one this kind built (and :meth:`legalize` lowers)."""
        return False

    def legalize(self, bb: BlockBuilder, call: Call) -> Expr:
        """Lower a call :meth:`legalizes` accepts to TIR."""
        raise NotImplementedError(self.name)

    def __repr__(self) -> str:
        return f"<conv kind {self.name}>"
