"""QDQ convs as integer convs: DequantizeLinear → Conv becomes a u8×s8→s32 conv and a scale.

A QDQ model (onnxruntime's ``quantize_static``, Intel Neural Compressor, PyTorch's exporters)
holds every conv as ``conv(dequantize(x_q, s_x, z_x), dequantize(w_q, s_w, 0)) + bias`` followed
by ``quantize``. TVM's frontend imports it as such and runs it in fp32: ``FoldConstant`` turns
the weight's dequantize into float weights, so the integers are lost unless this pass runs first.
It rewrites each such conv, where the target has AVX-512 VNNI and the conv kind ``int8`` (or, for an
RGB stem of at most 4 channels, ``int8-stem``) blocks it (``conv_kinds/dot.py``), into

    acc = conv2d(x_q, w_q) : s32                         # vpdpbusd, 4 MACs a lane
    y   = float(acc - z_x·Σw) · (s_x·s_w)                # per output channel

with ``x_q`` padded by its zero point where the conv pads (the padding's real value is 0). The
bias, activation and output ``quantize`` that follow are left as they are: element by element,
they fuse into the conv's kernel as its epilogue, and the u8 tensor it writes is what the next
conv reads, so the int8 tensors run from conv to conv in the blocked layout
(``layout.py`` carries quantize/dequantize with scalar parameters).

Everything else keeps its QDQ form and runs in fp32, exactly as onnxruntime's reference defines
it: convs of other shapes (depthwise, grouped, channels no block holds), s8 or per-channel
activations, weights with a zero point, Gemm/MatMul but the batch-1 ones (:meth:`_rewrite_gemv`).
:func:`integer_convs` says how many convs became integer and why the others did not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import relax
from tvm.ir import IRModule, Op
from tvm.ir.expr import GenericConst
from tvm.relax import Call, Expr
from tvm.relax.expr_functor import PyExprMutator, mutator

from convtune.schedules.ops.int8 import zero_point_correction

from .conv_kinds import rewrite_refusal
from .conv_rewrites import ConvRewrites
from .rewrite import rewrite_functions

_CONV2D = Op.get("relax.nn.conv2d")
_MATMUL = Op.get("relax.matmul")
_PERMUTE = Op.get("relax.permute_dims")
_DEQUANTIZE = Op.get("relax.dequantize")
#: A batch-1 Gemm's outputs are padded to whole groups of this many (4 chunks of 16 lanes), so
#: every output-channel block of the dot-product space (1, 2, 4 chunks) divides them.
GEMV_OUTPUT_ALIGN = 64
_QDQ = (Op.get("relax.quantize"), _DEQUANTIZE)


@dataclass
class IntegerConvs(ConvRewrites):
    """What :func:`integer_convs` did: the convs it made integer, and why the others stayed
    fp32 (reason → count)."""

    #: What runs them: "VNNI", or "AMX-tile" where the target has AMX-INT8 (the layout pass
    #: then gives every conv a tile register block fits the AMX op, ``conv_kinds/amx.py``).
    kernels: str = "VNNI"
    #: Batch-1 QDQ Gemm/MatMul made integer (as 1×1 convs of one pixel), and those left fp32.
    gemvs: int = 0
    gemvs_kept: int = 0

    @property
    def quantized(self) -> bool:
        """Whether the model had any QDQ conv."""
        return self.converted > 0 or bool(self.kept)

    def notes(self) -> list[str]:
        """One line for the job's notes, or none for a model without QDQ convs."""
        if not self.quantized:
            return []
        line = self.line("int8", f"quantized convs run as u8×s8 {self.kernels} kernels")
        if self.gemvs:  # (none: the Gemms stay fp32 as they always did, no news)
            total = self.gemvs + self.gemvs_kept
            line += f"; {self.gemvs} of {total} batch-1 Gemm/MatMul as u8×s8 VNNI kernels"
        return [line]


def _const(expr: Expr) -> np.ndarray | None:
    return expr.value.numpy() if isinstance(expr, GenericConst) else None


@mutator
class _IntegerConvMutator(PyExprMutator):
    def __init__(self, mod: IRModule, lanes: int, vnni: bool) -> None:
        super().__init__(mod)
        self.lanes = lanes
        self.vnni = vnni
        self.result = IntegerConvs()

    def _dequantize(self, expr: Expr) -> Call | None:
        if isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            if isinstance(bound, Call) and bound.op.same_as(_DEQUANTIZE):
                return bound
        return None

    def _transposed_dequantize(self, expr: Expr) -> Call | None:
        """The dequantize whose (N, K) result ``expr`` transposes, if it is one."""
        if isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            if isinstance(bound, Call) and bound.op.same_as(_PERMUTE):
                axes = bound.attrs.axes
                if axes is not None and [int(a) for a in axes] == [1, 0]:
                    return self._dequantize(bound.args[0])
        return None

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        new = None
        if isinstance(value, Call) and value.op.same_as(_CONV2D):
            data, weight = self._dequantize(value.args[0]), self._dequantize(value.args[1])
            if data is not None and weight is not None:
                new = self._rewrite(value, data, weight)
        elif isinstance(value, Call) and value.op.same_as(_MATMUL):
            new = self._rewrite_gemv(value)
        if new is not None:
            emitted = self.builder_.emit(new, name_hint=binding.var.name)
            self.set_var_remap(binding.var, emitted)
            return
        super().visit_var_binding_(binding)

    def _rewrite_gemv(self, matmul: Call) -> Expr | None:
        """A batch-1 QDQ Gemm/MatMul ``dequantize(x_q) @ dequantize(w_q)[ᵀ]`` as the integer 1×1
        conv of a one-pixel image with K input and N output channels (N padded to
        :data:`GEMV_OUTPUT_ALIGN`, the padding's weights and scales zero), then its (1, N) row.

        Its measured reason (Zen 4, 2 threads, 2026-12-06): ResNet-50 QDQ's 2048→1000 classifier
        streamed 8 MB of fp32 weights in 0.33-0.45 ms, onnxruntime's integer node 2 MB in 0.12.
        """
        data = self._dequantize(matmul.args[0])
        transposed = self._transposed_dequantize(matmul.args[1])
        weight = transposed if transposed is not None else self._dequantize(matmul.args[1])
        if data is None or weight is None:
            return None
        x_shape = tuple(int(d) for d in data.args[0].ty.shape)
        w_q = _const(weight.args[0])
        if len(x_shape) != 2 or x_shape[0] != 1 or w_q is None or w_q.ndim != 2:
            return None
        w_scale = _const(weight.args[1])
        if transposed is None:  # (K, N): a per-output scale would be along axis 1
            if w_scale is None or w_scale.size != 1:
                self.result.gemvs_kept += 1
                return None
            w_q = w_q.T
        out_channels, in_channels = w_q.shape
        padded = -(-out_channels // GEMV_OUTPUT_ALIGN) * GEMV_OUTPUT_ALIGN
        w_oihw = np.zeros((padded, in_channels, 1, 1), w_q.dtype)
        w_oihw[:out_channels, :, 0, 0] = w_q
        pixel_shape = (1, in_channels, 1, 1)
        # (a refused rewrite leaves this reshape dead: DeadCodeElimination drops it)
        x_q = self.builder_.emit(relax.op.reshape(self.visit_expr(data.args[0]), pixel_shape))
        attrs = relax.op.nn.conv2d(x_q, relax.const(w_oihw)).attrs  # a 1×1 conv's defaults
        if self._refusal(data, weight, w_oihw, attrs, pixel_shape):
            self.result.gemvs_kept += 1
            return None
        self.result.gemvs += 1
        scale = np.zeros(padded, np.float32)
        scale[:out_channels] = self._scale(data, weight, out_channels)
        scaled = self.builder_.emit(self._integer_conv(x_q, w_oihw, attrs, data, scale))
        row = self.builder_.emit(relax.op.reshape(scaled, (1, padded)))
        return relax.op.strided_slice(row, axes=[1], begin=[0], end=[out_channels])

    def _keep(self, reason: str) -> None:
        self.result.kept[reason] += 1

    def _refusal(
        self,
        data: Call,
        weight: Call,
        w_q: np.ndarray | None,
        attrs: Any,
        x_shape: tuple[int, ...],
    ) -> str:
        """Why the integer conv of ``dequantize(x_q)`` and ``dequantize(w_q)`` (OIHW) cannot
        run, or ""."""
        x_scale, x_zero = _const(data.args[1]), _const(data.args[2])
        w_scale, w_zero = _const(weight.args[1]), _const(weight.args[2])
        x_dtype = str(data.args[0].ty.dtype)
        if x_dtype != "uint8":
            return f"{x_dtype} activations"
        if x_scale is None or x_zero is None or x_scale.size != 1 or x_zero.size != 1:
            return "per-channel activation scales"
        if w_q is None or w_scale is None or w_zero is None or str(w_q.dtype) != "int8":
            return "weights not constant s8"
        if np.any(w_zero != 0) or (w_scale.size != 1 and int(weight.attrs.axis) != 0):
            return "weights with a zero point"
        if not self.vnni:
            return "the CPU has no AVX-512 VNNI"
        return rewrite_refusal(x_shape, w_q.shape, attrs, self.lanes)

    def _rewrite(self, conv: Call, data: Call, weight: Call) -> Expr | None:
        w_q = _const(weight.args[0])
        attrs = conv.attrs
        if str(attrs.data_layout) != "NCHW" or (w_q is not None and w_q.ndim != 4):
            self._keep("not a 2-D NCHW conv")
            return None
        x_shape = tuple(int(d) for d in data.args[0].ty.shape)
        refusal = self._refusal(data, weight, w_q, attrs, x_shape)
        if refusal:
            self._keep(refusal)
            return None
        assert w_q is not None
        self.result.converted += 1
        scale = self._scale(data, weight, w_q.shape[0])
        return self._integer_conv(self.visit_expr(data.args[0]), w_q, attrs, data, scale)

    @staticmethod
    def _scale(data: Call, weight: Call, channels: int) -> np.ndarray:
        """``s_x·s_w`` per output channel (fp32)."""
        x_scale, w_scale = _const(data.args[1]), _const(weight.args[1])
        assert x_scale is not None and w_scale is not None
        scale = x_scale.astype(np.float64).reshape(()) * w_scale.astype(np.float64)
        return np.broadcast_to(scale.astype(np.float32).reshape(-1), (channels,))

    def _integer_conv(
        self, x_q: Expr, w_q: np.ndarray, attrs: Any, data: Call, scale: np.ndarray
    ) -> Expr:
        """``float(conv2d(x_q, w_q) − z_x·Σw) · scale``, ``x_q`` padded by its zero point."""
        x_zero = _const(data.args[2])
        assert x_zero is not None
        zero = int(x_zero.reshape(()))
        padding = [int(p) for p in attrs.padding]
        if zero and any(padding):
            top, left, bottom, right = padding
            x_q = self.builder_.emit(
                relax.op.nn.pad(x_q, [0, 0, 0, 0, top, bottom, left, right], "constant", zero)
            )
            padding = [0, 0, 0, 0]
        acc = self.builder_.emit(
            relax.op.nn.conv2d(
                x_q,
                relax.const(w_q, "int8"),
                strides=attrs.strides,
                padding=padding,
                dilation=attrs.dilation,
                out_dtype="int32",
            )
        )
        if zero:
            correction = relax.const(zero_point_correction(w_q, zero), "int32")
            acc = self.builder_.emit(relax.op.add(acc, correction))
        per_channel = relax.const(scale.reshape(1, -1, 1, 1).astype(np.float32), "float32")
        return relax.op.multiply(relax.op.astype(acc, "float32"), per_channel)


def integer_convs(
    mod: IRModule, lanes: int, vnni: bool, amx: bool = False
) -> tuple[IRModule, IntegerConvs]:
    """``mod`` (as TVM's ONNX frontend made it, before constant folding) with its QDQ convs as
    integer convs where a target of ``lanes`` fp32 lanes, with VNNI or not, runs them so
    (``amx``: it has AMX-INT8 tiles too)."""
    mutator_ = _IntegerConvMutator(mod, lanes, vnni)
    mutator_.result.kernels = "AMX-tile" if amx else "VNNI"
    out = relax.transform.DeadCodeElimination()(rewrite_functions(mutator_, mod))
    return out, mutator_.result


@mutator
class _SingletonQParams(PyExprMutator):
    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        if not any(call.op.same_as(op) for op in _QDQ):
            return call
        params = [
            relax.const(arg.value.numpy().reshape(1), str(arg.ty.dtype))
            if isinstance(arg, GenericConst) and arg.ty.ndim == 0
            else arg
            for arg in call.args[1:]
        ]
        return relax.Call(call.op, [call.args[0], *params], call.attrs, call.ty_args)


def singleton_qparams(mod: IRModule) -> IRModule:
    """``mod`` with the scalar scales and zero points of its quantize/dequantize ops as
    one-element tensors.

    TVM's legalization writes a 0-d constant into the kernel as a literal, so two convs of the
    same shape whose output scales differ became two tasks, each searched on its own: ResNet-50
    QDQ had 59 tasks. A one-element tensor is a kernel argument (read as ``scale[0]``), and convs
    of the same shape and epilogue are one task again (35).
    """
    return rewrite_functions(_SingletonQParams(mod), mod)
