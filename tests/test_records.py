"""Record files: the C writer (driven directly) and the validating Python reader."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from rankmap.capture import records
from rankmap.capture.shim_build import native_dir
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
