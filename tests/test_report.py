"""The terminal summary and the POP metrics, from a store filled with known records."""

from __future__ import annotations

import pytest
from rich.console import Console

from rankmap.report.pop import pop_metrics
from rankmap.report.summary import blocks, human_bytes, print_summary
from rankmap.store import open_store
from test_store import FakeRecord, Row


def test_pop_metrics_follow_the_pop_definitions():
    ranks = [{"elapsed_ns": 10, "comm_ns": 2}, {"elapsed_ns": 10, "comm_ns": 6}, {"elapsed_ns": 8, "comm_ns": 0}]
    m = pop_metrics(ranks)                       # useful = 8, 4, 8; runtime 10
    assert m.runtime_ns == 10 and m.max_useful_ns == 8
    assert m.load_balance == pytest.approx((20 / 3) / 8)
    assert m.communication_efficiency == pytest.approx(0.8)
    assert m.parallel_efficiency == pytest.approx((20 / 3) / 10)
    assert pop_metrics([]) is None
    assert pop_metrics([{"elapsed_ns": 0, "comm_ns": 0}]) is None


def test_human_bytes_and_blocks():
    assert human_bytes(999) == "999 B" and human_bytes(1234567) == "1.23 MB" and human_bytes(2e9) == "2 GB"
    assert blocks(4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    b = blocks(100)
    assert len(b) <= 32 and b[0] == (0, 4) and b[-1][1] == 100


def summary_text(store, jid, width=200) -> str:
    c = Console(width=width, record=True, force_terminal=False)
    with c.capture() as cap:
        print_summary(store, jid, console=c)
    return cap.get()


def test_summary_sections(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'db'}")
    jid = store.create_job(["mpirun", "-np", "2", "./x"], launcher="openmpi", world_size=2)
    store.ingest(jid, [
        FakeRecord(0, world_size=2, elapsed_ns=10**9, op_time={"MPI_Send": (1, 2 * 10**8)},
                   traffic=[Row(1, "p2p", "MPI_Send", "device", "send", 3_000_000, 3)]),
        FakeRecord(1, world_size=2, elapsed_ns=10**9, op_time={"MPI_Allreduce": (1, 6 * 10**8)},
                   traffic=[Row(0, "collective", "MPI_Allreduce", "host", "send", 1_000_000, 1)]),
    ])
    store.finish_job(jid, exit_status=0, elapsed_ns=10**9)
    out = summary_text(store, jid)
    for s in ("rankmap job", "bytes by class and operation (total 4 MB)", "MPI_Allreduce", "heaviest pairs",
              "0 → 1", "traffic matrix", "3.0M", "device (GPU-resident)", "75.0 %", "host (staged",
              "POP efficiency", "load balance", "communication efficiency", "80.0 %",
              "parallel efficiency", "60.0 %"):
        assert s in out, (s, out)


def test_large_jobs_are_shown_in_blocks(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'db'}")
    n = 64
    jid = store.create_job(["mpirun", "-np", str(n), "./x"], launcher="openmpi", world_size=n)
    store.ingest(jid, [FakeRecord(r, world_size=n, traffic=[Row((r + 1) % n, "p2p", "MPI_Send", "host", "send",
                                                                  100, 1)]) for r in range(n)])
    out = summary_text(store, jid, width=400)
    assert "blocks of 2 ranks" in out and "62-63" in out
    assert "no traffic recorded" in summary_text(store, store.create_job(["x"]))


def test_matrix_fits_the_console(tmp_path):
    """At 80 columns (a terminal's, and rich's for a file or a pipe) the matrix of a 16-rank job had its
    cells cut to "2.…", its row labels gone, and two columns silently dropped; 64 ranks drew a grid of
    "…". Every cell must now be printed whole, in panels of columns or in blocks of ranks that fit."""
    store = open_store(f"sqlite:///{tmp_path / 'db'}")
    for n, width, want_blocks in ((16, 80, None), (64, 80, 8), (64, 200, 16), (4, 30, None)):
        jid = store.create_job(["mpirun", "-np", str(n), "./x"], launcher="openmpi", world_size=n)
        store.ingest(jid, [FakeRecord(r, world_size=n, traffic=[Row((r + 1) % n, "p2p", "MPI_Send", "host", "send",
                                                                      2_500_000_000, 1)]) for r in range(n)])
        out = summary_text(store, jid, width=width)
        lines = out.splitlines()
        i = next(k for k, ln in enumerate(lines) if ln.startswith("traffic matrix"))
        i = next(k for k in range(i, len(lines)) if "src\\dst" in lines[k])     # after the (wrapped) title
        j = next(k for k, ln in enumerate(lines) if ln.startswith("where the sent bytes lived"))
        assert max(map(len, lines[i:j])) <= width and not any("…" in ln for ln in lines[i:j]), out
        grid = [ln.split() for ln in lines[i:j] if ln.strip()]
        heads = [ln[1:] for ln in grid if ln[0] == "src\\dst"]
        cols = [c for h in heads for c in h]
        if want_blocks is None:
            assert cols == [str(r) for r in range(n)], out        # every rank's column, in order, once
            cells = [c for ln in grid if ln[0] != "src\\dst" for c in ln[1:]]
            assert cells.count("2.5G") == n and set(cells) == {"2.5G", "·"}, out   # each ring pair once
            assert len(heads) == (1 if width >= 8 + 7 * n else -(-n // ((width - 9) // 7))), out
        else:
            size = n // want_blocks
            assert f"blocks of {size} ranks" in " ".join(out.split()) and len(cols) == want_blocks, out
            assert cols[-1] == f"{n - size}-{n - 1}" and len(heads) == 1, out


def test_counts_of_one_are_singular(tmp_path):
    """``rankmap show`` of a one-rank job said "1 of 1 ranks reported" and "POP efficiency (1 ranks";
    the profile's progress line "1 ranks reporting"; the mapping report "1 rank(s) per GPU" (one of each, and two)."""
    from types import SimpleNamespace

    from conftest import cli
    from rankmap.pipeline.profile import _ProgressLine
    from rankmap.errors import counted

    url = f"sqlite:///{tmp_path / 'db'}"
    store = open_store(url)
    for n in (1, 2):
        jid = store.create_job(["mpirun", "-np", str(n), "./x"], launcher="openmpi", world_size=n)
        store.ingest(jid, [FakeRecord(r, world_size=n, elapsed_ns=10**9, op_time={"MPI_Send": (1, 10**8)},
                                      traffic=[Row((r + 1) % n, "p2p", "MPI_Send", "device", "send", 100, 1)])
                           for r in range(n)])
        store.finish_job(jid, exit_status=0, elapsed_ns=10**9)
        p = cli("show", str(jid), "--db", url, env={"COLUMNS": "200"})
        assert p.returncode == 0, p.stderr
        word = "rank" if n == 1 else "ranks"
        assert f"{n} of {n} {word} reported" in p.stdout and f"POP efficiency ({n} {word}, " in p.stdout, p.stdout
    m = cli("map", "--job", str(jid), "--db", url, "--topology", "dgx1-v100", env={"COLUMNS": "200"})
    assert m.returncode == 0, m.stderr   # (a one-rank job sends nothing to place)
    assert "placement of 2 ranks on 1 x dgx1-v100 (8 GPUs per node, 1 rank per GPU)" in m.stdout, m.stdout
    assert [counted(k, "rank") for k in (0, 1, 2, "?")] == ["0 ranks", "1 rank", "2 ranks", "? ranks"]
    line = _ProgressLine(7, SimpleNamespace(ranks_reporting=1, bytes_sent=1000), None, False)
    assert "· 1 rank reporting · 1 kB sent" in line.__rich__()
    line = _ProgressLine(7, SimpleNamespace(ranks_reporting=1, bytes_sent=1000), 4, False)
    assert "· 1/4 ranks reporting · " in line.__rich__()


def test_show_gpu_of_a_job_without_cuda_activity(tmp_path):
    """``rankmap show JOB --gpu`` of a job whose profile recorded no CUDA activity said "over ? GPU
    rank(s)" above a table of MPI rows, and a verdict that "host copies moved 0 B" though no copy was
    recorded. It says plainly that there is none, and how to record it."""
    from conftest import cli

    url = f"sqlite:///{tmp_path / 'db'}"
    store = open_store(url)
    cmd = ["mpirun", "-np", "2", "./x"]
    captures = {None: "--cuda-activity on -- mpirun -np 2 ./x",                      # profiled before the option
                "off (--cuda-activity off)": "profiled without --cuda-activity; profile it with `rankmap "
                                             "profile --cuda-activity on -- mpirun -np 2 ./x`",
                "off: no CUDA driver (libcuda) on this machine": "no CUDA driver",
                "on": "no rank initialised CUDA"}
    for capture, says in captures.items():
        jid = store.create_job(cmd, launcher="openmpi", world_size=2,
                               meta={} if capture is None else {"cuda_activity": capture})
        store.ingest(jid, [FakeRecord(r, world_size=2, elapsed_ns=10**9, op_time={"MPI_Send": (1, 10**8)},
                                      traffic=[Row(1 - r, "p2p", "MPI_Send", "device", "send", 100, 1)])
                           for r in range(2)])
        store.finish_job(jid, exit_status=0, elapsed_ns=10**9)
        g = cli("show", str(jid), "--gpu", "--db", url, env={"COLUMNS": "200"})
        assert g.returncode == 0, g.stderr
        lines = [l for l in g.stdout.splitlines() if l.strip()]
        assert lines[0] == f"rankmap job {jid}  mpirun -np 2 ./x" and len(lines) == 2, g.stdout
        assert lines[1].startswith(f"job {jid} has no CUDA activity recorded") and says in lines[1], lines[1]
        s = cli("show", str(jid), "--db", url, env={"COLUMNS": "200"})
        assert s.returncode == 0, s.stderr
        assert "?" not in s.stdout and "(s)" not in s.stdout and "host copies moved" not in s.stdout, s.stdout
        assert "MPI/NCCL operations per process (no CUDA activity recorded)" in s.stdout, s.stdout
        assert "verdict: GPU-aware: 100 % of the bytes exchanged between ranks left device memory directly" in s.stdout
    # a monitor session runs no program: no profile option to suggest
    mon = store.create_job(["rankmap", "monitor"], launcher="monitor")
    store.finish_job(mon, exit_status=0, elapsed_ns=10**9)
    g = cli("show", str(mon), "--gpu", "--db", url, env={"COLUMNS": "200"})
    assert g.returncode == 0 and g.stdout.splitlines()[1:] == [
        f"job {mon} is a `rankmap monitor` session: it sampled the GPUs' links, and records no CUDA activity"], g.stdout


def test_pop_metrics_withheld_when_time_in_mpi_exceeds_the_run(tmp_path):
    """Figures of a real run (MPICH 4.0, 8 ranks of a 3-D halo on 2 shared cores, default sampled
    timing): most ranks' estimated time inside MPI_Sendrecv exceeded their elapsed time, and the
    summary printed "parallel efficiency 0.7 %, load balance 12.5 %" from useful times clamped to 0.
    Such metrics are withheld, with the reason and the way to exact timing."""
    elapsed = [647200572, 640476999, 652435544, 651693438, 646385352, 640203984, 650531688, 644804630]
    sendrecv = [1527045250, 983659213, 892567882, 864985582, 1322302628, 722950784, 614995678, 595707491]
    store = open_store(f"sqlite:///{tmp_path / 'db'}")
    jid = store.create_job(["mpiexec", "-np", "8", "./halo3d"], launcher="hydra", world_size=8)
    store.ingest(jid, [FakeRecord(r, world_size=8, elapsed_ns=e, op_time={"MPI_Sendrecv": (30, ns)},
                                  traffic=[Row((r + 1) % 8, "p2p", "MPI_Sendrecv", "host", "send", 327680, 10)])
                       for r, (e, ns) in enumerate(zip(elapsed, sendrecv))])
    store.finish_job(jid, exit_status=0, elapsed_ns=983400675)
    m = pop_metrics(store.ranks(jid))
    assert m.overrun == (0, 1, 2, 3, 4, 5)
    out = summary_text(store, jid, width=400)
    assert "POP efficiency: not computed: 6 ranks (0, 1, 2, 3, 4, 5) recorded more time inside MPI" in out, out
    assert "RANKMAP_SAMPLE=1" in out and "load balance" not in out and "parallel efficiency" not in out, out
    # sound figures are still shown
    assert pop_metrics([{"elapsed_ns": 10, "comm_ns": 10, "world_rank": 0}]).withheld() is None


def test_a_job_of_one_rank_says_it_has_no_peer(tmp_path):
    """A one-worker torchrun job records its NCCL calls but no pair: "no rank recorded a message" (seen
    on an H200) was untrue; the summary says the job has one rank."""
    store = open_store(f"sqlite:///{tmp_path / 'db'}")
    jid = store.create_job(["torchrun", "--nproc_per_node=1", "x.py"], launcher="torchrun", world_size=1)
    store.ingest(jid, [FakeRecord(0, [], world_size=1, elapsed_ns=10**9, op_time={"ncclAllReduce": (4, 10**6)})])
    out = summary_text(store, jid)
    assert "no bytes sent between ranks: the job has one rank" in out and "no rank recorded" not in out, out
    jid = store.create_job(["mpirun", "-np", "2", "./x"], launcher="openmpi", world_size=2)
    store.ingest(jid, [FakeRecord(r, [], world_size=2, elapsed_ns=10**9) for r in range(2)])
    assert "no bytes sent: no rank recorded a message" in summary_text(store, jid)
