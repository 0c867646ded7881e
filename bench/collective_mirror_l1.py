"""The Open MPI mirror against the library's own monitoring, per collective and rank count.

Runs the conformance probe (``native/probe/coll_probe.c`` through ``rankmap.pairs.probe``: each
collective between barriers, what the monitoring PML records per call) for the collectives the
mirror covers beyond the eight of ``bench/collective_pairs.py`` -- allgatherv, reduce_scatter,
alltoallv and libnbc's nonblocking collectives -- and prints one markdown row per (collective,
ranks): the per-pair L1 of the mirror's bytes and message counts over all sizes, and the fixed
model's byte L1 for contrast. L1 = sum over pairs |mirror - monitoring| / monitoring.

    python bench/collective_mirror_l1.py                   # Debian's Open MPI 4.1
    python bench/collective_mirror_l1.py --mpi .venv/openmpi5/bin --release 5.0
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

from rankmap.pairs import model, ompi, probe
from rankmap.pairs.mirror import Mirrored

ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
SIZES = [8, 24, 1000, 4096, 65536, 100000, 1048576, 16777216]
COLLS = ["allgatherv", "reduce_scatter", "alltoallv", *probe.NONBLOCKING]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi", default="", help="bin folder of the Open MPI (default: mpicc.openmpi, mpirun.openmpi)")
    ap.add_argument("--release", default="4.1", help="the release its coll/tuned is (4.1 or 5.0)")
    ap.add_argument("--ranks", default="3,4,5,8")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    a = ap.parse_args()
    cc, run = (f"{a.mpi}/mpicc", f"{a.mpi}/mpirun") if a.mpi else ("mpicc.openmpi", "mpirun.openmpi")
    rel = tuple(int(x) for x in a.release.split("."))
    prm = ompi.Params(release=rel)
    sizes = [int(s) for s in a.sizes.split(",")]
    exe = probe.build(cc, Path(tempfile.mkdtemp(prefix="rankmap-probe-")))
    print(f"Open MPI {a.release} ({run}), {platform.node()}, {os.cpu_count()} cores; sizes {sizes[0]} B .. "
          f"{sizes[-1]} B\n")
    print("| collective | ranks | bytes (monitoring) | L1 mirror bytes | L1 mirror messages | L1 model bytes |")
    print("|---|---:|---:|---:|---:|---:|")
    bad = 0
    for p in [int(x) for x in a.ranks.split(",")]:
        cmd = probe.ompi_command(run, exe, p, COLLS, sizes)
        got_b = probe.run(cmd, p, ENV)
        got_m = probe.run(cmd, p, ENV, messages=True)
        mir_b = probe.compare(got_b, lambda c: ompi.messages(c, prm))
        mir_m = probe.compare(got_m, lambda c: ompi.messages(c, prm), messages=True)
        for coll in COLLS:
            ref = sum(int(v.sum()) for k, v in got_b.items() if k[0] == coll)
            diff = 0
            for (c, size, root), m in got_b.items():
                if c == coll:
                    mod = probe.mirrored(_model, c, p, size, root)
                    diff += int(np.abs(mod - m).sum())
            lb, lm = mir_b.per_collective.get(coll, 1.0), mir_m.per_collective.get(coll, 1.0)
            bad += lb > 0.001 or lm > 0.001
            print(f"| {coll} | {p} | {ref} | {lb:.2%} | {lm:.2%} | {diff / max(1, ref):.2%} |")
    return bad


def _model(c) -> Mirrored:
    return Mirrored(model.messages(c), "model", True)


if __name__ == "__main__":
    sys.exit(main())
