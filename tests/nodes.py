"""Emulated nodes for the tests: a cluster of network namespaces (``rankmap.nodes.cluster``) and a
PostgreSQL server on its first node that is the store of jobs on all of them.

Skipped, in one line, where the nodes cannot be made (not root, namespaces refused): the probe
runs once per test session. Every cluster is removed at teardown, a failed test's too, and clusters
that killed test processes left behind are swept before a new one is made.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pg import PgCluster, new_cluster
from rankmap.nodes import cluster as N

ROOT = Path(__file__).resolve().parents[1]


def need_nodes() -> None:
    why = N.probe()
    if why:
        pytest.skip(why)


class NodePg(PgCluster):
    """A :class:`~pg.PgCluster` whose server runs on a node and listens on the node's address (and
    on its Unix socket, which this machine's processes reach through the shared file system)."""

    def __init__(self, bindir: Path, cluster: N.Cluster, node: int = 0):
        super().__init__(bindir)
        self.cluster, self.node = cluster, cluster.node(node)
        self.prefix = cluster.argv(node, self.prefix)     # the server's tools run on the node

    def start(self) -> None:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "--no-sync", "-E", "UTF8")
        net = self.node.addr.rsplit(".", 1)[0] + ".0/24"
        with open(self.data / "pg_hba.conf", "a") as f:      # the other nodes, over the bridge
            f.write(f"host all all {net} trust\n")
        self.resume()

    def resume(self) -> None:
        opts = f"-h {self.node.addr} -p {self.port} -k {self.tmp} -F"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l",
                  str(self.tmp / "log"), "-w", "-t", "60", "start")

    def url(self, db: str = "postgres") -> str:
        """The URL the nodes use (TCP over the bridge)."""
        return f"postgresql+psycopg://postgres@{self.node.addr}:{self.port}/{db}"

    def local_url(self, db: str = "postgres") -> str:
        """The same database through the Unix socket, for this machine's processes (the test)."""
        return f"postgresql+psycopg://postgres@/{db}?host={self.tmp}&port={self.port}"

    def admin_conninfo(self) -> str:
        return f"host={self.tmp} port={self.port} user=postgres dbname=postgres"

    def local(self, url: str) -> str:
        """The database of a :meth:`url` through the Unix socket, for this machine's processes (the
        test): the bridge has no address in this machine's own namespace."""
        return self.local_url(url.rsplit("/", 1)[1])


@pytest.fixture
def emulated_nodes():
    """A factory of emulated clusters: ``emulated_nodes(count, gbit=..., ...)``; all removed at teardown."""
    need_nodes()
    made: list[N.Cluster] = []

    def make(count: int = 2, **kw) -> N.Cluster:
        c = N.Cluster(count, **kw)
        made.append(c)
        return c.up()

    yield make
    for c in made:
        c.down()


def node_store(cluster: N.Cluster, node: int = 0):
    """A running :class:`NodePg` on ``node`` (the caller stops it), skipped without PostgreSQL."""
    pg = new_cluster()                       # skips without the server binaries; sweeps orphans
    srv = NodePg(pg.bindir, cluster, node)
    import shutil

    shutil.rmtree(pg.tmp, ignore_errors=True)
    try:
        srv.start()
    except BaseException:
        srv.stop()
        raise
    return srv


def rankmap_argv(*args: str) -> list[str]:
    """``rankmap ARGS`` as a node runs it: this Python (the checkout's environment), ``-m rankmap``."""
    return [sys.executable, "-m", "rankmap", *args]
