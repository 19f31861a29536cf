"""Measurements taken in a fresh process of their own.

A figure measured in the process that just tuned, or beside another runtime, can be off by
whole factors: on a Zen 4 VM the per-layer profile taken by ``bench/run.py`` right after tuning
summed its kernels to 63.7 ms against 34.5 ms end to end, and the same artifact profiled in a new
process a minute later summed 35.3 against 34.2. So the isolated bench and the profile start a
child (``python -m <module> <spec JSON>``) that loads only what it measures and prints its
result as the last line of its standard output, one JSON value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from convtune.tuner.errors import ConvtuneError

#: Our artifact's best runtime settings, set in the environment of its own process (TVM reads
#: them when its thread pool starts); TVM_NUM_THREADS is set to the measurement's threads too.
#: Empty: TVM 0.27's defaults were the best measured. On a chain of 64 small blocked 1x1 convs
#: (66 kernels a run, 2 threads, each setting in its own process, 2026-11-30): default (threads
#: bound to cores, workers spin 300k iterations) 0.44 ms a run; TVM_BIND_THREADS=0 0.61 ms;
#: TVM_THREAD_POOL_SPIN_COUNT=0 2.0-3.3 ms (a futex wake-up per kernel); spin count 3M 0.39-0.44
#: ms. onnxruntime ran the same graph in 0.21 ms: ~6.6 vs ~3.2 us per kernel launch.
TVM_BEST_ENV: dict[str, str] = {}


def tvm_process_env(threads: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child that runs a TVM library: a thread pool of exactly ``threads``
    threads (it never grows past its starting size) and :data:`TVM_BEST_ENV`."""
    env = dict(os.environ if base is None else base)
    env["TVM_NUM_THREADS"] = str(threads)
    env.update(TVM_BEST_ENV)
    return env


def save_feeds(
    directory: Path, names: Sequence[str], feeds: Mapping[str, np.ndarray]
) -> dict[str, Any]:
    """Write ``feeds`` to ``directory`` for a child; returns the spec keys :func:`load_feeds`
    reads. Arrays are stored by position, since ONNX input names need not be file names."""
    path = directory / "feeds.npz"
    np.savez(path, *[feeds[name] for name in names])
    return {"feeds": str(path), "inputs": list(names)}


def load_feeds(spec: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The feeds :func:`save_feeds` wrote, keyed by input name."""
    with np.load(spec["feeds"]) as data:
        return {name: data[f"arr_{i}"] for i, name in enumerate(spec["inputs"])}


def run_child(
    module: str,
    spec: Mapping[str, Any],
    *,
    what: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
) -> Any:
    """Run ``python -m module <spec as JSON>`` and return the JSON value it printed last.

    ``what`` names the measurement in errors: a child that times out, fails or prints no JSON
    raises :class:`ConvtuneError` with the last line of its standard error, never a traceback.
    """
    cmd = [sys.executable, "-m", module, json.dumps(dict(spec))]
    try:
        done = subprocess.run(
            cmd,
            env=dict(os.environ if env is None else env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConvtuneError(f"{what} did not finish in {timeout_s:.0f} s") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConvtuneError(f"{what} failed in its own process: {tail}")
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise ConvtuneError(f"{what} printed no result in its own process") from None
