"""Shared by the dot-product and AMX conv tests (int8-vnni, bf16-dot, int8-amx, bf16-amx):
NCHW ↔ NCHW{b}c, a numpy conv, a bf16 case, and a design scheduled with each column block its
space may sample."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import ml_dtypes
import numpy as np
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo


def to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def from_blocked(y: np.ndarray) -> np.ndarray:
    n, chunks, h, w, block = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, chunks * block, h, w)


def bf16_relu_arrays(
    ic: int, oc: int, size: int, kernel: int, stride: int, pads, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random bf16 data (NCHW) and weights (OIHW), an fp32 bias, and ReLU(conv + bias) in
    float64 of those bf16 values (their products are exact in fp32: a kernel differs only in
    the order of its sums), as fp32."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, ic, size, size)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((oc, ic, kernel, kernel)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(oc).astype(np.float32)
    conv = reference_conv(x.astype(np.float32), w.astype(np.float32), stride, pads, np.float64)
    expected = np.maximum(conv + bias.reshape(1, -1, 1, 1), 0).astype(np.float32)
    return x, w, bias, expected


def reference_conv(x: np.ndarray, w: np.ndarray, stride: int, pads, dtype=np.int64) -> np.ndarray:
    """NCHW × OIHW in ``dtype`` (int64: exact for integers), padded with 0."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(dtype), ((0, 0), (0, 0), (top, bottom), (left, right)))
    _, _, kh, kw = w.shape
    oh = (xp.shape[2] - kh) // stride + 1
    ow = (xp.shape[3] - kw) // stride + 1
    acc = np.zeros((x.shape[0], w.shape[0], oh, ow), dtype)
    for i in range(kh):
        for j in range(kw):
            rows = slice(i, i + stride * (oh - 1) + 1, stride)
            cols = slice(j, j + stride * (ow - 1) + 1, stride)
            patch = xp[:, :, rows, cols]
            acc += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(dtype))
    return acc


def with_each_column_block(
    mod: IRModule, schedule: Callable[[Schedule, int], None], oc_inner: int
) -> Iterator[tuple[int, IRModule]]:
    """``mod`` scheduled by ``schedule`` with ``oc_inner`` chunks and each column block the space
    may sample (a divisor of the output width, at most 28 accumulators): (columns, module)."""
    design = Schedule(mod, seed=1)
    schedule(design, oc_inner)
    (tile,) = [i for i in design.trace.insts if i.kind.name == "SamplePerfectTile"]
    width = int(ArgInfo.from_prim_func(mod["main"])[-1].shape[3])
    columns = [c for c in range(1, width + 1) if width % c == 0 and c * oc_inner <= 28]
    for c in columns:
        trace = design.trace.with_decision(tile, [width // c, c], remove_postproc=True)
        sch = Schedule(mod)
        trace.apply_to_schedule(sch, remove_postproc=True)
        yield c, sch.mod


def random_task_args(task: IRModule, seed: int = 3) -> list[np.ndarray]:
    """Random arguments for a real int8 conv task (u8 data, s8 weights, an s32 zero-point
    correction, then its float scale (sums of ~1e5 to a few units) and bias)."""
    rng = np.random.default_rng(seed)
    args: list[np.ndarray] = []
    floats = 0
    infos = ArgInfo.from_prim_func(task["main"])
    scalars = [i for i in infos if str(i.dtype) == "float32" and [int(d) for d in i.shape] == [1]]
    # An output quantize only its dequantize reads (fake_quantize.py): 1/s, the clamp, s.
    fake_quantize = iter((50.0, -40.0, 215.0, 0.02) if len(scalars) == 4 else ())
    for info in infos:
        shape, dtype = [int(d) for d in info.shape], str(info.dtype)
        if info in scalars and (value := next(fake_quantize, None)) is not None:
            args.append(np.full(shape, value, np.float32))
        elif dtype == "uint8":
            args.append(rng.integers(0, 256, shape, dtype=np.uint8))
        elif dtype == "int8":
            args.append(rng.integers(-128, 128, shape, dtype=np.int8))
        elif dtype == "int32":  # a zero-point correction
            args.append(rng.integers(-(2**16), 2**16, shape, dtype=np.int32))
        else:
            value = rng.uniform(1e-5, 3e-5, shape) if floats == 0 else rng.normal(0, 0.5, shape)
            args.append(value.astype(dtype))
            floats += 1
    return args
