"""The conformance probes: what an MPI library really sends for each collective, against a mirror.

``native/probe/coll_probe.c`` runs each collective between barriers and counts, per call, what
the library itself records (Open MPI's monitoring PML) or puts on the wire (MPICH's UCX tag
sends). This module builds it with the MPI's own compiler wrapper, runs it, reads its lines into
one matrix per call, and sets a mirror's pairs for the same calls beside them: the check that a
mirror reproduces the library (``tests/test_collectives.py`` runs it on Open MPI 4.1 and 5 and
MPICH).
"""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from rankmap.capture.native_build import compile_cached
from rankmap.errors import RankmapError
from rankmap.native_sources import native_dir
from rankmap.pairs.call import Call, kind_of
from rankmap.pairs.mirror import Mirrored

#: the collectives the probe runs, and those of them with a root (run once per root); an ``i``
#: in front: the nonblocking form, started and waited for at once
BLOCKING = ("allreduce", "bcast", "reduce", "allgather", "alltoall", "gather", "scatter",
            "reduce_scatter_block", "reduce_scatter", "allgatherv", "alltoallv")
NONBLOCKING = ("iallreduce", "ibcast", "ireduce", "iallgather", "ialltoall", "igather", "iscatter")
COLLECTIVES = BLOCKING + NONBLOCKING
ROOTED = ("bcast", "reduce", "gather", "scatter", "ibcast", "ireduce", "igather", "iscatter")
REDUCING = ("allreduce", "reduce", "reduce_scatter_block", "reduce_scatter", "iallreduce", "ireduce")

#: {(collective, size, root): bytes[src][dst]} of one probe run
Measured = dict[tuple[str, int, int], np.ndarray]


def source() -> Path:
    return native_dir() / "probe" / "coll_probe.c"


def build(cc: str, out_dir: Path, ucx: bool = False) -> Path:
    """The probe built with the MPI compiler wrapper ``cc`` into ``out_dir``; ``ucx``: count UCX
    tag sends (MPICH's ch4:ucx) instead of Open MPI's monitoring records."""
    name = f"coll_probe_{Path(cc).name}{'_ucx' if ucx else ''}"
    flags = ["-DPROBE_UCX"] if ucx else []
    return compile_cached(Path(out_dir), name, lambda tmp: [[cc, "-O2", "-rdynamic", *flags, str(source()),
                                                             "-o", tmp, "-ldl"]], f"collective probe ({cc})")


def parse(text: str, p: int, messages: bool = False) -> Measured:
    """The probe's lines ``COLL SIZE ROOT SRC DST BYTES MESSAGES`` as bytes (``messages``: the
    message counts) per pair; a peer the probe could not name (UCX: the endpoint to itself, DST
    -1) is the sender itself."""
    out: Measured = defaultdict(lambda: np.zeros((p, p), dtype=np.int64))
    for line in text.splitlines():
        coll, size, root, src, dst, b, m = line.split()
        s, d = int(src), int(dst)
        out[(coll, int(size), int(root))][s, d if d >= 0 else s] += int(m if messages else b)
    return dict(out)


def run(cmd: list[str], p: int, env: dict[str, str] | None = None, timeout: float = 600,
        messages: bool = False) -> Measured:
    """One probe job (``cmd``: the launch command of ``p`` ranks) and what it measured (bytes, or
    with ``messages`` the message counts)."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **(env or {})))
    except subprocess.TimeoutExpired:
        raise RankmapError(f"the collective probe ran past {timeout:g} s: {' '.join(cmd[:4])} ...") from None
    if r.returncode:
        tail = " ".join((r.stdout[-500:] + r.stderr[-1500:]).split())
        raise RankmapError(f"the collective probe exited {r.returncode}: {tail}")
    return parse(r.stdout, p, messages)


def ompi_command(mpirun: str, probe: Path, p: int, colls: list[str], sizes: list[int],
                 mca: dict[str, str] | None = None) -> list[str]:
    """Open MPI's launch of the probe with its monitoring PML on (the probe counts its records)."""
    cmd = [mpirun, "--oversubscribe", "-np", str(p), "--mca", "pml_monitoring_enable", "1"]
    for k, v in (mca or {}).items():
        cmd += ["--mca", k, str(v)]
    return cmd + [str(probe), ",".join(colls)] + [str(s) for s in sizes]


def mpich_command(mpiexec: str, probe: Path, p: int, colls: list[str], sizes: list[int]) -> list[str]:
    return [mpiexec, "-n", str(p), str(probe), ",".join(colls)] + [str(s) for s in sizes]


def probe_call(coll: str, p: int, r: int, size: int, root: int) -> Call:
    """The probe's call on rank ``r`` as the shim records it: reductions of doubles (``size`` / 8
    of them), the rest bytes; the v forms' blocks as ``coll_probe.c`` sets them."""
    kind, form = kind_of(coll)
    if kind is None:
        raise ValueError(f"not a collective: {coll}")
    if coll in REDUCING:
        n = size // 8
        return Call(kind, form, p, r, root, n, 8, n, 8, vec=tuple([n * 8] * p) if kind == "reduce_scatter" else ())
    if kind == "allgatherv":
        blocks = tuple(size if i % 2 else size // 2 for i in range(p))
        return Call(kind, form, p, r, root, blocks[r], 1, blocks[r], 1, vec=blocks)
    if kind == "alltoallv":
        sends = tuple(size if (r + j) % 3 else 0 for j in range(p))
        return Call(kind, form, p, r, root, 0, 1, 0, 1, vec=sends + sends)
    return Call(kind, form, p, r, root, size, 1, size, 1)


def mirrored(mirror: Callable[[Call], Mirrored | None], coll: str, p: int, size: int, root: int,
             messages: bool = False) -> np.ndarray | None:
    """bytes[src][dst] (``messages``: message counts) the mirror gives for the probe's call on
    every rank; None where it does not cover the call on some rank."""
    m = np.zeros((p, p), dtype=np.int64)
    for r in range(p):
        got = mirror(probe_call(coll, p, r, size, root))
        if got is None:
            return None
        for msg in got.msgs:
            m[r, msg.dst] += 1 if messages else msg.nbytes
    return m


def l1(mirror: np.ndarray, measured: np.ndarray) -> float:
    """Per-pair L1 distance as a fraction of the measured bytes."""
    return float(np.abs(mirror - measured).sum()) / max(1, int(measured.sum()))


@dataclass
class Conformance:
    """A mirror against one probe run: the L1 per collective over all its calls, and the calls
    whose L1 is above the limit (or that the mirror does not cover), each with both matrices."""

    per_collective: dict[str, float] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)


def compare(measured: Measured, mirror: Callable[[Call], Mirrored | None], limit: float = 0.0,
            messages: bool = False) -> Conformance:
    """Every measured call against the mirror (``messages``: ``measured`` holds message counts,
    compared with the mirror's)."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    out = Conformance()
    for (coll, size, root), ref in sorted(measured.items()):
        p = ref.shape[0]
        mir = mirrored(mirror, coll, p, size, root, messages)
        if mir is None:
            out.bad.append(f"{coll} p={p} {size} B root {root}: not mirrored")
            continue
        d = l1(mir, ref)
        sums[coll][0] += int(np.abs(mir - ref).sum())
        sums[coll][1] += int(ref.sum())
        if d > limit:
            out.bad.append(f"{coll} p={p} {size} B root {root}: L1 {d:.2%}\nmirror\n{mir}\nlibrary\n{ref}")
    out.per_collective = {c: a / max(1, b) for c, (a, b) in sums.items()}
    return out
