"""Small real TIR workloads and schedules for the database tests."""

from __future__ import annotations

import tvm
from tvm import te
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from convtune.tuner.target import host_target_spec

#: This host's CPU: the tuning tests run what they build (an AVX-512 target on a Zen 3 host
#: built kernels that died on their first instruction).
HOST_CPU = host_target_spec()["mcpu"]
TARGET = Target({**host_target_spec(), "num-cores": 2})
OTHER_TARGET = Target({**host_target_spec(), "num-cores": 1})


def matmul(
    n: int = 64, m: int | None = None, k: int | None = None, name: str = "C"
) -> tvm.IRModule:
    """C[n, m] = A[n, k] @ B[k, m] in float32, as a one-function IRModule named "main"; the
    block is named ``name`` (structural equality ignores it)."""
    m = n if m is None else m
    k = n if k is None else k
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name=name)
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def tiled_schedule(mod: tvm.IRModule, inner: int = 8, seed: int = 1, name: str = "C") -> Schedule:
    """A traced schedule with a sampling instruction (its decision must replay) and a split."""
    sch = Schedule(mod, seed=seed)
    block = sch.get_sblock(name)
    i, j, _ = sch.get_loops(block)
    i_factors = sch.sample_perfect_tile(i, n=2)
    sch.split(i, factors=i_factors)
    _, j_inner = sch.split(j, factors=[None, inner])
    sch.vectorize(j_inner)
    sch.parallel(sch.get_loops(block)[0])
    return sch


def args_info(mod: tvm.IRModule) -> list[ArgInfo]:
    return list(ArgInfo.from_prim_func(mod["main"]))
