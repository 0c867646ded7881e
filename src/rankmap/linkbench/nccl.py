"""``rankmap bench nccl [-- <launcher>]``: NCCL collectives and send/recv in nccl-tests' terms, and the
same collectives through MPI on the same GPUs, side by side.

Without a launcher one process drives every GPU (``ncclCommInitAll``, like ``nccl-tests -g N``);
with one (``rankmap bench nccl -- mpirun -np 2``) each rank drives one GPU and the MPI runs the same
operations on the same device buffers -- directly when it is CUDA-aware, else staged through pinned
host memory (``device-staged``). NCCL is loaded with dlopen at run time (``RANKMAP_NCCL_LIB`` or the
first of :func:`rankmap.linkbench.tools.nccl_candidates` that loads), so nothing is built against it.

Definitions (nccl-tests' ``doc/PERFORMANCE.md``): ``size`` is the larger of one rank's send and
receive bytes; time per operation = host clock around ``iters`` back-to-back operations and the
stream synchronisation, over ``iters``, averaged over the ranks (median of ``trials`` such
loops); algbw = size / time; busbw = algbw x factor, the factor being 2(n-1)/n for all-reduce,
(n-1)/n for all-gather, reduce-scatter and all-to-all, and 1 for broadcast, reduce and send/recv.
"""

from __future__ import annotations

import os
import shlex
from typing import Callable, Sequence

from rankmap.linkbench import native_out
from rankmap.linkbench.rows import BenchRun, Row, median
from rankmap.errors import RankmapError, counted

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv")
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def rows_from(out: native_out.Output) -> list[Row]:
    rows = []
    for r in out.of("result"):
        op, size, iters, n = r["op"], int(r["size"]), int(r["iters"]), int(r["ranks"])
        if op not in BUS_FACTOR:
            continue
        per_op_ns = [int(x) / iters for x in r["ns"]]
        t = median(per_op_ns)
        algbw = size / t if t > 0 else float("nan")       # bytes per ns == GB/s
        row = Row(op, size, r["buffer"], r["library"], latency_us=t / 1000.0, algbw_GBps=algbw,
                  busbw_GBps=algbw * BUS_FACTOR[op](n),
                  extra={"ranks": n, "iters": iters, "trials": len(per_op_ns), "count": r.get("count"),
                         "samples_us": [round(x / 1000.0, 3) for x in per_op_ns]})
        rows.append(row)
    return rows


def machine_from(out: native_out.Output, nccl_lib: str | None) -> dict:
    info = out.info
    v = int(info.get("nccl_version") or 0)
    version = f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 10000 else (str(v) if v else None)
    return {"mode": info.get("mode"), "ranks": info.get("ranks"), "nccl_version": version, "nccl_library": nccl_lib,
            "cuda_aware": info.get("cuda_aware"), "cuda_aware_how": info.get("cuda_aware_how"),
            "cuda_runtime": info.get("cuda_runtime"), "cuda_driver": info.get("cuda_driver"),
            "rank_gpus": [{k: r.get(k) for k in ("rank", "gpu", "pci")} for r in out.of("rank")]}


def describe(rows: list[Row], out: native_out.Output, launcher: bool) -> tuple[list[str], list[str]]:
    ran, not_run = [], [f"{s['what']}: {s['why']}" for s in out.of("skip")]
    for lib in ("nccl", "mpi"):
        ops = [o for o in OPS if any(r.library == lib and r.benchmark == o for r in rows)]
        if ops:
            bufs = sorted({r.buffer for r in rows if r.library == lib})
            ran.append(f"{lib.upper()} {', '.join(ops)} ({', '.join(bufs)} buffers, {counted(out.info.get('ranks'), 'rank')})")
    if not launcher:
        not_run.append("MPI collectives: run with a launcher to compare them (rankmap bench nccl -- mpirun -np N)")
    return ran, not_run


def run(launcher_argv: Sequence[str] | None = None, *, ops: Sequence[str] | None = None, min_size: int = 8,
        max_size: int = 128 << 20, step_factor: float = 2, iters: int = 20, warmup: int = 5, trials: int = 5,
        gpus: int = 0, mpi: bool = True, mpi_max_size: int = 64 << 20, cuda_aware: str = "auto",
        timeout: float = 1800, mpicc: str | None = None) -> BenchRun:
    from rankmap.linkbench import tools
    from rankmap.linkbench.build import build_nccl_bench

    bad = [o for o in ops or [] if o not in OPS]
    if bad:
        raise RankmapError(f"unknown operation {bad[0]!r}; choose from {', '.join(OPS)}")
    if min_size < 1 or max_size < min_size:
        raise RankmapError(f"sizes must satisfy 1 <= min <= max, got {min_size}..{max_size}")
    cudart = tools.find_cudart()
    if cudart is None:
        raise RankmapError("bench nccl: no CUDA runtime library (libcudart) found here; install the CUDA toolkit "
                           "or set RANKMAP_CUDART=/path/to/libcudart.so; nothing measured")
    nccl = tools.find_nccl()
    if nccl is None and not launcher_argv:
        raise RankmapError("bench nccl: NCCL (libnccl.so.2) not found: pip install nvidia-nccl-cu12 (or cu13), "
                           "install libnccl2, or set RANKMAP_NCCL_LIB; nothing measured")
    args = ["--cudart", cudart, "--nccl", nccl or "", "--min-size", str(min_size), "--max-size", str(max_size),
            "--step-factor", str(step_factor), "--iters", str(iters), "--warmup", str(warmup), "--trials", str(trials)]
    if ops:
        args += ["--ops", ",".join(ops)]
    if launcher_argv:
        from rankmap.linkbench.mpi import check_launcher
        from rankmap.capture.launchers import find_mpicc

        launcher = check_launcher(launcher_argv)
        exe = build_nccl_bench(mpicc=find_mpicc(launcher, mpicc))
        args += ["--mpi-ops", "1" if mpi else "0", "--mpi-max-size", str(mpi_max_size), "--cuda-aware", cuda_aware]
        argv = list(launcher.argv) + [str(exe)] + args
        what = f"bench nccl ({shlex.join(launcher.argv)})"
    else:
        exe = build_nccl_bench()
        argv = [str(exe)] + args + (["--gpus", str(gpus)] if gpus else [])
        what = "bench nccl"
    env = dict(os.environ)
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    out = native_out.run(argv, what=what, timeout=timeout, env=env)
    if out.returncode == native_out.EXIT_NO_GPU:
        raise native_out.no_gpu(out, what)
    if out.returncode != 0 or not out.finished:
        raise RankmapError(native_out.failure(out, what))
    rows = rows_from(out)
    ran, not_run = describe(rows, out, bool(launcher_argv))
    nccl_path = tools.loaded_path(nccl) if nccl else None
    return BenchRun("nccl", rows, machine_from(out, nccl_path), ran, not_run, command=shlex.join(argv),
                    notes=[n["text"] for n in out.of("note")])
