"""rankmap's store: jobs, their traffic and the mappings made from them, in SQLite or PostgreSQL.

One :class:`Store` over one SQLAlchemy engine. The default is a SQLite file under
``${RANKMAP_HOME:-~/.rankmap}``; ``RANKMAP_DB`` or an explicit URL points it elsewhere, e.g.
``postgresql+psycopg://user@host/db`` so a team shares one database. The store never
imports the capture layer: :meth:`Store.ingest` takes any objects shaped like the record
reader's ``RankRecord``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from rankmap.errors import RankmapError
from rankmap.store import schema as S

__all__ = ["Store", "open_store", "default_url", "command_key", "rankmap_home"]


def rankmap_home() -> Path:
    """Where rankmap keeps its database and run directories unless told otherwise."""
    return Path(os.environ.get("RANKMAP_HOME") or Path.home() / ".rankmap")


def default_url() -> str:
    return os.environ.get("RANKMAP_DB") or f"sqlite:///{rankmap_home() / 'rankmap.db'}"


def shown_url(url: str | None = None) -> str:
    """``url`` (default: the default store) as :attr:`Store.url` shows it, to tell stores apart."""
    return make_url(_normalise_url(url or default_url())).render_as_string(hide_password=True)


def _normalise_url(url: str) -> str:
    """Accept the spellings people type for PostgreSQL and use the driver rankmap ships (psycopg 3)."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


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


def _get(row: Any, name: str, index: int) -> Any:
    """A field of a reader row, whether it is a dataclass/namedtuple, a mapping or a plain tuple."""
    if isinstance(row, dict):
        return row[name]
    if hasattr(row, name):
        return getattr(row, name)
    return row[index]


#: what a row's ``label`` may say of its pair attribution (formats.record.TrafficRow, NCCL's rows)
PAIR_SOURCES = ("call", "library", "mirror", "model")


def _pair_source(row: Any) -> str | None:
    """The row's pair source (its ``label``, one of :data:`PAIR_SOURCES` from this rankmap's readers):
    None for rows that carry none (plain 7-tuples)."""
    if isinstance(row, dict):
        v = row.get("label", row.get("pair_source"))
    elif hasattr(row, "label"):
        v = row.label
    else:
        v = row[7] if len(row) > 7 else None
    return None if v is None else str(v)


def _trim(h: list[int]) -> list[int]:
    """A histogram without its trailing empty buckets (64 bins, mostly empty, per operation)."""
    while h and h[-1] == 0:
        h.pop()
    return h


def _pvar_rows(job_id: int, source: str, rank: int, rec: Any) -> list[dict]:
    """The rank's MPI_T performance variable samples as ``pvars`` rows (records without any: none)."""
    defs = getattr(rec, "pvar_defs", None) or {}
    rows = []
    for vid, t_ns, values in getattr(rec, "pvar_samples", None) or []:
        d = defs.get(vid)
        if d is None:
            continue
        vals = [v if isinstance(v, int) else float(v) for v in values]
        rows.append({"job": job_id, "source": source, "rank": rank, "t_ns": int(t_ns), "name": str(d.name),
                     "class": str(d.cls), "value": float(sum(vals)) if vals else None, "values": vals})
    return rows


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

    def __init__(self, engine: Engine):
        self.engine = engine
        self.url = engine.url.render_as_string(hide_password=True)

    # ---------------------------------------------------------------- jobs
    def create_job(self, command: Sequence[str] | str, *, launcher: str = "plain",
                   world_size: int | None = None, run_dir: str | os.PathLike | None = None,
                   key: str | None = None, hosts: Sequence[str] | None = None,
                   meta: dict | None = None) -> int:
        """Record a job about to be launched; returns its id."""
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        with self.engine.begin() as c:
            r = c.execute(S.jobs.insert().values(
                created=_now(), command=shlex.join(argv), command_key=key or command_key(argv),
                launcher=launcher, world_size=world_size, hosts=list(hosts) if hosts else None,
                run_dir=str(run_dir) if run_dir is not None else None, meta=meta or {}))
            return int(r.inserted_primary_key[0])

    def finish_job(self, job_id: int, *, exit_status: int, elapsed_ns: int | None = None,
                   world_size: int | None = None, meta: dict | None = None) -> None:
        """Record how the job ended; ``meta`` is merged into what the job already has."""
        with self.engine.begin() as c:
            old = c.execute(sa.select(S.jobs.c.meta).where(S.jobs.c.id == job_id)).scalar_one_or_none()
            merged = dict(old or {})
            merged.update(meta or {})
            hosts = sorted({h for (h,) in c.execute(
                sa.select(S.ranks.c.host).where(S.ranks.c.job == job_id).distinct()) if h})
            values: dict[str, Any] = dict(ended=_now(), exit_status=exit_status, elapsed_ns=elapsed_ns,
                                          meta=merged)
            if hosts:
                values["hosts"] = hosts
            if world_size is not None:
                values["world_size"] = world_size
            c.execute(S.jobs.update().where(S.jobs.c.id == job_id).values(**values))

    def update_job_meta(self, job_id: int, meta: dict) -> None:
        """Merge ``meta`` into a job's meta while it runs (what a running job learns about itself)."""
        with self.engine.begin() as c:
            old = c.execute(sa.select(S.jobs.c.meta).where(S.jobs.c.id == job_id)).scalar_one_or_none()
            c.execute(S.jobs.update().where(S.jobs.c.id == job_id).values(meta={**(old or {}), **meta}))

    def resolve_job(self, spec: str | int) -> int:
        """``'latest'`` or a job id -> a job id that exists."""
        with self.engine.connect() as c:
            if str(spec) == "latest":
                jid = c.execute(sa.select(sa.func.max(S.jobs.c.id))).scalar()
                if jid is None:
                    raise RankmapError(f"no jobs in {self.url} yet: run `rankmap profile -- <command>` first")
                return int(jid)
            try:
                jid = int(spec)
            except ValueError:
                raise RankmapError(f"unknown job {spec!r}: give a job id or 'latest'") from None
            if c.execute(sa.select(S.jobs.c.id).where(S.jobs.c.id == jid)).scalar() is None:
                raise RankmapError(f"unknown job {spec!r} in {self.url}")
            return jid

    def job(self, job_id: int) -> dict:
        with self.engine.connect() as c:
            row = c.execute(sa.select(S.jobs).where(S.jobs.c.id == job_id)).mappings().first()
            if row is None:
                raise RankmapError(f"unknown job {job_id!r} in {self.url}")
            d = dict(row)
            if not d.get("hosts"):
                d["hosts"] = sorted({h for (h,) in c.execute(
                    sa.select(S.ranks.c.host).where(S.ranks.c.job == job_id).distinct()) if h})
        d["created"], d["ended"] = _iso(d["created"]), _iso(d["ended"])
        return d

    def jobs(self, limit: int = 50) -> list[dict]:
        """The most recent jobs first."""
        with self.engine.connect() as c:
            ids = c.execute(sa.select(S.jobs.c.id).order_by(S.jobs.c.id.desc()).limit(limit)).scalars().all()
        return [self.job(i) for i in ids]

    def find_job(self, key: str, world_size: int | None) -> int | None:
        """The latest successful profile of the same command and size that recorded something."""
        has_ranks = sa.exists().where(S.ranks.c.job == S.jobs.c.id)
        q = (sa.select(S.jobs.c.id).where(S.jobs.c.command_key == key, S.jobs.c.exit_status == 0, has_ranks)
             .order_by(S.jobs.c.id.desc()).limit(1))
        q = q.where(S.jobs.c.world_size.is_(None) if world_size is None else S.jobs.c.world_size == world_size)
        with self.engine.connect() as c:
            return c.execute(q).scalar()

    # -------------------------------------------------------------- ingest
    def ingest(self, job_id: int, records: Iterable[Any]) -> int:
        """Store the current totals of each rank record, replacing what that rank had stored.

        A record file only grows (its totals are cumulative), so streaming ingestion re-reads it
        and replaces that rank's rows: no double counting however often it runs. Traffic comes from
        the rank's *send* rows (src = the rank), plus its one-sided *receive* rows (an ``MPI_Get``
        moves bytes from the target, which records nothing, to the origin). Returns the number of
        records stored.
        """
        n = 0
        for rec in records:
            self._ingest_one(job_id, rec)
            n += 1
        return n

    def _ingest_one(self, job_id: int, rec: Any) -> None:
        rank, source = int(rec.world_rank), str(rec.source)
        totals: dict[tuple, list[int]] = {}
        for row in rec.traffic:
            peer = int(_get(row, "peer", 0))
            klass = str(_get(row, "klass", 1))
            direction = str(_get(row, "direction", 4))
            if direction == "send":
                src, dst = rank, peer
            elif klass == "rma":
                src, dst = peer, rank
            else:
                continue
            k = (src, dst, klass, str(_get(row, "operation", 2)), str(_get(row, "mem", 3)), _pair_source(row))
            t = totals.setdefault(k, [0, 0])
            t[0] += int(_get(row, "bytes", 5))
            t[1] += int(_get(row, "messages", 6))
        traffic_rows = [dict(job=job_id, source=source, reporter=rank, src=s, dst=d, **{"class": k},
                             operation=op, mem=mem, bytes=b, messages=m, pair_source=ps)
                        for (s, d, k, op, mem, ps), (b, m) in totals.items()]
        hist = dict(getattr(rec, "histogram", None) or {})
        op_time = dict(getattr(rec, "op_time", None) or {})
        payload = dict(getattr(rec, "payload", None) or {})
        op_rows = []
        for op in sorted(set(op_time) | set(hist)):
            calls, ns = op_time.get(op, (0, 0))
            op_rows.append(dict(job=job_id, rank=rank, source=source, operation=str(op), calls=int(calls),
                                ns=int(ns), payload=int(payload.get(op, 0)),
                                histogram=_trim([int(x) for x in hist.get(op, [])])))
        tl: dict[tuple, int] = {}
        for e in getattr(rec, "timeline", None) or []:
            k = (int(_get(e, "bucket", 0)), int(_get(e, "peer", 1)), str(_get(e, "klass", 2)))
            tl[k] = tl.get(k, 0) + int(_get(e, "bytes", 3))
        tl_rows = [dict(job=job_id, source=source, src=rank, dst=p, bucket=b, bytes=v, **{"class": k})
                   for (b, p, k), v in tl.items()]
        pvar_rows = _pvar_rows(job_id, source, rank, rec)
        comm_ns = sum(int(ns) for _, ns in op_time.values())
        rank_row = dict(job=job_id, world_rank=rank, source=source, host=getattr(rec, "host", None),
                        pid=getattr(rec, "pid", None), start_ns=getattr(rec, "start_ns", None),
                        elapsed_ns=getattr(rec, "elapsed_ns", None), comm_ns=comm_ns,
                        finalized=bool(getattr(rec, "finalized", True)),
                        problems=list(getattr(rec, "problems", None) or []))
        cuda = _cuda_rows(job_id, rank, rec) if source == "cuda" else {}
        with self.engine.begin() as c:
            for table in cuda:
                c.execute(table.delete().where(table.c.job == job_id, table.c.rank == rank))
            for table, rows in cuda.items():
                if rows:
                    c.execute(table.insert(), rows)
            c.execute(S.ranks.delete().where(S.ranks.c.job == job_id, S.ranks.c.world_rank == rank,
                                             S.ranks.c.source == source))
            c.execute(S.traffic.delete().where(S.traffic.c.job == job_id, S.traffic.c.reporter == rank,
                                               S.traffic.c.source == source))
            c.execute(S.op_stats.delete().where(S.op_stats.c.job == job_id, S.op_stats.c.rank == rank,
                                                S.op_stats.c.source == source))
            c.execute(S.timeline.delete().where(S.timeline.c.job == job_id, S.timeline.c.src == rank,
                                                S.timeline.c.source == source))
            c.execute(S.pvars.delete().where(S.pvars.c.job == job_id, S.pvars.c.rank == rank,
                                             S.pvars.c.source == source))
            c.execute(S.ranks.insert(), [rank_row])
            for table, rows in ((S.traffic, traffic_rows), (S.op_stats, op_rows), (S.timeline, tl_rows),
                                (S.pvars, pvar_rows)):
                if rows:
                    c.execute(table.insert(), rows)

    def forget_ranks(self, job_id: int, source: str, ranks: Sequence[int]) -> None:
        """Drop what ``ranks`` of ``source`` stored (a source whose ranks are derived at ingest, NCCL's,
        may renumber its files while a job runs)."""
        ranks = [int(r) for r in ranks]
        with self.engine.begin() as c:
            c.execute(S.ranks.delete().where(S.ranks.c.job == job_id, S.ranks.c.source == source,
                                             S.ranks.c.world_rank.in_(ranks)))
            for t, col in ((S.traffic, S.traffic.c.reporter), (S.op_stats, S.op_stats.c.rank),
                           (S.timeline, S.timeline.c.src), (S.pvars, S.pvars.c.rank)):
                c.execute(t.delete().where(t.c.job == job_id, t.c.source == source, col.in_(ranks)))

    def cuda_activity(self, job_id: int) -> dict[str, list[dict]]:
        """The job's CUDA activity rows: ``copies``, ``kernels``, ``timeline`` and ``ranks``."""
        out: dict[str, list[dict]] = {}
        with self.engine.connect() as c:
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
            with self.engine.begin() as c:
                c.execute(S.link_samples.insert(), rows)

    # ------------------------------------------------------------- queries
    def ranks(self, job_id: int) -> list[dict]:
        with self.engine.connect() as c:
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
        with self.engine.connect() as c:
            return [dict(r, bytes=int(r["bytes"]), messages=int(r["messages"])) for r in c.execute(q).mappings()]

    def world_size(self, job_id: int) -> int:
        """The job's size as launched, or as seen in its records when the command did not say."""
        with self.engine.connect() as c:
            ws = c.execute(sa.select(S.jobs.c.world_size).where(S.jobs.c.id == job_id)).scalar()
            seen = c.execute(sa.select(sa.func.max(S.ranks.c.world_rank)).where(S.ranks.c.job == job_id)).scalar()
            hi = c.execute(sa.select(sa.func.max(S.traffic.c.src), sa.func.max(S.traffic.c.dst))
                           .where(S.traffic.c.job == job_id)).first()
        n = max([x + 1 for x in (seen, *(hi or ())) if x is not None] + [0])
        return max(ws or 0, n)

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
        with self.engine.connect() as c:
            return {m: int(b) for m, b in c.execute(q)}

    def op_stats(self, job_id: int) -> list[dict]:
        with self.engine.connect() as c:
            rows = c.execute(sa.select(S.op_stats).where(S.op_stats.c.job == job_id)
                             .order_by(S.op_stats.c.rank, S.op_stats.c.source, S.op_stats.c.operation)).mappings()
            return [{k: v for k, v in r.items() if k != "job"} for r in rows]

    def timeline(self, job_id: int) -> list[dict]:
        t = S.timeline
        with self.engine.connect() as c:
            rows = c.execute(sa.select(t).where(t.c.job == job_id)
                             .order_by(t.c.bucket, t.c.src, t.c.dst, t.c["class"])).mappings()
            return [{k: v for k, v in r.items() if k != "job"} for r in rows]

    def link_samples(self, job_id: int) -> list[dict]:
        t = S.link_samples
        with self.engine.connect() as c:
            rows = c.execute(sa.select(t).where(t.c.job == job_id).order_by(t.c.t_ns, t.c.device, t.c.link))
            return [{k: v for k, v in r.items() if k != "job"} for r in rows.mappings()]

    def pvars(self, job_id: int, name: str | None = None) -> list[dict]:
        """MPI_T performance variable samples (``source, rank, t_ns, name, class, value, values``),
        by variable, rank and time; ``name``: one variable."""
        t = S.pvars
        q = sa.select(t).where(t.c.job == job_id).order_by(t.c["name"], t.c.rank, t.c.source, t.c.t_ns)
        if name is not None:
            q = q.where(t.c["name"] == name)
        with self.engine.connect() as c:
            return [{k: v for k, v in r.items() if k != "job"} for r in c.execute(q).mappings()]

    def profile(self, job_id: int) -> dict:
        """Everything stored about one job, as plain JSON-able data (``rankmap export --format json``)."""
        ranks = self.ranks(job_id)
        problems = [p for r in ranks for p in (r.get("problems") or [])]
        return {
            "format": "rankmap-profile", "version": 1,
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
        with self.engine.begin() as c:
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
        with self.engine.connect() as c:
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


def open_store(url: str | None = None) -> Store:
    """Open (and create on first use) the store at ``url``, ``$RANKMAP_DB``, or the default SQLite file."""
    url = _normalise_url(url or default_url())
    try:
        u = make_url(url)
    except Exception:
        raise RankmapError(f"not a database URL: {url!r} (e.g. sqlite:///path.db or postgresql+psycopg://host/db)") from None
    shown = u.render_as_string(hide_password=True)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        db = Path(u.database).expanduser()
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RankmapError(f"cannot create the database directory {db.parent}: {e.strerror}") from None
    elif u.get_backend_name() not in ("sqlite", "postgresql"):
        raise RankmapError(f"unsupported database {shown}: rankmap stores into SQLite or PostgreSQL")
    try:
        kw: dict[str, Any] = {}
        if u.get_backend_name() == "sqlite":
            kw["connect_args"] = {"timeout": 30}
        engine = sa.create_engine(u, **kw)
        if u.get_backend_name() == "sqlite":
            sa.event.listen(engine, "connect", _sqlite_pragmas)
        version = _create_schema(engine)
        if version > S.SCHEMA_VERSION:
            raise RankmapError(f"the store {shown} has schema version {version}, newer than this "
                               f"rankmap's ({S.SCHEMA_VERSION}): upgrade rankmap")
    except ImportError as e:
        raise RankmapError(f"the driver for {shown} is not installed ({e.name}): pip install 'rankmap[postgres]'") from None
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
                S.metadata.create_all(c)
                version = c.execute(sa.select(sa.func.max(S.meta_info.c.version))).scalar()
                if version is None:
                    c.execute(S.meta_info.insert().values(version=S.SCHEMA_VERSION))
                    version = S.SCHEMA_VERSION
                elif version < S.SCHEMA_VERSION:
                    version = _upgrade(c, int(version))
                return int(version)
        except (sa.exc.OperationalError, sa.exc.IntegrityError, sa.exc.ProgrammingError) as e:
            text = str(getattr(e, "orig", e)).lower()
            if attempt + 1 == attempts or not ("already exists" in text or "unique" in text
                                               or "duplicate" in text):
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _upgrade(c: sa.Connection, version: int) -> int:
    """Bring a store made by an older rankmap to this schema, in the schema transaction.

    ``create_all`` adds new tables but never new columns of existing ones: those are added here,
    each step only if the column is missing (a concurrent opener on SQLite may have added it; its
    "duplicate column" makes the caller try again). Rows stored before keep NULL there.
    """
    if version < 2 and "pair_source" not in {col["name"] for col in sa.inspect(c).get_columns("traffic")}:
        c.execute(sa.text("ALTER TABLE traffic ADD COLUMN pair_source VARCHAR(8)"))
    c.execute(S.meta_info.insert().values(version=S.SCHEMA_VERSION))
    return S.SCHEMA_VERSION


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
