"""Record files: the C writer (driven directly) and the validating Python reader."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from rankmap.formats import record as records
from rankmap.native_sources import native_dir
from rankmap.errors import RankmapError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def writer_exe(tmp_path_factory) -> Path:
    """tests/native/rmrec_writer_test.c linked with the record writer."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("writer") / "rmrec_writer_test"
    subprocess.run([cc, "-std=gnu11", "-O2", "-Wall", "-I", str(native_dir() / "common"),
                    str(ROOT / "tests" / "native" / "rmrec_writer_test.c"), str(native_dir() / "common" / "rmrec.c"),
                    "-o", str(out), "-lpthread"], check=True)
    return out


def run_writer(exe: Path, rundir: Path, rank: int, size: int, threads: int, iters: int, mode: str,
               **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ, **env)
    return subprocess.run([str(exe), str(rundir), str(rank), str(size), str(threads), str(iters), mode],
                          capture_output=True, text=True, env=e, timeout=60)


def expected_rows(size: int, threads: int, iters: int) -> dict[tuple, tuple[int, int]]:
    """What rmrec_writer_test.c counts: thread t, iteration i -> peer (t+i) % size."""
    per_peer = [0] * size
    for t in range(threads):
        for i in range(iters):
            per_peer[(t + i) % size] += 1
    rows = {}
    for peer, n in enumerate(per_peer):
        if n:
            rows[(peer, "p2p", "MPI_Send", "host", "send")] = (100 * n, n)
            rows[(peer, "p2p", "MPI_Send", "host", "recv")] = (10 * n, n)
    return rows


def as_dict(rec: records.RankRecord) -> dict[tuple, tuple[int, int]]:
    return {r[:5]: (r[5], r[6]) for r in rec.traffic}


def test_writer_threads_exact_and_fork(writer_exe, tmp_path):
    # four threads counting at once; a forked child counts and closes, and must not touch the file
    p = run_writer(writer_exe, tmp_path, 2, 5, 4, 20000, "fork", RANKMAP_FLUSH_MS="50")
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    rec = records.read(tmp_path / "rank-2.mpi.rmrec")
    exp = expected_rows(5, 4, 20000)
    exp[(1, "collective", "MPI_Allreduce", "device", "send")] = (4096, 1)
    assert as_dict(rec) == exp
    assert (rec.version, rec.source, rec.world_rank, rec.world_size, rec.pid > 0) == (1, "mpi", 2, 5, True)
    assert rec.finalized and rec.problems == []
    assert rec.op_time["MPI_Send"][0] == 80000 and rec.op_time["MPI_Allreduce"][0] == 2
    assert rec.payload == {"MPI_Send": 80000 * 100, "MPI_Allreduce": 4096}
    hist = rec.histogram["MPI_Send"]
    assert hist[7] == 80000 and sum(hist) == 80000          # 64 <= 100 < 128
    assert rec.histogram["MPI_Allreduce"][0] == 1 and rec.histogram["MPI_Allreduce"][13] == 1
    assert rec.bucket_ns == 100_000_000
    # timeline carries every sent byte, per peer and class
    tl: dict[tuple[int, str], int] = {}
    for _b, peer, k, by in rec.timeline:
        tl[(peer, k)] = tl.get((peer, k), 0) + by
    sends = {(k[0], k[1]): v[0] for k, v in exp.items() if k[4] == "send"}
    assert tl == sends
    assert rec.communicators == [records.Communicator(7, "sub", [0, 1, 2])]
    assert rec.meta.pop("flush_thread.wakeups").isdigit()          # written at close
    assert rec.meta == {"mpi_library": "test writer"}


def test_writer_single_writer_exact(writer_exe, tmp_path):
    # rmrec_single_writer: plain adds instead of locked ones; serialised threads, flushes racing
    p = run_writer(writer_exe, tmp_path, 0, 3, 4, 20000, "single", RANKMAP_FLUSH_MS="5")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    rec = records.read(tmp_path / "rank-0.mpi.rmrec")
    exp = expected_rows(3, 4, 20000)
    exp[(1, "collective", "MPI_Allreduce", "device", "send")] = (4096, 1)
    assert as_dict(rec) == exp and rec.finalized and rec.problems == []
    assert rec.op_time["MPI_Send"][0] == 80000 and rec.histogram["MPI_Send"][7] == 80000
    tl: dict[int, int] = {}
    for _b, peer, _k, by in rec.timeline:
        tl[peer] = tl.get(peer, 0) + by
    want: dict[int, int] = {}
    for k, v in exp.items():
        if k[4] == "send":
            want[k[0]] = want.get(k[0], 0) + v[0]
    assert tl == want


@pytest.mark.parametrize("flags", [[], ["-DRMREC_NO_TSC"]], ids=["tsc", "no-tsc"])
def test_shared_tick_clock(flags, tmp_path):
    """rmrec_ticks_to_ns / _to_mono_ns / rmrec_ns_to_ticks against CLOCK_MONOTONIC."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "ticks_test"
    subprocess.run([cc, "-std=gnu11", "-O2", "-Wall", "-Werror", *flags, "-I", str(native_dir() / "common"),
                    str(ROOT / "tests" / "native" / "ticks_test.c"), str(native_dir() / "common" / "rmrec.c"),
                    "-o", str(exe), "-lpthread"], check=True)
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("ok "), p.stdout + p.stderr
    if flags:
        assert "ticks_are_ns=1 ns_per_tick=1.000000" in p.stdout


def test_writer_bucket_env(writer_exe, tmp_path):
    p = run_writer(writer_exe, tmp_path, 0, 2, 1, 10, "close", RANKMAP_BUCKET_MS="7")
    assert p.returncode == 0, p.stderr
    assert records.read(tmp_path / "rank-0.mpi.rmrec").bucket_ns == 7_000_000


def test_flush_thread_wakes_once_per_bucket(writer_exe, tmp_path):
    """The flush thread wakes at each timeline bucket boundary (and at a flush), no more: every rank of
    a job has one, and on an oversubscribed machine each wake-up takes a core from a polling rank. The
    count is in the record (META flush_thread.wakeups), so a job's records say what it cost."""
    p = run_writer(writer_exe, tmp_path, 0, 2, 1, 10, "wait", RANKMAP_BUCKET_MS="10", RANKMAP_FLUSH_MS="100")
    assert p.returncode == 0, p.stderr
    rec = records.read(tmp_path / "rank-0.mpi.rmrec")
    wakeups, buckets = int(rec.meta["flush_thread.wakeups"]), rec.elapsed_ns // 10_000_000
    assert buckets >= 30
    assert 3 <= wakeups <= buckets + rec.elapsed_ns // 100_000_000 + 2, (wakeups, buckets)


def test_writer_killed_keeps_flushed_data(writer_exe, tmp_path):
    p = run_writer(writer_exe, tmp_path, 1, 3, 2, 1000, "kill")
    assert p.returncode == -9
    rec = records.read(tmp_path / "rank-1.mpi.rmrec")
    exp = expected_rows(3, 2, 1000)
    exp[(1, "collective", "MPI_Allreduce", "device", "send")] = (4096, 1)   # the 1 byte after the flush is lost
    assert as_dict(rec) == exp
    assert not rec.finalized
    assert len(rec.problems) == 1 and "rank-1.mpi.rmrec: no finalize marker" in rec.problems[0]


def test_writer_unwritable_dir_one_line(writer_exe, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = run_writer(writer_exe, blocker / "sub", 0, 2, 1, 10, "close")
    assert p.returncode == 3                      # rmrec_open returned NULL
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rankmap: capture disabled: cannot create run directory")


@pytest.fixture
def good_file(writer_exe, tmp_path) -> Path:
    p = run_writer(writer_exe, tmp_path, 3, 4, 2, 500, "close")
    assert p.returncode == 0, p.stderr
    return tmp_path / "rank-3.mpi.rmrec"


def block_offsets(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, type, length) of every block."""
    out, off = [], records.HEADER_SIZE
    while off < len(data):
        t, _r, n, _c = struct.unpack_from("<HHII", data, off + 4)
        out.append((off, t, n))
        off += records.BLOCK_HDR + n
    return out


def test_truncated_tail_reported_and_rest_used(good_file, tmp_path):
    data = good_file.read_bytes()
    blocks = block_offsets(data)
    traffic = [b for b in blocks if b[1] == records.BT_TRAFFIC]
    assert traffic
    off, _t, n = traffic[0]
    cut = tmp_path / "rank-5.mpi.rmrec"
    cut.write_bytes(data[:off + records.BLOCK_HDR + n // 2])          # cut inside the traffic block
    rec = records.read(cut)
    nbefore = sum(1 for b in blocks if b[0] < off)
    assert rec.problems[0] == f"rank-5.mpi.rmrec: truncated block at offset {off}; {nbefore} earlier blocks used"
    rec.meta.pop("flush_thread.wakeups", None)                     # the close's, if its block came first
    assert rec.traffic == [] and rec.meta == {"mpi_library": "test writer"}   # earlier blocks: strings, meta
    assert not rec.finalized


def test_corrupt_block_skipped_later_blocks_used(good_file, tmp_path):
    data = bytearray(good_file.read_bytes())
    blocks = block_offsets(bytes(data))
    off, _t, n = next(b for b in blocks if b[1] == records.BT_OPTIME)
    data[off + records.BLOCK_HDR + 3] ^= 0xFF
    bad = tmp_path / "rank-6.mpi.rmrec"
    bad.write_bytes(bytes(data))
    rec = records.read(bad)
    nbefore = sum(1 for b in blocks if b[0] < off)
    nafter = sum(1 for b in blocks if b[0] > off)
    assert rec.problems == [f"rank-6.mpi.rmrec: corrupt block (checksum mismatch) at offset {off}; "
                            f"{nbefore} earlier blocks used, {nafter} later blocks used"]
    assert rec.op_time == {}                                        # only that block is lost
    assert as_dict(rec) == as_dict(records.read(good_file))
    assert rec.finalized


def test_bad_magic_and_version_raise(good_file, tmp_path):
    data = bytearray(good_file.read_bytes())
    p = tmp_path / "rank-0.mpi.rmrec"
    p.write_bytes(b"NOTAREC!" + bytes(data[8:]))
    with pytest.raises(RankmapError, match=r"rank-0\.mpi\.rmrec: not a rankmap record file \(bad magic at offset 0\)"):
        records.read(p)
    data[8:10] = struct.pack("<H", 99)
    p.write_bytes(bytes(data))
    with pytest.raises(RankmapError, match=r"rank-0\.mpi\.rmrec: unsupported record format version 99 at offset 8"):
        records.read(p)
    p.write_bytes(bytes(good_file.read_bytes()[:60]))
    with pytest.raises(RankmapError, match="truncated header at offset 60"):
        records.read(p)


def test_read_dir_and_matrix(writer_exe, tmp_path):
    for r in range(3):
        assert run_writer(writer_exe, tmp_path, r, 3, 1, 3, "close").returncode == 0
    recs = records.read_dir(tmp_path)
    assert [r.world_rank for r in recs] == [0, 1, 2]
    m = records.traffic_matrix(recs, klass="p2p")
    # one thread, 3 iterations: peers 0,1,2 once each, 100 bytes
    assert m.tolist() == [[100, 100, 100]] * 3
    with pytest.raises(RankmapError, match="does not exist"):
        records.read_dir(tmp_path / "nope")


def test_live_read_of_a_file_being_written(good_file, tmp_path):
    data = good_file.read_bytes()
    last = block_offsets(data)[-1][0]
    f = tmp_path / "rank-7.mpi.rmrec"
    f.write_bytes(data[:last + 5])                 # a flush is being appended
    assert records.read(f, live=True).problems == []
    assert len(records.read(f).problems) == 2      # truncated block + no finalize marker


def test_c_and_python_read_one_layout(tmp_path):
    """The writer's structs and the reader's dtypes come from one header: compiled, they agree."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lay = records.layout()
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <stdint.h>", '#include "rmrec_layout.h"']
    lines += [f"typedef {c}int{n}_t rmrec_{p}{n};" for p, c in (("u", "u"), ("i", "")) for n in (8, 16, 32, 64)]
    lines += ["#define F(t, n) rmrec_##t n;", "#define A(t, n, k) rmrec_##t n[k];", "#pragma pack(push, 1)"]
    lines += [f"typedef struct {{ RMREC_ROW_{name}(F, A) }} row_{name};" for name in lay.rows]
    lines += ["#pragma pack(pop)", "#undef F", "#undef A", "int main(void) {"]
    for name in lay.rows:
        lines.append(f'  printf("row {name} size %zu\\n", sizeof(row_{name}));')
        lines.append(f'#define F(t, n) printf("field {name} " #n " %zu %zu\\n", offsetof(row_{name}, n), '
                     f'sizeof(((row_{name} *)0)->n));')
        lines.append("#define A(t, n, k) F(t, n)")
        lines.append(f"  RMREC_ROW_{name}(F, A)")
        lines.append("#undef F\n#undef A")
    for name in lay.lists:
        lines.append(f'#define X(n, v, s) printf("code {name} " #n " %d %s\\n", (int)(v), s);')
        lines.append(f"  RMREC_{name}(X)\n#undef X")
    for name in lay.numbers:
        lines.append(f'  printf("number {name} %lld\\n", (long long)(RMREC_{name}));')
    lines.append("  return 0;\n}")
    src = tmp_path / "layout_dump.c"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=gnu11", "-Wall", "-Werror", "-I", str(native_dir() / "common"), str(src),
                    "-o", str(tmp_path / "dump")], check=True)
    out = subprocess.run([str(tmp_path / "dump")], capture_output=True, text=True, check=True).stdout.split("\n")
    seen = {"row": 0, "field": 0, "code": 0, "number": 0}
    for line in filter(None, out):
        kind, *rest = line.split(" ")
        seen[kind] += 1
        if kind == "row":
            assert lay.rows[rest[0]].itemsize == int(rest[2]), line
        elif kind == "field":
            dt = lay.rows[rest[0]]
            assert (dt.fields[rest[1]][1], dt.fields[rest[1]][0].itemsize) == (int(rest[2]), int(rest[3])), line
        elif kind == "code":
            assert (rest[1], int(rest[2]), rest[3]) in lay.lists[rest[0]], line
        else:
            assert lay.numbers[rest[0]] == int(rest[1]), line
    assert seen["row"] == len(lay.rows) >= 10 and seen["field"] == sum(len(d.names) for d in lay.rows.values())
    assert seen["code"] == sum(len(v) for v in lay.lists.values()) and seen["number"] == len(lay.numbers)
    # and what the docs promise
    assert [lay.rows[n].itemsize for n in ("HEADER", "BLOCK", "TRAFFIC", "HIST", "OPTIME", "TIMELINE", "FLUSH",
                                           "CUDA_COPY", "CUDA_KERNEL_ENTRY")] == [128, 16, 32, 16, 32, 24, 32, 48, 32]
    assert records.CLASSES == ("p2p", "collective", "rma", "nccl") and records.SOURCES == ("mpi", "nccl", "cuda")


def test_reader_resumes_and_parses_only_new_blocks(good_file, tmp_path):
    """A file followed while it grows, cut anywhere (mid-header, mid-block): the deltas add up to
    the totals, each poll starts where the previous one stopped, and the state carries over."""
    data = good_file.read_bytes()
    whole = records.read(good_file)
    f = tmp_path / "rank-3.mpi.rmrec"
    f.write_bytes(b"")
    reader = records.RecordReader(f)
    traffic: dict[tuple, list[int]] = {}
    calls: dict[str, int] = {}
    tl = 0
    offsets = []
    cuts = [5, 100, 131, 400, 401, 777, 2048, len(data) // 2, len(data) - 3, len(data)]
    for i, cut in enumerate(cuts):
        with f.open("ab") as out:
            out.write(data[f.stat().st_size:cut])
        if i == 5:                                   # a new process resumes from the saved state
            reader = records.RecordReader(f, state=json.loads(json.dumps(reader.state())))
        delta = reader.poll(final=cut == len(data))
        if delta is None:
            assert cut < records.HEADER_SIZE
            continue
        offsets.append(reader.offset)
        for row in delta.traffic:
            t = traffic.setdefault(row[:5], [0, 0])
            t[0] += row[5]
            t[1] += row[6]
        for op, (c, _ns) in delta.op_time.items():
            calls[op] = calls.get(op, 0) + c
        tl += sum(r[3] for r in delta.timeline)
    assert offsets == sorted(offsets) and offsets[-1] == len(data)
    assert {k: tuple(v) for k, v in traffic.items()} == as_dict(whole)
    assert calls == {op: c for op, (c, _ns) in whole.op_time.items()}
    assert tl == sum(r[3] for r in whole.timeline)
    assert reader.finalized and reader.problems(live=False) == []
    assert reader.poll(final=True).empty()          # nothing new: nothing parsed
