"""What our compiles add to TVM's lowering, installed in one call by every place that compiles.

The candidate builder's workers, the model build and the kernel tests must lower alike, or a
candidate is measured as a kernel other than the one its artifact runs.
"""

from __future__ import annotations

from typing import Any

import tvm

from . import fast_math
from .amx_tiles import ConfigureAmxTiles
from .bf16_dot import LinkDpbf16ps
from .denormals import FlushDenormals
from .peel_tails import NarrowPeeledLoops
from .prefetch import InjectPrefetch
from .reciprocals import LowerDivisions
from .stack_locals import KeepLocalsOnStack
from .table_lookup import PermuteTableReads

#: The pipeline name under which TVM's TIR pipeline plus our passes is registered.
PIPELINE = "s_tir"
#: Our passes, in order, after TVM's TIR pipeline and before its host passes (which turn
#: allocations into workspace calls, so ``KeepLocalsOnStack`` must come before them).
#: ``LinkDpbf16ps`` must follow TVM's bf16 legalization (in its pipeline), which would rewrite
#: the wrapper's operands. ``LowerDivisions`` expands erf and sigmoid before ``LowerIntrin`` (a
#: host pass) would. ``ConfigureAmxTiles`` must follow ``FlushDenormals``, which splits
#: each parallel loop into one chunk per task.
PASSES = (
    LowerDivisions, InjectPrefetch, KeepLocalsOnStack, LinkDpbf16ps, FlushDenormals,
    ConfigureAmxTiles, PermuteTableReads,
)  # fmt: skip
#: Our passes before TVM's pipeline, on the scheduled functions.
PRE_PASSES = (NarrowPeeledLoops,)

_installed = False


def _install_passes() -> None:
    global _installed
    if _installed:
        return
    from tvm.tirx import compilation_pipeline

    tvm_default = compilation_pipeline.PIPELINE_MAP[PIPELINE]

    def pipeline(**kwargs: Any) -> Any:
        passes, host, device = tvm_default(**kwargs)
        return tvm.transform.Sequential([*PRE_PASSES, passes, *PASSES]), host, device

    compilation_pipeline.register_tir_pipeline(PIPELINE, pipeline)
    _installed = True


def use_convtune_lowering() -> None:
    """Install the fast exp (``fast_math.py``) and our TIR passes (the prefetch of
    ``prefetch.py``, the stack locals of ``stack_locals.py``) in this process (idempotent)."""
    fast_math.use_fast_math()
    _install_passes()
