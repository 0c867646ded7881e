"""Side by side: `rankmap bench` against nvbandwidth and nccl-tests run on the same GPUs right after.

    python3 gpu/bench_compare.py --work DIR [--tolerance 0.03]

DIR holds what gpu/bench.sh collected: ``p2p-*.json``, ``mpi.json``, ``nccl-1proc-*.json``,
``nccl-mpi.json`` (``rankmap bench ... --format json``), ``nvbandwidth-*.txt`` (nvbandwidth's plain
output) and ``all_reduce_perf-*.txt`` / ``sendrecv_perf-*.txt`` (nccl-tests' output). Prints the tables
and one PASS/FAIL line per check; the exit status is the number of FAILs. Targets: copy-engine
bandwidth (read, write, bidirectional total) within the tolerance of nvbandwidth for every GPU pair,
all-reduce busbw within the tolerance of nccl-tests at every size from 1 MiB up, the staged vs IPC
comparison present at every size from 8 B to 64 MiB.

How the two tools' cells meet (nvbandwidth's source is the reference): its "write" matrix (r, c) is
a copy from GPU r into GPU c on r's copy engine = our ``ce_write`` src r, dst c; its "read" matrix
(r, c) is a copy from GPU c into GPU r on r's copy engine = our ``ce_read`` src c, dst r; its
bidirectional "Total" (r, c) adds both directions of the pair = our ``total_GBps`` of (r, c).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import sys

FAILS = 0



def fmt(v: float | None, width: int, places: int) -> str:
    """A figure, or a dash where there is none (a size or a test one side did not run)."""
    return f"{'-':>{width}}" if v is None else f"{v:{width}.{places}f}"

def check(ok: bool, what: str) -> None:
    global FAILS
    FAILS += 0 if ok else 1
    print(("PASS " if ok else "FAIL ") + what, flush=True)


def parse_nvbandwidth(text: str) -> dict[str, dict[str, dict[tuple[int, int], float]]]:
    """{testcase: {matrix title: {(row, column): value}}} from nvbandwidth's plain output."""
    out: dict[str, dict[str, dict[tuple[int, int], float]]] = {}
    test, title, cols = None, None, None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"Running (\S+?)\.?$", line)
        if m:
            test, title, cols = m.group(1), None, None
            out.setdefault(test, {})
            continue
        if test is None or not line:
            continue
        toks = line.split()
        if all(t.isdigit() for t in toks):
            cols = [int(t) for t in toks]
            continue
        if cols is not None and toks[0].isdigit() and len(toks) == len(cols) + 1 and title:
            row = int(toks[0])
            for c, v in zip(cols, toks[1:]):
                try:
                    out[test][title][row, c] = float(v)
                except ValueError:
                    pass          # N/A
            continue
        if "(GB/s)" in line or "(ns)" in line:
            title, cols = line, None
            out[test][title] = {}
    return out


def nvb_matrix(runs: list[dict], test: str, which: str | None = None) -> dict[tuple[int, int], float]:
    """Mean over runs of one nvbandwidth matrix (``which`` picks Total/Read1/... of bidirectional tests)."""
    acc: dict[tuple[int, int], list[float]] = {}
    for r in runs:
        for title, cells in r.get(test, {}).items():
            if which and which not in title:
                continue
            for k, v in cells.items():
                acc.setdefault(k, []).append(v)
            break
    return {k: statistics.fmean(v) for k, v in acc.items()}


def parse_nccl_tests(text: str) -> dict[int, tuple[float, float, float]]:
    """{size: (time us, algbw, busbw)} of the out-of-place columns of an nccl-tests run."""
    out = {}
    for line in text.splitlines():
        toks = line.split()
        if len(toks) >= 8 and toks[0].isdigit() and toks[1].isdigit():
            try:
                out[int(toks[0])] = (float(toks[5]), float(toks[6]), float(toks[7]))
            except ValueError:
                continue
    return out


def load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def mib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} B"


def ours(p2p: list[dict], bench: str, key: str) -> dict[tuple[int, int], float]:
    acc: dict[tuple[int, int], list[float]] = {}
    for run in p2p:
        for r in run["rows"]:
            if r["benchmark"] == bench and key in r:
                acc.setdefault((r["src"], r["dst"]), []).append(r[key])
    return {k: statistics.median(v) for k, v in acc.items()}


def compare_p2p(work: str, tol: float) -> None:
    p2p = [d for d in (load(p) for p in sorted(glob.glob(os.path.join(work, "p2p-*.json")))) if d]
    if not p2p:
        check(False, "bench p2p: no results (see the log above)")
        return
    nvb = [parse_nvbandwidth(open(p).read()) for p in sorted(glob.glob(os.path.join(work, "nvbandwidth-*.txt")))]
    nvb = [n for n in nvb if n]
    print(f"\n== GPU pairs: rankmap bench p2p ({len(p2p)} runs) vs nvbandwidth ({len(nvb)} runs), GB/s")
    print(f"| {'figure':<34} | {'pair':>6} | {'rankmap':>9} | {'nvbandwidth':>11} | {'ratio':>6} |")
    print("|---|---:|---:|---:|---:|")
    # (our benchmark, our key, nvbandwidth test, its matrix, cell map: our (src,dst) -> its (row,col), target?)
    cases = [
        ("ce_write", "bandwidth_GBps", "device_to_device_memcpy_write_ce", None, lambda s, d: (s, d), True),
        ("ce_read", "bandwidth_GBps", "device_to_device_memcpy_read_ce", None, lambda s, d: (d, s), True),
        ("ce_bidir_write", "total_GBps", "device_to_device_bidirectional_memcpy_write_ce", "Total", lambda s, d: (s, d), True),
        ("ce_bidir_read", "total_GBps", "device_to_device_bidirectional_memcpy_read_ce", "Total", lambda s, d: (s, d), True),
        ("sm_write", "bandwidth_GBps", "device_to_device_memcpy_write_sm", None, lambda s, d: (s, d), False),
        ("sm_read", "bandwidth_GBps", "device_to_device_memcpy_read_sm", None, lambda s, d: (d, s), False),
        ("h2d_pinned", "bandwidth_GBps", "host_to_device_memcpy_ce", None, lambda s, d: (0, d), False),
        ("d2h_pinned", "bandwidth_GBps", "device_to_host_memcpy_ce", None, lambda s, d: (0, s), False),
        ("latency_sm", "latency_us", "device_to_device_latency_sm", None, lambda s, d: (s, d), False),
    ]
    for bench, key, test, which, cell, target in cases:
        mine = ours(p2p, bench, key)
        ref = nvb_matrix(nvb, test, which) if nvb else {}
        for (s, d), v in sorted(mine.items()):
            r = ref.get(cell(s, d))
            if r is not None and key == "latency_us":
                r = r / 1000.0                     # nvbandwidth prints ns
            pair = f"{'H' if s == -1 else s}->{'H' if d == -1 else d}"
            unit = " (us)" if key == "latency_us" else (" total" if key == "total_GBps" else "")
            ratio = v / r if r else None
            print(f"| {bench + unit:<34} | {pair:>6} | {v:9.2f} | {fmt(r, 11, 2)} | {fmt(ratio or None, 6, 3)} |")
            if target and nvb:
                if r is None:
                    check(False, f"{bench} {pair}: no nvbandwidth figure to compare with")
                else:
                    check(abs(ratio - 1) <= tol, f"{bench} {pair}: {v:.1f} GB/s vs nvbandwidth {r:.1f} "
                                                 f"({100 * (ratio - 1):+.2f} %, target within {100 * tol:.0f} %)")
    if not nvb:
        print("SKIP copy-engine targets: no nvbandwidth output to compare with (set NVBANDWIDTH=/path/to/nvbandwidth)")
    for run in p2p[:1]:
        print("bench p2p said: measured " + "; ".join(run["ran"]) + ("; not measured: " + "; ".join(run["not_run"])
                                                                    if run["not_run"] else ""))


def compare_mpi(work: str, max_size: int = 64 << 20) -> None:
    doc = load(os.path.join(work, "mpi.json"))
    if not doc:
        check(False, "bench mpi: no results (see the log above)")
        return
    m = doc["machine"]
    print(f"\n== MPI between GPU {m['rank_gpus'][0]['gpu']} and GPU {m['rank_gpus'][1]['gpu']}: device buffers staged "
          f"through host memory vs rankmap's CUDA IPC path ({m['mpi']}; CUDA-aware: {m['cuda_aware']}, "
          f"{m['cuda_aware_how']})")
    rows = doc["rows"]
    sizes = [8 << k for k in range(64) if 8 << k <= max_size]           # 8 B .. 64 MiB
    print(f"| {'size':>8} | {'lat staged us':>13} | {'lat IPC us':>10} | {'bw staged':>9} | {'bw IPC':>8} | "
          f"{'bibw staged':>11} | {'bibw IPC':>8} |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    get = lambda b, t, s, k: next((r.get(k) for r in rows if r["benchmark"] == t and r["buffer"] == b and r["size"] == s), None)
    complete = True
    for s in sizes:
        vals = [get("device-staged", "latency", s, "latency_us"), get("device-ipc", "latency", s, "latency_us"),
                get("device-staged", "bw", s, "bandwidth_GBps"), get("device-ipc", "bw", s, "bandwidth_GBps"),
                get("device-staged", "bibw", s, "total_GBps"), get("device-ipc", "bibw", s, "total_GBps")]
        complete &= all(v is not None for v in vals)
        print(f"| {mib(s):>8} | " + " | ".join(f"{v:.2f}" if v is not None else "-" for v in vals) + " |")
    check(complete, f"staged vs IPC: latency, bw and bibw measured for both at every size from 8 B to {mib(max_size)}")
    print(f"MPI CUDA-aware: {'yes' if m['cuda_aware'] else 'no'}, as the MPI says: {m['cuda_aware_how']}")
    lat8 = (get("device-staged", "latency", 8, "latency_us"), get("device-ipc", "latency", 8, "latency_us"))
    bw4 = (get("device-staged", "bw", 4 << 20, "bandwidth_GBps"), get("device-ipc", "bw", 4 << 20, "bandwidth_GBps"))
    if all(lat8) and all(bw4):
        print(f"IPC vs staged: 8 B latency {100 * (1 - lat8[1] / lat8[0]):.0f} % lower, 4 MiB bandwidth "
              f"{bw4[1] / bw4[0]:.1f}x")


def compare_nccl(work: str, tol: float) -> None:
    ours_runs = [d for d in (load(p) for p in sorted(glob.glob(os.path.join(work, "nccl-1proc-[0-9]*.json")))) if d]
    ref_runs = [parse_nccl_tests(open(p).read()) for p in sorted(glob.glob(os.path.join(work, "all_reduce_perf-*.txt")))]
    ref_runs = [r for r in ref_runs if r]
    if not ours_runs:
        check(False, "bench nccl: no results (see the log above)")
        return
    mine: dict[int, list[float]] = {}
    for d in ours_runs:
        for r in d["rows"]:
            if r["benchmark"] == "all_reduce" and r["library"] == "nccl":
                mine.setdefault(r["size"], []).append(r["busbw_GBps"])
    print(f"\n== all_reduce busbw GB/s, one process driving both GPUs: rankmap bench nccl ({len(ours_runs)} runs) vs "
          f"nccl-tests all_reduce_perf -g 2 ({len(ref_runs)} runs), interleaved; NCCL "
          f"{ours_runs[0]['machine'].get('nccl_version')} ({ours_runs[0]['machine'].get('nccl_library')})")
    print(f"| {'size':>8} | {'rankmap':>8} | {'nccl-tests':>10} | {'ratio':>6} |")
    print("|---:|---:|---:|---:|")
    for size in sorted(mine):
        v = statistics.median(mine[size])
        refs = [r[size][2] for r in ref_runs if size in r]
        ref = statistics.median(refs) if refs else None
        print(f"| {mib(size):>8} | {v:8.1f} | {fmt(ref or None, 10, 1)} | {fmt(v / ref if ref else None, 6, 3)} |")
        if size >= 1 << 20 and ref_runs:
            if ref is None:
                check(False, f"all_reduce {mib(size)}: no nccl-tests figure")
            else:
                check(abs(v / ref - 1) <= tol, f"all_reduce busbw {mib(size)}: {v:.1f} vs nccl-tests {ref:.1f} GB/s "
                                               f"({100 * (v / ref - 1):+.2f} %, target within {100 * tol:.0f} %)")
    if not ref_runs:
        print("SKIP all_reduce targets: no nccl-tests output to compare with (set NCCL_TESTS_BUILD=/path/to/build)")
    sr = [parse_nccl_tests(open(p).read()) for p in sorted(glob.glob(os.path.join(work, "sendrecv_perf-*.txt")))]
    sr_ours = {r["size"]: r["busbw_GBps"] for d in ours_runs for r in d["rows"] if r["benchmark"] == "sendrecv"}
    if sr and sr[0] and sr_ours:
        big = max(set(sr[0]) & set(sr_ours), default=None)
        if big:
            print(f"sendrecv busbw at {mib(big)}: rankmap {sr_ours[big]:.1f}, nccl-tests {sr[0][big][2]:.1f} GB/s")
    doc = load(os.path.join(work, "nccl-mpi.json"))
    if doc:
        print(f"\n== NCCL vs MPI on the same GPUs, one rank per GPU ({doc['machine'].get('ranks')} ranks; MPI buffers "
              f"{sorted({r['buffer'] for r in doc['rows'] if r['library'] == 'mpi'})}): busbw GB/s")
        ops = list(dict.fromkeys(r["benchmark"] for r in doc["rows"]))
        print(f"| {'op':<14} | {'size':>8} | {'NCCL':>8} | {'MPI':>8} | {'NCCL/MPI':>8} |")
        print("|---|---:|---:|---:|---:|")
        for op in ops:
            for size in sorted({r["size"] for r in doc["rows"] if r["benchmark"] == op}):
                n = next((r["busbw_GBps"] for r in doc["rows"] if r["benchmark"] == op and r["size"] == size
                          and r["library"] == "nccl"), None)
                mp = next((r["busbw_GBps"] for r in doc["rows"] if r["benchmark"] == op and r["size"] == size
                           and r["library"] == "mpi"), None)
                if size >= 1 << 16 and (n or mp):
                    # a size one side did not run (MPI stops at MPI_MAX to keep the run short) is a dash
                    print(f"| {op:<14} | {mib(size):>8} | {fmt(n or None, 8, 2)} | {fmt(mp or None, 8, 2)} | "
                          f"{fmt(n / mp if n and mp else None, 8, 1)} |")
        libs = {r["library"] for r in doc["rows"]}
        no_nccl = [n for n in doc.get("not_run", []) if "no NCCL library was given" in n]
        if no_nccl and "nccl" not in libs:    # said by bench nccl itself: the dry run, or a node without NCCL
            check("mpi" in libs, "MPI collectives measured on the GPUs under the launcher")
            print(f"SKIP NCCL under the launcher: {no_nccl[0]}")
        else:
            check(libs >= {"mpi", "nccl"}, "NCCL and MPI collectives measured side by side on the same GPUs")
    else:
        check(False, "bench nccl under mpirun: no results (see the log above)")
    return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--tolerance", type=float, default=0.03)
    ap.add_argument("--only", choices=("p2p", "mpi", "nccl"), action="append")
    ap.add_argument("--mpi-max-size", type=int, default=64 << 20, help="largest MPI size expected (default 64 MiB)")
    a = ap.parse_args()
    parts = a.only or ["p2p", "mpi", "nccl"]
    if "p2p" in parts:
        compare_p2p(a.work, a.tolerance)
    if "mpi" in parts:
        compare_mpi(a.work, a.mpi_max_size)
    if "nccl" in parts:
        compare_nccl(a.work, a.tolerance)
    return min(FAILS, 100)


if __name__ == "__main__":
    sys.exit(main())
