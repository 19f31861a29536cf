"""Vector reads of 256-byte tables as ``vpermi2b`` (schedules/lowering/table_lookup.py): the
same bytes as numpy's indexing, and the instructions in the assembly, where the target has
AVX-512 VBMI; LLVM's own reads elsewhere."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import te
from tvm.s_tir import Schedule

from convtune.schedules.lowering.pipeline import use_convtune_lowering
from convtune.schedules.ops.isa import has_vbmi
from convtune.tuner.target import make_target
from tests.schedules.kernels import AVX512, run

needs_vbmi = pytest.mark.skipif(
    not has_vbmi(make_target(None)), reason="the host CPU has no AVX-512 VBMI (vpermi2b)"
)
#: The byte permutes LLVM may choose for the intrinsic (it commutes the table operands).
PERMUTES = r"\bvperm[it]2b\b"


def _table_read(lanes: int, dtype: str = "uint8", entries: int = 256, n: int = 1024):
    """``y[i] = table[x[i]]`` vectorized by ``lanes``."""
    x = te.placeholder((n,), "uint8", name="x")
    table = te.placeholder((entries,), dtype, name="table")
    y = te.compute((n,), lambda i: table[x[i].astype("int64")], name="y")
    sch = Schedule(tvm.IRModule({"main": te.create_prim_func([x, table, y])}))
    (loop,) = sch.get_loops(sch.get_sblock("y"))
    sch.vectorize(sch.split(loop, [None, lanes])[1])
    return sch.mod


def _asm(mod: tvm.IRModule, target: str) -> str:
    use_convtune_lowering()
    return tvm.compile(mod, target=make_target(target)).mod.inspect_source("asm")


@needs_vbmi
@pytest.mark.parametrize("lanes", [16, 32, 64])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_a_vector_table_read_is_numpys_indexing(lanes: int, dtype: str) -> None:
    rng = np.random.default_rng(lanes)
    x = rng.integers(0, 256, 1024, dtype=np.uint8)
    table = rng.integers(-128 if dtype == "int8" else 0, 128 if dtype == "int8" else 256, 256)
    table = table.astype(dtype)
    got = run(_table_read(lanes, dtype), [x, table, np.zeros(1024, dtype)])
    np.testing.assert_array_equal(got, table[x])


@pytest.mark.parametrize("lanes", [16, 64])
def test_vbmi_targets_permute_and_others_gather(lanes: int) -> None:
    """Zen 4 (VBMI): byte permutes and no lane-by-lane inserts; Skylake-SP (AVX-512 without
    VBMI): LLVM's scalarized read, one insert per lane."""
    zen4 = _asm(_table_read(lanes), AVX512)
    assert re.search(PERMUTES, zen4) and "vpinsrb" not in zen4
    skylake = _asm(_table_read(lanes), "llvm -mcpu=skylake-avx512 -num-cores=2")
    assert not re.search(PERMUTES, skylake) and "vpinsrb" in skylake


def test_only_256_entry_tables_are_read_so() -> None:
    assert not re.search(PERMUTES, _asm(_table_read(16, entries=128), AVX512))
