"""``rankmap bench p2p``: every GPU pair's copy bandwidth (copy engine and SM, one way and both ways)
and small-message latency, and host<->device bandwidth per GPU (pinned and pageable).

The measuring is done by ``native/linkbench/p2p.cu`` (its header says how, the way nvbandwidth does
it); this module builds it, runs it and turns its raw nanoseconds into rows: GB/s = bytes / ns
(GB = 1e9), the median of the samples; bidirectional totals add the two directions' medians, as
nvbandwidth's "Total" does.
"""

from __future__ import annotations

import os
import shlex

from rankmap.linkbench import native_out
from rankmap.linkbench.rows import BenchRun, Row, gbps, median
from rankmap.errors import RankmapError

#: test name -> (buffer, what a person calls it)
TESTS = {
    "ce_write": ("device", "copy engine, source GPU pushes"),
    "ce_read": ("device", "copy engine, destination GPU pulls"),
    "ce_bidir_write": ("device", "copy engine, both directions at once (pushes)"),
    "ce_bidir_read": ("device", "copy engine, both directions at once (pulls)"),
    "sm_write": ("device", "SM copy kernel on the source GPU"),
    "sm_read": ("device", "SM copy kernel on the destination GPU"),
    "sm_bidir": ("device", "SM copy kernels on both GPUs at once"),
    "latency_ce": ("device", "one small copy-engine copy, back to back"),
    "latency_sm": ("device", "one dependent 8-byte load from the peer's memory"),
    "h2d_pinned": ("pinned", "host to device, pinned host memory"),
    "d2h_pinned": ("pinned", "device to host, pinned host memory"),
    "h2d_pageable": ("pageable", "host to device, pageable host memory"),
    "d2h_pageable": ("pageable", "device to host, pageable host memory"),
}
BIDIR = {"ce_bidir_write", "ce_bidir_read", "sm_bidir"}
LATENCY = {"latency_ce", "latency_sm"}
HOST = {"h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable"}


def rows_from(out: native_out.Output) -> list[Row]:
    """Rows from the program's result records (pure: the tests feed it recorded lines)."""
    rows = []
    for r in out.of("result"):
        test, ns, nbytes, loops = r["test"], [int(x) for x in r["ns"]], int(r["bytes"]), int(r["loops"])
        if test not in TESTS:
            continue
        extra = {"engine": r.get("engine"), "loops": loops, "samples": len(ns), "test": TESTS[test][1]}
        row = Row(test, nbytes, TESTS[test][0], "cuda", src=int(r["src"]), dst=int(r["dst"]), extra=extra)
        if test in LATENCY:
            per = [x / loops for x in ns]
            row.latency_us = median(per) / 1000.0
            row.extra["samples_us"] = [round(x / 1000.0, 4) for x in per]
        else:
            bw = [gbps(nbytes * loops, x) for x in ns]
            row.bandwidth_GBps = median(bw)
            row.extra["samples_GBps"] = [round(x, 3) for x in bw]
            if test in BIDIR and r.get("ns_reverse"):
                rev = [gbps(nbytes * loops, int(x)) for x in r["ns_reverse"]]
                row.extra["reverse_GBps"] = median(rev)
                row.total_GBps = row.bandwidth_GBps + median(rev)
        rows.append(row)
    return rows


def machine_from(out: native_out.Output) -> dict:
    info = out.info
    return {
        "gpus": [{k: d.get(k) for k in ("index", "name", "pci", "sms", "cc_major", "cc_minor", "memory", "copy_engines")}
                 for d in out.of("device")],
        "peer_access": [[p["src"], p["dst"], p["access"]] for p in out.of("peer")],
        "cuda_runtime": info.get("cuda_runtime"), "cuda_driver": info.get("cuda_driver"),
        "devices_visible": info.get("devices"),
    }


def describe(rows: list[Row], out: native_out.Output) -> tuple[list[str], list[str]]:
    """(ran, not_run): what was measured, and what was not with the program's reason."""
    pairs = sorted({(r.src, r.dst) for r in rows if r.buffer == "device"})
    gpus = sorted({r.dst if r.src == -1 else r.src for r in rows if r.benchmark in HOST})
    ran = []
    if pairs:
        kinds = sorted({"copy engine" if r.benchmark.startswith("ce") else "SM copies" if r.benchmark.startswith("sm")
                        else "latency" for r in rows if r.buffer == "device"})
        ran.append(f"{len(pairs)} GPU pair directions ({', '.join(kinds)})")
    if gpus:
        kinds = sorted({r.buffer for r in rows if r.benchmark in HOST})
        ran.append(f"host<->GPU {', '.join(map(str, gpus))} ({', '.join(kinds)})")
    not_run = [f"{s['what']}: {s['why']}" for s in out.of("skip")]
    return ran, not_run


def run(*, size: int = 512 << 20, loops: int = 16, samples: int = 3, tests: list[str] | None = None,
        devices: list[int] | None = None, timeout: float = 900, archs: list[str] | None = None,
        extra_args: list[str] | None = None) -> BenchRun:
    """Build (first time) and run the GPU-pair benchmark; raises :class:`RankmapError` when nothing ran."""
    from rankmap.linkbench.build import build_p2p

    unknown = [t for t in tests or [] if t not in TESTS]
    if unknown:
        raise RankmapError(f"unknown p2p test {unknown[0]!r}; tests: {', '.join(TESTS)}")
    if size < 16 or size % 16:
        raise RankmapError(f"--size must be a positive multiple of 16 bytes, got {size}")
    exe = build_p2p(archs=archs)
    argv = [str(exe), "--size", str(size), "--loops", str(loops), "--samples", str(samples)]
    if tests:
        argv += ["--tests", ",".join(tests)]
    if devices:
        argv += ["--devices", ",".join(map(str, devices))]
    argv += extra_args or []
    env = dict(os.environ)
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")      # CUDA index i == NVML / topology index i
    out = native_out.run(argv, what="bench p2p", timeout=timeout, env=env)
    if out.returncode == native_out.EXIT_NO_GPU:
        raise native_out.no_gpu(out, "bench p2p")
    if out.returncode != 0:
        raise RankmapError(native_out.failure(out, "bench p2p"))
    rows = rows_from(out)
    ran, not_run = describe(rows, out)
    return BenchRun("p2p", rows, machine_from(out), ran, not_run, command=shlex.join(argv),
                    notes=[n["text"] for n in out.of("note")])
