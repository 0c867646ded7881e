"""`rankmap bench mpi` bandwidth (host buffers) against an independent OSU-style windowed test, interleaved.

    .venv/bin/python bench/mpi_bw_reference.py [--rounds 6] [--load 0] [--sizes 65536,1048576,4194304]
                                               [-- mpirun ...]

For each size and round, runs ``rankmap bench mpi --tests bw --buffers host`` once and
``tests/native/osu_style_bw.c`` (built here with mpicc) once, with the same window, iteration count and
untimed warm-up rounds, ours first in even rounds and the reference first in odd ones (ABBA: under a
load that comes and goes, a fixed order hands one side the same moments of every round); prints the
median of each, their ratio, and each side's own spread (max/min over the rounds) -- the noise the
ratio is to be read against. ``--load N`` runs N busy processes (``yes``) beside both, stopped at the
end: with two ranks that poll on two cores, any other runnable process takes bandwidth from both.
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


def run_ours(launcher: list[str], size: int, env: dict[str, str]) -> dict:
    p = subprocess.run([sys.executable, "-m", "rankmap", "bench", "mpi", "--no-store", "--format", "json", "--tests",
                        "bw", "--buffers", "host", "--sizes", f"{size}:{size}", "--trials", "1", "--", *launcher],
                       capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    (row,) = json.loads(p.stdout)["rows"]
    return row


def run_reference(launcher: list[str], ref: Path, size: int, window: int, iters: int) -> float:
    """GB/s of the reference with ours' window and iterations, and ours' warm-up (a tenth, at least one)."""
    skip = max(1, iters // 10)
    q = subprocess.run([*launcher, str(ref), str(size), str(window), str(iters), str(skip)],
                       capture_output=True, text=True, timeout=600, check=True)
    n, w, it, ns = map(int, q.stdout.split())
    return n * w * it / ns


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--load", type=int, default=0, help="busy processes beside both sides (default none)")
    ap.add_argument("--sizes", default="65536,1048576,4194304")
    ap.add_argument("launcher", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    launcher = a.launcher[1:] if a.launcher[:1] == ["--"] else a.launcher
    launcher = launcher or [shutil.which("mpirun") or "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
    work = Path(tempfile.mkdtemp(prefix="rankmap-osu-"))
    ref = work / "osu_style_bw"
    subprocess.run(["mpicc", "-O2", "-o", str(ref), str(ROOT / "tests" / "native" / "osu_style_bw.c")], check=True)
    env = dict(os.environ, RANKMAP_HOME=str(work / "home"), RANKMAP_CUDART="none")
    print(f"launcher: {' '.join(launcher)}; {a.rounds} rounds, ours and the reference in ABBA order; "
          f"{a.load} busy processes beside; load average {os.getloadavg()[0]:.1f}")
    print(f"| {'size':>8} | {'rankmap GB/s':>12} | {'reference GB/s':>14} | {'ratio':>6} | {'rankmap spread':>14} | "
          f"{'reference spread':>16} |")
    print("|---:|---:|---:|---:|---:|---:|")
    load = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(a.load)]
    try:
        for size in [int(s) for s in a.sizes.split(",")]:
            ours: list[float] = []
            theirs: list[float] = []
            shape: tuple[int, int] = (0, 0)   # round 0 runs ours first: its window and iterations
            for r in range(a.rounds):
                for side in ("ours", "ref") if r % 2 == 0 else ("ref", "ours"):
                    if side == "ours":
                        row = run_ours(launcher, size, env)
                        shape = (row["window"], row["iters"])
                        ours.append(row["bandwidth_GBps"])
                    else:
                        theirs.append(run_reference(launcher, ref, size, *shape))
            mo, mt = statistics.median(ours), statistics.median(theirs)
            print(f"| {size:>8} | {mo:12.3f} | {mt:14.3f} | {mo / mt:6.3f} | {max(ours) / min(ours):14.2f} | "
                  f"{max(theirs) / min(theirs):16.2f} |", flush=True)
    finally:
        for p in load:
            p.kill()
            p.wait()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
