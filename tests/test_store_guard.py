"""Every method of the store's face is behind the guard: a database that does not answer raises
StoreUnavailable (one line, the data kept by the caller) from each of them, never a driver's error."""

from __future__ import annotations

import sqlite3
import time

import pytest

from pg import own_pg_cluster  # noqa: F401  (fixture)
from rankmap.store import Batch, RankTotals, Store, StoreUnavailable, open_store


def guarded_methods() -> set[str]:
    return {name for name, v in vars(Store).items() if getattr(v, "guarded", False)}


def calls(jid: int) -> dict[str, tuple[tuple, dict]]:
    """One call of each method of the face that asks the database something."""
    j = (jid,)
    return {
        "ensure_schema": ((), {}),
        "create_job": ((["mpirun", "./a"],), {}), "finish_job": (j, {"exit_status": 0}),
        "update_job_meta": ((jid, {"k": 1}), {}), "settle_jobs": ((), {}), "resolve_job": (("latest",), {}),
        "job": (j, {}), "jobs": ((), {}), "job_list": ((), {}), "job_by_run": (("uid",), {}),
        "find_job": (("key", 2), {}),
        "file_states": (j, {}), "append": ((jid, Batch()), {}), "warm_up": (j, {}),
        "ingest": ((jid, [RankTotals(0, [(1, "p2p", "MPI_Send", "host", "send", 8, 1)])]), {}),
        "forget_ranks": ((jid, "mpi", [0]), {}),
        "add_link_samples": ((jid, [{"t_ns": 1, "device": 0, "link": "nvlink", "tx_bytes": 1, "rx_bytes": 2}]), {}),
        "ranks": (j, {}), "traffic": (j, {}), "traffic_matrix": (j, {}), "world_size": (j, {}),
        "last_seen_ns": (j, {}), "bytes_by_mem": (j, {}), "op_stats": (j, {}), "timeline": (j, {}),
        "link_samples": (j, {}), "pvars": (j, {}), "cuda_activity": (j, {}), "profile": (j, {}),
        "save_bench_run": (({"kind": "p2p", "host": "h", "rows": [{"benchmark": "ce_write", "size": 8,
                                                                    "buffer": "device", "library": "cuda"}]},), {}),
        "bench_runs": ((), {}), "bench_run": ((1,), {}), "latest_bench_run": (("p2p",), {}),
        "save_mapping": (({"format": "rankmap-mapping"},), {"key": "key", "world_size": 2}),
        "latest_mapping": (("key", 2), {}),
    }


def test_every_public_method_is_guarded():
    """The face's methods are the guarded ones, but for the one that reads nothing; and each has
    a call below (a method added later gets one, and with it the outage test)."""
    public = {n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))}
    assert public - guarded_methods() == {"no_jobs_text", "guard", "statement"}
    assert set(calls(1)) == guarded_methods()


@pytest.mark.postgres
def test_postgresql_stopped_every_method_says_so(own_pg_cluster):  # noqa: F811
    pg = own_pg_cluster
    url = pg.new_database()
    store = open_store(url)
    jid = store.create_job(["mpirun", "./a"], world_size=2)
    assert store.job(jid)["state"] == "running"
    pg.pause()
    try:
        away = open_store(url, lazy=True)           # opened while it is away: not ready
        assert not away.ready
        for name, (args, kw) in calls(jid).items():
            for st in (store, away) if name != "ensure_schema" else (away,):     # a ready store has nothing to check
                with pytest.raises(StoreUnavailable) as e:
                    getattr(st, name)(*args, **kw)
                text = str(e.value)
                assert text.startswith("the store postgresql+psycopg://") and "unreachable" in text, (name, text)
                assert "\n" not in text, (name, text)
    finally:
        pg.resume()
    assert store.job(jid)["state"] == "running"      # back: the same store answers again
    assert away.job_list()[0]["id"] == jid and away.ready


def test_a_locked_sqlite_store_refuses_writes_in_its_busy_wait(tmp_path):
    """Another process holds the file locked: every write gives up after the URL's ?timeout= and
    says so; reads go on (WAL)."""
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}?timeout=0.2"
    store = open_store(url)
    jid = store.create_job(["mpirun", "./a"], world_size=2)
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    try:
        for name in ("create_job", "finish_job", "update_job_meta", "append", "ingest", "forget_ranks",
                     "add_link_samples", "save_bench_run", "save_mapping"):
            args, kw = calls(jid)[name]
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailable, match="unreachable: database is locked"):
                getattr(store, name)(*args, **kw)
            assert time.monotonic() - t0 < 10, name         # the URL's 0.2 s, not the default 30 s
        assert store.job(jid)["state"] == "running" and store.bench_runs() == []
    finally:
        con.execute("COMMIT")
        con.close()
    assert store.save_bench_run(calls(jid)["save_bench_run"][0][0]) == 1
