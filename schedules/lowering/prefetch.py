"""Software prefetch of a loop's next iterations' data, spread over the loops inside it.

Measured on a Zen 5 VM (2026-12-02) after a ResNet-50 search: the layers whose weights come
from memory do not hide that fetch behind their arithmetic. Each best kernel timed with its
arguments flushed (as searched, and as in the model, whose 100 MB of weights pass through a
32 MB L3 every run) against warm: 512×7×7 3×3 direct 0.819 against 0.546 ms, 512→2048 1×1 at
7×7 0.361 against 0.249, Winograd F(4×4) at 256×14×14 0.446 against 0.259. LLVM's loop
prefetching inserts nothing on x86 (``-prefetch-distance`` given, the 512×7×7 kernel's
assembly holds no prefetch).

So a schedule marks a *source* loop and a buffer: while iteration ``c`` runs, the pass
prefetches (``prefetcht0``) the lines of the buffer that iteration ``c + distance`` will read.
It derives that region from the buffer's loads in the loop's body (affine in the loop
variables once TVM's CSE lets are expanded) and spreads its lines over the iterations of the
loops inside, as deep as whole lines per iteration allow, so they do not arrive in one burst
that stalls on the line-fill buffers. Results do not change: a prefetch never faults and
writes nothing. The distance is a trace decision the search samples
(:func:`sample_weight_prefetch`; 0 is no prefetch), since it pays only where the data comes
from beyond the caches.

Where it is used: first the reduction-blocked conv (``nchwc_kblock.py``), the next chunk's
weights during this chunk's sweep. Its best kernels after a cold ResNet-50 search, on an Intel Xeon
VM (2026-12-02, 8 alternating rounds, weights flushed as searched), without and with one
chunk ahead: 512×7×7 3×3 0.950 against 0.803 ms, 512×14×14 3×3 stride 2 0.957 against 0.877,
512→2048 1×1 at 7×7 0.451 against 0.408, 2048→512 0.457 against 0.413, 1024→512 at 14×14
0.710 against 0.694; warm, 1-7% slower. Spread only over the loops above the reduction (the
tiles of the sweep: a burst per tile) it lost on the 3×3 convs (0.952 against 0.999 ms).
In the 2-D register block (``nchwc_conv2d.py``, weights of the input-channel blocks ahead)
and Winograd's GEMM (``winograd_nchwc.py``, transformed weights 32 or 64 input channels ahead)
the prefetch sits inside the reduction, beside accumulators LLVM must keep in registers. With
the accumulators in the output buffer (or a TVM workspace) LLVM counts each prefetch as a read
that may alias them and stores them back after every FMA (a ``vmovups`` per ``vfmadd``; those
kernels ran 1.2-2.2× slower), so both accumulate in a thread-local stack array
(``nchwc_conv.accumulate_locally``, ``stack_locals.py``). Zen 5, 2026-12-02, weights flushed:
the 2-D block's 2048→512 1×1 at 7×7 0.53 against 0.27 ms, 512→512 3×3 at 7×7 1.42 against
0.72; Winograd F(4×4) at 256×14×14 0.44-0.51 against 0.31-0.32.

It is a lowering pass, run after TVM's own TIR pipeline (``lowering.py``), so the annotations
are trace decisions that the database replays and the model build lowers the same way as the
measured candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
import tvm_ffi
from tvm import ir, tirx

from ..ops.annotations import SOURCE_ANNOTATION

CACHE_LINE_BYTES = 64


@dataclass(frozen=True)
class _Region:
    """Cache-line offsets (elements, from ``base``) of ``buffer`` one source iteration reads."""

    buffer: tirx.Buffer
    base: tirx.PrimExpr
    lines: tuple[int, ...]


def _substitute(expr: Any, values: dict[Any, Any]) -> Any:
    def on_var(var: tirx.Var) -> Any:
        return values.get(var, var)

    return tvm_ffi.structural_map(expr, (tirx.Var, on_var))


def _bindings(func: tirx.PrimFunc) -> dict[Any, Any]:
    """Every ``Bind`` (TVM's CSE lets) of the function, values already expanded."""
    binds: dict[Any, Any] = {}

    def on_bind(stmt: tirx.Bind) -> None:
        binds[stmt.var] = stmt.value

    tvm_ffi.structural_walk(func.body, (tirx.Bind, on_bind), order="pre")
    for var in list(binds):
        for _ in range(8):  # chains of lets are short; stop once nothing changes
            expanded = _substitute(binds[var], binds)
            if tvm_ffi.structural_equal(expanded, binds[var]):
                break
            binds[var] = expanded
    return binds


def _loops(stmt: tirx.Stmt) -> list[tirx.For]:
    found: list[tirx.For] = []
    tvm_ffi.structural_walk(stmt, (tirx.For, found.append), order="pre")
    return found


def _region(loop: tirx.For, buffer: str, distance: int, binds: dict[Any, Any]) -> _Region | None:
    """The lines of ``buffer`` that iteration ``loop_var + distance`` of ``loop`` reads, or
    None when its loads are not affine with constant offsets between them."""
    loads = _loads(loop.body, buffer)
    if not loads or any(len(load.indices) != 1 for load in loads):
        return None
    inner = _loops(loop.body)
    low = {f.loop_var: f.min for f in inner}
    high = {f.loop_var: f.min + f.extent - 1 for f in inner}
    analyzer = tvm.sym.Analyzer()
    element_bytes = tvm.DataType(str(loads[0].source.dtype)).bits // 8
    per_line = max(1, CACHE_LINE_BYTES // element_bytes)
    intervals = []
    reference = None
    for load in loads:
        index = load.indices[0]
        lanes = 1
        if isinstance(index, tirx.Ramp):
            lanes = int(index.lanes)
            index = index.base
        index = _substitute(index, binds)
        first, last = _substitute(index, low), _substitute(index, high)
        if reference is None:
            reference = first
        start = analyzer.simplify(first - reference)
        end = analyzer.simplify(last - reference)
        if not isinstance(start, tirx.IntImm) or not isinstance(end, tirx.IntImm):
            return None
        lo, hi = sorted((int(start), int(end)))
        intervals.append((lo, hi + lanes))
    intervals.sort()
    merged: list[list[int]] = []
    for lo, hi in intervals:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    lines = tuple(offset for lo, hi in merged for offset in range(lo - lo % per_line, hi, per_line))
    ahead = {loop.loop_var: loop.loop_var + distance}
    base = analyzer.simplify(_substitute(reference, ahead))
    return _Region(loads[0].source, base, tuple(sorted(set(lines))))


def _path_to_loads(stmt: tirx.Stmt, buffer: str) -> list[tirx.For]:
    """The loops below ``stmt`` down to the innermost one holding all of ``buffer``'s loads
    there (the first such loop at each level): the loops to spread the prefetches over."""
    for child in _children(stmt):
        if _reads(child, buffer):
            loop = [child] if isinstance(child, tirx.For) else []
            return loop + _path_to_loads(child, buffer)
    return []


def _spread_over(path: list[tirx.For], lines: int) -> list[tirx.For]:
    """The outer loops of ``path`` with no more iterations in all than ``lines``: each of
    their iterations issues whole lines. Deeper, an iteration would issue a line only every
    few, and the test for it (a modulo of the linear loop index in the innermost loop) cost
    the 512×7×7 kernel 6-10%."""
    count = 1
    for depth, f in enumerate(path):
        count *= int(f.extent)
        if count > lines:
            return path[:depth]
    return path


def _reads(stmt: tirx.Stmt, buffer: str) -> bool:
    return bool(_loads(stmt, buffer))


def _loads(stmt: tirx.Stmt, buffer: str) -> list[ir.TensorLoad]:
    """The loads of the buffer named ``buffer`` in ``stmt`` (flattened: one index each)."""
    found: list[ir.TensorLoad] = []

    def on_load(load: ir.TensorLoad) -> None:
        if load.source.name == buffer:
            found.append(load)

    tvm_ffi.structural_walk(stmt, (ir.TensorLoad, on_load))
    return found


def _children(stmt: tirx.Stmt) -> list[tirx.Stmt]:
    if isinstance(stmt, tirx.For):
        return [stmt.body]
    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, tirx.IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    if isinstance(stmt, (tirx.AttrStmt, tirx.While)):
        return [stmt.body]
    return []


def _prefetches(region: _Region, path: list[tirx.For]) -> list[tirx.Stmt]:
    """The statements that issue one iteration's share of ``region``'s lines, at the top of
    the innermost loop of ``path`` (of the source loop's body for an empty ``path``)."""
    linear: tirx.PrimExpr = tirx.const(0, "int32")
    count = 1
    for f in path:
        linear = linear * f.extent + (f.loop_var - f.min)
        count *= int(f.extent)
    total = len(region.lines)
    share = -(-total // count)
    statements: list[tirx.Stmt] = []
    for m in range(share):
        q = linear * share + m
        address = tirx.address_of(
            tirx.BufferLoad(region.buffer, [region.base + _line_offset(q, region.lines)])
        )
        call = tirx.call_llvm_intrin(
            "void", "llvm.prefetch.p0", address, tirx.const(0, "int32"),
            tirx.const(3, "int32"), tirx.const(1, "int32"),
        )  # fmt: skip
        statement: tirx.Stmt = tirx.Evaluate(call)
        if share * count > total:
            statement = tirx.IfThenElse(q < total, statement, None)
        statements.append(statement)
    return statements


def _line_offset(q: tirx.PrimExpr, table: tuple[int, ...]) -> tirx.PrimExpr:
    """``table[q]`` as arithmetic when the lines form equal runs at equal spacing (the blocked
    layouts' case), else as a select chain."""
    step = table[1] - table[0] if len(table) > 1 else 0
    run = len(table)
    for i in range(1, len(table)):
        if table[i] - table[i - 1] != step:
            run = i
            break
    if run == len(table):
        return tirx.const(table[0], "int32") + q * step
    gap = table[run] - table[0]
    regular = len(table) % run == 0 and all(
        table[i] == table[i % run] + (i // run) * gap for i in range(len(table))
    )
    if regular:
        return tirx.const(table[0], "int32") + (q // run) * gap + (q % run) * step
    expr: tirx.PrimExpr = tirx.const(table[-1], "int32")
    for i in reversed(range(len(table) - 1)):
        expr = tirx.Select(q == i, tirx.const(table[i], "int32"), expr)
    return expr


def _with_prefix(stmt: tirx.Stmt, path: list[tirx.For], prefix: list[tirx.Stmt]) -> tirx.Stmt:
    """``stmt`` with ``prefix`` at the top of the body of ``path``'s innermost loop."""
    innermost = path[-1]

    def on_for(loop: tirx.For) -> tirx.For:
        if not loop.same_as(innermost):
            return loop
        return _rebuilt(loop, tirx.SeqStmt([*prefix, loop.body]), dict(loop.annotations))

    return tvm_ffi.structural_map(stmt, (tirx.For, on_for), order="pre")


def _rebuilt(loop: tirx.For, body: tirx.Stmt, annotations: dict[str, Any]) -> tirx.For:
    return tirx.For(
        loop.loop_var, loop.min, loop.extent, loop.kind, body,
        loop.thread_binding, annotations, loop.step,
    )  # fmt: skip


def _source(loop: tirx.For) -> tuple[str, int] | None:
    """(buffer, distance) of a source loop's annotation, or None for another loop."""
    for key, value in loop.annotations.items():
        if str(key).startswith(SOURCE_ANNOTATION):
            return str(key)[len(SOURCE_ANNOTATION) :], int(value)
    return None


def inject_prefetch(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Lower the prefetch annotations of ``func`` (see the module docstring); a source loop
    whose region cannot be derived (loads not affine) keeps its loads and loses only the
    annotation."""
    if not any(_source(loop) for loop in _loops(func.body)):
        return func  # most functions: no walk over their lets
    binds = _bindings(func)

    def on_for(loop: tirx.For) -> tirx.For:
        spec = _source(loop)
        if spec is None:
            return loop
        buffer, distance = spec
        body = loop.body
        region = _region(loop, buffer, distance, binds) if distance > 0 else None
        if region is not None and region.lines:
            path = _spread_over(_path_to_loads(loop, buffer), len(region.lines))
            prefetches = _prefetches(region, path)
            if path:
                body = _with_prefix(body, path, prefetches)
            else:
                body = tirx.SeqStmt([*prefetches, body])
        annotations = {
            k: v for k, v in loop.annotations.items() if not str(k).startswith(SOURCE_ANNOTATION)
        }
        return _rebuilt(loop, body, annotations)

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, on_for)))


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="convtune.InjectPrefetch")
def InjectPrefetch(func: tirx.PrimFunc, mod: Any, ctx: Any) -> tirx.PrimFunc:
    """The pass form of :func:`inject_prefetch`."""
    return inject_prefetch(func)
