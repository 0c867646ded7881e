"""Record files of a run directory into the store, incrementally: what ``rankmap profile`` streams
while a job runs and what ``rankmap ingest RUN_DIR`` does afterwards.

:class:`RunIngest` keeps one :class:`~rankmap.formats.record.RecordReader` per record file, so a
poll parses only the blocks appended since the last one, and sums them into a
:class:`~rankmap.store.Batch`; a write appends the batch with each file's new position in one
transaction. Nothing is re-read and nothing is replaced, so the cost of a poll is what the ranks
flushed since the previous one, however long the job has run. Positions live in the store, so a
later ``rankmap ingest`` (after a store outage, or with the run directories of other nodes copied
in) goes on exactly from there: running it twice adds nothing.

Two sources are exceptions. NCCL's pair traffic is derived from all its files at once
(:mod:`rankmap.pairs.nccl_model`), so their totals (operation tables, small) are kept in memory
and their derived rows replaced at each write; their timeline is appended like MPI's. CUDA
activity files (copies, kernels, their own timeline) are kept as totals too and replaced
(``Store.ingest``); their per-bucket activity grows with the job, the one part of a poll that does.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rankmap.capture.rundir import RunDir, parse_utc
from rankmap.errors import RankmapError, counted
from rankmap.formats import record as R
from rankmap.pipeline.pacing import CPU_BUDGET, MAX_GAP_S, next_wait  # noqa: F401  (their home)
from rankmap.store import Batch, Store
from rankmap.store import schema as S


def merge_totals(total: R.RankRecord | None, delta: R.RankRecord) -> R.RankRecord:
    """``total`` + ``delta`` of one file (their timeline left out: it is appended, not kept)."""
    if total is None:
        return replace(delta, timeline=[], traffic=list(delta.traffic), op_time=dict(delta.op_time),
                       payload=dict(delta.payload), histogram={k: list(v) for k, v in delta.histogram.items()},
                       meta=dict(delta.meta), communicators=list(delta.communicators),
                       cuda_copies=list(delta.cuda_copies), cuda_kernels=list(delta.cuda_kernels),
                       cuda_timeline=list(delta.cuda_timeline))
    t: dict[tuple, list[int]] = {row[:5]: [row[5], row[6]] for row in total.traffic}
    for row in delta.traffic:
        v = t.setdefault(row[:5], [0, 0])
        v[0] += row[5]
        v[1] += row[6]
    total.traffic = sorted(k + tuple(v) for k, v in t.items())
    total.cuda_copies = _add_rows(total.cuda_copies, delta.cuda_copies, 5)
    total.cuda_kernels = _add_rows(total.cuda_kernels, delta.cuda_kernels, 2)
    total.cuda_timeline = _add_rows(total.cuda_timeline, delta.cuda_timeline, 2)
    for op, (calls, ns) in delta.op_time.items():
        c0, n0 = total.op_time.get(op, (0, 0))
        total.op_time[op] = (c0 + calls, n0 + ns)
    for op, b in delta.payload.items():
        total.payload[op] = total.payload.get(op, 0) + b
    for op, h in delta.histogram.items():
        old = total.histogram.setdefault(op, [0] * len(h))
        total.histogram[op] = [a + b for a, b in zip(old, h)]
    total.meta.update(delta.meta)
    known = {(c.id, c.name): c for c in total.communicators}
    known.update({(c.id, c.name): c for c in delta.communicators})
    total.communicators = list(known.values())
    total.elapsed_ns, total.finalized = delta.elapsed_ns, delta.finalized
    total.flushes += delta.flushes
    total.blocks += delta.blocks
    total.problems = list(delta.problems)
    return total


def _add_rows(a: list[tuple], b: list[tuple], nkeys: int) -> list[tuple]:
    """Rows keyed by their first ``nkeys`` fields, the rest summed."""
    out: dict[tuple, list[int]] = {row[:nkeys]: list(row[nkeys:]) for row in a}
    for row in b:
        v = out.setdefault(row[:nkeys], [0] * (len(row) - nkeys))
        for i, x in enumerate(row[nkeys:]):
            v[i] += x
    return sorted(k + tuple(v) for k, v in out.items())


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1                               # let the reader say what is wrong with it


#: sources whose stored rows are re-derived from each file's totals rather than appended
WHOLE_FILE_SOURCES = ("nccl", "cuda")


class RunIngest:
    """Follows the record files of one run directory and appends what they add to one stored job."""

    def __init__(self, store: Store, job_id: int, run_dir: str | Path, *, resume: bool = True):
        self.store, self.job_id, self.run_dir = store, job_id, RunDir(Path(run_dir))
        self.stored: dict[str, tuple[int, dict]] = store.file_states(job_id) if resume else {}
        self.readers: dict[str, R.RecordReader] = {}
        self.total_readers: dict[str, R.RecordReader] = {}   # from the start: totals of NCCL, CUDA files
        self.nccl_totals: dict[str, R.RankRecord] = {}
        self.cuda_totals: dict[str, R.RankRecord] = {}
        self.cuda_dirty = False
        self.nccl_rank_of: dict[str, int] = {}             # file -> global rank, as last derived
        self.nccl_out: list | None = None                  # derived rows not yet written
        self.nccl_ranks: set[int] = set()                  # ranks whose derived rows are stored
        self.nccl_problems: list[str] = []                 # the readers' and the pair model's notes
        self.batch = Batch()
        self.sent: dict[str, int] = {}
        self.ranks: set[str] = set()                       # record files that reported something
        self.world_ranks: set[int] = set()
        self.world_size: int | None = None
        self.header_problems: dict[str, str] = {}
        # per MPI record file: what its collective calls need from earlier blocks (a delta holds
        # only its own): communicators by id and the META entries (the MPI library, its settings)
        self.coll_ctx: dict[str, tuple[dict, dict]] = {}
        #: per MPI record file, the note of the collectives' source (which mirror, or why the model);
        #: per collective operation, the sources of its stored pairs (library, mirror, model)
        self.coll_notes: dict[str, str] = {}
        self.coll_sources: dict[str, set[str]] = {}
        self.node_of = None                                # world rank -> node, from the ranks' hosts
        self.hosts_seen = 0
        self.job_size = job_size(self.run_dir)             # the job's world, as its job.json says

    def warm_up(self) -> None:
        """Before the first cycle: what a streaming write would otherwise do on its first call
        (:meth:`Store.warm_up`) and the import of the collectives' mirrors, so that the first cycles
        cost what the later ones do. A store that is away now is met by the cycles as usual."""
        from rankmap import pairs  # noqa: F401  (imported here, not in a cycle)
        from rankmap.store import StoreUnavailable

        try:
            self.store.warm_up(self.job_id)
        except StoreUnavailable:
            pass

    # ------------------------------------------------------------------ reading
    def _reader(self, path: Path) -> R.RecordReader:
        r = self.readers.get(path.name)
        if r is None:
            state = self.stored.get(path.name, (0, None))[1]
            r = self.readers[path.name] = R.RecordReader(path, state=state, peer_timeline=False)
        return r

    def poll(self, *, final: bool = False) -> None:
        """Parse what every record file gained since the last poll into the pending batch.

        ``final``: the ranks are done; an incomplete last block and a missing finalize marker are
        then problems (reported in the ranks' rows), and a file whose header cannot be read is one.
        """
        for path in self.run_dir.record_files():
            name = path.name
            reader = self._reader(path)
            if not final and reader.header is not None and name in self.stored and _size(path) == reader.offset:
                continue                        # nothing flushed since the last poll: not even opened
            before = self.stored[name][0] if name in self.stored else None
            start = reader.offset
            try:
                delta = reader.poll(final=final)
            except RankmapError as e:           # not a record file (or its header is damaged)
                if final:
                    self.header_problems[name] = str(e)
                continue
            if delta is None or (reader.offset == start and not final and name in self.stored):
                continue
            outside = self._outside(name, delta)
            if outside:
                self.header_problems[name] = outside
                continue
            delta.problems = reader.problems(live=not final) + delta.problems
            if delta.source == "cuda":
                self.cuda_totals[name] = self._totals(path, final, self.cuda_totals.get(name))
                self.cuda_dirty = True
            elif delta.source == "nccl":
                self._poll_nccl(path, final)
                rank = self.nccl_rank_of.get(name, delta.world_rank)
                self.batch.add(replace(delta, world_rank=rank, traffic=[], op_time={}, payload={}, histogram={}))
                self.batch.ranks.pop((rank, "nccl"), None)     # its rank row comes from the pair model
            else:
                self._collectives(path, delta)
                for t in delta.traffic:
                    if t.klass == "collective" and t.label:
                        self.coll_sources.setdefault(t.operation, set()).add(t.label)
                _in_range(name, delta)
                self.batch.add(delta)
                self.sent[name] = self.sent.get(name, 0) + delta.bytes_sent
            self.batch.file(name, before, reader.offset, reader.state())
            self.stored[name] = (reader.offset, reader.state())
            self.ranks.add(name.split(".")[0])
            self.world_ranks.add(self.nccl_rank_of.get(name, delta.world_rank) if delta.source == "nccl"
                                 else delta.world_rank)
            self.world_size = self.job_size or max(self.world_size or 0, delta.world_size) or None

    def _outside(self, name: str, delta: R.RankRecord) -> str | None:
        """Why a file's records are not the job's: a world rank outside the job's world (the file
        is then left out whole); rows with a peer outside it are dropped, and said."""
        n = self.job_size
        if n is None or delta.source == "nccl":         # NCCL's files are re-ranked by the pair model
            return None
        if not 0 <= delta.world_rank < n:
            return (f"{name}: world rank {delta.world_rank} is outside the job's {counted(n, 'rank')} "
                    f"(job.json: world_size {n}); the file is not stored")
        kept = [r for r in delta.traffic if 0 <= r[0] < n]
        if len(kept) < len(delta.traffic):
            delta.problems.append(f"{name}: {counted(len(delta.traffic) - len(kept), 'traffic row')} with a peer "
                                  f"outside the job's {counted(n, 'rank')} left out")
            delta.traffic = kept
            delta.timeline = [t for t in delta.timeline if t[1] < n]
        return None

    def _collectives(self, path: Path, delta: R.RankRecord) -> None:
        """The collective pair rows of the calls ``delta`` recorded (rankmap.pairs), derived
        with the file's communicators and META so far; a file resumed from a stored position has its
        context read once from the whole file (the recovery path only)."""
        ctx = self.coll_ctx.get(path.name)
        if ctx is None:
            comms, meta = {}, {}
            if self.stored.get(path.name, (0, None))[1]:
                whole = R.RecordReader(path).poll(final=False)
                if whole is not None:
                    comms = {c.id: c for c in whole.communicators}
                    meta = dict(whole.meta)
            ctx = self.coll_ctx[path.name] = (comms, meta)
        comms, meta = ctx
        comms.update({c.id: c for c in delta.communicators})
        meta.update(delta.meta)
        if not delta.coll_calls:
            return
        from rankmap import pairs   # the mirrors' tables: imported by the first job that needs them
        if self.node_of is None or len(self.world_ranks) > self.hosts_seen:
            self.node_of = pairs.node_index(pairs.run_hosts(self.run_dir.path))
            self.hosts_seen = len(self.world_ranks)
        view = replace(delta, communicators=list(comms.values()), meta=dict(meta))
        pairs.apply(view, self.node_of)
        if path.name not in self.coll_notes:
            self.coll_notes[path.name] = pairs.Library(meta).note
        delta.traffic, delta.timeline, delta.coll_calls = view.traffic, view.timeline, []

    def _totals(self, path: Path, final: bool, total: R.RankRecord | None) -> R.RankRecord | None:
        """A whole-file source's totals, read from the file's start once per process, then followed."""
        r = self.total_readers.get(path.name)
        if r is None:
            r = self.total_readers[path.name] = R.RecordReader(path)
        delta = r.poll(final=final)
        if delta is None:
            return total
        delta.problems = r.problems(live=not final)
        return merge_totals(total, delta)

    def _poll_nccl(self, path: Path, final: bool) -> None:
        total = self._totals(path, final, self.nccl_totals.get(path.name))
        if total is None:
            return
        self.nccl_totals[path.name] = total
        from rankmap.pairs import nccl_graph, nccl_model

        logs = sorted(self.run_dir.path.glob(nccl_model.DEBUG_LOG_GLOB))
        prof = nccl_model.from_records(list(self.nccl_totals.values()), self.run_dir.path,
                                       nccl_graph.parse_files(logs) if logs else None)
        self.nccl_out = nccl_model.ingest_records(prof)
        self.nccl_rank_of = {rec.path.name: int(rec.world_rank) for rec in self.nccl_out}
        self.nccl_problems = [p for rec in self.nccl_out for p in rec.problems]
        for rec in self.nccl_out:
            self.sent[rec.path.name] = sum(t.bytes for t in rec.traffic if t.direction == "send")
            self.world_size = self.job_size or max(self.world_size or 0, int(rec.world_size)) or None

    # ------------------------------------------------------------------ writing
    def pending(self) -> bool:
        return bool(len(self.batch)) or self.nccl_out is not None or self.cuda_dirty

    def write(self) -> int:
        """Append the pending batch (and NCCL's re-derived rows); returns the rows written.

        Raises :class:`~rankmap.store.StoreUnavailable` with the batch kept: a later write sends it.
        """
        rows = 0
        if self.nccl_out is not None:
            ranks = {int(r.world_rank) for r in self.nccl_out}
            stale = self.nccl_ranks - ranks                  # ranks re-derived since the last write
            if stale:
                self.store.forget_ranks(self.job_id, "nccl", sorted(stale))
            rows += self.store.ingest(self.job_id, self.nccl_out, timeline=False)
            self.nccl_ranks, self.nccl_out = ranks, None
        if self.cuda_dirty:
            rows += self.store.ingest(self.job_id, list(self.cuda_totals.values()))
            self.cuda_dirty = False
        rows += self.store.append(self.job_id, self.batch)
        self.batch = Batch()
        return rows

    # ------------------------------------------------------------------ reporting
    def ran_to_the_end(self) -> bool:
        """Every rank of the job's world wrote an MPI record file, and every such file its finalize
        marker (what a job that ended normally leaves, whatever became of its profiler)."""
        mpi = [r for r in self.readers.values() if r.header is not None and r.header.source == "mpi"]
        n = self.job_size or self.world_size
        ranks = {r.header.world_rank for r in mpi}
        return bool(mpi) and n is not None and ranks == set(range(n)) and all(r.finalized for r in mpi) \
            and not self.header_problems

    def collective_meta(self) -> dict:
        """For the job's meta: the source of each collective operation's pairs, and what decided it
        (the mirror that applied, or why the model did)."""
        if not self.coll_sources:
            return {}
        derived = any(v & {"mirror", "model"} for v in self.coll_sources.values())
        return {"collective_sources": {op: ", ".join(sorted(v)) for op, v in sorted(self.coll_sources.items())},
                "collective_mirror": "; ".join(sorted(set(self.coll_notes.values()))) if derived else None}

    @property
    def bytes_sent(self) -> int:
        return sum(self.sent.values())

    def problems(self) -> list[str]:
        """What the readers found (damaged blocks, ranks that never finalised, unreadable files)."""
        out = list(self.header_problems.values())
        for name, r in sorted(self.readers.items()):
            if r.header is not None and r.header.source not in WHOLE_FILE_SOURCES:
                out += r.problems(live=False)
        return out + self.nccl_problems + [p for t in self.cuda_totals.values() for p in t.problems]


# ---------------------------------------------------------------------- rankmap ingest RUN_DIR
@dataclass
class IngestResult:
    job_id: int
    created: bool
    rows: int
    state: str
    files: int
    problems: list[str] = field(default_factory=list)
    #: bytes of record files read past what the store held: 0 when an ingest found nothing new
    new_bytes: int = 0
    #: job.json says how the job ended (its exit status); False when its profiler ended first
    ended_known: bool = True


def _in_range(name: str, delta: R.RankRecord) -> None:
    """Leave out (and say so) traffic rows whose bytes or messages pass int64: the reader bounds what
    a file says, but pairs derived from a collective's calls multiply its counts by its calls."""
    kept = [r for r in delta.traffic if 0 <= r[5] <= R.INT64_MAX and 0 <= r[6] <= R.INT64_MAX]
    if len(kept) < len(delta.traffic):
        delta.problems.append(f"{name}: {counted(len(delta.traffic) - len(kept), 'derived traffic row')} past "
                              f"2**63-1 bytes or messages left out")
        delta.traffic = kept
        delta.timeline = [t for t in delta.timeline if 0 <= t[3] <= R.INT64_MAX]


def job_size(rd: RunDir) -> int | None:
    """The world size the run directory's ``job.json`` gives (the launcher's ``-np``), None where it
    says none or cannot be read (the reader's own checks then apply alone). A plain launch's "1" is
    one process, not a world: the program may be a rank of a world its own files name."""
    try:
        job = rd.read_job()
    except RankmapError:
        return None
    return None if job.get("launcher") == "plain" else job.get("world_size")


def new_run_uid() -> str:
    return secrets.token_hex(8)


def ingest_run(run_dir: str | Path, store: Store) -> IngestResult:
    """Store what the record files of ``run_dir`` hold and the store lacks (idempotent).

    The job is the one the run directory's ``job.json`` names (by its run id), created from it
    when this store has none: how the run directories of a job profiled into another store, or
    gathered from several nodes, come in. A job whose profiler is still running is refused: it
    is being ingested already.
    """
    rd = RunDir(Path(run_dir).expanduser().absolute())
    if not rd.path.is_dir():
        raise RankmapError(f"run directory {rd.path} does not exist")
    info = rd.read_job()
    files = rd.record_files()
    if not files and not info:
        raise RankmapError(f"{rd.path} is not a run directory: no job.json and no rank-*.rmrec files")
    uid = info.get("run_uid")
    jid = store.job_by_run(uid) if uid else None
    created = jid is None
    if jid is None:
        jid = _create_from(store, rd, info)
    else:
        j = store.job(jid)
        if j["state"] == "running":
            host, pid, _ = (j.get("profiler") or "? ? ?").split()
            raise RankmapError(f"job {jid} is still being profiled (rankmap pid {pid} on {host}) and streams "
                               f"{rd.path} itself: ingest it after that ends")
    before = {n: done for n, (done, _) in store.file_states(jid).items()}
    ing = RunIngest(store, jid, rd.path)
    ing.poll(final=True)
    rows = ing.write()
    new_bytes = sum(done - before.get(n, 0) for n, (done, _) in store.file_states(jid).items())
    problems = ing.problems()
    done = "exit_status" in info
    meta = {"ingested_from": str(rd.path), "problems": len(problems), **ing.collective_meta()}
    if done:
        state = S.ended_state(info.get("exit_status"))
    elif ing.ran_to_the_end():
        # the profiler ended before the job (killed, or its disk full) and its job.json has no end,
        # but every rank of the job finalised: the job ran to its end; its exit status is unknown
        state, meta["exit_status"] = "finished", "unknown: the profiler ended before the job"
    else:
        state = "incomplete"
    store.finish_job(jid, exit_status=info.get("exit_status"), elapsed_ns=info.get("elapsed_ns"),
                     world_size=info.get("world_size") or ing.world_size, state=state, ended=parse_utc(info.get("end")),
                     meta=meta)
    return IngestResult(jid, created, rows, state, len(files), problems, new_bytes, ended_known=done)


def _create_from(store: Store, rd: RunDir, info: dict[str, Any]) -> int:
    command = info.get("command") or [f"(run directory {rd.path})"]
    uid = info.get("run_uid")
    if not uid:                       # a directory from before run ids, or gathered by hand: give it one
        uid = new_run_uid()
        if rd.job_file.exists() or info:
            rd.write_job({"run_uid": uid})
    meta = {k: info[k] for k in ("env", "mpicc", "bucket_ms", "flush_ms") if k in info}
    return store.create_job(command, launcher=info.get("launcher") or "plain", world_size=info.get("world_size"),
                            run_dir=rd.path, run_uid=uid, meta=meta, created=parse_utc(info.get("start")))


def ingest_command(run_dir: Path, store: Store) -> str:
    """The exact command that completes a job the store could not take while it ran."""
    import shlex

    return f"rankmap ingest {shlex.quote(str(run_dir))} --db {shlex.quote(store.url)}"
