"""The host target: its CPU name minus the vector features the host (or its hypervisor) hides."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tvm.target import Target, codegen

from convtune.schedules.ops.isa import has_amx_int8, has_bf16, has_vnni, vector_lanes
from convtune.tuner.cpu_flags import cpu_flags
from convtune.tuner.target import (
    host_target_spec,
    make_target,
    masked_features,
    offered_features,
)

#: /proc/cpuinfo flags of a Zen 4 that shows all of its AVX-512.
ZEN4_FLAGS = {
    "avx",
    "avx2",
    "fma",
    "f16c",
    "gfni",
    "vaes",
    "vpclmulqdq",
    "avx512f",
    "avx512dq",
    "avx512ifma",
    "avx512cd",
    "avx512bw",
    "avx512vl",
    "avx512_bf16",
    "avx512vbmi",
    "avx512_vbmi2",
    "avx512_vnni",
    "avx512_bitalg",
    "avx512_vpopcntdq",
}


def test_a_cpu_that_shows_its_features_is_left_alone() -> None:
    assert masked_features("znver4", ZEN4_FLAGS) == []
    assert masked_features("znver4", set()) == [], "unreadable flags mask nothing"


def test_a_vm_hiding_avx512_masks_it_and_the_schedules_see_avx2() -> None:
    """The 2026-12-03 guest: family 25 model 17 (``znver4``), flags up to AVX2."""
    flags = {flag for flag in ZEN4_FLAGS if not flag.startswith("avx512")} - {"gfni"}
    masked = masked_features("znver4", flags)
    assert {"avx512f", "avx512vnni", "avx512bw", "avx512vl", "gfni"} <= set(masked)
    assert not {"avx2", "fma", "avx"} & set(masked)
    target = Target({"kind": "llvm", "mcpu": "znver4", "mattr": [f"-{f}" for f in masked]})
    assert vector_lanes(target) == 8
    assert not has_vnni(target)
    assert codegen.llvm_cpu_has_features(["avx2"], target)


def test_a_vm_underselling_its_cpu_gets_the_features_its_flags_show() -> None:
    """The 2026-12-05 guest: family 6 model 167, which LLVM names ``rocketlake``, with the AMX,
    AVX-512 BF16 and FP16 flags of a Sapphire Rapids host."""
    flags = ZEN4_FLAGS | {"amx_tile", "amx_int8", "amx_bf16", "avx512_fp16"}
    offered = offered_features("rocketlake", flags)
    assert offered == ["amx-tile", "amx-int8", "amx-bf16", "avx512bf16", "avx512fp16"]
    target = Target({"kind": "llvm", "mcpu": "rocketlake", "mattr": [f"+{f}" for f in offered]})
    assert has_amx_int8(target) and has_bf16(target)
    assert not has_amx_int8(Target({"kind": "llvm", "mcpu": "rocketlake"}))
    assert offered_features("sapphirerapids", flags) == [], "implied by the name already"
    assert offered_features("rocketlake", ZEN4_FLAGS) == ["avx512bf16"]


def test_host_target_runs_what_it_builds() -> None:
    """Whatever this host is, the target made for it has only features /proc/cpuinfo lists, and a
    kernel built for it runs here (one built for a hidden AVX-512 died of SIGILL)."""
    spec = host_target_spec()
    target = make_target()
    flags = cpu_flags()
    if flags:
        assert (vector_lanes(target) == 16) == ("avx512f" in flags), spec
        assert has_vnni(target) == ("avx512_vnni" in flags), spec
    script = textwrap.dedent(
        """
        import numpy as np, tvm
        from tvm import te
        from convtune.tuner.target import make_target
        n = 4096
        a = te.placeholder((n,), name="a")
        b = te.compute((n,), lambda i: a[i] * 2.0 + 1.0, name="b")
        sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
        (i,) = sch.get_loops(sch.get_sblock("b"))
        _, inner = sch.split(i, [None, 16])
        sch.vectorize(inner)
        f = tvm.compile(sch.mod, target=make_target())
        x = tvm.runtime.tensor(np.arange(n, dtype="float32"))
        y = tvm.runtime.tensor(np.zeros(n, dtype="float32"))
        f(x, y)
        assert np.allclose(y.numpy(), np.arange(n) * 2 + 1)
        print("ran")
        """
    )
    # In a child: an illegal instruction kills the process, not an exception.
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and "ran" in done.stdout, done.stderr[-2000:]
