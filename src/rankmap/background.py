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
