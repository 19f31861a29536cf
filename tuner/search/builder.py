"""Builder: compiles measurement candidates in a pool of worker processes that outlives a batch.

MetaSchedule's ``LocalBuilder`` starts a fresh process pool for every batch, and its build function
imports ``tvm.s_tir.tensor_intrin``, which parses every tensor intrinsic in TVMScript (CUDA ones
included) — 5 to 15 s per worker on this machine, paid again for every batch. With small batches
(a few trials per task, many tasks) that dominated tuning time. Here the pool stays up and is
recycled after ``max_process_uses`` builds (LocalBuilder restarts it because workers leak memory).
fp32 CPU schedules never tensorize, so the intrinsics are not needed.
"""

from __future__ import annotations

import os
import tempfile

from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind
from tvm.target import Target


def build_candidate(mod: IRModule, target: Target) -> str:
    """Compile one scheduled TIR module; returns the path of the exported library (tar)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.support.tar import tar

    from convtune.schedules.lowering.pipeline import use_convtune_lowering

    use_convtune_lowering()  # as the model build lowers (schedules/lowering/pipeline.py)
    # The layout rewrite of weights happens once at build time of the model, not per run.
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    library = tvm.compile(mod, target=target)
    path = os.path.join(tempfile.mkdtemp(prefix="convtune-cand-"), "candidate." + tar.output_format)
    library.export_library(path, fcompile=tar)
    return path


@derived_object
class CandidateBuilder(PyBuilder):
    """Builds candidates in ``max_workers`` persistent processes with a per-build timeout."""

    def __init__(
        self, max_workers: int, timeout_sec: float = 30.0, max_process_uses: int = 128
    ) -> None:
        super().__init__()
        self.max_workers = max_workers
        self.timeout_sec = timeout_sec
        self.max_process_uses = max_process_uses
        self._pool: PopenPoolExecutor | None = None

    def _executor(self) -> PopenPoolExecutor:
        if self._pool is None:
            self._pool = PopenPoolExecutor(
                max_workers=self.max_workers,
                timeout=self.timeout_sec,
                maximum_process_uses=self.max_process_uses,
            )
        return self._pool

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        results: list[BuilderResult] = []
        jobs = [(item.mod, item.target) for item in build_inputs]
        for outcome in self._executor().map_with_error_catching(
            lambda job: build_candidate(*job), jobs
        ):
            if outcome.status == StatusKind.COMPLETE:
                results.append(BuilderResult(outcome.value, None))
            elif outcome.status == StatusKind.TIMEOUT:
                results.append(
                    BuilderResult(None, f"build timed out after {self.timeout_sec:.0f} s")
                )
            else:
                results.append(BuilderResult(None, f"build failed: {outcome.value}"))
        return results

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
