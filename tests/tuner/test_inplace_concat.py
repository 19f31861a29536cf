"""Concat chains written in place (tuner/graph/inplace_concat.py): the built model computes what
onnxruntime computes, and each link after the first writes only its own channels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tvm import relax

from convtune.tuner.graph.extract import model_for_target
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.graph.inplace_concat import find_chains
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import compare
from convtune.tuner.target import make_target
from tests import models

LAYERS = 4


def _writers(mod) -> int:
    return sum(1 for gvar in mod.functions if gvar.name_hint.startswith("concat_in_place"))


def _concats(func: relax.Function) -> int:
    return sum(
        1
        for block in func.body.blocks
        for binding in block.bindings
        if isinstance(binding.value, relax.Call)
        and getattr(binding.value.op, "name", "") == "relax.concat"
    )


@pytest.mark.parametrize("layout", ["nchw", "nchwc"])
def test_dense_block_writes_its_concats_in_place_and_matches_onnxruntime(
    layout: str, tmp_path: Path
) -> None:
    model = models.dense_block_model(layers=LAYERS)
    ingested = load_model(models.to_bytes(model))
    target = make_target(None)
    relax_model = model_for_target(ingested, target, layout)
    # One whole tensor written by the first link, the three later links write their channels.
    assert _writers(relax_model.mod) == LAYERS - 1
    if layout == "nchwc":
        assert relax_model.plan is not None and relax_model.plan.concat_chains == 1
    feeds = models.random_inputs(model, {"x": (1, 3, 8, 8)}, seed=2)
    so_path = compile_untuned(ingested, target, tmp_path, layout)
    ours = Artifact.load(so_path, ["x"]).run(feeds)
    reference = [np.asarray(x) for x in models.run_onnxruntime(model, feeds)]
    # ``first`` reads the first link after every later link wrote into the whole tensor.
    result = compare(ours, reference, ["y", "first"], seed=2)
    assert result.passed, result


def test_a_link_read_by_another_concat_ends_the_chain() -> None:
    """A concat that is also a piece of some other concat keeps its own copy: the chain stops
    there (a write into the whole would change what the other concat copies, if it ran later)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c1 = bb.emit(relax.op.concat([x, x], axis=1))
            c2 = bb.emit(relax.op.concat([c1, x], axis=1))
            c3 = bb.emit(relax.op.concat([c2, x], axis=1))
            side = bb.emit(relax.op.concat([x, c2], axis=1))
            out = bb.emit_output(relax.Tuple([c3, side]))
        bb.emit_func_output(out)
    chains = find_chains(bb.get()["main"])
    assert [[var.name for var in chain] for chain in chains] == [[c1.name, c2.name]]


def test_nothing_to_chain_leaves_the_model_alone() -> None:
    """One concat is not a chain: it copies its pieces either way (models.concat_model)."""
    ingested = load_model(models.to_bytes(models.concat_model()))
    relax_model = model_for_target(ingested, make_target(None), "nchw")
    assert _writers(relax_model.mod) == 0
    assert _concats(relax_model.mod["main"]) == 1
