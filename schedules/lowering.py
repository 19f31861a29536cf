"""What our compiles add to TVM's lowering, installed in one call by every place that compiles.

The candidate builder's workers, the model build and the kernel tests must lower alike, or a
candidate is measured as a kernel other than the one its artifact runs.
"""

from __future__ import annotations

from . import fast_math, prefetch


def use_convtune_lowering() -> None:
    """Install the fast exp (``fast_math.py``) and the prefetch pass (``prefetch.py``) in this
    process (idempotent)."""
    fast_math.use_fast_exp()
    prefetch.install()
