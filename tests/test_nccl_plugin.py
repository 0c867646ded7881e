"""The NCCL profiler plugin without NCCL or a GPU: a C harness drives it as NCCL does.

For every profiler ABI the plugin exports (v2..v6) the harness (tests/nccl_harness/harness.c) runs
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

from rankmap.capture import nccl_model, records
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
#      rankmap.capture.nccl_model) ----

def expected_traffic(abi: int, w: int, n: int = N) -> dict[tuple[int, str, str], list[int]]:
    """{(world peer, operation, direction): [bytes, messages]} for world rank w."""
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
    add(succ, "Send", "send", 2 * 20000, 2); add(pred, "Recv", "recv", 2 * 20000, 2)
    for p in (w - 1, w + 1):                      # TREE AllReduce 131072 B: chain in rank order
        if 0 <= p < n:
            add(p, "AllReduce", "send", 131072); add(p, "AllReduce", "recv", 131072)
    # communicator B: the same processes reversed (comm rank = n-1-w)
    cb = n - 1 - w
    bsucc, bpred = n - 1 - (cb + 1) % n, n - 1 - (cb - 1) % n
    arb = 2 * (n - 1) * 1200 // n
    if abi >= 4:                                  # members known from the member files
        add(bsucc, "AllReduce", "send", arb); add(bpred, "AllReduce", "recv", arb)
        add(bsucc, "Send", "send", 64)
    elif cb == w:                                 # v2/v3: size unknown, assumed the world
        add((cb + 1) % n, "AllReduce", "send", arb); add((cb - 1) % n, "AllReduce", "recv", arb)
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
    """Rows (func, bytes, algo, proto, channels, root_or_peer, calls) of one comm's table."""
    n, ch = N, 2
    if comm == HA:
        return {("AllReduce", 4800, "RING", "SIMPLE", ch, -1, 3), ("AllGather", 512, "RING", "LL", ch, -1, 2),
                ("ReduceScatter", 1024, "RING", "LL128", ch, -1, 1), ("Broadcast", 4096, "RING", "SIMPLE", ch, 1, 1),
                ("Reduce", 400, "RING", "SIMPLE", ch, 0, 1),
                ("Send", 20000, "-", "-", 1 if abi >= 4 else 0, (w + 1) % n, 2),
                ("Recv", 20000, "-", "-", 1 if abi >= 4 else 0, (w - 1) % n, 2),
                ("AllReduce", 131072, "TREE", "LL128", ch, -1, 1)}
    cb = n - 1 - w
    rows = {("AllReduce", 1200, "RING", "SIMPLE", ch, -1, 1)}
    if abi >= 4:
        rows.add(("Send", 64, "-", "-", 1, (cb + 1) % n, 1))
    return rows


# ---- tests -------------------------------------------------------------------------------------

def test_plugin_builds_and_exports_every_abi(plugin: Path, monkeypatch) -> None:
    assert plugin.name == "librankmap_nccl.so" and plugin.is_file()
    lib = ctypes.CDLL(str(plugin))
    for v in (2, 3, 4, 5, 6):
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


@pytest.mark.parametrize("abi", [6, 5, 4, 3, 2])
def test_harness_records_byte_for_byte(abi: int, plugin: Path, harness: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for r, p in enumerate(run_ranks(harness, plugin, abi, run_dir)):
        assert p.returncode == 0, p.stderr
        assert p.stderr == "", p.stderr                      # nothing said when all is well
        assert f"mask {2 | 4}" in p.stdout                  # coll + p2p only: no proxy/kernel cost
    recs = records.read_dir(run_dir, source="nccl")
    assert [r.world_rank for r in recs] == list(range(N))
    for rec in recs:
        w = rec.world_rank
        assert rec.source == "nccl" and rec.world_size == N and rec.finalized and rec.problems == []
        got = {(peer, op, d): [b, m] for peer, k, op, mem, d, b, m in rec.traffic}
        assert all(k == "nccl" and mem == "device" for _, k, _, mem, *_ in rec.traffic)
        assert got == expected_traffic(abi, w), f"rank {w}"
        assert {op: (c, rec.payload[op]) for op, (c, _ns) in rec.op_time.items()} == expected_calls(abi)
        # communicators and their members
        comms = {c.id: c for c in rec.communicators}
        if abi >= 4:
            assert comms[HA].name == "world" and comms[HA].members == list(range(N))
            assert comms[HB].name == "reversed" and comms[HB].members == list(reversed(range(N)))
            assert rec.meta[f"nccl.comm.{HA:016x}"] == f"name=world rank={w} nranks={N} nnodes=1 members=files abi=v{abi}"
        # the operation tables
        cb = N - 1 - w
        for h, cr in ((HA, w), (HB, cb)):
            rows = nccl_model.parse_op_table(rec.meta[f"nccl.ops.{h:016x}.{cr}"])
            assert {(r.func, r.bytes, r.algo, r.proto, r.channels, r.root_or_peer, r.calls) for r in rows} \
                == expected_table(abi, w, h)
            assert all(r.first_ns <= r.last_ns and r.time_ns >= 0 for r in rows)
        # the timeline holds every byte sent, in buckets
        sent = sum(b for peer, k, op, mem, d, b, m in rec.traffic if d == "send")
        assert sum(b for _bk, _p, _k, b in rec.timeline) == sent
    # member files: one per (communicator, rank)
    if abi >= 4:
        names = sorted(p.name for p in run_dir.glob("comm-*.txt"))
        assert names == sorted([f"comm-{HA:016x}-{r}.txt" for r in range(N)] + [f"comm-{HB:016x}-{r}.txt" for r in range(N)])
        # the Python model, in rank order, reproduces the plugin's own pair attribution exactly
        prof = nccl_model.load(run_dir)
        m, used = nccl_model.pair_matrix(prof)
        assert used == {HA: "rank-order", HB: "rank-order"}
        assert np.array_equal(m.astype(np.int64), records.traffic_matrix(recs, klass="nccl"))
        assert nccl_model.op_summary(prof)[0][("AllReduce", 4800)] == 3


@pytest.mark.parametrize("abi", [6, 5, 4, 3, 2])
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
        assert "mask 2" in p.stdout
    for rec in records.read_dir(run_dir, source="nccl"):
        want = {op: v for op, v in expected_calls(6).items() if op not in ("ncclSend", "ncclRecv")}
        assert {op: (c, rec.payload[op]) for op, (c, _ns) in rec.op_time.items() if c} == want
        assert {op for _p, _k, op, *_ in rec.traffic} == set(want)
        assert rec.meta["nccl.events"] == "coll"


def test_events_unknown_value_one_line_records_all(plugin: Path, harness: Path, tmp_path: Path) -> None:
    p = run_ranks(harness, plugin, 5, tmp_path / "run", n=1, RANKMAP_NCCL_EVENTS="kernels")[0]
    assert p.returncode == 0 and "mask 6" in p.stdout
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

def test_model_two_ranks_exact() -> None:
    S = 1 << 20
    for func in ("AllReduce",):
        for algo in ("RING", "TREE", "NVLS"):
            assert nccl_model.collective_sends(func, algo, 2, 0, S, -1) == [(1, S)]
    assert nccl_model.collective_sends("AllGather", "RING", 2, 1, S, -1) == [(0, S)]     # per-rank count
    assert nccl_model.collective_sends("AllGather", "RING", 4, 1, S, -1) == [(2, 3 * S)]
    assert nccl_model.collective_sends("ReduceScatter", "PAT", 4, 0, S, -1) == [(1, S), (2, S), (3, S)]
    assert nccl_model.collective_sends("Broadcast", "RING", 2, 0, S, 0) == [(1, S)]
    assert nccl_model.collective_sends("Broadcast", "RING", 2, 1, S, 0) == []
    assert nccl_model.collective_sends("Reduce", "RING", 2, 0, S, 0) == []
    assert nccl_model.collective_sends("Reduce", "RING", 2, 1, S, 0) == [(0, S)]
    assert nccl_model.collective_sends("AllReduce", "RING", 4, 0, 4000, -1, ring=[0, 2, 1, 3]) == [(2, 6000)]


def test_parse_rings_from_nccl_info() -> None:
    text = "\n".join([
        "node1:4242:4242 [0] NCCL INFO comm 0x5555aaaa rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0",
        "node1:4242:4242 [0] NCCL INFO Channel 00/02 : 0 1 3 2",
        "[rank0]:node1:4242:4242 [0] NCCL INFO Channel 01/02 : 0 2 3 1",
        "node1:4242:4242 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1",
        "node1:4242:4242 [0] NCCL INFO ncclCommInitRank comm 0x5555aaaa rank 0 nranks 4 cudaDev 0 nvmlDev 0 "
        "busId 18000 commId 0x1234abcd - Init COMPLETE",
    ])
    assert nccl_model.parse_rings(text) == {0x1234ABCD: [[0, 1, 3, 2], [0, 2, 3, 1]]}


def test_wire_factor() -> None:
    row = nccl_model.OpRow("AllReduce", 1 << 20, "RING", "LL128", 4, -1, 1, 0, 0, 0)
    assert nccl_model.wire_factor(row) == pytest.approx(128 / 120)
    assert nccl_model.wire_factor(row.__class__("Send", 1 << 24, "-", "-", 2, 1, 1, 0, 0, 0)) == 1.0
    assert nccl_model.wire_factor(row.__class__("Send", 4096, "-", "-", 2, 1, 1, 0, 0, 0)) == 2.0


# ---- the GPU validation script's own logic, on harness records ------------------------------------

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
                   "PASS plugin pair rows equal nccl_model", "PASS NCCL loaded the plugin", "PASS GPU0->GPU1 (GPU0 TX)"):
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
