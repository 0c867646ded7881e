#!/usr/bin/env python3
"""Shim overhead: OSU-style latency, bandwidth and message rate (2 ranks) with and without the
rankmap PMPI shim, side by side in one run; ns and instructions per intercepted call in one process.

usage: PYTHONPATH=src python3 bench/shim_overhead.py [--mpi openmpi,mpich] [--mpicc mpicc --mpirun mpirun]
                                   [--reps 3] [--rounds 20] [--max-bytes 4194304] [--scale 1]
                                   [--callgrind] [--calls-only] [--recv1] [--baseline-shim OLD/librankmap_mpi.so]
                                   [--one-rank]
                                   [--shim-env K=V ...]

Two ranks (bench/pingpong.c, LD_PRELOAD=librankmap_mpi.so, RANKMAP_RUN_DIR set: capture on). Inside
that one run every figure alternates, round by round, between blocks that call the PMPI_ entry
points (the MPI library alone: "plain") and blocks that call the MPI_ entry points (through the
shim), so both see the same machine state. The table shows each column's median over the rounds and
--reps runs; the cost ("added", "ns/call") is each round's own figure -- its two blocks ran back to
back, under the same load -- its median per run (a block slowed by a descheduled rank does not move
it), and the median over the runs with its distribution-free 95 % interval: runs are the units,
since two runs of the same shim differ by more than their rounds do. Control runs without the shim
(both columns then go to the library), one per rep, show the method's own noise floor. Figures:
"lat" one-way latency of a blocking ping-pong (osu_latency), "rate" messages per second and bandwidth of windows of 64 nonblocking
messages (osu_bw; at 8 B with one pair, osu_mbw_mr) with MPI_STATUSES_IGNORE, "osu" the same at 8 B
with a status array, as osu_mbw_mr and osu_bw pass to MPI_Waitall (the library fills the statuses
in both columns; with MPI_STATUSES_IGNORE only the shim asks for them), "self" a Sendrecv to the calling rank, "allr"
an MPI_Allreduce of one double over both ranks (a collective on a real communicator: the one-process
"coll" pattern below runs on MPI_COMM_SELF, where no signature is counted).

One process (bench/callcost.c): the cost of an intercepted call without a peer or a wire, in the
thread's CPU time (a shared machine's descheduling does not count; every mode runs --reps times,
interleaved, and the figure is the median over the runs with its 95 % interval), and with --callgrind in
instructions (valgrind --tool=callgrind: independent of the machine's load). Patterns: "rate"
64 Irecv + 64 Isend + Waitall, "pair" Irecv + Send + Wait, "coll" Allreduce of one double, "lat" Send + Recv (a ping-pong's one
way: osu_latency's critical path), and
"floor": no shim, the "rate" pattern through PMPI_ plus the least bookkeeping an exact receive row
needs (statuses asked of the library, requests noted and matched, source and length summed per
peer): what any exact recording of receives costs at least.

The targets are checked at the end: <= 20 ns per intercepted call (callcost, each pattern) and
>= 0.85 x the 8-byte message rate (rate 8, shim / plain).

--mpi openmpi,mpich runs the Debian flavours (mpicc.X, mpirun.openmpi / mpiexec.mpich) one after
the other; --mpicc/--mpirun name one MPI. --baseline-shim compares against another build of the shim
(same MPI; its one-process figures are printed too), --recv1 against this shim with RANKMAP_RECV=1 (receive rows too),
--one-rank against this shim on rank 0 alone (rank 1 calls the PMPI_ entry points: which rank's cost
a two-rank figure pays): their runs alternate with the shim's, rep by rep. --calls-only skips the 2-rank runs.
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
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchstats import median_ci  # noqa: E402

from rankmap.formats import record as records  # noqa: E402
from rankmap.capture.shim_build import build_shim  # noqa: E402

FLAVOURS = {"openmpi": ("mpicc.openmpi", "mpirun.openmpi"), "mpich": ("mpicc.mpich", "mpiexec.mpich")}
TARGET_NS, TARGET_RATE = 20.0, 0.85


def launcher(mpirun: str, env: dict[str, str]) -> list[str]:
    """mpirun/mpiexec command line for 2 ranks forwarding env (Open MPI or MPICH hydra)."""
    ver = subprocess.run([mpirun, "--version"], capture_output=True, text=True)
    if "Open MPI" in ver.stdout + ver.stderr or "OpenRTE" in ver.stdout + ver.stderr:
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
        for k, v in env.items():
            cmd += ["-x", f"{k}={v}"]
    else:                                   # hydra: bound to cores as Open MPI binds 2 ranks by default
        cmd = [mpirun, "-bind-to", "core", "-n", "2"]
        for k, v in env.items():
            cmd += ["-genv", k, v]
    return cmd


class Fig(NamedTuple):
    """One figure of one run: the medians of its plain and shim columns over the rounds, and each
    round's own (plain, shim) pair (the two blocks ran back to back)."""
    plain: float
    shim: float
    pairs: list[tuple[float, float]]


def run_once(cmd: list[str]) -> dict[tuple[str, int], Fig]:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"benchmark run failed: {' '.join(cmd)}\n{p.stderr}")
    out, pairs = {}, {}
    for line in p.stdout.splitlines():
        f = line.split()
        if f[0] == "pairs":
            v = [float(x) for x in f[3:]]
            pairs[(f[1], int(f[2]))] = list(zip(v[0::2], v[1::2]))
        else:
            out[(f[0], int(f[1]))] = Fig(float(f[2]), float(f[3]), pairs.get((f[0], int(f[1])), []))
    return out


def ns_of(k: tuple[str, int], p0: float, s0: float) -> float:
    """ns added per intercepted call by the shim in one (plain, shim) pair of figure k."""
    if k[0] == "lat":
        return (s0 - p0) * 1000 / 2
    if k[0] in ("rate", "osu"):
        return (64 / s0 - 64 / p0) * 1e9 / 66
    return s0 - p0


def over_runs(runs: list[dict], k: tuple[str, int], f) -> tuple[float, float, float]:
    """f(plain, shim) of figure k: each run's median over its rounds' own pairs, then the median over
    the runs and its 95 % interval.  Runs, not rounds, are the units: two runs of the same shim
    differ by more than their rounds do (each run places its processes, lays out its memory and
    meets the machine anew), so an interval over pooled rounds would claim a precision the next
    run does not repeat."""
    return median_ci([statistics.median(f(p0, s0) for p0, s0 in (r[k].pairs or [(r[k].plain, r[k].shim)]))
                      for r in runs])


def ns_per_call(runs: list[dict], k: tuple[str, int]) -> tuple[float, float, float]:
    """ns/call of one row: each round's own figure (its two blocks ran back to back, under the same
    load), its median per run; the median over the runs and its 95 % interval."""
    return over_runs(runs, k, lambda p0, s0: ns_of(k, p0, s0))


def ci_text(m: tuple[float, float, float], fmt: str = ".0f") -> str:
    return f"{m[0]:{fmt}} [{m[1]:{fmt}}, {m[2]:{fmt}}]"


CALLCOST_ITERS, CALLCOST_ROUNDS = 4000, 2
ORDER = {"lat": 0, "rate": 1, "osu": 2, "self": 3, "allr": 4}   # table rows, in pingpong.c's order


def callcost_units(exe: Path, shim: Path, work: Path, valgrind: bool, extra_env: dict | None = None
                   ) -> dict[str, tuple[int, float, float]]:
    """Run bench/callcost.c in one process with the shim preloaded (capture on).

    Without valgrind: {pattern: (calls per iteration, plain ns, shim ns)} in the thread's CPU time.
    With valgrind (callgrind): {pattern: (calls per iteration, plain Ir, shim Ir)} per iteration,
    from the inclusive instruction counts of the plain_<pattern> and shim_<pattern> functions.
    """
    env = dict(os.environ, LD_PRELOAD=str(shim), RANKMAP_RUN_DIR=str(work / "callcost-run"), **(extra_env or {}))
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
    # Under valgrind every call takes microseconds, so the shim would time every call (a call of
    # 2 us or more is always timed next time); a native run times one short call in 16.  Raising
    # the threshold makes the counted instructions those of a native run.  (Shims older than
    # RANKMAP_SLOW_NS ignore it: their counts include a timed path on every call.)
    env["RANKMAP_SLOW_NS"] = str(10**9)
    p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", str(exe),
                        str(CALLCOST_ITERS), str(CALLCOST_ROUNDS)], capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"callcost under callgrind failed: {p.stderr[-2000:]}")
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(cg)],
                         capture_output=True, text=True).stdout
    incl: dict[str, int] = {}
    for line in ann.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\S*:((?:plain|shim)_\w+|floor_unit) ", line)
        if m:
            incl[m.group(2)] = int(m.group(1).replace(",", ""))
    # pattern: (calls per iteration, iterations divisor, plain unit, shim unit); "floor" runs the
    # plain "rate" twice as often (as the plain side of both "rate" and "floor")
    calls = {"rate": (129, 64, "plain_rate", "shim_rate"), "pair": (3, 1, "plain_pair", "shim_pair"),
             "coll": (1, 1, "plain_coll", "shim_coll"), "lat": (2, 1, "plain_lat", "shim_lat"), "floor": (129, 64, "plain_rate", "floor_unit")}
    out = {}
    for name, (per_iter, div, pu, su) in calls.items():
        n = CALLCOST_ITERS // div + 1
        iters = n // 10 + 1 + CALLCOST_ROUNDS * n          # warm-up + rounds, as callcost.c runs them
        if pu in incl and su in incl:
            out[name] = (per_iter, incl[pu] / (2 * iters if pu == "plain_rate" else iters), incl[su] / iters)
    return out


def callcost_table(runs: list[dict], ir: dict | None, mode: str) -> None:
    """One mode's one-process figures over its runs: plain and shim the medians of the runs' own,
    ns/call each run's (shim - plain) / calls, the median over the runs [95 % interval]."""
    print(f"\nper intercepted call, {mode}, one process (bench/callcost.c: 8 B to MPI_COMM_SELF; CPU time, median of 15 rounds "
          f"per run, {len(runs)} runs;\nspeed = plain / shim time per iteration, for 'rate' the 8 B message rate with sender "
          "and receiver on one core)")
    print(f"{'pattern':<8}{'calls':>6}{'plain':>12}{'shim':>12}   ns/call [95 %]{'speed':>8}" + (f"{'instr/call':>12}" if ir else ""))
    for name in runs[0]:
        calls = runs[0][name][0]
        p0 = statistics.median(r[name][1] for r in runs)
        s0 = statistics.median(r[name][2] for r in runs)
        extra = f"{(ir[name][2] - ir[name][1]) / calls:>12.0f}" if ir and name in ir else ""
        print(f"{name:<8}{calls:>6}{p0:>9.1f} ns{s0:>9.1f} ns   {ci_text(call_ns(runs, name), '.1f'):<18}"
              f"{call_speed(runs, name):>5.2f}{extra}")


def call_ns(runs: list[dict], name: str) -> tuple[float, float, float]:
    """ns added per call of a one-process pattern: each run's own, the median over the runs [95 %]."""
    return median_ci([(r[name][2] - r[name][1]) / r[name][0] for r in runs])


def call_speed(runs: list[dict], name: str) -> float:
    """plain / shim time per iteration of a one-process pattern, the median of the runs' own"""
    return statistics.median(r[name][1] / r[name][2] for r in runs)


def table(runs: list[dict], title: str) -> None:
    """plain and shim: medians over the runs of each run's median; added and ns/call: each round's own
    figure, its median per run, and the median over the runs [95 % interval]."""
    print(f"\n{title}")
    print(f"{'test':<6}{'bytes':>9}{'plain':>14}{'shim':>14}{'added':>9}   ns/call [95 %]")
    keys = sorted(runs[0], key=lambda k: (ORDER[k[0]], k[1]))
    for k in keys:
        p0 = statistics.median(r[k].plain for r in runs)
        s0 = statistics.median(r[k].shim for r in runs)
        ns = ci_text(ns_per_call(runs, k))
        if k[0] == "lat":
            added = over_runs(runs, k, lambda a, b: (b - a) / a * 100)[0]
            print(f"{'lat':<6}{k[1]:>9}{p0:>11.3f} us{s0:>11.3f} us{added:>8.1f}%   {ns}")
        elif k[0] in ("rate", "osu"):
            added = over_runs(runs, k, lambda a, b: (a - b) / a * 100)[0]
            print(f"{k[0]:<6}{k[1]:>9}{p0 / 1e6:>10.3f} M/s{s0 / 1e6:>10.3f} M/s"
                  f"{added:>8.1f}%   {ns:<16}{p0 * k[1] / 1e9:.3f} -> {s0 * k[1] / 1e9:.3f} GB/s")
        else:
            added = over_runs(runs, k, lambda a, b: (b - a) / a * 100)[0]
            print(f"{k[0]:<6}{k[1]:>9}{p0:>11.1f} ns{s0:>11.1f} ns{added:>8.1f}%   {ns}")


def bench_one(mpicc: str, mpirun: str, a: argparse.Namespace) -> dict:
    """Everything for one MPI; returns the figures the target check reads."""
    shim = build_shim(mpicc)
    work = Path(tempfile.mkdtemp(prefix="rankmap-bench-"))
    cc = shutil.which(mpicc) or mpicc
    exe, cost = work / "pingpong", work / "callcost"
    for src, out in (("pingpong.c", exe), ("callcost.c", cost)):
        subprocess.run([cc, "-O2", str(ROOT / "bench" / src), "-o", str(out)], check=True)
    args = [str(exe), str(a.max_bytes), str(a.scale), str(a.rounds)]
    with_shim, base, one, control = [], [], [], []
    for rep in range(0 if a.calls_only else a.reps):
        env = {"LD_PRELOAD": str(shim), "RANKMAP_RUN_DIR": str(work / f"run{rep}"), **a.shim_env}
        jobs = [(with_shim, env, args)]
        if a.baseline_shim or a.recv1:
            benv = {"LD_PRELOAD": str(Path(a.baseline_shim or shim).resolve()), "RANKMAP_RUN_DIR": str(work / f"base{rep}"),
                    **a.shim_env}
            if a.recv1:
                benv["RANKMAP_RECV"] = "1"
            jobs.append((base, benv, args))
        if a.one_rank:                      # pingpong's SHIM_RANKS=1: rank 1 calls PMPI_ throughout
            jobs.append((one, {**env, "RANKMAP_RUN_DIR": str(work / f"one{rep}")}, args + ["1"]))
        jobs.append((control, {}, args))    # no shim: the method's own noise, run by run
        k = rep % len(jobs)                 # rotate which series goes first
        for out, e, cmd in jobs[k:] + jobs[:k]:
            out.append(run_once(launcher(mpirun, e) + cmd))
        print(f"  {mpicc}: run {rep + 1}/{a.reps} done", file=sys.stderr)
    # the shim's default records the send side only; RANKMAP_RECV=1 adds the receive rows
    modes = {"send side only (the default)": (shim, dict(a.shim_env)),
             "RANKMAP_RECV=1 (receives recorded)": (shim, {**a.shim_env, "RANKMAP_RECV": "1"})}
    if a.baseline_shim:                 # the one-process figures of the other build too
        old = Path(a.baseline_shim).resolve()
        modes.update({f"baseline shim, {m}": (old, e) for m, (_s, e) in list(modes.items())})
    # the one-process runs interleave like the two-rank ones: every mode once per rep, the order rotated
    ns: dict[str, list[dict]] = {m: [] for m in modes}
    names = list(modes)
    for rep in range(max(1, a.reps)):
        k = rep % len(names)
        for m in names[k:] + names[:k]:
            sh, e = modes[m]
            ns[m].append(callcost_units(cost, sh, work, False, e))
    ir = {m: callcost_units(cost, sh, work, True, e) for m, (sh, e) in modes.items()} if a.callgrind else {}
    lib = " ".join(records.read_dir(work / "callcost-run")[0].meta.get("mpi_library", "?").split())
    print(f"\n==== {lib.split(',')[0]}\nshim: {shim}\nmpi: {lib}")
    if with_shim:
        table(with_shim, f"with the shim (capture on), median of {a.reps} runs x {a.rounds} interleaved rounds")
    if base:
        what = f"baseline shim {a.baseline_shim}" if a.baseline_shim else "RANKMAP_RECV=1 (receives recorded)"
        table(base, f"{what} (capture on), median of {a.reps} runs x {a.rounds} rounds")
        print("\nns per intercepted call, baseline -> this shim (each round's own figure, its median per run; "
              "the median over the runs [95 % interval]; sizes up to 1 KiB)")
        for k in sorted(with_shim[0], key=lambda k: (ORDER[k[0]], k[1])):
            if k[0] == "lat" and k[1] > 1024:
                continue
            print(f"{k[0]:<6}{k[1]:>9}   {ci_text(ns_per_call(base, k)):>16} -> {ci_text(ns_per_call(with_shim, k))}")
    if one:
        table(one, f"the shim on rank 0 only (rank 1 calls the PMPI_ entry points), median of {a.reps} runs x "
              f"{a.rounds} rounds: for 'rate' the sender's share")
    if control:
        table(control, f"control: no shim loaded (both columns are the library itself), {a.reps} runs x {a.rounds} rounds")
    for m in modes:
        callcost_table(ns[m], ir.get(m), m)
    shutil.rmtree(work, ignore_errors=True)
    def ratio(runs: list[dict], k: tuple[str, int]) -> tuple[float, float, float] | None:
        """shim / plain message rate: each round's own, its median per run, the median over the runs"""
        return over_runs(runs, k, lambda p0, s0: s0 / p0) if runs and k in runs[0] else None
    rate8, osu8 = ratio(with_shim, ("rate", 8)), ratio(with_shim, ("osu", 8))
    rate8_b = ratio(base, ("rate", 8)) if a.recv1 else None
    osu8_b = ratio(base, ("osu", 8)) if a.recv1 else None
    allr = ns_per_call(with_shim, ("allr", 8)) if with_shim and ("allr", 8) in with_shim[0] else None
    return {"name": lib.split(",")[0], "rate8": rate8, "rate8_recv1": rate8_b, "osu8": osu8, "osu8_recv1": osu8_b,
            "allr_ns": allr,
            "modes": {m: {"ns": {k: call_ns(ns[m], k) for k in ns[m][0]},
                          "ir": {k: (s0 - p0) / c for k, (c, p0, s0) in ir[m].items()} if m in ir else {},
                          "rate8_one": call_speed(ns[m], "rate"),
                          "floor8_one": call_speed(ns[m], "floor") if "floor" in ns[m][0] else 0.0}
                      for m in modes}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi", default=None, help="comma-separated flavours: openmpi, mpich")
    ap.add_argument("--mpicc", default="mpicc")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--max-bytes", type=int, default=4 << 20)
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--callgrind", action="store_true", help="also count instructions per call with callgrind")
    ap.add_argument("--calls-only", action="store_true", help="only the one-process figures (no 2-rank runs)")
    ap.add_argument("--baseline-shim", default=None, help="another librankmap_mpi.so to compare with")
    ap.add_argument("--recv1", action="store_true", help="also run the shim with RANKMAP_RECV=1 (receive rows), alternating")
    ap.add_argument("--one-rank", action="store_true",
                    help="also run with the shim's entry points on rank 0 only, alternating: one rank's share of a figure")
    ap.add_argument("--shim-env", action="append", default=[], metavar="K=V",
                    help="an environment variable of every run with a shim (e.g. RANKMAP_SAMPLE=1024)")
    a = ap.parse_args()
    a.shim_env = dict(kv.split("=", 1) for kv in a.shim_env)
    pairs = [FLAVOURS[f.strip()] for f in a.mpi.split(",")] if a.mpi else [(a.mpicc, a.mpirun)]
    print(f"host: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n"
          f"command: {' '.join(sys.argv)}")
    results = [bench_one(cc, run, a) for cc, run in pairs]
    print(f"\ntargets: <= {TARGET_NS:.0f} ns per intercepted call (one process), >= {TARGET_RATE} x the 8 B message rate"
          "\n(figures: the median over the runs of each run's own [its 95 % interval]; the verdict reads the median)")
    met = lambda ok: "met" if ok else "not met"  # noqa: E731
    for r in results:
        print(r["name"])
        for key, what in (("osu8", "statuses asked (as osu_mbw_mr)"), ("rate8", "MPI_STATUSES_IGNORE")):
            if r[key] is not None:
                print(f"  8 B message rate, 2 ranks, {what}, send side only: {ci_text(r[key], '.2f')} x "
                      f"[{met(r[key][0] >= TARGET_RATE)}]")
            if r[key + "_recv1"] is not None:
                print(f"  8 B message rate, 2 ranks, {what}, RANKMAP_RECV=1: {ci_text(r[key + '_recv1'], '.2f')} x "
                      f"[{met(r[key + '_recv1'][0] >= TARGET_RATE)}]")
        if r["allr_ns"] is not None:
            print(f"  MPI_Allreduce over 2 ranks: {ci_text(r['allr_ns'], '.1f')} ns added per call "
                  f"[{met(r['allr_ns'][0] <= TARGET_NS)}]")
        for m, f in r["modes"].items():
            shim_ns = {k: v for k, v in f["ns"].items() if k != "floor"}
            calls = ", ".join(f"{k} {ci_text(v, '.1f')} ns" + (f" / {f['ir'][k]:.0f} instr" if k in f["ir"] else "")
                              for k, v in shim_ns.items())
            print(f"  {m}: per call {calls} [{met(all(v[0] <= TARGET_NS for v in shim_ns.values()))}]; "
                  f"8 B message rate in one process (sender and receiver on one core; no target) {f['rate8_one']:.2f} x")
        f = next(iter(r["modes"].values()))
        if "floor" in f["ns"]:
            print(f"  floor of exact receive rows (no shim; bench/callcost.c floor_rate): {f['ns']['floor'][0]:.1f} ns"
                  + (f" / {f['ir']['floor']:.0f} instr" if "floor" in f["ir"] else "")
                  + f" per call over the library alone, rate pattern; one-process rate {f['floor8_one']:.2f} x")


if __name__ == "__main__":
    main()
