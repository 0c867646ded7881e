"""`rankmap run` through torchrun, srun and hydra, on one node and on a simulated two-node allocation.

torchrun and srun are the stand-ins of tests/data/launchers (they start the ranks on this machine
with the environment the real launchers give them: torchrun's LOCAL_RANK/RANK/GROUP_RANK, Slurm's
SLURM_PROCID/SLURMD_NODENAME with --distribution=arbitrary honoured); hydra is MPICH's real mpiexec
with its fork launcher, which starts the proxies of named hosts on this machine and tells each
process its host. A real torch.distributed.run is used too where torch is installed.
"""

from __future__ import annotations

import json
import shlex
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import assert_one_line_error, rankmap
from rankmap.capture import launchers as L
from rankmap.formats import mapping_json
from rankmap.mapping import execwrap, launch

LAUNCHERS = Path(__file__).parent / "data" / "launchers"
MPIEXEC_MPICH = shutil.which("mpiexec.mpich")

# the rank the GPU check runs too: it prints "WORKER {json}" of where it runs
WORKER = Path(__file__).resolve().parent.parent / "gpu" / "placed_worker.py"


def doc(node_of: list[int], gpu_of: list[int], nodes: int) -> dict:
    """A mapping on dgx1-v100 nodes (8 GPUs): CPU 0 or 1 by parity of the GPU, NIC by GPU pair."""
    ranks = {str(r): {"node": u, "gpu": g, "uuid": f"GPU-{u}-{g}", "cpus": str(g % 2), "numa": g // 4,
                      "nic": f"nic{g // 2}", "netdev": f"mlx5_{g // 2}"} for r, (u, g) in enumerate(zip(node_of, gpu_of))}
    return {"format": "rankmap-mapping", "version": 1, "world_size": len(node_of), "topology": "dgx1-v100",
            "nodes": nodes, "gpus_per_node": 8, "ranks_per_gpu": 1, "mapping": ranks}


@pytest.fixture
def setup(tmp_path):
    worker = WORKER
    env = {"PATH": f"{LAUNCHERS}{os.pathsep}{os.environ['PATH']}", "RANKMAP_HOME": str(tmp_path / "home"),
           "RANKMAP_DB": f"sqlite:///{tmp_path / 'r.db'}"}
    return tmp_path, worker, env


def write_mapping(tmp_path: Path, d: dict) -> Path:
    f = tmp_path / "m.json"
    f.write_text(json.dumps(d))
    return f


def seen(*outputs: str) -> dict[int, dict]:
    """World rank -> what the worker of that rank reported, from the launches' output."""
    recs = [json.loads(l[len("WORKER "):]) for o in outputs for l in o.splitlines() if l.startswith("WORKER ")]
    return {r["world_rank"]: r for r in recs}


def check_binding(rec: dict, e: dict, device: int) -> None:
    """The worker runs on the mapped GPU (as device ``device``), CPUs and NIC."""
    vis = rec["CUDA_VISIBLE_DEVICES"].split(",")
    assert vis[device] == str(e["gpu"]) and rec["RANKMAP_DEVICE"] == str(device)
    assert rec["NCCL_IB_HCA"] == e["netdev"] and rec["UCX_NET_DEVICES"] == f"{e['netdev']}:1"
    want = execwrap.parse_cpus(e["cpus"]) & os.sched_getaffinity(0)
    if want:
        assert rec["affinity"] == sorted(want)
    # memory bound to the GPU's NUMA node where this machine has it, else said why not
    if os.path.isdir(f"/sys/devices/system/node/node{e['numa']}"):
        assert rec["RANKMAP_MEMBIND"] == str(e["numa"])
        assert rec["mempolicy"] == {"mode": "bind", "nodes": [e["numa"]]}
    else:
        assert rec["RANKMAP_MEMBIND"] == f"unbound: this machine has no NUMA node {e['numa']}"
        assert rec["mempolicy"]["mode"] == "default"


# ----------------------------------------------------------------------------- torchrun
def test_torchrun_argv_goes_through_no_python(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{LAUNCHERS}{os.pathsep}{os.environ['PATH']}")
    mf = str(write_mapping(tmp_path, doc([0, 0], [1, 0], 1)))
    wrapper = launch.wrapper_argv()
    argv, env = launch.wrap(["torchrun", "--nproc_per_node=2", "train.py", "--lr", "1"], mf)
    assert argv == ["torchrun", "--nproc_per_node=2", "--no-python"] + wrapper + ["python3", "-u", "train.py",
                                                                                   "--lr", "1"]
    assert env["RANKMAP_LAUNCHER"] == "torchrun" and env["RANKMAP_MAPPING"] == mf
    argv, _ = launch.wrap(["torchrun", "--nproc-per-node", "2", "-m", "pkg.train", "-x"], mf)
    assert argv == ["torchrun", "--nproc-per-node", "2", "--no-python"] + wrapper + ["python3", "-u", "-m",
                                                                                      "pkg.train", "-x"]
    argv, _ = launch.wrap(["torchrun", "--nproc_per_node", "2", "--no-python", "./app", "a"], mf)
    assert argv == ["torchrun", "--nproc_per_node", "2", "--no-python"] + wrapper + ["./app", "a"]
    argv, _ = launch.wrap([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"], mf)
    assert argv == [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--no-python"] \
        + wrapper + [sys.executable, "-u", "t.py"]


def test_torchrun_one_node(setup):
    tmp_path, worker, env = setup
    d = doc([0, 0], [5, 2], 1)
    mf = write_mapping(tmp_path, d)
    p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--", "torchrun", "--nproc_per_node=2",
                str(worker), env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    s = seen(p.stdout)
    assert sorted(s) == [0, 1]
    for r, rec in s.items():
        assert rec["RANK"] == str(r) and rec["LOCAL_RANK"] == str(r)
        check_binding(rec, d["mapping"][str(r)], device=r)  # cuda:LOCAL_RANK is the mapped GPU


def test_torchrun_two_nodes_numbers_workers_by_the_mapping(setup):
    """Two torchruns (node ranks 0 and 1, as on two machines); the mapping's node split is not the
    blocks torchrun would make, so the wrapper renumbers each node's workers."""
    tmp_path, worker, env = setup
    node_of = [0, 1, 0, 1, 1, 0, 1, 0]
    gpu_of = [3, 0, 1, 2, 3, 0, 1, 2]
    d = doc(node_of, gpu_of, 2)
    mf = write_mapping(tmp_path, d)
    outputs = []
    for node in (0, 1):
        p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--", "torchrun", "--nnodes", "2",
                    "--node-rank", str(node), "--nproc-per-node", "4", str(worker), env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        outputs.append(p.stdout)
    s = seen(*outputs)
    assert sorted(s) == list(range(8))
    for r, rec in s.items():
        assert rec["GROUP_RANK"] == str(node_of[r])
        # the LOCAL_RANK-th rank the mapping puts on this node
        assert [q for q in range(8) if node_of[q] == node_of[r]][int(rec["LOCAL_RANK"])] == r
        check_binding(rec, d["mapping"][str(r)], device=int(rec["LOCAL_RANK"]))
    # a job of another size than the mapping's
    p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--", "torchrun", "--nnodes", "2",
                "--node-rank", "0", "--nproc-per-node", "3", str(worker), env=env)
    assert_one_line_error(p, "places 8 ranks", "starts 6")


def test_torchrun_worker_count_mismatch_is_one_line(setup):
    tmp_path, worker, env = setup
    mf = write_mapping(tmp_path, doc([0, 0, 0, 1], [0, 1, 2, 0], 2))
    # the command's size (2 x 2) matches, but node 0 holds 3 ranks of the mapping
    p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--", "torchrun", "--nnodes", "2",
                "--node-rank", "0", "--nproc-per-node", "2", str(worker), env=env)
    assert p.returncode != 0
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert lines and all(l == lines[0] for l in lines), p.stderr
    assert "torchrun starts 2 workers on node 0 but the mapping places 3 ranks there" in lines[0]


@pytest.mark.skipif(not shutil.which("python3") or os.system("python3 -c 'import torch' 2>/dev/null") != 0,
                    reason="torch is not installed: torch.distributed.run cannot be used")
def test_real_torch_distributed_run(setup):
    tmp_path, worker, env = setup
    d = doc([0, 0], [1, 0], 1)
    mf = write_mapping(tmp_path, d)
    p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--", "python3", "-m",
                "torch.distributed.run", "--nproc_per_node=2", str(worker), env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    for r, rec in seen(p.stdout).items():
        check_binding(rec, d["mapping"][str(r)], device=int(rec["LOCAL_RANK"]))


# ----------------------------------------------------------------------------- srun
def test_srun_two_nodes_arbitrary_distribution(setup):
    tmp_path, worker, env = setup
    node_of = [0, 1, 1, 0, 0, 1]
    d = doc(node_of, [0, 0, 1, 1, 2, 2], 2)
    mf = write_mapping(tmp_path, d)
    env = dict(env, SLURM_JOB_NODELIST="nodeA,nodeB")
    cmd = ["srun", "-n", "6", sys.executable, str(worker)]
    dry = rankmap("run", "--dry-run", "--mapping", str(mf), "--topology", "dgx1-v100", "--", *cmd, env=env)
    assert dry.returncode == 0, dry.stderr
    assert "--distribution=arbitrary" in dry.stdout and "# environment: SLURM_HOSTFILE=" in dry.stdout
    hostfile = Path(dry.stdout.split("SLURM_HOSTFILE=")[1].split()[0])
    assert hostfile.read_text() == "nodeA\nnodeB\nnodeB\nnodeA\nnodeA\nnodeB\n"
    p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--", *cmd, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "warning" not in p.stderr
    s = seen(p.stdout)
    assert sorted(s) == list(range(6))
    for r, rec in s.items():
        assert rec["SLURMD_NODENAME"] == ["nodeA", "nodeB"][node_of[r]]
        assert rec["RANKMAP_PLACED"].startswith(f"{node_of[r]}:")
        check_binding(rec, d["mapping"][str(r)], device=0)


def test_wrapper_warns_when_a_rank_lands_on_another_host(setup, monkeypatch):
    """The same srun without the arbitrary distribution puts ranks in blocks: the wrapper says so."""
    import subprocess

    tmp_path, worker, env = setup
    mf = write_mapping(tmp_path, doc([0, 1, 1, 0], [0, 0, 1, 1], 2))
    for k, v in dict(env, SLURM_JOB_NODELIST="nodeA,nodeB").items():
        monkeypatch.setenv(k, v)
    m = mapping_json.load(str(mf))
    argv, wenv = launch.wrap(["srun", "-n", "4", sys.executable, str(worker)], str(mf), mapping=m,
                             hosts=["nodeA", "nodeB"])
    p = subprocess.run(argv, env=wenv, capture_output=True, text=True, timeout=120)  # block distribution
    assert p.returncode == 0, p.stderr
    assert "rank 1 runs on nodeA but the mapping puts it on node 1 (nodeB)" in p.stderr
    assert "rank 0 runs" not in p.stderr


# ----------------------------------------------------------------------------- hydra
@pytest.mark.mpi
@pytest.mark.skipif(MPIEXEC_MPICH is None, reason="MPICH's mpiexec.mpich is not installed")
@pytest.mark.parametrize("pmi", [[], ["-pmi-port"]], ids=["pmi-fd", "pmi-port"])
def test_hydra_two_nodes_machinefile(setup, pmi):
    """hydra's default PMI mode tells a rank its world rank in PMI_RANK; with -pmi-port it sets
    PMI_ID instead (and no PMI_RANK), and the wrapper used to place each rank by its rank on the
    node (MPI_LOCALRANKID): ranks 3, 4 and 5 got the GPUs, CPUs and NICs of ranks 2, 1 and 2."""
    tmp_path, worker, env = setup
    node_of = [0, 0, 1, 0, 1, 1]
    d = doc(node_of, [0, 1, 0, 2, 1, 2], 2)
    mf = write_mapping(tmp_path, d)
    cmd = [MPIEXEC_MPICH, "-launcher", "fork", *pmi, "-n", "6", sys.executable, str(worker)]
    args = ["run", "--mapping", str(mf), "--topology", "dgx1-v100", "--hosts", "nodeA,nodeB",
            "--run-dir", str(tmp_path / "rd"), "--", *cmd]
    dry = rankmap(*args[:1], "--dry-run", *args[1:], env=env)
    assert dry.returncode == 0, dry.stderr
    assert "-f" in dry.stdout.split()
    assert (tmp_path / "rd" / "machinefile").read_text() == "nodeA:2\nnodeB:1\nnodeA:1\nnodeB:2\n"
    p = rankmap(*args, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "warning" not in p.stderr
    s = seen(p.stdout)
    assert sorted(s) == list(range(6))
    for r, rec in s.items():
        assert rec["MPIR_CVAR_CH3_INTERFACE_HOSTNAME"] == ["nodeA", "nodeB"][node_of[r]]
        assert rec["PMI_ID" if pmi else "PMI_RANK"] == str(r) and rec["PMI_RANK" if pmi else "PMI_ID"] is None
        check_binding(rec, d["mapping"][str(r)], device=0)


@pytest.mark.mpi
@pytest.mark.skipif(MPIEXEC_MPICH is None, reason="MPICH's mpiexec.mpich is not installed")
def test_hydra_host_options_clash_with_a_multi_node_mapping(setup):
    tmp_path, worker, env = setup
    mf = write_mapping(tmp_path, doc([0, 1], [0, 0], 2))
    p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--hosts", "a,b", "--", MPIEXEC_MPICH,
                "-f", "hosts.txt", "-n", "2", "./app", env=env)
    assert_one_line_error(p, "drop the command's host options")


# ----------------------------------------------------------------------------- Open MPI and the rest
@pytest.mark.mpi
def test_openmpi_two_nodes_rankfile_and_hosts(setup, tmp_path):
    tmp_path, worker, env = setup
    if not shutil.which("mpirun.openmpi"):
        pytest.skip("Open MPI's mpirun.openmpi is not installed")
    mf = write_mapping(tmp_path, doc([0, 1, 1], [0, 0, 3], 2))
    p = rankmap("run", "--dry-run", "--mapping", str(mf), "--topology", "dgx1-v100", "--hosts", "a,b",
                "--run-dir", str(tmp_path / "rd"), "--", "mpirun.openmpi", "-np", "3", "./app", env=env)
    assert p.returncode == 0, p.stderr
    argv = p.stdout.splitlines()[0].split()
    assert argv[argv.index("--rankfile") + 1].endswith("rankfile") and argv[argv.index("--host") + 1] == "a:1,b:2"
    assert "RANKMAP_HOSTS=a b" in shlex.split(p.stdout.splitlines()[0])
    assert (tmp_path / "rd" / "rankfile").read_text() == "rank 0=a slot=0\nrank 1=b slot=0\nrank 2=b slot=1\n"


def _fake_openmpi(tmp_path: Path, version: str) -> str:
    """An ``mpirun`` that says it is Open MPI ``version`` (the dry run only reads its --version)."""
    exe = tmp_path / "bin" / "mpirun"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(f"#!/bin/sh\necho 'mpirun (Open MPI) {version}'\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.mpi
def test_openmpi5_two_nodes_sequential_hostfile(setup, tmp_path):
    """Open MPI 5 reads a rankfile's slots as logical cores and cannot be told otherwise: a multi-node
    launch gives it a hostfile of one line per rank with ``--map-by seq``, and the wrapper binds."""
    tmp_path, worker, env = setup
    mpirun = _fake_openmpi(tmp_path, "5.0.11")
    mf = write_mapping(tmp_path, doc([0, 1, 1], [0, 0, 3], 2))
    p = rankmap("run", "--dry-run", "--mapping", str(mf), "--topology", "dgx1-v100", "--hosts", "a,b",
                "--run-dir", str(tmp_path / "rd"), "--", mpirun, "-np", "3", "./app", env=env)
    assert p.returncode == 0, p.stderr
    argv = shlex.split(p.stdout.splitlines()[0])
    assert "--rankfile" not in argv and "rmaps_rank_file_physical" not in argv and "--host" not in argv
    assert argv[argv.index("--map-by") + 1] == "seq" and argv[argv.index("--bind-to") + 1] == "none"
    assert argv[argv.index("--hostfile") + 1] == str(tmp_path / "rd" / "hostfile-seq")
    assert (tmp_path / "rd" / "hostfile-seq").read_text() == "a\nb\nb\n"
    assert argv.index("--hostfile") < argv.index("./app")
    # Open MPI 4 keeps its rankfile with the OS's CPU numbers
    p = rankmap("run", "--dry-run", "--mapping", str(mf), "--topology", "dgx1-v100", "--hosts", "a,b",
                "--run-dir", str(tmp_path / "rd4"), "--", _fake_openmpi(tmp_path, "4.1.6"), "-np", "3", "./app", env=env)
    argv = shlex.split(p.stdout.splitlines()[0])
    assert "--map-by" not in argv and argv[argv.index("--rankfile") + 1] == str(tmp_path / "rd4" / "rankfile")
    assert argv[argv.index("rmaps_rank_file_physical") + 1] == "1"


@pytest.mark.mpi
@pytest.mark.parametrize("opts", [["--host", "x,y"], ["--map-by", "ppr:1:node"], ["-N", "2"]])
def test_openmpi5_placement_options_clash_with_a_multi_node_mapping(setup, tmp_path, opts):
    tmp_path, worker, env = setup
    mf = write_mapping(tmp_path, doc([0, 1], [0, 0], 2))
    p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--hosts", "a,b", "--",
                _fake_openmpi(tmp_path, "5.0.11"), *opts, "-np", "2", "./app", env=env)
    assert_one_line_error(p, f"drop {opts[0]}", "--hosts")


def test_single_process_cannot_run_a_multi_node_mapping(setup):
    tmp_path, worker, env = setup
    mf = write_mapping(tmp_path, doc([1], [0], 2))  # one rank, on the second node
    assert_one_line_error(rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--hosts", "a,b", "--",
                                  sys.executable, str(worker), env=env), "single process")


def test_mapping_file_must_fit_the_command(setup):
    tmp_path, worker, env = setup
    mf = write_mapping(tmp_path, doc([0, 0], [0, 1], 1))
    assert_one_line_error(rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--", "torchrun",
                                  "--nproc_per_node=4", str(worker), env=env), "places 2 ranks", "starts 4")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert_one_line_error(rankmap("run", "--mapping", str(bad), "--topology", "dgx1-v100", "--", "torchrun",
                                  "--nproc_per_node=2", str(worker), env=env), str(bad), "format")


def test_torchrun_value_options_are_known_to_the_launcher_adapter():
    """The wrapper is inserted after torchrun's options: every option that takes a value is known."""
    assert {"--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint", "--master-port"} <= L.TORCHRUN_VALUE_OPTS


# ----------------------------------------------------------------------------- map --save, the dashboard hint
def test_dashboard_hint_names_a_command_that_stores_a_mapping_run_uses(setup, monkeypatch):
    """A job without a mapping: the dashboard's hint is run as it stands; then the dashboard shows the
    mapping and `rankmap run` launches the job's command with it."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from rankmap.store import RankTotals, open_store
    from rankmap.web.app import create_app

    tmp_path, worker, env = setup
    monkeypatch.setenv("PATH", env["PATH"])
    store = open_store(env["RANKMAP_DB"])
    cmd = ["torchrun", "--nproc_per_node=4", str(worker)]
    jid = store.create_job(cmd, launcher="torchrun", world_size=4)
    rows = [RankTotals(r, [((r + 1) % 4, "nccl", "ncclAllReduce", "device", "send", 10**9, 1)], source="nccl",
                       host="h", pid=r) for r in range(4)]
    store.ingest(jid, rows)
    store.finish_job(jid, exit_status=0)
    client = TestClient(create_app(store, "dgx1-v100"), base_url="http://127.0.0.1")
    msg = client.get(f"/api/jobs/{jid}/mapping").json()["message"]
    hinted = msg.split("`")[1]
    assert hinted.startswith(f"rankmap map --job {jid} ") and "--save" in hinted and "--db" in hinted
    p = rankmap(*shlex.split(hinted)[1:], env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    given = shlex.split(hinted)
    opts = [t for o in ("--topology", "--db") if o in given for t in (o, given[given.index(o) + 1])]
    assert f"launch with: {shlex.join(['rankmap', 'run', *opts, '--', *cmd])}" in p.stdout   # map's store and node
    shown = client.get(f"/api/jobs/{jid}/mapping").json()
    assert shown["mapping"]["matched"] == "job" and shown["after"]["max_congestion"] <= shown["before"]["max_congestion"]
    # rankmap run finds it for the job's own command
    r = rankmap("run", "--topology", "dgx1-v100", "--", *cmd, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    placed = shown["mapping"]["mapping"]["mapping"]
    assert sorted(seen(r.stdout)) == [0, 1, 2, 3]
    for rank, rec in seen(r.stdout).items():
        check_binding(rec, placed[str(rank)], device=int(rec["LOCAL_RANK"]))
    # --save needs a job
    assert_one_line_error(rankmap("map", "--traffic", str(mf_csv(tmp_path)), "--topology", "dgx1-v100", "--save",
                                  env=env), "--save", "--job")


def mf_csv(tmp_path: Path) -> Path:
    f = tmp_path / "t.csv"
    f.write_text("src,dst,class,operation,bytes,messages\n0,1,p2p,MPI_Send,10,1\n")
    return f


@pytest.mark.mpi
def test_a_host_named_twice_is_one_line(setup):
    """`--hosts nodeA,nodeA` put `nodeA` in the launcher's host list twice (`--host nodeA:1,nodeA:2`),
    and both nodes' ranks on one machine's GPUs. Every node of a mapping is a host of its own."""
    tmp_path, worker, env = setup
    mf = write_mapping(tmp_path, doc([0, 1, 1], [0, 0, 3], 2))
    for cmd in (["srun", "-n", "3", sys.executable, str(worker)],
                ["mpirun", "-np", "3", "./app"], ["mpiexec.hydra", "-n", "3", "./app"]):
        p = rankmap("run", "--dry-run", "--mapping", str(mf), "--topology", "dgx1-v100", "--hosts", "nodeA,nodeA",
                    "--", *cmd, env=env)
        assert_one_line_error(p, "--hosts names nodeA twice (nodes 0 and 1)")
    p = rankmap("run", "--dry-run", "--mapping", str(mf), "--topology", "dgx1-v100", "--hosts", "nodeA,nodeB,nodeA",
                "--", "srun", "-n", "3", sys.executable, str(worker), env=env)
    assert_one_line_error(p, "nodeA twice (nodes 0 and 2)")


def test_tune_keeps_the_default_and_run_launches_it_bound(setup, monkeypatch):
    """A profile whose best placement gains a hair over the default: tune stores the default
    placement, and run starts every rank on its default GPU, still bound to that GPU's CPUs,
    memory and NIC."""
    import numpy as np

    from rankmap.store import RankTotals, command_key, open_store

    tmp_path, worker, env = setup
    monkeypatch.setenv("PATH", env["PATH"])     # the command's key names the torchrun that runs
    cmd = ["torchrun", "--nproc_per_node=8", str(worker)]
    store = open_store(env["RANKMAP_DB"])
    jid = store.create_job(cmd, launcher="torchrun", world_size=8, key=command_key(cmd))
    rng = np.random.default_rng(1)     # an all-to-all whose pairs differ by under 0.2 %
    store.ingest(jid, [RankTotals(r, [(q, "p2p", "Send", "device", "send", int(1e9 * (1 + 0.002 * rng.random())), 1)
                                      for q in range(8) if q != r], source="nccl", host="h", pid=1)
                       for r in range(8)])
    store.finish_job(jid, exit_status=0)
    t = rankmap("tune", "--topology", "dgx1-v100", "--", *cmd, env=env)
    assert t.returncode == 0, t.stdout + t.stderr
    assert "note: the default placement is kept: it is within" in t.stdout
    stored = store.latest_mapping(command_key(cmd), 8)["mapping"]
    assert stored["default_kept"] and [stored["mapping"][str(r)]["gpu"] for r in range(8)] == list(range(8))
    p = rankmap("run", "--topology", "dgx1-v100", "--", *cmd, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    s = seen(p.stdout)
    assert sorted(s) == list(range(8))
    for r, rec in s.items():
        e = stored["mapping"][str(r)]
        assert e["gpu"] == r and e["cpus"] and e["netdev"]
        check_binding(rec, e, device=r)
