"""Work-sharing parallel launch for our artifacts' kernels, in place of TVM's fork-join pool.

Every parallel loop of a TVM kernel calls ``TVMBackendParallelLaunch`` through a function
pointer the library holds (``__TVMBackendParallelLaunch``, filled in when the runtime loads
it). TVM's pool gives each thread one fixed task and the caller waits until every worker has
run its own, so a kernel takes as long as its slowest thread; on a VM whose host deschedules
one vCPU for a few milliseconds at a time (Zen 3 VM, 2026-12-06: 39% of 0.1-second
two-thread FMA readings at 50-80% of the best), the caller waits for a worker that is not
running. Here the kernel's loop is cut into :data:`TASKS_PER_THREAD` tasks a thread, the caller
and the workers claim them from one counter, and the caller waits only for tasks someone
claimed: a worker that has not started yet leaves its share to whoever is running.

Measured with ``bench/paired.py``-style batches, each library once with TVM's pool and once
with this launch (30 pairs of 20 runs, the per-pair ratio of median batches, Zen 3 VM, 2
threads, workers bound to cores as TVM binds its own): corpus models unet_small (1.0 ms)
0.98-0.99×, salient_seg_opset11 (0.6 ms) 0.99×, face_det_opset9 (0.65 ms) 0.92×,
mobilenet_softmax (0.06 ms, launch-bound, 200 runs a batch) 0.78×; mean batch times 0.94-0.98×
and 0.79×. Unbound workers gained as much in the median but lost it in the mean.

The launch is installed into a library after it is loaded (:func:`install`); TVM's own pool
stays for any library loaded otherwise, and for all of ours when :data:`ENV` is ``tvm``.
Kernels that synchronise inside a parallel loop (``__TVMBackendParallelBarrier``) keep TVM's
pool, since tasks here are not all running at once. A launch from a second thread while one is
running, or from inside a task, runs its tasks on the calling thread.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.native import compile_c

#: Environment switch: ``tvm`` keeps TVM's thread pool for every library (A/B, or a fallback).
ENV = "CONVTUNE_PARALLEL_LAUNCH"
#: Tasks a thread per parallel loop: more let a running thread take over a stalled one's share
#: sooner. 1, 2, 4 and 8 measured within noise of each other on the U-Net and MobileNet above
#: (unbound workers).
TASKS_PER_THREAD = 4
#: Pause iterations a worker spins waiting for the next launch before it sleeps on a futex
#: (TVM's pool spins 300,000 of its own; kernels of one model run back to back).
SPIN_ITERATIONS = 200_000

_LAUNCH_C = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <pthread.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <immintrin.h>

typedef struct { void* sync_handle; int32_t num_task; } Env;
typedef int (*Lambda)(int task_id, Env* penv, void* cdata);

#define MAX_WORKERS 255
static _Atomic uint64_t state;      /* launch number << 32 | next unclaimed task */
static _Atomic uint32_t published;  /* launch number: what workers wait on (the futex word) */
static _Atomic int32_t done, failed, sleepers, threads = 1, workers;
static atomic_flag busy = ATOMIC_FLAG_INIT;
static Lambda job_fn;
static void* job_data;
static Env job_env;
static int32_t job_tasks, tasks_per_thread = 1;
static long spin_limit;

/* A task of launch `seq`, or -1 once that launch is over or has no task left. */
static int claim(uint32_t seq) {
  uint64_t cur = atomic_load_explicit(&state, memory_order_acquire);
  for (;;) {
    if ((uint32_t)(cur >> 32) != seq || (int32_t)(uint32_t)cur >= job_tasks) return -1;
    if (atomic_compare_exchange_weak_explicit(&state, &cur, cur + 1, memory_order_acq_rel,
                                              memory_order_acquire))
      return (int32_t)(uint32_t)cur;
  }
}

/* fn, data and env are read after a successful claim: the launch cannot end (and the next
   cannot overwrite them) before this task is done. */
static void run_claimed(uint32_t seq) {
  int t;
  while ((t = claim(seq)) >= 0) {
    if (job_fn(t, &job_env, job_data) != 0) atomic_store(&failed, 1);
    atomic_fetch_add_explicit(&done, 1, memory_order_release);
  }
}

static void* worker(void* arg) {
  int32_t index = (int32_t)(intptr_t)arg;
  uint32_t seen = atomic_load(&published);
  for (;;) {
    long spins = 0;
    uint32_t seq;
    while ((seq = atomic_load_explicit(&published, memory_order_acquire)) == seen) {
      if (++spins < spin_limit) { _mm_pause(); continue; }
      atomic_fetch_add(&sleepers, 1);
      if (atomic_load(&published) == seen)
        syscall(SYS_futex, &published, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
      atomic_fetch_sub(&sleepers, 1);
      spins = 0;
    }
    seen = seq;
    if (index < atomic_load(&threads)) run_claimed(seq);
  }
  return NULL;
}

static int serial(Lambda fn, void* cdata) {
  Env env = {NULL, 1};
  return fn(0, &env, cdata);
}

int convtune_parallel_launch(Lambda fn, void* cdata, int num_task) {
  int32_t n = atomic_load(&threads);
  if (n <= 1) return serial(fn, cdata);
  if (atomic_flag_test_and_set_explicit(&busy, memory_order_acquire)) return serial(fn, cdata);
  uint32_t seq = atomic_load(&published) + 1;
  job_fn = fn;
  job_data = cdata;
  job_tasks = num_task > 0 ? num_task : n * tasks_per_thread;
  job_env.sync_handle = NULL;
  job_env.num_task = job_tasks;
  atomic_store(&done, 0);
  atomic_store(&failed, 0);
  atomic_store_explicit(&state, (uint64_t)seq << 32, memory_order_release);
  atomic_store(&published, seq);
  if (atomic_load(&sleepers) > 0)
    syscall(SYS_futex, &published, FUTEX_WAKE_PRIVATE, MAX_WORKERS, NULL, NULL, 0);
  run_claimed(seq);
  while (atomic_load_explicit(&done, memory_order_acquire) < job_tasks) _mm_pause();
  int rc = atomic_load(&failed) ? -1 : 0;
  atomic_flag_clear_explicit(&busy, memory_order_release);
  return rc;
}

/* Use `n` threads (the caller and n - 1 workers, started on first need, never stopped). */
int convtune_parallel_threads(int n, int per_thread, long spins) {
  if (n < 1) n = 1;
  if (n > MAX_WORKERS + 1) n = MAX_WORKERS + 1;
  tasks_per_thread = per_thread < 1 ? 1 : per_thread;
  spin_limit = spins;
  while (atomic_load(&workers) < n - 1) {
    pthread_t th;
    /* Workers are numbered from 1 (the caller is 0); worker k serves while k < threads and
       is bound to CPU k, as TVM binds its pool's workers. */
    int k = atomic_load(&workers) + 1;
    if (pthread_create(&th, NULL, worker, (void*)(intptr_t)k) != 0) break;
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(k % CPU_SETSIZE, &cpus);
    if (k < sysconf(_SC_NPROCESSORS_ONLN)) pthread_setaffinity_np(th, sizeof(cpus), &cpus);
    pthread_detach(th);
    atomic_fetch_add(&workers, 1);
  }
  atomic_store(&threads, atomic_load(&workers) + 1 < n ? atomic_load(&workers) + 1 : n);
  return atomic_load(&threads);
}
"""


@functools.cache
def _launcher() -> ctypes.CDLL:
    lib = compile_c(_LAUNCH_C, ["-pthread"], "parallel launch")
    lib.convtune_parallel_threads.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long]
    lib.convtune_parallel_threads.restype = ctypes.c_int
    return lib


def enabled() -> bool:
    """Whether libraries get this launch (:data:`ENV` is not ``tvm``)."""
    return os.environ.get(ENV, "").strip().lower() != "tvm"


def set_threads(threads: int) -> int:
    """Run installed libraries' parallel loops on ``threads`` threads; the count in effect."""
    return int(_launcher().convtune_parallel_threads(threads, TASKS_PER_THREAD, SPIN_ITERATIONS))


def install(library: Path, threads: int) -> str | None:
    """Point the loaded library at ``library``'s parallel launch to this one, on ``threads``
    threads. Returns None when installed, else why TVM's pool stays (one line)."""
    if not enabled():
        return f"{ENV}=tvm: TVM's thread pool"
    try:
        handle = ctypes.CDLL(str(library))  # the library TVM loaded: dlopen finds it by path
    except OSError as exc:
        return f"TVM's thread pool: {library.name} cannot be opened again ({exc})"
    if _has_symbol(handle, "__TVMBackendParallelBarrier"):
        return "TVM's thread pool: a kernel synchronises its threads inside a parallel loop"
    if not _has_symbol(handle, "__TVMBackendParallelLaunch"):
        return None  # no parallel loop: nothing to launch
    try:
        set_threads(threads)
        launch = ctypes.cast(_launcher().convtune_parallel_launch, ctypes.c_void_p).value
    except ConvtuneError as exc:
        return f"TVM's thread pool: {exc}"
    ctypes.c_void_p.in_dll(handle, "__TVMBackendParallelLaunch").value = launch
    return None


def _has_symbol(handle: ctypes.CDLL, name: str) -> bool:
    try:
        ctypes.c_void_p.in_dll(handle, name)
    except ValueError:
        return False
    return True
