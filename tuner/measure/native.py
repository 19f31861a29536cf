"""C helpers compiled at run time with the system gcc and loaded through ctypes.

The microbenchmarks (:mod:`~convtune.tuner.measure.peak`) and the work-sharing parallel launch
(:mod:`~convtune.tuner.measure.parallel_launch`) are a few dozen lines of C each; the system gcc
that links every TVM library builds them in a fraction of a second, so they ship as source.
"""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import subprocess
import tempfile

from convtune.tuner.errors import ConvtuneError


def compile_c(source: str, flags: list[str], prefix: str) -> ctypes.CDLL:
    """``source`` compiled with ``gcc -O2 flags`` into a shared library, loaded; errors name
    ``prefix`` (no gcc on PATH, a failed compile)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise ConvtuneError(f"{prefix}: no C compiler (gcc) found on PATH")
    with tempfile.TemporaryDirectory(prefix=f"convtune-{prefix}-") as tmp:
        src, lib = pathlib.Path(tmp, "kernel.c"), pathlib.Path(tmp, "libkernel.so")
        src.write_text(source)
        cmd = [gcc, "-O2", *flags, "-shared", "-fPIC", "-o", str(lib), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ConvtuneError(f"{prefix}: gcc failed: {proc.stderr.strip().splitlines()[-1]}")
        # Once loaded the mapping survives the file's removal with the temp dir.
        return ctypes.CDLL(str(lib))
