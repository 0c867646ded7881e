"""`rankmap profile` end to end: real Open MPI and MPICH launches, exact matrices from the store."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, cli, rankmap
from pg import BACKENDS, pg_cluster  # noqa: F401  (session fixture)
from rankmap import pairs
from rankmap.formats import record as records
from rankmap.store import open_store

RING = textwrap.dedent(r"""
    /* Each rank sends ITERS messages of N bytes to rank+1 (MPI_Isend) and receives from rank-1.
       Optional: rank 0 exits with CODE after MPI_Finalize, or (CODE < 0) sleeps and aborts
       without finalising, after the other ranks went to sleep too. */
    #include <mpi.h>
    #include <stdlib.h>
    #include <unistd.h>
    int main(int argc, char **argv) {
      MPI_Init(&argc, &argv);
      int rank, size;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      long n = argc > 1 ? atol(argv[1]) : 1000;
      int iters = argc > 2 ? atoi(argv[2]) : 5;
      int code = argc > 3 ? atoi(argv[3]) : 0;
      char *sb = calloc(n + 1, 1), *rb = calloc(n + 1, 1);
      for (int i = 0; i < iters; i++) {
        MPI_Request rq[2];
        MPI_Status st[2];
        MPI_Irecv(rb, (int)n, MPI_BYTE, (rank + size - 1) % size, 7, MPI_COMM_WORLD, &rq[0]);
        MPI_Isend(sb, (int)n, MPI_BYTE, (rank + 1) % size, 7, MPI_COMM_WORLD, &rq[1]);
        MPI_Waitall(2, rq, st);
      }
      if (code < 0) {            /* a crash: no MPI_Finalize, the records keep the last flush */
        sleep(2);
        if (rank == 0) abort();
        sleep(30);
      }
      MPI_Finalize();
      return rank == 0 ? code : 0;
    }
""")

MPIS = {
    "openmpi": ("mpicc.openmpi", ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np"]),
    "mpich": ("mpicc.mpich", ["mpiexec.mpich", "-n"]),
}


EXAMPLES = ROOT / "examples" / "mpi"


@pytest.fixture(scope="session")
def ring_bins(tmp_path_factory) -> dict[str, Path]:
    """The exit-status/crash variant of ring built with each installed MPI's compiler wrapper."""
    d = tmp_path_factory.mktemp("ring")
    (d / "ring.c").write_text(RING)
    out = {}
    for mpi, (cc, _) in MPIS.items():
        if shutil.which(cc):
            subprocess.run([cc, "-O1", "-Wno-stringop-overflow", "-o", str(d / f"ring-{mpi}"), str(d / "ring.c")],
                           check=True)
            out[mpi] = d / f"ring-{mpi}"
    return out


@pytest.fixture(scope="session")
def examples(tmp_path_factory) -> dict[str, Path]:
    """examples/mpi built with each installed MPI (the way a user builds them: its Makefile)."""
    if not (EXAMPLES / "Makefile").exists():
        pytest.skip("examples/mpi is absent")
    out = {}
    for mpi, (cc, _) in MPIS.items():
        if shutil.which(cc):
            d = tmp_path_factory.mktemp(f"examples-{mpi}")
            subprocess.run(["make", "-s", "-C", str(EXAMPLES), f"MPICC={cc}", f"OUT={d}",
                            *(f"{d}/{e}" for e in ("ring", "rma", "alltoall"))], check=True, capture_output=True)
            out[mpi] = d
    return out


def example(mpi: str, examples: dict[str, Path], n: int, name: str, *args: str) -> list[str]:
    if mpi not in examples:
        pytest.skip(f"{MPIS[mpi][0]} is not installed")
    return MPIS[mpi][1] + [str(n), str(examples[mpi] / name), *args]


def launch(mpi: str, ring_bins: dict[str, Path], n: int, *args: str) -> list[str]:
    if mpi not in ring_bins:
        pytest.skip(f"{MPIS[mpi][0]} is not installed")
    return MPIS[mpi][1] + [str(n), str(ring_bins[mpi]), *args]


@pytest.fixture
def home(tmp_path) -> dict:
    """An isolated RANKMAP_HOME and store for one test."""
    return {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": f"sqlite:///{tmp_path / 'rankmap.db'}"}


def csv_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.mpi
@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_ring_exact_matrix(mpi, examples, home, tmp_path):
    n, size, iters = 4, 1000, 5
    p = rankmap("profile", "--run-dir", str(tmp_path / "run"), "--",
                *example(mpi, examples, n, "ring", str(size), str(iters)), env=home)
    assert p.returncode == 0, p.stderr
    assert "bytes by class and operation" in p.stdout and "heaviest pairs" in p.stdout
    assert "POP efficiency" in p.stdout

    store = open_store(home["RANKMAP_DB"])
    jid = store.resolve_job("latest")
    job = store.job(jid)
    assert job["exit_status"] == 0 and job["world_size"] == n
    assert job["launcher"] == ("openmpi" if mpi == "openmpi" else "hydra")
    assert store.traffic_matrix(jid).tolist() == store.traffic_matrix(jid, classes=["p2p"]).tolist()
    m = store.traffic_matrix(jid, classes=["p2p"])
    want = [[size * iters if d == (s + 1) % n else 0 for d in range(n)] for s in range(n)]
    assert m.tolist() == want
    assert store.traffic_matrix(jid, classes=["p2p"], what="messages").tolist() == \
        [[iters if v else 0 for v in row] for row in want]
    assert sorted(r["world_rank"] for r in store.ranks(jid) if r["source"] == "mpi") == list(range(n))
    assert sorted(f.name for f in (tmp_path / "run").glob("*.mpi.rmrec")) == [f"rank-{r}.mpi.rmrec" for r in range(n)]
    assert json.loads((tmp_path / "run" / "job.json").read_text())["exit_status"] == 0

    e = cli("export", "latest", "--format", "csv", env=home)
    assert e.returncode == 0, e.stderr
    assert e.stdout.splitlines()[0] == "src,dst,class,operation,bytes,messages"
    p2p = [r for r in csv_rows(e.stdout) if r["class"] == "p2p"]
    assert p2p == [{"src": str(s), "dst": str((s + 1) % n), "class": "p2p", "operation": "MPI_Isend",
                    "bytes": str(size * iters), "messages": str(iters)} for s in range(n)]
    e = cli("export", "latest", "--format", "csv", "--pair-source", env=home)
    assert e.returncode == 0, e.stderr
    assert e.stdout.splitlines()[0] == "src,dst,class,operation,bytes,messages,pair_source"
    assert {r["pair_source"] for r in csv_rows(e.stdout) if r["class"] == "p2p"} == {"call"}

    out = tmp_path / "profile.json"
    e = cli("export", str(jid), "--format", "json", "-o", str(out), env=home)
    assert e.returncode == 0, e.stderr
    prof = json.loads(out.read_text())
    assert prof["job"]["id"] == jid and len([r for r in prof["ranks"] if r["source"] == "mpi"]) == n
    assert {"traffic", "op_stats", "timeline", "problems"} <= set(prof)
    sent = sum(t["bytes"] for t in prof["timeline"] if t["class"] == "p2p")
    assert sent == n * size * iters


@pytest.mark.mpi
@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_jobs_that_send_no_bytes(mpi, ring_bins, home, tmp_path):
    """A job of MPI_Barrier alone (tests/native/first_call_app.c) printed "heaviest pairs" of 0 B at a
    share of "-", a matrix of dots and an empty "where the sent bytes lived" table, and `rankmap
    show` an empty bytes/proc column. One line now says that no bytes were sent, over the messages
    by operation; the same for empty messages (the ring of 0-byte messages) and for ranks that never
    talk (the ring of 0 iterations). MPICH's barrier sends a byte (its SMP barrier ends in a 1-byte
    MPI_Bcast), so it runs under Open MPI alone."""
    messages = "no bytes sent: messages by class and operation"
    cases = [(launch(mpi, ring_bins, 2, "0", "5"), messages, "p2p", "MPI_Isend", 10, 5),
             (launch(mpi, ring_bins, 2, "1000", "0"), "no bytes sent: no rank recorded a message", None, None, 0, 0)]
    if mpi == "openmpi":
        app = tmp_path / "barriers"
        subprocess.run([MPIS[mpi][0], "-O1", "-o", str(app), str(ROOT / "tests" / "native" / "first_call_app.c")],
                       check=True)
        cases.append((MPIS[mpi][1] + ["2", str(app), "0", "10"], messages, "collective", "MPI_Barrier", 22, 11))
    # every call timed: a 0.05 s job of a few calls, each sampled call counted 16 times, can add up to
    # more time in MPI than the run on a loaded machine, and then POP metrics are (rightly) withheld
    sample = ["-x", "RANKMAP_SAMPLE=1"] if mpi == "openmpi" else ["-genv", "RANKMAP_SAMPLE", "1"]
    cases = [(cmd[:1] + sample + cmd[1:], *rest) for cmd, *rest in cases]
    env = dict(home, COLUMNS="80")
    byte_sections = ("heaviest pairs", "traffic matrix", "where the sent bytes lived", "share", " 0 B", "bytes/proc")
    for cmd, first, cls, op, msgs, per_proc in cases:
        p = rankmap("profile", "--no-progress", "--", *cmd, env=env)
        assert p.returncode == 0, p.stderr
        s = cli("show", "latest", env=env)
        assert s.returncode == 0, s.stderr
        for out in (p.stdout, s.stdout):
            lines = out.splitlines()
            assert max(map(len, lines)) <= 80 and not any(x in out for x in byte_sections), out
            i = lines.index(first)
            assert "POP efficiency (2 ranks" in out, out
            if op:                   # the table of messages: a head, then a row per operation
                head, row = (ln.strip("┃│ ").split() for ln in (lines[i + 2], lines[i + 4]))
                # a collective's row says where its pairs come from (the barrier: the model)
                pairs = cls == "collective"
                assert head == ["class", "┃", "operation", "┃", "messages"] + ["┃", "pairs"] * pairs, out
                assert row == [cls, "│", op, "│", str(msgs)] + ["│", "model"] * pairs, out
        if op:  # rankmap show: the table of MPI operations has its figures and no bytes column
            words = " ".join(s.stdout.replace("─", " ").split())
            assert "(average, min, max over the processes), instances operation avg time min max n/proc" in words, \
                s.stdout
            row = [ln for ln in s.stdout.splitlines() if f"  {op} " in ln][-1]
            assert row.split()[-1] == str(per_proc), row


@pytest.mark.mpi
@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_store_agrees_with_the_records(mpi, examples, home, tmp_path):
    """One-sided (an MPI_Get counts from target to origin) and collective traffic through the store."""
    n = 4
    runs = [("rma", ["100", "2"], []), ("alltoall", ["64", "2"], [])]
    if mpi == "openmpi":            # the library source, asked for: Open MPI's monitoring PML
        runs.append(("alltoall", ["64", "2"], ["--collectives", "library"]))
    for name, args, opts in runs:
        run = tmp_path / (name + ("-library" if opts else ""))
        p = rankmap("profile", "--no-summary", *opts, "--run-dir", str(run), "--",
                    *example(mpi, examples, n, name, *args), env=home)
        assert p.returncode == 0, p.stderr
        store = open_store(home["RANKMAP_DB"])
        jid = store.resolve_job("latest")
        recs = pairs.read_dir(run)
        for klass in ("p2p", "collective", "rma"):
            want = records.traffic_matrix(recs, klass=klass, world_size=n)
            assert store.traffic_matrix(jid, classes=[klass]).tolist() == want.tolist(), (name, klass)
            want = records.traffic_matrix(recs, klass=klass, world_size=n, what="messages")
            assert store.traffic_matrix(jid, classes=[klass], what="messages").tolist() == want.tolist()
        # MPI_T performance variables: every sample of every rank, as the records hold them
        want_pv = sorted((r.world_rank, t, r.pvar_defs[v].name, list(vals)) for r in recs
                         for v, t, vals in r.pvar_samples)
        assert sorted((x["rank"], x["t_ns"], x["name"], x["values"]) for x in store.pvars(jid)) == want_pv
        assert want_pv or mpi == "mpich"          # Debian's MPICH offers none, Open MPI 4.1 some
        # where the pairs come from, as the records say: the alltoall's from the mirror of the library's
        # choice by default, from the monitoring PML when the library source is asked for
        want_ps: dict[tuple, int] = {}
        for r in recs:
            for t in r.traffic:
                if t.direction == "send" and t.klass != "rma":
                    want_ps[(t.operation, t.label)] = want_ps.get((t.operation, t.label), 0) + t.bytes
        got_ps: dict[tuple, int] = {}
        for row in store.traffic(jid, by_pair_source=True):
            if row["class"] != "rma":
                k = (row["operation"], row["pair_source"])
                got_ps[k] = got_ps.get(k, 0) + row["bytes"]
        assert got_ps == want_ps, (name, got_ps, want_ps)
        if name == "alltoall":
            assert {ps for (op, ps) in got_ps if op == "MPI_Alltoall"} == {"library" if opts else "mirror"}
        # the run directory ingested afterwards into a fresh store: the same pairs, collectives too
        fresh = f"sqlite:///{tmp_path / (run.name + '-fresh.db')}"
        q = rankmap("ingest", str(run), "--db", fresh, env=home)
        assert q.returncode == 0, q.stderr
        again = open_store(fresh)
        for klass in ("p2p", "collective", "rma"):
            assert again.traffic_matrix(again.resolve_job("latest"), classes=[klass]).tolist() == \
                store.traffic_matrix(jid, classes=[klass]).tolist(), (name, klass)
        assert len(again.pvars(again.resolve_job("latest"))) == len(want_pv)
        assert sorted((r["src"], r["dst"], r["class"], r["operation"], r["pair_source"], r["bytes"])
                      for r in again.traffic(again.resolve_job("latest"), by_pair_source=True)) == \
            sorted((r["src"], r["dst"], r["class"], r["operation"], r["pair_source"], r["bytes"])
                   for r in store.traffic(jid, by_pair_source=True))
        if name == "rma":   # origin world r = p-1-i Gets COUNT/2 doubles from sub-rank (i+2)%p
            gets = store.traffic_matrix(jid, classes=["rma"])
            for i in range(n):
                origin, target = n - 1 - i, n - 1 - (i + 2) % n
                assert gets[target, origin] == 2 * 4 * 100
        else:
            assert store.traffic_matrix(jid, classes=["collective"]).sum() > 0


@pytest.mark.mpi
def test_ctrl_c_terminates_the_job_and_keeps_its_records(examples, home, tmp_path):
    cmd = example("openmpi", examples, 2, "ring", "100", "3", "60")    # sleeps 60 s before finalising
    env = dict(os.environ, **home)
    proc = subprocess.Popen([sys.executable, "-m", "rankmap", "profile", "--flush-ms", "200", "--no-summary",
                             "--", *cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            store = open_store(home["RANKMAP_DB"])
            if store.traffic_matrix(store.resolve_job("latest")).sum() == 600:
                break
        except Exception:
            continue
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 60, err
    assert proc.returncode != 0 and "Traceback" not in err, err
    assert "kept records up to last flush" in err, err
    store = open_store(home["RANKMAP_DB"])
    jid = store.resolve_job("latest")
    assert store.job(jid)["exit_status"] == proc.returncode, err
    assert store.traffic_matrix(jid, classes=["p2p"]).tolist() == [[0, 300], [300, 0]], err


@pytest.mark.mpi
@pytest.mark.postgres
def test_profile_into_postgresql(pg_cluster, examples, tmp_path):
    url = pg_cluster.new_database().replace("postgresql+psycopg://", "postgresql://")   # as people type it
    env = {"RANKMAP_HOME": str(tmp_path / "home")}
    p = rankmap("profile", "--db", url, "--no-summary", "--", *example("mpich", examples, 3, "ring", "10", "2"),
                env=env)
    assert p.returncode == 0, p.stderr
    e = cli("export", "latest", "--db", url, env=env)
    assert e.returncode == 0, e.stderr
    assert [r for r in csv_rows(e.stdout) if r["class"] == "p2p"] == [
        {"src": str(s), "dst": str((s + 1) % 3), "class": "p2p", "operation": "MPI_Isend", "bytes": "20",
         "messages": "2"} for s in range(3)]


@pytest.mark.mpi
def test_exit_status_is_propagated(ring_bins, home, tmp_path):
    p = rankmap("profile", "--no-summary", "--", *launch("openmpi", ring_bins, 2, "100", "3", "3"), env=home)
    assert p.returncode == 3, p.stderr
    assert "job exited with status 3; kept records up to last flush" in p.stderr
    store = open_store(home["RANKMAP_DB"])
    jid = store.resolve_job("latest")
    assert (store.job(jid)["exit_status"], store.job(jid)["state"]) == (3, "failed")   # what it recorded is kept
    assert store.traffic_matrix(jid, classes=["p2p"]).tolist() == [[0, 300], [300, 0]]


@pytest.mark.mpi
def test_crashed_job_keeps_flushed_records(ring_bins, home, tmp_path):
    p = rankmap("profile", "--flush-ms", "200", "--no-summary", "--",
                *launch("openmpi", ring_bins, 2, "100", "4", "-1"), env=home, timeout=120)
    assert p.returncode != 0
    assert f"job exited with status {p.returncode}; kept records up to last flush" in p.stderr
    assert "rankmap: warning:" in p.stderr and "Traceback" not in p.stderr
    store = open_store(home["RANKMAP_DB"])
    jid = store.resolve_job("latest")
    assert store.traffic_matrix(jid, classes=["p2p"]).tolist() == [[0, 400], [400, 0]]


@pytest.mark.mpi
def test_link_sampler_streams_beside_the_job(ring_bins, home, tmp_path):
    """The link sampler starts beside the job's start (NVML faked: GPM, constant rates) and its samples,
    source and cost reach the job; the traffic is the job's as without it."""
    from test_monitor import fake_env
    env = {**home, **fake_env(rates=[[10 * 10**9, 0, 10**8, 0]])}
    p = rankmap("profile", "--no-summary", "--", *launch("openmpi", ring_bins, 2, "100", "3"), env=env)
    assert p.returncode == 0, p.stderr
    store = open_store(home["RANKMAP_DB"])
    jid = store.resolve_job("latest")
    ls = store.job(jid)["meta"]["link_sampler"]
    assert ls["source"] == "gpm" and ls["cost"]["samples"] >= 2 and len(ls["gpus"]) == 1
    assert ls["interval_ms"] == 1000          # once a flush interval by default (docs/benchmarks.md: 10 Hz cost ~4 %)
    assert store.link_samples(jid)
    assert store.traffic_matrix(jid, classes=["p2p"]).tolist() == [[0, 300], [300, 0]]
    p = rankmap("profile", "--no-summary", "--link-ms", "250", "--", *launch("openmpi", ring_bins, 2, "100", "3"),
                env=env)
    assert p.returncode == 0, p.stderr
    assert store.job(store.resolve_job("latest"))["meta"]["link_sampler"]["interval_ms"] == 250


@pytest.mark.parametrize("flush_ms, link_ms, want", [(1000, None, 1000), (500, None, 500), (500, 200, 200)])
def test_the_link_sampler_reads_once_a_flush_interval_unless_told(flush_ms, link_ms, want, tmp_path):
    """Its ticks then fall on the moments the ranks flush (both are wall-clock multiples)."""
    from rankmap.errors import RankmapError
    from rankmap.pipeline import profile as P
    plan = P._prepare(["true"], store=f"sqlite:///{tmp_path / 'r.db'}", bucket_ms=100, flush_ms=flush_ms,
                      link_ms=link_ms, mpicc=None, run_dir=tmp_path / "run", nccl="off", cuda=None, collectives=None)
    assert plan.meta["link_ms"] == want
    with pytest.raises(RankmapError, match="--link-ms must be positive"):
        P._prepare(["true"], store=None, bucket_ms=100, flush_ms=flush_ms, link_ms=0, mpicc=None,
                   run_dir=tmp_path / "run2", nccl="off", cuda=None, collectives=None)


@pytest.mark.mpi
def test_a_store_that_cannot_be_opened_once_the_job_runs_costs_it_nothing(ring_bins, home, tmp_path):
    """The store is opened while the job runs: one that cannot be (here a file that is no database)
    is an outage -- the job ends as it would, its records stay, and the command that stores them is
    said -- and that command then stores the exact job."""
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_text("this is not a database\n" * 100)
    run = tmp_path / "run"
    p = rankmap("profile", "--db", f"sqlite:///{bad}", "--no-summary", "--run-dir", str(run), "--",
                *launch("openmpi", ring_bins, 2, "100", "3", "3"), env=home)
    assert p.returncode == 3, p.stderr
    assert "Traceback" not in p.stderr and "the job goes on and its records stay in" in p.stderr
    hint = [l for l in p.stderr.splitlines() if "complete it with: rankmap ingest" in l]
    assert len(hint) == 1, p.stderr
    assert len(list(run.glob("rank-*.mpi.rmrec"))) == 2
    good = f"sqlite:///{tmp_path / 'good.db'}"
    q = rankmap("ingest", str(run), "--db", good, env=home)
    assert q.returncode == 0, q.stderr
    store = open_store(good)
    jid = store.resolve_job("latest")
    assert store.job(jid)["exit_status"] == 3
    assert store.traffic_matrix(jid, classes=["p2p"]).tolist() == [[0, 300], [300, 0]]


@pytest.mark.mpi
def test_a_mistyped_store_is_refused_before_the_launch(ring_bins, home, tmp_path):
    run = tmp_path / "run"
    for url, said in (("mysql://host/db", "unsupported database mysql://host/db"),
                      ("not a url", "not a database URL"),
                      (f"sqlite:///{tmp_path / 'file' / 'sub' / 'r.db'}", "cannot create the database directory")):
        (tmp_path / "file").write_text("")
        p = rankmap("profile", "--db", url, "--run-dir", str(run), "--", *launch("openmpi", ring_bins, 2), env=home)
        assert_one_line_error(p, said)
        assert not run.exists() or not list(run.iterdir())          # nothing ran


def test_single_mpi_process_is_a_plain_launch(ring_bins, home):
    if "openmpi" not in ring_bins:
        pytest.skip("Open MPI is not installed")
    env = dict(home, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = rankmap("profile", "--no-summary", "--", str(ring_bins["openmpi"]), "10", "2", env=env)
    assert p.returncode == 0, p.stderr
    store = open_store(home["RANKMAP_DB"])
    jid = store.resolve_job("latest")
    assert store.job(jid)["launcher"] == "plain"
    assert store.traffic_matrix(jid, classes=["p2p"]).tolist() == [[20]]


# ------------------------------------------------------------- bad input
def test_unknown_launcher(home):
    assert_one_line_error(rankmap("profile", "--", "aprun", "-n", "4", "./a.out", env=home),
                          "launcher 'aprun' is not supported", "mpirun")


@pytest.mark.mpi
def test_missing_mpicc(ring_bins, home):
    p = rankmap("profile", "--mpicc", "/nonexistent", "--", *launch("openmpi", ring_bins, 2), env=home)
    assert_one_line_error(p, "/nonexistent")


@pytest.mark.mpi
def test_unwritable_run_dir(ring_bins, home, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    p = rankmap("profile", "--run-dir", str(blocker / "run"), "--", *launch("openmpi", ring_bins, 2), env=home)
    assert_one_line_error(p, f"run directory {blocker / 'run'} cannot be written")


def test_export_unknown_job(home):
    open_store(home["RANKMAP_DB"])   # an empty store (a path with none is another error: test_read_verbs)
    assert_one_line_error(cli("export", "latest", env=home), "no jobs")
    assert_one_line_error(cli("export", "42", env=home), "unknown job '42'")




WRITER = textwrap.dedent(r"""
    /* Stands in for a rank: writes one record file through rankmap's record writer, flushes,
       sleeps (argv[1] seconds, or until the file argv[2] exists, for at most 60 s), then adds as
       much again and closes. */
    #include "rmrec.h"
    #include <stdlib.h>
    #include <unistd.h>
    int main(int argc, char **argv) {
      rmrec_t *c = rmrec_open(getenv("RANKMAP_RUN_DIR"), "mpi", 0, 2);
      int op = rmrec_op(c, "MPI_Send");
      rmrec_traffic(c, 1, 0, op, 1, 0, 1000, 2);
      rmrec_flush(c);
      if (argc > 2)
        for (int i = 0; i < 1200 && access(argv[2], F_OK) != 0; i++) usleep(50000);
      else
        sleep(atoi(argv[1]));
      rmrec_traffic(c, 1, 0, op, 1, 0, 1000, 2);
      rmrec_close(c);
      return 0;
    }
""")


@pytest.fixture(scope="session")
def writer(tmp_path_factory) -> Path:
    src = ROOT / "native" / "common" / "rmrec.c"
    if not src.exists():
        pytest.skip("the record writer (native/common/rmrec.c) is absent")
    d = tmp_path_factory.mktemp("writer")
    (d / "writer.c").write_text(WRITER)
    exe = d / "writer"
    subprocess.run(["cc", "-O1", "-I", str(src.parent), "-o", str(exe), str(d / "writer.c"), str(src),
                    "-lpthread"], check=True)
    return exe


def test_progress_line_when_asked(writer, home, tmp_path):
    """The line shows what the rank flushed while it runs: the rank waits for the test to see its first
    kB before it sends the second (a fixed sleep lost the race on a loaded machine)."""
    go = tmp_path / "go"
    p = subprocess.Popen([sys.executable, "-m", "rankmap", "profile", "--progress", "--no-summary", "--",
                          str(writer), "0", str(go)], env={**os.environ, **home}, stderr=subprocess.PIPE)
    seen = b""
    try:
        while b"1 kB sent" not in seen:
            chunk = p.stderr.read1(4096)
            if not chunk:
                break
            seen += chunk
    finally:
        go.touch()
        seen += p.stderr.read()
        p.wait(timeout=120)
    err = seen.decode(errors="replace")
    assert p.returncode == 0, err
    assert "/1 rank reporting · " in err and "1 kB sent" in err
    p = rankmap("profile", "--no-summary", "--", str(writer), "0", env=home)
    assert "reporting · " not in p.stderr              # not a terminal: no progress line


def test_torchrun_gets_the_nccl_plugin_in_its_environment(home, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "torchrun"
    fake.write_text(f"#!/bin/sh\nenv > {tmp_path / 'env.txt'}\necho \"$@\" > {tmp_path / 'args.txt'}\n")
    fake.chmod(0o755)
    env = dict(home, PATH=f"{bindir}:{os.environ['PATH']}")
    p = rankmap("profile", "--no-summary", "--bucket-ms", "50", "--", "torchrun", "--nproc_per_node=2", "train.py",
                env=env)
    assert p.returncode == 0, p.stderr
    seen = dict(l.split("=", 1) for l in (tmp_path / "env.txt").read_text().splitlines() if "=" in l)
    assert Path(seen["NCCL_PROFILER_PLUGIN"]).name == "librankmap_nccl.so"
    assert Path(seen["RANKMAP_RUN_DIR"]).is_dir() and seen["RANKMAP_BUCKET_MS"] == "50"
    assert "LD_PRELOAD" not in seen or "rankmap" not in seen["LD_PRELOAD"]
    assert (tmp_path / "args.txt").read_text().split() == ["--nproc_per_node=2", "train.py"]
    store = open_store(home["RANKMAP_DB"])
    job = store.job(store.resolve_job("latest"))
    assert job["launcher"] == "torchrun" and job["world_size"] == 2


@pytest.mark.timing
def test_records_stream_into_the_store_while_the_job_runs(writer, home, tmp_path):
    exe = writer
    env = dict(os.environ, **home)
    proc = subprocess.Popen([sys.executable, "-m", "rankmap", "profile", "--no-summary", "--", str(exe), "6"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen_live = None
    # until the job ends (its writer sleeps 6 s between its two writes): a deadline of 5 s from here
    # ran out on a loaded machine before rankmap and the writer had started
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.25)
        try:
            store = open_store(home["RANKMAP_DB"])
            m = store.traffic_matrix(store.resolve_job("latest"))
        except Exception:
            continue
        if m.size and m.sum():
            seen_live = m.tolist()
            break
    if seen_live is None:
        out, err = proc.communicate()
        raise AssertionError(f"the job ended (status {proc.returncode}) before its records were seen: {err}")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert seen_live == [[0, 1000], [0, 0]]
    store = open_store(home["RANKMAP_DB"])
    jid = store.resolve_job("latest")
    assert store.traffic_matrix(jid).tolist() == [[0, 2000], [0, 0]]
    assert store.job(jid)["world_size"] == 2


@pytest.mark.mpi
@pytest.mark.parametrize("db", BACKENDS)
def test_a_launch_that_started_no_rank_is_failed(db, request, tmp_path):
    """mpirun that cannot start its program: the job exits non-zero with no rank's records. It was
    listed as "finished", as if it had run; it is "failed", with its exit status, in `rankmap jobs`,
    the dashboard's API, and /metrics leaves it out."""
    if not shutil.which("mpirun.openmpi"):
        pytest.skip("Open MPI is not installed")
    url = (request.getfixturevalue("pg_cluster").new_database() if db == "postgresql"
           else f"sqlite:///{tmp_path / 'r.db'}")
    env = {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": url}
    p = rankmap("profile", "--no-summary", "--", "mpirun.openmpi", "--allow-run-as-root", "-np", "2",
                str(tmp_path / "nonexistent"), env=env, timeout=120)
    assert p.returncode not in (0, 2), p.stderr          # mpirun's own status (2 is rankmap's for bad input)
    said = [l for l in p.stderr.splitlines() if l.startswith("rankmap:")]
    assert said == [f"rankmap: warning: job 1 failed (exit status {p.returncode}) before any rank wrote a "
                    f"record file in {said[0].split(' record file in ', 1)[1].split(':')[0]}: nothing was captured"]
    jobs = json.loads(cli("jobs", "--format", "json", env=env).stdout)
    assert [(j["id"], j["state"], j["exit_status"], j["ranks"], j["bytes"]) for j in jobs] == \
        [(1, "failed", p.returncode, 0, 0)]
    table = cli("jobs", env=dict(env, COLUMNS="200"))
    assert table.returncode == 0 and f"failed (exit {p.returncode})" in table.stdout, table.stdout
    pytest.importorskip("fastapi", reason="the dashboard needs the web extra (fastapi)")
    from rankmap.web.app import create_app
    from test_web_api import local_client

    client = local_client(create_app(open_store(url), "h200x2-nvswitch"))
    listed = client.get("/api/jobs").json()["jobs"]
    assert [(j["id"], j["state"], j["running"]) for j in listed] == [(1, "failed", False)]
    d = client.get("/api/jobs/1").json()
    assert (d["job"]["state"], d["running"], d["summary"]["ranks_reporting"]) == ("failed", False, 0)
    assert 'job="1"' not in client.get("/metrics").text


def test_rankmap_loads_numpy_with_one_blas_thread_and_the_job_inherits_nothing(tmp_path):
    """OpenBLAS starts a spinning thread per core when NumPy is imported: rankmap's own process
    imports it with one, and the variable that says so is gone before any job starts."""
    if "OPENBLAS_NUM_THREADS" in os.environ:
        pytest.skip("OPENBLAS_NUM_THREADS is set here: rankmap leaves a user's value alone")
    probe = ("import os; from rankmap import background; background.numpy_with_one_blas_thread(); "
             "print(len(os.listdir('/proc/self/task')), 'OPENBLAS_NUM_THREADS' in os.environ)")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "False"]
    plain = subprocess.run([sys.executable, "-c", "import os, numpy; print(len(os.listdir('/proc/self/task')))"],
                           env=env, capture_output=True, text=True, check=True).stdout
    if (os.cpu_count() or 1) > 1:
        assert int(plain) > 1          # without it NumPy's OpenBLAS does start more: the check can fail
    # a job started by `rankmap profile` (here `env` itself) sees the environment without the variable
    p = rankmap("profile", "--no-summary", "--no-progress", "--", "env",
                env=dict(env, RANKMAP_HOME=str(tmp_path / "home"), RANKMAP_DB=f"sqlite:///{tmp_path / 'r.db'}"))
    assert "PATH=" in p.stdout and "OPENBLAS_NUM_THREADS" not in p.stdout


def test_a_job_that_ends_before_nvml_is_ready_waits_for_no_sampler(monkeypatch):
    """A job's end waits a bounded time (START_WAIT_S) for a sampler still starting, not for a
    driver that hangs: then no sampler, and the source opened late is closed."""
    import threading

    from rankmap.counters import sampler as S
    from rankmap.pipeline import profile as P

    opened, closed = threading.Event(), threading.Event()

    class Slow:
        kind = "gpm"

        def gpu_count(self) -> int:
            return 1

        def close(self) -> None:
            closed.set()

    def slow_open(_kind):
        opened.wait(5)          # NVML still starting until the test lets it go
        return Slow()

    monkeypatch.setattr(S, "open_source", slow_open)
    monkeypatch.setattr(P, "START_WAIT_S", 0.2)
    start = P._SamplerStart(0.1)
    start.start()
    start.attach(object(), 1)
    t0 = time.perf_counter()
    assert start.result() is None and start.abandoned
    assert time.perf_counter() - t0 < 1.0
    opened.set()
    assert closed.wait(5)          # the source opened after the job's end is closed, never sampled
    start.join(5)
    assert start.sampler is None


def test_rankmaps_threads_beside_a_job_run_at_the_lowest_priority(writer, home):
    """The streaming ingest gives way to the job's ranks (rankmap.background): its thread runs at
    niceness 19, the main thread (which starts the job: the ranks inherit it) keeps its own."""
    import threading

    from rankmap.background import yield_to_the_job

    before = os.getpriority(os.PRIO_PROCESS, 0)
    got = {}
    t = threading.Thread(target=lambda: got.update(said=yield_to_the_job(),
                                                   nice=os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
    t.start()
    t.join()
    assert got["said"] == "nice 19" and got["nice"] == 19
    assert os.getpriority(os.PRIO_PROCESS, 0) == before           # the calling thread's is untouched
    p = rankmap("profile", "--no-summary", "--", str(writer), "0", env=home)
    assert p.returncode == 0, p.stderr
    store = open_store(home["RANKMAP_DB"])
    assert store.job(store.resolve_job("latest"))["meta"]["ingest_priority"] == "nice 19"
