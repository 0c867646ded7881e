"""Link utilisation over time: each link's bytes per frame as a percent of its bandwidth, in bands.

What OSU INAM shows of a GPU node, computed here once so the page only paints: a link is
coloured by the share of its bandwidth it used (the busier direction), in bands: idle, up to
25 %, 50 %, 75 %, and above (settable thresholds).

**Measured where possible, modelled otherwise, and always saying which.** The link sampler counts
bytes per GPU (all its NVLinks together, and its PCIe link), so a counter belongs to one drawn link
only when that GPU has exactly one link of that kind: the GPU <-> NVSwitch bundle of an NVSwitch
node, the NVLink bridge of a two-GPU pair, a GPU's PCIe uplink. Those links are drawn from the
counters (of the job's own sampler, or of a ``rankmap monitor`` session that ran on the job's host
at the same time); every other link (a DGX-1 GPU's four NVLink bundles, PCIe switch uplinks, the
CPU interconnect) from the traffic model: the job's timeline routed like the rest of rankmap.

Times are seconds since the job's zero: its sampler's first sample when it has one, else its
earliest rank start. A rank's timeline bucket ``b`` starts ``b x bucket`` after that rank's own
start, so model frames and measured frames line up in wall-clock time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import sqlalchemy as sa

from rankmap.errors import RankmapError
from rankmap.mapping.cost import Traffic
from rankmap.mapping.traffic import job_matrices
from rankmap.store import Store
from rankmap.store import schema as S
from rankmap.topology import LinkKind, Topology
from rankmap.web import topoview as V

#: idle below 0.1 % (a few kB/s of driver traffic is not use), then INAM's 25 / 50 / 75 % bands
DEFAULT_THRESHOLDS = (0.1, 25.0, 50.0, 75.0)
BAND_NAMES = ("idle", "low", "medium", "high", "saturated")
MAX_FRAMES = 600


def parse_thresholds(text: str | None) -> tuple[float, float, float, float]:
    """``"0.1,25,50,75"`` -> the four band edges in percent (idle, low, medium, high)."""
    if not text:
        return DEFAULT_THRESHOLDS
    try:
        vals = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise RankmapError(f"bands {text!r}: four numbers in percent, e.g. 0.1,25,50,75") from None
    if len(vals) != 4 or vals[0] < 0 or not all(a < b for a, b in zip(vals, vals[1:])) or vals[-1] > 1000:
        raise RankmapError(f"bands {text!r}: four increasing percentages, e.g. 0.1,25,50,75")
    return vals  # type: ignore[return-value]


def bands_of(util: np.ndarray, thresholds: tuple[float, ...]) -> np.ndarray:
    """Band index per utilisation (percent): 0 idle (< idle edge), 1 <= t1, 2 <= t2, 3 <= t3, 4 above."""
    idle, t1, t2, t3 = thresholds
    u = np.asarray(util, dtype=float)
    return np.where(u < idle, 0, np.where(u <= t1, 1, np.where(u <= t2, 2, np.where(u <= t3, 3, 4)))).astype(int)


def _unix_ns(iso: str | None) -> int | None:
    if not iso:
        return None
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1e9)


# ------------------------------------------------------------------------------ measured
@dataclass
class Measured:
    """Cumulative counters per (GPU index, 'nvlink'|'pcie'): times (s, job-relative) and bytes."""

    series: dict[tuple[int, str], tuple[np.ndarray, np.ndarray | None, np.ndarray | None]]
    source: str                      # what the page says: whose counters these are
    job: int                         # the job whose link_samples they are
    kind: str | None                 # gpm | fields | None (unknown)
    uuids: dict[int, str]            # GPU index -> UUID, where the sampler knew it

    @property
    def span(self) -> float:
        return max((float(t[-1]) for t, _, _ in self.series.values() if len(t)), default=0.0)


def sampler_t0_ns(job: dict) -> int | None:
    """Wall-clock ns of a job's first link sample (monitor sessions and profiles record it)."""
    meta = job.get("meta") or {}
    for key in ("monitor", "link_sampler"):
        t0 = (meta.get(key) or {}).get("t0_unix_ns")
        if t0:
            return int(t0)
    return None


def _series(rows: list[dict], t_shift_ns: int, lo_ns: int | None = None, hi_ns: int | None = None) -> dict:
    by: dict[tuple[int, str], list[dict]] = {}
    for r in rows:
        t = int(r["t_ns"])
        if (lo_ns is not None and t < lo_ns) or (hi_ns is not None and t > hi_ns):
            continue
        by.setdefault((int(r["device"]), str(r["link"])), []).append(r)
    out = {}
    for key, rs in by.items():
        rs.sort(key=lambda r: int(r["t_ns"]))
        t = np.array([(int(r["t_ns"]) + t_shift_ns) / 1e9 for r in rs])
        cols = []
        for f in ("tx_bytes", "rx_bytes"):
            v = [r[f] for r in rs]
            cols.append(None if any(x is None for x in v) else np.array(v, dtype=np.float64))
        out[key] = (t, cols[0], cols[1])
    return out


def measured(store: Store, job: dict, t0_ns: int) -> Measured | None:
    """The job's own counters, else those of a monitor session on its host that overlapped it."""
    jid = int(job["id"])
    own = store.link_samples(jid)
    meta = job.get("meta") or {}
    if own:
        info = meta.get("monitor") or meta.get("link_sampler") or {}
        shift = (sampler_t0_ns(job) or t0_ns) - t0_ns
        what = "this monitor session" if job.get("launcher") == "monitor" else "the job's link sampler"
        return Measured(_series(own, shift), what, jid, info.get("source"), _uuids(info))
    hosts = set(job.get("hosts") or [])
    start, end = _unix_ns(job.get("created")), _unix_ns(job.get("ended"))
    if end is None and job.get("state") != "running":  # gone without an end: up to its last sign of life
        span = job_span_s(store, job, t0_ns)
        end = None if span is None else t0_ns + int(span * 1e9)
    if not hosts or start is None:
        return None
    best = None
    for m in _monitor_sessions(store, jid):
        info = (m.get("meta") or {}).get("monitor") or {}
        if info.get("host") not in hosts or not info.get("t0_unix_ns"):
            continue
        m_start = int(info["t0_unix_ns"])
        m_end = _unix_ns(m.get("ended")) or 2**62
        lo, hi = max(start, m_start), min(end or 2**62, m_end)
        if hi > lo and (best is None or hi - lo > best[0]):
            best = (hi - lo, m, info, m_start)
    if best is None:
        return None
    _, m, info, m_start = best
    lo_ns = max(0, start - m_start - int(2 * float(info.get("interval_ms") or 100) * 1e6))
    hi_ns = None if end is None else end - m_start + int(2 * float(info.get("interval_ms") or 100) * 1e6)
    rows = store.link_samples(int(m["id"]))
    series = _series(rows, m_start - t0_ns, lo_ns, hi_ns)
    if not series:
        return None
    return Measured(series, f"monitor session {m['id']} on {info.get('host')}", int(m["id"]),
                    info.get("source"), _uuids(info))


def _uuids(info: dict) -> dict[int, str]:
    return {int(g["index"]): str(g.get("uuid") or "") for g in info.get("gpus") or [] if "index" in g}


def _monitor_sessions(store: Store, not_job: int) -> list[dict]:
    j = S.jobs
    with store.engine.connect() as c:
        ids = c.execute(sa.select(j.c.id).where(j.c.launcher == "monitor", j.c.id != not_job)
                        .order_by(j.c.id.desc()).limit(200)).scalars().all()
    return [store.job(i) for i in ids]


def measured_links(topo: Topology) -> dict[int, tuple[int, str, bool]]:
    """Drawn link -> (GPU index, counter kind, True when the GPU is the link's ``a`` end).

    Only links that one GPU counter covers alone: that GPU's only NVLink link, its only PCIe link.
    """
    out: dict[int, tuple[int, str, bool]] = {}
    for g in topo.gpus:
        for kind, counter in ((LinkKind.NVLINK, "nvlink"), (LinkKind.PCIE, "pcie")):
            mine = [(i, l) for i, l in enumerate(topo.links) if l.kind == kind and g.id in (l.a, l.b)]
            if len(mine) == 1 and mine[0][0] not in out:
                i, l = mine[0]
                out[i] = (g.index, counter, l.a == g.id)
    return out


def _frame_bytes(t: np.ndarray, c: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bytes per frame of a cumulative counter, linearly interpolated at the frame edges."""
    at = np.interp(edges, t, c, left=c[0], right=c[-1])
    return np.maximum(np.diff(at), 0.0)


# ------------------------------------------------------------------------------ model
def model_frames(store: Store, job_id: int, t0_ns: int, bucket_s: float, frame_s: float, frames: int,
                 placement: V.Placement, n: int, topo: Topology) -> np.ndarray | None:
    """``(frames, links, 2)`` bytes per drawn link and direction per frame (pairs on one node).

    The store keeps what each rank sent per time slot (all its peers together; older slots wider,
    see :mod:`rankmap.store.batch`): a slot's bytes are routed as the rank's traffic over the whole
    job is, by the one routing rule (:func:`rankmap.web.topoview.directed_loads`: to each peer in
    the proportions of the whole job, its host-staged share via the host), and spread over the
    frames the slot spans, evenly."""
    t, r = S.timeline, S.ranks
    with store.engine.connect() as c:
        starts = {(int(w), s): int(st) for w, s, st in c.execute(
            sa.select(r.c.world_rank, r.c.source, r.c.start_ns).where(r.c.job == job_id)) if st is not None}
        rows = c.execute(sa.select(t.c.src, t.c.source, t.c.bucket, t.c.width, sa.func.sum(t.c.bytes))
                         .where(t.c.job == job_id)
                         .group_by(t.c.src, t.c.source, t.c.bucket, t.c.width)).all()
    if not rows:
        return None
    T, H = job_matrices(store, job_id)
    if T.shape[0] != n:
        return None
    # what each rank sent in all, as its timeline counts it: to itself and off this node too
    sent = T.sum(axis=1)
    tr = Traffic.from_dense(T, H)
    shown, _off = V.on_node(tr, placement)
    drawn = sorted(g.index for g in topo.gpus)
    gpu = np.asarray(placement.gpu[:n], dtype=np.int64)
    ok = np.isin(gpu, drawn)
    keep = ok[shown.src] & ok[shown.dst]
    shown = Traffic(n, shown.src[keep], shown.dst[keep], shown.bytes[keep],
                    shown.host[keep] if shown.host is not None else None)
    per_byte = V.directed_loads(topo, shown, np.where(ok, gpu, drawn[0]), shown.src, n).reshape(n, -1)
    per_byte /= np.maximum(sent, 1.0)[:, None]       # a byte sent by rank r, on every link and direction
    F = np.zeros((frames, n))                         # bytes each rank sent in each frame
    for src, source, bucket, width, b in rows:
        src = int(src)
        if not b or not 0 <= src < n or sent[src] <= 0:
            continue
        begin = (starts.get((src, source), t0_ns) - t0_ns) / 1e9 + int(bucket) * bucket_s
        end = begin + int(width) * bucket_s
        f0 = min(max(int(begin // frame_s), 0), frames - 1)
        f1 = min(max(int(np.ceil(end / frame_s)) - 1, f0), frames - 1)
        for f in range(f0, f1 + 1):
            lo, hi = max(begin, f * frame_s), min(end, (f + 1) * frame_s)
            frac = (hi - lo) / (end - begin) if f1 > f0 else 1.0
            if frac > 0:
                F[f, src] += float(b) * frac
    return (F @ per_byte).reshape(frames, len(topo.links), 2)


# ------------------------------------------------------------------------------ the view
def job_zero_ns(store: Store, job: dict) -> int:
    """The job's time zero (wall-clock ns): its sampler's first sample, else its first rank start."""
    t0 = sampler_t0_ns(job)
    if t0:
        return t0
    with store.engine.connect() as c:
        st = c.execute(sa.select(sa.func.min(S.ranks.c.start_ns)).where(S.ranks.c.job == int(job["id"]))).scalar()
    return int(st) if st else (_unix_ns(job.get("created")) or 0)


def job_span_s(store: Store, job: dict, t0_ns: int) -> float | None:
    """Seconds from the job's zero (:func:`job_zero_ns`) to the end of what its figures cover.

    Its elapsed time when it stored one; now while it runs; else (incomplete: its profiler died)
    its last sign of life (:meth:`Store.last_seen_ns`), so that its rates stay what they were
    instead of shrinking as the clock goes on. None when nothing says."""
    if job.get("elapsed_ns"):
        return job["elapsed_ns"] / 1e9
    end = time.time_ns() if job.get("state") == "running" else store.last_seen_ns(int(job["id"]))
    return (end - t0_ns) / 1e9 if end and t0_ns else None


def utilisation(store: Store, job: dict, topo: Topology, placement: V.Placement, n: int,
                thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS, max_frames: int = MAX_FRAMES) -> dict[str, Any]:
    """Per link of ``topo``: utilisation (percent of bandwidth, busier direction) per frame and overall."""
    jid = int(job["id"])
    t0 = job_zero_ns(store, job)
    meas = measured(store, job, t0)
    meta = job.get("meta") or {}
    bucket_s = float(meta.get("bucket_ms") or 100) / 1000
    has_timeline = n > 0 and _has_timeline(store, jid)

    # the frame grid: the sampling interval (or bucket), widened until there are few enough frames
    steps = []
    if meas:
        for t, _, _ in meas.series.values():
            if len(t) > 1:
                steps.append(float(np.median(np.diff(t))))
    frame = max([s for s in steps if s > 0] + ([bucket_s] if has_timeline else []) or [bucket_s])
    frame = round(frame, 4) or bucket_s
    span = meas.span if meas else 0.0
    if job.get("elapsed_ns") and not meas:  # a running job's frames end with its newest data
        span = max(span, job["elapsed_ns"] / 1e9)
    if has_timeline:
        span = max(span, _timeline_span(store, jid, t0, bucket_s))
    frames = max(1, math.ceil(span / frame - 1e-9))
    if frames > max_frames:
        k = math.ceil(frames / max_frames)
        frame *= k
        frames = max(1, math.ceil(span / frame - 1e-9))
    edges = np.arange(frames + 1) * frame

    model = model_frames(store, jid, t0, bucket_s, frame, frames, placement, n, topo) if has_timeline else None
    mlinks = measured_links(topo)
    # the sampler numbers GPUs as NVML does; match them by UUID where both sides know it
    by_uuid = {u: d for d, u in (meas.uuids if meas else {}).items() if u}
    dev_of = {g.index: by_uuid.get(str(g.attrs.get("uuid") or ""), g.index) for g in topo.gpus}

    links = []
    n_meas = n_model = 0
    for i, l in enumerate(topo.links):
        ab = ba = None
        src = "none"
        how = None
        m = mlinks.get(i)
        if meas and m is not None:
            gidx, kind, gpu_is_a = m
            ser = meas.series.get((dev_of[gidx], kind))
            if ser is not None and ser[1] is not None and ser[2] is not None and len(ser[0]):
                tx, rx = _frame_bytes(ser[0], ser[1], edges), _frame_bytes(ser[0], ser[2], edges)
                ab, ba = (tx, rx) if gpu_is_a else (rx, tx)
                src = "measured"
                how = f"GPU{gidx} {kind} TX/RX counters"
        if src == "none" and model is not None:
            ab, ba = model[:, i, 0], model[:, i, 1]
            src = "model"
        cap = l.bandwidth * 1e9 * frame
        row: dict[str, Any] = {"link": i, "a": l.a, "b": l.b, "kind": l.kind.value, "bandwidth": l.bandwidth,
                               "source": src, "measured_as": how}
        if ab is not None:
            ua, ub = ab / cap * 100, ba / cap * 100
            peak = np.maximum(ua, ub)
            tot_a, tot_b = float(ab.sum()), float(ba.sum())
            avg = max(tot_a, tot_b) / (l.bandwidth * 1e9 * frames * frame) * 100
            row.update(util_ab=[round(float(x), 4) for x in ua], util_ba=[round(float(x), 4) for x in ub],
                       band=bands_of(peak, thresholds).tolist(), bytes_ab=int(round(tot_a)),
                       bytes_ba=int(round(tot_b)), avg_util=round(avg, 4), peak_util=round(float(peak.max()), 4),
                       avg_band=int(bands_of(np.array([avg]), thresholds)[0]),
                       peak_band=int(bands_of(peak.max(keepdims=True), thresholds)[0]))
            n_meas += src == "measured"
            n_model += src == "model"
        links.append(row)

    notes = []
    if meas is None:
        notes.append("no link counters for this job (no sampler ran, and no `rankmap monitor` on its host "
                     "at the time): every link is drawn from the traffic model")
    elif n_meas == 0:
        notes.append(f"the counters of {meas.source} cover no single drawn link of {topo.name} (a GPU's "
                     f"counter sums all its NVLink bundles): links are drawn from the traffic model")
    if model is None and n > 0:
        notes.append("the job has no timeline: links without counters cannot be drawn")
    return {
        "job": jid, "topology": topo.name, "frame_s": frame, "frames": frames,
        "t_s": [round(float(x), 6) for x in edges[:-1]], "duration_s": round(frames * frame, 6),
        "thresholds": list(thresholds), "band_names": list(BAND_NAMES),
        "measured": None if meas is None else {"source": meas.source, "job": meas.job, "kind": meas.kind,
                                               "links": n_meas},
        "model": None if model is None else {"source": "traffic model (the job's timeline, routed)",
                                             "links": n_model, "placement": placement.source},
        "links": links, "notes": notes,
    }


def _has_timeline(store: Store, job_id: int) -> bool:
    with store.engine.connect() as c:
        return c.execute(sa.select(S.timeline.c.job).where(S.timeline.c.job == job_id).limit(1)).first() is not None


def _timeline_span(store: Store, job_id: int, t0: int, bucket_s: float) -> float:
    """Seconds from the job's zero to the end of its last timeline bucket."""
    t, r = S.timeline, S.ranks
    q = (sa.select(t.c.src, t.c.source, sa.func.max(t.c.bucket + t.c.width - 1)).where(t.c.job == job_id)
         .group_by(t.c.src, t.c.source))
    with store.engine.connect() as c:
        starts = {(int(w), s): int(st) for w, s, st in c.execute(
            sa.select(r.c.world_rank, r.c.source, r.c.start_ns).where(r.c.job == job_id)) if st is not None}
        last = c.execute(q).all()
    return max(((starts.get((int(s), src), t0) - t0) / 1e9 + (int(b) + 1) * bucket_s for s, src, b in last),
               default=0.0)
