"""The files of a built artifact and their names; TVM-free, so the API can serve them without it."""

from __future__ import annotations

#: The compiled model, loaded with ``tvm.runtime.load_module``.
LIBRARY_NAME = "model.so"
#: Written next to the library: inputs, outputs, target, threads, layout, verification, layers.
MANIFEST_NAME = "manifest.json"
#: ``format`` field of the manifest.
MANIFEST_FORMAT = "convtune-artifact/1"
