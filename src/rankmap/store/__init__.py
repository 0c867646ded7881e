"""rankmap's store: jobs, their traffic and the mappings made from them, in SQLite or PostgreSQL.

One :class:`Store` over one SQLAlchemy engine. The default is a SQLite file under
``${RANKMAP_HOME:-~/.rankmap}``; ``RANKMAP_DB`` or an explicit URL points it elsewhere, e.g.
``postgresql+psycopg://user@host/db`` so a team shares one database. The store never
imports the capture layer: :meth:`Store.append` and :meth:`Store.ingest` take any objects shaped
like the record reader's ``RankRecord``.

Writes are append-only (:meth:`Store.append`): counters are added into rows keyed by what they
count, and how far each record file was read is kept in the same transaction, so a write costs
what changed and an interrupted ingest resumes exactly. A store that cannot be reached (or stays
locked) raises :class:`StoreUnavailable`, which callers that must go on (a running job) catch.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from rankmap.errors import RankmapError
from rankmap.store import migrate
from rankmap.store import schema as S
from rankmap.store.batch import TIMELINE_SLOTS, Batch, add_histograms, level_threshold
from rankmap.home import default_url, rankmap_home  # noqa: F401  (re-exported)
from rankmap.home import normalise_url as _normalise_url

__all__ = ["Store", "StoreUnavailable", "Batch", "open_store", "default_url", "command_key", "rankmap_home"]

#: a job whose profiler runs on another host and has not written for this long is no longer running
STALE_S = 600
#: how long a write waits for a SQLite file another process holds locked before the store counts as
#: unavailable (a profile then keeps the batch and retries; see pipeline/profile.py)
SQLITE_BUSY_S = 30.0


class StoreUnavailable(RankmapError):
    """The database cannot be reached, or stays locked: the data is not lost, only not stored yet."""

    exit_code = 3


def _outage(e: BaseException, url: str) -> StoreUnavailable:
    msg = str(getattr(e, "orig", None) or e).strip().splitlines()
    return StoreUnavailable(f"the store {url} is unreachable: {msg[0] if msg else type(e).__name__}")


def process_id(pid: int | None = None) -> str:
    """``"host pid start"``: a process, told apart from a later one that reuses its pid."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()} {pid} {_start_ticks(pid)}"


def _start_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def process_alive(ident: str | None) -> bool | None:
    """Whether the process ``ident`` (:func:`process_id`) runs; None when it is on another host."""
    try:
        host, pid, start = (ident or "").split()
    except ValueError:
        return None
    if host != socket.gethostname():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _start_ticks(int(pid)) == int(start)


def shown_url(url: str | None = None) -> str:
    """``url`` (default: the default store) as :attr:`Store.url` shows it, to tell stores apart."""
    return make_url(_normalise_url(url or default_url())).render_as_string(hide_password=True)


def command_key(argv: Sequence[str]) -> str:
    """The launch command, normalised so that the same job launched twice gets the same key.

    The launcher is named by the real path of its executable and every argument that names an
    existing file becomes an absolute real path, so ``mpirun ./a.out`` run from the same place
    and ``/usr/bin/mpirun /abs/a.out`` agree. Everything else is kept verbatim.
    """
    out: list[str] = []
    for i, a in enumerate(argv):
        if i == 0:
            exe = shutil.which(a)
            out.append(os.path.realpath(exe) if exe else a)
        elif not a.startswith("-") and os.path.exists(a):
            out.append(os.path.realpath(a))
        else:
            out.append(a)
    return shlex.join(out)


def _iso(t: datetime | None) -> str | None:
    if t is None:
        return None
    if t.tzinfo is None:  # SQLite hands back naive datetimes; rankmap writes UTC
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Store:
    """Queries and writes over the rankmap schema; cheap to create, one per process is plenty."""

    def __init__(self, engine: Engine, ready: bool = True):
        self.engine = engine
        self.url = engine.url.render_as_string(hide_password=True)
        self.ready = ready          # the schema was checked (see open_store(lazy=True))
        self._stmts: dict[tuple, Any] = {}   # the statements of an ingest write, built once (see _stmt)

    def ensure_schema(self) -> None:
        """For a store opened while it was away: check (and create) the schema once it answers."""
        if not self.ready:
            with self._guard():
                _create_schema(self.engine)
            self.ready = True

    # ---------------------------------------------------------------- jobs
    def create_job(self, command: Sequence[str] | str, *, launcher: str = "plain",
                   world_size: int | None = None, run_dir: str | os.PathLike | None = None,
                   key: str | None = None, hosts: Sequence[str] | None = None,
                   meta: dict | None = None, run_uid: str | None = None, profiler: str | None = None) -> int:
        """Record a job about to be launched (state ``running``); returns its id.

        ``profiler`` (:func:`process_id`) names the process that will stream the job's records: once
        it is gone the job no longer counts as running, whatever was stored."""
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        with self._guard(), self.engine.begin() as c:
            r = c.execute(S.jobs.insert().values(
                created=_now(), command=shlex.join(argv), command_key=key or command_key(argv),
                launcher=launcher, world_size=world_size, hosts=list(hosts) if hosts else None,
                run_dir=str(run_dir) if run_dir is not None else None, meta=meta or {}, state="running",
                run_uid=run_uid, profiler=profiler, heartbeat=_now() if profiler else None))
            return int(r.inserted_primary_key[0])

    def finish_job(self, job_id: int, *, exit_status: int | None, elapsed_ns: int | None = None,
                   world_size: int | None = None, meta: dict | None = None, state: str | None = None,
                   ended: datetime | None = None) -> None:
        """Record how the job ended; ``meta`` is merged into what the job already has. ``state``
        defaults to what the exit status says (:func:`rankmap.store.schema.ended_state`)."""
        state = state or S.ended_state(exit_status)
        if state not in S.JOB_STATES:
            raise ValueError(state)
        with self._guard(), self.engine.begin() as c:
            old = c.execute(sa.select(S.jobs.c.meta).where(S.jobs.c.id == job_id)).scalar_one_or_none()
            merged = dict(old or {})
            merged.update(meta or {})
            hosts = sorted({h for (h,) in c.execute(
                sa.select(S.ranks.c.host).where(S.ranks.c.job == job_id).distinct()) if h})
            values: dict[str, Any] = dict(ended=ended or _now(), exit_status=exit_status, elapsed_ns=elapsed_ns,
                                          meta=merged, state=state, profiler=None)
            if hosts:
                values["hosts"] = hosts
            if world_size is not None:
                values["world_size"] = world_size
            c.execute(S.jobs.update().where(S.jobs.c.id == job_id).values(**values))

    def update_job_meta(self, job_id: int, meta: dict) -> None:
        """Merge ``meta`` into a job's meta while it runs (what a running job learns about itself)."""
        with self._guard(), self.engine.begin() as c:
            old = c.execute(sa.select(S.jobs.c.meta).where(S.jobs.c.id == job_id)).scalar_one_or_none()
            c.execute(S.jobs.update().where(S.jobs.c.id == job_id).values(meta={**(old or {}), **meta}))

    def no_jobs_text(self) -> str:
        """What a verb says of a store with no job: an error for one that needs a job, the answer of ``jobs``."""
        return f"no jobs in {self.url} yet: run `rankmap profile -- <command>` first"

    def resolve_job(self, spec: str | int) -> int:
        """``'latest'`` or a job id -> a job id that exists."""
        with self._guard(), self.engine.connect() as c:
            if str(spec) == "latest":
                jid = c.execute(sa.select(sa.func.max(S.jobs.c.id))).scalar()
                if jid is None:
                    raise RankmapError(self.no_jobs_text())
                return int(jid)
            try:
                jid = int(spec)
            except ValueError:
                raise RankmapError(f"unknown job {spec!r}: give a job id or 'latest'") from None
            if not 1 <= jid <= S.MAX_ROW_ID or \
                    c.execute(sa.select(S.jobs.c.id).where(S.jobs.c.id == jid)).scalar() is None:
                raise RankmapError(f"unknown job {spec!r} in {self.url}")
            return jid

    @staticmethod
    def _state(row: Any) -> str:
        """The job's state as stored, except that a job whose profiler is gone is no longer running."""
        if row["state"] != "running" or not row["profiler"]:
            return row["state"]
        alive = process_alive(row["profiler"])
        if alive is False:
            return "incomplete"
        hb = row["heartbeat"]
        if alive is None and hb is not None:
            hb = hb if hb.tzinfo else hb.replace(tzinfo=timezone.utc)
            if (_now() - hb).total_seconds() > STALE_S:
                return "incomplete"
        return "running"

    def job(self, job_id: int) -> dict:
        with self._guard(), self.engine.connect() as c:
            row = c.execute(sa.select(S.jobs).where(S.jobs.c.id == job_id)).mappings().first()
            if row is None:
                raise RankmapError(f"unknown job {job_id!r} in {self.url}")
            d = dict(row)
            if not d.get("hosts"):
                d["hosts"] = sorted({h for (h,) in c.execute(
                    sa.select(S.ranks.c.host).where(S.ranks.c.job == job_id).distinct()) if h})
        d["state"] = self._state(d)
        d["created"], d["ended"], d["heartbeat"] = _iso(d["created"]), _iso(d["ended"]), _iso(d["heartbeat"])
        return d

    def jobs(self, limit: int = 50) -> list[dict]:
        """The most recent jobs first."""
        with self._guard(), self.engine.connect() as c:
            ids = c.execute(sa.select(S.jobs.c.id).order_by(S.jobs.c.id.desc()).limit(limit)).scalars().all()
        return [self.job(i) for i in ids]

    def job_list(self, limit: int = 50) -> list[dict]:
        """One line per job, newest first: id, state, command, ranks, bytes, start, duration (``rankmap jobs``)."""
        j, r, t = S.jobs, S.ranks, S.traffic
        nranks = (sa.select(sa.func.count(sa.distinct(r.c.world_rank))).where(r.c.job == j.c.id)
                  .scalar_subquery())
        nbytes = sa.select(sa.func.coalesce(sa.func.sum(t.c.bytes), 0)).where(t.c.job == j.c.id).scalar_subquery()
        q = (sa.select(j.c.id, j.c.state, j.c.profiler, j.c.heartbeat, j.c.command, j.c.world_size, j.c.created,
                       j.c.elapsed_ns, j.c.exit_status, j.c.run_dir, nranks.label("ranks"), nbytes.label("bytes"))
             .order_by(j.c.id.desc()).limit(limit))
        with self._guard(), self.engine.connect() as c:
            rows = c.execute(q).mappings().all()
        out = []
        for row in rows:
            state = self._state(row)
            created = row["created"] if row["created"].tzinfo else row["created"].replace(tzinfo=timezone.utc)
            dur = row["elapsed_ns"] / 1e9 if row["elapsed_ns"] is not None else (
                (_now() - created).total_seconds() if state == "running" else None)
            out.append({"id": row["id"], "state": state, "command": row["command"], "ranks": int(row["ranks"] or 0),
                        "world_size": row["world_size"], "bytes": int(row["bytes"] or 0), "start": _iso(created),
                        "duration_s": None if dur is None else round(dur, 3), "exit_status": row["exit_status"],
                        "run_dir": row["run_dir"]})
        return out

    def settle_jobs(self) -> list[int]:
        """Store ``incomplete`` for every job still marked running whose profiler is gone; their ids."""
        with self._guard(), self.engine.begin() as c:
            rows = c.execute(sa.select(S.jobs.c.id, S.jobs.c.state, S.jobs.c.profiler, S.jobs.c.heartbeat)
                             .where(S.jobs.c.state == "running")).mappings().all()
            gone = [r["id"] for r in rows if self._state(r) == "incomplete"]
            if gone:
                c.execute(S.jobs.update().where(S.jobs.c.id.in_(gone), S.jobs.c.state == "running")
                          .values(state="incomplete"))
        return gone

    def job_by_run(self, run_uid: str) -> int | None:
        """The job whose run directory has this id (its ``job.json``), if stored."""
        with self._guard(), self.engine.connect() as c:
            return c.execute(sa.select(sa.func.max(S.jobs.c.id)).where(S.jobs.c.run_uid == run_uid)).scalar()

    def find_job(self, key: str, world_size: int | None) -> int | None:
        """The latest successful profile of the same command and size that recorded something."""
        has_ranks = sa.exists().where(S.ranks.c.job == S.jobs.c.id)
        q = (sa.select(S.jobs.c.id).where(S.jobs.c.command_key == key, S.jobs.c.exit_status == 0, has_ranks)
             .order_by(S.jobs.c.id.desc()).limit(1))
        q = q.where(S.jobs.c.world_size.is_(None) if world_size is None else S.jobs.c.world_size == world_size)
        with self._guard(), self.engine.connect() as c:
            return c.execute(q).scalar()

    # -------------------------------------------------------------- ingest
    @contextmanager
    def _guard(self):
        """Database errors that mean "not reachable now" (a server down, a file locked) become
        :class:`StoreUnavailable`; anything else is a bug and propagates as it is."""
        try:
            yield
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as e:
            raise _outage(e, self.url) from None
        except sa.exc.DBAPIError as e:
            if e.connection_invalidated:
                raise _outage(e, self.url) from None
            raise

    def file_states(self, job_id: int) -> dict[str, tuple[int, dict]]:
        """How far each record file of the job was stored: name -> (bytes, reader state)."""
        t = S.ingest_files
        with self._guard(), self.engine.connect() as c:
            return {n: (int(o), dict(st)) for n, o, st in
                    c.execute(sa.select(t.c.name, t.c.done_bytes, t.c.state).where(t.c.job == job_id))}

    def append(self, job_id: int, batch: Batch) -> int:
        """Add a batch of counters to the job, with the file positions it reaches, in one transaction.

        Each file's stored position must still be where the batch started reading it: a second
        process ingesting the same files fails here instead of counting their blocks twice.
        Returns the rows written. Also the profiler's heartbeat (see :meth:`job`).
        """
        beat = self._stmt(("heartbeat",), lambda: S.jobs.update().where(
            S.jobs.c.id == sa.bindparam("jid"), S.jobs.c.profiler.is_not(None)).values(heartbeat=sa.bindparam("hb")))
        with self._guard(), self.engine.begin() as c:
            n = self._write(c, job_id, batch)
            c.execute(beat, {"jid": job_id, "hb": _now()})
        return n

    def warm_up(self, job_id: int) -> None:
        """Build and compile the statements :meth:`append` uses, in a transaction rolled back.

        SQLAlchemy compiles a statement the first time it runs it (once for one row, once for
        several): for a streaming profile that is its first write with data, a one-off 10-20 ms
        that the pacing would take for the cost of every cycle and answer with a wait of seconds.
        Done before the job starts, the first write costs what the others do. Stores nothing."""
        with self._guard(), self.engine.connect() as c:
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
                        self._write(c, job_id, b)
            finally:
                t.rollback()

    def ingest(self, job_id: int, records: Iterable[Any], *, timeline: bool = True) -> int:
        """Store the current *totals* of each rank record, replacing what that rank had stored.

        For callers that hold totals rather than deltas: a source whose rows are derived from all
        its files at once (NCCL's pair model), a synthetic job, tests. ``timeline=False`` leaves the
        ranks' timeline alone (appended separately). Returns the number of records stored.
        """
        records = list(records)
        batch = Batch()
        for rec in records:
            batch.add(rec, timeline=timeline)
        with self._guard(), self.engine.begin() as c:
            for rank, source in batch.ranks:
                self._forget(c, job_id, source, [rank], timeline=timeline)
            self._write(c, job_id, batch)
            for rec in records:
                if str(rec.source) == "cuda":          # CUDA activity: its own tables, replaced too
                    rank = int(rec.world_rank)
                    for table, rows in _cuda_rows(job_id, rank, rec).items():
                        c.execute(table.delete().where(table.c.job == job_id, table.c.rank == rank))
                        if rows:
                            c.execute(table.insert(), rows)
        return len(records)

    def forget_ranks(self, job_id: int, source: str, ranks: Sequence[int]) -> None:
        """Drop what ``ranks`` of ``source`` stored (a source whose ranks are derived at ingest, NCCL's,
        may renumber its files while a job runs)."""
        with self._guard(), self.engine.begin() as c:
            self._forget(c, job_id, source, [int(r) for r in ranks], timeline=True)

    @staticmethod
    def _forget(c: Any, job_id: int, source: str, ranks: list[int], *, timeline: bool) -> None:
        tables = [(S.ranks, S.ranks.c.world_rank), (S.traffic, S.traffic.c.reporter), (S.op_stats, S.op_stats.c.rank),
                  (S.pvars, S.pvars.c.rank)]
        if timeline:
            tables.append((S.timeline, S.timeline.c.src))
        for t, col in tables:
            c.execute(t.delete().where(t.c.job == job_id, t.c.source == source, col.in_(ranks)))

    def _write(self, c: Any, job_id: int, b: Batch) -> int:
        f = S.ingest_files
        if b.files:
            have = dict(c.execute(self._stmt(("files",), lambda: sa.select(f.c.name, f.c.done_bytes).where(
                f.c.job == sa.bindparam("job"), f.c.name.in_(sa.bindparam("names", expanding=True)))),
                {"job": job_id, "names": list(b.files)}).all())
            new, old = [], []
            for name, (before, after, state) in b.files.items():
                if have.get(name) != before:
                    raise RankmapError(f"record file {name} of job {job_id} was stored by another process meanwhile "
                                       f"(it is at byte {have.get(name)}, this ingest read from byte {before}): "
                                       f"stop one of them")
                (new if name not in have else old).append(dict(job=job_id, name=name, done_bytes=after, state=state))
            if new:
                c.execute(self._stmt(("files insert",), f.insert), new)
            if old:
                c.execute(self._stmt(("files update",), lambda: f.update().where(
                    f.c.job == sa.bindparam("j"), f.c.name == sa.bindparam("n"))
                          .values(done_bytes=sa.bindparam("d"), state=sa.bindparam("s"))),
                          [dict(j=r["job"], n=r["name"], d=r["done_bytes"], s=r["state"]) for r in old])
        rows = 0
        if b.traffic:
            rows += self._upsert_raw(c, S.traffic, ["job", "source", "reporter", "src", "dst", "class", "operation",
                                                    "mem", "pair_source", "bytes", "messages"],
                                     [(job_id, *k, v[0], v[1]) for k, v in b.traffic.items()], 9,
                                     add=["bytes", "messages"])
        if b.ops:
            o = S.op_stats
            ranks = sorted({k[0] for k in b.ops})
            old = {(r, src, op): (calls, ns, pay, hist) for r, src, op, calls, ns, pay, hist in c.execute(
                self._stmt(("ops",), lambda: sa.select(o.c.rank, o.c.source, o.c.operation, o.c.calls, o.c.ns,
                                                        o.c.payload, o.c.histogram)
                           .where(o.c.job == sa.bindparam("job"), o.c.rank.in_(sa.bindparam("ranks", expanding=True)))),
                {"job": job_id, "ranks": ranks})}
            out = []
            for k, (calls, ns, pay, hist) in b.ops.items():
                c0, n0, p0, h0 = old.get(k, (0, 0, 0, []))
                out.append(dict(job=job_id, rank=k[0], source=k[1], operation=k[2], calls=c0 + calls, ns=n0 + ns,
                                payload=(p0 or 0) + pay, histogram=add_histograms(h0 or [], hist)))
            rows += self._upsert(c, o, out, ["job", "rank", "source", "operation"],
                                 replace=["calls", "ns", "payload", "histogram"])
        if b.ranks:
            rows += self._upsert(c, S.ranks, [dict(job=job_id, world_rank=r, source=src, **v)
                                              for (r, src), v in b.ranks.items()],
                                 ["job", "world_rank", "source"], add=["comm_ns"],
                                 replace=["host", "pid", "start_ns", "elapsed_ns", "finalized", "problems"])
        if b.timeline:
            rows += self._append_timeline(c, job_id, b)
        if b.pvars:
            c.execute(self._stmt(("pvars insert",), S.pvars.insert), [dict(job=job_id, **r) for r in b.pvars])
            rows += len(b.pvars)
        return rows

    def _stmt(self, key: tuple, build: Callable[[], Any]) -> Any:
        """The statement ``key`` names, built by ``build`` the first time only.

        A streaming ingest writes every second with the same few statements; building each anew
        (its clauses, an upsert's ``excluded`` columns) and having SQLAlchemy derive its cache key
        from scratch cost more CPU than the database's work for a small job."""
        st = self._stmts.get(key)
        if st is None:
            st = self._stmts[key] = build()
        return st

    def _upsert(self, c: Any, table: sa.Table, rows: list[dict], keys: list[str], *,
                add: Sequence[str] = (), replace: Sequence[str] = ()) -> int:
        """INSERT ... ON CONFLICT (keys) DO UPDATE: ``add`` columns summed, ``replace`` ones overwritten."""
        if not rows:
            return 0

        def build() -> Any:
            if self.engine.dialect.name == "postgresql":
                from sqlalchemy.dialects.postgresql import insert
            else:
                from sqlalchemy.dialects.sqlite import insert
            stmt = insert(table)
            ex = stmt.excluded
            sets = {k: table.c[k] + ex[k] for k in add}
            sets.update({k: ex[k] for k in replace})
            return stmt.on_conflict_do_update(index_elements=[table.c[k] for k in keys], set_=sets)

        c.execute(self._stmt(("upsert", table.name, tuple(keys), tuple(add), tuple(replace)), build), rows)
        return len(rows)

    def _upsert_raw(self, c: Any, table: sa.Table, cols: list[str], rows: list[tuple], nkeys: int, *,
                    add: Sequence[str]) -> int:
        """:meth:`_upsert` for plain columns (no JSON), straight to the driver's executemany: the hot
        path of a streaming ingest (thousands of counters a second), where SQLAlchemy's per-row
        parameter processing would cost more than the database."""
        if not rows:
            return 0

        def build() -> str:
            q = self.engine.dialect.identifier_preparer.quote
            ph = "?" if self.engine.dialect.paramstyle == "qmark" else "%s"
            name = q(table.name)
            sets = ", ".join(f"{q(k)} = {name}.{q(k)} + excluded.{q(k)}" for k in add)
            return (f"INSERT INTO {name} ({', '.join(q(k) for k in cols)}) VALUES ({', '.join([ph] * len(cols))}) "
                    f"ON CONFLICT ({', '.join(q(k) for k in cols[:nkeys])}) DO UPDATE SET {sets}")

        c.exec_driver_sql(self._stmt(("raw upsert", table.name, tuple(cols), nkeys, tuple(add)), build), rows)
        return len(rows)

    def _append_timeline(self, c: Any, job_id: int, b: Batch) -> int:
        """New timeline counters into their slots, then older slots merged into wider ones."""
        from rankmap.store.batch import timeline_slot

        t = S.timeline
        newest = max(b.newest_bucket, c.execute(self._stmt(("newest",), lambda: sa.select(sa.func.max(t.c.bucket))
                                                .where(t.c.job == sa.bindparam("job"), t.c.width == 1)),
                                                {"job": job_id}).scalar() or 0)
        slots: dict[tuple, int] = {}
        for (source, src, klass, bucket), v in b.timeline.items():
            w, start = timeline_slot(bucket, newest)
            k = (source, src, klass, w, start)
            slots[k] = slots.get(k, 0) + v
        n = self._upsert_raw(c, t, ["job", "width", "bucket", "source", "src", "class", "bytes"],
                             [(job_id, w, st, s, r, k, v) for (s, r, k, w, st), v in slots.items()], 6, add=["bytes"])
        level = 0
        while True:
            edge = level_threshold(level + 1, newest)
            if edge <= 0:
                break
            w, w2 = 1 << level, 1 << (level + 1)
            c.execute(self._stmt(("merge",), lambda: sa.text(
                "INSERT INTO timeline (job, source, src, class, width, bucket, bytes) "
                "SELECT job, source, src, class, :w2, (bucket / :w2) * :w2, SUM(bytes) FROM timeline "
                "WHERE job = :j AND width = :w AND bucket < :edge "
                "GROUP BY job, source, src, class, (bucket / :w2) * :w2 "
                "ON CONFLICT (job, width, bucket, source, src, class) DO UPDATE SET bytes = timeline.bytes + excluded.bytes")),
                dict(j=job_id, w=w, w2=w2, edge=edge))
            c.execute(self._stmt(("merged",), lambda: t.delete().where(
                t.c.job == sa.bindparam("j"), t.c.width == sa.bindparam("w"), t.c.bucket < sa.bindparam("edge"))),
                dict(j=job_id, w=w, edge=edge))
            level += 1
        return n

    def cuda_activity(self, job_id: int) -> dict[str, list[dict]]:
        """The job's CUDA activity rows: ``copies``, ``kernels``, ``timeline`` and ``ranks``."""
        out: dict[str, list[dict]] = {}
        with self._guard(), self.engine.connect() as c:
            for key, t, order in (("copies", S.cuda_copies, ("rank", "kind", "src_dev", "dst_dev", "src_mem", "dst_mem")),
                                  ("kernels", S.cuda_kernels, ("rank", "device", "name")),
                                  ("timeline", S.cuda_timeline, ("bucket", "rank", "what")),
                                  ("ranks", S.cuda_ranks, ("rank",))):
                rows = c.execute(sa.select(t).where(t.c.job == job_id).order_by(*[t.c[k] for k in order])).mappings()
                out[key] = [{k: v for k, v in r.items() if k != "job"} for r in rows]
        return out

    def add_link_samples(self, job_id: int, samples: Iterable[dict]) -> None:
        """Link counter samples: dicts with t_ns, device, link, tx_bytes, rx_bytes."""
        rows = [dict(job=job_id, t_ns=int(s["t_ns"]), device=int(s["device"]), link=str(s["link"]),
                     tx_bytes=s.get("tx_bytes"), rx_bytes=s.get("rx_bytes")) for s in samples]
        if rows:
            with self._guard(), self.engine.begin() as c:
                c.execute(S.link_samples.insert(), rows)

    # ------------------------------------------------------------- queries
    def ranks(self, job_id: int) -> list[dict]:
        with self._guard(), self.engine.connect() as c:
            rows = c.execute(sa.select(S.ranks).where(S.ranks.c.job == job_id)
                             .order_by(S.ranks.c.world_rank, S.ranks.c.source)).mappings().all()
        return [{k: v for k, v in r.items() if k != "job"} for r in rows]

    def traffic(self, job_id: int, classes: Sequence[str] | None = None, *, by_mem: bool = False,
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
        with self._guard(), self.engine.connect() as c:
            return [dict(r, bytes=int(r["bytes"]), messages=int(r["messages"])) for r in c.execute(q).mappings()]

    def world_size(self, job_id: int) -> int:
        """The job's size as launched, or as seen in its records when the command did not say."""
        with self._guard(), self.engine.connect() as c:
            ws = c.execute(sa.select(S.jobs.c.world_size).where(S.jobs.c.id == job_id)).scalar()
            seen = c.execute(sa.select(sa.func.max(S.ranks.c.world_rank)).where(S.ranks.c.job == job_id)).scalar()
            hi = c.execute(sa.select(sa.func.max(S.traffic.c.src), sa.func.max(S.traffic.c.dst))
                           .where(S.traffic.c.job == job_id)).first()
        n = max([x + 1 for x in (seen, *(hi or ())) if x is not None] + [0])
        return max(ws or 0, n)

    def last_seen_ns(self, job_id: int) -> int | None:
        """Wall-clock ns of the job's last sign of life in the store: its ranks' newest stored flush
        (start + elapsed of their records), else the profiler's last write (heartbeat), else None.

        What a job that stopped without an elapsed time (its profiler died) is measured up to: its
        stored bytes are those flushed by then, so a rate over "now" would shrink by the hour."""
        r = S.ranks
        with self._guard(), self.engine.connect() as c:
            last = c.execute(sa.select(sa.func.max(r.c.start_ns + r.c.elapsed_ns))
                             .where(r.c.job == job_id, r.c.start_ns > 0, r.c.elapsed_ns > 0)).scalar()
            hb = c.execute(sa.select(S.jobs.c.heartbeat).where(S.jobs.c.id == job_id)).scalar()
        if last:
            return int(last)
        if hb is None:
            return None
        hb = hb if hb.tzinfo else hb.replace(tzinfo=timezone.utc)
        return int(hb.timestamp() * 1e9)

    def traffic_matrix(self, job_id: int, classes: Sequence[str] | None = None, *,
                       what: str = "bytes") -> np.ndarray:
        """T[src][dst] as an int64 array ``[world_size, world_size]`` of bytes (or messages)."""
        if what not in ("bytes", "messages"):
            raise ValueError(what)
        n = self.world_size(job_id)
        m = np.zeros((n, n), dtype=np.int64)
        for r in self.traffic(job_id, classes):
            m[r["src"], r["dst"]] += r[what]
        return m

    def bytes_by_mem(self, job_id: int) -> dict[str, int]:
        """Bytes by where the send buffer lived: device, host, managed, unknown."""
        t = S.traffic
        q = sa.select(t.c.mem, sa.func.sum(t.c.bytes)).where(t.c.job == job_id).group_by(t.c.mem)
        with self._guard(), self.engine.connect() as c:
            return {m: int(b) for m, b in c.execute(q)}

    def op_stats(self, job_id: int) -> list[dict]:
        with self._guard(), self.engine.connect() as c:
            rows = c.execute(sa.select(S.op_stats).where(S.op_stats.c.job == job_id)
                             .order_by(S.op_stats.c.rank, S.op_stats.c.source, S.op_stats.c.operation)).mappings()
            return [{k: v for k, v in r.items() if k != "job"} for r in rows]

    def timeline(self, job_id: int) -> list[dict]:
        """Bytes each rank sent (to all peers) per slot: ``bucket`` the slot's first bucket, ``width``
        its buckets (1 for recent ones; older slots are wider, see :mod:`rankmap.store.batch`)."""
        t = S.timeline
        with self._guard(), self.engine.connect() as c:
            rows = c.execute(sa.select(t).where(t.c.job == job_id)
                             .order_by(t.c.bucket, t.c.src, t.c["class"], t.c.source)).mappings()
            return [{k: v for k, v in r.items() if k != "job"} for r in rows]

    def link_samples(self, job_id: int) -> list[dict]:
        t = S.link_samples
        with self._guard(), self.engine.connect() as c:
            rows = c.execute(sa.select(t).where(t.c.job == job_id).order_by(t.c.t_ns, t.c.device, t.c.link))
            return [{k: v for k, v in r.items() if k != "job"} for r in rows.mappings()]

    def pvars(self, job_id: int, name: str | None = None) -> list[dict]:
        """MPI_T performance variable samples (``source, rank, t_ns, name, class, value, values``),
        by variable, rank and time; ``name``: one variable."""
        t = S.pvars
        q = sa.select(t).where(t.c.job == job_id).order_by(t.c["name"], t.c.rank, t.c.source, t.c.t_ns)
        if name is not None:
            q = q.where(t.c["name"] == name)
        with self._guard(), self.engine.connect() as c:
            return [{k: v for k, v in r.items() if k != "job"} for r in c.execute(q).mappings()]

    def profile(self, job_id: int) -> dict:
        """Everything stored about one job, as plain JSON-able data (``rankmap export --format json``)."""
        ranks = self.ranks(job_id)
        problems = [p for r in ranks for p in (r.get("problems") or [])]
        return {
            "format": "rankmap-profile", "version": 2,
            "job": self.job(job_id), "ranks": ranks,
            "traffic": self.traffic(job_id, by_mem=True, by_pair_source=True), "op_stats": self.op_stats(job_id),
            "timeline": self.timeline(job_id), "link_samples": self.link_samples(job_id),
            "cuda_activity": self.cuda_activity(job_id), "pvars": self.pvars(job_id), "problems": problems,
        }

    # ------------------------------------------------------------ benchmarks
    _BENCH_FIGURES = {"latency_us": "latency_us", "bandwidth_GBps": "bandwidth_gbps", "total_GBps": "total_gbps",
                      "algbw_GBps": "algbw_gbps", "busbw_GBps": "busbw_gbps"}
    _BENCH_KEYS = ("benchmark", "library", "buffer", "src", "dst", "size")

    def save_bench_run(self, run: dict) -> int:
        """Keep one benchmark run (the JSON form of ``rankmap.bench.rows.BenchRun``); returns its id."""
        with self.engine.begin() as c:
            r = c.execute(S.bench_runs.insert().values(
                created=_now(), kind=run["kind"], host=run.get("host"), command=run.get("command"),
                machine=run.get("machine") or {}, ran=list(run.get("ran") or []),
                not_run=list(run.get("not_run") or []), meta={"notes": list(run.get("notes") or [])}))
            rid = int(r.inserted_primary_key[0])
            rows = []
            for row in run.get("rows") or []:
                d = {k: row.get(k) for k in self._BENCH_KEYS}
                d.update({col: row.get(key) for key, col in self._BENCH_FIGURES.items()})
                d["extra"] = {k: v for k, v in row.items() if k not in self._BENCH_KEYS and k not in self._BENCH_FIGURES}
                d["run"] = rid
                rows.append(d)
            if rows:
                c.execute(S.bench_results.insert(), rows)
        return rid

    def bench_runs(self, kind: str | None = None, host: str | None = None, limit: int = 50) -> list[dict]:
        """Benchmark runs, newest first, without their rows."""
        t = S.bench_runs
        q = sa.select(t).order_by(t.c.id.desc()).limit(limit)
        if kind:
            q = q.where(t.c.kind == kind)
        if host:
            q = q.where(t.c.host == host)
        with self.engine.connect() as c:
            out = [dict(r) for r in c.execute(q).mappings()]
        for d in out:
            d["created"] = _iso(d["created"])
        return out

    def bench_run(self, run_id: int) -> dict:
        """One run with its rows in the JSON row form (figures named as ``rankmap bench --format json`` names them)."""
        t, res = S.bench_runs, S.bench_results
        with self.engine.connect() as c:
            row = c.execute(sa.select(t).where(t.c.id == run_id)).mappings().first()
            if row is None:
                raise RankmapError(f"no benchmark run {run_id} in {self.url}")
            results = c.execute(sa.select(res).where(res.c.run == run_id)).mappings().all()
        d = dict(row)
        d["created"] = _iso(d["created"])
        d["notes"] = (d.pop("meta") or {}).get("notes", [])
        rows = []
        for r in results:
            out = {k: r[k] for k in self._BENCH_KEYS if r[k] is not None}
            out.update({key: r[col] for key, col in self._BENCH_FIGURES.items() if r[col] is not None})
            out.update(r["extra"] or {})
            rows.append(out)
        d["rows"] = rows
        return d

    def latest_bench_run(self, kind: str, host: str | None = None) -> dict | None:
        """The newest run of ``kind`` (on ``host`` when given), with its rows; None if there is none."""
        runs = self.bench_runs(kind, host, limit=1)
        return self.bench_run(runs[0]["id"]) if runs else None

    # ------------------------------------------------------------ mappings
    def save_mapping(self, mapping: dict, *, job_id: int | None = None, key: str | None = None,
                     world_size: int | None = None, topology: str | None = None,
                     max_before: float | None = None, avg_before: float | None = None,
                     max_after: float | None = None, avg_after: float | None = None,
                     optimal: bool | None = None, meta: dict | None = None) -> int:
        """Keep a mapping (the mapping JSON as the mapping layer writes it); returns its id.

        ``key`` and ``world_size`` default to the job's, so a mapping made from a profile is
        found again by :meth:`latest_mapping` for the same command.
        """
        if job_id is not None and (key is None or world_size is None):
            j = self.job(job_id)
            key = key if key is not None else j["command_key"]
            world_size = world_size if world_size is not None else j["world_size"]
        with self._guard(), self.engine.begin() as c:
            r = c.execute(S.mappings.insert().values(
                job=job_id, created=_now(), command_key=key, world_size=world_size, topology=topology,
                mapping=mapping, max_congestion_before=max_before, avg_congestion_before=avg_before,
                max_congestion_after=max_after, avg_congestion_after=avg_after, optimal=optimal,
                meta=meta or {}))
            return int(r.inserted_primary_key[0])

    def latest_mapping(self, key: str, world_size: int | None, topology: str | None = None) -> dict | None:
        """The newest mapping saved for this command and size (and topology, when given)."""
        m = S.mappings
        q = sa.select(m).where(m.c.command_key == key).order_by(m.c.id.desc()).limit(1)
        q = q.where(m.c.world_size.is_(None) if world_size is None else m.c.world_size == world_size)
        if topology is not None:
            q = q.where(m.c.topology == topology)
        with self._guard(), self.engine.connect() as c:
            row = c.execute(q).mappings().first()
        if row is None:
            return None
        d = dict(row)
        d["created"] = _iso(d["created"])
        return d


def _cuda_rows(job_id: int, rank: int, rec: Any) -> dict[sa.Table, list[dict]]:
    """The CUDA activity tables' rows of one rank's cuda record."""
    meta = dict(getattr(rec, "meta", None) or {})
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


def open_store(url: str | None = None, *, lazy: bool = False, existing: bool = False) -> Store:
    """Open (and create on first use) the store at ``url``, ``$RANKMAP_DB``, or the default SQLite file.

    ``lazy``: a store that cannot be reached now is still returned (not ready; its queries raise
    :class:`StoreUnavailable` until it answers), for a dashboard that must say the database is down.
    ``existing``: for the verbs that only read: a SQLite file that ``url`` or ``$RANKMAP_DB`` names
    and that is not there is an error, not a new empty store (a mistyped path listed no jobs, and
    left an empty database, and its folders, behind); the default store is still made on first use.
    """
    named = bool(url or os.environ.get("RANKMAP_DB"))
    url = _normalise_url(url or default_url())
    try:
        u = make_url(url)
    except Exception:
        raise RankmapError(f"not a database URL: {url!r} (e.g. sqlite:///path.db or postgresql+psycopg://host/db)") from None
    shown = u.render_as_string(hide_password=True)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        db = Path(u.database).expanduser()
        if existing and named and not db.exists():
            raise RankmapError(f"no rankmap store at {db}: nothing was stored there (check --db or RANKMAP_DB)")
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RankmapError(f"cannot create the database directory {db.parent}: {e.strerror}") from None
    elif u.get_backend_name() not in ("sqlite", "postgresql"):
        raise RankmapError(f"unsupported database {shown}: rankmap stores into SQLite or PostgreSQL")
    try:
        kw: dict[str, Any] = {}
        if u.get_backend_name() == "sqlite":
            kw["connect_args"] = {"timeout": SQLITE_BUSY_S}
        else:                       # a server restarted under a long job: reconnect, do not fail
            kw["pool_pre_ping"] = True
        engine = sa.create_engine(u, **kw)
        if u.get_backend_name() == "sqlite":
            sa.event.listen(engine, "connect", _sqlite_pragmas)
        version = _create_schema(engine)
        if version > S.SCHEMA_VERSION:
            raise RankmapError(f"the store {shown} has schema version {version}, newer than this "
                               f"rankmap's ({S.SCHEMA_VERSION}): upgrade rankmap")
    except ImportError as e:
        raise RankmapError(f"the driver for {shown} is not installed ({e.name}): pip install 'rankmap[postgres]'") from None
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as e:
        if lazy:
            return Store(engine, ready=False)
        msg = str(getattr(e, "orig", None) or e).strip().splitlines()
        raise RankmapError(f"cannot open the store {shown}: {msg[0] if msg else type(e).__name__}") from None
    except sa.exc.SQLAlchemyError as e:
        msg = str(getattr(e, "orig", None) or e).strip().splitlines()
        raise RankmapError(f"cannot open the store {shown}: {msg[0] if msg else type(e).__name__}") from None
    return Store(engine)


def _create_schema(engine: Engine, attempts: int = 5) -> int:
    """Create the tables if missing and return the store's schema version.

    Several processes may open a new store at the same moment (a job's ``rankmap profile`` and a
    ``rankmap serve`` started beside it): the check-then-create of ``create_all`` would let two of
    them create the same table. On PostgreSQL a transaction-scoped advisory lock serialises them;
    on SQLite the loser of the race gets "already exists" (or a duplicate version row) and simply
    tries again, and then finds the tables made.
    """
    for attempt in range(attempts):
        try:
            with engine.begin() as c:
                if engine.dialect.name == "postgresql":
                    c.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK_KEY})
                old = None
                if sa.inspect(c).has_table(S.meta_info.name):
                    old = c.execute(sa.select(sa.func.max(S.meta_info.c.version))).scalar()
                if old is not None and old < S.SCHEMA_VERSION:
                    migrate.before_create(c, old)
                S.metadata.create_all(c)
                if old is not None and old < S.SCHEMA_VERSION:
                    migrate.after_create(c, old)
                version = old
                if old is None or old < S.SCHEMA_VERSION:
                    c.execute(S.meta_info.insert().values(version=S.SCHEMA_VERSION))
                    version = S.SCHEMA_VERSION
                return int(version)
        except (sa.exc.OperationalError, sa.exc.IntegrityError, sa.exc.ProgrammingError) as e:
            text = str(getattr(e, "orig", e)).lower()
            if attempt + 1 == attempts or not ("already exists" in text or "unique" in text
                                               or "duplicate" in text):
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


#: Any fixed 64-bit number: the advisory lock that serialises schema creation on PostgreSQL.
_SCHEMA_LOCK_KEY = 0x72616E6B6D6170  # "rankmap"


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    """WAL lets `rankmap serve` read while a profile streams in; foreign keys make deletes cascade."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    try:
        cur.execute("PRAGMA journal_mode=WAL")
    except Exception:  # a read-only or network file system: the default journal still works
        pass
    cur.close()
