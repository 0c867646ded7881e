"""The fault matrix: one real MPI job per fault, through `rankmap profile` (and `rankmap ingest`
where the fault leaves the job unfinished in the store).

For every fault the test checks the four things a user relies on: rankmap's exit status is the
job's own (what the launcher returns without rankmap, or 128 + the signal that stopped it); the
one line that says what happened; the job's state in the store after `rankmap ingest`; and that
nothing recorded is lost: the bytes the store holds are exactly those of the record files.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, rankmap
from pg import own_pg_cluster  # noqa: F401  (fixture)
from rankmap.formats import record as R
from rankmap.store import open_store

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

OMPI = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np"]
MPICH = ["mpiexec.mpich", "-n"]


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    if not shutil.which("mpicc.openmpi"):
        pytest.skip("Open MPI (mpicc.openmpi) is not installed")
    d = tmp_path_factory.mktemp("fault_app")
    exe = d / "fault_app"
    subprocess.run(["mpicc.openmpi", "-O1", "-o", str(exe), str(ROOT / "tests" / "native" / "fault_app.c")],
                   check=True, capture_output=True)
    return exe


@pytest.fixture
def home(tmp_path) -> dict:
    return {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": f"sqlite:///{tmp_path / 'rankmap.db'}",
            "RANKMAP_STORE_WAIT": "3"}


def job_cmd(app: Path, iters: int, *crash: int, ranks: int = 2) -> list[str]:
    return OMPI + [str(ranks), str(app), str(iters), *map(str, crash)]


def recorded(run_dir: Path) -> dict[tuple[int, int], int]:
    """Bytes each rank sent each peer, as its record files hold them (the truth to compare with)."""
    out: dict[tuple[int, int], int] = {}
    for f in sorted(run_dir.glob("rank-*.mpi.rmrec")):
        rec = R.read(f)
        for r in rec.traffic:
            if r.direction == "send" and r.klass == "p2p":
                out[(rec.world_rank, r.peer)] = out.get((rec.world_rank, r.peer), 0) + r.bytes
    return out


def stored(url: str, job_id: int) -> dict[tuple[int, int], int]:
    return {(r["src"], r["dst"]): r["bytes"] for r in open_store(url).traffic(job_id, ["p2p"])}


def latest_run(home: dict) -> Path:
    return Path(sorted(glob.glob(home["RANKMAP_HOME"] + "/runs/*"))[-1])


def start(args: list[str], env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rankmap", *args], env=dict(os.environ, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def wait_for_traffic(url: str, timeout: float = 60) -> int:
    """The latest job's id once the store holds some of its traffic."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.3)
        try:
            s = open_store(url, existing=True)
            jid = s.resolve_job("latest")
            if s.traffic_matrix(jid).sum() > 0:
                return jid
        except Exception:   # noqa: BLE001 - the store is being made while we look
            continue
    raise AssertionError("no traffic reached the store")


def no_traceback(*texts: str) -> None:
    for t in texts:
        assert "Traceback" not in t, t


def test_killed_rank(app, home):
    """A rank aborts: rankmap exits with the launcher's own status, says the job failed and kept
    its records; `rankmap ingest` adds nothing and the job stays failed, every byte kept."""
    cmd = job_cmd(app, 200, 1, 100)
    own = subprocess.run(cmd, capture_output=True, timeout=120).returncode
    assert own != 0
    p = rankmap("profile", "--no-summary", "--flush-ms", "200", "--", *cmd, env=home, timeout=180)
    no_traceback(p.stderr)
    assert p.returncode == own, p.stderr
    assert f"job exited with status {own}; kept records up to last flush" in p.stderr
    rd = latest_run(home)
    i = rankmap("ingest", str(rd), env=home)
    assert i.returncode == 0 and "nothing new, state failed" in i.stdout, i.stdout + i.stderr
    jid = open_store(home["RANKMAP_DB"]).resolve_job("latest")
    truth = recorded(rd)
    assert truth and stored(home["RANKMAP_DB"], jid) == truth
    e = rankmap("export", "latest", env=home)
    assert e.returncode == 0 and f"job {jid} (the latest one) is failed (exit {own})" in e.stderr, e.stderr


@pytest.mark.parametrize("launcher", ["openmpi", "mpich"])
def test_sigint_to_rankmap_keeps_what_was_counted(app, home, tmp_path, launcher):
    """Ctrl-C: exit 130 (it exited 1, the status mpirun gives once told to stop), one line saying
    so, and what the ranks counted since their last flush kept: with a 30 s flush interval and the
    stop after a few seconds, everything in the store comes from the flush the signal made."""
    exe = app
    prefix = OMPI
    if launcher == "mpich":
        if not shutil.which("mpicc.mpich"):
            pytest.skip("MPICH is not installed")
        exe = tmp_path / "fault_app_mpich"
        subprocess.run(["mpicc.mpich", "-O1", "-o", str(exe), str(ROOT / "tests" / "native" / "fault_app.c")],
                       check=True, capture_output=True)
        prefix = MPICH
    proc = start(["profile", "--no-summary", "--flush-ms", "30000", "--", *prefix, "2", str(exe), "100000"], home)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(Path(home["RANKMAP_HOME"]).glob("runs/*/rank-1.mpi.rmrec")):
        time.sleep(0.2)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=90)
    no_traceback(err)
    assert proc.returncode == 130, err
    assert "job exited with status 130; kept records up to last flush" in err, err
    rd = latest_run(home)
    truth = recorded(rd)
    assert truth.get((0, 1), 0) >= 100_000, (truth, err)   # > 1 s of sending: 1000 bytes every 10 ms
    jid = open_store(home["RANKMAP_DB"]).resolve_job("latest")
    assert stored(home["RANKMAP_DB"], jid) == truth
    i = rankmap("ingest", str(rd), env=home)
    assert i.returncode == 0 and "state failed" in i.stdout, i.stdout
    assert open_store(home["RANKMAP_DB"]).job(jid)["exit_status"] == 130


def test_sigkill_to_rankmap_then_ingest(app, home):
    """rankmap killed outright: the job runs on to its end; `rankmap ingest` then stores the rest,
    and the job, whose every rank finalised, is finished (its exit status unknown), started when
    its job.json says, with every byte of the record files."""
    proc = start(["profile", "--no-summary", "--flush-ms", "200", "--", *job_cmd(app, 300)], home,
                 start_new_session=True)
    wait_for_traffic(home["RANKMAP_DB"])
    proc.kill()
    proc.communicate(timeout=30)
    rd = latest_run(home)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:        # the job goes on without rankmap: wait for its end
        files = sorted(rd.glob("rank-*.mpi.rmrec"))
        if len(files) == 2 and all(R.read(f, live=True).finalized for f in files):
            break
        time.sleep(0.3)
    i = rankmap("ingest", str(rd), env=home)
    no_traceback(i.stderr)
    assert i.returncode == 0, i.stderr
    assert "state finished (every rank finalised; exit status unknown" in i.stdout, i.stdout
    store = open_store(home["RANKMAP_DB"])
    jid = store.resolve_job("latest")
    job = store.job(jid)
    assert job["state"] == "finished" and job["exit_status"] is None
    assert job["created"].rstrip("Z")[:19] == json.loads((rd / "job.json").read_text())["start"][:19]
    truth = recorded(rd)
    assert truth == {(0, 1): 300_000, (1, 0): 300_000} == stored(home["RANKMAP_DB"], jid)


@pytest.mark.postgres
def test_postgresql_stopped_and_restarted(app, own_pg_cluster, tmp_path):
    """The server stops while the job runs and is still down when it ends: exit 0 (the job's), the
    outage said once, then the `rankmap ingest` command that completes it; with the server back,
    that command stores everything and the job is finished."""
    pg = own_pg_cluster
    url = pg.new_database()
    env = {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_STORE_WAIT": "2"}
    proc = start(["profile", "--no-summary", "--flush-ms", "200", "--db", url, "--", *job_cmd(app, 400)], env)
    wait_for_traffic(url)
    pg.pause()
    out, err = proc.communicate(timeout=180)
    no_traceback(err)
    assert proc.returncode == 0, err
    assert err.count("is unreachable") == 1, err
    line = [ln for ln in err.splitlines() if "complete it with: rankmap ingest" in ln]
    assert len(line) == 1, err
    pg.resume()
    rd = latest_run(env | {"RANKMAP_HOME": env["RANKMAP_HOME"]})
    i = rankmap("ingest", str(rd), "--db", url, env=env)
    assert i.returncode == 0 and "state finished" in i.stdout, i.stdout + i.stderr
    jid = open_store(url).resolve_job("latest")
    assert stored(url, jid) == recorded(rd) == {(0, 1): 400_000, (1, 0): 400_000}


def test_locked_sqlite_store_is_said(app, home, tmp_path):
    """Another process holds the SQLite store locked for 4 s as the job starts: rankmap says that it
    waits for the lock (it waited silently), then stores the job whole."""
    db = tmp_path / "rankmap.db"
    open_store(home["RANKMAP_DB"])                    # the store exists, its schema made
    holder = sqlite3.connect(db, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE rankmap_schema SET version = version")
    timer = threading.Timer(4, holder.commit)
    timer.start()
    try:
        p = rankmap("profile", "--no-summary", "--flush-ms", "200", "--", *job_cmd(app, 100), env=home, timeout=180)
    finally:
        timer.join()
        holder.close()
    no_traceback(p.stderr)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count(f"the store sqlite:///{db} is locked by another process; waiting up to 30 s") == 1, p.stderr
    store = open_store(home["RANKMAP_DB"])
    jid = store.resolve_job("latest")
    assert store.job(jid)["state"] == "finished"
    assert stored(home["RANKMAP_DB"], jid) == recorded(latest_run(home)) == {(0, 1): 100_000, (1, 0): 100_000}


def _bind_read_only(src: Path, dst: Path) -> None:
    dst.mkdir()
    r = subprocess.run(["mount", "--bind", str(src), str(dst)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot bind-mount here ({r.stderr.strip()})")
    r = subprocess.run(["mount", "-o", "remount,bind,ro", str(dst)], capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["umount", str(dst)])
        pytest.skip(f"cannot remount read-only here ({r.stderr.strip()})")


def test_read_only_store_directory_is_readable(app, home, tmp_path):
    """The store's folder mounted read-only (root can write anywhere else): jobs, show and export
    read it (they failed: "unable to open database file"), and a verb that stores says in one line
    why it cannot."""
    p = rankmap("profile", "--no-summary", "--", *job_cmd(app, 50), env=home, timeout=180)
    assert p.returncode == 0, p.stderr
    before = rankmap("export", "latest", env=home).stdout
    ro = tmp_path / "ro"
    _bind_read_only(tmp_path, ro)
    try:
        env = dict(home, RANKMAP_DB=f"sqlite:///{ro / 'rankmap.db'}")
        for verb in (["jobs"], ["show", "latest"], ["export", "latest"]):
            r = rankmap(*verb, env=env)
            no_traceback(r.stderr)
            assert r.returncode == 0, (verb, r.stderr)
        assert rankmap("export", "latest", env=env).stdout == before
        assert "finished" in rankmap("jobs", env=env).stdout
        i = rankmap("ingest", str(latest_run(home)), env=env)
        assert i.returncode == 2 and i.stderr.strip().splitlines() == [
            f"rankmap: error: the store sqlite:///{ro / 'rankmap.db'} is read-only (its file or folder cannot be "
            f"written): this verb stores; give it a store it can write with --db"], i.stderr
    finally:
        subprocess.run(["umount", str(ro)])


def test_full_disk(app, tmp_path):
    """The run directory and the store on a 1 MB file system that fills up while the job runs:
    exit 0 (the job's; it was 2), the `rankmap ingest` command that completes the job (it was
    missing), and once space is freed that command stores every byte the record files kept and
    the job is finished (job.json's end was written in the space it kept for it)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()})")
    try:
        url = f"sqlite:///{disk / 'rankmap.db'}"
        env = {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": url, "RANKMAP_STORE_WAIT": "2"}
        open_store(url)
        rd = disk / "run"
        proc = start(["profile", "--no-summary", "--flush-ms", "100", "--run-dir", str(rd), "--",
                      *job_cmd(app, 400)], env)
        wait_for_traffic(url)
        with open(disk / "filler", "wb") as f:          # the disk fills while the job runs
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        out, err = proc.communicate(timeout=180)
        no_traceback(err)
        assert proc.returncode == 0, err
        assert "No space left on device" in err
        hint = [ln for ln in err.splitlines() if "complete it with: rankmap ingest" in ln]
        assert len(hint) == 1, err
        assert json.loads((rd / "job.json").read_text())["exit_status"] == 0
        (disk / "filler").unlink()
        i = rankmap("ingest", str(rd), env=env)
        assert i.returncode == 0 and "state finished" in i.stdout, i.stdout + i.stderr
        jid = open_store(url).resolve_job("latest")
        truth = recorded(rd)
        assert sum(truth.values()) > 0 and stored(url, jid) == truth
    finally:
        subprocess.run(["umount", "-l", str(disk)])


def test_concurrent_jobs(app, home):
    """Two jobs profiled at once into one SQLite store: both finished, each with its own bytes."""
    procs = [start(["profile", "--no-summary", "--flush-ms", "200", "--", *job_cmd(app, n)], home)
             for n in (150, 250)]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outs):
        no_traceback(err)
        assert p.returncode == 0, err
    store = open_store(home["RANKMAP_DB"])
    jobs = store.jobs()
    assert len(jobs) == 2 and {j["state"] for j in jobs} == {"finished"}
    for j in jobs:
        rd = Path(j["run_dir"])
        n = json.loads((rd / "job.json").read_text())["command"][-1]
        assert stored(home["RANKMAP_DB"], j["id"]) == recorded(rd) == {(0, 1): int(n) * 1000, (1, 0): int(n) * 1000}
