"""POP efficiency metrics of a job, from each rank's elapsed time and time inside MPI.

The POP Centre of Excellence (Performance Optimisation and Productivity) defines a hierarchy of
multiplicative efficiencies; rankmap computes the top of it from what the shim records:

* useful time of rank i: ``useful_i = elapsed_i - time_in_MPI_i`` (computation outside MPI)
* runtime: ``max_i elapsed_i``
* **load balance** ``LB = avg(useful) / max(useful)``
* **communication efficiency** ``CommE = max(useful) / runtime``
* **parallel efficiency** ``PE = LB x CommE = avg(useful) / runtime``

See docs/pop-metrics.md for what they mean and their limits.
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

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def pop_metrics(ranks: Iterable[Mapping]) -> PopMetrics | None:
    """Metrics over rank rows with ``elapsed_ns`` and ``comm_ns``; None when nothing usable was recorded."""
    useful, elapsed = [], []
    for r in ranks:
        e, c = r.get("elapsed_ns"), r.get("comm_ns")
        if not e or e <= 0 or c is None:
            continue
        elapsed.append(int(e))
        useful.append(max(0, int(e) - int(c)))
    if not elapsed:
        return None
    runtime = max(elapsed)
    mx = max(useful)
    avg = sum(useful) / len(useful)
    lb = avg / mx if mx else 1.0
    ce = mx / runtime if runtime else 0.0
    return PopMetrics(len(elapsed), runtime, avg, mx, lb, ce, lb * ce)
