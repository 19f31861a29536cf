"""onnxruntime as the numerical and speed reference: sessions threaded the way convtune compares.

Verification, the model bench and the per-layer profile all open their onnxruntime sessions here,
so every session convtune times or trusts is configured the same way.
"""

from __future__ import annotations

import onnxruntime as ort

from convtune.tuner.errors import ConvtuneError, InvalidModelError


def session_options(threads: int, options: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """``options`` (or fresh ones) set for a fair comparison: ``threads`` intra-op, 1 inter-op.

    Left unset, onnxruntime sizes its pool to all CPUs, whatever the other contender uses.
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
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # Graph optimisation is left as given: onnxruntime's default is ORT_ENABLE_ALL.
    return opts


def ort_session(
    model_bytes: bytes, threads: int, options: ort.SessionOptions | None = None
) -> ort.InferenceSession:
    """A CPU onnxruntime session with ``threads`` intra-op threads and one inter-op thread.

    ``options`` (e.g. with profiling enabled) are used instead of fresh ones, with the thread
    settings above imposed so that every session convtune times is threaded the same way.
    Raises :class:`InvalidModelError` if onnxruntime rejects the model.
    """
    opts = session_options(threads, options)
    try:
        return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime has its own exception types, not exported stably
        lines = str(err).strip().splitlines() or [type(err).__name__]
        raise InvalidModelError(f"onnxruntime cannot load the model: {lines[0]}") from err
