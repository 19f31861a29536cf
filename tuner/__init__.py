"""The tuning engine: ingest an ONNX model, extract its workloads, search schedules, build, verify."""
