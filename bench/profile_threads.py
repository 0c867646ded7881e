#!/usr/bin/env python3
"""Where the CPU time of rankmap's own process goes while it profiles a job, thread by thread.

usage: PYTHONPATH=src python3 bench/profile_threads.py [--top 25] [--db URL] [profile options] -- <launch command>

Runs `rankmap profile --no-summary --no-progress [profile options] -- <launch command>` in this process with
a cProfile of its own in each of rankmap's threads -- the main one (start-up, the wait, the final
ingest), the streaming ingest (``rankmap-ingest``) and the link sampler (``rankmap-link-sampler``) --
and prints, per thread, its CPU time and the functions that took most of it (internal time). What
bench/profile_cost.py measures as "rankmap's process", taken apart.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

PROFILES: dict[str, tuple[cProfile.Profile, float]] = {}


def _profiled(name: str, fn):
    """``fn`` run under a cProfile of the calling thread, kept under ``name`` with the thread's CPU time."""
    def run(*a, **k):
        prof = cProfile.Profile(time.thread_time)       # CPU time of this thread, not the wall clock
        c0 = time.thread_time()
        prof.enable()
        try:
            return fn(*a, **k)
        finally:
            prof.disable()
            PROFILES[name] = (prof, time.thread_time() - c0)
    return run


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        raise SystemExit(__doc__.split("\n\n")[1])
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--db")
    ap.add_argument("--no-link-sampler", action="store_true")
    ap.add_argument("--collectives")
    ap.add_argument("--flush-ms", type=int, default=1000)
    a = ap.parse_args(argv[:cut])
    cmd = argv[cut + 1:]

    from rankmap.counters import sampler
    from rankmap.pipeline import profile as P

    P._Streamer.run = _profiled("ingest thread", P._Streamer.run)
    sampler.LinkSampler._loop = _profiled("link sampler thread", sampler.LinkSampler._loop)
    c0, t0 = time.process_time(), time.monotonic()
    res = _profiled("main thread", P.profile_command)(cmd, store=a.db, progress=False, flush_ms=a.flush_ms,
                                                      link_sampler=not a.no_link_sampler, collectives=a.collectives)
    cpu, wall = time.process_time() - c0, time.monotonic() - t0
    print(f"# rankmap profile of {' '.join(cmd)}: exit {res.exit_status}, job {res.elapsed_ns / 1e9:.2f} s, whole "
          f"{wall:.2f} s; process CPU {cpu:.3f} s ({100 * cpu / wall:.2f} % of a core), while the job ran "
          f"{res.cpu_s:.3f} s ({100 * res.cpu_s / (res.elapsed_ns / 1e9):.2f} %); threads alive at the end: "
          f"{', '.join(t.name for t in threading.enumerate())}")
    for name, (prof, tcpu) in sorted(PROFILES.items(), key=lambda kv: -kv[1][1]):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(a.top)
        body = s.getvalue()
        body = body[body.find("   ncalls"):] if "   ncalls" in body else body
        print(f"\n## {name}: {tcpu:.3f} s CPU\n{body.rstrip()}")
    return res.exit_status


if __name__ == "__main__":
    raise SystemExit(main())
