"""The store on both back ends it supports: a SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from pg import BACKENDS, pg_cluster  # noqa: F401  (session fixture)
from rankmap.errors import RankmapError
from rankmap.formats.record import PvarDef, TrafficRow
from rankmap.store import Batch, RankTotals, command_key, open_store
from rankmap.store.batch import TIMELINE_SLOTS, timeline_slot


def Row(peer: int, klass: str, operation: str, mem: str, direction: str, nbytes: int, messages: int) -> TrafficRow:
    """A reader row counted at the call."""
    return TrafficRow(peer, klass, operation, mem, direction, nbytes, messages, "call")


@dataclass
class FakeRecord(RankTotals):
    """A rank's totals as a record file of node0 would hold them (what Store.ingest reads)."""

    host: str | None = "node0"
    pid: int | None = 100
    start_ns: int | None = 0
    elapsed_ns: int = 1_000_000_000
    world_size: int = 4                 # not read by the store: the tests' own bookkeeping
    bucket_ns: int = 100_000_000


def ring(rank: int, n: int = 4, nbytes: int = 1000, msgs: int = 10, scale: int = 1) -> FakeRecord:
    """Rank r sends to r+1 and receives from r-1 (the receive rows must not count twice)."""
    return FakeRecord(
        world_rank=rank, world_size=n, pid=100 + rank,
        traffic=[Row((rank + 1) % n, "p2p", "MPI_Send", "host", "send", nbytes * scale, msgs * scale),
                 Row((rank - 1) % n, "p2p", "MPI_Recv", "host", "recv", nbytes * scale, msgs * scale)],
        histogram={"MPI_Send": [0, 0, 0, msgs * scale]},
        op_time={"MPI_Send": (msgs * scale, 5_000 * scale), "MPI_Recv": (msgs * scale, 7_000 * scale)},
        timeline=[(0, (rank + 1) % n, "p2p", nbytes * scale)],
    )


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        return open_store(f"sqlite:///{tmp_path / 'db' / 'rankmap.db'}")
    cluster = request.getfixturevalue("pg_cluster")
    return open_store(cluster.new_database())


def new_job(store, argv=("mpirun", "-np", "4", "./ring"), n=4):
    return store.create_job(list(argv), launcher="openmpi", world_size=n, run_dir="/tmp/run")


def test_ingest_gives_exact_matrix(store):
    jid = new_job(store)
    assert store.ingest(jid, [ring(r) for r in range(4)]) == 4
    m = store.traffic_matrix(jid)
    want = np.zeros((4, 4), dtype=np.int64)
    for r in range(4):
        want[r, (r + 1) % 4] = 1000
    assert m.dtype == np.int64
    assert (m == want).all()
    assert (store.traffic_matrix(jid, what="messages") == want // 100).all()
    rows = store.traffic(jid)
    assert rows[0] == {"src": 0, "dst": 1, "class": "p2p", "operation": "MPI_Send", "bytes": 1000, "messages": 10}
    assert len(rows) == 4


def test_reingest_replaces_a_rank_instead_of_adding(store):
    jid = new_job(store)
    store.ingest(jid, [ring(r) for r in range(4)])
    store.ingest(jid, [ring(0, scale=3)])          # rank 0's file grew: new cumulative totals
    store.ingest(jid, [ring(0, scale=3)])          # and was read again unchanged
    m = store.traffic_matrix(jid)
    assert m[0, 1] == 3000 and m[1, 2] == 1000 and m.sum() == 6000
    ops = [o for o in store.op_stats(jid) if o["rank"] == 0]
    assert {o["operation"]: (o["calls"], o["ns"]) for o in ops} == {"MPI_Send": (30, 15000), "MPI_Recv": (30, 21000)}
    assert [o["histogram"] for o in ops if o["operation"] == "MPI_Send"] == [[0, 0, 0, 30]]
    assert len([t for t in store.timeline(jid) if t["src"] == 0]) == 1
    r0 = [r for r in store.ranks(jid) if r["world_rank"] == 0]
    assert len(r0) == 1 and r0[0]["comm_ns"] == 36000


def test_sources_and_rma_direction(store):
    jid = new_job(store, n=2)
    mpi = FakeRecord(0, world_size=2, traffic=[
        Row(1, "rma", "MPI_Put", "host", "send", 64, 1),
        Row(1, "rma", "MPI_Get", "device", "recv", 32, 2),   # bytes from the target to the origin
    ])
    nccl = FakeRecord(0, source="nccl", world_size=2, traffic=[
        Row(1, "nccl", "ncclAllReduce", "device", "send", 4096, 1)])
    store.ingest(jid, [mpi, nccl])
    assert store.traffic_matrix(jid).tolist() == [[0, 4096 + 64], [32, 0]]
    assert store.traffic_matrix(jid, classes=["rma"]).tolist() == [[0, 64], [32, 0]]
    assert store.bytes_by_mem(jid) == {"host": 64, "device": 4096 + 32}
    assert {(r["world_rank"], r["source"]) for r in store.ranks(jid)} == {(0, "mpi"), (0, "nccl")}
    store.ingest(jid, [FakeRecord(0, source="nccl", world_size=2, traffic=[])])  # only NCCL's rows go
    assert store.traffic_matrix(jid).tolist() == [[0, 64], [32, 0]]


def test_pvars_per_rank_over_time(store):
    """MPI_T samples: one row per rank, variable and sample; a re-read file replaces its rank's."""
    jid = new_job(store, n=2)
    defs = {0: PvarDef(0, "unexpected_recvq_length", "level", "u64", True, 2),
            1: PvarDef(1, "time_in_progress", "timer", "f64", False, 1)}

    def rec(rank: int, samples: list) -> FakeRecord:
        r = FakeRecord(rank, world_size=2, traffic=[])
        r.pvar_defs, r.pvar_samples = defs, samples
        return r

    store.ingest(jid, [rec(0, [(0, 5, (1, 2)), (1, 5, (0.5,))]), rec(1, [(0, 7, (0, 4))])])
    store.ingest(jid, [rec(1, [(0, 7, (0, 4)), (0, 9, (2**63 + 1, 0))])])      # rank 1's file grew
    got = [(r["rank"], r["t_ns"], r["name"], r["class"], r["value"], r["values"]) for r in store.pvars(jid)]
    assert got == [(0, 5, "time_in_progress", "timer", 0.5, [0.5]),
                   (0, 5, "unexpected_recvq_length", "level", 3.0, [1, 2]),
                   (1, 7, "unexpected_recvq_length", "level", 4.0, [0, 4]),
                   (1, 9, "unexpected_recvq_length", "level", float(2**63 + 1), [2**63 + 1, 0])]
    assert [r["rank"] for r in store.pvars(jid, "time_in_progress")] == [0]
    assert json.loads(json.dumps(store.profile(jid)))["pvars"][1]["values"] == [1, 2]
    store.forget_ranks(jid, "mpi", [0])
    assert {r["rank"] for r in store.pvars(jid)} == {1}


def test_pair_source_of_each_row(store, tmp_path):
    """Where each row's pairs come from (the reader rows' label) is stored, summed apart, exported
    in the JSON profile and the CSV, and read back; rows without a label (7-tuples) keep NULL."""
    from rankmap.formats import traffic_csv
    from rankmap.report.export import to_csv
    jid = new_job(store, n=3)
    coll = lambda peer, n, label: TrafficRow(peer, "collective", "MPI_Allreduce", "host", "send", n, 1, label)
    mpi = FakeRecord(0, world_size=3, traffic=[Row(1, "p2p", "MPI_Send", "host", "send", 10, 1),
                                               coll(1, 100, "mirror"), coll(2, 7, "model"), coll(1, 5, "mirror")])
    nccl = FakeRecord(1, source="nccl", world_size=3, traffic=[
        TrafficRow(2, "nccl", "ncclAllReduce", "device", "send", 4096, 2, "mirror"),
        TrafficRow(0, "nccl", "ncclSend", "device", "send", 64, 1, "library"),
        TrafficRow(0, "nccl", "ncclAllReduce", "device", "recv", 4096, 2, "mirror")])   # receive view: not stored
    old = FakeRecord(2, world_size=3, traffic=[(0, "collective", "MPI_Bcast", "host", "send", 9, 1)])
    store.ingest(jid, [mpi, nccl, old])
    got = {(r["src"], r["dst"], r["operation"], r["pair_source"]): r["bytes"]
           for r in store.traffic(jid, by_pair_source=True)}
    assert got == {(0, 1, "MPI_Send", "call"): 10, (0, 1, "MPI_Allreduce", "mirror"): 105,
                   (0, 2, "MPI_Allreduce", "model"): 7, (1, 2, "ncclAllReduce", "mirror"): 4096,
                   (1, 0, "ncclSend", "library"): 64, (2, 0, "MPI_Bcast", None): 9}
    assert "pair_source" not in store.traffic(jid)[0]                    # summed over unless asked
    prof = json.loads(json.dumps(store.profile(jid)))
    assert {(t["operation"], t["pair_source"]) for t in prof["traffic"]} == {
        ("MPI_Send", "call"), ("MPI_Allreduce", "mirror"), ("MPI_Allreduce", "model"), ("ncclAllReduce", "mirror"),
        ("ncclSend", "library"), ("MPI_Bcast", None)}
    text = to_csv(store, jid, by_mem=True, pair_source=True)
    assert text.splitlines()[0] == "src,dst,class,operation,bytes,messages,mem,pair_source"
    assert "0,2,collective,MPI_Allreduce,7,1,host,model" in text.splitlines()
    f = tmp_path / "t.csv"
    f.write_text(text)
    t = traffic_csv.read(f)
    assert sorted(t.pair_source) == sorted(["call", "mirror", "model", "mirror", "library", ""])
    assert to_csv(store, jid).splitlines()[0] == "src,dst,class,operation,bytes,messages"


def test_job_lifecycle_and_resolution(store):
    with pytest.raises(RankmapError, match="no jobs"):
        store.resolve_job("latest")
    a = new_job(store)
    b = new_job(store)
    assert store.resolve_job("latest") == b
    assert store.resolve_job(str(a)) == a
    with pytest.raises(RankmapError, match="unknown job '999'"):
        store.resolve_job("999")
    with pytest.raises(RankmapError, match="unknown job 'x'"):
        store.resolve_job("x")
    j = store.job(a)
    assert j["exit_status"] is None and j["launcher"] == "openmpi" and j["world_size"] == 4
    assert j["command"] == "mpirun -np 4 ./ring" and j["created"].endswith("Z")
    store.ingest(a, [ring(r) for r in range(4)])
    store.finish_job(a, exit_status=0, elapsed_ns=123, meta={"note": "x"})
    j = store.job(a)
    assert j["exit_status"] == 0 and j["elapsed_ns"] == 123 and j["hosts"] == ["node0"]
    assert j["meta"]["note"] == "x" and j["ended"]
    assert [x["id"] for x in store.jobs()] == [b, a]


def test_find_job_takes_latest_successful_profile(store):
    argv = ["mpirun", "-np", "4", "./ring"]
    key = command_key(argv)
    assert store.find_job(key, 4) is None
    ok = new_job(store, argv)
    store.ingest(ok, [ring(r) for r in range(4)])
    store.finish_job(ok, exit_status=0)
    failed = new_job(store, argv)
    store.ingest(failed, [ring(r) for r in range(4)])
    store.finish_job(failed, exit_status=1)
    empty = new_job(store, argv)
    store.finish_job(empty, exit_status=0)         # nothing recorded: not a usable profile
    assert store.find_job(key, 4) == ok
    assert store.find_job(key, 8) is None
    assert store.find_job(command_key(["mpirun", "-np", "4", "./other"]), 4) is None


def test_mappings(store):
    jid = new_job(store)
    assert store.latest_mapping(command_key(["mpirun", "-np", "4", "./ring"]), 4) is None
    m1 = store.save_mapping({"version": 1, "ranks": [0, 1, 2, 3]}, job_id=jid, topology="dgx-h100",
                            max_before=2.0, avg_before=1.0, max_after=1.0, avg_after=0.5, optimal=True)
    m2 = store.save_mapping({"version": 1, "ranks": [3, 2, 1, 0]}, job_id=jid, topology="dgx-h100")
    got = store.latest_mapping(store.job(jid)["command_key"], 4)
    assert got["id"] == m2 and got["mapping"]["ranks"] == [3, 2, 1, 0] and got["job"] == jid
    got = store.latest_mapping(store.job(jid)["command_key"], 4, topology="other")
    assert got is None
    assert m1 < m2


def test_profile_is_json(store):
    jid = new_job(store)
    rec = ring(0)
    rec.problems = ["rank-0.mpi.rmrec: truncated record at offset 4096; kept what came before"]
    store.ingest(jid, [rec])
    store.add_link_samples(jid, [{"t_ns": 1, "device": 0, "link": "nvlink", "tx_bytes": 10, "rx_bytes": 20}])
    p = json.loads(json.dumps(store.profile(jid)))
    assert p["job"]["id"] == jid and p["problems"] == rec.problems
    assert p["traffic"][0]["mem"] == "host"
    assert p["link_samples"] == [{"t_ns": 1, "device": 0, "link": "nvlink", "tx_bytes": 10, "rx_bytes": 20}]
    assert p["timeline"] == [{"source": "mpi", "src": 0, "class": "p2p", "width": 1, "bucket": 0, "bytes": 1000}]


def test_default_location_and_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RANKMAP_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RANKMAP_DB", raising=False)
    s = open_store()
    assert (tmp_path / "home" / "rankmap.db").exists()
    assert s.url.endswith("home/rankmap.db")
    monkeypatch.setenv("RANKMAP_DB", f"sqlite:///{tmp_path / 'other.db'}")
    open_store()
    assert (tmp_path / "other.db").exists()


def test_bad_urls(tmp_path):
    with pytest.raises(RankmapError, match="not a database URL"):
        open_store("::nope")
    with pytest.raises(RankmapError, match="unsupported database"):
        open_store("mysql://x@localhost/db")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(RankmapError, match="cannot create the database directory"):
        open_store(f"sqlite:///{blocker / 'sub' / 'rankmap.db'}")
    with pytest.raises(RankmapError, match="cannot open the store postgresql"):
        open_store("postgresql://nobody@127.0.0.1:1/none")


def test_command_key_resolves_paths(tmp_path, monkeypatch):
    exe = tmp_path / "app"
    exe.write_text("")
    monkeypatch.chdir(tmp_path)
    assert command_key(["mpirun", "-np", "2", "./app"]) == command_key(["mpirun", "-np", "2", str(exe)])
    assert command_key(["mpirun", "-np", "2", "./app"]) != command_key(["mpirun", "-np", "4", "./app"])


def _open_at_once(args) -> str:
    url, barrier = args
    barrier.wait()
    try:
        open_store(url)
        return "ok"
    except RankmapError as e:
        return str(e)


def test_many_processes_open_a_new_store_at_once(tmp_path):
    """A new store opened by several processes at the same moment is created once, for all of them."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    for round_ in range(4):
        url = f"sqlite:///{tmp_path / f'race{round_}.db'}"
        with ctx.Manager() as m:
            barrier = m.Barrier(6)
            with ctx.Pool(6) as pool:
                results = pool.map(_open_at_once, [(url, barrier)] * 6)
        assert results == ["ok"] * 6
        assert open_store(url).jobs() == []


def test_append_adds_deltas_and_keeps_file_positions(store):
    """Deltas of several polls add up to the totals; each write says how far each file was read,
    and a second writer starting from an older position is refused instead of counting twice."""
    jid = new_job(store)
    for poll in range(3):
        b = Batch()
        for r in range(4):
            b.add(ring(r))                      # each poll: one more ring's worth of counters
            b.file(f"rank-{r}.mpi.rmrec", None if poll == 0 else 1000 * poll, 1000 * (poll + 1), {"poll": poll})
        assert store.append(jid, b) > 0
    m = store.traffic_matrix(jid)
    assert m[0, 1] == 3000 and m.sum() == 12000 and len(store.traffic(jid)) == 4
    ops = {(o["rank"], o["operation"]): (o["calls"], o["ns"], o["histogram"]) for o in store.op_stats(jid)}
    assert ops[(0, "MPI_Send")] == (30, 15000, [0, 0, 0, 30])
    assert {r["world_rank"]: r["comm_ns"] for r in store.ranks(jid)} == {r: 36000 for r in range(4)}
    assert [(t["bucket"], t["width"], t["bytes"]) for t in store.timeline(jid) if t["src"] == 0] == [(0, 1, 3000)]
    assert store.file_states(jid)["rank-2.mpi.rmrec"] == (3000, {"poll": 2})
    stale = Batch()
    stale.add(ring(0))
    stale.file("rank-0.mpi.rmrec", 1000, 2000, {})
    with pytest.raises(RankmapError, match="rank-0.mpi.rmrec of job .* was stored by another process"):
        store.append(jid, stale)
    assert store.traffic_matrix(jid)[0, 1] == 3000          # the refused batch left nothing behind


def test_timeline_rows_stay_bounded_and_exact(store):
    """A long job's timeline: recent buckets one by one, older ones merged into wider slots; every
    byte kept, and the number of rows grows with the log of the job's length, not the length."""
    jid = new_job(store, n=2)
    total = 0
    rows = []
    for chunk in range(40):                    # 40 writes of 2000 buckets each: 80 000 buckets
        b = Batch()
        tl = [(chunk * 2000 + i, 1, "p2p", 7 + (i % 3)) for i in range(2000)]
        total += sum(v for *_x, v in tl)
        b.add(FakeRecord(0, world_size=2, traffic=[], timeline=tl))
        store.append(jid, b)
        rows.append(len(store.timeline(jid)))
    got = store.timeline(jid)
    assert sum(t["bytes"] for t in got) == total
    newest = 40 * 2000 - 1
    for t in got:                              # every slot sits where timeline_slot puts it
        assert (t["width"], t["bucket"]) == timeline_slot(t["bucket"], newest), t
        assert t["bucket"] % t["width"] == 0
    assert [t["bucket"] for t in got if t["width"] == 1][-TIMELINE_SLOTS:] == list(range(newest - TIMELINE_SLOTS + 1, newest + 1))
    assert rows[-1] < 12 * TIMELINE_SLOTS and rows[-1] - rows[19] < 2 * TIMELINE_SLOTS   # not 80 000


def test_job_states(store, tmp_path):
    import subprocess
    import sys

    from rankmap.store import process_id

    jid = store.create_job(["a"], profiler=process_id())
    assert store.job(jid)["state"] == "running"             # this process streams it
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    ident = process_id(gone.pid)
    gone.wait()
    dead = store.create_job(["b"], profiler=ident)
    assert store.job(dead)["state"] == "incomplete"         # its profiler is gone
    assert store.settle_jobs() == [dead]
    store.finish_job(jid, exit_status=0)
    assert [j["state"] for j in store.jobs()] == ["incomplete", "finished"]
    failed = store.create_job(["c"], profiler=process_id())
    store.finish_job(failed, exit_status=127)                  # the state follows the exit status
    assert store.job(failed)["state"] == "failed"


def test_upgrade_from_version_3(store):
    """Version 3 stored every job that ended as finished, exit status 0 or not: opened by this
    rankmap, those that exited non-zero are failed, the others stay as they were."""
    import sqlalchemy as sa
    from rankmap.store import schema as S

    ids = {status: store.create_job([str(status)]) for status in (0, 5, None)}
    for status in (0, 5):
        store.finish_job(ids[status], exit_status=status)
    with store.engine.begin() as c:       # as version 3 left it
        c.execute(S.jobs.update().where(S.jobs.c.id == ids[5]).values(state="finished"))
        c.execute(S.meta_info.delete())
        c.execute(S.meta_info.insert().values(version=3))
    again = open_store(store.engine.url.render_as_string(hide_password=False))
    assert {s: again.job(i)["state"] for s, i in ids.items()} == {0: "finished", 5: "failed", None: "running"}
    with again.engine.connect() as c:
        assert c.execute(sa.select(sa.func.max(S.meta_info.c.version))).scalar() == 4


def test_upgrade_from_version_1(tmp_path):
    """A store written by rankmap's first schema opens (gaining the pair source column, the job
    states and the counters' keys), keeps its jobs, traffic and mappings, and takes appends afterwards."""
    import sqlite3
    from pathlib import Path

    db = tmp_path / "v1.db"
    con = sqlite3.connect(db)
    con.executescript((Path(__file__).parent / "data" / "store-v1.sql").read_text())
    con.close()
    store = open_store(f"sqlite:///{db}")
    assert [(j["id"], j["state"]) for j in store.jobs()] == [(2, "incomplete"), (1, "finished")]
    assert store.traffic_matrix(1).tolist() == [[0, 1000], [2000, 0]]
    assert [(t["src"], t["bucket"], t["width"], t["bytes"]) for t in store.timeline(1)] == \
        [(0, 0, 1, 600), (1, 0, 1, 1200), (0, 1, 1, 400), (1, 1, 1, 800)]
    b = Batch()
    b.add(ring(0, n=2))
    store.append(1, b)
    assert store.traffic_matrix(1)[0, 1] == 2000
    import sqlalchemy as sa
    from rankmap.store import schema as S
    with store.engine.connect() as c:
        assert c.execute(sa.select(sa.func.max(S.meta_info.c.version))).scalar() == S.SCHEMA_VERSION == 4
    # rows of version 1 carry no pair source; the appended ones say theirs
    assert {(r["src"], r["pair_source"]) for r in store.traffic(1, by_pair_source=True)} == \
        {(0, None), (1, None), (0, "call")}
    assert open_store(f"sqlite:///{db}").jobs()[1]["state"] == "finished"      # opened again: no second upgrade


def test_sqlite_commits_wait_for_no_fsync_unless_asked(tmp_path, monkeypatch):
    """A WAL store commits with synchronous=NORMAL (no fsync per commit, beside a running job);
    $RANKMAP_SQLITE_SYNCHRONOUS asks for another level, and a wrong one is a one-line error."""
    import sqlalchemy as sa

    from conftest import assert_one_line_error, rankmap

    def level(url: str) -> tuple[int, str]:
        with open_store(url).engine.connect() as c:
            return (c.execute(sa.text("PRAGMA synchronous")).scalar(),
                    c.execute(sa.text("PRAGMA journal_mode")).scalar())

    url = f"sqlite:///{tmp_path / 'a.db'}"
    assert level(url) == (1, "wal")                  # NORMAL
    monkeypatch.setenv("RANKMAP_SQLITE_SYNCHRONOUS", "full")
    assert level(url) == (2, "wal")
    p = rankmap("jobs", "--db", url, env={"RANKMAP_SQLITE_SYNCHRONOUS": "sometimes"})
    assert_one_line_error(p, "RANKMAP_SQLITE_SYNCHRONOUS=SOMETIMES", "NORMAL")
