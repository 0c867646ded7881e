"""The few queries the dashboard needs beyond :class:`rankmap.store.Store`'s own.

They read the store's tables directly (``rankmap.store.schema``) through the store's engine,
each one aggregate in SQL so that a page refresh every two seconds stays cheap on a job with
thousands of ranks.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from rankmap.store import Store
from rankmap.store import schema as S

DEFAULT_BUCKET_MS = 100  # rankmap profile's default --bucket-ms, for jobs whose meta lacks it


def _iso(t: datetime | None) -> str | None:
    """UTC ISO time as the store writes it (SQLite hands datetimes back without a zone)."""
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def job_totals(store: Store, job_ids: list[int]) -> dict[int, dict[str, int]]:
    """Bytes, messages and reporting ranks per job, for the job list."""
    if not job_ids:
        return {}
    t, r = S.traffic, S.ranks
    out: dict[int, dict[str, int]] = {j: {"bytes": 0, "messages": 0, "ranks_reporting": 0} for j in job_ids}
    with store.engine.connect() as c:
        for j, b, m in c.execute(sa.select(t.c.job, sa.func.sum(t.c.bytes), sa.func.sum(t.c.messages))
                                 .where(t.c.job.in_(job_ids)).group_by(t.c.job)):
            out[j]["bytes"], out[j]["messages"] = int(b or 0), int(m or 0)
        for j, n in c.execute(sa.select(r.c.job, sa.func.count(sa.distinct(r.c.world_rank)))
                              .where(r.c.job.in_(job_ids)).group_by(r.c.job)):
            out[j]["ranks_reporting"] = int(n)
    return out


def bytes_by_class(store: Store, job_id: int) -> dict[str, dict[str, int]]:
    """Bytes and messages per traffic class."""
    t = S.traffic
    q = (sa.select(t.c["class"], sa.func.sum(t.c.bytes), sa.func.sum(t.c.messages))
         .where(t.c.job == job_id).group_by(t.c["class"]).order_by(t.c["class"]))
    with store.engine.connect() as c:
        return {k: {"bytes": int(b or 0), "messages": int(m or 0)} for k, b, m in c.execute(q)}


def operations(store: Store, job_id: int) -> list[dict[str, Any]]:
    """Per operation: bytes and messages it moved (traffic) and calls and time spent in it (op stats);
    ``pair_sources``: its bytes by where their pairs come from (docs/collective-models.md).

    The two tables are keyed differently (pair rows vs rank rows), so each is summed on its own
    and the results are joined on the operation name; an operation that moves no pair bytes
    (``MPI_Barrier``, ``MPI_Wait``) still shows its calls and time.
    """
    t, o = S.traffic, S.op_stats
    ops: dict[str, dict[str, Any]] = {}

    def row(name: str) -> dict[str, Any]:
        return ops.setdefault(name, {"operation": name, "class": None, "bytes": 0, "messages": 0,
                                     "calls": 0, "time_ns": 0, "payload": 0, "ranks": 0, "pair_sources": {}})

    with store.engine.connect() as c:
        for name, klass, ps, b, m in c.execute(
                sa.select(t.c.operation, t.c["class"], t.c.pair_source, sa.func.sum(t.c.bytes),
                          sa.func.sum(t.c.messages))
                .where(t.c.job == job_id).group_by(t.c.operation, t.c["class"], t.c.pair_source)):
            d = row(name)
            d["bytes"] += int(b or 0)
            d["messages"] += int(m or 0)
            d["class"] = klass if d["class"] in (None, klass) else "mixed"
            # where the pairs come from (call, library, mirror, model; unknown: stored before rows said)
            key = ps or "unknown"
            d["pair_sources"][key] = d["pair_sources"].get(key, 0) + int(b or 0)
        for name, calls, ns, payload, nranks in c.execute(
                sa.select(o.c.operation, sa.func.sum(o.c.calls), sa.func.sum(o.c.ns), sa.func.sum(o.c.payload),
                          sa.func.count(sa.distinct(o.c.rank)))
                .where(o.c.job == job_id).group_by(o.c.operation)):
            d = row(name)
            d["calls"], d["time_ns"] = int(calls or 0), int(ns or 0)
            d["payload"], d["ranks"] = int(payload or 0), int(nranks or 0)
    return sorted(ops.values(), key=lambda d: (-d["bytes"], -d["time_ns"], d["operation"]))


def timeline(store: Store, job_id: int, bucket_ms: float) -> dict[str, Any]:
    """Bytes sent per time slot and class, summed over ranks, with empty slots filled.

    Recent slots are one bucket wide, older ones wider (the store coarsens them, see
    :mod:`rankmap.store.batch`); each value is bytes per *bucket* (a wide slot's bytes divided by
    its width), so the curve keeps its scale where the resolution changes. ``slot_ms`` gives each
    point's width."""
    t = S.timeline
    q = (sa.select(t.c.bucket, t.c.width, t.c["class"], sa.func.sum(t.c.bytes))
         .where(t.c.job == job_id).group_by(t.c.bucket, t.c.width, t.c["class"]))
    with store.engine.connect() as c:
        rows = [(int(b), int(w), k, int(v or 0)) for b, w, k, v in c.execute(q)]
    if not rows:
        return {"bucket_ms": bucket_ms, "t_s": [], "slot_ms": [], "series": {}}
    starts: list[tuple[int, int]] = []
    end = None
    for b, w in sorted({(b, w) for b, w, _k, _v in rows}):
        p = b if end is None else end
        while p < b:                     # a gap: zeros, as wide as the slot after it
            starts.append((p, min(w, b - p)))
            p += starts[-1][1]
        starts.append((b, w))
        end = b + w
    index = {b: i for i, (b, _w) in enumerate(starts)}
    classes = sorted({r[2] for r in rows})
    series: dict[str, list] = {k: [0] * len(starts) for k in classes}
    for b, w, k, v in rows:
        series[k][index[b]] += v
    for k in classes:
        series[k] = [v if w == 1 else v / w for v, (_b, w) in zip(series[k], starts)]
    return {"bucket_ms": bucket_ms, "t_s": [round(b * bucket_ms / 1000, 6) for b, _w in starts],
            "slot_ms": [w * bucket_ms for _b, w in starts], "series": series}


def link_series(samples: list[dict]) -> list[dict[str, Any]]:
    """Link counter samples (cumulative bytes) as one series per (GPU, link) with rates in GB/s.

    A rate is the difference of two consecutive cumulative samples over their time step; a
    missing reading (``None``) breaks the series there instead of inventing a zero.
    """
    if not samples:
        return []
    t0 = min(int(s["t_ns"]) for s in samples)
    by: dict[tuple[int, str], list[dict]] = {}
    for s in samples:
        by.setdefault((int(s["device"]), str(s["link"])), []).append(s)
    out = []
    for (dev, link), ss in sorted(by.items()):
        ss.sort(key=lambda s: int(s["t_ns"]))
        t = [(int(s["t_ns"]) - t0) / 1e9 for s in ss]
        series: dict[str, Any] = {"device": dev, "link": link, "t_s": t}
        for field in ("tx_bytes", "rx_bytes"):
            vals = [s.get(field) for s in ss]
            rate: list[float | None] = [None]
            for i in range(1, len(ss)):
                a, b, dt = vals[i - 1], vals[i], t[i] - t[i - 1]
                rate.append(None if a is None or b is None or dt <= 0 else (b - a) / dt / 1e9)
            series[field] = vals
            series[field.replace("_bytes", "_gbps")] = rate
        out.append(series)
    return out


MAPPINGS_LISTED = 50  # newest first; a command tuned again and again keeps many, the panel offers these


def _mapping_scope(c: sa.Connection, job_id: int, job: dict) -> tuple[Any, str]:
    """Which stored mappings belong to a job's panel, as a WHERE clause, and how they were matched:
    those made from this job ('job'), else, when it has none, those for the same command and size
    ('command'), as ``rankmap run`` would pick one."""
    m = S.mappings
    own = c.execute(sa.select(m.c.id).where(m.c.job == job_id).limit(1)).first()
    if own is not None:
        return m.c.job == job_id, "job"
    size = job.get("world_size")
    return (sa.and_(m.c.command_key == job["command_key"],
                    m.c.world_size.is_(None) if size is None else m.c.world_size == size), "command")


def _mapping_row(row: Any, matched: str) -> dict:
    d = dict(row)
    d["created"] = _iso(d.get("created"))
    d["matched"] = matched
    return d


def mapping_owner(store: Store, mapping_id: int) -> tuple[bool, int | None]:
    """Whether a mapping is stored at all, and the job it was made from (None for one whose job was
    deleted): asked only when a job's panel is given an id not its own, so the refusal can say where
    that mapping is instead of leaving the reader to guess whether the id or the job was wrong."""
    m = S.mappings
    with store.engine.connect() as c:
        row = c.execute(sa.select(m.c.job).where(m.c.id == mapping_id)).first()
    return (False, None) if row is None else (True, row[0])


def mapping_panel(store: Store, job_id: int, job: dict, mapping_id: int | None = None,
                  limit: int = MAPPINGS_LISTED) -> dict[str, Any]:
    """A job's mapping panel in one pass over its scope (see :func:`_mapping_scope`): ``listed``, its
    newest ``limit`` mappings, newest first; ``total``, how many it has in all; ``row``, the one to
    show: ``mapping_id`` if it is one of the job's (None if not, so another job's mapping is never
    returned), else the newest (None when it has none).

    The count rides on the list's own query (a window count is taken before LIMIT), and the chosen
    one is taken from the list; only a mapping older than those listed costs one more query, bound
    to the same scope.
    """
    m = S.mappings
    with store.engine.connect() as c:
        where, matched = _mapping_scope(c, job_id, job)
        q = sa.select(m, sa.func.count().over().label("_total")).where(where).order_by(m.c.id.desc()).limit(limit)
        rows = c.execute(q).mappings().all()
        total = int(rows[0]["_total"]) if rows else 0
        listed = [_mapping_row({k: v for k, v in r.items() if k != "_total"}, matched) for r in rows]
        if mapping_id is None:
            row = listed[0] if listed else None
        else:
            row = next((r for r in listed if r["id"] == mapping_id), None)
            if row is None and total > len(listed):
                older = c.execute(sa.select(m).where(where, m.c.id == mapping_id)).mappings().first()
                row = None if older is None else _mapping_row(older, matched)
    return {"listed": listed, "total": total, "row": row}
