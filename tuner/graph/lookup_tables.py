"""Quantized activations as 256-entry tables: ``quantize(f(dequantize(q)))`` becomes ``table[q]``.

In a QDQ model every activation sits between quantize pairs. YOLO's SiLU, for one, reads

    q1 = quantize(conv_out)
    q2 = quantize(sigmoid(dequantize(q1)))
    q3 = quantize(dequantize(q1) · dequantize(q2))

so ``q3`` is a function of the 8-bit ``q1`` alone: 256 values, computed once at build time. The
chain ran in fp32 in the conv's epilogue, three divisions and an exponential per element, and
took most of the int8 kernels' time where the conv does little arithmetic: on a Zen 4 VM, the
QDQ YOLOv8n-width detector's 32→32 1×1 conv at 80² took 0.156 ms where onnxruntime's takes
0.055 (its QDQ sigmoid is a lookup table too). After the rewrite the epilogue requantizes the
accumulator once and reads the table.

A chain qualifies when every leaf is a constant of one element or a ``dequantize`` of the same
8-bit tensor with scalar parameters, and every op is element by element (:data:`_NUMPY`); it is
evaluated here in numpy, with the same float32 arithmetic and round-half-to-even as the kernels,
on the 256 possible inputs. Chains with nothing to save (a bare requantization) are left alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.ir import IRModule, Op
from tvm.ir.expr import GenericConst
from tvm.relax import Call, Expr
from tvm.relax.expr_functor import PyExprMutator, mutator

from .rewrite import INTEGER_RANGES, is_op_call

_F32 = np.float32


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(_F32)


#: Element-by-element ops a table may replace, as numpy on float32 arrays.
_NUMPY: dict[str, Callable[..., np.ndarray]] = {
    "relax.sigmoid": _sigmoid,
    "relax.tanh": lambda x: np.tanh(x.astype(np.float64)).astype(_F32),
    "relax.exp": lambda x: np.exp(x.astype(np.float64)).astype(_F32),
    "relax.nn.relu": lambda x: np.maximum(x, _F32(0)),
    "relax.nn.silu": lambda x: (x * _sigmoid(x)).astype(_F32),
    "relax.add": lambda a, b: (a + b).astype(_F32),
    "relax.subtract": lambda a, b: (a - b).astype(_F32),
    "relax.multiply": lambda a, b: (a * b).astype(_F32),
    "relax.divide": lambda a, b: (a / b).astype(_F32),
    "relax.maximum": lambda a, b: np.maximum(a, b).astype(_F32),
    "relax.minimum": lambda a, b: np.minimum(a, b).astype(_F32),
}
#: Ops whose cost a table saves: without one of them the chain is a cheap requantization.
_COSTLY = frozenset(
    {"relax.sigmoid", "relax.tanh", "relax.exp", "relax.nn.silu", "relax.divide", "relax.quantize"}
)


class _NotATable(Exception):
    """The chain has an op, a leaf or a parameter a table cannot hold."""


def _scalar(expr: Expr) -> np.ndarray:
    if isinstance(expr, GenericConst) and expr.value.numpy().size == 1:
        return expr.value.numpy().reshape(())
    raise _NotATable


def _quantize(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, dtype: str) -> np.ndarray:
    low, high = INTEGER_RANGES[dtype]
    q = np.round(x / scale.astype(_F32)) + _F32(zero)
    return np.clip(q, low, high).astype(dtype)


def _dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    return ((q.astype(np.int32) - np.int32(zero)).astype(_F32) * scale.astype(_F32)).astype(_F32)


def _bindings(func: relax.Function) -> dict[relax.Var, Expr]:
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return {}
    return {b.var: b.value for block in body.blocks for b in block.bindings}


class _Chain:
    """One quantize's input chain, evaluated as a function of one 8-bit tensor, ``leaf``."""

    def __init__(self, bindings: dict[relax.Var, Expr], leaf: relax.Var) -> None:
        self.bindings = bindings
        self.leaf = leaf
        self.ops: set[str] = set()

    def evaluate(self, expr: Expr) -> np.ndarray:
        if isinstance(expr, GenericConst):
            return np.asarray(_scalar(expr), _F32)
        call = self.bindings.get(expr) if isinstance(expr, relax.Var) else expr
        if not isinstance(call, Call) or not isinstance(call.op, Op):
            raise _NotATable
        name = str(call.op.name)
        if name == "relax.dequantize":
            scale, zero = _scalar(call.args[1]), _scalar(call.args[2])
            return _dequantize(self._integers(call.args[0]), scale, zero)
        if name == "relax.astype" and str(call.attrs.dtype) == "float32":
            return self.evaluate(call.args[0])
        if name == "relax.clip":
            low, high = (_F32(float(a.value)) for a in call.args[1:3])
            return np.clip(self.evaluate(call.args[0]), low, high).astype(_F32)
        numpy_op = _NUMPY.get(name)
        if numpy_op is None:
            raise _NotATable
        self.ops.add(name)
        return numpy_op(*(self.evaluate(a) for a in call.args))

    def _integers(self, expr: Expr) -> np.ndarray:
        """The 8-bit values of ``expr``: the leaf's 256, or a quantize inside the chain."""
        if isinstance(expr, relax.Var) and expr.same_as(self.leaf):
            low, high = INTEGER_RANGES[str(expr.ty.dtype)]
            return np.arange(low, high + 1, dtype=np.int32)
        call = self.bindings.get(expr) if isinstance(expr, relax.Var) else expr
        if not is_op_call(call, "relax.quantize"):
            raise _NotATable
        assert isinstance(call, Call)
        self.ops.add("relax.quantize")
        dtype = str(call.attrs.out_dtype)
        if dtype not in INTEGER_RANGES:
            raise _NotATable
        inner = self.evaluate(call.args[0])
        scale, zero = _scalar(call.args[1]), _scalar(call.args[2])
        return _quantize(inner, scale, zero, dtype).astype(np.int32)


def _sources(bindings: dict[relax.Var, Expr], expr: Expr, found: list[relax.Var]) -> None:
    """The 8-bit tensors that ``expr``'s dequantize ops read, through quantize ops, in the order
    a depth-first walk meets them (each once)."""
    value = bindings.get(expr) if isinstance(expr, relax.Var) else expr
    if not isinstance(value, Call):
        return
    if is_op_call(value, "relax.dequantize"):
        source = value.args[0]
        if isinstance(source, relax.Var) and str(source.ty.dtype) in INTEGER_RANGES:
            if not any(source.same_as(v) for v in found):
                found.append(source)
            _sources(bindings, source, found)
        return
    for arg in value.args:
        if isinstance(arg, relax.Var | Call):
            _sources(bindings, arg, found)


def _table(bindings: dict[relax.Var, Expr], call: Call) -> tuple[relax.Var, np.ndarray] | None:
    """The 8-bit tensor and the table that replace the quantize ``call``, if it qualifies: of
    the tensors its chain could start from, the one bound first (the most work saved)."""
    dtype = str(call.attrs.out_dtype)
    if dtype not in INTEGER_RANGES or str(call.args[0].ty.dtype) != "float32":
        return None
    candidates: list[relax.Var] = []
    _sources(bindings, call.args[0], candidates)
    order = {var: i for i, var in enumerate(bindings)}
    candidates.sort(key=lambda var: order.get(var, -1))
    for leaf in candidates:
        chain = _Chain(bindings, leaf)
        try:
            values = chain.evaluate(call.args[0])
            scale, zero = _scalar(call.args[1]), _scalar(call.args[2])
            table = _quantize(values, scale, zero, dtype)
        except _NotATable:
            continue
        if chain.ops & _COSTLY and table.shape == (256,):
            return leaf, table
        return None
    return None


@mutator
class _TableMutator(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.bindings: dict[relax.Var, Expr] = {}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        found = _table(self.bindings, value) if is_op_call(value, "relax.quantize") else None
        if found is None:
            super().visit_var_binding_(binding)
            return
        source, table = found
        index = self.visit_expr(source)
        if str(source.ty.dtype) == "int8":  # the table starts at -128
            index = relax.op.add(relax.op.astype(index, "int32"), relax.const(128, "int32"))
        lookup = relax.op.take(relax.const(table), index, axis=0, mode="clip")
        self.set_var_remap(binding.var, self.builder_.emit(lookup, name_hint=binding.var.name))


#: Marks the PrimFunc of a table lookup for :func:`elementwise_table_lookups`.
TABLE_LOOKUP_ATTR = "convtune.table_lookup"
#: TVM's op pattern kElemWise: the only kind FuseOps lets follow a conv into its kernel.
_ELEMWISE = 0


def legalize_table_lookup(bb: relax.BlockBuilder, call: Call) -> Expr:
    """``take`` lowered by TVM, a table lookup's PrimFunc marked :data:`TABLE_LOOKUP_ATTR`."""
    lowered = Op.get("relax.take").get_attr("FLegalize")(bb, call)
    if is_table_lookup(call) and isinstance(lowered, Call) and lowered.args:
        gvar = lowered.args[0]
        bb.update_func(gvar, bb.get()[gvar].with_attr(TABLE_LOOKUP_ATTR, True))
    return lowered


@tvm.transform.module_pass(opt_level=0, name="ElementwiseTableLookups")
def elementwise_table_lookups(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
    """Table lookups as element-by-element ops, after ``AnnotateTIROpPattern``.

    TVM's pattern analysis calls the lookup injective (the table's index is a value, not a loop
    variable), and FuseOps lets only element-by-element ops follow a conv into its kernel: the
    conv would write its 8-bit output and a second kernel read it back through the table. It is
    element by element on its index (the 256-byte table is a constant operand), so it fuses into
    the conv's epilogue. A ``0`` pattern cannot be set before the analysis, which keeps only
    nonzero ones."""
    marked = [
        (gvar, func)
        for gvar, func in mod.functions.items()
        if isinstance(func, tirx.PrimFunc) and func.attrs and TABLE_LOOKUP_ATTR in func.attrs
    ]
    if not marked:
        return mod
    out = IRModule(dict(mod.functions), attrs=mod.attrs)
    for gvar, func in marked:
        out.update_func(gvar, func.with_attr("op_pattern", _ELEMWISE))
    return out


def is_table_lookup(call: Call) -> bool:
    """A ``take`` from a constant 1-D table along its only axis (what :func:`lookup_tables`
    makes): element by element on its index."""
    table = call.args[0]
    return (
        isinstance(table, GenericConst)
        and table.ty.ndim == 1
        and call.attrs.axis is not None
        and int(call.attrs.axis) == 0
    )


def lookup_tables(mod: IRModule) -> tuple[IRModule, int]:
    """``mod`` with each qualifying quantized activation chain as a table lookup (module
    docstring), and how many it replaced."""
    rewriter = _TableMutator(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewriter.bindings = _bindings(func)
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    out = relax.transform.DeadCodeElimination()(rewriter.builder_.get())
    # A quantize inside a longer chain got its table too; the outer one made it dead.
    return out, sum(
        _count_tables(func) for func in out.functions.values() if isinstance(func, relax.Function)
    )


def _count_tables(func: relax.Function) -> int:
    return sum(
        is_op_call(value, "relax.take") and isinstance(value.args[0], GenericConst)
        for value in _bindings(func).values()
    )
