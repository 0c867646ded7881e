#!/usr/bin/env python3
"""When does a GPM read cost CPU? Per-read cost over the life of an NCCL job, phase by phase.

usage: PYTHONPATH=src python3 bench/gpm_timeline.py [--interval 100ms] [--before 2] [--after 3]
                                                    [--load-s 8] [-- LOAD COMMAND...]

The link monitor meets its cost target on an idle node and under a steady NVLink load, yet the
same reads cost far more while a job is profiled. This script separates the phases of a job's
life: it samples every GPU through ``GpmSource`` at ``--interval`` (the thread CPU time and the
wall time of each read kept with its timestamp), starts the load ``--before`` seconds in, notes
when the load says it is ``loading`` (its communicator is up), when it exits, and samples
``--after`` seconds more. Default load: ``torchrun --nproc_per_node=<GPUs>`` of an all-reduce loop
of 256 MiB for ``--load-s`` seconds (``bench/nccl_load.py``; PyTorch and NCCL needed).

Prints, per phase (before, start-up, steady, shutdown+after): reads, CPU per read (median, mean,
max), reads above 1 ms CPU, and the share of one core the reads take at the interval.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rankmap.capture.sampler import GpmSource  # noqa: E402
from rankmap.pipeline.monitor import parse_interval  # noqa: E402



def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--interval", default="100ms")
    a.add_argument("--before", type=float, default=2.0)
    a.add_argument("--after", type=float, default=3.0)
    a.add_argument("--load-s", type=float, default=8.0)
    a.add_argument("load", nargs=argparse.REMAINDER)
    args = a.parse_args()
    period = parse_interval(args.interval)
    src = GpmSource()
    n = src.gpu_count()
    load = [x for x in args.load if x != "--"]
    if not load:
        load = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
                str(ROOT / "bench" / "nccl_load.py")]
    reads: list[tuple[float, int, int, int]] = []  # (t s, gpu, cpu ns, wall ns)
    marks: dict[str, float] = {}
    t0 = time.monotonic()
    stop = threading.Event()

    def sample() -> None:
        nxt = time.monotonic()
        while not stop.is_set():
            for g in range(n):
                c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                src.read(g)
                reads.append((time.monotonic() - t0, g, time.thread_time_ns() - c0, time.perf_counter_ns() - w0))
            nxt += period
            stop.wait(max(0.0, nxt - time.monotonic()))

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    time.sleep(args.before)
    marks["start"] = time.monotonic() - t0
    env = dict(os.environ, LOAD_S=str(args.load_s))
    p = subprocess.Popen(load, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                         start_new_session=True)
    for line in p.stdout:  # type: ignore[union-attr]
        if "loading" in line and "loading" not in marks:
            marks["loading"] = time.monotonic() - t0
    try:
        rc = p.wait(timeout=args.load_s + 60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        rc = p.wait()
    marks["end"] = time.monotonic() - t0
    time.sleep(args.after)
    stop.set()
    th.join()
    src.close()
    lo = marks.get("loading", marks["end"])
    phases = [("before the job", 0.0, marks["start"]), ("job start-up", marks["start"], lo),
              ("steady load", lo, marks["end"]), ("job end + after", marks["end"], float("inf"))]
    print(f"GPM reads of {n} GPUs every {args.interval} through one job's life (load exit {rc}); "
          f"start {marks['start']:.1f} s, communicator up {lo:.1f} s, end {marks['end']:.1f} s")
    print(f"{'phase':<18}{'reads':>7}{'CPU med ms':>12}{'CPU mean ms':>13}{'CPU max ms':>12}"
          f"{'>1 ms':>7}{'% core':>9}")
    for name, a_, b_ in phases:
        cpu = [r[2] / 1e6 for r in reads if a_ <= r[0] < b_]
        if not cpu:
            continue
        span = (min(b_, reads[-1][0]) - a_) or 1.0
        share = 100 * sum(cpu) / 1e3 / span
        print(f"{name:<18}{len(cpu):>7}{statistics.median(cpu):>12.4f}{statistics.fmean(cpu):>13.4f}"
              f"{max(cpu):>12.3f}{sum(c > 1 for c in cpu):>7}{share:>9.3f}")
    slow = sorted((r for r in reads if r[2] > 1e6), key=lambda r: -r[2])[:8]
    for t, g, c, w in sorted(slow):
        print(f"   slow read at {t:7.3f} s, GPU {g}: CPU {c / 1e6:.2f} ms, wall {w / 1e6:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
