"""The files of a built artifact and their names; TVM-free, so the API can serve them without it."""

from __future__ import annotations

import hashlib
from pathlib import Path

#: The compiled model, loaded with ``tvm.runtime.load_module``.
LIBRARY_NAME = "model.so"
#: Written next to the library: inputs, outputs, target, threads, layout, verification, layers.
MANIFEST_NAME = "manifest.json"
#: ``format`` field of the manifest.
MANIFEST_FORMAT = "convtune-artifact/1"


def file_sha256(path: Path) -> str:
    """The library's identity: a copied or moved ``model.so`` keeps it, a rebuilt one does not."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
