"""What placement minimises, and how two results are compared.

Three objectives, each a lexicographic pair (primary, tie-break):

* ``max`` (the default): the busiest directed link's congestion, then the total congestion summed
  over links. The maximum is the lower bound of the communication time (the busiest link cannot
  finish sooner); the total is the byte-seconds of link time used.
* ``avg``: the average congestion over the links that carry bytes (the figure NVTAGS reports next
  to the maximum), then the maximum. It rewards spreading traffic over more links even when every
  byte then travels further, which is why it is not the default.
* ``hop-bytes``: bytes times directed links crossed, summed over all traffic (what Scotch and
  TreeMatch minimise), then the maximum. It is the total with every link weighing the same.

All three are computed from a vector of per-link congestions (seconds) and the links' bandwidths, so
the solvers share one code path and differ only in the key they rank by. Every automorphism of a
node keeps bandwidths, so it keeps all three keys: symmetry breaking is valid for each.
"""

from __future__ import annotations

import numpy as np

from rankmap.errors import RankmapError
from rankmap.mapping.cost import REL_EPS

OBJECTIVES = ("max", "avg", "hop-bytes")

#: what each objective ranks by, for reports
DESCRIPTION = {
    "max": "maximum link congestion, then total congestion",
    "avg": "average congestion over used links, then maximum congestion",
    "hop-bytes": "hop-bytes (bytes x links crossed), then maximum congestion",
}

#: the names of each objective's (primary, tie-break) figures, for reports
FIGURES = {
    "max": ("maximum congestion", "total congestion"),
    "avg": ("average congestion over used links", "maximum congestion"),
    "hop-bytes": ("hop-bytes", "maximum congestion"),
}


def check(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise RankmapError(f"unknown objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    return objective


def key_of_congestion(cong: np.ndarray, bw_bytes: np.ndarray, objective: str) -> tuple[float, float]:
    """(primary, tie-break) of one congestion vector; ``bw_bytes`` = bandwidth in bytes/s per link."""
    if cong.size == 0:
        return (0.0, 0.0)
    mx = float(cong.max())
    if objective == "max":
        return (mx, float(cong.sum()))
    if objective == "hop-bytes":
        return (float(cong @ bw_bytes), mx)
    used = int(np.count_nonzero(cong))
    return (float(cong.sum()) / used if used else 0.0, mx)


def projected_keys(L: np.ndarray, objective: str, dust: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(primary, tie-break) arrays of loads projected by :meth:`NodeProblem.projection`: link columns
    first, the linear column (total congestion, or hop-bytes) last; vectorised over leading axes.
    ``dust``: loads at or below it count as unused links (incremental sums leave float residue)."""
    links = L[..., :-1]
    mx = links.max(axis=-1) if links.shape[-1] else np.zeros(L.shape[:-1])
    lin = L[..., -1]
    if objective == "max":
        return mx, lin
    if objective == "hop-bytes":
        return lin, mx
    used = np.count_nonzero(links > dust, axis=-1)
    return lin / np.maximum(used, 1), mx


def score_key(score, objective: str) -> tuple[float, float]:
    """The key of a :class:`rankmap.mapping.cost.Score` (whole platform)."""
    if objective == "max":
        return (score.max_congestion, score.total_congestion)
    if objective == "hop-bytes":
        return (score.hop_bytes, score.max_congestion)
    return (score.avg_congestion, score.max_congestion)


def better(a: tuple[float, ...], b: tuple[float, ...], rel: float = REL_EPS) -> bool:
    """``a`` strictly better than ``b``: lexicographic, figures within ``rel`` of each other (relative
    to the larger) counting as equal; the default tolerance absorbs float sums, a larger one is a
    least gain worth having (``--min-gain``)."""
    for x, y in zip(a, b):
        if x == y:
            continue
        if np.isinf(x) or np.isinf(y):
            return x < y
        tol = max(rel, REL_EPS) * max(abs(x), abs(y), 1e-30)
        if x < y - tol:
            return True
        if x > y + tol:
            return False
    return False


def gap(value: float, bound: float) -> float:
    """Relative distance of a result to a lower bound: 0 = proven optimal."""
    if value <= 0:
        return 0.0
    return max(0.0, (value - bound) / value)
