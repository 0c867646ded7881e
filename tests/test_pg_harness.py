"""The PostgreSQL harness of the tests (tests/pg.py) cleans up after a test process that died before
its teardown: its server keeps running on its own, and the next cluster made stops and removes it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

import pg
from pg import pg_cluster  # noqa: F401  (session fixture)

HERE = Path(__file__).resolve().parent

ORPHAN = """
import os, sys
sys.path.insert(0, sys.argv[1])
import pg
c = pg.new_cluster()
c.start()
print(c.tmp, c.port, flush=True)
os._exit(0)          # no teardown: the server is left running, as after a killed test run
"""

pytestmark = pytest.mark.postgres


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_dead_test_process_leaves_no_server_behind():
    bindir = pg._bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries are absent")
    p = subprocess.run([sys.executable, "-c", ORPHAN, str(HERE)], capture_output=True, text=True, timeout=180)
    if p.returncode != 0 and "Skipped" in p.stderr:
        pytest.skip(p.stderr.strip().splitlines()[-1])
    assert p.returncode == 0, p.stderr
    tmp, port = p.stdout.split()
    tmp, port = Path(tmp), int(port)
    try:
        assert _accepts(port) and (tmp / "data" / "postmaster.pid").exists()
        # swept here, or by a cluster another test process made meanwhile (the same sweep)
        assert tmp in pg.sweep_orphans(bindir) or not tmp.exists()
        assert not tmp.exists() and not _accepts(port)
    finally:
        if tmp.exists():                      # the sweep failed: do not leak it ourselves
            subprocess.run(["pkill", "-f", f"postgres -D {tmp}"], capture_output=True)


def test_a_live_owners_cluster_is_left_alone(pg_cluster):
    bindir = pg._bindir()
    assert pg_cluster.tmp not in pg.sweep_orphans(bindir)
    assert _accepts(pg_cluster.port)

