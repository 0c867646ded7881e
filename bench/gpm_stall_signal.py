#!/usr/bin/env python3
"""Does anything cheap announce a stalled GPM read? Device-file opens and process counts around a job.

usage: PYTHONPATH=src python3 bench/gpm_stall_signal.py [--interval 100ms] [--before 2] [--after 3]
                                                       [--load-s 8] [--nproc 1]

While a job creates its CUDA contexts and NCCL communicators (and tears them down), single GPM reads
burn 3-120 ms of CPU in the driver; the sampler's stall guard can only react after the first such
read of a burst. This script looks for a signal that comes before it, at no driver cost: an inotify
watch on the GPUs' device files (``/dev/nvidia<N>``, ``/dev/nvidiactl``: a process opens them when it
creates a context and closes them when it ends), and, for comparison, NVML's count of compute
processes per GPU (a driver call: its own cost is timed). It samples every GPU through ``GpmSource``
at ``--interval`` through the life of a ``torchrun --nproc_per_node=--nproc`` job looping all-reduces
(``bench/nccl_load.py``), and prints every read that burnt more than 2 ms of CPU with how long before
it the last device-file event of another process (one that came while the sampler slept: the
sampler's own NVML calls open the files too, during its reads) and the last process-count change came, then how many reads a rule
"hold the sampler for H seconds after another process's device-file event" would have skipped, and how many stalled
reads it would have avoided, for a few H.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rankmap.capture.sampler import GpmSource  # noqa: E402
from rankmap.pipeline.monitor import parse_interval  # noqa: E402

IN_OPEN, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE, IN_NONBLOCK = 0x20, 0x08, 0x10, 0o4000
STALL_NS = 2_000_000


class DeviceWatch:
    """inotify on the GPU device files: (monotonic ns, 'open'|'close', path) as they come."""

    def __init__(self, paths: list[str]) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.wd = {}
        for p in paths:
            w = self.libc.inotify_add_watch(self.fd, p.encode(), IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE)
            if w >= 0:
                self.wd[w] = p
        self.events: list[tuple[int, str, str]] = []

    def poll(self) -> None:
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            now, off = time.monotonic_ns(), 0
            while off + 16 <= len(buf):
                wd, mask, _cookie, ln = struct.unpack_from("iIII", buf, off)
                off += 16 + ln
                self.events.append((now, "open" if mask & IN_OPEN else "close", self.wd.get(wd, "?")))


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--interval", default="100ms")
    a.add_argument("--before", type=float, default=2.0)
    a.add_argument("--after", type=float, default=3.0)
    a.add_argument("--load-s", type=float, default=8.0)
    a.add_argument("--nproc", type=int, default=1)
    a.add_argument("--no-procs", action="store_true", help="leave NVML's process count out (it may open the device files)")
    args = a.parse_args()
    period = parse_interval(args.interval)
    src = GpmSource()
    nv, n = src.nvml, src.gpu_count()
    watch = DeviceWatch(sorted(glob.glob("/dev/nvidia[0-9]*")) + ["/dev/nvidiactl"])
    print(f"== {n} GPU(s), GPM reader {getattr(src, 'reader', 'python')}, watching {sorted(watch.wd.values())}")
    reads: list[tuple[int, int, int, int]] = []      # (t ns, gpu, cpu ns, wall ns)
    others: list[int] = []                            # device-file events that came between the reads
    other_kinds: list[tuple[int, str, str]] = []      # the same with what and which file
    own = 0                                           # ... and those that came during them
    procs: list[tuple[int, int, int]] = []            # (t ns, gpu, count)
    proc_cost: list[int] = []
    env = dict(os.environ, LOAD_S=str(args.load_s))
    t_start = time.monotonic_ns() + int(args.before * 1e9)
    job = None
    ended_at = None
    next_t = time.monotonic_ns()
    while True:
        now = time.monotonic_ns()
        if job is None and now >= t_start:
            job = subprocess.Popen(["torchrun", f"--nproc_per_node={args.nproc}", str(ROOT / "bench" / "nccl_load.py")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
            launched = now
        if job is not None and ended_at is None and job.poll() is not None:
            ended_at = now
        if ended_at is not None and now > ended_at + int(args.after * 1e9):
            break
        if job is not None and now > launched + int((args.load_s + 120) * 1e9):
            os.killpg(job.pid, signal.SIGKILL)
            print("the load did not end: killed")
            break
        k0 = len(watch.events)
        watch.poll()                   # what came while the sampler slept: other processes
        others.extend(e for e, _k, _p in watch.events[k0:])
        other_kinds.extend(watch.events[k0:])
        for g in range(n):
            c0, w0 = time.thread_time_ns(), time.monotonic_ns()
            src.read(g)
            reads.append((w0, g, time.thread_time_ns() - c0, time.monotonic_ns() - w0))
            if args.no_procs:
                continue
            c0 = time.thread_time_ns()
            try:
                k = len(nv.nvmlDeviceGetComputeRunningProcesses(src.handles[g]))
            except Exception:  # noqa: BLE001 - not offered in this VM: no such signal
                k = -1
            proc_cost.append(time.thread_time_ns() - c0)
            procs.append((time.monotonic_ns(), g, k))
        k0 = len(watch.events)
        watch.poll()                   # what came during the sampler's own reads: its own NVML calls
        own += len(watch.events) - k0
        next_t += int(period * 1e9)
        time.sleep(max(0.0, (next_t - time.monotonic_ns()) / 1e9))
    watch.poll()
    src.close()
    ev = watch.events
    changes = [t for (t, g, k), (_t0, g0, k0) in zip(procs[n:], procs) if k != k0]
    stalls = [r for r in reads if r[2] > STALL_NS]
    print(f"job launched at +{(launched - reads[0][0]) / 1e9:.2f} s, ended at +{(ended_at - reads[0][0]) / 1e9:.2f} s; "
          f"{len(reads)} reads, {len(stalls)} above 2 ms CPU; {len(ev)} device-file events; "
          + (f"process-count query {sorted(proc_cost)[len(proc_cost) // 2] / 1e6:.3f} ms CPU median, "
             f"{max(proc_cost) / 1e6:.1f} ms max" if proc_cost else "no process-count query")
          + f"; device-file events before the launch {sum(1 for e, _k, _p in ev if e < launched)}, "
            f"after the end {sum(1 for e, _k, _p in ev if e > ended_at)}")
    print(f"{'read at s':>9} {'gpu':>3} {'cpu ms':>8} {'wall ms':>8} {'last dev event s before':>24} {'last proc change s before':>26}")
    print(f"device-file events during the sampler's reads (its own): {own}; between them (other processes): "
          f"{len(others)}, of which before the launch {sum(1 for e in others if e < launched)}")
    from collections import Counter
    for name, sel in (("before the launch", lambda e: e < launched), ("from the launch on", lambda e: e >= launched)):
        kinds = Counter(f"{k} {p}" for e, k, p in other_kinds if sel(e))
        print(f"   other processes' events {name}: {dict(sorted(kinds.items())) or 'none'}")
    for t, g, c, w in stalls:
        last_ev = max((e for e in others if e <= t), default=None)
        last_pc = max((x for x in changes if x <= t), default=None)
        fmt = lambda x: f"{(t - x) / 1e9:.2f}" if x is not None else "-"  # noqa: E731
        print(f"{(t - reads[0][0]) / 1e9:>9.2f} {g:>3} {c / 1e6:>8.2f} {w / 1e6:>8.2f} {fmt(last_ev):>24} {fmt(last_pc):>26}")
    print(f"{'hold s':>6} {'reads skipped':>14} {'stalls avoided':>15} {'stall CPU avoided ms':>21} {'of ms':>7}")
    total = sum(c for _t, _g, c, _w in stalls)
    for hold in (0.5, 1, 2, 4, 8):
        h = int(hold * 1e9)
        held = lambda t: any(0 <= t - e < h for e in others)  # noqa: E731
        skipped = sum(1 for r in reads if held(r[0]))
        avoided = [r for r in stalls if held(r[0])]
        print(f"{hold:>6g} {skipped:>14} {len(avoided):>15} {sum(r[2] for r in avoided) / 1e6:>21.1f} {total / 1e6:>7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
