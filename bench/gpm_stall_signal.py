#!/usr/bin/env python3
"""Does anything cheap announce a stalled GPM read? Device-file opens and process counts around a job.

usage: PYTHONPATH=src python3 bench/gpm_stall_signal.py [--interval 100ms] [--before 2] [--after 3]
                                                       [--load-s 8] [--nproc 1] [--compare REPS]

While a job creates its CUDA contexts and NCCL communicators (and tears them down), single GPM reads
burn 3-120 ms of CPU in the driver; the sampler's stall guard can only react after the first such
read of a burst. This script looks for a signal that comes before it, at no driver cost: an inotify
watch on the GPUs' device files (``/dev/nvidia<N>``, ``/dev/nvidiactl``: a process opens them when it
creates a context and closes them when it ends), and, for comparison, NVML's count of compute
processes per GPU (a driver call: its own cost is timed). It samples every GPU through ``GpmSource``
at ``--interval`` through the life of a ``torchrun --nproc_per_node=--nproc`` job looping all-reduces
(``bench/nccl_load.py``), and prints every read that burnt more than 2 ms of CPU with how long before
it the last device-file event of another process and which events came in the 0.5 s before it (those
that came while the sampler slept: its own NVML calls open the files too, during its reads), and the last process-count change, then how many reads a rule
"hold the sampler for H seconds after another process's device-file event" would have skipped, and how many stalled
reads it would have avoided, for a few H.

``--compare REPS`` checks the rule as ``LinkSampler`` implements it instead (hold every GPU for 0.5 s
after another process opened or closed ``/dev/nvidia<N>``, capped at 2 s; ``/dev/nvidiactl`` not watched): REPS
pairs of sessions, each a ``LinkSampler`` as ``rankmap monitor`` runs it around a job of its own, one
with the open hold and one without (the stall guard on in both), alternating which goes first; one
row per session (stalled reads and their CPU, ticks held by each rule, the sampler's CPU per GPU per
sample, the device files other processes opened or closed), each stalled read's CPU and when it came (before
the launch, seconds after it, or seconds after the job's exit), and the sums per rule.
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dataclasses import dataclass, field  # noqa: E402

from rankmap.counters.devwatch import DeviceFileWatch, gpu_device_files  # noqa: E402
from rankmap.counters.sampler import GpmSource, LinkSampler, SamplerCost  # noqa: E402
from rankmap.pipeline.monitor import parse_interval  # noqa: E402

STALL_NS = 2_000_000


class DeviceWatch:
    """The GPU device files' opens and closes as they come: (monotonic ns when seen, 'open'|'close', path)."""

    def __init__(self, paths: list[str]) -> None:
        self.w = DeviceFileWatch(paths)
        if not self.w.ok:
            raise OSError(self.w.status)
        self.events: list[tuple[int, str, str]] = []

    def poll(self) -> None:
        now = time.monotonic_ns()
        self.events.extend((now, kind, path) for kind, path in self.w.events())


def launch(args: argparse.Namespace) -> subprocess.Popen:
    """The job: ``torchrun`` of ``bench/nccl_load.py`` for ``--load-s`` seconds, in a process group of its own."""
    env = dict(os.environ, LOAD_S=str(args.load_s))
    return subprocess.Popen(["torchrun", f"--nproc_per_node={args.nproc}", str(ROOT / "bench" / "nccl_load.py")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)


@dataclass
class StallCost(SamplerCost):
    """The sampler's cost, with the CPU time of its stalled reads summed apart."""

    stall_cpu_ns: int = 0
    stall_at: list = field(default_factory=list)      # (monotonic ns at the read's end, CPU ns)

    def add_read(self, wall_ns: int, cpu_ns: int) -> None:
        super().add_read(wall_ns, cpu_ns)
        if cpu_ns > STALL_NS:
            self.stall_cpu_ns += cpu_ns
            self.stall_at.append((time.monotonic_ns(), cpu_ns))


def session(args: argparse.Namespace, period: float, hold: bool) -> dict:
    """One LinkSampler session around one job: ``--before`` s, the job, ``--after`` s."""
    src = GpmSource()
    s = LinkSampler(src, interval_s=period, keep=False, cost=StallCost(), open_hold_s=0.5 if hold else None,
                    open_paths=gpu_device_files(args.dev))
    t0 = time.monotonic()
    s.start()
    time.sleep(args.before)
    before = s.cost.held_open             # held before the launch: other processes' events, not this job's
    t_launch = time.monotonic_ns()
    job = launch(args)
    try:
        rc = job.wait(timeout=args.load_s + 120)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        rc = job.wait()
    t_exit = time.monotonic_ns()
    time.sleep(args.after)
    s.stop()
    src.close()
    c = s.cost
    files = dict(s.open_watch.seen) if s.open_watch else {}
    return {"hold": "on" if hold else "off", "rc": rc, "s": time.monotonic() - t0, "samples": c.samples,
            "reads": c.reads, "stalls": c.stalls, "stall_ms": c.stall_cpu_ns / 1e6, "held": c.held,
            "held_open": c.held_open, "before": before, "capped": c.open_capped, "cpu": c.per_gpu_sample_cpu_ms,
            "median": c.median_read_ms, "max": c.max_read_ns / 1e6, "share": c.cpu_share, "watch": c.open_watch,
            "files": ",".join(f"{Path(p).name}:{k}" for p, k in sorted(files.items())) or "-",
            "when": [when(t, cpu, t_launch, t_exit) for t, cpu in c.stall_at]}


def when(t: int, cpu_ns: int, t_launch: int, t_exit: int) -> str:
    """A stalled read's CPU and when it ended: before the launch, in the job (s after the launch) or
    after it (s after the launcher's exit) -- at the job's start, a context's set-up the hold can see
    coming (opens); at its end, a teardown (closes)."""
    if t < t_launch:
        where = f"{(t - t_launch) / 1e9:+.2f} s before the launch"
    elif t <= t_exit:
        where = f"{(t - t_launch) / 1e9:+.2f} s after the launch"
    else:
        where = f"{(t - t_exit) / 1e9:+.2f} s after the job's exit"
    return f"{cpu_ns / 1e6:.1f} ms {where}"


def compare(args: argparse.Namespace, period: float) -> int:
    """``--compare``: the open hold as LinkSampler does it against none, session by session."""
    order = [(r, h) for r in range(args.compare) for h in ((True, False) if r % 2 == 0 else (False, True))]
    print(f"== {len(order)} sessions of {args.before:g} s + a {args.nproc}-GPU job of {args.load_s:g} s load + "
          f"{args.after:g} s at {period * 1e3:g} ms; open hold 0.5 s, cap 2 s; stall guard on in both")
    head = (f"{'rep':>3} {'hold':>4} {'rc':>3} {'s':>5} {'samples':>7} {'stalls':>6} {'stall CPU ms':>12} "
            f"{'held':>4} {'held_open':>9} {'pre-job':>7} {'capped':>6} {'CPU ms/GPU/sample':>17} "
            f"{'median ms':>9} {'max ms':>7} {'thread %':>8}  other processes' opens and closes")
    print(head)
    rows = []
    for rep, hold in order:
        r = session(args, period, hold)
        rows.append(r)
        print(f"{rep + 1:>3} {r['hold']:>4} {r['rc']:>3} {r['s']:>5.1f} {r['samples']:>7} {r['stalls']:>6} "
              f"{r['stall_ms']:>12.1f} {r['held']:>4} {r['held_open']:>9} {r['before']:>7} {r['capped']:>6} "
              f"{r['cpu'] or 0:>17.3f} {r['median'] or 0:>9.3f} {r['max']:>7.1f} {(r['share'] or 0) * 100:>8.2f}  "
              f"{r['files'] if r['hold'] == 'on' else '(no watch)'}", flush=True)
        if hold and r["watch"] and r["watch"].startswith("off"):
            print(f"    watch {r['watch']}")
        for w in r["when"]:
            print(f"    stalled read: {w}")
    print(f"{'hold':>4} {'sessions':>8} {'reads':>6} {'stalls':>6} {'stall CPU ms':>12} {'held_open':>9} "
          f"{'CPU ms/GPU/sample, mean of sessions':>36} {'over all reads':>14}")
    for h in ("on", "off"):
        sel = [r for r in rows if r["hold"] == h]
        reads = sum(r["reads"] for r in sel)
        mean = sum(r["cpu"] or 0 for r in sel) / len(sel)
        pooled = sum((r["cpu"] or 0) * r["reads"] for r in sel) / reads if reads else 0
        print(f"{h:>4} {len(sel):>8} {reads:>6} {sum(r['stalls'] for r in sel):>6} "
              f"{sum(r['stall_ms'] for r in sel):>12.1f} {sum(r['held_open'] for r in sel):>9} {mean:>36.3f} "
              f"{pooled:>14.3f}")
    return 0 if all(r["rc"] == 0 for r in rows) else 1


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--interval", default="100ms")
    a.add_argument("--before", type=float, default=2.0)
    a.add_argument("--after", type=float, default=3.0)
    a.add_argument("--load-s", type=float, default=8.0)
    a.add_argument("--nproc", type=int, default=1)
    a.add_argument("--no-procs", action="store_true", help="leave NVML's process count out (it may open the device files)")
    a.add_argument("--compare", type=int, default=0, metavar="REPS",
                   help="LinkSampler with and without the open hold, REPS pairs of sessions (each around its own job)")
    a.add_argument("--dev", default="/dev", help="--compare: where the GPUs' device files are (a dry run's own)")
    args = a.parse_args()
    period = parse_interval(args.interval)
    if args.compare:
        return compare(args, period)
    src = GpmSource()
    nv, n = src.nvml, src.gpu_count()
    watch = DeviceWatch(sorted(glob.glob("/dev/nvidia[0-9]*")) + ["/dev/nvidiactl"])
    print(f"== {n} GPU(s), GPM reader {getattr(src, 'reader', 'python')}, watching {sorted(watch.w.paths.values())}")
    reads: list[tuple[int, int, int, int]] = []      # (t ns, gpu, cpu ns, wall ns)
    others: list[int] = []                            # device-file events that came between the reads
    other_kinds: list[tuple[int, str, str]] = []      # the same with what and which file
    own = 0                                           # ... and those that came during them
    procs: list[tuple[int, int, int]] = []            # (t ns, gpu, count)
    proc_cost: list[int] = []
    t_start = time.monotonic_ns() + int(args.before * 1e9)
    job = None
    ended_at = None
    next_t = time.monotonic_ns()
    while True:
        now = time.monotonic_ns()
        if job is None and now >= t_start:
            job = launch(args)
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
    print(f"{'read at s':>9} {'gpu':>3} {'cpu ms':>8} {'wall ms':>8} {'last dev event s before':>24} {'last proc change s before':>26}"
          f"  other processes' events in the 0.5 s before")
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
        near = Counter(f"{k} {p.rsplit('/', 1)[-1]}" for e, k, p in other_kinds if 0 <= t - e < 500_000_000)
        print(f"{(t - reads[0][0]) / 1e9:>9.2f} {g:>3} {c / 1e6:>8.2f} {w / 1e6:>8.2f} {fmt(last_ev):>24} {fmt(last_pc):>26}"
              f"  {dict(sorted(near.items())) or '-'}")
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
