"""`rankmap bench mpi` bandwidth (host buffers) against an independent OSU-style windowed test, interleaved.

    .venv/bin/python bench/mpi_bw_reference.py [--rounds 5] [--sizes 65536,1048576,4194304] [-- mpirun ...]

For each size and round, runs ``rankmap bench mpi --tests bw --buffers host`` once and then
``tests/native/osu_style_bw.c`` (built here with mpicc) with the same window and iteration count; prints
the median of each, their ratio, and each side's own spread (max/min over the rounds) -- the noise
the ratio is to be read against.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="65536,1048576,4194304")
    ap.add_argument("launcher", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    launcher = a.launcher[1:] if a.launcher[:1] == ["--"] else a.launcher
    launcher = launcher or [shutil.which("mpirun") or "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
    work = Path(tempfile.mkdtemp(prefix="rankmap-osu-"))
    ref = work / "osu_style_bw"
    subprocess.run(["mpicc", "-O2", "-o", str(ref), str(ROOT / "tests" / "native" / "osu_style_bw.c")], check=True)
    env = dict(os.environ, RANKMAP_HOME=str(work / "home"), RANKMAP_CUDART="none")
    print(f"launcher: {' '.join(launcher)}; {a.rounds} rounds, rankmap then reference in each")
    print(f"| {'size':>8} | {'rankmap GB/s':>12} | {'reference GB/s':>14} | {'ratio':>6} | {'rankmap spread':>14} | "
          f"{'reference spread':>16} |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in [int(s) for s in a.sizes.split(",")]:
        ours, theirs = [], []
        for _ in range(a.rounds):
            p = subprocess.run([sys.executable, "-m", "rankmap", "bench", "mpi", "--no-store", "--format", "json", "--tests",
                                "bw", "--buffers", "host", "--sizes", f"{size}:{size}", "--trials", "1", "--", *launcher],
                               capture_output=True, text=True, env=env, timeout=600)
            if p.returncode != 0:
                print(p.stderr, file=sys.stderr)
                return 1
            (row,) = json.loads(p.stdout)["rows"]
            ours.append(row["bandwidth_GBps"])
            q = subprocess.run([*launcher, str(ref), str(size), str(row["window"]), str(row["iters"]), "6"],
                               capture_output=True, text=True, timeout=600, check=True)
            n, w, it, ns = map(int, q.stdout.split())
            theirs.append(n * w * it / ns)
        mo, mt = statistics.median(ours), statistics.median(theirs)
        print(f"| {size:>8} | {mo:12.3f} | {mt:14.3f} | {mo / mt:6.3f} | {max(ours) / min(ours):14.2f} | "
              f"{max(theirs) / min(theirs):16.2f} |")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
