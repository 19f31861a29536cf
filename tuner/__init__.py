"""The tuning engine: ingest an ONNX model, extract workloads, search, build, verify.

Importing the package loads no TVM: the CLI's ``--help``, the errors and the options are TVM-free.
"""

import os

# TVM's thread pool reads TVM_NUM_THREADS once, when its first parallel kernel starts, and otherwise
# uses half the logical CPUs (one thread on this 2-vCPU machine); it can later shrink but never
# grow. Start it with every logical CPU; runtime.set_threads picks the count per run.
os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
