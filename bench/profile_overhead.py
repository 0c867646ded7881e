#!/usr/bin/env python3
"""What `rankmap profile` costs a real MPI job: rankmap's own CPU share and the job's slowdown.

usage: PYTHONPATH=src python3 bench/profile_overhead.py [--ranks 16] [--rounds 10000] [--reps 2]
                                                        [--mpirun mpirun.openmpi] [--mpicc mpicc.openmpi]

examples/mpi/pairs_every_ms.c on --ranks ranks of this machine: every rank sends 1 KiB to every
other rank every millisecond (--rounds rounds). Side by side in one run, rep by rep:

  plain     mpirun -np N pairs_every_ms            (no rankmap)
  defaults  rankmap profile -- <same>              (--flush-ms 1000 --bucket-ms 100)
  fine      rankmap profile --flush-ms 100 --bucket-ms 10 -- <same>

For the profiled runs: rankmap's own process CPU time while the job ran (user + system of the
rankmap process, not of the job: the job records it as rankmap_cpu_s) over the job's wall time,
and whether the stored matrix is exact (every pair: 1024 x rounds bytes).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BYTES = 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--mpirun", default="mpirun.openmpi" if shutil.which("mpirun.openmpi") else "mpirun")
    ap.add_argument("--mpicc", default="mpicc.openmpi" if shutil.which("mpicc.openmpi") else "mpicc")
    args = ap.parse_args()
    print(f"# {platform.node()}: {os.cpu_count()} CPUs, {args.ranks} ranks x {args.ranks - 1} peers, "
          f"1 KiB per pair per ms, {args.rounds} rounds, {args.reps} reps ({args.mpirun})")
    with tempfile.TemporaryDirectory(prefix="rankmap-bench-profile-") as tmp:
        tmp = Path(tmp)
        exe = tmp / "pairs_every_ms"
        subprocess.run([args.mpicc, "-O2", "-o", str(exe), str(ROOT / "examples" / "mpi" / "pairs_every_ms.c")],
                       check=True)
        launch = [args.mpirun]
        if args.mpirun.endswith(("mpirun", "mpirun.openmpi")):
            launch += ["--allow-run-as-root", "--oversubscribe"]
        launch += ["-np", str(args.ranks), str(exe), str(BYTES), str(args.rounds), "1000"]
        env = dict(os.environ, RANKMAP_HOME=str(tmp / "home"), RANKMAP_DB=f"sqlite:///{tmp / 'rankmap.db'}",
                   PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        rankmap = [sys.executable, "-m", "rankmap"]
        modes = {"plain": None, "defaults": [], "fine": ["--flush-ms", "100", "--bucket-ms", "10"]}
        # build the shim before timing anything
        subprocess.run(rankmap + ["profile", "--no-summary", "--", args.mpirun, *launch[1:-3], "2", "2", "0"],
                       env=env, capture_output=True, check=True)
        res: dict[str, list[dict]] = {m: [] for m in modes}
        for _rep in range(args.reps):
            for mode, opts in modes.items():
                t0 = time.monotonic()
                if opts is None:
                    p = subprocess.run(launch, env=env, capture_output=True, text=True)
                    res[mode].append({"wall": time.monotonic() - t0})
                    continue
                p = subprocess.run(rankmap + ["profile", "--no-summary", "--no-progress", *opts, "--", *launch],
                                   env=env, capture_output=True, text=True)
                wall = time.monotonic() - t0
                if p.returncode != 0:
                    raise SystemExit(f"rankmap profile failed: {p.stderr}")
                job = json.loads(subprocess.run(rankmap + ["export", "latest", "--format", "json"], env=env,
                                                capture_output=True, text=True, check=True).stdout)["job"]
                text = subprocess.run(rankmap + ["export", "latest"], env=env, capture_output=True, text=True,
                                      check=True).stdout
                m: dict[tuple[int, int], int] = {}
                for r in csv.DictReader(io.StringIO(text)):
                    k = (int(r["src"]), int(r["dst"]))
                    m[k] = m.get(k, 0) + int(r["bytes"])
                n = args.ranks
                exact = m == {(i, j): BYTES * args.rounds for i in range(n) for j in range(n) if i != j}
                job_s = job["elapsed_ns"] / 1e9
                res[mode].append({"wall": wall, "job": job_s, "cpu": job["meta"]["rankmap_cpu_s"],
                                  "share": 100 * job["meta"]["rankmap_cpu_s"] / job_s, "exact": exact,
                                  "cycles": job["meta"]["ingest_cycles"]})
    base = statistics.median(r["wall"] for r in res["plain"])
    print(f"{'mode':<9} {'settings':<32} {'wall s':>8} {'x plain':>8} {'rankmap cpu s':>14} {'% of a core':>12} "
          f"{'cycles':>7} {'exact':>6}")
    print(f"{'plain':<9} {'(no rankmap)':<32} {base:>8.2f} {1.0:>8.2f}")
    for mode, label in (("defaults", "--flush-ms 1000 --bucket-ms 100"), ("fine", "--flush-ms 100 --bucket-ms 10")):
        rs = res[mode]
        wall = statistics.median(r["wall"] for r in rs)
        print(f"{mode:<9} {label:<32} {wall:>8.2f} {wall / base:>8.2f} "
              f"{statistics.median(r['cpu'] for r in rs):>14.2f} {statistics.median(r['share'] for r in rs):>12.2f} "
              f"{statistics.median(r['cycles'] for r in rs):>7.0f} {'yes' if all(r['exact'] for r in rs) else 'NO':>6}")
    print("# medians over the reps; % of a core = rankmap's CPU time / the job's wall time")


if __name__ == "__main__":
    main()
