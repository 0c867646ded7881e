"""The record reader and `rankmap ingest` under hostile record files (Hypothesis): bit flips,
truncation at every block, reordered and duplicated blocks, ranks outside the job, counts past
int64. Never a traceback, a hang or memory beyond the input's size; every problem names the file
and the offset; what is kept is exactly what the intact blocks say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import example, given, strategies as st

import fuzzing
import recfile
from rankmap.errors import RankmapError
from rankmap.formats import record as R

INT64_MAX = 2**63 - 1
TRAFFIC_ROW = st.fixed_dictionaries({
    "peer": st.integers(-2**31, 2**31 - 1), "op": st.integers(0, 2**16 - 1), "klass": st.integers(0, 255),
    "mem": st.integers(0, 255), "dir": st.integers(0, 255), "origin": st.integers(0, 255),
    "bytes": st.integers(0, 2**64 - 1), "msgs": st.integers(0, 2**64 - 1)})


def base_file() -> bytes:
    """A valid file with every block type the reader sums: names, traffic, histogram, times, timeline,
    a communicator, META and flushes."""
    out = recfile.header(0, 4) + recfile.block(R.BT_STRINGS, recfile.strings({1: "MPI_Isend", 2: "MPI_Allreduce"}))
    comm = (7).to_bytes(8, "little") + (2).to_bytes(4, "little") + (4).to_bytes(4, "little") + b"half" \
        + (0).to_bytes(4, "little") + (1).to_bytes(4, "little")
    out += recfile.block(R.BT_COMM, comm)
    meta = (3).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"mpiOpenM"
    out += recfile.block(R.BT_META, meta)
    for i in range(3):
        out += recfile.block(R.BT_TRAFFIC, recfile.rows("TRAFFIC", [
            {"peer": 1, "op": 1, "klass": 0, "mem": 1, "dir": 0, "bytes": 1000 * (i + 1), "msgs": 2},
            {"peer": 3, "op": 2, "klass": 1, "mem": 2, "dir": 0, "bytes": 64, "msgs": 1}]))
        out += recfile.block(R.BT_HIST, recfile.rows("HIST", [{"op": 1, "bin": 10, "count": 2}]))
        out += recfile.block(R.BT_OPTIME, recfile.rows("OPTIME", [{"op": 1, "calls": 2, "ns": 500, "bytes": 2000}]))
        out += recfile.block(R.BT_TIMELINE, recfile.rows("TIMELINE", [{"bucket": i, "peer": 1, "klass": 0,
                                                                        "bytes": 1000 * (i + 1)}]))
        out += recfile.flush(i + 1, (i + 1) * 10**8, final=i == 2)
    return out


BASE = base_file()
BLOCKS = recfile.block_offsets(BASE)
TOTAL = 6 * 1000 + 3 * 64     # the bytes the traffic blocks of BASE send


def read_checked(path: Path, data: bytes):
    """``R.read`` of ``data`` written at ``path``: a record or a RankmapError naming the file and offset,
    within the memory bound; the record's rows are within the job and int64."""
    path.write_bytes(data)
    try:
        with fuzzing.bounded_memory(len(data)):
            rec = R.read(path)
    except RankmapError as e:
        fuzzing.one_line(e, str(path), "offset")
        return None
    ws = rec.world_size
    for row in rec.traffic:
        assert 0 <= row.peer < ws, row
        assert 0 <= row.bytes <= INT64_MAX and 0 <= row.messages <= INT64_MAX, row
    for p in rec.problems:
        fuzzing.one_line(Exception(p), path.name)
        assert "offset" in p or "finalize" in p or "out of" in p, p
    assert all(0 <= v[0] <= INT64_MAX and 0 <= v[1] <= INT64_MAX for v in rec.op_time.values())
    return rec


def sent(rec) -> int:
    return sum(r.bytes for r in rec.traffic if r.direction == "send") if rec else 0


@given(flips=st.lists(st.tuples(st.integers(0, len(BASE) - 1), st.integers(0, 7)), min_size=1, max_size=8))
def test_bit_flips(tmp_path, flips):
    data = bytearray(BASE)
    for off, bit in flips:
        data[off] ^= 1 << bit
    read_checked(tmp_path / "rank-0.mpi.rmrec", bytes(data))


@given(cut=st.integers(0, len(BASE)))
@example(cut=0)
@example(cut=R.HEADER_SIZE - 1)
def test_truncation_anywhere(tmp_path, cut):
    rec = read_checked(tmp_path / "rank-0.mpi.rmrec", BASE[:cut])
    if cut < R.HEADER_SIZE:
        assert rec is None
    else:
        assert rec is not None


def test_truncation_at_every_block(tmp_path):
    """Cut at each block's start and one byte into it: the traffic kept is exactly that of the whole
    traffic blocks before the cut, and a cut inside a block is named with its offset."""
    per_block = {}
    for off in BLOCKS:
        length = int.from_bytes(BASE[off + 8:off + 12], "little")
        btype = int.from_bytes(BASE[off + 4:off + 6], "little")
        if btype == R.BT_TRAFFIC:
            per_block[off] = sum(int(r["bytes"]) for r in
                                 __import__("numpy").frombuffer(BASE[off + 16:off + 16 + length],
                                                                dtype=R.layout().rows["TRAFFIC"]))
    for off in BLOCKS + [len(BASE)]:
        want = sum(b for o, b in per_block.items() if o < off)
        rec = read_checked(tmp_path / "rank-0.mpi.rmrec", BASE[:off])
        assert sent(rec) == want, off
        if off < len(BASE):
            rec = read_checked(tmp_path / "rank-0.mpi.rmrec", BASE[:off + 1])
            assert sent(rec) == want
            assert any(f"truncated block header at offset {off}" in p for p in rec.problems), rec.problems


@given(order=st.permutations(range(len(BLOCKS))))
def test_reordered_blocks(tmp_path, order):
    """Blocks in any order: the same sums (a flush's deltas add up whatever their order)."""
    ends = BLOCKS[1:] + [len(BASE)]
    parts = [BASE[a:b] for a, b in zip(BLOCKS, ends)]
    rec = read_checked(tmp_path / "rank-0.mpi.rmrec", BASE[:R.HEADER_SIZE] + b"".join(parts[i] for i in order))
    assert sent(rec) == TOTAL


@given(dups=st.lists(st.integers(0, len(BLOCKS) - 1), min_size=1, max_size=5))
def test_duplicated_blocks(tmp_path, dups):
    """A block written twice is read twice (it is indistinguishable from a second flush), and
    nothing else changes."""
    ends = BLOCKS[1:] + [len(BASE)]
    parts = [BASE[a:b] for a, b in zip(BLOCKS, ends)]
    extra = b"".join(parts[i] for i in dups)
    rec = read_checked(tmp_path / "rank-0.mpi.rmrec", BASE + extra)
    one = read_checked(tmp_path / "rank-1.mpi.rmrec", BASE[:R.HEADER_SIZE] + extra)
    assert sent(rec) == TOTAL + sent(one)


@given(rank=st.integers(-2**31, 2**31 - 1), size=st.integers(-2**31, 2**31 - 1),
       rows=st.lists(TRAFFIC_ROW, min_size=1, max_size=6))
@example(rank=930_000_000, size=930_000_001, rows=[{"peer": 929_999_999, "op": 1, "klass": 0, "mem": 1, "dir": 0,
                                                    "origin": 0, "bytes": 1, "msgs": 1}])
@example(rank=0, size=2, rows=[{"peer": 1, "op": 1, "klass": 0, "mem": 1, "dir": 0, "origin": 0,
                                "bytes": 2**63, "msgs": 1}])
@example(rank=0, size=2, rows=[{"peer": 1, "op": 1, "klass": 0, "mem": 1, "dir": 0, "origin": 0,
                                "bytes": 2**63 - 1, "msgs": 1}] * 3)
def test_out_of_range_ranks_and_counts(tmp_path, rank, size, rows):
    data = recfile.header(rank, size) + recfile.block(R.BT_STRINGS, recfile.strings({1: "MPI_Send"}))
    data += recfile.block(R.BT_TRAFFIC, recfile.rows("TRAFFIC", rows)) + recfile.flush(1, 10, True)
    rec = read_checked(tmp_path / "rank-0.mpi.rmrec", data)
    if rec is not None:
        assert 0 <= rec.world_rank < rec.world_size <= R.MAX_WORLD_SIZE


VARBLOCK = st.sampled_from([R.BT_STRINGS, R.BT_META, R.BT_COMM, R.BT_CUDA_KERNEL, R.BT_COLLFACTS, R.BT_PVARS,
                            R.BT_FLUSH, R.BT_TRAFFIC, R.BT_CUDA_COPY, 0, 11, 999])


@given(btype=VARBLOCK, payload=st.binary(max_size=300), source=st.sampled_from(list(R.SOURCES)))
@example(btype=R.BT_COMM, payload=(1).to_bytes(8, "little") + (2**32 - 1).to_bytes(4, "little")
         + (0).to_bytes(4, "little"), source="mpi")
def test_any_payload_in_a_valid_block(tmp_path, btype, payload, source):
    """Well framed, checksummed blocks of any content: entries whose lengths run past the block,
    counts of 2**32 members, names that are not UTF-8."""
    data = recfile.header(0, 2, source=source) + recfile.block(btype, payload) + recfile.flush(1, 10, True)
    read_checked(tmp_path / f"rank-0.{source}.rmrec", data)


@given(flips=st.lists(st.tuples(st.integers(0, len(BASE) - 1), st.integers(0, 7)), max_size=4),
       rows=st.lists(TRAFFIC_ROW, max_size=3), peer_rank=st.integers(-3, 10**9), size=st.integers(-3, 10**9))
@example(flips=[], rows=[], peer_rank=930_000_000, size=930_000_001)
def test_ingest_of_hostile_run_directories(tmp_path_factory, flips, rows, peer_rank, size):
    """`rankmap ingest` of a run directory whose files are damaged or hostile: it stores what the
    intact blocks of the job's own ranks say, exactly, or refuses in one line; the stored job's
    ranks are the job's (no rank outside it, so no matrix of 930 million ranks)."""
    from rankmap.pipeline.ingest import ingest_run
    from rankmap.store import open_store

    d = tmp_path_factory.mktemp("run")
    (d / "job.json").write_text(json.dumps({"version": 1, "run_uid": "u1", "command": ["mpirun", "-np", "2", "./a"],
                                            "world_size": 2, "launcher": "openmpi", "exit_status": 0,
                                            "start": "2026-01-01T00:00:00.000000Z",
                                            "end": "2026-01-01T00:00:01.000000Z"}))
    data = bytearray(recfile.ring_file(0, 2, 100))
    for off, bit in flips:
        if off < len(data):
            data[off] ^= 1 << bit
    (d / "rank-0.mpi.rmrec").write_bytes(bytes(data))
    hostile = recfile.header(min(max(peer_rank, -2**31), 2**31 - 1), min(max(size, -2**31), 2**31 - 1))
    hostile += recfile.block(R.BT_STRINGS, recfile.strings({1: "MPI_Send"}))
    if rows:
        hostile += recfile.block(R.BT_TRAFFIC, recfile.rows("TRAFFIC", rows))
    (d / "rank-1.mpi.rmrec").write_bytes(hostile + recfile.flush(1, 10, True))
    store = open_store(f"sqlite:///{d / 'store.db'}")
    try:
        res = ingest_run(d, store)
    except RankmapError as e:
        fuzzing.one_line(e)
        return
    assert store.world_size(res.job_id) == 2
    m = store.traffic_matrix(res.job_id)
    assert m.shape == (2, 2)
    want = {}
    for name in ("rank-0.mpi.rmrec", "rank-1.mpi.rmrec"):
        try:
            rec = R.read(d / name)
        except RankmapError:
            continue
        if 0 <= rec.world_rank < 2:
            for r in rec.traffic:
                if r.direction == "send" and r.peer < 2:
                    want[(rec.world_rank, r.peer)] = want.get((rec.world_rank, r.peer), 0) + r.bytes
    got = {(s, t): int(m[s, t]) for s in range(2) for t in range(2) if m[s, t]}
    assert got == want
    for p in res.problems:
        fuzzing.one_line(Exception(p))


def collfact(sig: int, size: int, rank: int, root: int, scount: int, ssize: int, rcount: int, rsize: int,
             vec: list[int], op: int = 2, comm: int = 0) -> bytes:
    head = recfile.rows("COLLFACT_SIG", [{"kind": 1, "mem": 1, "flags": 0, "sig": sig, "comm": comm, "size": size,
                                          "rank": rank, "root": root, "op": op, "scount": scount, "ssize": ssize,
                                          "rsize": rsize, "rcount": rcount, "nvec": len(vec)}])
    return head + b"".join(int(v).to_bytes(8, "little", signed=True) for v in vec)


I32 = st.integers(-2**31, 2**31 - 1)
I64 = st.integers(-2**63, 2**63 - 1)


@given(size=I32, rank=I32, root=I32, scount=I64, ssize=I32, rcount=I64, rsize=I32,
       vec=st.lists(I64, max_size=4), calls=st.integers(0, 2**64 - 1),
       op=st.sampled_from(["MPI_Allreduce", "MPI_Bcast", "MPI_Alltoallv", "MPI_Gather", "MPI_Reduce_scatter",
                           "MPI_Allgather", "MPI_Scan", "MPI_Barrier"]))
@example(size=2**31 - 1, rank=0, root=0, scount=2**40, ssize=8, rcount=2**40, rsize=8, vec=[], calls=2**40,
         op="MPI_Allreduce")
@example(size=2, rank=0, root=0, scount=2**62, ssize=2**30, rcount=2**62, rsize=2**30, vec=[], calls=3,
         op="MPI_Bcast")
def test_ingest_of_hostile_collective_facts(tmp_path_factory, size, rank, root, scount, ssize, rcount, rsize, vec,
                                            calls, op):
    """A collective call's recorded facts with any values (a communicator of 2**31 ranks, counts past
    int64 once multiplied, 2**64 calls): the pairs derived from them are the job's, in range, or
    the facts are left out and said; never a hang."""
    from rankmap.pipeline.ingest import ingest_run
    from rankmap.store import open_store

    d = tmp_path_factory.mktemp("run")
    (d / "job.json").write_text(json.dumps({"version": 1, "run_uid": "u2", "command": ["mpirun", "-np", "2", "./a"],
                                            "world_size": 2, "launcher": "openmpi", "exit_status": 0}))
    comm = (0).to_bytes(8, "little") + (2).to_bytes(4, "little") + (14).to_bytes(4, "little") + b"MPI_COMM_WORLD" \
        + (0).to_bytes(4, "little") + (1).to_bytes(4, "little")
    calls_row = recfile.rows("COLLFACT_CALLS", [{"kind": 2, "sig": 1, "bucket": 0, "calls": calls}])
    for r in range(2):
        data = recfile.header(r, 2) + recfile.block(R.BT_STRINGS, recfile.strings({2: op}))
        data += recfile.block(R.BT_COMM, comm)
        data += recfile.block(R.BT_COLLFACTS, collfact(1, size, rank if r == 0 else r, root, scount, ssize, rcount,
                                                       rsize, vec) + calls_row)
        (d / f"rank-{r}.mpi.rmrec").write_bytes(data + recfile.flush(1, 10, True))
    store = open_store(f"sqlite:///{d / 'store.db'}")
    try:
        with fuzzing.time_limit(20):
            res = ingest_run(d, store)
    except RankmapError as e:
        fuzzing.one_line(e)
        return
    m = store.traffic_matrix(res.job_id)
    assert m.shape == (2, 2) and (m >= 0).all()
    for row in store.traffic(res.job_id):
        assert 0 <= row["bytes"] <= INT64_MAX and 0 <= row["messages"] <= INT64_MAX


def test_an_alltoallv_signature_of_two_values_per_rank_is_in_range():
    """alltoallv/w's vector is the bytes to each peer then from each: twice the communicator's size
    (what the Fortran bindings' exact test caught when the range check allowed only one per rank)."""
    from rankmap.formats.record import _fact_in_range

    e = {"size": 4, "rank": 0, "root": 0, "scount": 0, "ssize": 8, "rcount": 0, "rsize": 8}
    assert _fact_in_range(e, (8, 16, 24, 8, 8, 16, 24, 8), 4)
    assert not _fact_in_range(e, (8,) * 9, 4)            # more than two per rank: damage
    assert not _fact_in_range(e, (8, -1), 4)
