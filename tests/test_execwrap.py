"""`rankmap run` and the exec wrapper under a real `mpirun`; `rankmap tune` with a stored profile."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import assert_one_line_error, rankmap
from rankmap.formats import mapping_json
from rankmap.mapping import execwrap, launch

MPIRUN = shutil.which("mpirun.openmpi")
PRINTER = """\
import os, json, sys
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
with open(os.path.join(sys.argv[1], f"{rank}.json"), "w") as f:
    json.dump({
    "rank": int(os.environ["OMPI_COMM_WORLD_RANK"]),
    "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "cpus": sorted(os.sched_getaffinity(0)),
    "ucx": os.environ.get("UCX_NET_DEVICES"),
    "hca": os.environ.get("NCCL_IB_HCA"),
    "membind": os.environ.get("RANKMAP_MEMBIND"),
}, f)
"""


def fake_doc(n: int = 4) -> dict:
    """A 4-rank mapping on an imaginary 4-GPU node: ranks on GPUs in reverse, alternating CPUs."""
    ranks = {}
    for r in range(n):
        ranks[str(r)] = {"node": 0, "gpu": n - 1 - r, "uuid": f"GPU-fake-{n - 1 - r}", "cpus": str(r % 2),
                         "numa": 0, "nic": f"nic{r // 2}", "netdev": f"mlx5_{r // 2}"}
    return {"format": "rankmap-mapping", "version": 1, "world_size": n, "topology": "dgx1-v100", "nodes": 1,
            "gpus_per_node": 8, "ranks_per_gpu": 1, "mapping": ranks, "max_congestion": 1.0,
            "avg_congestion": 1.0, "default": {"max_congestion": 2.0, "avg_congestion": 2.0}, "optimal": True}


def test_plan_reads_the_rank_variables():
    doc = fake_doc()
    entry, env = execwrap.plan(doc, {"OMPI_COMM_WORLD_RANK": "2"})
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["NCCL_IB_HCA"] == "mlx5_1" and env["UCX_NET_DEVICES"] == "mlx5_1:1"
    for var in ("MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"):
        _, env = execwrap.plan(doc, {var: "3"})
        assert env["CUDA_VISIBLE_DEVICES"] == "0"
    _, env = execwrap.plan(doc, {"PMI_RANK": "0", "RANKMAP_GPU_BY": "uuid"})
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-fake-3"
    with pytest.raises(LookupError):
        execwrap.plan(doc, {"OMPI_COMM_WORLD_RANK": "9"})
    with pytest.raises(LookupError):
        execwrap.plan(doc, {})
    assert execwrap.parse_cpus("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}


def test_plan_reads_hydras_rank_under_pmi_port():
    """``mpiexec.mpich -pmi-port`` sets PMI_ID, not PMI_RANK; the wrapper took the local rank."""
    entry, env = execwrap.plan(fake_doc(), {"PMI_ID": "2", "MPI_LOCALRANKID": "0", "PMI_PORT": "host:4000"})
    assert entry.rank == 2 and env["CUDA_VISIBLE_DEVICES"] == "1"


def test_plan_takes_no_local_rank_for_a_world_rank_across_nodes(tmp_path):
    """On one node a local rank is the world rank; across nodes it is not, and the wrapper used to
    place rank 3 (local rank 1 on node 1) where the mapping puts rank 1."""
    doc = fake_doc()
    doc["nodes"] = 2
    for r in ("2", "3"):
        doc["mapping"][r]["node"] = 1
    with pytest.raises(LookupError, match=r"only a local rank \(MPI_LOCALRANKID=1\), and the mapping spans 2 nodes"):
        execwrap.plan(doc, {"MPI_LOCALRANKID": "1"})
    assert execwrap.plan(doc, {"PMI_ID": "3", "MPI_LOCALRANKID": "1"})[0].rank == 3
    # the wrapper stops the rank with one line rather than run it misplaced
    import subprocess

    mf = tmp_path / "m.json"
    mf.write_text(json.dumps(doc))
    env = {k: v for k, v in os.environ.items() if k not in execwrap.WORLD_VARS}
    env.update(RANKMAP_MAPPING=str(mf), MPI_LOCALRANKID="1", RANKMAP_NO_BIND="1")
    p = subprocess.run([sys.executable, "-S", execwrap.__file__, "true"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert p.returncode == 127 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("rankmap execwrap: the launcher gave only a local rank"), p.stderr


def test_wrapper_imports_only_the_mapping_reader(tmp_path):
    """The wrapper runs with -S on every rank: of rankmap it loads only the standard-library-only
    mapping reader, never numpy or the rest of the package (fast start)."""
    import subprocess

    mf = tmp_path / "m.json"
    mf.write_text(json.dumps(fake_doc()))
    env = dict(os.environ, RANKMAP_MAPPING=str(mf), OMPI_COMM_WORLD_RANK="1", RANKMAP_NO_BIND="1")
    # run the wrapper as a file, as ranks do, with execvp replaced by a report of what was imported
    probe = ("import json, os, runpy, sys\n"
             "def report(*a):\n"
             "    print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in\n"
             "                            ('rankmap', 'numpy', 'sqlalchemy', 'dataclasses'))))\n"
             "    sys.exit(0)\n"
             "os.execvp = report\n"
             f"sys.argv = ['execwrap.py', 'true']\n"
             f"runpy.run_path({execwrap.__file__!r}, run_name='__main__')\n")
    p = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == ["rankmap", "rankmap.errors", "rankmap.formats", "rankmap.formats.mapping_json"]


def test_launcher_files():
    doc = fake_doc()
    doc["nodes"] = 2
    for r in ("2", "3"):
        doc["mapping"][r]["node"] = 1
    m = mapping_json.from_dict(doc)
    rf = launch.rankfile_text(m, ["a", "b"])
    assert rf.splitlines()[0] == "rank 0=a slot=0" and rf.splitlines()[3] == "rank 3=b slot=1"
    assert launch.slurm_hostfile_text(m, ["a", "b"]) == "a\na\nb\nb\n"


@pytest.mark.mpi
@pytest.mark.skipif(MPIRUN is None, reason="Open MPI's mpirun.openmpi is not installed")
def test_run_under_real_mpirun(tmp_path):
    from rankmap.store import command_key, open_store

    db = f"sqlite:///{tmp_path / 'r.db'}"
    prog = tmp_path / "printer.py"
    prog.write_text(PRINTER)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "4", sys.executable, str(prog), str(out)]
    env = {"RANKMAP_DB": db, "RANKMAP_HOME": str(tmp_path / "home")}
    # no store there: one clear line, and none made
    assert_one_line_error(rankmap("run", "--topology", "dgx1-v100", "--", *cmd, env=env),
                          f"no rankmap store at {tmp_path / 'r.db'}")
    assert not (tmp_path / "r.db").exists()
    # nothing stored yet: one clear line
    store = open_store(db)
    assert_one_line_error(rankmap("run", "--topology", "dgx1-v100", "--", *cmd, env=env),
                          "no cached mapping for this command with 4 ranks", "rankmap tune")
    doc = fake_doc()
    store.save_mapping(doc, key=command_key(cmd), world_size=4, topology="dgx1-v100")
    # a node that is not the one the mapping was made for
    assert_one_line_error(rankmap("run", "--topology", "summit", "--", *cmd, env=env), "dgx1-v100", "summit")
    p = rankmap("run", "--topology", "dgx1-v100", "--", *cmd, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    seen = {int(f.stem): json.loads(f.read_text()) for f in out.glob("*.json")}
    assert sorted(seen) == [0, 1, 2, 3], p.stdout
    allowed = os.sched_getaffinity(0)
    for r, d in seen.items():
        e = doc["mapping"][str(r)]
        assert d["cvd"] == str(e["gpu"])
        assert d["ucx"] == f"{e['netdev']}:1" and d["hca"] == e["netdev"]
        want = {int(e["cpus"])} & allowed
        if want:
            assert d["cpus"] == sorted(want)
        assert d["membind"] == "0"  # every Linux machine has NUMA node 0
    # --no-bind: same GPUs, affinity left alone
    for f in out.glob("*.json"):
        f.unlink()
    p = rankmap("run", "--no-bind", "--topology", "dgx1-v100", "--", *cmd, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    seen = {int(f.stem): json.loads(f.read_text()) for f in out.glob("*.json")}
    assert sorted(seen) == [0, 1, 2, 3], p.stdout
    for r, d in seen.items():
        assert d["cvd"] == str(doc["mapping"][str(r)]["gpu"])
        assert d["membind"] is None


@pytest.mark.mpi
@pytest.mark.skipif(MPIRUN is None, reason="Open MPI's mpirun.openmpi is not installed")
def test_cpus_of_another_machine_are_one_note(tmp_path):
    """A mapping made for a bigger machine (a fixture's node on a laptop) names CPUs this one lacks.
    Every rank used to warn that "the launcher bound it" and to name binding options nobody passed;
    now `rankmap run` says once, before the launch, that the ranks run unbound, and they do."""
    from rankmap.store import command_key, open_store

    absent = max(os.cpu_count() or 1, *os.sched_getaffinity(0)) + 64
    doc = fake_doc(2)
    for e in doc["mapping"].values():
        e["cpus"] = f"{absent}-{absent + 3}"
    db = f"sqlite:///{tmp_path / 'r.db'}"
    (tmp_path / "printer.py").write_text(PRINTER)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, str(tmp_path / "printer.py"),
           str(out)]
    open_store(db).save_mapping(doc, key=command_key(cmd), world_size=2, topology="dgx1-v100")
    p = rankmap("run", "--topology", "dgx1-v100", "--", *cmd,
                env={"RANKMAP_DB": db, "RANKMAP_HOME": str(tmp_path / "home")}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    said = p.stdout + p.stderr
    assert "warning" not in said and "--bind-to" not in said, said
    notes = [l for l in said.splitlines() if "which this machine does not offer" in l]
    assert len(notes) == 1 and f"CPUs {absent}-{absent + 3} of dgx1-v100" in notes[0], said
    seen = {int(f.stem): json.loads(f.read_text()) for f in out.glob("*.json")}
    assert sorted(seen) == [0, 1], said
    for r, d in seen.items():
        assert d["cvd"] == str(doc["mapping"][str(r)]["gpu"]) and d["membind"] is None   # placed, not bound


def test_wrapper_says_when_its_cpus_are_not_on_the_machine(tmp_path):
    """Where the wrapper binds on its own (a node of a multi-node mapping) and the rank's CPUs are not
    there at all, it says so, not that a launcher bound the rank elsewhere."""
    import subprocess

    if len(os.sched_getaffinity(0)) < (os.cpu_count() or 0):
        pytest.skip("this process is bound to part of the machine: the launcher's case")
    absent = max(os.cpu_count() or 1, *os.sched_getaffinity(0)) + 64
    doc = fake_doc(2)
    doc["mapping"]["1"]["cpus"] = str(absent)
    mf = tmp_path / "m.json"
    mf.write_text(json.dumps(doc))
    env = {k: v for k, v in os.environ.items() if k not in execwrap.WORLD_VARS and k != "RANKMAP_NO_BIND"}
    env.update(RANKMAP_MAPPING=str(mf), OMPI_COMM_WORLD_RANK="1")
    p = subprocess.run([sys.executable, "-S", execwrap.__file__, "true"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stderr.startswith(f"rankmap execwrap: warning: rank 1: its GPU's CPUs {absent} are not on this machine"), \
        p.stderr
    assert "--bind-to" not in p.stderr and p.stderr.count("\n") == 1, p.stderr


@pytest.mark.mpi
@pytest.mark.skipif(MPIRUN is None, reason="Open MPI's mpirun.openmpi is not installed")
def test_dry_run_shows_wrapped_command(tmp_path):
    from rankmap.store import command_key, open_store

    db = f"sqlite:///{tmp_path / 'r.db'}"
    cmd = [MPIRUN, "--allow-run-as-root", "-np", "4", "--mca", "btl", "self", "/bin/true", "x"]
    open_store(db).save_mapping(fake_doc(), key=command_key(cmd), world_size=4, topology="dgx1-v100")
    p = rankmap("run", "--dry-run", "--topology", "dgx1-v100", "--", *cmd,
                env={"RANKMAP_DB": db, "RANKMAP_HOME": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    argv = p.stdout.split()
    i = argv.index("-S")
    assert argv[i + 1].endswith("execwrap.py") and argv[i + 2:] == ["/bin/true", "x"]
    assert "--bind-to" in argv and any(a.startswith("RANKMAP_MAPPING=") for a in argv)
    assert argv[argv.index("--mca") + 1: argv.index("--mca") + 3] == ["btl", "self"]


def _record(rank: int, n: int):
    from rankmap.store import RankTotals

    return RankTotals(rank, [((rank + 1) % n, "p2p", "MPI_Send", "host", "send", 1_000_000, 1)], host="h", pid=1)


@pytest.mark.mpi
@pytest.mark.skipif(MPIRUN is None, reason="Open MPI's mpirun.openmpi is not installed")
def test_tune_uses_stored_profile_and_checks_rank_count(tmp_path):
    from rankmap.store import command_key, open_store

    db = f"sqlite:///{tmp_path / 'r.db'}"
    store = open_store(db)
    env = {"RANKMAP_DB": db, "RANKMAP_HOME": str(tmp_path)}
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "8", "/bin/true"]
    jid = store.create_job(cmd, launcher="openmpi", world_size=8, key=command_key(cmd))
    store.ingest(jid, [_record(r, 8) for r in range(8)])
    store.finish_job(jid, exit_status=0)
    p = rankmap("tune", "--topology", "dgx1-v100", "--format", "json", "--", *cmd, env=env)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["optimal"] and doc["world_size"] == 8 and f"job {jid}" in p.stderr
    assert store.latest_mapping(command_key(cmd), 8)["mapping"]["mapping"] == doc["mapping"]
    # a stored profile whose records name more ranks than the command starts
    cmd2 = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", "/bin/true"]
    j2 = store.create_job(cmd2, launcher="openmpi", world_size=2, key=command_key(cmd2))
    store.ingest(j2, [_record(r, 4) for r in range(4)])
    store.finish_job(j2, exit_status=0)
    assert_one_line_error(rankmap("tune", "--topology", "dgx1-v100", "--", *cmd2, env=env), "4 ranks", "starts 2")
    # more ranks than GPUs
    cmd3 = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "12", "/bin/true"]
    j3 = store.create_job(cmd3, launcher="openmpi", world_size=12, key=command_key(cmd3))
    store.ingest(j3, [_record(r, 12) for r in range(12)])
    store.finish_job(j3, exit_status=0)
    assert_one_line_error(rankmap("tune", "--topology", "dgx1-v100", "--", *cmd3, env=env), "--ranks-per-gpu")


@pytest.mark.mpi
@pytest.mark.skipif(MPIRUN is None, reason="Open MPI's mpirun.openmpi is not installed")
def test_the_run_line_tune_and_map_print_works_as_printed(tmp_path):
    """`tune --topology dgx1-v100` and `map --job N --save` print the `rankmap run` line to launch with;
    it left out the node and the store they were given, so on a machine without a GPU (or with the
    store named by --db) the printed line failed. Run as printed, it launches the job."""
    import shlex

    from rankmap.store import command_key, open_store

    db = f"sqlite:///{tmp_path / 'my store.db'}"
    store = open_store(db)
    env = {"RANKMAP_HOME": str(tmp_path / "home")}      # no RANKMAP_DB: the store is the --db given
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "4", "/bin/true"]
    jid = store.create_job(cmd, launcher="openmpi", world_size=4, key=command_key(cmd))
    store.ingest(jid, [_record(r, 4) for r in range(4)])
    store.finish_job(jid, exit_status=0)
    for verb in (["tune", "--topology", "dgx1-v100", "--db", db, "--", *cmd],
                 ["map", "--job", str(jid), "--save", "--topology", "dgx1-v100", "--db", db]):
        p = rankmap(*verb, env=env)
        assert p.returncode == 0, p.stderr
        line = [l for l in (p.stdout + p.stderr).splitlines() if "launch with: " in l]
        assert len(line) == 1, p.stdout + p.stderr
        printed = shlex.split(line[0].split("launch with: ", 1)[1])
        assert printed[:2] == ["rankmap", "run"] and "--topology" in printed and "--db" in printed, printed
        r = rankmap(*printed[1:], env=env, timeout=300)
        assert r.returncode == 0, (verb[0], printed, r.stdout + r.stderr)
