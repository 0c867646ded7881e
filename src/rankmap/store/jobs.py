"""Jobs: their lifecycle (running, then finished, failed or incomplete), how they are found again.

A job is created ``running`` when it is launched and ended by the profiler that streams it. A
profiler that dies ends nothing, so a job's state as read is the stored one except that a running
job whose profiler (:func:`process_id`) is gone is ``incomplete`` (:func:`job_state`); :func:`settle_jobs` stores that.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

import sqlalchemy as sa

from rankmap.errors import RankmapError
from rankmap.store import schema as S
from rankmap.store.engine import Database, iso, now

#: a job whose profiler runs on another host and has not written for this long is no longer running
STALE_S = 600


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


def text(s: str) -> str:
    """A string as the store can keep it: the bytes of a name that is not UTF-8 (a program, a path;
    Python carries them as lone surrogates) shown as ``\\xff``, which both back ends take."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        pass
    try:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:      # a surrogate that stands for no byte (JSON's "\ud800")
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def texts(v: Any) -> Any:
    """:func:`text` through a job's meta (its strings, keys and lists)."""
    if isinstance(v, str):
        return text(v)
    if isinstance(v, dict):
        return {texts(k): texts(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [texts(x) for x in v]
    return v


def job_state(row: Mapping[str, Any]) -> str:
    """The job's state as stored, except that a job whose profiler is gone is no longer running."""
    if row["state"] != "running" or not row["profiler"]:
        return row["state"]
    alive = process_alive(row["profiler"])
    if alive is False:
        return "incomplete"
    hb = row["heartbeat"]
    if alive is None and hb is not None:
        hb = hb if hb.tzinfo else hb.replace(tzinfo=timezone.utc)
        if (now() - hb).total_seconds() > STALE_S:
            return "incomplete"
    return "running"


def no_jobs_text(url: str) -> str:
    """What a verb says of a store with no job: an error for one that needs a job, the answer of ``jobs``."""
    return f"no jobs in {url} yet: run `rankmap profile -- <command>` first"


# ------------------------------------------------------------------------------ lifecycle
def create_job(db: Database, command: Sequence[str] | str, *, launcher: str = "plain",
               world_size: int | None = None, run_dir: str | os.PathLike | None = None,
               key: str | None = None, hosts: Sequence[str] | None = None,
               meta: dict | None = None, run_uid: str | None = None, profiler: str | None = None,
               created: datetime | None = None) -> int:
    """Record a job about to be launched (state ``running``); returns its id.

    ``profiler`` (:func:`process_id`) names the process that will stream the job's records: once
    it is gone the job no longer counts as running, whatever was stored. ``created``: when the job
    started, where that was earlier than now (a run directory ingested after the fact)."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    with db.engine.begin() as c:
        r = c.execute(S.jobs.insert().values(
            created=created or now(), command=text(shlex.join(argv)), command_key=text(key or command_key(argv)),
            launcher=launcher, world_size=world_size, hosts=[text(h) for h in hosts] if hosts else None,
            run_dir=text(str(run_dir)) if run_dir is not None else None, meta=texts(meta or {}), state="running",
            run_uid=run_uid, profiler=profiler, heartbeat=now() if profiler else None))
        return int(r.inserted_primary_key[0])


def finish_job(db: Database, job_id: int, *, exit_status: int | None, elapsed_ns: int | None = None,
               world_size: int | None = None, meta: dict | None = None, state: str | None = None,
               ended: datetime | None = None) -> None:
    """Record how the job ended; ``meta`` is merged into what the job already has. ``state``
    defaults to what the exit status says (:func:`rankmap.store.schema.ended_state`)."""
    state = state or S.ended_state(exit_status)
    if state not in S.JOB_STATES:
        raise ValueError(state)
    with db.engine.begin() as c:
        old = c.execute(sa.select(S.jobs.c.meta).where(S.jobs.c.id == job_id)).scalar_one_or_none()
        merged = dict(old or {})
        merged.update(texts(meta or {}))
        hosts = _hosts(c, job_id)
        values: dict[str, Any] = dict(ended=ended or now(), exit_status=exit_status, elapsed_ns=elapsed_ns,
                                      meta=merged, state=state, profiler=None)
        if hosts:
            values["hosts"] = hosts
        if world_size is not None:
            values["world_size"] = world_size
        c.execute(S.jobs.update().where(S.jobs.c.id == job_id).values(**values))


def update_job_meta(db: Database, job_id: int, meta: dict) -> None:
    """Merge ``meta`` into a job's meta while it runs (what a running job learns about itself)."""
    with db.engine.begin() as c:
        old = c.execute(sa.select(S.jobs.c.meta).where(S.jobs.c.id == job_id)).scalar_one_or_none()
        c.execute(S.jobs.update().where(S.jobs.c.id == job_id).values(meta={**(old or {}), **texts(meta)}))


def settle_jobs(db: Database) -> list[int]:
    """Store ``incomplete`` for every job still marked running whose profiler is gone; their ids.
    A read-only store is left as it is (every read says ``incomplete`` all the same: :func:`job_state`)."""
    if getattr(db, "read_only", False):
        return []
    with db.engine.begin() as c:
        rows = c.execute(sa.select(S.jobs.c.id, S.jobs.c.state, S.jobs.c.profiler, S.jobs.c.heartbeat)
                         .where(S.jobs.c.state == "running")).mappings().all()
        gone = [r["id"] for r in rows if job_state(r) == "incomplete"]
        if gone:
            c.execute(S.jobs.update().where(S.jobs.c.id.in_(gone), S.jobs.c.state == "running")
                      .values(state="incomplete"))
    return gone


# ------------------------------------------------------------------------------ finding jobs
def resolve_job(db: Database, spec: str | int) -> int:
    """``'latest'`` or a job id -> a job id that exists."""
    with db.engine.connect() as c:
        if str(spec) == "latest":
            jid = c.execute(sa.select(sa.func.max(S.jobs.c.id))).scalar()
            if jid is None:
                raise RankmapError(no_jobs_text(db.url))
            return int(jid)
        try:
            jid = int(spec)
        except ValueError:
            raise RankmapError(f"unknown job {spec!r}: give a job id or 'latest'") from None
        if not 1 <= jid <= S.MAX_ROW_ID or \
                c.execute(sa.select(S.jobs.c.id).where(S.jobs.c.id == jid)).scalar() is None:
            raise RankmapError(f"unknown job {spec!r} in {db.url}")
        return jid


def job(db: Database, job_id: int) -> dict:
    """The job's row, its times as ISO text, its state as :func:`job_state` reads it."""
    with db.engine.connect() as c:
        row = c.execute(sa.select(S.jobs).where(S.jobs.c.id == job_id)).mappings().first()
        if row is None:
            raise RankmapError(f"unknown job {job_id!r} in {db.url}")
        d = dict(row)
        if not d.get("hosts"):
            d["hosts"] = _hosts(c, job_id)
    d["state"] = job_state(d)
    d["created"], d["ended"], d["heartbeat"] = iso(d["created"]), iso(d["ended"]), iso(d["heartbeat"])
    return d


def jobs(db: Database, limit: int = 50) -> list[dict]:
    """The most recent jobs first."""
    with db.engine.connect() as c:
        ids = c.execute(sa.select(S.jobs.c.id).order_by(S.jobs.c.id.desc()).limit(limit)).scalars().all()
    return [job(db, i) for i in ids]


def job_list(db: Database, limit: int = 50) -> list[dict]:
    """One line per job, newest first: id, state, command, ranks, bytes, start, duration (``rankmap jobs``)."""
    j, r, t = S.jobs, S.ranks, S.traffic
    nranks = (sa.select(sa.func.count(sa.distinct(r.c.world_rank))).where(r.c.job == j.c.id)
              .scalar_subquery())
    nbytes = sa.select(sa.func.coalesce(sa.func.sum(t.c.bytes), 0)).where(t.c.job == j.c.id).scalar_subquery()
    q = (sa.select(j.c.id, j.c.state, j.c.profiler, j.c.heartbeat, j.c.command, j.c.world_size, j.c.created,
                   j.c.elapsed_ns, j.c.exit_status, j.c.run_dir, nranks.label("ranks"), nbytes.label("bytes"))
         .order_by(j.c.id.desc()).limit(limit))
    with db.engine.connect() as c:
        rows = c.execute(q).mappings().all()
    out = []
    for row in rows:
        st = job_state(row)
        created = row["created"] if row["created"].tzinfo else row["created"].replace(tzinfo=timezone.utc)
        dur = row["elapsed_ns"] / 1e9 if row["elapsed_ns"] is not None else (
            (now() - created).total_seconds() if st == "running" else None)
        out.append({"id": row["id"], "state": st, "command": row["command"], "ranks": int(row["ranks"] or 0),
                    "world_size": row["world_size"], "bytes": int(row["bytes"] or 0), "start": iso(created),
                    "duration_s": None if dur is None else round(dur, 3), "exit_status": row["exit_status"],
                    "run_dir": row["run_dir"]})
    return out


def job_by_run(db: Database, run_uid: str) -> int | None:
    """The job whose run directory has this id (its ``job.json``), if stored."""
    with db.engine.connect() as c:
        return c.execute(sa.select(sa.func.max(S.jobs.c.id)).where(S.jobs.c.run_uid == run_uid)).scalar()


def find_job(db: Database, key: str, world_size: int | None) -> int | None:
    """The latest successful profile of the same command and size that recorded something."""
    has_ranks = sa.exists().where(S.ranks.c.job == S.jobs.c.id)
    q = (sa.select(S.jobs.c.id).where(S.jobs.c.command_key == key, S.jobs.c.exit_status == 0, has_ranks)
         .order_by(S.jobs.c.id.desc()).limit(1))
    q = q.where(S.jobs.c.world_size.is_(None) if world_size is None else S.jobs.c.world_size == world_size)
    with db.engine.connect() as c:
        return c.execute(q).scalar()


def _hosts(c: Any, job_id: int) -> list[str]:
    """The hosts the job's ranks ran on, as their records say."""
    return sorted({h for (h,) in c.execute(sa.select(S.ranks.c.host).where(S.ranks.c.job == job_id).distinct()) if h})
