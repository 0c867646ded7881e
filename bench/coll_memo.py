#!/usr/bin/env python3
"""Shim instructions per collective call when collectives alternate their arguments (2 ranks).

usage: PYTHONPATH=src python3 bench/coll_memo.py [--mpi openmpi,mpich] [--calls 4000]
                                                 [--baseline-shim OLD/librankmap_mpi.so] [--patterns a,b]

A thread remembers its last collective signatures by their arguments (native/mpi/shim_core.h,
rm_coll_memo_t): a repeat takes the entry point's fast path, anything else the full wrapper and
the shared signature table.  Codes alternate -- two sizes of MPI_Allreduce, a row and a column
communicator, two operations that share a set of the memory, three to sixteen sizes in turn (a
molecular-dynamics step's reductions) -- so this counts, per pattern of bench/coll_memo.c ("one",
"counts", "collide", "comms", "three", "four", "eight", "sixteen"), the instructions executed inside the shim's own object per collective call: valgrind
--tool=callgrind on both ranks, collecting only inside the pattern's function (so MPI_Init, the
flush thread and MPI_Finalize do not count), the library's own instructions (PMPI_, its progress
loop, waiting for the peer) left out.  Instruction counts do not depend on the machine's load.  A
call of 2 us or more would be timed on its next call, and under valgrind every call takes that
long, so RANKMAP_SLOW_NS is raised as bench/shim_overhead.py does: the counted paths are those of
a native run (one call in 16 timed).  --baseline-shim counts another build beside this one.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from rankmap.capture.shim_build import build_shim  # noqa: E402
from shim_overhead import FLAVOURS, launcher  # noqa: E402

PATTERNS = {
    "one": "MPI_Allreduce of 1 double, repeated",
    "counts": "MPI_Allreduce of 1 and of 2 doubles, alternating",
    "collide": "MPI_Allreduce and MPI_Scan (equal mod 4), alternating",
    "comms": "MPI_Allreduce on MPI_COMM_WORLD and a duplicate, alternating",
    "three": "MPI_Allreduce of 1, 2 and 3 doubles in turn",
    "four": "MPI_Allreduce of 1, 2, 3 and 4 doubles in turn",
    "eight": "MPI_Allreduce of 1 to 8 doubles in turn",
    "sixteen": "MPI_Allreduce of 1 to 16 doubles in turn",
}


def object_self_cost(path: Path, obj_name: str) -> int:
    """Instructions a callgrind output file charges to functions of the object named obj_name
    (self cost: the costs of calls out of it, the lines after calls=, are the callees')."""
    names: dict[str, str] = {}
    obj, total, after_call = "", 0, False
    for line in path.read_text().splitlines():
        if line.startswith(("ob=", "cob=")):
            m = re.match(r"c?ob=\((\d+)\)(?:\s+(.*))?", line)
            if m and m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("ob=") and m:
                obj = names.get(m.group(1), "")
            continue
        if line.startswith("calls="):
            after_call = True
            continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            if after_call:
                after_call = False
                continue
            if obj.endswith(obj_name):
                total += int(line.split()[-1])
    return total


def count(shim: Path, mpirun: str, exe: Path, pattern: str, calls: int, work: Path) -> float:
    """Shim instructions per collective call of one pattern, the mean of both ranks."""
    out = work / pattern
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {"LD_PRELOAD": str(shim), "RANKMAP_RUN_DIR": str(out / "run"), "RANKMAP_SLOW_NS": str(10**9)}
    cmd = launcher(mpirun, env) + ["valgrind", "--tool=callgrind", f"--toggle-collect=pattern_{pattern}",
                                   f"--callgrind-out-file={out}/cg.%p.out", str(exe), pattern, str(calls)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"coll_memo {pattern} failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    files = sorted(out.glob("cg.*.out"))
    if len(files) != 2:
        raise SystemExit(f"coll_memo {pattern}: expected 2 callgrind files, found {len(files)}")
    return sum(object_self_cost(f, shim.name) for f in files) / (2 * calls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi", default="openmpi", help="comma-separated flavours: openmpi, mpich")
    ap.add_argument("--calls", type=int, default=4000, help="collective calls per pattern and rank")
    ap.add_argument("--baseline-shim", type=Path, default=None, help="another build of the shim, counted beside")
    ap.add_argument("--patterns", default=",".join(PATTERNS), help="comma-separated patterns to count")
    a = ap.parse_args()
    pats = a.patterns.split(",")
    unknown = [p for p in pats if p not in PATTERNS]
    if unknown:
        raise SystemExit(f"coll_memo: unknown pattern {unknown[0]!r} (known: {', '.join(PATTERNS)})")
    print(f"# {platform.node()}: {os.cpu_count()} CPUs ({platform.machine()}), {a.calls} calls per pattern, "
          "shim instructions per collective call (callgrind, both ranks' mean)")
    for flavour in a.mpi.split(","):
        mpicc, mpirun = FLAVOURS[flavour]
        shim = build_shim(mpicc)
        work = Path(tempfile.mkdtemp(prefix="rankmap-collmemo-"))
        exe = work / "coll_memo"
        subprocess.run([shutil.which(mpicc) or mpicc, "-O2", str(ROOT / "bench" / "coll_memo.c"), "-o", str(exe)],
                       check=True)
        shims = {"this": shim}
        if a.baseline_shim:
            shims = {"baseline": a.baseline_shim.resolve(), **shims}
        print(f"\n==== {flavour}\n{'pattern':<9}" + "".join(f"{k:>10}" for k in shims) + "   what")
        for pat in pats:
            what = PATTERNS[pat]
            ir = [count(s, mpirun, exe, pat, a.calls, work) for s in shims.values()]
            print(f"{pat:<9}" + "".join(f"{x:>10.1f}" for x in ir) + f"   {what}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
