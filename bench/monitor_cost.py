#!/usr/bin/env python3
"""What the link sampler costs on this node: NVML GPM against NVML field values, side by side.

usage: PYTHONPATH=src python3 bench/monitor_cost.py [--reads 200] [--seconds 3] [--interval 100ms]

1. Read cost: ``--reads`` reads of every GPU through each source, alternating GPM and field-value
   blocks round by round so both see the same machine state; median, mean and slowest read of
   one GPU, in microseconds. (One ``nvmlDeviceGetPcieThroughput`` call per GPU is timed beside
   them: the NVML call that looks like the obvious one and is too slow to sample with.)
2. Running cost: a ``LinkSampler`` at ``--interval`` (10 Hz by default) streaming into a SQLite
   store for ``--seconds`` per source, as ``rankmap monitor`` runs it: the process's CPU time
   (user + system) over wall time, i.e. the share of one core, and the sampler thread's own share.

Targets (issue of the live view): <= 0.3 ms per GPU per sample and < 1 % of one core at 10 Hz.
Prints a table, then one PASS/FAIL line per target; exit status = number of FAILs.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rankmap.capture.sampler import FieldSource, GpmSource, LinkSampler, StoreWriter  # noqa: E402
from rankmap.errors import RankmapError  # noqa: E402
from rankmap.pipeline.monitor import parse_interval  # noqa: E402
from rankmap.store import open_store  # noqa: E402

TARGET_MS = 0.3
TARGET_SHARE = 0.01


def read_costs(sources: dict, reads: int, block: int = 10) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {k: [] for k in sources}
    done = 0
    while done < reads:
        for name, src in sources.items():  # alternate blocks: same machine state for both
            for _ in range(block):
                for g in range(src.gpu_count()):
                    t = time.perf_counter_ns()
                    src.read(g)
                    out[name].append(time.perf_counter_ns() - t)
        done += block
    return out


def running_cost(src, interval: float, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        store = open_store(f"sqlite:///{d}/bench.db")
        jid = store.create_job(["bench"], launcher="monitor")
        writer = StoreWriter(store, jid)
        s = LinkSampler(src, interval_s=interval, on_sample=writer, keep=False)
        ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        s.start()
        time.sleep(seconds)
        s.stop()
        writer.flush()
        ru1, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    return {"share": cpu / wall, "thread": s.cost.cpu_share, "samples": s.cost.samples,
            "per_gpu_ms": s.cost.per_gpu_sample_ms}


def pcie_throughput_ms(src) -> float | None:
    n = src.nvml
    try:
        t = time.perf_counter_ns()
        for h in src.handles:
            n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES)
        return (time.perf_counter_ns() - t) / len(src.handles) / 1e6
    except Exception:  # noqa: BLE001 - a reference figure only
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--interval", default="100ms")
    a = ap.parse_args()
    interval = parse_interval(a.interval)
    sources = {}
    for name, cls in (("gpm", GpmSource), ("fields", FieldSource)):
        try:
            sources[name] = cls()
        except RankmapError as e:
            print(f"   {name}: not available here ({e})")
    if not sources:
        print("FAIL no NVML counter source on this node")
        return 1
    first = next(iter(sources.values()))
    gpus = first.gpus()
    print(f"== link sampler cost on {platform.node()}: {len(gpus)} x {gpus[0].name if gpus else '?'}, "
          f"{a.reads} reads per GPU per source, then {a.seconds:g} s at {a.interval} per source")
    costs = read_costs(sources, a.reads)
    run = {name: running_cost(src, interval, a.seconds) for name, src in sources.items()}
    pcie = pcie_throughput_ms(first)
    print(f"{'source':<8} {'median us':>10} {'mean us':>10} {'max us':>10} {'samples':>8} "
          f"{'CPU % of a core':>16} {'sampler thread %':>17}")
    for name in sources:
        c = costs[name]
        r = run[name]
        print(f"{name:<8} {statistics.median(c) / 1e3:>10.1f} {statistics.fmean(c) / 1e3:>10.1f} "
              f"{max(c) / 1e3:>10.1f} {r['samples']:>8} {r['share'] * 100:>16.3f} {(r['thread'] or 0) * 100:>17.3f}")
    if pcie is not None:
        print(f"(nvmlDeviceGetPcieThroughput, for reference: {pcie:.2f} ms per GPU per call)")
    if "gpm" in sources and "fields" in sources:
        print(f"GPM read is {statistics.median(costs['fields']) / statistics.median(costs['gpm']):.1f}x cheaper "
              f"than a field-value read (medians)")
    fails = 0
    best = "gpm" if "gpm" in sources else "fields"
    mean_ms = statistics.fmean(costs[best]) / 1e6
    ok = mean_ms <= TARGET_MS
    fails += not ok
    print(f"{'PASS' if ok else 'FAIL'} {best}: {mean_ms:.3f} ms per GPU per sample (target <= {TARGET_MS} ms)")
    share = run[best]["share"]
    ok = share < TARGET_SHARE
    fails += not ok
    print(f"{'PASS' if ok else 'FAIL'} {best} at {a.interval}: {share * 100:.3f} % of one core, store writes included "
          f"(target < {TARGET_SHARE * 100:g} %)")
    for src in sources.values():
        src.close()
    return fails


if __name__ == "__main__":
    sys.exit(min(main(), 100))
