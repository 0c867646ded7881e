"""Statistics the benchmarks share: medians of repeated runs and their intervals."""

from __future__ import annotations

import math
import statistics


def median_ci(v: list[float]) -> tuple[float, float, float]:
    """Median of v and its distribution-free 95 % confidence interval: the order statistics
    1.96 standard deviations of a binomial(n, 1/2) either side of n/2 (the count of values below the
    median; for n = 20 the exact interval's ranks 6 and 15).  The rounds of a shared machine have
    outliers -- a rank descheduled in one block -- that a mean and its standard error would not
    survive."""
    v = sorted(v)
    n = len(v)
    h = 1.96 * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - h)), min(n - 1, math.ceil(n / 2 + h) - 1)
    return statistics.median(v), v[lo], v[hi]
