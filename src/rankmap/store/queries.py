"""Reading a job's data back: its ranks, traffic (rows and matrix), operations, timeline, link
samples, MPI_T variables, CUDA activity, and all of it as one JSON document.

What the reports, the mapping layer and ``rankmap export`` ask; the dashboard's own aggregates are
in ``web/queries.py``. Rows come back as plain dicts without the job's id.
"""

from __future__ import annotations

from datetime import timezone
from typing import Sequence

import numpy as np
import sqlalchemy as sa

from rankmap.errors import check_dense
from rankmap.store import jobs
from rankmap.store import schema as S
from rankmap.store.engine import Database


def _rows(db: Database, q: sa.Select) -> list[dict]:
    with db.engine.connect() as c:
        return [{k: v for k, v in r.items() if k != "job"} for r in c.execute(q).mappings()]


def ranks(db: Database, job_id: int) -> list[dict]:
    return _rows(db, sa.select(S.ranks).where(S.ranks.c.job == job_id).order_by(S.ranks.c.world_rank, S.ranks.c.source))


def traffic(db: Database, job_id: int, classes: Sequence[str] | None = None, *, by_mem: bool = False,
            by_source: bool = False, by_pair_source: bool = False) -> list[dict]:
    """Pair traffic rows ``src, dst, class, operation[, mem][, source][, pair_source], bytes,
    messages``, summed over capture sources unless ``by_source`` and over where the pairs come
    from (``call``/``library``/``mirror``/``model``) unless ``by_pair_source``."""
    t = S.traffic
    keys = ([t.c.src, t.c.dst, t.c["class"], t.c.operation] + ([t.c.mem] if by_mem else [])
            + ([t.c.source] if by_source else []) + ([t.c.pair_source] if by_pair_source else []))
    q = (sa.select(*keys, sa.func.sum(t.c.bytes).label("bytes"), sa.func.sum(t.c.messages).label("messages"))
         .where(t.c.job == job_id).group_by(*keys).order_by(*keys))
    if classes:
        q = q.where(t.c["class"].in_(list(classes)))
    with db.engine.connect() as c:
        return [dict(r, bytes=int(r["bytes"]), messages=int(r["messages"])) for r in c.execute(q).mappings()]


def world_size(db: Database, job_id: int) -> int:
    """The job's size as launched, or as seen in its records when the command did not say."""
    with db.engine.connect() as c:
        ws = c.execute(sa.select(S.jobs.c.world_size).where(S.jobs.c.id == job_id)).scalar()
        seen = c.execute(sa.select(sa.func.max(S.ranks.c.world_rank)).where(S.ranks.c.job == job_id)).scalar()
        hi = c.execute(sa.select(sa.func.max(S.traffic.c.src), sa.func.max(S.traffic.c.dst))
                       .where(S.traffic.c.job == job_id)).first()
    n = max([x + 1 for x in (seen, *(hi or ())) if x is not None] + [0])
    return max(ws or 0, n)


def last_seen_ns(db: Database, job_id: int) -> int | None:
    """Wall-clock ns of the job's last sign of life in the store: its ranks' newest stored flush
    (start + elapsed of their records), else the profiler's last write (heartbeat), else None.

    What a job that stopped without an elapsed time (its profiler died) is measured up to: its
    stored bytes are those flushed by then, so a rate over "now" would shrink by the hour."""
    r = S.ranks
    with db.engine.connect() as c:
        last = c.execute(sa.select(sa.func.max(r.c.start_ns + r.c.elapsed_ns))
                         .where(r.c.job == job_id, r.c.start_ns > 0, r.c.elapsed_ns > 0)).scalar()
        hb = c.execute(sa.select(S.jobs.c.heartbeat).where(S.jobs.c.id == job_id)).scalar()
    if last:
        return int(last)
    if hb is None:
        return None
    hb = hb if hb.tzinfo else hb.replace(tzinfo=timezone.utc)
    return int(hb.timestamp() * 1e9)


def traffic_matrix(db: Database, job_id: int, classes: Sequence[str] | None = None, *,
                   what: str = "bytes") -> np.ndarray:
    """T[src][dst] as an int64 array ``[world_size, world_size]`` of bytes (or messages)."""
    if what not in ("bytes", "messages"):
        raise ValueError(what)
    n = world_size(db, job_id)
    check_dense(n, f"job {job_id}")
    m = np.zeros((n, n), dtype=np.int64)
    for r in traffic(db, job_id, classes):
        m[r["src"], r["dst"]] += r[what]
    return m


def bytes_by_mem(db: Database, job_id: int) -> dict[str, int]:
    """Bytes by where the send buffer lived: device, host, managed, unknown."""
    t = S.traffic
    q = sa.select(t.c.mem, sa.func.sum(t.c.bytes)).where(t.c.job == job_id).group_by(t.c.mem)
    with db.engine.connect() as c:
        return {m: int(b) for m, b in c.execute(q)}


def op_stats(db: Database, job_id: int) -> list[dict]:
    o = S.op_stats
    return _rows(db, sa.select(o).where(o.c.job == job_id).order_by(o.c.rank, o.c.source, o.c.operation))


def timeline(db: Database, job_id: int) -> list[dict]:
    """Bytes each rank sent (to all peers) per slot: ``bucket`` the slot's first bucket, ``width``
    its buckets (1 for recent ones; older slots are wider, see :mod:`rankmap.store.batch`)."""
    t = S.timeline
    return _rows(db, sa.select(t).where(t.c.job == job_id).order_by(t.c.bucket, t.c.src, t.c["class"], t.c.source))


def link_samples(db: Database, job_id: int) -> list[dict]:
    t = S.link_samples
    return _rows(db, sa.select(t).where(t.c.job == job_id).order_by(t.c.t_ns, t.c.device, t.c.link))


def pvars(db: Database, job_id: int, name: str | None = None) -> list[dict]:
    """MPI_T performance variable samples (``source, rank, t_ns, name, class, value, values``),
    by variable, rank and time; ``name``: one variable."""
    t = S.pvars
    q = sa.select(t).where(t.c.job == job_id).order_by(t.c["name"], t.c.rank, t.c.source, t.c.t_ns)
    if name is not None:
        q = q.where(t.c["name"] == name)
    return _rows(db, q)


def cuda_activity(db: Database, job_id: int) -> dict[str, list[dict]]:
    """The job's CUDA activity rows: ``copies``, ``kernels``, ``timeline`` and ``ranks``."""
    out: dict[str, list[dict]] = {}
    for key, t, order in (("copies", S.cuda_copies, ("rank", "kind", "src_dev", "dst_dev", "src_mem", "dst_mem")),
                          ("kernels", S.cuda_kernels, ("rank", "device", "name")),
                          ("timeline", S.cuda_timeline, ("bucket", "rank", "what")),
                          ("ranks", S.cuda_ranks, ("rank",))):
        out[key] = _rows(db, sa.select(t).where(t.c.job == job_id).order_by(*[t.c[k] for k in order]))
    return out


def profile(db: Database, job_id: int) -> dict:
    """Everything stored about one job, as plain JSON-able data (``rankmap export --format json``)."""
    rank_rows = ranks(db, job_id)
    problems = [p for r in rank_rows for p in (r.get("problems") or [])]
    return {
        "format": "rankmap-profile", "version": 2,
        "job": jobs.job(db, job_id), "ranks": rank_rows,
        "traffic": traffic(db, job_id, by_mem=True, by_pair_source=True), "op_stats": op_stats(db, job_id),
        "timeline": timeline(db, job_id), "link_samples": link_samples(db, job_id),
        "cuda_activity": cuda_activity(db, job_id), "pvars": pvars(db, job_id), "problems": problems,
    }
