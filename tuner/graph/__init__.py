"""The model as a graph: ONNX bytes checked and normalized (ingest, normalize, fold), the blocked
layout planned per conv (layout, conv_kinds), and the fused TIR tasks extracted (extract, flops).
Imports the schedules' ops, never the search or the measurements."""
