"""Incremental ingest of real MPI jobs: `rankmap ingest` of a run directory, store outages, job states."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, rankmap
from pg import own_pg_cluster  # noqa: F401  (fixture)

MPIRUN = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    """examples/mpi/pairs_every_ms.c built with Open MPI."""
    if not shutil.which("mpicc.openmpi"):
        pytest.skip("Open MPI (mpicc.openmpi) is not installed")
    out = tmp_path_factory.mktemp("pairs") / "pairs_every_ms"
    subprocess.run(["mpicc.openmpi", "-O2", "-o", str(out), str(ROOT / "examples" / "mpi" / "pairs_every_ms.c")],
                   check=True)
    return out


def matrix(csv_text: str, n: int) -> list[list[int]]:
    m = [[0] * n for _ in range(n)]
    for r in csv.DictReader(io.StringIO(csv_text)):
        m[int(r["src"])][int(r["dst"])] += int(r["bytes"])
    return m


def expected(n: int, nbytes: int, rounds: int) -> list[list[int]]:
    return [[0 if i == j else nbytes * rounds for j in range(n)] for i in range(n)]


@pytest.mark.mpi
@pytest.mark.slow
def test_ingest_of_a_run_directory_matches_the_streamed_job(pairs, tmp_path):
    """A streamed job and the same run directory ingested into a fresh store export the same
    matrix, exactly; ingesting again adds nothing; a wrong directory is one line."""
    n, nbytes, rounds = 4, 1024, 300
    env = {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": f"sqlite:///{tmp_path / 'a.db'}"}
    p = rankmap("profile", "--no-summary", "--flush-ms", "100", "--bucket-ms", "10", "--",
                *MPIRUN, str(n), str(pairs), str(nbytes), str(rounds), "1000", env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    streamed = rankmap("export", "latest", env=env).stdout
    assert matrix(streamed, n) == expected(n, nbytes, rounds)
    jobs = json.loads(rankmap("jobs", "--format", "json", env=env).stdout)
    assert jobs[0]["state"] == "finished" and jobs[0]["bytes"] == n * (n - 1) * nbytes * rounds
    run_dir = jobs[0]["run_dir"]

    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    for attempt in range(2):
        q = rankmap("ingest", run_dir, "--db", fresh, env=env)
        assert q.returncode == 0, q.stderr
        assert ("created" if attempt == 0 else "completed") in q.stdout and "state finished" in q.stdout
        assert ("nothing new" in q.stdout) == (attempt == 1), q.stdout     # "adds nothing", and says so
        assert rankmap("export", "latest", "--db", fresh, env=env).stdout == streamed
    again = json.loads(rankmap("jobs", "--format", "json", "--db", fresh, env=env).stdout)
    assert len(again) == 1 and again[0]["state"] == "finished" and again[0]["exit_status"] == 0
    table = rankmap("jobs", "--db", fresh, env=env)               # the table a person reads
    assert table.returncode == 0, table.stderr
    cells = [[c.strip() for c in line.strip().strip("│").split("│")] for line in table.stdout.splitlines()]
    assert [str(again[0]["id"]), "finished", str(n)] in [c[:3] for c in cells], table.stdout
    assert "mpirun.openmpi" in table.stdout
    # the streamed store too: ingesting its own run directory again changes nothing
    assert rankmap("ingest", run_dir, env=env).returncode == 0
    assert rankmap("export", "latest", env=env).stdout == streamed
    assert_one_line_error(rankmap("ingest", str(tmp_path), "--db", fresh, env=env), "is not a run directory")
    assert_one_line_error(rankmap("ingest", str(tmp_path / "nope"), "--db", fresh, env=env), "does not exist")


def stored_rows(url: str) -> dict[str, list[tuple]]:
    """Every row the store's only job has, table by table, sorted (the job's id and row ids left out)."""
    import sqlalchemy as sa

    from rankmap.store import open_store
    from rankmap.store import schema as S

    store = open_store(url)
    try:
        with store.engine.connect() as c:
            (jid,) = c.execute(sa.select(S.jobs.c.id)).scalars().all()
            out = {}
            for t in S.metadata.sorted_tables:
                if "job" in t.c and t.name != "jobs":
                    cols = [col for col in t.c if col.name not in ("job", "id")]
                    out[t.name] = sorted((tuple(json.dumps(v, sort_keys=True) for v in row)
                                          for row in c.execute(sa.select(*cols).where(t.c.job == jid))))
            return out
    finally:
        store.engine.dispose()


@pytest.mark.mpi
def test_a_streamed_job_stores_the_rows_of_a_one_shot_ingest(pairs, tmp_path):
    """Every row a job streamed while it ran (many small cycles, the timeline's older slots merged
    as it grew) is the row `rankmap ingest` stores from the same run directory in one go."""
    n = 4
    env = {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": f"sqlite:///{tmp_path / 'streamed.db'}"}
    p = rankmap("profile", "--no-summary", "--flush-ms", "100", "--bucket-ms", "10", "--",
                *MPIRUN, str(n), str(pairs), "512", "3000", "1000", env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    job = json.loads(rankmap("export", "latest", "--format", "json", env=env).stdout)["job"]
    # streamed, not stored at the end: cycles before the final one (a loaded machine leaves fewer)
    assert job["meta"]["ingest_cycles"] >= 3, job["meta"]
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    q = rankmap("ingest", job["run_dir"], "--db", fresh, env=env)
    assert q.returncode == 0, q.stderr
    streamed, once = stored_rows(env["RANKMAP_DB"]), stored_rows(fresh)
    assert len(streamed["traffic"]) >= n * (n - 1) and len(streamed["timeline"]) > 0
    assert len(streamed["ingest_files"]) == n and len(streamed["ranks"]) == n
    for table in once:
        assert streamed[table] == once[table], table


def test_a_cycle_with_nothing_new_writes_only_the_heartbeat_when_due(tmp_path):
    """The profile's streaming cycle: the statements prepared before the job store nothing; a cycle
    that finds nothing new leaves the store alone, until the heartbeat is due."""
    from rankmap.pipeline.ingest import MAX_GAP_S, RunIngest
    from rankmap.pipeline.profile import _Streamer
    from rankmap.store import open_store, process_id

    url = f"sqlite:///{tmp_path / 's.db'}"
    store = open_store(url)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    jid = store.create_job(["x"], run_dir=run_dir, profiler=process_id())
    ing = RunIngest(store, jid, run_dir, resume=False)
    ing.warm_up()
    assert all(rows == [] for rows in stored_rows(url).values())
    beat = store.job(jid)["heartbeat"]
    streamer = _Streamer(ing, interval=0.2)
    time.sleep(0.01)
    assert streamer.cycle(final=False) and store.job(jid)["heartbeat"] == beat
    streamer.written -= MAX_GAP_S
    assert streamer.cycle(final=False) and store.job(jid)["heartbeat"] > beat
    store.engine.dispose()


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.postgres
def test_postgresql_stopped_in_the_middle_of_a_job(pairs, own_pg_cluster, tmp_path):
    """The database goes away while a real MPI job runs: the job runs on and rankmap exits with its
    status, says once what happened and how to complete it, the job shows as incomplete, and
    `rankmap ingest` brings in every byte."""
    pg = own_pg_cluster
    url = pg.new_database()
    n, nbytes, rounds, status = 4, 1024, 6000, 5
    env = dict(__import__("os").environ, RANKMAP_HOME=str(tmp_path / "home"), RANKMAP_STORE_WAIT="3")
    env.pop("RANKMAP_DB", None)
    run_dir = tmp_path / "run"
    job = subprocess.Popen([sys.executable, "-m", "rankmap", "profile", "--no-summary", "--db", url, "--flush-ms",
                            "200", "--run-dir", str(run_dir), "--", *MPIRUN, str(n), str(pairs), str(nbytes),
                            str(rounds), "1000", str(status)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:          # something stored: the job is well under way
            p = rankmap("jobs", "--format", "json", "--db", url, env=env)
            rows = json.loads(p.stdout) if p.returncode == 0 else []
            if rows and rows[0]["bytes"] > 0:
                break
            time.sleep(0.5)
        else:
            pytest.fail("nothing was stored within 120 s")
        assert job.poll() is None, "the job ended before the database could be stopped: make it longer"
        pg.pause()
        out, err = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == status, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("rankmap:")]
    assert len([line for line in lines if "is unreachable" in line]) == 1, err
    completes = [line for line in lines if "rankmap ingest" in line]
    assert len(completes) == 1 and f"rankmap ingest {run_dir} --db {url}" in completes[0], err

    pg.resume()
    rows = json.loads(rankmap("jobs", "--format", "json", "--db", url, env=env).stdout)
    assert rows[0]["state"] == "incomplete" and rows[0]["bytes"] < n * (n - 1) * nbytes * rounds
    cmd = completes[0].split("complete it with: ", 1)[1].split()
    assert cmd[:2] == ["rankmap", "ingest"]
    q = rankmap(*cmd[1:], env=env)
    assert q.returncode == 0, q.stderr
    rows = json.loads(rankmap("jobs", "--format", "json", "--db", url, env=env).stdout)
    assert (rows[0]["state"], rows[0]["exit_status"]) == ("failed", status)     # it exited non-zero
    assert matrix(rankmap("export", "latest", "--db", url, env=env).stdout, n) == expected(n, nbytes, rounds)


def test_jobs_limit_below_one_is_one_line(tmp_path):
    env = {"RANKMAP_HOME": str(tmp_path)}
    assert_one_line_error(rankmap("jobs", "--limit", "-1", env=env), "--limit must be at least 1, got -1")
    assert_one_line_error(rankmap("jobs", "--limit", "0", "--format", "json", env=env), "--limit")


def test_jobs_of_an_empty_store_says_so(tmp_path):
    """An empty store printed a table with no rows; it says there is nothing yet, and how to add a job."""
    from rankmap.store import open_store

    env = {"RANKMAP_HOME": str(tmp_path), "RANKMAP_DB": f"sqlite:///{tmp_path / 'r.db'}"}
    open_store(env["RANKMAP_DB"])           # a store with no job in it
    p = rankmap("jobs", env=env)
    assert (p.returncode, p.stdout, p.stderr) == (0, f"no jobs in sqlite:///{tmp_path / 'r.db'} yet: run "
                                                     f"`rankmap profile -- <command>` first\n", "")
    assert json.loads(rankmap("jobs", "--format", "json", env=env).stdout) == []


def test_ingest_refuses_a_job_that_is_still_streamed(tmp_path):
    from rankmap.capture.rundir import make_run_dir
    from rankmap.errors import RankmapError
    from rankmap.pipeline.ingest import ingest_run
    from rankmap.store import open_store, process_id

    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    rd = make_run_dir(tmp_path / "run")
    jid = store.create_job(["x"], run_uid="abc", profiler=process_id(), run_dir=rd.path)
    rd.write_job({"run_uid": "abc", "job_id": jid, "command": ["x"]})
    with pytest.raises(RankmapError, match=f"job {jid} is still being profiled"):
        ingest_run(rd.path, store)


@pytest.mark.mpi
@pytest.mark.slow
def test_a_locked_sqlite_store_delays_the_ingest_and_loses_nothing(pairs, tmp_path, monkeypatch):
    """Another process holds the SQLite file locked during a real MPI job until rankmap has met the
    lock: the job runs on, rankmap says once (while the job still runs) that the store is locked,
    retries, and stores every byte once the lock is gone; the job ends finished with its own status.

    The lock is held until rankmap says it met it, not for a fixed time: the ingest's pace follows
    its own CPU cost (1 % of a core), so on a loaded machine one cycle could wait out a fixed lock
    (or the whole job) and never meet it. For the same reason the ingest here keeps the flush pace,
    so it meets the lock while the job runs."""
    import sqlite3
    import threading

    import rankmap.pipeline.profile as profile_mod
    import rankmap.store as store_mod
    import rankmap.store.engine as engine_mod
    from rankmap.pipeline.profile import profile_command

    monkeypatch.setattr(engine_mod, "SQLITE_BUSY_S", 0.2)      # give up waiting on the lock quickly
    monkeypatch.setattr(profile_mod, "next_wait", lambda spent_cpu_s, interval_s: interval_s)
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    store = store_mod.open_store(url)
    n, nbytes, rounds, status = 4, 1024, 6000, 3
    held, met = threading.Event(), threading.Event()
    said: list[str] = []
    job_ended_when_met: list[bool] = []

    def warn(message: str) -> None:
        said.append(message)
        if "database is locked" in message and not met.is_set():
            job_ended_when_met.append("end" in json.loads((tmp_path / "run" / "job.json").read_text()))
            met.set()

    def lock_while_it_streams() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            rows = store.job_list(1)
            if rows and rows[0]["bytes"] > 0:
                break
            time.sleep(0.2)
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        held.set()
        met.wait(60)    # until rankmap has met the lock (bounded: a test that never meets it fails below)
        time.sleep(1)   # and a little longer, so a retry meets it too and is not said again
        con.execute("COMMIT")
        con.close()

    locker = threading.Thread(target=lock_while_it_streams)
    locker.start()
    try:
        res = profile_command([*MPIRUN, str(n), str(pairs), str(nbytes), str(rounds), "1000", str(status)],
                              store=url, flush_ms=200, progress=False, run_dir=tmp_path / "run", nccl="off",
                              cuda="off", link_sampler=False, warn=warn, store_wait_s=60)
    finally:
        locker.join()
    assert held.is_set() and met.is_set(), said
    assert job_ended_when_met == [False], said   # met while the job ran, not only by the final write
    assert res.exit_status == status and res.stored, said
    locked = [m for m in said if "database is locked" in m]
    assert len(locked) == 1 and f"job {res.job_id} goes on" in locked[0], said
    assert not [m for m in said if "rankmap ingest" in m], said
    job = store.job(res.job_id)
    assert (job["state"], job["exit_status"], job["meta"]["store_outages"]) == ("failed", status, 1)
    assert store.traffic_matrix(res.job_id).tolist() == expected(n, nbytes, rounds)
