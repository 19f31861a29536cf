"""The bf16-dot space: bf16×bf16→fp32 convs tensorized with ``vdpbf16ps``
(schedules/ops/dot_conv.py, schedules/ops/bf16_dot.py, schedules/lowering/bf16_dot.py,
schedules/spaces/bf16_dot.py).

A kernel is the TE conv of bf16 data and weights with an fp32 epilogue (bias, ReLU), scheduled
for each output-channel block and compared with a float64 numpy conv of the same bf16 values:
the products of bf16 numbers are exact in fp32, so only the order of the fp32 sums differs.
Running needs AVX-512 BF16 on the host; the assembly is checked for Zen 4 on any host.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import te
from tvm.ir import IRModule
from tvm.s_tir import Schedule

from convtune.schedules.lowering.pipeline import use_convtune_lowering
from convtune.schedules.ops.dot_conv import BF16, DOT_LANES, conv2d_nchwc_dot, pack_weight
from convtune.schedules.ops.isa import has_bf16
from convtune.schedules.spaces.bf16_dot import Bf16DotConvSpace
from convtune.schedules.spaces.dot_conv import OC_BLOCKS
from convtune.tuner.target import make_target
from tests.schedules.dot_conv_cases import (
    bf16_relu_arrays,
    from_blocked,
    to_blocked,
    with_each_column_block,
)
from tests.schedules.kernels import AVX512, assert_close, run

needs_bf16 = pytest.mark.skipif(
    not has_bf16(make_target(None)), reason="the host CPU has no AVX-512 BF16 (vdpbf16ps)"
)

#: (in channels, out channels, input block, size, kernel, stride, pads top/left/bottom/right)
CONFIGS = {
    "3x3-pad1": (32, 64, 16, 10, 3, 1, (1, 1, 1, 1)),
    "stride2": (16, 48, 16, 15, 3, 2, (1, 1, 1, 1)),
    "1x1": (64, 32, 16, 7, 1, 1, (0, 0, 0, 0)),
    "in-block-8": (24, 32, 8, 9, 3, 1, (1, 1, 1, 1)),
    # an RGB stem's data: one 4-channel chunk, two vdpbf16ps pairs a pixel
    "stem-7x7-stride2": (4, 32, 4, 20, 7, 2, (3, 3, 3, 3)),
}


def bf16_conv_func(ic: int, oc: int, block: int, size: int, kernel: int, stride: int, pads):
    """bf16 NCHW{block}c data, the 7-D weight tile, the op's conv, a bias and a ReLU in fp32."""
    data = te.placeholder((1, ic // block, size, size, block), "bfloat16", name="data")
    shape = (oc // DOT_LANES, ic // block, kernel, kernel, block // 2, DOT_LANES, 2)
    weight = te.placeholder(shape, "bfloat16", name="weight")
    bias = te.placeholder((oc // DOT_LANES, DOT_LANES), "float32", name="bias")
    conv = conv2d_nchwc_dot(data, weight, (stride, stride), pads, (1, 1), BF16)
    out = te.compute(
        conv.shape,
        lambda n, c, h, w, b: te.max(conv[n, c, h, w, b] + bias[c, b], 0.0),
        name="relu",
    )
    return IRModule({"main": te.create_prim_func([data, weight, bias, out])}), shape


def case(name: str, seed: int = 0):
    """The TE module, its arguments and the expected fp32 output (NCHW) of ``CONFIGS[name]``."""
    ic, oc, block, size, kernel, stride, pads = CONFIGS[name]
    x, w, bias, expected = bf16_relu_arrays(ic, oc, size, kernel, stride, pads, seed)
    mod, shape = bf16_conv_func(ic, oc, block, size, kernel, stride, pads)
    packed = pack_weight(w, block, BF16).reshape(shape)
    out = np.zeros((1, oc // DOT_LANES, *expected.shape[2:], DOT_LANES), np.float32)
    args = [to_blocked(x, block), packed, bias.reshape(-1, DOT_LANES), out]
    return mod, args, expected


def test_the_reference_is_the_unscheduled_kernel() -> None:
    """The layouts and the packing of :func:`case` describe the op: its unscheduled TIR (TVM's
    bf16 legalization, no bf16 instruction) computes the reference."""
    mod, args, expected = case("3x3-pad1")
    got = from_blocked(run(mod, args))
    assert_close(got, expected)
    assert np.mean(got > 0) > 0.3  # not all clipped by the ReLU


@needs_bf16
@pytest.mark.parametrize("name", list(CONFIGS))
def test_bf16_kernel_equals_the_reference(name: str) -> None:
    mod, args, expected = case(name)
    chunks = args[-1].shape[1]
    blocks = [c for c in OC_BLOCKS if chunks % c == 0]
    assert blocks
    for oc_inner in blocks:
        for columns, scheduled in with_each_column_block(
            mod, Bf16DotConvSpace().schedule, oc_inner
        ):
            got = from_blocked(run(scheduled, args))
            try:
                assert_close(got, expected)
            except AssertionError as exc:
                raise AssertionError(f"{oc_inner=} {columns=}") from exc


@pytest.mark.parametrize("oc_inner", OC_BLOCKS)
def test_the_kernel_is_vdpbf16ps_on_zmm_without_a_call(oc_inner: int) -> None:
    """Compiled for Zen 4 (on any host): the reduction is ``vdpbf16ps`` on 512-bit registers,
    at least one per accumulator chunk, and the LLVM wrapper is inlined (no call left)."""
    mod, _, _ = case("3x3-pad1")
    sch = Schedule(mod, seed=1)
    Bf16DotConvSpace().schedule(sch, oc_inner)
    use_convtune_lowering()
    asm = tvm.compile(sch.mod, target=make_target(AVX512)).mod.inspect_source("asm")
    dots = re.findall(r"^\s*vdpbf16ps\s+(.*)$", asm, re.MULTILINE)
    assert len(dots) >= oc_inner, dots
    assert all("%zmm" in operands for operands in dots), dots
    assert "convtune_dpbf16ps" not in asm
