#!/usr/bin/env python3
"""What `rankmap profile` costs a real MPI job: rankmap's own CPU share and the job's slowdown.

usage: PYTHONPATH=src python3 bench/profile_overhead.py [--ranks 16] [--rounds 10000] [--reps 3]
                    [--load 0] [--modes plain,defaults,fine] [--mpirun mpirun.openmpi] [--mpicc mpicc.openmpi]

examples/mpi/pairs_every_ms.c on --ranks ranks of this machine: every rank sends 1 KiB to every
other rank every millisecond (--rounds rounds). Side by side in one run, rep by rep, the order of
the modes rotated from rep to rep (so that no mode always follows the same neighbour):

  plain     mpirun -np N pairs_every_ms            (no rankmap)
  defaults  rankmap profile -- <same>              (--flush-ms 1000 --bucket-ms 100)
  fine      rankmap profile --flush-ms 100 --bucket-ms 10 -- <same>

and, to take a difference apart, any of:

  monitor   plain with Open MPI's monitoring PML on (what `rankmap profile` asks Open MPI for)
  preload   plain with the shim preloaded at the defaults, no rankmap process (its records are dropped)
  bucket10  rankmap profile --bucket-ms 10 (the flush at its default)
  flush100  rankmap profile --flush-ms 100 (the buckets at their default)

--load N runs N busy processes (`yes > /dev/null`) beside every mode, stopped at the end: with
more ranks than cores the job's ranks poll and yield, so any other runnable process slows them.

For each mode: the median wall time of the whole command and of the job's own loop (what rank 0
of pairs_every_ms prints: MPI start-up and rankmap's start and final ingest left out), each over
plain's, their spread (max / min over the reps); for the profiled modes rankmap's own process CPU
time while the job ran (user + system of the rankmap process, not of the job: the job records it
as rankmap_cpu_s) over the job's wall time, the ranks' flush-thread wake-ups per second (the
records' `flush_thread.wakeups` META) and whether the stored matrix is exact (every pair:
1024 x rounds bytes).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BYTES = 1024
# mode -> (`rankmap profile` options, or None for a run without rankmap; extra launcher options; label)
MODES: dict[str, tuple[list[str] | None, list[str], str]] = {
    "plain": (None, [], "(no rankmap)"),
    "defaults": ([], [], "--flush-ms 1000 --bucket-ms 100"),
    "fine": (["--flush-ms", "100", "--bucket-ms", "10"], [], "--flush-ms 100 --bucket-ms 10"),
    "monitor": (None, ["-x", "OMPI_MCA_pml_monitoring_enable=2"], "(no rankmap) monitoring PML"),
    "preload": (None, [], "(no rankmap) shim preloaded"),
    "bucket10": (["--bucket-ms", "10"], [], "--flush-ms 1000 --bucket-ms 10"),
    "flush100": (["--flush-ms", "100"], [], "--flush-ms 100 --bucket-ms 100"),
}


def loop_seconds(stdout: str) -> float | None:
    """The job's own loop time, as rank 0 of pairs_every_ms prints it."""
    m = re.search(r"rounds in ([0-9.]+) s", stdout)
    return float(m.group(1)) if m else None


def wakeups_per_s(run_dir: Path) -> float | None:
    """Median over the ranks of their flush threads' wake-ups per second of the job, from the records."""
    from rankmap.formats.record import read
    rates = []
    for f in sorted(run_dir.glob("rank-*.mpi.rmrec")):
        rec = read(f)
        n = rec.meta.get("flush_thread.wakeups")
        if n is not None and rec.elapsed_ns:
            rates.append(int(n) / (rec.elapsed_ns / 1e9))
    return statistics.median(rates) if rates else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--load", type=int, default=0, help="busy processes beside the job (default none)")
    ap.add_argument("--modes", default="plain,defaults,fine", help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--mpirun", default="mpirun.openmpi" if shutil.which("mpirun.openmpi") else "mpirun")
    ap.add_argument("--mpicc", default="mpicc.openmpi" if shutil.which("mpicc.openmpi") else "mpicc")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if "plain" not in modes or any(m not in MODES for m in modes):
        raise SystemExit(f"--modes: plain and any of {', '.join(MODES)}")
    print(f"# {platform.node()}: {os.cpu_count()} CPUs, {args.ranks} ranks x {args.ranks - 1} peers, "
          f"1 KiB per pair per ms, {args.rounds} rounds, {args.reps} reps ({args.mpirun}), "
          f"{args.load} busy processes beside; load average at the start {os.getloadavg()[0]:.1f}")
    load: list[subprocess.Popen] = []
    try:
        with tempfile.TemporaryDirectory(prefix="rankmap-bench-profile-") as tmp:
            load = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.load)]
            res = run_modes(Path(tmp), args, modes)
    finally:
        for p in load:
            p.kill()
            p.wait()
    report(res, modes)
    print(f"# medians over the reps; spread = max / min over the reps; % of a core = rankmap's CPU time / "
          f"the job's wall time; load average at the end {os.getloadavg()[0]:.1f}")


def run_modes(tmp: Path, args: argparse.Namespace, modes: list[str]) -> dict[str, list[dict]]:
    exe = tmp / "pairs_every_ms"
    subprocess.run([args.mpicc, "-O2", "-o", str(exe), str(ROOT / "examples" / "mpi" / "pairs_every_ms.c")],
                   check=True)
    opts = [args.mpirun]
    if args.mpirun.endswith(("mpirun", "mpirun.openmpi")):
        opts += ["--allow-run-as-root", "--oversubscribe"]
    job = ["-np", str(args.ranks), str(exe), str(BYTES), str(args.rounds), "1000"]
    env = dict(os.environ, RANKMAP_HOME=str(tmp / "home"), RANKMAP_DB=f"sqlite:///{tmp / 'rankmap.db'}",
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rankmap = [sys.executable, "-m", "rankmap"]
    # build the shim before timing anything
    subprocess.run(rankmap + ["profile", "--no-summary", "--", *opts, "-np", "2", str(exe), "2", "2", "0"],
                   env=env, capture_output=True, check=True)
    from rankmap.capture.shim_build import build_shim
    shim = build_shim(args.mpicc)
    preload = ["-x", f"LD_PRELOAD={shim}", "-x", f"RANKMAP_RUN_DIR={tmp / 'preload'}"]
    res: dict[str, list[dict]] = {m: [] for m in modes}
    for rep in range(args.reps):
        for mode in modes[rep % len(modes):] + modes[:rep % len(modes)]:
            prof, extra, _ = MODES[mode]
            if mode == "preload":
                extra = preload
                shutil.rmtree(tmp / "preload", ignore_errors=True)
            t0 = time.monotonic()
            if prof is None:
                p = subprocess.run([*opts, *extra, *job], env=env, capture_output=True, text=True)
                row = {"wall": time.monotonic() - t0, "loop": loop_seconds(p.stdout)}
                if mode == "preload":
                    row["wake"] = wakeups_per_s(tmp / "preload")
                res[mode].append(row)
                if p.returncode != 0:
                    raise SystemExit(f"{mode} run failed: {p.stderr}")
                continue
            p = subprocess.run(rankmap + ["profile", "--no-summary", "--no-progress", *prof, "--", *opts, *job],
                               env=env, capture_output=True, text=True)
            wall = time.monotonic() - t0
            if p.returncode != 0:
                raise SystemExit(f"rankmap profile failed: {p.stderr}")
            meta = json.loads(subprocess.run(rankmap + ["export", "latest", "--format", "json"], env=env,
                                             capture_output=True, text=True, check=True).stdout)["job"]
            text = subprocess.run(rankmap + ["export", "latest"], env=env, capture_output=True, text=True,
                                  check=True).stdout
            m: dict[tuple[int, int], int] = {}
            for r in csv.DictReader(io.StringIO(text)):
                k = (int(r["src"]), int(r["dst"]))
                m[k] = m.get(k, 0) + int(r["bytes"])
            n = args.ranks
            exact = m == {(i, j): BYTES * args.rounds for i in range(n) for j in range(n) if i != j}
            job_s = meta["elapsed_ns"] / 1e9
            res[mode].append({"wall": wall, "loop": loop_seconds(p.stdout), "cpu": meta["meta"]["rankmap_cpu_s"],
                              "share": 100 * meta["meta"]["rankmap_cpu_s"] / job_s, "exact": exact,
                              "cycles": meta["meta"]["ingest_cycles"], "wake": wakeups_per_s(Path(meta["run_dir"]))})
    return res


def _med(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _spread(rows: list[dict], key: str) -> str:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return f"{max(vals) / min(vals):.2f}" if vals and min(vals) > 0 else "-"


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def report(res: dict[str, list[dict]], modes: list[str]) -> None:
    base_wall, base_loop = _med(res["plain"], "wall"), _med(res["plain"], "loop")
    print(f"{'mode':<9} {'settings':<32} {'wall s':>7} {'x plain':>7} {'spread':>6} {'loop s':>7} {'x plain':>7} "
          f"{'spread':>6} {'wakes/s':>7} {'rankmap cpu s':>13} {'% of a core':>11} {'cycles':>6} {'exact':>5}")
    for mode in modes:
        rs = res[mode]
        wall, loop = _med(rs, "wall"), _med(rs, "loop")
        profiled = MODES[mode][0] is not None
        print(f"{mode:<9} {MODES[mode][2]:<32} {wall:>7.2f} {wall / base_wall:>7.2f} {_spread(rs, 'wall'):>6} "
              f"{_f(loop, '.2f'):>7} {_f(loop and base_loop and loop / base_loop, '.2f'):>7} "
              f"{_spread(rs, 'loop'):>6} {_f(_med(rs, 'wake'), '.1f'):>7} "
              + (f"{_med(rs, 'cpu'):>13.2f} {_med(rs, 'share'):>11.2f} {_med(rs, 'cycles'):>6.0f} "
                 f"{'yes' if all(r['exact'] for r in rs) else 'NO':>5}" if profiled else ""))
    print("# per rep (wall s / loop s), in the order run:")
    for mode in modes:
        print(f"#   {mode:<9} " + "  ".join(f"{r['wall']:.2f}/{_f(r['loop'], '.2f')}" for r in res[mode]))


if __name__ == "__main__":
    main()
