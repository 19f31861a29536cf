"""``--precision bf16``: fp32 convs as bf16 × bf16 → fp32 convs on AVX-512 BF16.

``vdpbf16ps`` adds two bf16 products into each of sixteen fp32 lanes: twice the multiply-adds of
an fp32 FMA per instruction, and half the bytes per activation and weight. With the opt-in
precision, each fp32 conv the dot-product kind blocks (``conv_kinds/dot.py``) becomes

    y = conv2d(bf16(x), bf16(W)) : fp32

with the weight rounded once here (to nearest, ties to even) and the activation's rounding an
element-by-element cast that fuses into the kernel producing it, so that kernel writes bf16.
Bias, BatchNorm (folded before this pass) and activations stay fp32 in the conv's epilogue. The RGB
stem (at most 4 input channels) becomes bf16 too, its data padded to 4 channels (``bf16-stem``, or
``bf16-amx-stem`` on tiles). Everything else (depthwise and grouped convs, channels no block holds,
Gemm/MatMul) stays fp32; :class:`Bf16Convs` says how many convs changed and why the others did not.
The error this costs is gated by verification (``tuner/measure/verify.py``, ``BF16_RTOL``).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from tvm import relax
from tvm.ir import IRModule, Op
from tvm.ir.expr import GenericConst
from tvm.relax import Call, Expr
from tvm.relax.expr_functor import PyExprMutator, mutator

from convtune.schedules.ops.dot_conv import BF16

from .conv_kinds import rewrite_refusal
from .conv_rewrites import ConvRewrites
from .rewrite import rewrite_functions

_CONV2D = Op.get("relax.nn.conv2d")


@dataclass
class Bf16Convs(ConvRewrites):
    """What :func:`bf16_convs` did: the convs it made bf16, and why the others stayed fp32."""

    #: Why no conv changed at all (the CPU), or "".
    refused: str = ""
    #: What runs them: "AVX-512 BF16", or "AMX-tile" where the target has AMX-BF16 (the layout
    #: pass then gives every conv a tile register block fits the AMX op, ``conv_kinds/amx.py``).
    kernels: str = "AVX-512 BF16"

    def notes(self) -> list[str]:
        """One line for the job's notes."""
        if self.refused:
            return [f"bf16: every conv stays fp32: {self.refused}"]
        return [self.line("bf16", f"convs run as bf16×bf16→fp32 {self.kernels} kernels")]


@mutator
class _Bf16ConvMutator(PyExprMutator):
    def __init__(self, mod: IRModule, lanes: int) -> None:
        super().__init__(mod)
        self.lanes = lanes
        self.result = Bf16Convs()

    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        if not call.op.same_as(_CONV2D) or str(call.args[0].ty.dtype) != "float32":
            return call
        reason = self._refusal(call)
        if reason:
            self.result.kept[reason] += 1
            return call
        self.result.converted += 1
        weight = call.args[1].value.numpy().astype(ml_dtypes.bfloat16)
        attrs = call.attrs
        return relax.op.nn.conv2d(
            relax.op.astype(call.args[0], BF16.data_dtype),
            relax.const(weight, BF16.weight_dtype),
            strides=attrs.strides,
            padding=attrs.padding,
            dilation=attrs.dilation,
            groups=int(attrs.groups),
            out_dtype=BF16.acc_dtype,
        )

    def _refusal(self, call: Call) -> str:
        attrs = call.attrs
        if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
            return "not a 2-D NCHW conv"
        if not isinstance(call.args[1], GenericConst):
            return "weights not constant"
        x_shape = tuple(int(d) for d in call.args[0].ty.shape)
        w_shape = tuple(int(d) for d in call.args[1].ty.shape)
        return rewrite_refusal(x_shape, w_shape, attrs, self.lanes)


def bf16_convs(
    mod: IRModule, lanes: int, bf16: bool, amx: bool = False
) -> tuple[IRModule, Bf16Convs]:
    """``mod`` (after constant folding) with its fp32 convs as bf16 convs where a target of
    ``lanes`` fp32 lanes, with AVX-512 BF16 or not, runs them so (``amx``: it has AMX-BF16
    tiles too)."""
    if not bf16:
        return mod, Bf16Convs(refused="the CPU has no AVX-512 BF16")
    rewriter = _Bf16ConvMutator(mod, lanes)
    rewriter.result.kernels = "AMX-tile" if amx else "AVX-512 BF16"
    return rewrite_functions(rewriter, mod), rewriter.result


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to bf16 (to nearest, ties to even) and back to fp32: what the kernels
    multiply."""
    return values.astype(ml_dtypes.bfloat16).astype(np.float32)
