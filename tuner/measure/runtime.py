"""Loading and running a built artifact with an explicit thread count.

TVM's thread pool can shrink (``runtime.config_threadpool``) but never grow past its starting
size; ``convtune.tuner`` starts it with every logical CPU (see its ``__init__``), and
:func:`set_threads` picks the requested count per call.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from convtune.tuner.artifact_files import MANIFEST_NAME
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure import parallel_launch

_log = logging.getLogger(__name__)
_BIG_CORES = 1  # config_threadpool mode: the "big" cores, i.e. all of them on a symmetric CPU


def set_threads(threads: int) -> int:
    """Make TVM kernels of this process use ``threads`` threads (in TVM's pool and in the
    work-sharing launch of our artifacts); returns the count in effect."""
    tvm_ffi.get_global_func("runtime.config_threadpool")(_BIG_CORES, threads)
    count = _num_threads()
    if parallel_launch.enabled():
        with contextlib.suppress(ConvtuneError):  # no gcc: load_library says so
            parallel_launch.set_threads(count)
    return count


def _num_threads() -> int:
    return int(tvm_ffi.get_global_func("runtime.NumThreads")())


#: The file each library path was first loaded from in this process: (device, inode, mtime).
_LOADED: dict[str, tuple[int, int, int]] = {}


def load_library(so_path: Path) -> tvm.runtime.Module:
    """The library at ``so_path`` as it is now. ``dlopen`` returns the library a process already
    loaded under a path even after the file there was replaced, so a build that rewrites
    ``model.so`` (the build's fallback after a tuned library failed verification, a later job
    with the same output directory) would have run the old code: a replaced file is loaded
    from a fresh copy under a name of its own."""
    path = str(so_path.resolve())
    stat = os.stat(path)
    identity = (stat.st_dev, stat.st_ino, stat.st_mtime_ns)
    if _LOADED.setdefault(path, identity) == identity:
        return _with_parallel_launch(tvm.runtime.load_module(path), Path(path))
    with tempfile.TemporaryDirectory(prefix="convtune-library-") as scratch:
        copy = Path(scratch) / so_path.name
        shutil.copyfile(path, copy)
        # The mapping outlives the file; the launch is installed while the path still names it.
        return _with_parallel_launch(tvm.runtime.load_module(str(copy)), copy)


def _with_parallel_launch(module: tvm.runtime.Module, path: Path) -> tvm.runtime.Module:
    """``module`` (loaded from ``path``) with :mod:`parallel_launch`'s work-sharing launch,
    or TVM's pool and a one-line warning saying why not."""
    why_not = parallel_launch.install(path, _num_threads())
    if why_not is not None and parallel_launch.enabled():
        _log.warning("%s: %s", path.name, why_not)
    return module


def manifest_path(so_path: Path) -> Path | None:
    """The manifest of ``so_path``: ``<stem>.manifest.json`` beside it (what the service's
    download is named: ``artifact-1.so`` + ``artifact-1.manifest.json``), else ``manifest.json``
    in its directory (what ``convtune tune`` writes); None if neither exists."""
    for path in (so_path.with_suffix(".manifest.json"), so_path.with_name(MANIFEST_NAME)):
        if path.is_file():
            return path
    return None


def load_manifest(so_path: Path) -> dict[str, Any]:
    if not so_path.is_file():
        raise ConvtuneError(f"artifact not found: {so_path}")
    path = manifest_path(so_path)
    if path is None:
        raise ConvtuneError(
            f"no {so_path.with_suffix('.manifest.json').name} or {MANIFEST_NAME} next to "
            f"{so_path}: is this a convtune artifact?"
        )
    return json.loads(path.read_text())


def library_manifest(so_path: Path) -> dict[str, Any]:
    """What a library says of itself when its manifest was not saved with it (a browser
    download of the ``.so`` alone): the input names of its Relax ``main``, outputs numbered."""
    names = vm_parameter_names(Artifact.load(so_path, input_names=[]).vm)
    return {"inputs": [{"name": n} for n in names], "outputs": None, "threads": None}


def vm_parameter_names(vm: relax.VirtualMachine) -> list[str]:
    """The parameter names of the VM's ``main``, in order: the model's inputs as TVM's
    frontend named them (every non-word character of the ONNX name replaced by "_")."""
    arity = vm._get_function_arity("main")
    return [vm._get_function_param_name("main", i) for i in range(arity)]


def vm_parameter_name(onnx_name: str) -> str:
    """The VM parameter TVM's frontend makes of the ONNX input ``onnx_name`` ("input.1" of a
    legacy export is "input_1")."""
    return re.sub(r"\W", "_", onnx_name)


def manifest_or_library(so_path: Path) -> dict[str, Any]:
    """The saved manifest of ``so_path`` if there is one, else :func:`library_manifest`."""
    if so_path.is_file() and manifest_path(so_path) is None:
        return library_manifest(so_path)
    return load_manifest(so_path)


@dataclass
class Artifact:
    """A compiled model ready to run: the Relax VM over the exported library."""

    path: Path
    vm: relax.VirtualMachine
    input_names: list[str]
    device: tvm.runtime.Device

    @classmethod
    def load(cls, path: str | os.PathLike[str], input_names: list[str] | None = None) -> Artifact:
        so_path = Path(path)
        if not so_path.is_file():
            raise ConvtuneError(f"artifact not found: {so_path}")
        if input_names is None:
            input_names = [spec["name"] for spec in load_manifest(so_path)["inputs"]]
        device = tvm.cpu()
        try:
            lib = load_library(so_path)
        except Exception as exc:  # a corrupt or foreign .so
            raise ConvtuneError(
                f"cannot load {so_path}: {str(exc).strip().splitlines()[-1]}"
            ) from None
        return cls(so_path, relax.VirtualMachine(lib, device), input_names, device)

    def _args(self, feeds: Mapping[str, np.ndarray]) -> list[tvm.runtime.Tensor]:
        missing = [name for name in self.input_names if name not in feeds]
        if missing:
            raise ConvtuneError(f"missing input(s) {', '.join(missing)}")
        return [
            tvm.runtime.tensor(np.asarray(feeds[n], order="C"), self.device)
            for n in self.input_names
        ]

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        out = self.vm["main"](*self._args(feeds))
        return _to_numpy(out)

    def runner(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """A zero-argument callable running the model on ``feeds`` (inputs copied once)."""
        args = self._args(feeds)
        main = self.vm["main"]
        return lambda: main(*args)


def _to_numpy(value: Any) -> list[np.ndarray]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [item for part in value for item in _to_numpy(part)]
