#!/usr/bin/env python3
"""When does a GPM read cost CPU? Per-read cost over the life of an NCCL job, phase by phase.

usage: PYTHONPATH=src python3 bench/gpm_timeline.py [--interval 100ms] [--before 2] [--after 3]
                                                    [--load-s 8] [--streaming keep|on|off]
                                                    [-- LOAD COMMAND...]

The link monitor meets its cost target on an idle node and under a steady NVLink load, yet the
same reads cost far more while a job is profiled. This script separates the phases of a job's
life: it samples every GPU through ``GpmSource`` at ``--interval`` (the thread CPU time and the
wall time of each read kept with its timestamp), starts the load ``--before`` seconds in, notes
when the load says it is ``loading`` (its communicator is up), when it exits, and samples
``--after`` seconds more. Default load: ``torchrun --nproc_per_node=<GPUs>`` of an all-reduce loop
of 256 MiB for ``--load-s`` seconds (``bench/nccl_load.py``; PyTorch and NCCL needed).

Prints, per phase (before, start-up, steady, shutdown+after): reads, CPU per read (median, mean,
max), reads above 1 ms CPU, and the share of one core the reads take at the interval; then, per
GPU, the GPM bytes integrated over the run beside NVML's exact NVLink DATA counters (read once at
the first and once at the last sample, outside the timed reads), so a cheaper way of reading is
seen to stay exact. ``--streaming on|off`` sets NVML's GPM streaming state of every GPU for the
run (``nvmlGpmSetStreamingEnabled``, root only) and puts the previous state back at the end.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
from dataclasses import dataclass
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rankmap.counters.sampler import FieldSource, GpmSource, LinkSampler, SamplerCost  # noqa: E402
from rankmap.pipeline.monitor import parse_interval  # noqa: E402



def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--interval", default="100ms")
    a.add_argument("--before", type=float, default=2.0)
    a.add_argument("--after", type=float, default=3.0)
    a.add_argument("--load-s", type=float, default=8.0)
    a.add_argument("--streaming", choices=("keep", "on", "off"), default="keep",
                   help="GPM streaming state for the run (measured: it changes neither cost nor stalls; "
                        "set 'off' explicitly, the NVLink rates read zero on 2x H200, driver 580)")
    a.add_argument("--no-hold", action="store_true", help="read every tick, even right after a stalled read")
    a.add_argument("--reads-csv", help="write every read (time, GPU, CPU, wall, cumulative NVLink TX) here")
    a.add_argument("load", nargs=argparse.REMAINDER)
    args = a.parse_args()
    period = parse_interval(args.interval)
    src = GpmSource()
    n = src.gpu_count()
    nv = src.nvml

    def streaming() -> list[int | None]:
        try:
            return [int(nv.nvmlGpmQueryIfStreamingEnabled(h)) for h in src.handles]
        except (AttributeError, nv.NVMLError):
            return [None] * n

    was = streaming()
    if args.streaming != "keep":
        for h in src.handles:
            nv.nvmlGpmSetStreamingEnabled(h, int(args.streaming == "on"))
        src.close()
        src = GpmSource()  # fresh first snapshots, taken in the new state
    now_state = streaming()
    fields = FieldSource()
    load = [x for x in args.load if x != "--"]
    if not load:
        load = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
                str(ROOT / "bench" / "nccl_load.py")]
    reads: list[tuple[float, int, int, int]] = []  # (t s, gpu, cpu ns, wall ns)
    log = open(args.reads_csv, "w") if args.reads_csv else None  # noqa: SIM115
    if log:
        log.write("t_s,gpu,cpu_ns,wall_ns,nvlink_tx_bytes,snapshot_skipped\n")
    marks: dict[str, float] = {}
    t0 = time.monotonic()

    class Tagged:
        """The source, noting which GPU is being read (for the list of slow reads)."""

        kind, gap_safe, gpu, tx, skipped = src.kind, src.gap_safe, 0, None, False

        def gpu_count(self) -> int:
            return n

        def read(self, g: int):  # noqa: ANN201
            self.gpu, d0 = g, src.discarded
            c = src.read(g)
            self.tx, self.skipped = c.nvlink_tx, src.discarded > d0
            return c

    tagged = Tagged()

    @dataclass
    class TimedCost(SamplerCost):
        def add_read(self, wall_ns: int, cpu_ns: int) -> None:
            super().add_read(wall_ns, cpu_ns)
            reads.append((time.monotonic() - t0, tagged.gpu, cpu_ns, wall_ns))
            if log:
                log.write(f"{reads[-1][0]:.6f},{tagged.gpu},{cpu_ns},{wall_ns},{tagged.tx},{int(tagged.skipped)}\n")

    sampler = LinkSampler(tagged, interval_s=period, keep=False, cost=TimedCost(),
                          stall_ms=None if args.no_hold else 2.0).start()
    data0 = [fields.nvlink_data_raw(g)[:2] for g in range(n)]
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
    sampler.stop()
    data1 = [fields.nvlink_data_raw(g)[:2] for g in range(n)]
    tot = sampler.totals()
    if log:
        log.write(f"# marks {marks}\n")
        log.close()
    if args.streaming != "keep":
        for h, w in zip(src.handles, was):
            nv.nvmlGpmSetStreamingEnabled(h, w)
    src.close()
    fields.close()
    lo = marks.get("loading", marks["end"])
    phases = [("before the job", 0.0, marks["start"]), ("job start-up", marks["start"], lo),
              ("steady load", lo, marks["end"]), ("job end + after", marks["end"], float("inf")),
              ("whole run", 0.0, float("inf"))]
    print(f"GPM reads of {n} GPUs every {args.interval} through one job's life (load exit {rc}); "
          f"start {marks['start']:.1f} s, communicator up {lo:.1f} s, end {marks['end']:.1f} s; "
          f"GPM streaming {now_state} (was {was})")
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
    c = sampler.cost
    print(f"   {c.reads} reads; {c.stalls} stalled (> 2 ms CPU), {c.held} ticks held after them, "
          f"{src.discarded} snapshots not used as end points")
    for g in range(n):
        for i, name in enumerate(("TX", "RX")):
            gpm = getattr(tot[g], ("nvlink_tx", "nvlink_rx")[i]) or 0
            data = ((data1[g][i] or 0) - (data0[g][i] or 0)) * 1024
            off = f"{100 * (gpm / data - 1):+.3f} %" if data else "-"
            print(f"   GPU {g} NVLink {name}: GPM {gpm / 1e9:10.3f} GB, DATA counters {data / 1e9:10.3f} GB, "
                  f"GPM off by {off}")
    slow = sorted((r for r in reads if r[2] > 1e6), key=lambda r: -r[2])[:8]
    for t, g, c, w in sorted(slow):
        print(f"   slow read at {t:7.3f} s, GPU {g}: CPU {c / 1e6:.2f} ms, wall {w / 1e6:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
