#!/usr/bin/env python3
"""Shim overhead: OSU-style ping-pong latency (8 B .. 4 MiB) and message rate, with and without
the rankmap PMPI shim, side by side in one run, plus ns per intercepted call.

usage: PYTHONPATH=src python3 bench/shim_overhead.py [--mpicc mpicc] [--mpirun mpirun]
                                   [--reps 3] [--rounds 20] [--max-bytes 4194304] [--scale 1]
                                   [--baseline-shim OLD/librankmap_mpi.so]

bench/pingpong.c is run on 2 ranks with LD_PRELOAD=librankmap_mpi.so and RANKMAP_RUN_DIR set
(capture on). Inside that one run every figure alternates, round by round, between blocks that
call the PMPI_ entry points (the MPI library alone: "plain") and blocks that call the MPI_ entry
points (through the shim: "shim"), so both see the same machine state; each figure is the median
over the rounds, and the table shows the median over --reps runs. A control run without the shim
(both columns then go to the library) shows the method's own noise floor.

ns/call is the time the shim adds per intercepted call: for latency (shim - plain) of the one-way
time / 2 (one MPI_Send and one MPI_Recv on the critical path); for message rate the added time per
window of 64 MPI_Isend + MPI_Waitall + MPI_Recv (66 calls on the sender) / 66; for self, an
MPI_Sendrecv to the calling rank (one call).

--baseline-shim compares against another build of the shim (e.g. of an earlier revision, built with
the same MPI): its runs alternate with the current shim's, rep by rep, and it gets a table of its
own plus a side-by-side ns/call summary.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rankmap.formats import record as records  # noqa: E402
from rankmap.capture.shim_build import build_shim  # noqa: E402


def launcher(mpirun: str, env: dict[str, str]) -> list[str]:
    """mpirun/mpiexec command line for 2 ranks forwarding env (Open MPI or MPICH hydra)."""
    ver = subprocess.run([mpirun, "--version"], capture_output=True, text=True)
    if "Open MPI" in ver.stdout + ver.stderr or "OpenRTE" in ver.stdout + ver.stderr:
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
        for k, v in env.items():
            cmd += ["-x", f"{k}={v}"]
    else:
        cmd = [mpirun, "-n", "2"]
        for k, v in env.items():
            cmd += ["-genv", k, v]
    return cmd


def run_once(cmd: list[str]) -> dict[tuple[str, int], tuple[float, float]]:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"benchmark run failed: {' '.join(cmd)}\n{p.stderr}")
    out = {}
    for line in p.stdout.splitlines():
        kind, size, plain, shim = line.split()
        out[(kind, int(size))] = (float(plain), float(shim))
    return out


def ns_per_call(runs: list[dict], k: tuple[str, int]) -> float:
    """ns/call of one row: the median over the runs of each run's own figure (both columns of a run
    saw the same load, so this is steadier than the difference of the medians when the load changes
    between runs)."""
    def one(p0: float, s0: float) -> float:
        if k[0] == "lat":
            return (s0 - p0) * 1000 / 2
        if k[0] == "rate":
            return (64 / s0 - 64 / p0) * 1e9 / 66
        return s0 - p0
    return statistics.median(one(*r[k]) for r in runs)


CALLCOST_ITERS, CALLCOST_ROUNDS = 4000, 2


def callcost_units(exe: Path, shim: Path, work: Path, valgrind: bool) -> dict[str, tuple[int, float, float]]:
    """Run bench/callcost.c in one process with the shim preloaded (capture on).

    Without valgrind: {pattern: (calls per iteration, plain ns, shim ns)} in the thread's CPU time.
    With valgrind (callgrind): {pattern: (calls per iteration, plain Ir, shim Ir)} per iteration,
    from the inclusive instruction counts of the plain_<pattern> and shim_<pattern> functions.
    """
    env = dict(os.environ, LD_PRELOAD=str(shim), RANKMAP_RUN_DIR=str(work / "callcost-run"))
    if not valgrind:
        p = subprocess.run([str(exe), "20000", "15"], capture_output=True, text=True, env=env, timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"callcost failed: {p.stderr}")
        out = {}
        for line in p.stdout.split("\n"):
            if line.strip():
                name, calls, plain, shim_ns = line.split()
                out[name] = (int(calls), float(plain), float(shim_ns))
        return out
    cg = work / "callgrind.out"
    p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", str(exe),
                        str(CALLCOST_ITERS), str(CALLCOST_ROUNDS)], capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"callcost under callgrind failed: {p.stderr[-2000:]}")
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(cg)],
                         capture_output=True, text=True).stdout
    incl: dict[str, int] = {}
    for line in ann.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\S*:(plain|shim)_(\w+) ", line)
        if m:
            incl[f"{m.group(2)}_{m.group(3)}"] = int(m.group(1).replace(",", ""))
    calls = {"rate": (129, 64), "pair": (3, 1), "coll": (1, 1)}
    out = {}
    for name, (per_iter, div) in calls.items():
        n = CALLCOST_ITERS // div + 1
        iters = n // 10 + 1 + CALLCOST_ROUNDS * n          # warm-up + rounds, as callcost.c runs them
        if f"plain_{name}" in incl and f"shim_{name}" in incl:
            out[name] = (per_iter, incl[f"plain_{name}"] / iters, incl[f"shim_{name}"] / iters)
    return out


def callcost_table(ns: dict, ir: dict | None) -> None:
    print("\nper intercepted call, one process (bench/callcost.c: 8 B to MPI_COMM_SELF; CPU time, median of 15 rounds)")
    print(f"{'pattern':<8}{'calls':>6}{'plain':>12}{'shim':>12}{'ns/call':>9}" + (f"{'instr/call':>12}" if ir else ""))
    for name, (calls, p0, s0) in ns.items():
        extra = ""
        if ir and name in ir:
            extra = f"{(ir[name][2] - ir[name][1]) / calls:>12.0f}"
        print(f"{name:<8}{calls:>6}{p0:>9.1f} ns{s0:>9.1f} ns{(s0 - p0) / calls:>9.1f}{extra}")


def table(runs: list[dict], title: str) -> None:
    print(f"\n{title}")
    print(f"{'test':<6}{'bytes':>9}{'plain':>14}{'shim':>14}{'added':>9}{'ns/call':>9}")
    keys = sorted(runs[0], key=lambda k: ({"lat": 0, "rate": 1, "self": 2}[k[0]], k[1]))
    for k in keys:
        p0 = statistics.median(r[k][0] for r in runs)
        s0 = statistics.median(r[k][1] for r in runs)
        if k[0] == "lat":
            print(f"{'lat':<6}{k[1]:>9}{p0:>11.3f} us{s0:>11.3f} us{(s0 - p0) / p0 * 100:>8.1f}%"
                  f"{(s0 - p0) * 1000 / 2:>9.0f}")
        elif k[0] == "rate":
            ns = (64 / s0 - 64 / p0) * 1e9 / 66
            print(f"{'rate':<6}{k[1]:>9}{p0 / 1e6:>10.3f} M/s{s0 / 1e6:>10.3f} M/s"
                  f"{(p0 - s0) / p0 * 100:>8.1f}%{ns:>9.0f}")
        else:
            print(f"{'self':<6}{k[1]:>9}{p0:>11.1f} ns{s0:>11.1f} ns{(s0 - p0) / p0 * 100:>8.1f}%{s0 - p0:>9.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpicc", default="mpicc")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--max-bytes", type=int, default=4 << 20)
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--baseline-shim", default=None, help="another librankmap_mpi.so to compare with")
    a = ap.parse_args()

    shim = build_shim(a.mpicc)
    work = Path(tempfile.mkdtemp(prefix="rankmap-bench-"))
    exe = work / "pingpong"
    subprocess.run([shutil.which(a.mpicc) or a.mpicc, "-O2", str(ROOT / "bench" / "pingpong.c"), "-o", str(exe)],
                   check=True)
    args = [str(exe), str(a.max_bytes), str(a.scale), str(a.rounds)]
    with_shim, base, control = [], [], []
    for rep in range(a.reps):
        env = {"LD_PRELOAD": str(shim), "RANKMAP_RUN_DIR": str(work / f"run{rep}")}
        jobs = [(with_shim, env)]
        if a.baseline_shim:      # alternate which of the two goes first
            benv = {"LD_PRELOAD": str(Path(a.baseline_shim).resolve()), "RANKMAP_RUN_DIR": str(work / f"base{rep}")}
            jobs = [(base, benv)] + jobs if rep % 2 else jobs + [(base, benv)]
        for out, e in jobs:
            out.append(run_once(launcher(a.mpirun, e) + args))
        print(f"  run {rep + 1}/{a.reps} done", file=sys.stderr)
    control.append(run_once(launcher(a.mpirun, {}) + args))
    lib = records.read_dir(work / "run0")[0].meta.get("mpi_library", "?")
    print(f"shim: {shim}\nmpi: {lib}\nhost: {platform.machine()}, "
          f"{__import__('os').cpu_count()} CPUs\ncommand: {' '.join(sys.argv)}")
    table(with_shim, f"with the shim (capture on), median of {a.reps} runs x {a.rounds} interleaved rounds")
    if base:
        table(base, f"baseline shim {a.baseline_shim} (capture on), median of {a.reps} runs x {a.rounds} rounds")
        print("\nns per intercepted call, baseline -> this shim (median of the runs' own figures; "
              "sizes up to 1 KiB, rate and self)")
        for k in sorted(with_shim[0], key=lambda k: ({"lat": 0, "rate": 1, "self": 2}[k[0]], k[1])):
            if k[0] == "lat" and k[1] > 1024:
                continue
            print(f"{k[0]:<6}{k[1]:>9}{ns_per_call(base, k):>9.0f} ->{ns_per_call(with_shim, k):>5.0f}")
    table(control, "control: no shim loaded (both columns are the library itself)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
