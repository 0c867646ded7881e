"""How often a streaming ingest writes: its share of a core and its longest silence.

Apart from :mod:`rankmap.pipeline.ingest` (whose record reader and store bring NumPy and SQLAlchemy)
so that the profile driver has them before those imports, which it makes once its job runs.
"""

from __future__ import annotations

#: the share of one core a streaming ingest allows itself (see :func:`next_wait`)
CPU_BUDGET = 0.01
#: never longer between two writes: also the heartbeat that tells the store the profiler lives
MAX_GAP_S = 30.0


def next_wait(spent_cpu_s: float, interval_s: float, budget: float = CPU_BUDGET) -> float:
    """Seconds until the next poll+write, after one that cost ``spent_cpu_s`` of CPU.

    At least ``interval_s`` (the profile's pace, from the flush interval); longer when a cycle is
    expensive, so that cycles take about ``budget`` of a core: a large job is stored in larger,
    rarer batches instead of slowing down. The cost of a cycle is what the ranks flushed since
    the last one, so a longer wait does not make the next cycle costlier per second of the job.
    """
    return min(MAX_GAP_S, max(interval_s, spent_cpu_s / budget))
