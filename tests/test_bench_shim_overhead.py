"""bench/shim_overhead.py's statistics: the median's interval must hold the true median about 95 %
of the time, whatever the distribution; the per-round pairs of bench/pingpong.c must be read as
printed; runs, not rounds, are the units of the interval."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from conftest import ROOT, load_script

so = load_script(ROOT / "bench" / "shim_overhead.py")


def test_median_interval_covers_the_true_median_about_95_percent():
    rng = random.Random(7)
    for n in (20, 40, 120):
        hits = 0
        trials = 2000
        for _ in range(trials):
            # skewed, with outliers above (a block slowed by a descheduled rank), median exactly 10:
            # half the values in [9, 10), half above 10 with an exponential tail and 10 % outliers
            v = [10 - rng.random() if rng.random() < 0.5 else
                 10 + rng.expovariate(1.0) + (500 if rng.random() < 0.1 else 0) for _ in range(n)]
            med, lo, hi = so.median_ci(v)
            assert lo <= med <= hi
            hits += lo <= 10 <= hi
        assert 0.93 <= hits / trials <= 0.99, (n, hits / trials)


def test_interval_of_sorted_ranks():
    assert so.median_ci([float(x) for x in range(1, 21)]) == (10.5, 6.0, 15.0)   # the exact interval
    med, lo, hi = so.median_ci([float(x) for x in range(1, 101)])
    assert (med, lo, hi) == (50.5, 41.0, 60.0)


def test_run_once_reads_pairs_and_medians(tmp_path: Path):
    out = tmp_path / "out.txt"
    out.write_text("pairs allr 8 300.0 320.0 310.0 900.0 305.0 318.0\nallr 8 305.0 320.0\n"
                   "lat 8 0.1500 0.1600\n")
    runs = [so.run_once([sys.executable, "-c", f"print(open({str(out)!r}).read(), end='')"])]
    fig = runs[0][("allr", 8)]
    assert (fig.plain, fig.shim) == (305.0, 320.0)
    assert fig.pairs == [(300.0, 320.0), (310.0, 900.0), (305.0, 318.0)]
    # the round in which the shim's block was slowed (900 ns) is one of three: the median ignores it
    assert so.ns_per_call(runs, ("allr", 8))[0] == 20.0
    # a figure printed without pairs counts as one round (older pingpong builds)
    assert abs(so.ns_per_call(runs, ("lat", 8))[0] - 5.0) < 1e-9


def test_runs_are_the_units():
    """Rounds of one run are not independent of each other: a run whose every round says 40 ns
    weighs as one run, however many rounds it has."""
    def run(diffs):
        return {("allr", 8): so.Fig(300.0, 300.0 + diffs[0], [(300.0, 300.0 + d) for d in diffs])}
    runs = [run([10, 11, 12]), run([40] * 30), run([14, 13, 15])]
    med, lo, hi = so.ns_per_call(runs, ("allr", 8))
    assert (med, lo, hi) == (14.0, 11.0, 40.0)      # pooled rounds would say 40
