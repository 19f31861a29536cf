"""The tuning engine: ingest an ONNX model, extract workloads, search, build, verify."""

# Must run before any TVM kernel starts the thread pool (see runtime.py).
from . import runtime as _runtime  # noqa: F401
