"""POP efficiency metrics of a job, from each rank's elapsed time and time inside MPI.

The POP Centre of Excellence (Performance Optimisation and Productivity) defines a hierarchy of
multiplicative efficiencies; rankmap computes the top of it from what the shim records:

* useful time of rank i: ``useful_i = elapsed_i - time_in_MPI_i`` (computation outside MPI)
* runtime: ``max_i elapsed_i``
* **load balance** ``LB = avg(useful) / max(useful)``
* **communication efficiency** ``CommE = max(useful) / runtime``
* **parallel efficiency** ``PE = LB x CommE = avg(useful) / runtime``

See docs/pop-metrics.md for what they mean and their limits.

The shim times one short call in ``RANKMAP_SAMPLE`` (16; starts such as ``MPI_Isend`` one in
``RANKMAP_SAMPLE_START``, 256) and counts it that many times; with few
calls whose durations vary wildly (ranks that busy-poll on shared cores) the estimate can exceed
the rank's whole run. Such ranks are listed in ``overrun``, and the metrics are then withheld with
:meth:`PopMetrics.withheld` rather than printed from a clamped, meaningless useful time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping


@dataclass(frozen=True)
class PopMetrics:
    ranks: int
    runtime_ns: int
    avg_useful_ns: float
    max_useful_ns: int
    load_balance: float
    communication_efficiency: float
    parallel_efficiency: float
    overrun: tuple[int, ...] = ()      # world ranks whose recorded time inside MPI exceeds their run time

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["overrun"] = list(self.overrun)
        return d

    def withheld(self) -> str | None:
        """Why the metrics are not to be shown (None: they are sound)."""
        if not self.overrun:
            return None
        shown = ", ".join(str(r) for r in self.overrun[:8]) + (", ..." if len(self.overrun) > 8 else "")
        who = f"rank {shown}" if len(self.overrun) == 1 else f"{len(self.overrun)} ranks ({shown})"
        return (f"not computed: {who} recorded more time inside MPI than they ran; short calls are "
                f"timed one in RANKMAP_SAMPLE (16; starts one in 256) and scaled, which a few slow calls inflate: time every "
                f"call with RANKMAP_SAMPLE=1 in the ranks' environment (mpirun -x RANKMAP_SAMPLE=1, "
                f"mpiexec -genv RANKMAP_SAMPLE 1)")


def pop_metrics(ranks: Iterable[Mapping]) -> PopMetrics | None:
    """Metrics over rank rows with ``elapsed_ns`` and ``comm_ns``; None when nothing usable was recorded."""
    useful, elapsed, overrun = [], [], []
    for r in ranks:
        e, c = r.get("elapsed_ns"), r.get("comm_ns")
        if not e or e <= 0 or c is None:
            continue
        elapsed.append(int(e))
        useful.append(max(0, int(e) - int(c)))
        if int(c) > int(e):
            overrun.append(int(r.get("world_rank", len(elapsed) - 1)))
    if not elapsed:
        return None
    runtime = max(elapsed)
    mx = max(useful)
    avg = sum(useful) / len(useful)
    lb = avg / mx if mx else 1.0
    ce = mx / runtime if runtime else 0.0
    return PopMetrics(len(elapsed), runtime, avg, mx, lb, ce, lb * ce, tuple(sorted(overrun)))
