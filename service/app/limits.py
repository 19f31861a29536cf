"""The server's limits (``Settings.max_*``) and per-client quotas, checked at the door.

A request over a limit gets 422 ``limit_exceeded``; over a quota, 429 ``quota_exceeded``. The
message names the limit, its value and the ``CONVTUNE_*`` variable that sets it, so an operator
knows what to raise and a client knows what to send instead.

The model checks run on the raw ONNX graph before ingest, in the extraction child process: a
model with a 46000×46000 ConstantOfShape weight is 80 bytes on the wire and 8 GB once folded.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from convtune.db.models import JobRow, JobStatus, ModelRow

from .core.config import Settings
from .core.errors import ApiError
from .schemas import JobCreate

# onnxruntime (the reference every artifact is verified against) guarantees opsets from 7 on;
# TVM's frontend picks the newest converter at or below the model's opset, so it has no stricter
# floor. The ceiling is probed: the newest opset both onnx and onnxruntime load.
MIN_OPSET = 7


def setting_name(field: str) -> str:
    return f"CONVTUNE_{field.upper()}"


def limit_exceeded(what: str, value: object, field: str, limit: object) -> ApiError:
    return ApiError(
        422,
        "limit_exceeded",
        f"{what} {value} is over the server's limit of {limit} ({setting_name(field)})",
    )


def check_job(body: JobCreate, settings: Settings) -> None:
    """Refuse job options over the server's maxima (the schema has already refused nonsense)."""
    if body.trials_per_task > settings.max_trials_per_task:
        raise limit_exceeded(
            "trials_per_task",
            body.trials_per_task,
            "max_trials_per_task",
            settings.max_trials_per_task,
        )
    if body.budget_minutes is not None and body.budget_minutes > settings.max_budget_minutes:
        raise limit_exceeded(
            "budget_minutes", body.budget_minutes, "max_budget_minutes", settings.max_budget_minutes
        )
    if body.threads is not None and body.threads > settings.max_threads:
        raise limit_exceeded("threads", body.threads, "max_threads", settings.max_threads)


def quota_exceeded(message: str, field: str) -> ApiError:
    return ApiError(429, "quota_exceeded", f"{message} ({setting_name(field)})")


def check_job_quota(session: Session, client: str, settings: Settings) -> None:
    """A client may have at most ``max_queued_jobs_per_client`` jobs queued or running."""
    waiting = session.scalar(
        select(func.count(JobRow.id)).where(
            JobRow.owner == client, JobRow.status.in_((JobStatus.QUEUED, JobStatus.RUNNING))
        )
    )
    if (waiting or 0) >= settings.max_queued_jobs_per_client:
        raise quota_exceeded(
            f"{waiting} jobs of this client are queued or running; the quota is "
            f"{settings.max_queued_jobs_per_client}",
            "max_queued_jobs_per_client",
        )


def check_storage_quota(session: Session, client: str, adding: int, settings: Settings) -> None:
    """A client's stored models may total at most ``max_stored_bytes_per_client`` bytes."""
    stored = session.scalar(
        select(func.coalesce(func.sum(ModelRow.size_bytes), 0)).where(ModelRow.owner == client)
    )
    if int(stored or 0) + adding > settings.max_stored_bytes_per_client:
        raise quota_exceeded(
            f"this client stores {stored} bytes of models; {adding} more would pass the quota "
            f"of {settings.max_stored_bytes_per_client}",
            "max_stored_bytes_per_client",
        )


# ---------------------------------------------------------------------------------------------
# model checks (run in the extraction child; onnx and numpy only)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelLimits:
    """The model maxima of ``Settings``, picklable for the extraction child."""

    max_model_nodes: int
    max_tensor_elements: int

    @classmethod
    def of(cls, settings: Settings) -> ModelLimits:
        return cls(settings.max_model_nodes, settings.max_tensor_elements)


def _refused(code: str, message: str) -> ApiError:
    return ApiError(422, code, message)


@functools.cache
def max_opset() -> int:
    """The newest ai.onnx opset that both the onnx package and onnxruntime load."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    for opset in range(onnx.defs.onnx_opset_version(), MIN_OPSET, -1):
        vi = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
        graph = onnx.helper.make_graph(
            [onnx.helper.make_node("Identity", ["x"], ["y"])],
            "probe",
            [vi],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
        )
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        try:
            ort.InferenceSession(
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception:  # onnxruntime raises its own Fail/InvalidGraph types
            continue
        return opset
    return MIN_OPSET


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graphs(sub)


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t


# Inputs that are weights: a zero-sized one makes a kernel with nothing to compute, which
# TVM's frontend accepts and the build then crashes on.
_WEIGHT_INPUTS = {"Conv": (1,), "ConvTranspose": (1,), "Gemm": (0, 1), "MatMul": (0, 1)}


def check_model(model: onnx.ModelProto, limits: ModelLimits) -> int:
    """Refuse (422) a model over the node or tensor-size limits, with an opset outside what
    onnxruntime and TVM both take, zero-sized weights or non-finite float weights; returns its
    node count."""
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and not MIN_OPSET <= opset.version <= max_opset():
            raise _refused(
                "unsupported_opset",
                f"ai.onnx opset {opset.version} is outside {MIN_OPSET}..{max_opset()}, the "
                "range onnxruntime and TVM's ONNX frontend both accept",
            )
    graphs = list(_graphs(model.graph))
    nodes = sum(len(g.node) for g in graphs)
    if nodes > limits.max_model_nodes:
        raise limit_exceeded(
            "the model's node count", nodes, "max_model_nodes", limits.max_model_nodes
        )
    weights: dict[str, str] = {}
    for graph in graphs:
        for node in graph.node:
            for i in _WEIGHT_INPUTS.get(node.op_type, ()):
                if i < len(node.input) and node.input[i]:
                    weights.setdefault(node.input[i], node.name or node.op_type)
        for tensor in _tensors(graph):
            _check_tensor(tensor, weights, limits)
    _check_inferred_shapes(model, limits)
    return nodes


def _check_tensor(tensor: onnx.TensorProto, weights: dict[str, str], limits: ModelLimits) -> None:
    elements = math.prod(tensor.dims)
    if elements > limits.max_tensor_elements:
        raise limit_exceeded(
            f"tensor {tensor.name!r} has",
            f"{elements} elements, which",
            "max_tensor_elements",
            limits.max_tensor_elements,
        )
    if elements == 0 and tensor.name in weights:
        raise _refused(
            "zero_sized_weight",
            f"weight {tensor.name!r} of node {weights[tensor.name]!r} has no elements "
            f"(shape {list(tensor.dims)})",
        )
    # External data is a path on the uploader's disk: never read (ingest refuses the model).
    external = tensor.data_location == onnx.TensorProto.EXTERNAL
    if (
        tensor.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)
        and elements
        and not external
    ):
        values = numpy_helper.to_array(tensor)
        if not np.isfinite(values).all():
            bad = int(values.size - np.isfinite(values).sum())
            raise _refused(
                "non_finite_weight",
                f"tensor {tensor.name!r} holds {bad} NaN/Inf values: the artifact could not be "
                "verified against onnxruntime (NaN compares equal to nothing)",
            )


def _check_inferred_shapes(model: onnx.ModelProto, limits: ModelLimits) -> None:
    """Every statically known intermediate: element count and no zero-sized dimension."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # ingest runs the checker and reports the model's faults in its words
        return
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = [
            d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim
        ]
        known = [d for d in dims if d is not None]
        if 0 in known:
            raise _refused(
                "zero_sized_tensor",
                f"tensor {vi.name!r} has a zero-sized dimension {dims}: a layer with no output",
            )
        if known and math.prod(known) > limits.max_tensor_elements:
            raise limit_exceeded(
                f"tensor {vi.name!r} has",
                f"{math.prod(known)} elements, which",
                "max_tensor_elements",
                limits.max_tensor_elements,
            )
