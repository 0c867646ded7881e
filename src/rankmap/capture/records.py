"""The one reader of rankmap record files (``rank-<world>.<source>.rmrec``).

The format is specified in ``docs/record-format.md`` and written by ``native/common/rmrec.c``.
Counters are stored as deltas per flush; :func:`read` sums them into totals.  A truncated or
corrupt tail (a job killed mid-flush, a damaged disk block) is reported in
:attr:`RankRecord.problems` with the file and offset, and every intact block is used.  A file
that is not a record file at all (wrong magic, unknown version, damaged header) raises
:class:`~rankmap.errors.RankmapError` naming the file and offset.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rankmap.errors import RankmapError

MAGIC = b"RMREC\r\n\x1a"
BLOCK_MAGIC = b"RMBK"
VERSION = 1
HEADER_SIZE = 128
BLOCK_HDR = 16
MAX_BLOCK = 64 << 20
HIST_BINS = 64

CLASSES = ("p2p", "collective", "rma", "nccl")
MEMS = ("unknown", "host", "device", "managed")
DIRECTIONS = ("send", "recv")
SOURCES = ("mpi", "nccl")

BT_STRINGS, BT_TRAFFIC, BT_HIST, BT_OPTIME, BT_TIMELINE, BT_COMM, BT_META, BT_FLUSH = range(1, 9)

_TRAFFIC = np.dtype([("peer", "<i4"), ("op", "<u2"), ("klass", "u1"), ("mem", "u1"), ("dir", "u1"),
                     ("pad", "V7"), ("bytes", "<u8"), ("msgs", "<u8")])
_HIST = np.dtype([("op", "<u2"), ("bin", "u1"), ("pad", "V5"), ("count", "<u8")])
_OPTIME = np.dtype([("op", "<u2"), ("pad", "V6"), ("calls", "<u8"), ("ns", "<u8"), ("bytes", "<u8")])
_TIMELINE = np.dtype([("bucket", "<i8"), ("peer", "<i4"), ("klass", "u1"), ("pad", "V3"), ("bytes", "<u8")])
_FLUSH = struct.Struct("<QqqII")
_ROWS = {BT_TRAFFIC: _TRAFFIC, BT_HIST: _HIST, BT_OPTIME: _OPTIME, BT_TIMELINE: _TIMELINE}


@dataclass
class Communicator:
    """A communicator seen by the rank: id (source-specific), name, members' world ranks."""

    id: int
    name: str
    members: list[int]


@dataclass
class RankRecord:
    """Everything one rank recorded from one source, summed over all intact flushes.

    traffic rows are ``(peer, klass, operation, mem, direction, bytes, messages)`` with peer a
    world rank, klass in :data:`CLASSES`, mem in :data:`MEMS`, direction in :data:`DIRECTIONS`.
    ``histogram[op][k]`` counts calls whose payload fell in bin k (0: 0 bytes; k >= 1:
    2**(k-1) <= bytes < 2**k).  ``op_time[op] = (calls, ns)``; ``payload[op]`` the logical bytes.
    ``timeline`` rows are ``(bucket, peer, klass, bytes_sent)``, bucket = elapsed // bucket_ns.
    """

    path: Path
    version: int
    source: str
    world_rank: int
    world_size: int
    host: str
    pid: int
    start_ns: int
    bucket_ns: int
    elapsed_ns: int = 0
    finalized: bool = False
    flushes: int = 0
    traffic: list[tuple[int, str, str, str, str, int, int]] = field(default_factory=list)
    histogram: dict[str, list[int]] = field(default_factory=dict)
    op_time: dict[str, tuple[int, int]] = field(default_factory=dict)
    payload: dict[str, int] = field(default_factory=dict)
    timeline: list[tuple[int, int, str, int]] = field(default_factory=list)
    communicators: list[Communicator] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    blocks: int = 0


def _parse_header(path: Path, data: bytes) -> RankRecord:
    if len(data) < 8 or data[:8] != MAGIC:
        raise RankmapError(f"{path}: not a rankmap record file (bad magic at offset 0)")
    if len(data) < HEADER_SIZE:
        raise RankmapError(f"{path}: truncated header at offset {len(data)} (need {HEADER_SIZE} bytes)")
    version, hsize, src = struct.unpack_from("<HHB", data, 8)
    if version != VERSION:
        raise RankmapError(f"{path}: unsupported record format version {version} at offset 8 "
                           f"(this rankmap reads version {VERSION})")
    if hsize != HEADER_SIZE:
        raise RankmapError(f"{path}: bad header size {hsize} at offset 10")
    (crc,) = struct.unpack_from("<I", data, 124)
    if zlib.crc32(data[:124]) != crc:
        raise RankmapError(f"{path}: header checksum mismatch at offset 124")
    wr, ws, pid, start, bucket = struct.unpack_from("<iiqqq", data, 16)
    host = data[48:112].split(b"\0", 1)[0].decode("utf-8", "replace")
    if src >= len(SOURCES):
        raise RankmapError(f"{path}: unknown source kind {src} at offset 12")
    return RankRecord(path=path, version=version, source=SOURCES[src], world_rank=wr, world_size=ws,
                      host=host, pid=pid, start_ns=start, bucket_ns=bucket)


def _block_ok(data: bytes, off: int) -> tuple[str | None, int, int]:
    """Check the block at ``off``: returns (problem or None, type, payload length)."""
    if len(data) - off < BLOCK_HDR:
        return "truncated block header", 0, 0
    if data[off:off + 4] != BLOCK_MAGIC:
        return "corrupt block (bad block magic)", 0, 0
    btype, _rsv, length, crc = struct.unpack_from("<HHII", data, off + 4)
    if length > MAX_BLOCK:
        return f"corrupt block (length {length})", btype, length
    if off + BLOCK_HDR + length > len(data):
        return "truncated block", btype, length
    c = zlib.crc32(data[off + 4:off + 12])
    c = zlib.crc32(data[off + BLOCK_HDR:off + BLOCK_HDR + length], c)
    if c != crc:
        return "corrupt block (checksum mismatch)", btype, length
    return None, btype, length


def _resync(data: bytes, off: int) -> int:
    """Offset of the next intact block after ``off``, or -1."""
    pos = off + 1
    while True:
        pos = data.find(BLOCK_MAGIC, pos)
        if pos < 0:
            return -1
        if _block_ok(data, pos)[0] is None:
            return pos
        pos += 1


def read(path: str | Path, live: bool = False) -> RankRecord:
    """Read and validate one record file; sum its flushes into a :class:`RankRecord`.

    ``live=True`` reads a file that its rank may still be writing: a truncated last block (a flush
    in progress) and the missing finalize marker are then not reported as problems.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RankmapError(f"cannot read record file {path}: {e.strerror or e}") from None
    rec = _parse_header(path, data)

    strings: dict[int, str] = {}
    parts: dict[int, list[np.ndarray]] = {t: [] for t in _ROWS}
    comms: dict[tuple[int, str], Communicator] = {}
    off = HEADER_SIZE
    used_before = 0
    bad_at: int | None = None
    bad_why = ""
    skipped = 0
    while off < len(data):
        why, btype, length = _block_ok(data, off)
        if why is not None:
            if bad_at is None:
                bad_at, bad_why, used_before = off, why, rec.blocks
            nxt = _resync(data, off)
            if nxt < 0:
                break
            skipped += 1
            off = nxt
            continue
        payload = data[off + BLOCK_HDR:off + BLOCK_HDR + length]
        rec.blocks += 1
        if btype in _ROWS:
            dt = _ROWS[btype]
            if length % dt.itemsize:
                rec.problems.append(f"{path.name}: block at offset {off} has {length} bytes, "
                                    f"not a multiple of {dt.itemsize}; ignored")
            else:
                parts[btype].append(np.frombuffer(payload, dtype=dt))
        elif btype == BT_STRINGS:
            p = 0
            while p + 8 <= length:
                sid, n = struct.unpack_from("<II", payload, p)
                strings[sid] = payload[p + 8:p + 8 + n].decode("utf-8", "replace")
                p += 8 + n
        elif btype == BT_META:
            p = 0
            while p + 8 <= length:
                kl, vl = struct.unpack_from("<II", payload, p)
                k = payload[p + 8:p + 8 + kl].decode("utf-8", "replace")
                v = payload[p + 8 + kl:p + 8 + kl + vl].decode("utf-8", "replace")
                rec.meta[k] = v
                p += 8 + kl + vl
        elif btype == BT_COMM:
            p = 0
            while p + 16 <= length:
                cid, size, nl = struct.unpack_from("<QII", payload, p)
                cname = payload[p + 16:p + 16 + nl].decode("utf-8", "replace")
                members = list(np.frombuffer(payload, dtype="<i4", count=size, offset=p + 16 + nl).tolist())
                comms[(cid, cname)] = Communicator(cid, cname, members)
                p += 16 + nl + 4 * size
        elif btype == BT_FLUSH:
            _seq, _wall, elapsed, final, _pad = _FLUSH.unpack_from(payload, 0)
            rec.flushes += 1
            rec.elapsed_ns = max(rec.elapsed_ns, elapsed)
            rec.finalized = rec.finalized or bool(final)
        # unknown block types are skipped (forward compatible within a version)
        off += BLOCK_HDR + length

    if bad_at is not None and live and bad_why.startswith("truncated") and rec.blocks == used_before:
        bad_at = None                  # the writer is in the middle of appending this block
    if bad_at is not None:
        later = rec.blocks - used_before
        msg = f"{path.name}: {bad_why} at offset {bad_at}; {used_before} earlier blocks used"
        if later:
            msg += f", {later} later blocks used"
        rec.problems.append(msg)
    if not rec.finalized and not live:
        rec.problems.append(f"{path.name}: no finalize marker (the rank ended without a final flush); "
                            f"data up to {rec.elapsed_ns / 1e9:.3f} s used")

    def opname(i: int) -> str:
        return strings.get(int(i), f"op#{int(i)}")

    if parts[BT_TRAFFIC]:
        t = np.concatenate(parts[BT_TRAFFIC])
        key = ((t["peer"].astype(np.int64) + 1) << 32) | (t["op"].astype(np.int64) << 16) | \
              (t["klass"].astype(np.int64) << 8) | (t["mem"].astype(np.int64) << 4) | t["dir"].astype(np.int64)
        uk, inv = np.unique(key, return_inverse=True)
        by = np.zeros(len(uk), dtype=np.uint64)
        ms = np.zeros(len(uk), dtype=np.uint64)
        np.add.at(by, inv, t["bytes"])
        np.add.at(ms, inv, t["msgs"])
        out = []
        for k, b, n in zip(uk.tolist(), by.tolist(), ms.tolist()):
            peer, op, kl, m, d = (k >> 32) - 1, (k >> 16) & 0xFFFF, (k >> 8) & 0xFF, (k >> 4) & 0xF, k & 0xF
            out.append((peer, CLASSES[kl] if kl < 4 else f"class#{kl}", opname(op),
                        MEMS[m] if m < 4 else f"mem#{m}", DIRECTIONS[d] if d < 2 else f"dir#{d}", b, n))
        rec.traffic = sorted(out)
    if parts[BT_OPTIME]:
        t = np.concatenate(parts[BT_OPTIME])
        for op, calls, ns, by_ in zip(t["op"].tolist(), t["calls"].tolist(), t["ns"].tolist(), t["bytes"].tolist()):
            c0, n0 = rec.op_time.get(opname(op), (0, 0))
            rec.op_time[opname(op)] = (c0 + calls, n0 + ns)
            rec.payload[opname(op)] = rec.payload.get(opname(op), 0) + by_
    if parts[BT_HIST]:
        t = np.concatenate(parts[BT_HIST])
        for op, b, n in zip(t["op"].tolist(), t["bin"].tolist(), t["count"].tolist()):
            h = rec.histogram.setdefault(opname(op), [0] * HIST_BINS)
            if b < HIST_BINS:
                h[b] += n
    if parts[BT_TIMELINE]:
        t = np.concatenate(parts[BT_TIMELINE])
        key = (t["bucket"].astype(np.int64) << 24) | ((t["peer"].astype(np.int64) + 1) << 4) | t["klass"].astype(np.int64)
        uk, inv = np.unique(key, return_inverse=True)
        by = np.zeros(len(uk), dtype=np.uint64)
        np.add.at(by, inv, t["bytes"])
        rec.timeline = [((k >> 24), ((k >> 4) & 0xFFFFF) - 1, CLASSES[k & 0xF] if (k & 0xF) < 4 else f"class#{k & 0xF}", b)
                        for k, b in zip(uk.tolist(), by.tolist())]
    rec.communicators = list(comms.values())
    return rec


def read_dir(rundir: str | Path, source: str | None = None, live: bool = False) -> list[RankRecord]:
    """Read every ``rank-*.rmrec`` file in ``rundir`` (optionally of one source), by world rank."""
    rundir = Path(rundir)
    if not rundir.is_dir():
        raise RankmapError(f"run directory {rundir} does not exist")
    pattern = f"rank-*.{source}.rmrec" if source else "rank-*.rmrec"
    recs = [read(p, live=live) for p in sorted(rundir.glob(pattern))]
    recs.sort(key=lambda r: (r.source, r.world_rank))
    return recs


def traffic_matrix(records: list[RankRecord], klass: str | None = None, operation: str | None = None,
                   what: str = "bytes", world_size: int | None = None) -> np.ndarray:
    """The traffic matrix T[src][dst] (int64) of bytes (or ``what="messages"``).

    Built from the sender's view: send rows of src with peer dst; for class ``rma`` a recv row
    (MPI_Get and the fetch part of Get_accumulate / Fetch_and_op / Compare_and_swap: data moves
    from the target to the origin) counts as T[target][origin].
    """
    n = world_size or max([r.world_size for r in records] + [0])
    m = np.zeros((n, n), dtype=np.int64)
    col = 5 if what == "bytes" else 6
    for r in records:
        for row in r.traffic:
            peer, k, op, _mem, d = row[:5]
            if (klass and k != klass) or (operation and op != operation) or not (0 <= peer < n):
                continue
            if d == "send":
                m[r.world_rank, peer] += row[col]
            elif k == "rma":
                m[peer, r.world_rank] += row[col]
    return m


def received_matrix(records: list[RankRecord], klass: str | None = None, operation: str | None = None,
                    what: str = "bytes", world_size: int | None = None) -> np.ndarray:
    """R[src][dst] from the receiver's view: recv rows of dst with peer src (not rma)."""
    n = world_size or max([r.world_size for r in records] + [0])
    m = np.zeros((n, n), dtype=np.int64)
    col = 5 if what == "bytes" else 6
    for r in records:
        for row in r.traffic:
            peer, k, op, _mem, d = row[:5]
            if d != "recv" or k == "rma" or (klass and k != klass) or (operation and op != operation):
                continue
            if 0 <= peer < n:
                m[peer, r.world_rank] += row[col]
    return m
