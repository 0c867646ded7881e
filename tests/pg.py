"""A throwaway PostgreSQL cluster for the store tests: real server, temp data dir, gone at teardown.

The server binaries come from the distribution's ``/usr/lib/postgresql/<ver>/bin``. ``initdb`` and
``pg_ctl`` refuse to run as root, so when the tests run as root the cluster belongs to the
``postgres`` (or ``nobody``) user and the tools run through ``runuser``.

A test process killed before its teardown (a timeout, ^C twice) leaves its server running, and the
server does not notice: each cluster directory names the process that made it (``owner``), and
making a new cluster first stops and removes those whose owner is gone.
"""

from __future__ import annotations

import glob
import os
import time
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

import needs
from rankmap.store import process_alive, process_id

#: the two store backends, for a test or fixture parametrized over them: the PostgreSQL one is marked
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _bindir() -> Path | None:
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(cands[-1]).parent if cands else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.prefix: list[str] = []
        self.user = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    self.user = pwd.getpwnam(name)
                    break
                except KeyError:
                    continue
            if self.user is None:
                pytest.skip("running as root and neither user 'postgres' nor 'nobody' exists for initdb")
            self.prefix = ["runuser", "-u", self.user.pw_name, "--"]
        self.tmp = Path(tempfile.mkdtemp(prefix=PREFIX))
        (self.tmp / "owner").write_text(process_id())
        self.data = self.tmp / "data"
        self.port = _free_port()
        if self.user is not None:
            os.chown(self.tmp, self.user.pw_uid, self.user.pw_gid)

    def _run(self, *args: str) -> None:
        p = subprocess.run(self.prefix + list(args), capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {p.stdout}{p.stderr}")

    def start(self) -> None:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "--no-sync", "-E", "UTF8")
        for tries_left in (2, 1, 0):
            try:
                return self.resume()
            except RuntimeError:
                # the free port was taken before the server bound it (another test process asked too)
                log = (self.tmp / "log").read_text(errors="replace") if (self.tmp / "log").exists() else ""
                if not tries_left or "already in use" not in log:
                    raise
                self.port = _free_port()

    def pause(self) -> None:
        """Stop the server the way an outage would (clients cut off), keeping its data."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.tmp} -F"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l",
                  str(self.tmp / "log"), "-w", "-t", "60", "start")

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except RuntimeError:        # not running (paused by the test)
            pass
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{db}"

    def admin_conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def new_database(self) -> str:
        """A fresh, empty database in the cluster; returns its URL."""
        import psycopg
        needs.note("postgres")           # the session's cluster, started for an earlier test: this one uses it too
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.admin_conninfo(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


PREFIX = "rankmap-pg-"
ORPHAN_AGE_S = 6 * 3600        # a directory whose owner cannot be told (older code): orphaned once this old


def sweep_orphans(bindir: Path) -> list[Path]:
    """Stop and remove the clusters whose owning test process is gone; returns their directories."""
    gone = []
    for d in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            owner = d / "owner"
            # the owner as the store names its profilers: host, pid and start time (a reused pid is not it)
            alive = process_alive(owner.read_text().strip()) if owner.exists() else None
            if alive is None:
                alive = time.time() - d.stat().st_mtime < ORPHAN_AGE_S
            if alive:
                continue
        except OSError:
            continue
        if (d / "data" / "postmaster.pid").exists():
            prefix = []
            if os.geteuid() == 0 and d.stat().st_uid != 0:
                prefix = ["runuser", "-u", pwd.getpwuid(d.stat().st_uid).pw_name, "--"]
            subprocess.run(prefix + [str(bindir / "pg_ctl"), "-D", str(d / "data"), "-m", "immediate", "-w",
                                     "stop"], capture_output=True, timeout=60)
        shutil.rmtree(d, ignore_errors=True)
        gone.append(d)
    return gone


def new_cluster() -> PgCluster:
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries are absent (/usr/lib/postgresql/*/bin): "
                    "scripts/bootstrap --test installs them")
    sweep_orphans(bindir)
    return PgCluster(bindir)


def _running():
    cluster = new_cluster()
    try:
        cluster.start()           # inside: a start that fails half way still gets its stop
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_cluster():
    yield from _running()


@pytest.fixture
def own_pg_cluster():
    """A cluster of the test's own, which it may stop and start again."""
    yield from _running()
