"""Writing a job's counters: append-only batches, totals that replace a rank's, link samples.

:func:`append` adds a :class:`~rankmap.store.batch.Batch` into rows keyed by what they count
(``ON CONFLICT ... DO UPDATE SET bytes = bytes + excluded.bytes``) and, in the same transaction, how
far each record file was read, so a write costs what changed and an interrupted ingest resumes
exactly. It is the hot path of a streaming profile (a write a second): its statements are built
once per store (:meth:`Database.statement`) and the widest upserts go straight to the driver.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence, cast

import sqlalchemy as sa

from rankmap.errors import RankmapError
from rankmap.store import schema as S
from rankmap.store.batch import TIMELINE_SLOTS, Batch, add_histograms, level_threshold, timeline_slot
from rankmap.store.engine import Database, now
from rankmap.store.records import CudaCounts, LinkCounts, RankCounts


def file_states(db: Database, job_id: int) -> dict[str, tuple[int, dict]]:
    """How far each record file of the job was stored: name -> (bytes, reader state)."""
    t = S.ingest_files
    with db.engine.connect() as c:
        return {n: (int(o), dict(st)) for n, o, st in
                c.execute(sa.select(t.c.name, t.c.done_bytes, t.c.state).where(t.c.job == job_id))}


def append(db: Database, job_id: int, batch: Batch) -> int:
    """Add a batch of counters to the job, with the file positions it reaches, in one transaction.

    Each file's stored position must still be where the batch started reading it: a second
    process ingesting the same files fails here instead of counting their blocks twice.
    Returns the rows written. Also the profiler's heartbeat (see :func:`rankmap.store.jobs.job_state`).
    """
    beat = db.statement(("heartbeat",), lambda: S.jobs.update().where(
        S.jobs.c.id == sa.bindparam("jid"), S.jobs.c.profiler.is_not(None)).values(heartbeat=sa.bindparam("hb")))
    with db.engine.begin() as c:
        n = _write(db, c, job_id, batch)
        c.execute(beat, {"jid": job_id, "hb": now()})
    return n


def warm_up(db: Database, job_id: int) -> None:
    """Build and compile the statements :func:`append` uses, in a transaction rolled back.

    SQLAlchemy compiles a statement the first time it runs it (once for one row, once for
    several): for a streaming profile that is its first write with data, a one-off 10-20 ms
    that the pacing would take for the cost of every cycle and answer with a wait of seconds.
    Done before the job starts, the first write costs what the others do. Stores nothing."""
    with db.engine.connect() as c:
        t = c.begin()
        try:
            for n in (1, 2):                      # one row per table, then two (executemany)
                for step in (0, 1):               # a file seen first, then followed
                    b = Batch()
                    for r in range(n):
                        b.traffic[("mpi", r, r, r + 1, "p2p", "warm-up", "host", None)] = [1, 1]
                        b.ops[(r, "mpi", "warm-up")] = [1, 1, 1, [1]]
                        b.ranks[(r, "mpi")] = dict(host="", pid=0, start_ns=0, elapsed_ns=0, comm_ns=0,
                                                   finalized=False, problems=[])
                        b.timeline[("mpi", r, "p2p", 0)] = 1
                        b.file(f"warm-up-{n}-{r}", None if step == 0 else 1, 1 + step, {})
                    b.newest_bucket = 3 * TIMELINE_SLOTS     # far enough for a merge of older slots
                    _write(db, c, job_id, b)
        finally:
            t.rollback()


def ingest(db: Database, job_id: int, records: Iterable[RankCounts], *, timeline: bool = True) -> int:
    """Store the current *totals* of each rank record, replacing what that rank had stored.

    For callers that hold totals rather than deltas: a source whose rows are derived from all
    its files at once (NCCL's pair model), CUDA activity (:class:`CudaCounts`), a synthetic job,
    tests. ``timeline=False`` leaves the ranks' timeline alone (appended separately). Returns the
    number of records stored.
    """
    records = list(records)
    batch = Batch()
    for rec in records:
        batch.add(rec, timeline=timeline)
    with db.engine.begin() as c:
        for rank, source in batch.ranks:
            _forget(c, job_id, source, [rank], timeline=timeline)
        _write(db, c, job_id, batch)
        for rec in records:
            if str(rec.source) == "cuda":          # CUDA activity: its own tables, replaced too
                rank = int(rec.world_rank)
                for table, rows in _cuda_rows(job_id, rank, cast(CudaCounts, rec)).items():
                    c.execute(table.delete().where(table.c.job == job_id, table.c.rank == rank))
                    if rows:
                        c.execute(table.insert(), rows)
    return len(records)


def forget_ranks(db: Database, job_id: int, source: str, ranks: Sequence[int]) -> None:
    """Drop what ``ranks`` of ``source`` stored (a source whose ranks are derived at ingest, NCCL's,
    may renumber its files while a job runs)."""
    with db.engine.begin() as c:
        _forget(c, job_id, source, [int(r) for r in ranks], timeline=True)


def add_link_samples(db: Database, job_id: int, samples: Iterable[LinkCounts]) -> None:
    """Link counter samples of the link sampler (``counters/sampler.py``), appended as they are."""
    rows = [dict(job=job_id, t_ns=int(s["t_ns"]), device=int(s["device"]), link=str(s["link"]),
                 tx_bytes=s.get("tx_bytes"), rx_bytes=s.get("rx_bytes")) for s in samples]
    if rows:
        with db.engine.begin() as c:
            c.execute(S.link_samples.insert(), rows)


# ------------------------------------------------------------------------------ the writes
def _forget(c: Any, job_id: int, source: str, ranks: list[int], *, timeline: bool) -> None:
    tables = [(S.ranks, S.ranks.c.world_rank), (S.traffic, S.traffic.c.reporter), (S.op_stats, S.op_stats.c.rank),
              (S.pvars, S.pvars.c.rank)]
    if timeline:
        tables.append((S.timeline, S.timeline.c.src))
    for t, col in tables:
        c.execute(t.delete().where(t.c.job == job_id, t.c.source == source, col.in_(ranks)))


def _write(db: Database, c: Any, job_id: int, b: Batch) -> int:
    f = S.ingest_files
    if b.files:
        have = dict(c.execute(db.statement(("files",), lambda: sa.select(f.c.name, f.c.done_bytes).where(
            f.c.job == sa.bindparam("job"), f.c.name.in_(sa.bindparam("names", expanding=True)))),
            {"job": job_id, "names": list(b.files)}).all())
        new: list[dict] = []
        old: list[dict] = []
        for name, (before, after, state) in b.files.items():
            if have.get(name) != before:
                raise RankmapError(f"record file {name} of job {job_id} was stored by another process meanwhile "
                                   f"(it is at byte {have.get(name)}, this ingest read from byte {before}): "
                                   f"stop one of them")
            (new if name not in have else old).append(dict(job=job_id, name=name, done_bytes=after, state=state))
        if new:
            c.execute(db.statement(("files insert",), f.insert), new)
        if old:
            c.execute(db.statement(("files update",), lambda: f.update().where(
                f.c.job == sa.bindparam("j"), f.c.name == sa.bindparam("n"))
                      .values(done_bytes=sa.bindparam("d"), state=sa.bindparam("s"))),
                      [dict(j=r["job"], n=r["name"], d=r["done_bytes"], s=r["state"]) for r in old])
    rows = 0
    if b.traffic:
        rows += _upsert_raw(db, c, S.traffic, ["job", "source", "reporter", "src", "dst", "class", "operation",
                                               "mem", "pair_source", "bytes", "messages"],
                            [(job_id, *k, v[0], v[1]) for k, v in b.traffic.items()], 9,
                            add=["bytes", "messages"])
    if b.ops:
        o = S.op_stats
        ranks = sorted({k[0] for k in b.ops})
        old_ops = {(r, src, op): (calls, ns, pay, hist) for r, src, op, calls, ns, pay, hist in c.execute(
            db.statement(("ops",), lambda: sa.select(o.c.rank, o.c.source, o.c.operation, o.c.calls, o.c.ns,
                                                      o.c.payload, o.c.histogram)
                         .where(o.c.job == sa.bindparam("job"), o.c.rank.in_(sa.bindparam("ranks", expanding=True)))),
            {"job": job_id, "ranks": ranks})}
        out = []
        for k, (calls, ns, pay, hist) in b.ops.items():
            c0, n0, p0, h0 = old_ops.get(k, (0, 0, 0, []))
            out.append(dict(job=job_id, rank=k[0], source=k[1], operation=k[2], calls=c0 + calls, ns=n0 + ns,
                            payload=(p0 or 0) + pay, histogram=add_histograms(h0 or [], hist)))
        rows += _upsert(db, c, o, out, ["job", "rank", "source", "operation"],
                        replace=["calls", "ns", "payload", "histogram"])
    if b.ranks:
        rows += _upsert(db, c, S.ranks, [dict(job=job_id, world_rank=r, source=src, **v)
                                         for (r, src), v in b.ranks.items()],
                        ["job", "world_rank", "source"], add=["comm_ns"],
                        replace=["host", "pid", "start_ns", "elapsed_ns", "finalized", "problems"])
    if b.timeline:
        rows += _append_timeline(db, c, job_id, b)
    if b.pvars:
        c.execute(db.statement(("pvars insert",), S.pvars.insert), [dict(job=job_id, **r) for r in b.pvars])
        rows += len(b.pvars)
    return rows


def _upsert(db: Database, c: Any, table: sa.Table, rows: list[dict], keys: list[str], *,
            add: Sequence[str] = (), replace: Sequence[str] = ()) -> int:
    """INSERT ... ON CONFLICT (keys) DO UPDATE: ``add`` columns summed, ``replace`` ones overwritten."""
    if not rows:
        return 0

    def build() -> Any:
        if db.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        stmt = insert(table)
        ex = stmt.excluded
        sets = {k: table.c[k] + ex[k] for k in add}
        sets.update({k: ex[k] for k in replace})
        return stmt.on_conflict_do_update(index_elements=[table.c[k] for k in keys], set_=sets)

    c.execute(db.statement(("upsert", table.name, tuple(keys), tuple(add), tuple(replace)), build), rows)
    return len(rows)


def _upsert_raw(db: Database, c: Any, table: sa.Table, cols: list[str], rows: list[tuple], nkeys: int, *,
                add: Sequence[str]) -> int:
    """:func:`_upsert` for plain columns (no JSON), straight to the driver's executemany: the hot
    path of a streaming ingest (thousands of counters a second), where SQLAlchemy's per-row
    parameter processing would cost more than the database."""
    if not rows:
        return 0

    def build() -> str:
        q = db.engine.dialect.identifier_preparer.quote
        ph = "?" if db.engine.dialect.paramstyle == "qmark" else "%s"
        name = q(table.name)
        sets = ", ".join(f"{q(k)} = {name}.{q(k)} + excluded.{q(k)}" for k in add)
        return (f"INSERT INTO {name} ({', '.join(q(k) for k in cols)}) VALUES ({', '.join([ph] * len(cols))}) "
                f"ON CONFLICT ({', '.join(q(k) for k in cols[:nkeys])}) DO UPDATE SET {sets}")

    c.exec_driver_sql(db.statement(("raw upsert", table.name, tuple(cols), nkeys, tuple(add)), build), rows)
    return len(rows)


def _append_timeline(db: Database, c: Any, job_id: int, b: Batch) -> int:
    """New timeline counters into their slots, then older slots merged into wider ones."""
    t = S.timeline
    newest = max(b.newest_bucket, c.execute(db.statement(("newest",), lambda: sa.select(sa.func.max(t.c.bucket))
                                                         .where(t.c.job == sa.bindparam("job"), t.c.width == 1)),
                                            {"job": job_id}).scalar() or 0)
    slots: dict[tuple, int] = {}
    for (source, src, klass, bucket), v in b.timeline.items():
        w, start = timeline_slot(bucket, newest)
        k = (source, src, klass, w, start)
        slots[k] = slots.get(k, 0) + v
    n = _upsert_raw(db, c, t, ["job", "width", "bucket", "source", "src", "class", "bytes"],
                    [(job_id, w, st, s, r, k, v) for (s, r, k, w, st), v in slots.items()], 6, add=["bytes"])
    level = 0
    while True:
        edge = level_threshold(level + 1, newest)
        if edge <= 0:
            break
        w, w2 = 1 << level, 1 << (level + 1)
        c.execute(db.statement(("merge",), lambda: sa.text(
            "INSERT INTO timeline (job, source, src, class, width, bucket, bytes) "
            "SELECT job, source, src, class, :w2, (bucket / :w2) * :w2, SUM(bytes) FROM timeline "
            "WHERE job = :j AND width = :w AND bucket < :edge "
            "GROUP BY job, source, src, class, (bucket / :w2) * :w2 "
            "ON CONFLICT (job, width, bucket, source, src, class) DO UPDATE SET bytes = timeline.bytes + excluded.bytes")),
            dict(j=job_id, w=w, w2=w2, edge=edge))
        c.execute(db.statement(("merged",), lambda: t.delete().where(
            t.c.job == sa.bindparam("j"), t.c.width == sa.bindparam("w"), t.c.bucket < sa.bindparam("edge"))),
            dict(j=job_id, w=w, edge=edge))
        level += 1
    return n


def _cuda_rows(job_id: int, rank: int, rec: CudaCounts) -> dict[sa.Table, list[dict]]:
    """The CUDA activity tables' rows of one rank's cuda record."""
    meta = dict(rec.meta)
    devices = {k.rsplit(".", 1)[1]: v for k, v in meta.items() if k.startswith("cuda.device.")}
    return {
        S.cuda_copies: [dict(job=job_id, rank=rank, kind=k, src_mem=sm, dst_mem=dm, src_dev=int(sd), dst_dev=int(dd),
                             count=int(n), bytes=int(b), ns=int(ns))
                        for k, sm, dm, sd, dd, n, b, ns in rec.cuda_copies],
        S.cuda_kernels: [dict(job=job_id, rank=rank, device=int(d), name=str(name), count=int(n), ns=int(ns))
                         for d, name, n, ns in rec.cuda_kernels],
        S.cuda_timeline: [dict(job=job_id, rank=rank, bucket=int(b), what=w, count=int(n), bytes=int(by), ns=int(ns))
                          for b, w, n, by, ns in rec.cuda_timeline],
        S.cuda_ranks: [dict(job=job_id, rank=rank, activity=meta.get("cuda.activity"), devices=devices,
                            records=meta.get("cuda.records"))],
    }
