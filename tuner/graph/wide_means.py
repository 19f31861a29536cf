"""Large fp32 means accumulated in fp64: the legalization of ``relax.mean`` that convtune uses.

A mean over a feature map (``GlobalAveragePool``, ``ReduceMean`` over H and W: the squeeze of a
squeeze-excitation block) is one sum of tens of thousands of values. TOPI's mean adds them in
order, in fp32, so each addition rounds at the running sum's magnitude: over n terms the mean is
off by up to ~n·2⁻²⁴ relative, 4.8e-6 typical at 160×160 (numpy, sequential fp32 against fp64),
where onnxruntime's blocked sums stay near one rounding. A squeeze-excitation block multiplies the
whole feature map by a function of that mean, so the error reaches every later element: PP-OCRv6
tiny det (13 such blocks, the first over 160×160) came out 5.4e-4 from onnxruntime on its [0, 1]
map, 811 elements over the verification tolerance (2026-12-04, Zen 4), in the tuned build and the
unscheduled one alike; with its means in fp64, 6.6e-5 and none.

The fp64 accumulator lives inside the mean's own kernel: each fp32 element is converted as it is
added. Cast in, mean, cast out as three Relax ops cost a separate kernel writing the whole map in
fp64 (FuseOps never fuses an element-wise producer into a reduction): 0.23 ms of PP-OCRv6 tiny
det's 4.5. The sum stays memory-bound, so the conversion and the half-width adds are hidden by
the loads. Means over fewer than :data:`MIN_ELEMENTS` elements keep TOPI's fp32 sum: their
sequential error is below the verification's 1e-4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tvm import te
from tvm.ir import Op
from tvm.relax import BlockBuilder, Call, Expr

#: Elements per output below which a mean stays fp32: n·2⁻²⁴ < 1.6e-5 relative.
MIN_ELEMENTS = 256

_MEAN = Op.get("relax.mean")


def reduced_axes(call: Call) -> list[int]:
    """The axes the mean ``call`` reduces, non-negative and sorted."""
    rank = len(call.args[0].ty.shape)
    axis = call.attrs.axis
    return sorted({int(a) % rank for a in axis}) if axis is not None else list(range(rank))


def reduced_elements(call: Call) -> int | None:
    """How many input elements each output of the mean ``call`` sums (None: a symbolic dim)."""
    shape = call.args[0].ty.shape
    try:
        return math.prod(int(shape[a]) for a in reduced_axes(call))
    except TypeError:
        return None


def is_wide(call: Call) -> bool:
    """Whether the mean ``call`` is accumulated in fp64 (module docstring)."""
    elements = reduced_elements(call)
    return str(call.args[0].ty.dtype) == "float32" and (elements or 0) >= MIN_ELEMENTS


def wide_mean(data: te.Tensor, axes: Sequence[int], keepdims: bool) -> te.Tensor:
    """The fp32 mean of ``data`` over ``axes``, summed in fp64: TOPI's two blocks (the sum into
    an intermediate, the division) with the intermediate in fp64."""
    shape = [int(d) for d in data.shape]
    ks = {a: te.reduce_axis((0, shape[a]), name=f"k{a}") for a in axes}
    kept = [d for d in range(len(shape)) if d not in ks]
    out_shape = (
        [1 if d in ks else shape[d] for d in range(len(shape))]
        if keepdims
        else [shape[d] for d in kept]
    )

    def source(out: Sequence[te.Var]) -> tuple[object, ...]:
        kept_indices = iter([out[d] for d in kept] if keepdims else out)
        return tuple(ks[d] if d in ks else next(kept_indices) for d in range(len(shape)))

    total = te.compute(
        out_shape,
        lambda *i: te.sum(data[source(i)].astype("float64"), axis=list(ks.values())),
        name=f"{data.name}_red",
    )
    count = float(math.prod(shape[a] for a in axes))
    return te.compute(out_shape, lambda *i: (total(*i) / count).astype("float32"), name="T_divide")


def legalize_mean(bb: BlockBuilder, call: Call) -> Expr:
    """``relax.mean`` lowered to :func:`wide_mean` where :func:`is_wide`, else as TVM does."""
    if not is_wide(call):
        return _MEAN.get_attr("FLegalize")(bb, call)
    return bb.call_te(
        wide_mean,
        call.args[0],
        reduced_axes(call),
        bool(call.attrs.keepdims),
        primfunc_name_hint="mean",
    )
