"""`rankmap bench` whose store does not take the results (a SQLite file another process holds locked, a
PostgreSQL server stopped while it measured): the results are printed, kept in a file, the exit is
non-zero with one line that says how to store them later, and that command stores them once."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bench_fixtures import bench_cache, bench_env, fake_cudart, fake_nccl  # noqa: F401  (fixtures)
from conftest import assert_one_line_error, rankmap
from pg import own_pg_cluster  # noqa: F401  (fixture)
from rankmap import cli
from rankmap.linkbench.rows import read_run
from rankmap.store import open_store

QUICK = ("--ops", "all_reduce,broadcast", "--sizes", "1K:4K", "--iters", "2", "--trials", "1", "--warmup", "0")
HOLDER = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
con.execute("COMMIT")
"""


@pytest.fixture
def nccl_env(bench_env, fake_cudart, fake_nccl):  # noqa: F811
    return dict(bench_env, RANKMAP_CUDART=str(fake_cudart), RANKMAP_NCCL_LIB=str(fake_nccl), FAKE_CUDA_DEVICES="2")


def kept_line(stderr: str) -> tuple[Path, list[str]]:
    """The error line's kept file and its command that stores it."""
    line = stderr.strip().splitlines()[-1]
    path = Path(line.split("; kept in ", 1)[1].split(": store them with: ", 1)[0])
    return path, shlex.split(line.split(": store them with: ", 1)[1])


def test_a_locked_sqlite_store_keeps_the_results(nccl_env, tmp_path):
    """Another process holds the store's file locked when the results are stored: nothing is lost."""
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}?timeout=0.5"
    open_store(url)                                         # the store exists: its schema is read, not written
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        p = rankmap("bench", "nccl", "--format", "json", *QUICK, "--db", url, env=nccl_env, timeout=300)
    finally:
        holder.communicate("", timeout=30)                  # the lock goes
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("bench nccl: measured NCCL all_reduce, broadcast"), p.stderr
    assert "stored as" not in lines[0]
    assert lines[1].startswith("rankmap: error: bench nccl results not stored: the store sqlite:///") \
        and "unreachable: database is locked; kept in " in lines[1], lines[1]
    printed = json.loads(p.stdout)                          # the figures are printed all the same
    assert "run_id" not in printed and len(printed["rows"]) == 6
    path, command = kept_line(p.stderr)
    assert path.parent == tmp_path / "home" / "bench" and read_run(path) == printed
    assert command == ["rankmap", "bench", "store", str(path), "--db", url]
    assert open_store(url).bench_runs() == []
    # the printed command, as printed, stores them; the kept file goes
    q = rankmap(*command[1:], env=nccl_env)
    assert q.returncode == 0, q.stderr
    assert q.stdout.strip() == (f"{path}: bench nccl run of {printed['created']} on {printed['host']} stored as "
                                f"bench run 1 (the kept file is removed)")
    assert not path.exists()
    s = rankmap("bench", "show", "latest", "--format", "json", "--db", url, env=nccl_env)
    assert s.returncode == 0, s.stderr
    shown = json.loads(s.stdout)
    assert shown["rows"] == printed["rows"] and shown["created"] == printed["created"] and shown["id"] == 1
    # the run is known by when it was measured: storing the printed JSON too keeps it once
    out = tmp_path / "printed.json"
    out.write_text(p.stdout)
    again = rankmap("bench", "store", str(out), "--db", url, env=nccl_env)
    assert again.returncode == 0 and again.stdout.strip().endswith("stored as bench run 1"), again.stdout
    assert out.exists() and len(open_store(url).bench_runs()) == 1


@pytest.mark.postgres
def test_postgresql_stopped_while_it_measures_keeps_the_results(nccl_env, own_pg_cluster, monkeypatch,  # noqa: F811
                                                                capsys):
    """The server answers when the benchmark starts and is gone when it ends (stopped by the run):
    the results are kept, and stored once the server is back."""
    import rankmap.linkbench.nccl as nccl

    pg = own_pg_cluster
    url = pg.new_database()
    for k, v in nccl_env.items():
        monkeypatch.setenv(k, v)
    measure = nccl.run

    def measure_then_stop(*args, **kw):
        run = measure(*args, **kw)
        pg.pause()
        return run

    monkeypatch.setattr(nccl, "run", measure_then_stop)
    rc = cli.main(["bench", "nccl", *QUICK, "--db", url])
    err = capsys.readouterr().err
    assert rc == 3 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("bench nccl: measured NCCL"), err
    assert lines[1].startswith("rankmap: error: bench nccl results not stored: the store postgresql+psycopg://") \
        and " is unreachable: " in lines[1], lines[1]
    path, command = kept_line(err)
    kept = read_run(path)
    assert [r["benchmark"] for r in kept["rows"]] == ["all_reduce"] * 3 + ["broadcast"] * 3
    pg.resume()
    assert command[:3] == ["rankmap", "bench", "store"]
    assert cli.main(command[1:]) == 0 and not path.exists()
    assert open_store(url).latest_bench_run("nccl")["rows"] == kept["rows"]


def test_a_store_down_from_the_start_is_said_at_once(nccl_env, tmp_path):
    """A server that does not answer when the benchmark starts: one warning, the benchmark runs, the results
    are kept; a --db that is no database URL at all is an error before anything is measured."""
    url = "postgresql://nobody@127.0.0.1:1/none"
    p = rankmap("bench", "nccl", *QUICK, "--db", url, env=nccl_env, timeout=300)
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines[0] == ("rankmap: warning: the store postgresql+psycopg://nobody@127.0.0.1:1/none does not answer "
                        "now; measuring anyway (the results are kept in a file if it still does not at the end)")
    assert len(lines) == 3 and lines[1].startswith("bench nccl: measured") and "kept in " in lines[2], p.stderr
    assert read_run(kept_line(p.stderr)[0])["kind"] == "nccl"
    assert_one_line_error(rankmap("bench", "nccl", *QUICK, "--db", "mysql://x/y", env=nccl_env),
                          "unsupported database")


def test_kept_files_are_read_with_care(nccl_env, tmp_path):
    """What `bench store` reads is checked: the file and the field at fault, in one line; nothing stored."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    good = {"format": "rankmap-bench", "version": 1, "kind": "p2p", "host": "h", "created": "2026-01-02T03:04:05.000006Z",
            "rows": [{"benchmark": "ce_write", "size": 8, "buffer": "device", "library": "cuda", "src": 0, "dst": 1,
                      "bandwidth_GBps": 1.5}]}
    cases = [("not json", "not JSON"), (json.dumps([1]), "format: expected 'rankmap-bench'"),
             (json.dumps(dict(good, version=9)), "version: 9 is not one this rankmap reads"),
             (json.dumps(dict(good, kind="disk")), "kind: 'disk' is not one of p2p, mpi, nccl"),
             (json.dumps(dict(good, created="yesterday")), "created: 'yesterday' is not an ISO 8601 time"),
             (json.dumps(dict(good, rows={})), "rows: expected a JSON list"),
             (json.dumps(dict(good, rows=[dict(good["rows"][0], size="8")])), "rows[0].size: missing or not a whole"),
             (json.dumps(dict(good, rows=[dict(good["rows"][0], src="0")])), "rows[0].src: expected a number")]
    for i, (text, needle) in enumerate(cases):
        f = tmp_path / f"bad{i}.json"
        f.write_text(text)
        assert_one_line_error(rankmap("bench", "store", str(f), "--db", db, env=nccl_env), str(f), needle)
    assert_one_line_error(rankmap("bench", "store", str(tmp_path / "none.json"), "--db", db, env=nccl_env),
                          "cannot read", "none.json")
    assert open_store(db).bench_runs() == []
    f = tmp_path / "good.json"
    f.write_text(json.dumps(good))
    p = rankmap("bench", "store", str(f), "--db", db, env=nccl_env)
    assert p.returncode == 0 and p.stdout.strip().endswith("stored as bench run 1"), p.stderr
    run = open_store(db).bench_run(1)
    assert run["created"] == good["created"] and run["rows"] == good["rows"] and f.exists()
