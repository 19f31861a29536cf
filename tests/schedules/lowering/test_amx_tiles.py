"""The AMX tile configuration pass (schedules/lowering/amx_tiles.py): each parallel task keeps
its thread's tile configuration and loads it back, so onnxruntime's AMX kernels, which load
theirs once per thread, still find it after one of ours ran on the same thread."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from convtune.schedules.ops.isa import has_amx_int8
from convtune.tuner.target import make_target

#: onnxruntime's QDQ Gemm (its AMX QGEMM), one of our AMX kernels, onnxruntime
#: again: in one process, as the job's comparison and a user's program run them.
_ONNXRUNTIME_AFTER_OURS = textwrap.dedent(
    """
    import numpy as np
    import onnxruntime as ort
    from bench.qdq import quantize_qdq
    from tests import models
    from tests.schedules.kernels import run
    from tests.schedules.spaces.test_amx_conv import amx_case, designs, schedule_amx_conv
    from tvm.s_tir import Schedule

    qdq = quantize_qdq(models.gemm_model(m=64, k=256, n=256))  # its QGemm: MLAS on tiles
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # its kernels on this thread, as ours
    session = ort.InferenceSession(models.to_bytes(qdq), options, ["CPUExecutionProvider"])
    feeds = models.random_inputs(qdq, seed=0)
    before = session.run(None, feeds)[0]
    mod, args, _ = amx_case("3x3-two-pixel-tiles")
    sch = Schedule(mod)
    schedule_amx_conv(sch, designs(mod)[0])
    run(sch.mod, args)
    after = session.run(None, feeds)[0]
    assert np.array_equal(before, after)
    print("onnxruntime ran after our AMX kernel")
    """
)


@pytest.mark.skipif(
    not has_amx_int8(make_target(None)), reason="the host CPU has no AMX-INT8 (tdpbusd)"
)
def test_onnxruntime_runs_its_amx_kernels_after_ours_in_one_process() -> None:
    """Without the kept configuration onnxruntime's next ``tdpbusd`` met our tile shapes and
    the process died of SIGILL (Emerald Rapids VM, 2026-12-06): run in a child process."""
    env = {**os.environ, "TVM_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _ONNXRUNTIME_AFTER_OURS],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "onnxruntime ran after our AMX kernel" in done.stdout
