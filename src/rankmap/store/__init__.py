"""rankmap's store: jobs, their traffic and the mappings made from them, in SQLite or PostgreSQL.

:class:`Store` is the face the other layers use, one per process (:func:`open_store`). Each of its
methods is a function of the module of its concern, run behind the guard, so that a database that
does not answer (a server down, a SQLite file locked past its busy wait) raises
:class:`StoreUnavailable` from every one of them, never a driver's error:

- ``engine``: where the store is (URLs, ``RANKMAP_DB``), opening it, its schema, the guard
- ``records``: what the store reads of what it is given (rank counts, link samples, bench runs)
- ``batch``: one write's counters, summed by the keys the store keeps them under
- ``ingest``: append-only writes of a job's counters, rank totals, link samples
- ``jobs``: a job's lifecycle and states, finding jobs again
- ``queries``: a job's data read back (ranks, traffic, timeline, ...)
- ``bench_runs``: the results of ``rankmap bench``
- ``mappings``: placements made from a profile
- ``schema`` (the one schema of both back ends) and ``migrate`` (older stores upgraded in place)

The store never imports the capture layer: what it is given only has to have the shape
``records`` declares.
"""

from __future__ import annotations

import functools
from typing import Callable, Concatenate, ParamSpec, TypeVar

from rankmap.store import bench_runs as _bench, engine as _engine, ingest as _ingest, jobs as _jobs
from rankmap.store import mappings as _mappings, queries as _queries
from rankmap.store.batch import Batch
from rankmap.store.engine import Database, StoreUnavailable, default_url, rankmap_home, shown_url
from rankmap.store.jobs import command_key, process_alive, process_id
from rankmap.store.records import BenchRunDoc, LinkCounts, RankCounts, RankTotals

__all__ = ["Store", "StoreUnavailable", "Batch", "open_store", "default_url", "shown_url", "command_key",
           "rankmap_home", "process_id", "process_alive", "RankCounts", "RankTotals", "LinkCounts", "BenchRunDoc"]

P = ParamSpec("P")
R = TypeVar("R")


def _guarded(fn: Callable[Concatenate[Database, P], R]) -> Callable[Concatenate["Store", P], R]:
    """A concern's function as a :class:`Store` method: behind the guard, on a checked schema (a
    store opened while it was away checks it at its first use once it answers)."""

    @functools.wraps(fn)
    def method(self: Store, /, *args: P.args, **kwargs: P.kwargs) -> R:
        def call() -> R:
            with self.guard():
                if not self.ready:
                    _engine.ensure_schema(self)
                return fn(self, *args, **kwargs)
        return self._retry_locked(call)

    method.guarded = True  # type: ignore[attr-defined]
    return method


class Store(Database):
    """Queries and writes over the rankmap schema; cheap to create, one per process is plenty."""

    ensure_schema = _guarded(_engine.ensure_schema)

    # jobs.py: lifecycle and finding jobs again
    create_job = _guarded(_jobs.create_job)
    finish_job = _guarded(_jobs.finish_job)
    update_job_meta = _guarded(_jobs.update_job_meta)
    settle_jobs = _guarded(_jobs.settle_jobs)
    resolve_job = _guarded(_jobs.resolve_job)
    job = _guarded(_jobs.job)
    jobs = _guarded(_jobs.jobs)
    job_list = _guarded(_jobs.job_list)
    job_by_run = _guarded(_jobs.job_by_run)
    find_job = _guarded(_jobs.find_job)

    # ingest.py: a job's counters in
    file_states = _guarded(_ingest.file_states)
    append = _guarded(_ingest.append)
    warm_up = _guarded(_ingest.warm_up)
    ingest = _guarded(_ingest.ingest)
    forget_ranks = _guarded(_ingest.forget_ranks)
    add_link_samples = _guarded(_ingest.add_link_samples)

    # queries.py: a job's data out
    ranks = _guarded(_queries.ranks)
    traffic = _guarded(_queries.traffic)
    traffic_matrix = _guarded(_queries.traffic_matrix)
    world_size = _guarded(_queries.world_size)
    last_seen_ns = _guarded(_queries.last_seen_ns)
    bytes_by_mem = _guarded(_queries.bytes_by_mem)
    op_stats = _guarded(_queries.op_stats)
    timeline = _guarded(_queries.timeline)
    link_samples = _guarded(_queries.link_samples)
    pvars = _guarded(_queries.pvars)
    cuda_activity = _guarded(_queries.cuda_activity)
    profile = _guarded(_queries.profile)

    # bench_runs.py: the results of `rankmap bench`
    save_bench_run = _guarded(_bench.save_bench_run)
    bench_runs = _guarded(_bench.bench_runs)
    bench_run = _guarded(_bench.bench_run)
    latest_bench_run = _guarded(_bench.latest_bench_run)

    # mappings.py
    save_mapping = _guarded(_mappings.save_mapping)
    latest_mapping = _guarded(_mappings.latest_mapping)

    def no_jobs_text(self) -> str:
        """What a verb says of a store with no job (it reads nothing: no guard)."""
        return _jobs.no_jobs_text(self.url)


def open_store(url: str | None = None, *, lazy: bool = False, existing: bool = False) -> Store:
    """Open (and create on first use) the store at ``url``, ``$RANKMAP_DB``, or the default SQLite file.

    ``lazy``: a store that cannot be reached now is still returned (not ready; its methods raise
    :class:`StoreUnavailable` until it answers, then check the schema), for a dashboard that must
    say the database is down, or a benchmark that must keep its results whatever the store does.
    ``existing``: for the verbs that only read (see :func:`rankmap.store.engine.connect`).
    """
    return Store(*_engine.connect(url, lazy=lazy, existing=existing))
