"""Benchmark runs of ``rankmap bench``: one ``bench_runs`` row per run, its rows in ``bench_results``.

A row's figures get columns of their own (what the dashboard's machine page and ``topo --measured``
select on); whatever else a row carries is kept in its ``extra`` JSON, so a run comes back in the
JSON row form it was given (``docs/bench.md``).
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from rankmap.errors import RankmapError
from rankmap.store import schema as S
from rankmap.store.engine import Database, iso, now
from rankmap.store.records import BenchRunDoc

#: JSON row figure -> its column
_FIGURES = {"latency_us": "latency_us", "bandwidth_GBps": "bandwidth_gbps", "total_GBps": "total_gbps",
            "algbw_GBps": "algbw_gbps", "busbw_GBps": "busbw_gbps"}
_KEYS = ("benchmark", "library", "buffer", "src", "dst", "size")


def measured_at(run: BenchRunDoc) -> datetime | None:
    """When the run was measured (its ``created``), as the store keeps times; None when it does not say."""
    text = run.get("created")
    if not text:
        return None
    t = datetime.fromisoformat(text)
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def save_bench_run(db: Database, run: BenchRunDoc) -> int:
    """Keep one benchmark run; returns its id.

    The run is dated when it was measured (``created``), else now. A run kept already (the same
    kind, host and time of measurement: a file of kept results stored twice) is not kept again:
    its id is returned."""
    t = S.bench_runs
    when = measured_at(run)
    host = run.get("host")
    with db.engine.begin() as c:
        if when is not None:
            same = c.execute(sa.select(sa.func.min(t.c.id)).where(
                t.c.kind == run["kind"], t.c.created == when,
                t.c.host.is_(None) if host is None else t.c.host == host)).scalar()
            if same is not None:
                return int(same)
        r = c.execute(t.insert().values(
            created=when or now(), kind=run["kind"], host=host, command=run.get("command"),
            machine=run.get("machine") or {}, ran=list(run.get("ran") or []),
            not_run=list(run.get("not_run") or []), meta={"notes": list(run.get("notes") or [])}))
        rid = int(r.inserted_primary_key[0])
        rows = []
        for row in run.get("rows") or []:
            d = {k: row.get(k) for k in _KEYS}
            d.update({col: row.get(key) for key, col in _FIGURES.items()})
            d["extra"] = {k: v for k, v in row.items() if k not in _KEYS and k not in _FIGURES}
            d["run"] = rid
            rows.append(d)
        if rows:
            c.execute(S.bench_results.insert(), rows)
    return rid


def bench_runs(db: Database, kind: str | None = None, host: str | None = None, limit: int = 50) -> list[dict]:
    """Benchmark runs, newest first, without their rows."""
    t = S.bench_runs
    q = sa.select(t).order_by(t.c.id.desc()).limit(limit)
    if kind:
        q = q.where(t.c.kind == kind)
    if host:
        q = q.where(t.c.host == host)
    with db.engine.connect() as c:
        out = [dict(r) for r in c.execute(q).mappings()]
    for d in out:
        d["created"] = iso(d["created"])
    return out


def bench_run(db: Database, run_id: int) -> dict:
    """One run with its rows in the JSON row form (figures named as ``rankmap bench --format json`` names them)."""
    t, res = S.bench_runs, S.bench_results
    with db.engine.connect() as c:
        row = None
        if 1 <= run_id <= S.MAX_ROW_ID:       # PostgreSQL refuses to compare its ids with a larger one
            row = c.execute(sa.select(t).where(t.c.id == run_id)).mappings().first()
        if row is None:
            raise RankmapError(f"no benchmark run {run_id} in {db.url}")
        results = c.execute(sa.select(res).where(res.c.run == run_id)).mappings().all()
    d = dict(row)
    d["created"] = iso(d["created"])
    d["notes"] = (d.pop("meta") or {}).get("notes", [])
    rows = []
    for r in results:
        out = {k: r[k] for k in _KEYS if r[k] is not None}
        out.update({key: r[col] for key, col in _FIGURES.items() if r[col] is not None})
        out.update(r["extra"] or {})
        rows.append(out)
    d["rows"] = rows
    return d


def latest_bench_run(db: Database, kind: str, host: str | None = None) -> dict | None:
    """The newest run of ``kind`` (on ``host`` when given), with its rows; None if there is none."""
    runs = bench_runs(db, kind, host, limit=1)
    return bench_run(db, runs[0]["id"]) if runs else None
