"""Checks of gpu/nccl_shapes.sh: one process driving two GPUs, JAX, CUDA graphs, small-op cost.

    nccl_shapes_check.py nvml OUT.json                      NVLink data TX/RX of every GPU (bytes)
    nccl_shapes_check.py capture RUN_DIR BEFORE AFTER KIND [SIZES|EXPECT.json] [--replays R]
        KIND: all_reduce | sendrecv | alltoall (nccl-tests -g 2, SIZES = comma-separated bytes),
              jax (EXPECT.json from gpu/jax_collectives.py), graphs (EXPECT.json from
              gpu/torch_graphs.py, --replays R)
    nccl_shapes_check.py bench TABLE.txt NCCLTESTS_LOG...   plain / plugin / plugin-none table

Prints one PASS/FAIL line per check; the exit status is the number of FAILs (at most 100).
Tolerance of the NVLink comparison: 0.1 % (NCCL's own setup traffic is ~40 KB per job).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

TOL = 0.001
fails = 0


def check(ok: bool, what: str) -> None:
    global fails
    fails += 0 if ok else 1
    print(("PASS " if ok else "FAIL ") + what, flush=True)


def nvml(out: str) -> None:
    import pynvml as N
    N.nvmlInit()
    res = {}
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        vals = N.nvmlDeviceGetFieldValues(h, [(N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF),
                                              (N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0xFFFFFFFF)])
        res[i] = [int(v.value.ullVal) * 1024 if v.nvmlReturn == 0 else None for v in vals]   # KiB counters
    N.nvmlShutdown()
    Path(out).write_text(json.dumps(res))


# ---- the capture of one job ------------------------------------------------------------------------

def capture(run_dir: str, before: str, after: str, kind: str, spec: str, replays: int = 0) -> None:
    from rankmap.pairs import nccl_model
    from rankmap.formats import record as records
    prof = nccl_model.load(run_dir)
    ing = nccl_model.ingest_records(prof)
    print(f"   {kind}: {len(prof.records)} record files, global ranks {prof.ranks} from {prof.ranks_from}")
    gpus = {w: r.meta.get("nccl.gpu", "?") for w, r in zip(prof.ranks, prof.records)}
    print(f"   GPUs: {gpus}")
    check(sorted(prof.ranks) == [0, 1] and all(r.finalized and not r.problems for r in prof.records),
          f"{kind}: both GPUs recorded as ranks 0 and 1, files complete")
    ordinals = {w: g.split("ordinal=")[-1] for w, g in gpus.items()}
    summ = nccl_model.op_summary(prof)
    for w in sorted(summ):
        print(f"   rank {w}: " + ", ".join(f"{f} {b}: {c}" for (f, b), c in sorted(summ[w].items())))
    if kind in ("all_reduce", "sendrecv", "alltoall"):
        sizes = [int(x) for x in spec.split(",")]
        func = {"all_reduce": "AllReduce", "sendrecv": "Send", "alltoall": None}[kind]
        for w in (0, 1):
            got = summ.get(w, {})
            if kind == "alltoall":       # NCCL 2.28 runs it as AlltoAll or as Send/Recv per peer
                want = {s // 2 for s in sizes}
                seen = {b for (f, b) in got if f in ("AlltoAll", "Send")}
            else:
                want, seen = set(sizes), {b for (f, b) in got if f == func}
            calls = {b: c for (f, b), c in got.items() if b in want}
            check(seen == want and len(set(calls.values())) == 1,
                  f"{kind} rank {w}: bytes per call exactly the sizes nccl-tests ran {sorted(want)} "
                  f"(got {sorted(seen)}), the same calls per size {calls}")
    else:
        exp = json.loads(Path(spec).read_text())
        for w in (0, 1):
            for e in exp["calls"]:
                got = summ.get(w, {}).get((e["func"], e["bytes"]), 0)
                check(got == e["calls"], f"{kind} rank {w}: nccl{e['func']} {e['bytes']} bytes x {e['calls']} "
                      f"calls recorded (got {got})")
    if kind == "graphs":
        cap = nccl_model.captured_calls(prof)
        notes = [p for r in ing for p in r.problems if "CUDA graphs" in p]
        check(cap == {0: exp["captured_calls"], 1: exp["captured_calls"]} and len(notes) == 2,
              f"graphs: calls captured into the CUDA graph counted per rank {cap} (expected "
              f"{exp['captured_calls']}), and the summary says replays are not counted: {notes[:1]}")
    m = records.traffic_matrix(ing, klass="nccl")
    check((m == records.received_matrix(ing, klass="nccl")).all(), f"{kind}: pair rows agree from both ends")
    wire, order = nccl_model.pair_matrix(prof, wire=True)
    print(f"   order per communicator: { {f'{h:016x}': o for h, o in order.items()} }")
    print(f"   pairs (bytes on the wire): 0->1 {wire[0, 1]:.0f}  1->0 {wire[1, 0]:.0f}")
    b, a = json.loads(Path(before).read_text()), json.loads(Path(after).read_text())
    g0, g1 = int(ordinals.get(0, 0)), int(ordinals.get(1, 1))
    # The profile counts a captured call once, as if it ran at capture; it did not (capture only records
    # it): it ran once per replay. So the wire carried profile + (replays - 1) x the graph's bytes.
    unseen = captured_wire(prof) * max(replays - 1, 0)
    if replays:
        print(f"   {replays} replays of the graph, counted once in the profile: "
              f"{unseen[0, 1]:.0f} / {unseen[1, 0]:.0f} bytes more on the wire")
    for what, gpu, k, s, d in (("0->1 (GPU TX)", g0, 0, 0, 1), ("0->1 (GPU RX)", g1, 1, 0, 1),
                               ("1->0 (GPU TX)", g1, 0, 1, 0), ("1->0 (GPU RX)", g0, 1, 1, 0)):
        bb, aa = b.get(str(gpu)), a.get(str(gpu))
        if not bb or not aa or bb[k] is None or aa[k] is None:
            check(False, f"{kind} {what}: NVML counter not available")
            continue
        nv, want = aa[k] - bb[k], wire[s, d] + unseen[s, d]
        err = abs(nv - want) / want if want else float("inf")
        label = "profile + (replays - 1) x graph" if replays else "profile"
        check(err <= TOL, f"{kind} {what}: {label} {want:.0f} bytes, NVLink {nv}, difference {100 * err:.4f} %")


def captured_wire(prof):
    """Bytes on the wire of the calls captured into CUDA graphs (one replay's worth)."""
    import numpy as np
    from rankmap.pairs import nccl_model
    m = np.zeros((prof.world_size,) * 2)
    for c in prof.comms.values():
        for cr, rows in c.rows.items():
            for row in rows:
                if row.captured and cr in c.files:
                    for peer, by, _l in nccl_model.sends(row, c.nranks, cr, c.graph):
                        if peer in c.files:
                            m[prof.ranks[c.files[cr]], prof.ranks[c.files[peer]]] += by * row.captured * nccl_model.wire_factor(row)
    return m


# ---- small-op cost ------------------------------------------------------------------------------------

def parse_nccltests(text: str) -> dict[int, list[float]]:
    """{size: [out-of-place us, in-place us]} from nccl-tests output."""
    out: dict[int, list[float]] = {}
    for line in text.splitlines():
        t = line.split()
        if len(t) >= 10 and t[0].isdigit() and t[1].isdigit():
            try:
                out[int(t[0])] = [float(t[5]), float(t[9])]
            except ValueError:
                continue
    return out


def bench(table: str, logs: list[str]) -> None:
    """Logs are named <mode>-<round>.log, mode plain | plugin | none. Medians over rounds (both the
    out-of-place and in-place times of a run are samples); noise = median absolute deviation."""
    runs: dict[str, list[dict[int, list[float]]]] = {}
    for p in logs:
        mode = Path(p).name.split("-")[0]
        r = parse_nccltests(Path(p).read_text(errors="replace"))
        if r:
            runs.setdefault(mode, []).append(r)
    lines = []

    def say(s: str = "") -> None:
        lines.append(s)
        print(s, flush=True)

    if not all(runs.get(m) for m in ("plain", "plugin", "none")):
        check(False, f"small-op cost: runs missing ({ {m: len(v) for m, v in runs.items()} })")
        Path(table).write_text("\n".join(lines) + "\n")
        return
    sizes = sorted(set.intersection(*[set(r) for rs in runs.values() for r in rs]))

    def samples(mode: str, s: int) -> list[float]:
        return [v for r in runs[mode] for v in r[s]]

    def mad(v: list[float]) -> float:
        m = statistics.median(v)
        return statistics.median(abs(x - m) for x in v)

    say(f"all_reduce_perf -g 2 (one process, 2 GPUs), {len(runs['plain'])} runs per mode, interleaved; "
        f"median us per operation of {len(samples('plain', sizes[0]))} samples per cell")
    say("| size | plain | plugin | none | added | of it NCCL's (none-plain) | of it ours (plugin-none) | noise (MAD plain) |")
    say("|---:|---:|---:|---:|---:|---:|---:|---:|")
    small, big = [], []
    for s in sizes:
        a, b, c = (statistics.median(samples(m, s)) for m in ("plain", "plugin", "none"))
        noise = mad(samples("plain", s))
        say(f"| {s} | {a:.2f} | {b:.2f} | {c:.2f} | {b - a:+.2f} ({100 * (b - a) / a:+.2f} %) | {c - a:+.2f} | "
            f"{b - c:+.2f} | {noise:.2f} |")
        (big if s >= 1 << 20 else small).append((s, a, b, c, noise))
    say()
    if small:
        added = statistics.median(b - a for _s, a, b, _c, _n in small)
        ours = statistics.median(b - c for _s, _a, b, c, _n in small)
        nccl = statistics.median(c - a for _s, a, _b, c, _n in small)
        noise = statistics.median(n for *_x, n in small)
        say(f"below 1 MiB, median over sizes: added {added:+.2f} us per operation = NCCL's cost of a loaded "
            f"profiler {nccl:+.2f} + ours {ours:+.2f} (run-to-run noise {noise:.2f} us)")
        check(added <= 1.0, f"small-op cost below 1 MiB: {added:+.2f} us per operation (target <= 1 us)")
    if big:
        worst = max(100 * (b - a) / a for _s, a, b, _c, _n in big)
        check(worst <= 1.0, f"small-op cost from 1 MiB: worst {worst:+.2f} % (target <= 1 %)")
    Path(table).write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    def stopped(kind, e, tb):   # an exception is a FAIL line too, never a silent stop
        import traceback
        traceback.print_exception(kind, e, tb)
        print(f"FAIL checker stopped: {e!r}", flush=True)
        sys.exit(min(fails + 1, 100))
    sys.excepthook = stopped
    cmd = argv[0]
    if cmd == "nvml":
        nvml(argv[1])
    elif cmd == "capture":
        replays = int(argv[argv.index("--replays") + 1]) if "--replays" in argv else 0
        capture(*argv[1:6], replays=replays)
    elif cmd == "bench":
        bench(argv[1], argv[2:])
    else:
        raise SystemExit(f"unknown command {cmd}")
    return min(fails, 100)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
