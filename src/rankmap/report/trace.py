"""``rankmap export JOB --format trace``: a stored job as a Chrome / Perfetto timeline.

One process (track group) per world rank, holding what the store keeps of it:

* one track per traffic class (p2p, collective, nccl, rma) with a slice per timeline slot, the
  bytes the rank sent in it (recent slots are one bucket wide, older ones wider: see
  :mod:`rankmap.store.batch`), and a counter track of its send rate in bytes per second;
* one track per operation (MPI_Isend, ncclAllReduce, ...) with a slice over the rank's run carrying
  its calls, time inside the calls and payload: the store keeps these per run, not per bucket;

plus one process per GPU whose link counters were sampled, with counter tracks of each link's TX
and RX rates, and the job's metadata (command, launcher, state, where it came from) in ``otherData``.

Times are on one clock: nanoseconds since the job's zero, the earliest rank start (or the first link
sample when no rank recorded one), so rank tracks and link tracks line up.
"""

from __future__ import annotations

from typing import Any

from rankmap.formats.chrome_trace import TraceWriter
from rankmap.report.summary import human_bytes

DEFAULT_BUCKET_MS = 100
CLASS_TID = {"p2p": 2, "collective": 3, "nccl": 4, "rma": 5}
OP_TID_BASE = 100


def _sampler_t0(job: dict) -> int | None:
    meta = job.get("meta") or {}
    for key in ("link_sampler", "monitor"):
        t0 = (meta.get(key) or {}).get("t0_unix_ns")
        if t0:
            return int(t0)
    return None


def build(store: Any, job_id: int) -> TraceWriter:
    """The trace of one stored job (see the module docstring)."""
    job = store.job(job_id)
    meta = job.get("meta") or {}
    bucket_ns = int(float(meta.get("bucket_ms") or DEFAULT_BUCKET_MS) * 1e6)
    ranks = store.ranks(job_id)
    starts = {(r["world_rank"], r["source"]): int(r["start_ns"]) for r in ranks if r.get("start_ns")}
    t_sampler = _sampler_t0(job)
    zero = min(starts.values(), default=None) or t_sampler or 0
    w = TraceWriter(meta={"job": {k: job.get(k) for k in ("id", "command", "launcher", "world_size", "state",
                                                          "exit_status", "hosts", "created", "ended", "elapsed_ns")},
                          "source": meta.get("imported_from") or "rankmap profile",
                          "bucket_ms": bucket_ns / 1e6, "time_zero_unix_ns": zero})
    world = store.world_size(job_id)
    hosts = {r["world_rank"]: r.get("host") for r in ranks}
    seen = sorted({r["world_rank"] for r in ranks} | set(range(world)))
    for r in seen:
        w.process(r, f"rank {r}" + (f" ({hosts[r]})" if hosts.get(r) else ""), sort_index=r)

    def start_of(rank: int, source: str) -> int:
        return starts.get((rank, source), min((v for (rr, _s), v in starts.items() if rr == rank), default=zero))

    # traffic per timeline slot, and the send rate
    named: set[tuple[int, int]] = set()
    series: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
    for row in store.timeline(job_id):
        r, klass = int(row["src"]), str(row["class"])
        t0 = start_of(r, row["source"]) - zero + int(row["bucket"]) * bucket_ns
        series.setdefault((r, klass), []).append((t0, int(row["width"]) * bucket_ns, int(row["bytes"])))
    for (r, klass), slots in sorted(series.items()):
        tid = CLASS_TID.get(klass, 6)
        if (r, tid) not in named:
            w.thread(r, tid, f"{klass} bytes sent")
            named.add((r, tid))
        slots.sort()
        merged: dict[tuple[int, int], int] = {}
        for t0, dur, b in slots:                   # the same slot of two capture sources: one slice
            merged[(t0, dur)] = merged.get((t0, dur), 0) + b
        end = None
        for (t0, dur), b in sorted(merged.items()):
            w.complete(r, tid, f"{klass} {human_bytes(b)}", t0, dur, cat=klass,
                       args={"bytes": b, "buckets": dur // bucket_ns})
            if end is not None and t0 > end:
                w.counter(r, f"{klass} send rate (B/s)", end, {"B/s": 0})
            w.counter(r, f"{klass} send rate (B/s)", t0, {"B/s": b / (dur / 1e9)})
            end = t0 + dur
        if end is not None:
            w.counter(r, f"{klass} send rate (B/s)", end, {"B/s": 0})

    # operations: totals over each rank's run
    elapsed = {(r["world_rank"], r["source"]): int(r.get("elapsed_ns") or 0) for r in ranks}
    op_tids: dict[tuple[int, str], int] = {}
    for op in store.op_stats(job_id):
        r, src = int(op["rank"]), str(op["source"])
        key = (r, op["operation"])
        if key not in op_tids:
            op_tids[key] = OP_TID_BASE + sum(1 for k in op_tids if k[0] == r)
            w.thread(r, op_tids[key], f"{op['operation']} (whole run)")
        t0 = start_of(r, src) - zero
        dur = elapsed.get((r, src)) or int(op["ns"] or 0)
        calls, ns = int(op["calls"] or 0), int(op["ns"] or 0)
        w.complete(r, op_tids[key], op["operation"], t0, dur, cat=src,
                   args={"calls": calls, "time_in_calls_ns": ns, "payload_bytes": int(op["payload"] or 0),
                         "mean_call_ns": ns // calls if calls else 0, "source": src})

    # link counters: one process per GPU, a counter track per link and direction
    samples = store.link_samples(job_id)
    if samples:
        shift = (t_sampler or zero) - zero
        base = max(seen, default=-1) + 1
        by: dict[tuple[int, str], list[dict]] = {}
        for s in samples:
            by.setdefault((int(s["device"]), str(s["link"])), []).append(s)
        for dev in sorted({d for d, _ in by}):
            w.process(base + dev, f"GPU {dev} links (sampled)", sort_index=base + dev)
        for (dev, link), ss in sorted(by.items()):
            ss.sort(key=lambda s: int(s["t_ns"]))
            for a, b in zip(ss, ss[1:]):
                dt = (int(b["t_ns"]) - int(a["t_ns"])) / 1e9
                if dt <= 0:
                    continue
                vals = {f: (b[f] - a[f]) / dt for f in ("tx_bytes", "rx_bytes")
                        if a.get(f) is not None and b.get(f) is not None}
                if vals:
                    w.counter(base + dev, f"{link} (B/s)", int(a["t_ns"]) + shift,
                              {k.replace("_bytes", ""): v for k, v in vals.items()})
    return w


def to_trace(store: Any, job_id: int) -> str:
    return build(store, job_id).dumps()
