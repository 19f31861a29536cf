"""Where measured candidates are timed against each other: in rotating rounds, as the search's
runner timed them (:data:`EVALUATOR`), in a fresh local process (:class:`LocalTimer`) or on one
device of a fleet (:class:`FleetTimer`). Confirmation (``tuner/search/confirm.py``) and the fleet
runner both time through here, so every figure of a job is taken the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

from convtune.tuner.errors import ConvtuneError, error_line
from convtune.tuner.measure.child import run_child, tvm_process_env
from convtune.tuner.measure.fleet import Fleet
from convtune.tuner.measure.rpc import DeviceLost, request_device

# A trial's timing (db.models.CURRENT_TIMING): one run per repeat, every argument but the input
# flushed from the caches before it, as in a model, where each layer's weights come from memory.
# Timed warm (back to back, weights in L3), the Winograd kernels looked 20-40% faster than they
# run in ResNet-50, and F(4x4) beat F(2x2) at 256x14x14 where it loses in the model; timed cold
# they match their in-model time within 10% (Zen 4, 2026-12-01: 0.585 cold, 0.653 in the model,
# 0.409 warm ms). The flush is not timed; ten repeats stay well under a candidate's compile time.
EVALUATOR = EvaluatorConfig(number=1, repeat=10, min_repeat_ms=0, enable_cpu_cache_flush=True)

#: One built candidate as a timer gets it: {"library": path, "args_info": its arguments' JSON}.
BuiltCandidate = dict[str, Any]
#: Seconds per group, per candidate, per round.
GroupTimes = list[list[list[float]]]


def rotating_rounds(
    groups: Sequence[Sequence[BuiltCandidate]],
    rounds: int,
    load: Callable[[str], Any],
    alloc: Callable[[Any], Any],
    run: Callable[[Any, Any], float],
) -> GroupTimes:
    """Time every group's candidates in ``rounds`` rounds whose order rotates: ``load(library)``
    gives a module, ``alloc(args_info)`` its arguments (one set per distinct ``args_info`` in a
    group: a conv's alternatives take different ones) and ``run(module, args)`` one figure in
    seconds."""
    result = []
    for group in groups:
        modules = [load(c["library"]) for c in group]
        args_by_info: dict[str, Any] = {}
        for c in group:
            key = json.dumps(c["args_info"])
            if key not in args_by_info:
                args_by_info[key] = alloc(c["args_info"])
        args = [args_by_info[json.dumps(c["args_info"])] for c in group]
        times: list[list[float]] = [[] for _ in group]
        for r in range(rounds):
            shift = r % len(group)
            for i in [*range(shift, len(group)), *range(shift)]:
                times[i].append(run(modules[i], args[i]))
        result.append(times)
    return result


class CandidateTimer(ABC):
    """Where confirmation times the built candidates: each group's on one machine, in rotating
    rounds (:func:`rotating_rounds`), as the search's runner timed them (``EVALUATOR``)."""

    #: Who measured, stored with every confirmed record as its ``device``.
    device: str | None = None

    @abstractmethod
    def time_groups(self, groups: Sequence[Sequence[BuiltCandidate]], rounds: int) -> GroupTimes:
        """Seconds per group, per candidate, per round; a ``ConvtuneError`` if it cannot."""


class LocalTimer(CandidateTimer):
    """A fresh process on this host with the job's threads: no state of the tuning process."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.device = f"local:{socket.gethostname()}"

    def time_groups(self, groups: Sequence[Sequence[BuiltCandidate]], rounds: int) -> GroupTimes:
        timed: GroupTimes = run_child(
            "convtune.tuner.measure.timers",
            {"groups": groups, "threads": self.threads, "rounds": rounds},
            what="confirm: the fastest kernels",
            env=tvm_process_env(self.threads),
            timeout_s=60.0 + 5.0 * rounds * sum(len(g) for g in groups),
        )
        return timed


def _child_main(spec_json: str) -> None:
    """:class:`LocalTimer`'s process: print the times of the spec's groups as one JSON line."""
    import tvm
    from tvm.s_tir.meta_schedule.runner.local_runner import (
        default_alloc_argument,
        default_run_evaluator,
    )

    from convtune.tuner.measure.runtime import set_threads

    spec = json.loads(spec_json)
    set_threads(spec["threads"])
    device = tvm.cpu()
    timed = rotating_rounds(
        spec["groups"],
        spec["rounds"],
        load=tvm.runtime.load_module,
        alloc=lambda info: default_alloc_argument(device, info, 1),
        run=lambda module, args: float(
            statistics.mean(default_run_evaluator(module, device, EVALUATOR, args))
        ),
    )
    print(json.dumps(timed))


class FleetTimer(CandidateTimer):
    """Confirmation's rounds on one device of the fleet: every group is timed on the same
    device, so the figures of a group compare (the search measured its candidates on whichever
    device was free). A device or tracker that fails is a ``ConvtuneError``: the build then
    takes the fastest trials."""

    def __init__(self, fleet: Fleet, *, wait: float = 300.0) -> None:
        self.fleet = fleet
        self.wait = wait

    def time_groups(self, groups: Sequence[Sequence[BuiltCandidate]], rounds: int) -> GroupTimes:
        from tvm.s_tir.meta_schedule.runner.rpc_runner import (
            default_alloc_argument,
            default_cleanup,
            default_run_evaluator,
            default_upload_module,
        )

        # The server ends a session older than its timeout: give it every run, with room.
        session_timeout = 120.0 + 5.0 * rounds * sum(len(g) for g in groups)
        try:
            session, device = request_device(
                self.fleet, session_timeout=session_timeout, wait=self.wait
            )
        except DeviceLost as exc:
            raise ConvtuneError(f"fleet {self.fleet.name}: {exc}") from None
        self.device = device
        remote_cpu = session.cpu(0)
        uploaded: list[str] = []

        def load(library: str) -> Any:
            # Every candidate is "candidate.tar" in a directory of its own.
            remote = f"confirm-{len(uploaded)}-{os.path.basename(library)}"
            uploaded.append(remote)
            return default_upload_module(session, library, remote)

        try:
            return rotating_rounds(
                groups,
                rounds,
                load=load,
                alloc=lambda info: default_alloc_argument(session, remote_cpu, info, 1),
                run=lambda module, args: float(
                    statistics.mean(
                        default_run_evaluator(session, module, remote_cpu, EVALUATOR, args)
                    )
                ),
            )
        except Exception as exc:  # TVM raises RPC and kernel failures alike as TVMError
            raise ConvtuneError(
                f"confirm on device {device} of fleet {self.fleet.name}: {error_line(exc)}"
            ) from None
        finally:
            for remote in uploaded:
                # The device may be gone; its files went with its session then.
                with contextlib.suppress(Exception):
                    default_cleanup(session, remote)


if __name__ == "__main__":
    _child_main(sys.argv[1])
