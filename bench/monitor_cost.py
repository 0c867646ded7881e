#!/usr/bin/env python3
"""What the link sampler costs on this node: NVML GPM against NVML field values, side by side.

usage: PYTHONPATH=src python3 bench/monitor_cost.py [--reads 200] [--seconds 3] [--interval 100ms]
                                                   [--bare 200] [--gaps 0,1,10,100] [--per-gap 30]
                                                   [-- LOAD COMMAND...]

1. Read cost: ``--reads`` reads of every GPU through each source, alternating GPM and field-value
   blocks round by round so both see the same machine state; median, mean and slowest read of
   one GPU, in microseconds. (One ``nvmlDeviceGetPcieThroughput`` call per GPU is timed beside
   them: the NVML call that looks like the obvious one and is too slow to sample with.)
2. Running cost: a ``LinkSampler`` at ``--interval`` (10 Hz by default) streaming into a SQLite
   store for ``--seconds`` per source, as ``rankmap monitor`` runs it: the process's CPU time
   (user + system) over wall time, i.e. the share of one core, and the sampler thread's own share.

   Both say which GPM reader the sampler used (``native``: one C call per read; ``python``).

3. Bare calls (``--bare`` calls per GPU, 0 = skip): ``nvmlGpmSampleGet`` alone, ``nvmlGpmMetricsGet``
   alone (the four rates between two snapshots) and rankmap's whole ``GpmSource.read`` beside them,
   once with each reader (``GpmSource.read (python)``, ``GpmSource.read (native)``: two sources of
   their own, read in turn), each timed in the calling thread's CPU time and in wall time, first on
   an idle node and then, if a LOAD COMMAND is given, while it runs (started in its own process
   group once it printed a line containing ``loading``, ended with SIGTERM afterwards; an NCCL job
   that keeps NVLink busy, say). The driver calls' CPU time under load is the floor of GPM
   sampling: rankmap cannot go below it; what a read costs above it is rankmap's own part.

4. The gap before a call (``--gaps`` in ms, empty = skip): ``nvmlGpmSampleGet`` of each GPU after a
   gap of G ms, ``--per-gap`` calls per GPU per gap, the gap once slept (the thread idle, as the
   sampler waits) and once spun (the thread busy on the CPU, reading the clock), alternating. Read
   back to back the call is several times cheaper than once every 100 ms; if the spun gaps are as
   cheap as back to back, the extra cost comes from the CPU having gone idle (the thread or the
   virtual CPU waking), if not, from the driver or the GPU (a fresh sample taking longer to make).
   Both readers' whole ``GpmSource.read`` are timed the same way beside it: after a 100 ms sleep
   is how the sampler calls them at 10 Hz, so their difference there is what the native reader
   saves the sampler (a gap of 100 ms costs per_gap x 2 x GPUs x 3 x 0.1 s: 36 s for 30 on 2 GPUs).

Targets (issue of the live view): <= 0.3 ms per GPU per sample and < 1 % of one core at 10 Hz;
rankmap's own part of a read (the reader in use) <= 0.05 ms CPU. Prints tables, then one PASS/FAIL line per target (a
FLOOR line where the bare driver calls alone exceed 0.3 ms); exit status = number of FAILs.
``--json FILE`` writes the bare-call figures for other checks (gpu/monitor.sh) to compare with.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rankmap.counters.sampler import FieldSource, GpmSource, LinkSampler, StoreWriter  # noqa: E402
from rankmap.errors import RankmapError  # noqa: E402
from rankmap.pipeline.monitor import parse_interval  # noqa: E402
from rankmap.store import open_store  # noqa: E402

TARGET_MS = 0.3
TARGET_SHARE = 0.01
TARGET_OWN_MS = 0.05  # rankmap's Python around the two driver calls, per GPU per read
READERS = ("python", "native")
CALLS = ("nvmlGpmSampleGet", "nvmlGpmMetricsGet", "both (bare)", *(f"GpmSource.read ({r})" for r in READERS))


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
            "per_gpu_ms": s.cost.per_gpu_sample_ms, "reader": s.cost.reader}


def pcie_throughput_ms(src) -> float | None:
    n = src.nvml
    try:
        t = time.perf_counter_ns()
        for h in src.handles:
            n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES)
        return (time.perf_counter_ns() - t) / len(src.handles) / 1e6
    except Exception:  # noqa: BLE001 - a reference figure only
        return None


def bare_costs(src: GpmSource, n: int, readers: dict[str, GpmSource]) -> dict[str, dict[str, list[int]]]:
    """Per call kind: thread CPU ns and wall ns of ``n`` calls per GPU, the GPUs in turn.

    The bare calls use buffers and a request of their own, the same four metrics as the sampler;
    each reader's read goes through ``GpmSource.read`` of a source of its own, as the sampler calls it."""
    nv = src.nvml
    bufs = [[nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()] for _ in src.handles]
    req = nv.c_nvmlGpmMetricsGet_t()
    req.version = nv.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = len(src._ids)
    for i, mid in enumerate(src._ids):
        req.metrics[i].metricId = mid
    out: dict[str, dict[str, list[int]]] = {c: {"cpu": [], "wall": []} for c in CALLS
                                             if not c.startswith("GpmSource.read") or c[16:-1] in readers}

    def timed(call: str, fn, *args) -> None:
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        fn(*args)
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        out[call]["cpu"].append(c1 - c0)
        out[call]["wall"].append(w1 - w0)

    try:
        for g, h in enumerate(src.handles):
            nv.nvmlGpmSampleGet(h, bufs[g][0])
        for _ in range(n):
            for g, h in enumerate(src.handles):
                prev, cur = bufs[g]
                timed("nvmlGpmSampleGet", nv.nvmlGpmSampleGet, h, cur)
                req.sample1, req.sample2 = prev, cur
                timed("nvmlGpmMetricsGet", nv.nvmlGpmMetricsGet, req)
                bufs[g] = [cur, prev]
                for r, rs in readers.items():
                    timed(f"GpmSource.read ({r})", rs.read, g)
    finally:
        for b in bufs:
            for x in b:
                nv.nvmlGpmSampleFree(x)
    for k in ("cpu", "wall"):
        out["both (bare)"][k] = [a + b for a, b in zip(out["nvmlGpmSampleGet"][k], out["nvmlGpmMetricsGet"][k])]
    return out


def gap_costs(src: GpmSource, gaps_ms: list[float], per_gap: int,
              readers: dict[str, GpmSource]) -> list[tuple[str, float, str, list[int], list[int]]]:
    """(call, gap ms, 'slept'|'spun', thread CPU ns, wall ns) of ``nvmlGpmSampleGet`` and of each
    reader's ``GpmSource.read`` after each gap (the calls in turn, each after its own gap)."""
    nv = src.nvml
    bufs = [nv.nvmlGpmSampleAlloc() for _ in src.handles]
    calls = {"nvmlGpmSampleGet": lambda g: nv.nvmlGpmSampleGet(src.handles[g], bufs[g])}
    calls.update({f"GpmSource.read ({r})": rs.read for r, rs in readers.items()})
    out = []
    try:
        for gap in gaps_ms:
            runs = {(c, how): ([], []) for c in calls for how in ("slept", "spun")}
            for i in range(per_gap):
                for how in ("slept", "spun") if i % 2 == 0 else ("spun", "slept"):
                    for g in range(len(src.handles)):
                        for call, fn in calls.items():
                            if how == "slept":
                                time.sleep(gap / 1e3)
                            else:
                                end = time.perf_counter_ns() + int(gap * 1e6)
                                while time.perf_counter_ns() < end:
                                    pass
                            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                            fn(g)
                            w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
                            runs[call, how][0].append(c1 - c0)
                            runs[call, how][1].append(w1 - w0)
            out += [(call, gap, how, cpu, wall) for (call, how), (cpu, wall) in runs.items()]
    finally:
        for b in bufs:
            nv.nvmlGpmSampleFree(b)
    return out


def gap_section(src: GpmSource, gaps_ms: list[float], per_gap: int, readers: dict[str, GpmSource]) -> None:
    print(f"== calls after a gap, {per_gap} per GPU per gap and way, {len(src.handles)} GPUs "
          f"(slept: the thread idle in the gap, as the sampler waits; spun: the thread busy)")
    print(f"{'call (per GPU)':<24} {'gap ms':>7} {'gap':<6} {'CPU median ms':>14} {'CPU mean ms':>12} "
          f"{'wall median ms':>15} {'wall max ms':>12}")
    for call, gap, how, cpu, wall in sorted(gap_costs(src, gaps_ms, per_gap, readers), key=lambda r: (r[1], r[0])):
        print(f"{call:<24} {gap:>7g} {how:<6} {statistics.median(cpu) / 1e6:>14.4f} {statistics.fmean(cpu) / 1e6:>12.4f} "
              f"{statistics.median(wall) / 1e6:>15.4f} {max(wall) / 1e6:>12.3f}")


def start_load(cmd: list[str], wait_s: float = 90.0) -> tuple[subprocess.Popen, str]:
    """Start the load in its own process group; return once it printed a line with ``loading``."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    end, seen = time.monotonic() + wait_s, []
    for line in p.stdout:  # type: ignore[union-attr]
        seen.append(line.rstrip())
        if "loading" in line:
            return p, line.strip()
        if time.monotonic() > end:
            break
    stop_load(p)
    raise RankmapError(f"the load command did not start ({' '.join(cmd)}): {seen[-1] if seen else 'no output'}")


def stop_load(p: subprocess.Popen) -> int | None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    if p.stdout:
        p.stdout.close()
    return p.poll()


def summarise(c: dict[str, list[int]]) -> dict[str, float]:
    return {f"{k}_{f}": getattr(statistics, f)(c[k]) / 1e6 for k in ("cpu", "wall") for f in ("median", "fmean")} | \
        {"wall_max": max(c["wall"]) / 1e6}


def print_bare(runs: dict[str, dict]) -> None:
    print(f"{'call (per GPU)':<24} {'state':<6} {'CPU median ms':>14} {'CPU mean ms':>12} {'wall median ms':>15} "
          f"{'wall mean ms':>13} {'wall max ms':>12}")
    for call in CALLS:
        for state, r in runs.items():
            if call not in r:
                continue
            x = r[call]
            print(f"{call:<24} {state:<6} {x['cpu_median']:>14.4f} {x['cpu_fmean']:>12.4f} {x['wall_median']:>15.4f} "
                  f"{x['wall_fmean']:>13.4f} {x['wall_max']:>12.3f}")


def bare_verdict(runs: dict[str, dict], driver: str, reader: str) -> int:
    """FLOOR line where the driver calls alone exceed the target; PASS/FAIL on rankmap's own part with
    ``reader`` (the one the sampler uses), the other reader's own part beside it for comparison."""
    fails = 0
    for state, r in runs.items():
        bare, ours = r["both (bare)"]["cpu_fmean"], r[f"GpmSource.read ({reader})"]["cpu_fmean"]
        own = ours - bare
        others = [f"{o} reader {r[f'GpmSource.read ({o})']['cpu_fmean'] - bare:.4f} ms"
                  for o in READERS if o != reader and f"GpmSource.read ({o})" in r]
        if bare > TARGET_MS:
            print(f"FLOOR {state}: the bare driver calls nvmlGpmSampleGet + nvmlGpmMetricsGet cost {bare:.4f} ms CPU "
                  f"per GPU (mean; median {r['both (bare)']['cpu_median']:.4f} ms) on driver {driver}: the floor of "
                  f"GPM sampling here, above the {TARGET_MS} ms target whatever rankmap does")
        ok = own <= TARGET_OWN_MS
        fails += not ok
        print(f"{'PASS' if ok else 'FAIL'} {state}: rankmap's own part of a GPM read, {reader} reader, {own:.4f} ms "
              f"CPU per GPU (GpmSource.read {ours:.4f} ms - bare calls {bare:.4f} ms, means; target <= "
              f"{TARGET_OWN_MS} ms){'; the ' + ', '.join(others) if others else ''}")
    return fails


def driver_version(src) -> str:
    try:
        v = src.nvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001 - a label only
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--interval", default="100ms")
    ap.add_argument("--bare", type=int, default=200, help="bare GPM calls per GPU per state (0: skip)")
    ap.add_argument("--json", help="write the bare-call figures here")
    ap.add_argument("--gaps", default="", help="comma-separated gaps in ms before a bare GPM call (empty: skip)")
    ap.add_argument("--per-gap", type=int, default=30, help="calls per GPU per gap and way")
    ap.add_argument("load", nargs=argparse.REMAINDER, help="-- a command that loads the GPUs (NVLink)")
    a = ap.parse_args()
    load = a.load[1:] if a.load[:1] == ["--"] else a.load
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
    if "gpm" in sources:  # the sampler's reader (RANKMAP_GPM_READER, else native where it builds)
        print(f"   GPM reader: {sources['gpm'].reader} ({sources['gpm'].reader_why})")
    print(f"== link sampler cost on {platform.node()}: {len(gpus)} x {gpus[0].name if gpus else '?'}, "
          f"{a.reads} reads per GPU per source, then {a.seconds:g} s at {a.interval} per source")
    costs = read_costs(sources, a.reads)
    run = {name: running_cost(src, interval, a.seconds) for name, src in sources.items()}
    pcie = pcie_throughput_ms(first)
    print(f"{'source':<12} {'median us':>10} {'mean us':>10} {'max us':>10} {'samples':>8} "
          f"{'CPU % of a core':>16} {'sampler thread %':>17}")
    for name in sources:
        c = costs[name]
        r = run[name]
        label = f"{name} ({r['reader']})" if r.get("reader") else name
        print(f"{label:<12} {statistics.median(c) / 1e3:>10.1f} {statistics.fmean(c) / 1e3:>10.1f} "
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
    what = f"{best} ({run[best]['reader']} reader)" if run[best].get("reader") else best
    print(f"{'PASS' if ok else 'FAIL'} {what}: {mean_ms:.3f} ms per GPU per sample (target <= {TARGET_MS} ms)")
    share = run[best]["share"]
    ok = share < TARGET_SHARE
    fails += not ok
    print(f"{'PASS' if ok else 'FAIL'} {what} at {a.interval}: {share * 100:.3f} % of one core, store writes included "
          f"(target < {TARGET_SHARE * 100:g} %)")
    readers = open_readers() if "gpm" in sources and (a.bare > 0 or a.gaps) else {}
    if "gpm" in sources and a.bare > 0:
        fails += bare_section(sources["gpm"], a.bare, load, a.json, readers)
    if "gpm" in sources and a.gaps:
        gap_section(sources["gpm"], [float(g) for g in a.gaps.split(",")], a.per_gap, readers)
    for src in [*sources.values(), *readers.values()]:
        src.close()
    return fails


def open_readers() -> dict[str, GpmSource]:
    """A GPM source of its own per reader (each with its own buffers and totals), for side-by-side reads."""
    out = {}
    for r in READERS:
        try:
            out[r] = GpmSource(reader=r)
        except RankmapError as e:
            print(f"   GpmSource.read ({r}): not available here ({e})")
    return out


def bare_section(src: GpmSource, n: int, load: list[str], json_path: str | None, readers: dict[str, GpmSource]) -> int:
    driver = driver_version(src)
    print(f"== bare GPM calls against GpmSource.read ({', '.join(readers)} reader), {n} per GPU, {len(src.handles)} "
          f"GPUs, driver {driver}: idle{', then under load: ' + ' '.join(load) if load else ''}")
    if src.reader not in readers:
        print(f"FAIL the sampler's {src.reader} reader could not be opened a second time")
        return 1
    runs = {"idle": {k: summarise(v) for k, v in bare_costs(src, n, readers).items()}}
    if load:
        try:
            p, said = start_load(load)
        except RankmapError as e:
            print(f"FAIL {e}")
            return 1 + bare_verdict(runs, driver, src.reader)
        try:
            print(f"   load running: {said}")
            time.sleep(1.0)  # past its first iterations: steady traffic
            runs["load"] = {k: summarise(v) for k, v in bare_costs(src, n, readers).items()}
            alive = p.poll() is None
        finally:
            rc = stop_load(p)
        print(f"   load {'still ran when the calls ended' if alive else f'had ended before the calls did (exit {rc})'}; stopped")
    print_bare(runs)
    fails = bare_verdict(runs, driver, src.reader)
    if load and not alive:
        print("FAIL the load ended before the measurement under load did: that row is not under load")
        fails += 1
    if json_path:
        Path(json_path).write_text(json.dumps({"driver": driver, "target_ms": TARGET_MS, "reader": src.reader, **runs}))
    return fails


if __name__ == "__main__":
    sys.exit(min(main(), 100))
