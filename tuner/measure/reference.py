"""The peers: onnxruntime (numerical and speed reference) and OpenVINO, configured once, here.

Verification, the model bench and the per-layer profile all open their onnxruntime sessions here,
so every session convtune times or trusts is configured the same way. Two configurations:

- interleaved (the default): onnxruntime's pool threads do not spin, so that a contender timed
  right after it gets the cores (see :func:`session_options`);
- best (``spinning=True``): onnxruntime's default session config, spinning pool threads and all,
  for a contender timed alone in its own process (``convtune bench --isolated``).

OpenVINO is optional (the ``bench`` extra): :func:`openvino_runner` returns None when it is not
importable, and callers leave its column out with a note.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnxruntime as ort

from convtune.tuner.errors import ConvtuneError, InvalidModelError


def session_options(
    threads: int, options: ort.SessionOptions | None = None, *, spinning: bool = False
) -> ort.SessionOptions:
    """``options`` (or fresh ones) set for a fair comparison: ``threads`` intra-op, 1 inter-op.

    Left unset, onnxruntime sizes its pool to all CPUs, whatever the other contender uses.
    ``spinning=True`` keeps onnxruntime's default spin-waiting pool: its best configuration, fair
    only when nothing else runs in the process (or right after it).
    """
    if threads < 1:
        raise ConvtuneError(f"bench: threads must be >= 1, got {threads}")
    opts = options if options is not None else ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # onnxruntime's pool threads spin for a while after each run. Interleaved with another
    # contender they take its cores: measured on ResNet-50 here, a TVM artifact ran in 56 ms right
    # after an onnxruntime run and in 24 ms on its own. Without spinning, onnxruntime itself is
    # ~5% slower (20.3 vs 19.2 ms), the price of timing both in one process.
    if not spinning:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # Graph optimisation is left as given: onnxruntime's default is ORT_ENABLE_ALL.
    return opts


def ort_session(
    model_bytes: bytes,
    threads: int,
    options: ort.SessionOptions | None = None,
    *,
    spinning: bool = False,
) -> ort.InferenceSession:
    """A CPU onnxruntime session with ``threads`` intra-op threads and one inter-op thread.

    ``options`` (e.g. with profiling enabled) are used instead of fresh ones, with the thread
    settings above imposed so that every session convtune times is threaded the same way.
    Raises :class:`InvalidModelError` if onnxruntime rejects the model.
    """
    opts = session_options(threads, options, spinning=spinning)
    try:
        return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime has its own exception types, not exported stably
        lines = str(err).strip().splitlines() or [type(err).__name__]
        raise InvalidModelError(f"onnxruntime cannot load the model: {lines[0]}") from err


def openvino_version() -> str | None:
    """OpenVINO's version, or None when it is not installed (it is an optional peer)."""
    try:
        import openvino
    except ImportError:
        return None
    return str(openvino.get_version())


def openvino_runner(
    model_bytes: bytes, threads: int, feeds: Mapping[str, np.ndarray]
) -> Callable[[], object] | None:
    """A zero-argument callable running OpenVINO's CPU plugin on ``feeds``; None if not installed.

    OpenVINO's best configuration for one request at a time: the LATENCY performance hint, fp32
    inference precision (its default on AVX-512 CPUs with bf16/AMX would be bf16, not comparable)
    and ``threads`` inference threads, like every other contender.
    """
    if openvino_version() is None:
        return None
    import openvino as ov
    import openvino.properties as props
    import openvino.properties.hint as hints

    core = ov.Core()
    try:
        model = core.read_model(model_bytes)
        compiled = core.compile_model(
            model,
            "CPU",
            {
                hints.performance_mode: hints.PerformanceMode.LATENCY,
                hints.inference_precision: ov.Type.f32,
                props.inference_num_threads: threads,
            },
        )
    except Exception as err:  # OpenVINO raises RuntimeError subclasses of its own
        lines = str(err).strip().splitlines() or [type(err).__name__]
        raise InvalidModelError(f"OpenVINO cannot compile the model: {lines[0]}") from err
    request = compiled.create_infer_request()
    inputs = {name: np.ascontiguousarray(value) for name, value in feeds.items()}
    return lambda: request.infer(inputs)
