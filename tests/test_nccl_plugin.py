"""The NCCL profiler plugin without NCCL or a GPU: a C harness drives it as NCCL does.

For every profiler ABI the plugin exports (v2..v7) the harness (tests/nccl_harness/harness.c) runs
as three ranks at once, issues a known scenario on two communicators (the world in rank order and
the same processes reversed), and the record files are checked byte for byte against what the
scenario must produce.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rankmap.pairs import nccl_graph, nccl_model
from rankmap.formats import record as records
from rankmap.capture.nccl_build import build_plugin
from rankmap.errors import RankmapError

ROOT = Path(__file__).resolve().parents[1]
HARNESS_SRC = ROOT / "tests" / "nccl_harness" / "harness.c"
N = 3
HA, HB = 0xA11CE, 0xB0B


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("RANKMAP_CACHE")
    os.environ["RANKMAP_CACHE"] = str(cache)
    try:
        return build_plugin()
    finally:
        if old is None:
            del os.environ["RANKMAP_CACHE"]
        else:
            os.environ["RANKMAP_CACHE"] = old


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("harness") / "harness"
    subprocess.run(["cc", "-std=gnu11", "-O1", "-Wall", "-Werror", "-o", str(exe), str(HARNESS_SRC), "-ldl"],
                   check=True)
    return exe


def run_ranks(harness: Path, plugin: Path, abi: int, run_dir: Path, n: int = N, **env) -> list[subprocess.CompletedProcess]:
    """Start n harness ranks at once (member files need them concurrent) and wait for all."""
    procs = []
    for r in range(n):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), RANKMAP_RUN_DIR=str(run_dir), **env)
        procs.append(subprocess.Popen([str(harness), str(plugin), str(abi), "scenario"], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        so, se = p.communicate(timeout=60)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


# ---- what the scenario must produce (written out from harness.c's scenario, independently of
#      rankmap.pairs.nccl_model) ----

def expected_traffic(abi: int, w: int, n: int = N) -> dict[tuple[int, str, str], list[int]]:
    """{(world peer, operation, direction): [bytes, messages]} of world rank w after the ingest's model
    (no NCCL log: rings and chains in rank order)."""
    exp: dict[tuple[int, str, str], list[int]] = {}

    def add(peer: int, op: str, d: str, b: int, msgs: int = 1) -> None:
        a = exp.setdefault((peer, "nccl" + op, d), [0, 0])
        a[0] += b
        a[1] += msgs

    succ, pred = (w + 1) % n, (w - 1) % n
    # communicator A: the world in rank order
    ar = 2 * (n - 1) * 4800 // n
    add(succ, "AllReduce", "send", 3 * ar, 3); add(pred, "AllReduce", "recv", 3 * ar, 3)
    add(succ, "AllGather", "send", 2 * (n - 1) * 512, 2); add(pred, "AllGather", "recv", 2 * (n - 1) * 512, 2)
    add(succ, "ReduceScatter", "send", (n - 1) * 1024); add(pred, "ReduceScatter", "recv", (n - 1) * 1024)
    root = 1 % n                                  # Broadcast 4096 B along root -> root+1 -> ...
    if w != (root - 1) % n:
        add(succ, "Broadcast", "send", 4096)
    if w != root:
        add(pred, "Broadcast", "recv", 4096)
    if w != 0:                                    # Reduce 400 B along ... -> root 0
        add(succ, "Reduce", "send", 400)
    if w != 1 % n:
        add(pred, "Reduce", "recv", 400)
    add(succ, "Send", "send", 2 * 20000, 2); add(pred, "Send", "recv", 2 * 20000, 2)
    for p in (w - 1, w + 1):                      # TREE AllReduce 131072 B: chain in rank order
        if 0 <= p < n:
            add(p, "AllReduce", "send", 131072); add(p, "AllReduce", "recv", 131072)
    # communicator B: the same processes reversed (comm rank = n-1-w); joined at ingest for every
    # ABI (v2/v3 do not say its size: the ingest learns it from the ranks that recorded it)
    cb = n - 1 - w
    bsucc, bpred = n - 1 - (cb + 1) % n, n - 1 - (cb - 1) % n
    arb = 2 * (n - 1) * 1200 // n
    add(bsucc, "AllReduce", "send", arb); add(bpred, "AllReduce", "recv", arb)
    if abi >= 4:
        add(bsucc, "Send", "send", 64); add(bpred, "Send", "recv", 64)
    return {k: v for k, v in exp.items() if k[0] != w}


def expected_calls(abi: int) -> dict[str, tuple[int, int]]:
    """{operation: (calls, payload bytes)} for any rank."""
    e = {"ncclAllReduce": (3 + 1 + 1, 3 * 4800 + 131072 + 1200), "ncclAllGather": (2, 2 * 512),
         "ncclReduceScatter": (1, 1024), "ncclBroadcast": (1, 4096), "ncclReduce": (1, 400),
         "ncclSend": (2, 40000), "ncclRecv": (2, 40000)}
    if abi >= 4:
        e["ncclSend"] = (3, 40064)
    return e


def expected_table(abi: int, w: int, comm: int) -> set[tuple]:
    """Rows (func, bytes, algo, proto, channels, root_or_peer, calls, captured) of one comm's table."""
    n, ch = N, 2
    if comm == HA:
        return {("AllReduce", 4800, "RING", "SIMPLE", ch, -1, 3, 0), ("AllGather", 512, "RING", "LL", ch, -1, 2, 0),
                ("ReduceScatter", 1024, "RING", "LL128", ch, -1, 1, 0), ("Broadcast", 4096, "RING", "SIMPLE", ch, 1, 1, 0),
                ("Reduce", 400, "RING", "SIMPLE", ch, 0, 1, 0),
                ("Send", 20000, "-", "-", 1 if abi >= 4 else 0, (w + 1) % n, 2, 0),
                ("Recv", 20000, "-", "-", 1 if abi >= 4 else 0, (w - 1) % n, 2, 0),
                ("AllReduce", 131072, "TREE", "LL128", ch, -1, 1, 0)}
    cb = n - 1 - w
    rows = {("AllReduce", 1200, "RING", "SIMPLE", ch, -1, 1, 0)}
    if abi >= 4:
        rows.add(("Send", 64, "-", "-", 1, (cb + 1) % n, 1, 0))
    return rows


def table_rows(rec, h: int, cr: int) -> set[tuple]:
    rows = nccl_model.parse_op_table(rec.meta[f"nccl.ops.{h:016x}.{cr}"])
    assert all(r.first_ns <= r.last_ns and r.time_ns >= 0 for r in rows)
    return {(r.func, r.bytes, r.algo, r.proto, r.channels, r.root_or_peer, r.calls, r.captured) for r in rows}


def payload_sent(rec) -> int:
    """What the plugin puts on its timeline: the payload of every call but receives."""
    return sum(b for op, b in rec.payload.items() if op != "ncclRecv")


# ---- tests -------------------------------------------------------------------------------------

def test_plugin_builds_and_exports_every_abi(plugin: Path, monkeypatch) -> None:
    assert plugin.name == "librankmap_nccl.so" and plugin.is_file()
    lib = ctypes.CDLL(str(plugin))
    for v in (2, 3, 4, 5, 6, 7):
        tbl = ctypes.c_void_p.in_dll(lib, f"ncclProfiler_v{v}")   # first member: the name
        assert ctypes.cast(tbl.value, ctypes.c_char_p).value == b"rankmap"
    monkeypatch.setenv("RANKMAP_CACHE", str(plugin.parents[2]))
    mtime = plugin.stat().st_mtime_ns
    assert build_plugin() == plugin and plugin.stat().st_mtime_ns == mtime   # cached: no rebuild


def test_build_failure_names_compiler_and_first_error(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "badcc"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'badcc 1.0'; exit 0; fi\n"
                    "echo 'plugin.c:1:1: error: no compiler here' >&2\necho 'second error' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("RANKMAP_CACHE", str(tmp_path / "cache"))
    with pytest.raises(RankmapError) as ei:
        build_plugin(cc=str(fake))
    msg = str(ei.value)
    assert str(fake) in msg and "error: no compiler here" in msg and "second" not in msg
    with pytest.raises(RankmapError, match="not found"):
        build_plugin(cc="no-such-compiler-rankmap")


MASK = {7: 2 | 4 | (1 << 9) | (1 << 10) | (1 << 12), 6: 2 | 4 | (1 << 9) | (1 << 10) | (1 << 12), 5: 2 | 4 | (1 << 9) | (1 << 10), 4: 2 | 4, 3: 2 | 4, 2: 2 | 4}


@pytest.mark.parametrize("abi", [7, 6, 5, 4, 3, 2])
def test_harness_records_facts_and_ingest_attributes_pairs(abi: int, plugin: Path, harness: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for r, p in enumerate(run_ranks(harness, plugin, abi, run_dir)):
        assert p.returncode == 0, p.stderr
        assert p.stderr == "", p.stderr                      # nothing said when all is well
        # coll + p2p tasks; from v5 the API events (graph capture); v6 copy-engine collectives.
        # Never proxy or kernel events: NCCL does no extra bookkeeping for the plugin.
        assert f"mask {MASK[abi]}" in p.stdout
    recs = records.read_dir(run_dir, source="nccl")
    assert [r.world_rank for r in recs] == list(range(N))
    for rec in recs:
        w = rec.world_rank
        assert rec.source == "nccl" and rec.world_size == N and rec.finalized and rec.problems == []
        assert rec.traffic == []                             # facts only: pairs are the ingest's
        assert {op: (c, rec.payload[op]) for op, (c, _ns) in rec.op_time.items()} == expected_calls(abi)
        assert rec.meta["nccl.world_rank_from"] == "environment" and rec.meta["nccl.pair_model"] == "ingest"
        assert rec.meta[f"nccl.comm.{HA:016x}"] == (f"name=world rank={w} nranks={N if abi >= 4 else -1} "
                                                     f"nnodes={1 if abi >= 4 else 0} abi=v{abi} bus=- ordinal=-1")
        assert table_rows(rec, HA, w) == expected_table(abi, w, HA)
        assert table_rows(rec, HB, N - 1 - w) == expected_table(abi, w, HB)
        # the timeline holds every byte of payload the rank sent, in buckets, under its own rank
        assert {p for _b, p, _k, _v in rec.timeline} == {w}
        assert sum(v for _b, _p, _k, v in rec.timeline) == payload_sent(rec)
    # the ingest: global ranks from the launcher, both communicators joined, the one model
    prof = nccl_model.load(run_dir)
    assert prof.ranks == list(range(N)) and prof.ranks_from == "environment"
    assert {h: (c.nranks, c.resolved) for h, c in prof.comms.items()} == {HA: (N, True), HB: (N, True)}
    out = nccl_model.ingest_records(prof)
    for rec in out:
        w = rec.world_rank
        got = {(t.peer, t.operation, t.direction): [t.bytes, t.messages] for t in rec.traffic}
        assert got == expected_traffic(abi, w), f"rank {w}"
        assert {t.label for t in rec.traffic if t.operation == "ncclSend"} == {"library"}
        assert {t.label for t in rec.traffic if t.operation != "ncclSend"} == {"model"}   # no NCCL log
        sent = sum(t.bytes for t in rec.traffic if t.direction == "send")
        assert sum(v for _b, _p, _k, v in rec.timeline) == sent        # timeline rescaled to the pairs
    m = records.traffic_matrix(out, klass="nccl")
    assert np.array_equal(m, records.received_matrix(out, klass="nccl"))    # both views agree
    assert np.array_equal(m, nccl_model.pair_matrix(prof)[0])
    assert nccl_model.op_summary(prof)[0][("AllReduce", 4800)] == 3


# ---- one process driving several GPUs ------------------------------------------------------------

@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory) -> Path:
    """A directory holding the stand-in libcuda.so.1 (tests/native/fake_cuda.c)."""
    d = tmp_path_factory.mktemp("fakecuda")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(d / "libcuda.so.1"),
                    str(ROOT / "tests" / "native" / "fake_cuda.c")], check=True)
    return d


def run_multi(harness: Path, plugin: Path, abi: int, run_dir: Path, nproc: int, ngpu: int, **env) -> None:
    """nproc harness processes at once, each driving ngpu GPUs, no RANK/WORLD_SIZE in sight."""
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    procs = [subprocess.Popen([str(harness), str(plugin), str(abi), "multi", str(nproc), str(i), str(ngpu)],
                              env=dict(base, RANKMAP_RUN_DIR=str(run_dir), **env),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(nproc)]
    for p in procs:
        so, se = p.communicate(timeout=60)
        assert p.returncode == 0 and se == "", se
        assert f"mask {MASK[abi]}" in so


def expected_multi(abi: int, n: int, ngpu: int) -> dict[tuple[int, int, str, str], list[int]]:
    """{(src, dst, operation, label): [bytes, calls]} of the multi scenario (harness.c), no NCCL log."""
    exp: dict[tuple[int, int, str, str], list[int]] = {}

    def add(s: int, d: int, op: str, label: str, b: int, calls: int) -> None:
        a = exp.setdefault((s, d, "nccl" + op, label), [0, 0])
        a[0] += b
        a[1] += calls

    for r in range(n):                     # W: the ring in rank order
        ar, calls = 2 * 2 * (n - 1) * 4000 // n, 2
        if abi >= 5:                       # plus the call captured into a CUDA graph
            ar, calls = ar + 2 * (n - 1) * 8192 // n, 3
        add(r, (r + 1) % n, "AllReduce", "model", ar, calls)
        add(r, (r + 1) % n, "AllGather", "model", (n - 1) * 256, 1)
        add(r, (r + 1) % n, "Send", "library", 300, 1)
    for first in range(0, n, ngpu):        # L: each process's GPUs, Broadcast from its first GPU
        for g in range(ngpu - 1):
            add(first + g, first + g + 1, "Broadcast", "model", 256, 1)
    return exp


@pytest.mark.parametrize("abi,gpu", [(6, True), (5, True), (4, True), (2, True), (6, False), (4, False)])
def test_one_process_several_gpus(abi: int, gpu: bool, plugin: Path, harness: Path, fake_libcuda: Path,
                                  tmp_path: Path) -> None:
    """nccl-tests -g N, ncclCommInitAll, JAX on one host: every GPU of a process is its own global rank,
    with its GPU; communicators over several GPUs and groups over several communicators."""
    P, G = 2, 2
    run_dir = tmp_path / "run"
    env = {"LD_LIBRARY_PATH": str(fake_libcuda)} if gpu else {"MULTI_NO_GPU": "1"}
    run_multi(harness, plugin, abi, run_dir, P, G, **env)
    recs = records.read_dir(run_dir, source="nccl")
    assert len(recs) == P * G and all(r.finalized and not r.problems for r in recs)
    prof = nccl_model.load(run_dir)
    assert sorted(prof.ranks) == list(range(P * G))
    assert prof.ranks_from == f"communicator {0x3A11:016x} ({P * G} ranks)"
    for rec, w in zip(prof.records, prof.ranks):
        me, g = divmod(w, G)               # global rank = comm rank in W = process * G + GPU
        assert rec.meta["nccl.world_rank_from"] == "first communicator"
        want_gpu = f"bus=0000:{0x18 + 16 * g:02x}:00.0 ordinal={g}" if gpu else "bus=- ordinal=-1"
        assert rec.meta["nccl.gpu"] == want_gpu
        assert rec.meta[f"nccl.comm.{0x10CA1 + me:016x}"].startswith(f"name=local rank={g} nranks={G if abi >= 4 else -1} ")
        calls = {"ncclAllReduce": (2 + (abi >= 5), 8000 + 8192 * (abi >= 5)), "ncclAllGather": (1, 256),
                 "ncclSend": (1, 300), "ncclRecv": (1, 300), "ncclBroadcast": (1, 256)}
        assert {op: (c, rec.payload[op]) for op, (c, _ns) in rec.op_time.items()} == calls
        captured = sum(r.captured for r in nccl_model.parse_op_table(rec.meta[f"nccl.ops.{0x3A11:016x}.{w}"]))
        assert captured == (1 if abi >= 5 else 0)
    assert {h: (c.nranks, c.resolved) for h, c in prof.comms.items()} == \
        {0x3A11: (P * G, True), **{0x10CA1 + i: (G, True) for i in range(P)}}
    p = nccl_model.pairs(prof)
    assert p.rows == expected_multi(abi, P * G, G) and p.unattributed == 0
    out = nccl_model.ingest_records(prof)
    assert sorted(r.world_rank for r in out) == list(range(P * G)) and {r.world_size for r in out} == {P * G}
    notes = [x for r in out for x in r.problems if "CUDA graphs" in x]
    assert len(notes) == (P * G if abi >= 5 else 0)
    assert all("1 NCCL calls were captured into CUDA graphs" in x and "replays are not counted" in x for x in notes)


def test_world_rank_from_hydras_pmi_port(plugin: Path, harness: Path, tmp_path: Path) -> None:
    """``mpiexec.mpich -pmi-port`` sets PMI_ID, and no PMI_RANK: the plugin took the comm rank of the
    process's first communicator, which need not be its world rank (here 0 against PMI_ID 5)."""
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                                             "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")}
    p = subprocess.run([str(harness), str(plugin), "6", "multi", "1", "0", "1"], capture_output=True, text=True,
                       env=dict(base, RANKMAP_RUN_DIR=str(tmp_path), MULTI_NO_GPU="1", PMI_ID="5",
                                PMI_PORT="host:4000"), timeout=60)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    [rec] = records.read_dir(tmp_path, source="nccl")
    assert rec.world_rank == 5 and rec.meta["nccl.world_rank_from"] == "environment"


def test_ranks_of_files_missing_are_reported_not_dropped(plugin: Path, harness: Path, fake_libcuda: Path,
                                                        tmp_path: Path) -> None:
    """A node's run directory lost: what was recorded still joins; bytes towards the lost ranks are named."""
    run_dir = tmp_path / "run"
    run_multi(harness, plugin, 6, run_dir, 2, 2, LD_LIBRARY_PATH=str(fake_libcuda))
    for f in run_dir.glob("rank-*.nccl.rmrec"):          # keep only the first process's two GPUs
        if f"nccl.comm.{0x10CA2:016x}" in records.read(f).meta:
            f.unlink()
    prof = nccl_model.load(run_dir)
    assert sorted(prof.ranks) == [0, 1] and not prof.comms[0x3A11].resolved
    p = nccl_model.pairs(prof)
    # rank 1 -> 2 (AllReduce 2 x 6000 + 12288, AllGather 768, Send 300) has no receiver on record
    assert p.unattributed == 2 * 6000 + 12288 + 768 + 300
    assert p.rows[(0, 1, "ncclSend", "library")] == [300, 1]
    assert any("no record file holds" in x for x in nccl_model.ingest_records(prof)[0].problems)


def test_ingest_reads_the_debug_log_of_the_run_directory(plugin: Path, harness: Path, tmp_path: Path) -> None:
    """rankmap profile has NCCL write its INFO output into the run directory; the ingest matches it to
    the recorded communicator by commId = the hash the plugin recorded."""
    run_dir = tmp_path / "run"
    assert all(p.returncode == 0 for p in run_ranks(harness, plugin, 5, run_dir))
    (run_dir / "nccl-debug.node1.4242.log").write_text("\n".join([
        "node1:4242:4243 [0] NCCL INFO comm 0x5555aaaa rank 0 nRanks 3 nNodes 1 localRanks 3 localRank 0 MNNVL 0",
        "node1:4242:4243 [0] NCCL INFO Channel 00/02 :    0   2   1",
        "node1:4242:4243 [0] NCCL INFO Channel 01/02 :    0   2   1",
        f"node1:4242:4243 [0] NCCL INFO ncclCommInitRank comm 0x5555aaaa rank 0 nranks 3 cudaDev 0 nvmlDev 0 "
        f"busId 18000 commId {HA:#x} - Init COMPLETE", ""]))
    prof = nccl_model.load(run_dir)
    assert prof.comms[HA].graph is not None and nccl_model.pairs(prof).order[HA] == "nccl-graph"
    rows = nccl_model.pairs(prof).rows
    # AllReduce 4800 B x 3 on comm A follows 0 -> 2 -> 1 -> 0, not rank order
    ar = 2 * (N - 1) * 4800 // N * 3
    assert rows[(0, 2, "ncclAllReduce", "mirror")] == [ar, 3] and (0, 1, "ncclAllReduce", "mirror") not in rows
    out = nccl_model.ingest_records(prof)
    assert np.array_equal(records.traffic_matrix(out), records.received_matrix(out))


def test_rankmap_profile_of_one_process_driving_two_gpus(plugin: Path, harness: Path, fake_libcuda: Path,
                                                        tmp_path: Path) -> None:
    """``rankmap profile -- all_reduce_perf -g 2`` once said "only 1 of 2 ranks wrote records": now both
    GPUs are ranks in the store, with the model's pair rows."""
    import sys

    from rankmap.store import open_store
    db = f"sqlite:///{tmp_path / 'rankmap.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "NCCL_DEBUG")}
    env.update(RANKMAP_HOME=str(tmp_path / "home"), RANKMAP_DB=db, RANKMAP_CACHE=str(plugin.parents[2]),
               LD_LIBRARY_PATH=str(fake_libcuda), PYTHONPATH=str(ROOT / "src"))
    p = subprocess.run([sys.executable, "-m", "rankmap", "profile", "--no-summary", "--nccl", "on",
                        "--no-link-sampler", "--run-dir", str(tmp_path / "run"), "--",
                        str(harness), str(plugin), "6", "multi", "1", "0", "2"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "only 1 of" not in p.stderr
    assert "2 NCCL calls" not in p.stderr and p.stderr.count("captured into CUDA graphs") == 2, p.stderr
    store = open_store(db)
    job = store.resolve_job("latest")
    assert sorted((r["world_rank"], r["source"]) for r in store.ranks(job)) == [(0, "nccl"), (1, "nccl")]
    m = store.traffic_matrix(job)
    want = np.zeros((2, 2), dtype=np.int64)
    for (s_, d, _op, _label), (b, _c) in expected_multi(6, 2, 2).items():
        want[s_, d] += b
    assert np.array_equal(m, want) and m[0, 1] > 0
    # each pair row keeps where it comes from (library, mirror, model) in the store's pair_source
    want_ps: dict[tuple, int] = {}
    for (s_, d, op, label), (b, _c) in expected_multi(6, 2, 2).items():
        want_ps[(s_, d, op, label)] = want_ps.get((s_, d, op, label), 0) + b
    got_ps = {(r["src"], r["dst"], r["operation"], r["pair_source"]): r["bytes"]
              for r in store.traffic(job, by_pair_source=True)}
    assert got_ps == {k: v for k, v in want_ps.items() if v} and len({k[3] for k in got_ps}) >= 2, got_ps
    # NCCL was told to print its graph into the run directory, not into the job's output
    launched = (tmp_path / "run" / "job.json").read_text()
    assert "nccl-debug.%h.%p.log" in launched and '"NCCL_DEBUG": "INFO"' in launched


@pytest.mark.parametrize("abi", [7, 6, 5, 4, 3, 2])
def test_events_none_loads_but_records_no_operation(abi: int, plugin: Path, harness: Path, tmp_path: Path) -> None:
    """RANKMAP_NCCL_EVENTS=none: NCCL is asked for no event (only NCCL's own profiler cost remains),
    yet every call succeeds and each rank still writes a valid, finalised record file."""
    run_dir = tmp_path / "run"
    for p in run_ranks(harness, plugin, abi, run_dir, RANKMAP_NCCL_EVENTS="none"):
        assert p.returncode == 0, p.stderr                  # every NCCL-facing call returned 0
        assert p.stderr == "", p.stderr
        assert "mask 0" in p.stdout
    recs = records.read_dir(run_dir, source="nccl")
    assert [r.world_rank for r in recs] == list(range(N))
    for rec in recs:
        assert rec.finalized and rec.problems == [] and rec.world_size == N
        assert rec.traffic == [] and rec.timeline == []
        assert all(calls == 0 for calls, _ns in rec.op_time.values()) and not any(rec.payload.values())
        assert rec.meta["nccl.events"] == "none"


def test_events_coll_only(plugin: Path, harness: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for p in run_ranks(harness, plugin, 6, run_dir, RANKMAP_NCCL_EVENTS="coll"):
        assert p.returncode == 0 and p.stderr == "", p.stderr
        assert f"mask {2 | (1 << 9) | (1 << 12)}" in p.stdout       # coll, coll API, copy-engine coll
    for rec in records.read_dir(run_dir, source="nccl"):
        want = {op: v for op, v in expected_calls(6).items() if op not in ("ncclSend", "ncclRecv")}
        assert {op: (c, rec.payload[op]) for op, (c, _ns) in rec.op_time.items() if c} == want
        assert {r[0] for r in table_rows(rec, HA, rec.world_rank)} == {"AllReduce", "AllGather", "ReduceScatter",
                                                                       "Broadcast", "Reduce"}
        assert rec.meta["nccl.events"] == "coll"


def test_events_unknown_value_one_line_records_all(plugin: Path, harness: Path, tmp_path: Path) -> None:
    p = run_ranks(harness, plugin, 5, tmp_path / "run", n=1, RANKMAP_NCCL_EVENTS="kernels")[0]
    assert p.returncode == 0 and f"mask {MASK[5]}" in p.stdout
    assert p.stderr.splitlines() == ["rankmap: RANKMAP_NCCL_EVENTS=kernels not understood (all, coll, p2p, none): "
                                     "recording all"]
    assert records.read_dir(tmp_path / "run", source="nccl")[0].meta["nccl.events"] == "all"


def test_unwritable_run_dir_one_line_and_success(plugin: Path, harness: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    for p in run_ranks(harness, plugin, 5, blocker / "run", n=1):
        assert p.returncode == 0, p.stderr                  # every NCCL-facing call returned 0
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("rankmap: capture disabled:"), p.stderr
        assert "mask 0" in p.stdout                          # NCCL is told to send no events


def test_missing_run_dir_variable_one_line(plugin: Path, harness: Path) -> None:
    e = {k: v for k, v in os.environ.items() if k != "RANKMAP_RUN_DIR"}
    p = subprocess.run([str(harness), str(plugin), "4", "scenario"], env=dict(e, RANK="0", WORLD_SIZE="1"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    assert p.stderr.splitlines() == ["rankmap: capture disabled: RANKMAP_RUN_DIR is not set "
                                     "(the NCCL profiler plugin records nothing)"]


def test_harness_bench_runs(plugin: Path, harness: Path, tmp_path: Path) -> None:
    p = subprocess.run([str(harness), str(plugin), "5", "bench", "20000"], capture_output=True, text=True,
                       env=dict(os.environ, RANK="0", WORLD_SIZE="1", RANKMAP_RUN_DIR=str(tmp_path / "b")), timeout=60)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert float(p.stdout.split("ns_per_op")[1]) > 0
    rec = records.read(tmp_path / "b" / "rank-0.nccl.rmrec")
    assert rec.op_time["ncclAllReduce"][0] == 40000            # warm-up pass + timed pass


# ---- the model ---------------------------------------------------------------------------------

def op(func: str, S: int, algo: str = "RING", root: int = -1, channels: int = 2) -> nccl_model.OpRow:
    return nccl_model.OpRow(func, S, algo, "SIMPLE", channels, root, 1, 0, 0, 0, 0)


def test_model_two_ranks_exact() -> None:
    S = 1 << 20
    for algo in ("RING", "TREE", "NVLS", "CE"):
        assert nccl_model.sends(op("AllReduce", S, algo), 2, 0) == [(1, S, "model")]
    assert nccl_model.sends(op("AllGather", S), 2, 1) == [(0, S, "model")]       # per-rank count
    assert nccl_model.sends(op("AllGather", S), 4, 1) == [(2, 3 * S, "model")]
    assert nccl_model.sends(op("ReduceScatter", S, "PAT"), 4, 0) == [(1, S, "model"), (2, S, "model"), (3, S, "model")]
    assert nccl_model.sends(op("AllGather", S, "CE"), 3, 0) == [(1, S, "model"), (2, S, "model")]
    assert nccl_model.sends(op("Broadcast", S, root=0), 2, 0) == [(1, S, "model")]
    assert nccl_model.sends(op("Broadcast", S, root=0), 2, 1) == []
    assert nccl_model.sends(op("Reduce", S, root=0), 2, 0) == []
    assert nccl_model.sends(op("Reduce", S, root=0), 2, 1) == [(0, S, "model")]
    assert nccl_model.sends(op("Send", S, "-", root=1), 2, 0) == [(1, S, "library")]
    assert nccl_model.sends(op("Recv", S, "-", root=1), 2, 0) == []
    assert nccl_model.sends(op("AlltoAll", S, "-"), 3, 2) == [(0, S, "library"), (1, S, "library")]
    assert nccl_model.sends(op("Scatter", S, "-", root=1), 3, 1) == [(0, S, "library"), (2, S, "library")]
    # integer splits add up: 3 parts of an AllReduce volume that 3 does not divide
    g = nccl_graph.CommGraph(1, nranks=2, succ={c: {0: 1, 1: 0} for c in range(3)})
    assert nccl_model.sends(op("AllReduce", 1000, channels=3), 2, 0, g) == [(1, 1000, "mirror")]


def test_parse_graph_from_nccl_info() -> None:
    text = "\n".join([
        "node1:4242:4243 [0] NCCL INFO comm 0x5555aaaa rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0",
        "node1:4242:4244 [1] NCCL INFO comm 0x5555bbbb rank 1 nRanks 4 nNodes 1 localRanks 4 localRank 1 MNNVL 0",
        "node1:4242:4243 [0] NCCL INFO Channel 00/02 :    0   1   3   2",
        "node1:4242:4244 [1] NCCL INFO Trees [0] 3/-1/-1->1->0 [1] 3/-1/-1->1->0",
        "[rank0]:node1:4242:4243 [0] NCCL INFO Channel 01/02 : 0 2 3 1",
        "node1:4242:4243 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1",
        "node1:4242:4243 [0] NCCL INFO 2 coll channels, 0 collnet channels, 0 nvls channels, 4 p2p channels, 2 p2p channels per peer",
        "node1:4242:4244 [1] NCCL INFO ncclCommInitAll comm 0x5555bbbb rank 1 nranks 4 cudaDev 1 nvmlDev 1 "
        "busId 2d000 commId 0x1234abcd - Init COMPLETE",
        "node1:4242:4243 [0] NCCL INFO ncclCommInitAll comm 0x5555aaaa rank 0 nranks 4 cudaDev 0 nvmlDev 0 "
        "busId 18000 commId 0x1234abcd - Init COMPLETE",
    ])
    (g,) = nccl_graph.parse(text).values()       # two threads of one process, one communicator
    assert g.key == 0x1234ABCD and g.nranks == 4
    assert g.rings == {0: [0, 1, 3, 2], 1: [0, 2, 3, 1]} and g.complete_rings() == [0, 1]
    assert g.parent == {0: {1: 0, 0: -1}, 1: {1: 0, 0: -1}} and g.children[0] == {1: [3], 0: [1]}
    assert g.bus == {0: "0000:18:00.0", 1: "0000:2d:00.0"}
    assert nccl_graph.parse("x:1:2 [0] NCCL INFO Ring 03 : 2 -> 0 -> 1\n")[-1].succ == {3: {0: 1}}


def test_wire_factor() -> None:
    row = nccl_model.OpRow("AllReduce", 1 << 20, "RING", "LL128", 4, -1, 1, 0, 0, 0, 0)
    assert nccl_model.wire_factor(row) == pytest.approx(128 / 120)
    assert nccl_model.wire_factor(row.__class__("Send", 1 << 24, "-", "-", 2, 1, 1, 0, 0, 0, 0)) == 1.0
    assert nccl_model.wire_factor(row.__class__("Send", 4096, "-", "-", 2, 1, 1, 0, 0, 0, 0)) == 2.0


# ---- the GPU validation script's own logic, on harness records ------------------------------------

@pytest.mark.gpu_dry
def test_gpu_script_syntax_and_helpers(plugin: Path, harness: Path, tmp_path: Path) -> None:
    """gpu/nccl.sh parses, and its checker passes/fails the right things on known records."""
    import json
    import py_compile
    import sys

    subprocess.run(["bash", "-n", str(ROOT / "gpu" / "nccl.sh")], check=True)
    for f in (ROOT / "examples" / "torch" / "ddp_step.py", ROOT / "bench" / "nccl_allreduce.py"):
        py_compile.compile(str(f), cfile=str(tmp_path / (f.stem + ".pyc")), doraise=True)
    helpers = tmp_path / "helpers"
    subprocess.run(["bash", str(ROOT / "gpu" / "nccl.sh"), "--write-helpers", str(helpers)], check=True)
    run_dir = tmp_path / "run"
    assert all(p.returncode == 0 for p in run_ranks(harness, plugin, 5, run_dir, n=2))
    # what ddp_step.py would have promised, for the harness scenario on 2 ranks
    expect = {"world_size": 2, "steps": 1, "param_bytes": 131072 + 1200, "ddp_allreduce_bytes_per_rank": 132272,
              "explicit": [{"func": "AllReduce", "bytes": 4800, "calls": 3}, {"func": "AllGather", "bytes": 512, "calls": 2},
                           {"func": "Send", "bytes": 20000, "calls": 2}, {"func": "Recv", "bytes": 20000, "calls": 2}]}
    (tmp_path / "expect.json").write_text(json.dumps(expect))
    wire, _ = nccl_model.pair_matrix(nccl_model.load(run_dir), wire=True)
    (tmp_path / "before.json").write_text(json.dumps({"0": [1024, 0], "1": [0, 2048]}))
    (tmp_path / "after.json").write_text(json.dumps({"0": [1024 + int(wire[0, 1]), int(wire[1, 0] * 1.03)],
                                                     "1": [int(wire[1, 0]), 2048 + int(wire[0, 1])]}))
    (tmp_path / "log").write_text("host:1:1 [0] NCCL INFO PROFILER/Plugin: Loaded rankmap (v5)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    p = subprocess.run([sys.executable, str(helpers / "check_ddp.py"), str(run_dir), str(tmp_path / "expect.json"),
                        str(tmp_path / "before.json"), str(tmp_path / "after.json"), str(tmp_path / "log")],
                       capture_output=True, text=True, env=env, timeout=120)
    fails = [l for l in p.stdout.splitlines() if l.startswith("FAIL")]
    # the scenario's extra 64-byte send on the second communicator, and the 3 % off GPU0 RX reading
    assert len(fails) == 3 and p.returncode == 3, p.stdout + p.stderr
    assert sum("send/recv" in l for l in fails) == 2 and "(GPU0 RX)" in fails[2]
    for needle in ("PASS rank 1: ncclAllGather 512 bytes x 2 calls", "PASS rank 0: DDP gradient AllReduce payload 132272",
                   "PASS pair rows: sender's and receiver's views agree", "PASS NCCL loaded the plugin", "PASS GPU0->GPU1 (GPU0 TX)"):
        assert needle in p.stdout, p.stdout
    # the benchmark table
    for mode in ("without", "with"):
        (tmp_path / f"{mode}.json").write_text(json.dumps(
            {"calls": 2, "us_per_op": {str(8 << k): [10.0 + (0.5 if mode == "with" else 0)] * 5 for k in range(20)}}))
    p = subprocess.run([sys.executable, str(helpers / "bench_table.py"), str(tmp_path / "bench.txt"),
                        str(tmp_path / "without.json"), str(tmp_path / "with.json")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1 and "FAIL added time at >= 1 MiB: worst 5.00 %" in p.stdout, p.stdout + p.stderr
    assert "PASS added time below 1 MiB: worst 0.50 us" in p.stdout
    assert (tmp_path / "bench.txt").read_text().count("|") > 20
    # BENCH_MODES: one more plugin mode, a column of its own; PASS/FAIL still "with" vs "without"
    (tmp_path / "none.json").write_text(json.dumps(
        {"calls": 2, "us_per_op": {str(8 << k): [10.25] * 5 for k in range(20)}}))
    p = subprocess.run([sys.executable, str(helpers / "bench_table.py"), str(tmp_path / "bench2.txt"),
                        str(tmp_path / "without.json"), str(tmp_path / "with.json"),
                        "--mode", f"none={tmp_path / 'none.json'}"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1 and "FAIL added time at >= 1 MiB: worst 5.00 %" in p.stdout, p.stdout + p.stderr
    table = (tmp_path / "bench2.txt").read_text()
    assert "none (us)" in table and "none added" in table and "1 none, alternating" in table
    assert "|      8 B |        10.00 |      10.50 |       0.50 |     5.00 |        10.25 |         0.25 |" in table
    assert "median added time below 1 MiB (us per operation, vs without): with 0.50, none 0.25" in table


@pytest.mark.gpu_dry
def test_gpu_shapes_script_checks(plugin: Path, harness: Path, fake_libcuda: Path, tmp_path: Path) -> None:
    """gpu/nccl_shapes.sh parses, and its checker passes and fails the right things on known records."""
    import json
    import sys

    assert subprocess.run(["bash", str(ROOT / "gpu" / "nccl_shapes.sh"), "--dry"], capture_output=True,
                          text=True, timeout=120).returncode == 0
    check = [sys.executable, str(ROOT / "gpu" / "nccl_shapes_check.py")]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    run_dir = tmp_path / "run"
    run_multi(harness, plugin, 6, run_dir, 1, 2, LD_LIBRARY_PATH=str(fake_libcuda))
    wire, _ = nccl_model.pair_matrix(nccl_model.load(run_dir), wire=True)
    before = {"0": [1000, 5000], "1": [7000, 9000]}
    (tmp_path / "b.json").write_text(json.dumps(before))

    def after(extra01: float, extra10: float, rx1_factor: float = 1.0) -> dict:
        a01, a10 = wire[0, 1] + extra01, wire[1, 0] + extra10
        return {"0": [1000 + round(a01), 5000 + round(a10)], "1": [7000 + round(a10), 9000 + round(a01 * rx1_factor)]}

    (tmp_path / "a.json").write_text(json.dumps(after(0, 0, 1.01)))     # GPU1's RX 1 % off
    (tmp_path / "e.json").write_text(json.dumps({"calls": [{"func": "AllReduce", "bytes": 4000, "calls": 2},
                                                           {"func": "Send", "bytes": 300, "calls": 1}]}))
    p = subprocess.run(check + ["capture", str(run_dir), str(tmp_path / "b.json"), str(tmp_path / "a.json"), "jax",
                                str(tmp_path / "e.json")], capture_output=True, text=True, env=env, timeout=120)
    fails = [l for l in p.stdout.splitlines() if l.startswith("FAIL")]
    assert p.returncode == 1 and len(fails) == 1 and "0->1 (GPU RX)" in fails[0], p.stdout + p.stderr
    for needle in ("PASS jax: both GPUs recorded as ranks 0 and 1", "PASS jax rank 1: ncclAllReduce 4000 bytes x 2",
                   "PASS jax 0->1 (GPU TX)", "PASS jax: pair rows agree from both ends"):
        assert needle in p.stdout, p.stdout
    # the graph check: one call captured per rank (AllReduce 8192 B, LL128) and replayed 3 times. Capture
    # runs nothing and the profile counts the call once, so the wire carries 2 replays' worth more.
    per_replay = 8192 * 128 / 120
    (tmp_path / "g.json").write_text(json.dumps({"calls": [{"func": "AllReduce", "bytes": 8192, "calls": 1}],
                                                 "captured_calls": 1}))
    for replays_on_wire, rc in ((2, 0), (3, 4)):          # 3 more would mean capture itself sent the bytes
        (tmp_path / "a2.json").write_text(json.dumps(after(replays_on_wire * per_replay, replays_on_wire * per_replay)))
        p = subprocess.run(check + ["capture", str(run_dir), str(tmp_path / "b.json"), str(tmp_path / "a2.json"),
                                    "graphs", str(tmp_path / "g.json"), "--replays", "3"], capture_output=True,
                           text=True, env=env, timeout=120)
        assert p.returncode == rc, p.stdout + p.stderr
    assert "PASS graphs: calls captured into the CUDA graph counted per rank {0: 1, 1: 1}" in p.stdout
    # the small-op table: the plugin adds 0.5 us below 1 MiB (0.3 of it NCCL's) and 2 % from 1 MiB
    head = "#       size    count   type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    logs = []
    for mode, add_small, add_big in (("plain", 0.0, 0.0), ("plugin", 0.5, 0.02), ("none", 0.3, 0.0)):
        for rnd in (1, 2):
            rows = []
            for s in (8, 1024, 1 << 20, 4 << 20):
                t = 20.0 + add_small if s < 1 << 20 else 100.0 * (1 + add_big)
                rows.append(f"  {s:>10} {s // 4:>8}  float  sum  -1  {t:7.2f}  0.00  0.00  N/A  {t:7.2f}  0.00  0.00  N/A\n")
            f = tmp_path / f"{mode}-{rnd}.log"
            f.write_text(head + "".join(rows))
            logs.append(str(f))
    p = subprocess.run(check + ["bench", str(tmp_path / "t.txt")] + logs, capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "PASS small-op cost below 1 MiB: +0.50 us" in p.stdout, p.stdout
    assert "FAIL small-op cost from 1 MiB: worst +2.00 %" in p.stdout
    assert "NCCL's cost of a loaded profiler +0.30 + ours +0.20" in p.stdout
