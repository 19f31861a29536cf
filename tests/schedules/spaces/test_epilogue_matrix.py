"""Every schedule space on every conv it applies to, with every epilogue a real model puts after
a conv (issue #30): each design space generates, and each design, replayed with its sampled
decisions, equals the unscheduled TIR of its task.

The matrix: the conv kinds of :data:`CONVS` (1×1, 3×3 stride 1 and 2, the RGB stem, depthwise,
grouped, dilated, odd spatial sizes, 12- and 24-channel inputs, 512 input channels for the
reduction-blocked space) × the epilogues of :data:`EPILOGUES` (none, bias, ReLU, ReLU6, SiLU,
HardSwish, x·HardSigmoid, Mish, GELU via Erf, LeakyRelu, PRelu, a Sigmoid gate, Add+ReLU,
Add+SiLU). One ONNX model per conv kind holds one branch per epilogue (its own input, conv,
epilogue and graph output; the gate and the residual are graph inputs), and its tasks are taken
as a job takes them: ``load_model`` → ``extract_tasks`` with the default layout and every
algorithm, so blocked, output-blocked and Winograd tasks appear as in a real job. A case (conv
kind × epilogue) is the direct task of its branch's conv and its Winograd tasks, under every
registered space whose ``applies_to`` accepts them. On the schedules before the fix of issue
#30, 6 of the 140 cases failed: the Winograd space raised on SiLU, HardSwish, x·HardSigmoid,
Mish, GELU and Add+SiLU after the 3×3 stride-1 conv (and on PRelu, on a day the ingest
normalizer wrote it as ``relu(x) − slope·relu(−x)``, fused into the conv's task).

What a case checks, kept fast for a shared 2-core machine (the file: 105 s on a quiet Zen 5, of
which ~15 s import TVM's tensor intrinsics once and ~25 s generate the designs; 6-7 min while
other jobs loaded the machine three times over):

- every design space (all sketches) of every applicable space generates without an exception;
- numerics: compiling a design costs ~0.1-0.3 s, so not every design of every case runs. The
  epilogues fall into :data:`FAMILIES` (a chain that reads the conv output once, a self-gated
  one that reads it more than once, one with a second input); within a (space, conv kind,
  family) the design indices are dealt round-robin over the family's epilogues, starting at
  another epilogue for each conv kind (:func:`to_run`), so every design of a space runs once
  per (space, conv kind, family); and every case runs at least one design of each of
  convtune's spaces (the generic space's epilogues are MetaSchedule's auto-inlining: each
  epilogue runs under it on some conv kinds, not all). A run design is
  the generated design's trace (sampled decisions included) replayed on the task without
  postprocessors (``RewriteLayout`` would repack the weight arguments), compiled with LLVM at
  -O0 (the scheduled TIR is what is checked; lowered by convtune's passes as the builder does)
  and compared with the unscheduled task on the same seeded inputs within verify.py's
  tolerance (Winograd: ``winograd.atol`` of its tile, relative to the output).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
import tvm
from onnx import helper
from tvm import s_tir, te, topi
from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from convtune.schedules.lowering.pipeline import use_convtune_lowering
from convtune.schedules.ops import nchwc, winograd, winograd_conv
from convtune.schedules.spaces import nchwc_regblock, winograd_nchwc
from convtune.schedules.spaces.generic import GenericSpace
from convtune.schedules.spaces.registry import SPACES
from convtune.tuner.graph.extract import ModelTask, extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.options import Algorithm
from convtune.tuner.target import make_target, parse_target_spec
from tests.models import _conv_out, _init, _vi, _weights, make_model, to_bytes
from tests.schedules.kernels import assert_close, random_args


@dataclass(frozen=True)
class Conv:
    """One conv kind of the matrix: an NCHW ONNX Conv of a ``size`` (H, W) input, the branch of
    the ``i``-th epilogue ``i × stride`` rows taller (see :func:`matrix_model`); with ``pre``,
    its input is the output of a 1×1 conv, so that it is blocked (a depthwise conv of a graph
    input stays NCHW: two transforms for one pass)."""

    cin: int
    cout: int
    size: tuple[int, int]
    kernel: int = 3
    stride: int = 1
    dilation: int = 1
    group: int = 1
    pre: bool = False

    @property
    def pad(self) -> int:
        return self.dilation * (self.kernel // 2)

    def out_dim(self, size: int) -> int:
        return _conv_out(size, self.kernel, self.stride, 2 * self.pad, self.dilation)


CONVS = {
    "1x1": Conv(16, 32, (5, 7), kernel=1),
    "3x3-s1": Conv(16, 32, (7, 9)),  # Winograd F(2×2) and F(4×4) tasks too
    "3x3-s2": Conv(16, 32, (9, 11), stride=2),
    "stem-7x7-s2": Conv(3, 16, (15, 13), kernel=7, stride=2),
    "depthwise": Conv(32, 32, (7, 9), group=32, pre=True),
    "grouped": Conv(32, 32, (6, 7), group=2),
    "dilated": Conv(16, 16, (9, 9), dilation=2),
    "12-channels": Conv(12, 16, (7, 7)),
    "24-channels-s2": Conv(24, 32, (7, 6), stride=2),  # 8-channel input blocks
    "512-channels-1x1": Conv(512, 16, (3, 5), kernel=1),
}

#: How an epilogue reads the conv's output: once per element (a plain chain), more than once
#: (x·f(x)), or beside a second tensor (gate, residual).
FAMILIES = ("chain", "self-gated", "two-input")


@dataclass(frozen=True)
class Epilogue:
    family: str
    #: ``nodes(c, y, add)``: the ONNX nodes computing output ``y`` from the conv output ``c``;
    #: ``add(name, array)`` makes an initializer.
    nodes: Callable[[str, str, Callable[..., str]], list[onnx.NodeProto]]
    bias: bool = True


def _node(op: str, inputs: list[str], output: str, **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], name=output, **attrs)


def side(y: str) -> str:
    """The second input of the branch whose output is ``y``."""
    return y.replace(".y", ".side")


def _silu(c: str, y: str) -> list[onnx.NodeProto]:
    return [_node("Sigmoid", [c], f"{y}.sigmoid"), _node("Mul", [c, f"{y}.sigmoid"], y)]


def _gelu(c: str, y: str, add: Callable[..., str]) -> list[onnx.NodeProto]:
    root2 = add(f"{y}.root2", np.array(math.sqrt(2.0), np.float32))
    one = add(f"{y}.one", np.array(1.0, np.float32))
    half = add(f"{y}.half", np.array(0.5, np.float32))
    return [
        _node("Div", [c, root2], f"{y}.div"),
        _node("Erf", [f"{y}.div"], f"{y}.erf"),
        _node("Add", [f"{y}.erf", one], f"{y}.add"),
        _node("Mul", [c, f"{y}.add"], f"{y}.mul"),
        _node("Mul", [f"{y}.mul", half], y),
    ]


EPILOGUES = {
    "none": Epilogue("chain", lambda c, y, add: [_node("Identity", [c], y)], bias=False),
    "bias": Epilogue("chain", lambda c, y, add: [_node("Identity", [c], y)]),
    "relu": Epilogue("chain", lambda c, y, add: [_node("Relu", [c], y)]),
    "relu6": Epilogue(
        "chain",
        lambda c, y, add: [
            _node(
                "Clip",
                [
                    c,
                    add(f"{y}.lo", np.array(0, np.float32)),
                    add(f"{y}.hi", np.array(6, np.float32)),
                ],
                y,
            )
        ],
    ),
    "silu": Epilogue("self-gated", lambda c, y, add: _silu(c, y)),
    "hardswish": Epilogue("self-gated", lambda c, y, add: [_node("HardSwish", [c], y)]),
    "x-hardsigmoid": Epilogue(
        "self-gated",
        lambda c, y, add: [
            _node("HardSigmoid", [c], f"{y}.hs", alpha=1 / 6),
            _node("Mul", [c, f"{y}.hs"], y),
        ],
    ),
    "mish": Epilogue(
        "self-gated",
        lambda c, y, add: [
            _node("Softplus", [c], f"{y}.softplus"),
            _node("Tanh", [f"{y}.softplus"], f"{y}.tanh"),
            _node("Mul", [c, f"{y}.tanh"], y),
        ],
    ),
    "gelu-erf": Epilogue("self-gated", _gelu),
    "leaky-relu": Epilogue("self-gated", lambda c, y, add: [_node("LeakyRelu", [c], y, alpha=0.1)]),
    "prelu": Epilogue("self-gated", lambda c, y, add: [_node("PRelu", [c, add(f"{y}.slope")], y)]),
    "sigmoid-gate": Epilogue(
        "two-input",
        lambda c, y, add: [_node("Sigmoid", [side(y)], f"{y}.g"), _node("Mul", [c, f"{y}.g"], y)],
    ),
    "add-relu": Epilogue(
        "two-input",
        lambda c, y, add: [_node("Add", [c, side(y)], f"{y}.add"), _node("Relu", [f"{y}.add"], y)],
    ),
    "add-silu": Epilogue(
        "two-input",
        lambda c, y, add: [_node("Add", [c, side(y)], f"{y}.add"), *_silu(f"{y}.add", y)],
    ),
}


def conv_name(epilogue: str) -> str:
    return f"{epilogue}.conv"


def matrix_model(conv: Conv, seed: int = 0) -> onnx.ModelProto:
    """One branch per epilogue: its own input ``{epilogue}.x``, conv (seeded weights) and
    output ``{epilogue}.y``, and for a two-input epilogue the gate or residual ``{epilogue}.side``
    of the output's shape. The ``i``-th branch's output is ``i`` rows taller than the first's:
    the extraction ties a task to its ONNX conv by the conv's shape, which must differ per
    branch (odd and even heights both occur, so do sketches that need an even row count)."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    inputs: list[onnx.ValueInfoProto] = []
    outputs: list[onnx.ValueInfoProto] = []

    def add(name: str, array: np.ndarray | None = None) -> str:
        if array is None:  # PRelu's slope: one per output channel
            array = rng.uniform(0.05, 0.3, (conv.cout, 1, 1)).astype(np.float32)
        inits.append(_init(name, array))
        return name

    def conv_node(x: str, y: str, cin: int, kernel: int, bias: bool, **attrs: object) -> None:
        group = int(attrs.get("group", 1))  # type: ignore[call-overload]
        inputs = [x, add(f"{y}.w", _weights(rng, (conv.cout, cin // group, kernel, kernel)))]
        if bias:
            inputs.append(add(f"{y}.b", (rng.standard_normal(conv.cout) * 0.5).astype("f")))
        nodes.append(_node("Conv", inputs, y, kernel_shape=[kernel] * 2, **attrs))

    height, width = conv.size
    for i, (name, epilogue) in enumerate(EPILOGUES.items()):
        rows = height + i * conv.stride
        x, shape = f"{name}.x", [1, conv.cin, rows, width]
        inputs.append(_vi(x, shape))
        if conv.pre:
            conv_node(x, f"{name}.pre", conv.cin, 1, bias=True)
            x = f"{name}.pre"
        conv_node(
            x,
            conv_name(name),
            conv.cout if conv.pre else conv.cin,
            conv.kernel,
            epilogue.bias,
            strides=[conv.stride] * 2,
            pads=[conv.pad] * 4,
            dilations=[conv.dilation] * 2,
            group=conv.group,
        )
        out_shape = [1, conv.cout, conv.out_dim(rows), conv.out_dim(width)]
        if epilogue.family == "two-input":
            inputs.append(_vi(f"{name}.side", out_shape))
        nodes += epilogue.nodes(conv_name(name), f"{name}.y", add)
        outputs.append(_vi(f"{name}.y", out_shape))
    return make_model(nodes, inputs, outputs, inits, name="epilogue_matrix")


@functools.cache
def conv_tasks(kind: str) -> tuple[ModelTask, ...]:
    """The tasks of ``kind``'s matrix model, as a job extracts them (default layout, every
    algorithm)."""
    ingested = load_model(to_bytes(matrix_model(CONVS[kind])))
    _, tasks = extract_tasks(ingested, make_target(None), algorithms=tuple(Algorithm))
    return tuple(tasks)


def case_tasks(kind: str, epilogue: str) -> list[tuple[int, ModelTask]]:
    """The tasks (with their positions in ``conv_tasks(kind)``) computing the conv of
    ``epilogue``'s branch: its direct task and its Winograd tasks."""
    tasks = list(enumerate(conv_tasks(kind)))
    direct = [
        (i, t) for i, t in tasks if conv_name(epilogue) in t.onnx_nodes and not t.winograd_tile
    ]
    assert len(direct) == 1, f"{len(direct)} direct tasks cover {conv_name(epilogue)}"
    # A Winograd task is the one of the same output (each branch's output shape is its own).
    # Not by its ONNX nodes: tuner/graph/extract.py pairs Winograd call sites with convs by call
    # order,
    # which differs from the graph's.
    shape = output_shape(direct[0][1].mod)
    winograd = [(i, t) for i, t in tasks if t.winograd_tile and output_shape(t.mod) == shape]
    return direct + winograd


def output_shape(mod: IRModule) -> tuple[int, ...]:
    """The shape of the task's output (its function's last parameter)."""
    return tuple(int(d) for d in ArgInfo.from_prim_func(mod["main"])[-1].shape)


@functools.cache
def designs(kind: str, position: int, space_name: str) -> tuple[s_tir.Schedule, ...]:
    """Every design of the space ``space_name`` on the task at ``position`` of ``kind``'s tasks
    (raises what the space raises)."""
    task = conv_tasks(kind)[position]
    space = next(s for s in SPACES if s.name == space_name)
    target = make_target(None)
    generator = space.generator(target)
    ms.TuneContext(mod=task.mod, target=target, space_generator=generator, task_name=task.name)
    return tuple(generator.generate_design_space(task.mod))


def to_run(kind: str, epilogue: str, space: str, count: int, tasks: int) -> list[tuple[int, int]]:
    """Which designs of ``space`` the case runs, as (task, design) indices, for ``count``
    designs per task on the case's ``tasks`` tasks (two for Winograd: one per tile).

    The design indices are dealt round-robin over the epilogues of the case's family, starting
    at another epilogue for each conv kind, so every design index runs once per (space, conv
    kind, family); a case left without one runs one anyway, except under the generic space.
    The tasks of a case take turns."""
    family = EPILOGUES[epilogue].family
    members = [name for name, e in EPILOGUES.items() if e.family == family]
    index, size = members.index(epilogue), len(members)
    shift = list(CONVS).index(kind)
    chosen = [d for d in range(count) if (d + shift) % size == index]
    if not chosen and space != GenericSpace.name:
        chosen = [(index + shift) % count]
    return [(turn % tasks, design) for turn, design in enumerate(chosen)]


def replay(design: s_tir.Schedule, mod: IRModule) -> IRModule:
    """``design``'s trace, decisions included, applied to a fresh schedule of ``mod``."""
    sch = s_tir.Schedule(mod)
    design.trace.apply_to_schedule(sch, remove_postproc=True)
    return sch.mod


#: This host, LLVM at -O0: a third of the compile time of -O3 for these kernels; what is
#: checked is the scheduled TIR (lowered by convtune's passes as the builder lowers it).
QUICK_TARGET = {**parse_target_spec(None), "opt-level": 0}


def run(mod: IRModule, args: list[np.ndarray]) -> np.ndarray:
    """The output of ``mod`` (its last argument) on copies of ``args``."""
    use_convtune_lowering()
    lib = tvm.compile(mod, target=Target(QUICK_TARGET))
    tensors = [tvm.runtime.tensor(a.copy(), tvm.cpu()) for a in args]
    lib(*tensors)
    return tensors[-1].numpy()


def assert_equal_output(task: ModelTask, got: np.ndarray, reference: np.ndarray) -> None:
    if task.winograd_tile:
        error = float(np.abs(got - reference).max())
        bound = winograd.atol(task.winograd_tile) * max(1.0, float(np.abs(reference).max()))
        assert error <= bound, f"max error {error} over Winograd's {bound}"
    else:
        assert_close(got, reference)


def first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


CASES = [(kind, epilogue) for kind in CONVS for epilogue in EPILOGUES]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "epilogue"), CASES, ids=[f"{k}-{e}" for k, e in CASES])
def test_every_space_schedules_the_epilogue(kind: str, epilogue: str) -> None:
    tasks = case_tasks(kind, epilogue)
    failures = []
    generated: dict[str, list[tuple[int, tuple[s_tir.Schedule, ...]]]] = {}
    for position, task in tasks:
        for space in SPACES:
            if not space.applies_to(task.mod):
                continue
            try:
                found = designs(kind, position, space.name)
            except Exception as exc:  # every failure of the case is reported, not the first
                failures.append(f"{space.name} on {task.name}: design space: {first_line(exc)}")
                continue
            generated.setdefault(space.name, []).append((position, found))
    assert generated, "no space applies"
    references: dict[int, tuple[list[np.ndarray], np.ndarray]] = {}
    for space_name, per_task in generated.items():
        count = min(len(designs_) for _, designs_ in per_task)
        if count == 0:
            failures.append(f"{space_name}: no design")
            continue
        for turn, index in to_run(kind, epilogue, space_name, count, len(per_task)):
            position, designs_ = per_task[turn]
            mod = conv_tasks(kind)[position].mod
            if position not in references:
                args = random_args(mod)
                references[position] = args, run(mod, args)
            args, reference = references[position]
            try:
                got = run(replay(designs_[index], mod), args)
                assert_equal_output(conv_tasks(kind)[position], got, reference)
            except Exception as exc:
                name = conv_tasks(kind)[position].name
                failures.append(f"{space_name} on {name}: design {index}: {first_line(exc)}")
    assert not failures, "\n".join(failures)


def two_output_epilogue(inputs: list[te.Tensor], kernel: te.Tensor) -> IRModule:
    """``kernel`` (a conv's output) → ReLU → +1, both results outputs of the task: the ReLU
    cannot be inlined into the add (no real model's task has had this shape)."""
    relu = topi.nn.relu(kernel)
    plus = topi.add(relu, tvm.tirx.const(1.0, "float32"))
    return IRModule({"main": te.create_prim_func([*inputs, relu, plus])})


def test_a_space_declines_an_epilogue_it_cannot_fuse() -> None:
    """The spaces say so in ``applies_to`` rather than raise while MetaSchedule generates their
    designs; an epilogue they can fuse keeps them applying."""
    data = te.placeholder((1, 1, 6, 6, 16), name="data")
    weight = te.placeholder((2, 1, 3, 3, 16, 16), name="weight")
    with make_target(None):  # TOPI's conv2d_NCHWc asks for one
        conv = topi.nn.conv2d_NCHWc(
            data, weight, (1, 1), (1, 1), (1, 1), "NCHW16c", "NCHW16c", "float32"
        )
    mod = two_output_epilogue([data, weight], conv)
    assert nchwc.is_blocked_conv(mod)
    with pytest.raises(Exception, match="output"):
        nchwc_regblock.schedule_blocked_conv(s_tir.Schedule(mod))
    assert [s.name for s in SPACES if s.applies_to(mod)] == [GenericSpace.name]

    packed = te.placeholder((6, 6, 2, 16, 16), name="packed")
    inverse = winograd_conv.conv2d_winograd_nchwc(data, packed, (1, 1, 1, 1), 4, "float32")
    mod = two_output_epilogue([data, packed], inverse)
    assert winograd_conv.is_winograd_nchwc(mod)
    assert not any(s.applies_to(mod) for s in SPACES)
    fused = IRModule({"main": te.create_prim_func([data, packed, topi.nn.relu(inverse)])})
    assert [s.name for s in SPACES if s.applies_to(fused)] == [winograd_nchwc.SPACE_NAME]


def test_a_pad_after_the_conv_is_not_fused() -> None:
    """Conv → ReLU → Pad (bottom and right by one, PP-OCRv6's stem): the pad's border reads
    nothing of the conv, so no loop of the kernel computes it; the kernel spaces decline (the
    register-blocked one wrote no border and the model's output was off by up to 1)."""
    data = te.placeholder((1, 1, 6, 6, 16), name="data")
    weight = te.placeholder((2, 1, 3, 3, 16, 16), name="weight")
    with make_target(None):
        conv = topi.nn.conv2d_NCHWc(
            data, weight, (1, 1), (1, 1), (1, 1), "NCHW16c", "NCHW16c", "float32"
        )
    padded = topi.nn.pad(topi.nn.relu(conv), [0, 0, 0, 0, 0], [0, 0, 1, 1, 0])
    mod = IRModule({"main": te.create_prim_func([data, weight, padded])})
    assert nchwc.is_blocked_conv(mod)
    assert [s.name for s in SPACES if s.applies_to(mod)] == [GenericSpace.name]
