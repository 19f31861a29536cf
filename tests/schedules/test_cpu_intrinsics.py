"""MetaSchedule's tune contexts load TVM's x86 tensor intrinsics only, once our spaces are in."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
import convtune.schedules.spaces.base
from tvm.s_tir import TensorIntrin
from tvm.s_tir import meta_schedule as ms

ms.TuneContext(target={"kind": "llvm"}, num_threads=1)  # imports tvm.s_tir.tensor_intrin
assert "tvm.s_tir.tensor_intrin" in sys.modules
loaded = sorted(n for n in sys.modules if n.startswith("tvm.s_tir.tensor_intrin."))
print(",".join(loaded))
TensorIntrin.get("dot_16x4_vnni")  # TVM's x86 intrinsics are registered
"""


def test_a_tune_context_parses_no_other_backends_intrinsics() -> None:
    """A fresh process: our spaces imported, then a TuneContext. TVM's own import would parse
    CUDA's, ROCm's, Arm's and Hexagon's intrinsics as well (40 s in a tuning process)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = done.stdout.strip().splitlines()[-1].split(",")
    assert "tvm.s_tir.tensor_intrin.x86" in loaded
    assert not any(
        name.rsplit(".", 1)[1] in {"cuda", "rocm", "arm_cpu", "hexagon"} for name in loaded
    )
