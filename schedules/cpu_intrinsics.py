"""TVM's tensor intrinsics for x86 CPUs alone, loaded before MetaSchedule asks for all of them.

Every ``TuneContext`` runs ``import tvm.s_tir.tensor_intrin``, whose ``__init__`` parses the
intrinsics of every backend in TVMScript (CUDA's hundreds, ROCm's, Hexagon's, Arm's). Each parse
walks the caller's stack with ``inspect.stack()``, and each frame's lookup scans ``sys.modules``:
in a tuning process (1460 modules loaded) that import took 40 s of a 2-minute cold tune's budget
on a Zen 3 VM, before the first trial (``bench/run.py``'s stage times: search planned at 0.4 s,
the cost model warm at 40.5). Registered as a package without running its ``__init__``, with its
x86 module imported: 1.2 s against 175 in the same process at idle priority.

convtune compiles for CPUs only; its own intrinsics (VNNI, AMX, BF16 in ``schedules/ops``)
register themselves. If TVM's layout ever differs, nothing is loaded here and TVM's import runs
as it always did.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import tvm.s_tir

PACKAGE = "tvm.s_tir.tensor_intrin"


def load_cpu_intrinsics() -> bool:
    """Make ``import tvm.s_tir.tensor_intrin`` load the x86 intrinsics only; True if it now does
    (or the package was already imported, whichever way)."""
    if PACKAGE in sys.modules:
        return True
    folder = Path(tvm.s_tir.__file__).parent / "tensor_intrin"
    spec = importlib.util.spec_from_file_location(
        PACKAGE, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or not (folder / "x86.py").is_file():
        return False
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    try:
        importlib.import_module(f"{PACKAGE}.x86")
    except Exception:
        # TVM's own import (every backend) runs at the first TuneContext instead.
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]
        return False
    tvm.s_tir.tensor_intrin = package
    return True


load_cpu_intrinsics()
