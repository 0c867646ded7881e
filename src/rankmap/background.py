"""rankmap's own work beside a job gives way to its ranks.

A job whose ranks busy-poll every core (MPI's progress loops) in lockstep loses more than the CPU
rankmap takes: each time a rankmap thread wakes on a core, the rank there waits, and every rank waits
for it at the next exchange. The streaming ingest needs ~1 % of a core and no timing (what it misses
now, its next cycle or the final one reads), so it runs at the lowest priority: the scheduler then
seldom preempts a rank for it, and gives it a core's idle moments first. The link sampler keeps its
priority: its samples are the link timeline, and a starved sampler would leave gaps in it.
"""
from __future__ import annotations

import os
import sys
import threading

#: the niceness of rankmap's background threads (Linux: per thread; 19 is the lowest priority)
NICE = 19


def yield_to_the_job() -> str:
    """Lower the calling thread's priority (Linux sets niceness per thread); what was done, in words.
    A failure (another OS, a container that forbids it) leaves the thread as it was."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(NICE, os.getpriority(os.PRIO_PROCESS, tid)))
        return f"nice {os.getpriority(os.PRIO_PROCESS, tid)}"
    except (AttributeError, OSError) as e:
        return f"normal priority ({e})"


def numpy_with_one_blas_thread() -> None:
    """Import NumPy with its OpenBLAS limited to one thread, and leave the environment as it was.

    At import OpenBLAS starts a thread per core, and each spins for ~0.1 s: on a 16-core GPU node that
    was 2 s of CPU taken from the ranks of a job starting beside ``rankmap profile``, for nothing
    (rankmap's arrays are small; its products are of 8-GPU matrices). The variable is read once, when
    the library loads, and is removed again at once, so no job or tool rankmap starts inherits it.
    A value the user set is left alone. ``rankmap profile`` calls this only once its job started
    (0.14 s of import off the command's fixed cost); other verbs at their start."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    except ImportError:
        pass
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]
