"""``rankmap bench mpi -- <launcher>``: OSU-style latency, bandwidth, bidirectional bandwidth and the
common collectives, with host buffers and device buffers, next to rankmap's own CUDA IPC path.

``native/linkbench/mpi_bench.c`` (built with the launcher's own ``mpicc``) does the measuring and says
whether the MPI is CUDA-aware; device buffers go to the MPI directly when it is (``device``), and
are staged through pinned host memory always (``device-staged``), so that the staging vs CUDA IPC
comparison (``device-ipc``) is measured on any machine with two GPUs. Figures, as OSU prints them:
latency = half a ping-pong round trip; bandwidth = size x window x iterations / time; bidirectional
= both ranks at once, ``total_GBps`` the sum of both directions and ``bandwidth_GBps`` half of it;
collectives = time per call averaged over the ranks.
"""

from __future__ import annotations

import os
import shlex
from typing import Sequence

from rankmap.linkbench import native_out
from rankmap.linkbench.rows import BenchRun, Row, gbps, median
from rankmap.errors import RankmapError

PT2PT = ("latency", "bw", "bibw")
COLLECTIVES = ("allreduce", "bcast", "reduce", "allgather", "alltoall", "reduce_scatter", "barrier")
TESTS = PT2PT + COLLECTIVES
BUFFERS = ("host", "device", "device-staged", "device-ipc")


def rows_from(out: native_out.Output) -> list[Row]:
    rows = []
    for r in out.of("result"):
        test, buf, size, iters = r["benchmark"], r["buffer"], int(r["size"]), int(r["iters"])
        ns = [int(x) for x in r["ns"]]
        extra = {"iters": iters, "trials": len(ns), "ranks": r.get("ranks")}
        row = Row(test, size, buf, "mpi", extra=extra)
        if test == "latency":
            per = [x / (2 * iters) / 1000.0 for x in ns]
            row.latency_us = median(per)
            row.extra["samples_us"] = [round(x, 4) for x in per]
        elif test in ("bw", "bibw"):
            w = int(r["window"])
            row.extra["window"] = w
            one_way = [gbps(size * w * iters, x) for x in ns]
            if test == "bw":
                row.bandwidth_GBps = median(one_way)
            else:
                row.total_GBps = median([2 * b for b in one_way])
                row.bandwidth_GBps = row.total_GBps / 2
            row.extra["samples_GBps"] = [round(b * (2 if test == "bibw" else 1), 4) for b in one_way]
        else:
            row.latency_us = median(ns) / iters / 1000.0
            if r.get("ns_min"):
                row.extra["latency_min_us"] = median([int(x) for x in r["ns_min"]]) / iters / 1000.0
                row.extra["latency_max_us"] = median([int(x) for x in r["ns_max"]]) / iters / 1000.0
        rows.append(row)
    return rows


def machine_from(out: native_out.Output) -> dict:
    info = out.info
    return {"mpi": info.get("mpi"), "ranks": info.get("ranks"), "cuda_aware": bool(info.get("cuda_aware")),
            "cuda_aware_detected": bool(info.get("cuda_aware_detected")), "cuda_aware_how": info.get("cuda_aware_how"),
            "cuda": bool(info.get("cuda")), "cuda_runtime": info.get("cuda_runtime"),
            "cuda_driver": info.get("cuda_driver"),
            "rank_gpus": [{k: r.get(k) for k in ("rank", "host", "gpu", "pci")} for r in out.of("rank")]}


def describe(rows: list[Row], out: native_out.Output) -> tuple[list[str], list[str]]:
    ran = []
    for b in BUFFERS:
        tests = [t for t in TESTS if any(r.buffer == b and r.benchmark == t for r in rows)]
        if tests:
            ran.append(f"{b} buffers ({', '.join(tests)})")
    not_run = [f"{s['what']}: {s['why']}" for s in out.of("skip")]
    return ran, not_run


def check_launcher(argv: Sequence[str]):
    """The launcher of ``bench mpi -- <launcher>``: an MPI one, given without a program."""
    from rankmap.capture import launchers as L

    if not argv:
        raise RankmapError("give the MPI launcher after --, e.g. rankmap bench mpi -- mpirun -np 2")
    launcher = L.recognise(argv)
    if not launcher.is_mpi:
        raise RankmapError(f"bench mpi needs an MPI launcher (mpirun, mpiexec, srun), not {argv[0]!r}")
    tail = list(argv[launcher.prefix_len:])
    if launcher.kind == "openmpi":
        i = L.program_index(tail, L.OMPI_VALUE_OPTS, L._OMPI_TWO_VALUE_OPTS)
    elif launcher.kind == "hydra":
        i = L.program_index(tail, L.HYDRA_VALUE_OPTS, L.HYDRA_TWO_VALUE_OPTS)
    else:
        i = L.program_index(tail, L.SRUN_VALUE_OPTS, set())
    if i < len(tail):
        raise RankmapError(f"give only the launcher and its options after --, not a program: {tail[i]!r} "
                           f"(rankmap adds its own benchmark program)")
    if launcher.world_size is not None and launcher.world_size < 2:
        raise RankmapError(f"bench mpi needs at least 2 ranks, the launcher asks for {launcher.world_size}")
    return launcher


def run(launcher_argv: Sequence[str], *, min_size: int = 8, max_size: int = 64 << 20,
        coll_max_size: int = 16 << 20, tests: Sequence[str] | None = None, buffers: Sequence[str] | None = None,
        trials: int = 3, window: int = 64, cuda_aware: str = "auto", timeout: float = 1800,
        mpicc: str | None = None, budgets: dict[str, float] | None = None) -> BenchRun:
    """Build the MPI benchmark with the launcher's mpicc (first time), run it, read its rows."""
    from rankmap.linkbench import tools
    from rankmap.linkbench.build import build_mpi_bench
    from rankmap.capture.launchers import find_mpicc

    for name, given, known in (("test", tests, TESTS), ("buffer", buffers, BUFFERS)):
        bad = [x for x in given or [] if x not in known]
        if bad:
            raise RankmapError(f"unknown {name} {bad[0]!r}; choose from {', '.join(known)}")
    if min_size < 1 or max_size < min_size:
        raise RankmapError(f"sizes must satisfy 1 <= min <= max, got {min_size}..{max_size}")
    launcher = check_launcher(launcher_argv)
    exe = build_mpi_bench(find_mpicc(launcher, mpicc))
    cudart = tools.find_cudart()
    # --sizes bounds every message: collectives go up to the smaller of its MAX and coll_max_size
    args = ["--min-size", str(min_size), "--max-size", str(max_size),
            "--coll-max-size", str(min(coll_max_size, max_size)),
            "--trials", str(trials), "--window", str(window), "--cuda-aware", cuda_aware,
            "--cudart", cudart or "none"]
    if tests:
        args += ["--tests", ",".join(tests)]
    if buffers:
        args += ["--buffers", ",".join(buffers)]
    for k, v in (budgets or {}).items():
        args += [f"--{k}", str(v)]
    argv = list(launcher.argv) + [str(exe)] + args
    env = dict(os.environ)
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    what = f"bench mpi ({shlex.join(launcher.argv)})"
    out = native_out.run(argv, what=what, timeout=timeout, env=env)
    if out.returncode != 0 or not out.finished:
        raise RankmapError(native_out.failure(out, what))
    rows = rows_from(out)
    ran, not_run = describe(rows, out)
    if cudart is None and not any("device" in n for n in not_run):
        not_run.append("device buffers: no CUDA runtime library found (set RANKMAP_CUDART)")
    return BenchRun("mpi", rows, machine_from(out), ran, not_run, command=shlex.join(argv),
                    notes=[n["text"] for n in out.of("note")])
