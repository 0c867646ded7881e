"""Record files built byte by byte in the tests, from the layout the C writer and the reader share
(``native/common/rmrec_layout.h`` through ``rankmap.formats.record``): valid headers and blocks with
their checksums, so that a test can put any value in a row (a rank outside the job, a byte count
past int64) and still have the reader take the block as intact, the way a hostile or buggy writer
would."""

from __future__ import annotations

import zlib

import numpy as np

from rankmap.formats import record as R

L = R.layout()


def header(world_rank: int = 0, world_size: int = 2, *, source: str = "mpi", pid: int = 4242,
           start_ns: int = 1_700_000_000_000_000_000, bucket_ns: int = 100_000_000, host: bytes = b"node0") -> bytes:
    h = np.zeros(1, dtype=L.rows["HEADER"])
    h["magic"] = np.frombuffer(R.MAGIC, dtype="V8")[0]
    h["version"], h["header_size"], h["source"] = R.VERSION, R.HEADER_SIZE, R.SOURCES.index(source)
    h["world_rank"], h["world_size"], h["pid"] = world_rank, world_size, pid
    h["start_ns"], h["bucket_ns"] = start_ns, bucket_ns
    h["host"] = np.frombuffer(host[:63].ljust(64, b"\0"), dtype="V64")[0]
    b = bytearray(h.tobytes())
    crc_at = L.rows["HEADER"].fields["crc"][1]
    b[crc_at:crc_at + 4] = zlib.crc32(bytes(b[:crc_at])).to_bytes(4, "little")
    return bytes(b)


def block(btype: int, payload: bytes) -> bytes:
    """One framed block: magic, type, length, CRC-32 of bytes 4..11 then the payload."""
    head = np.zeros(1, dtype=L.rows["BLOCK"])
    head["magic"] = np.frombuffer(R.BLOCK_MAGIC, dtype="V4")[0]
    head["type"], head["length"] = btype, len(payload)
    raw = bytearray(head.tobytes())
    crc = zlib.crc32(payload, zlib.crc32(bytes(raw[4:12])))
    raw[12:16] = crc.to_bytes(4, "little")
    return bytes(raw) + payload


def rows(name: str, values: list[dict]) -> bytes:
    """Rows of the fixed-size type ``name`` (``TRAFFIC``, ``OPTIME``, ...), fields by name."""
    a = np.zeros(len(values), dtype=L.rows[name])
    for i, v in enumerate(values):
        for k, x in v.items():
            a[i][k] = x
    return a.tobytes()


def strings(names: dict[int, str]) -> bytes:
    out = b""
    for i, s in names.items():
        e = s.encode()
        out += int(i).to_bytes(4, "little") + len(e).to_bytes(4, "little") + e
    return out


def flush(seq: int, elapsed_ns: int, final: bool = False) -> bytes:
    return block(R.BT_FLUSH, rows("FLUSH", [{"seq": seq, "wall_ns": 0, "elapsed_ns": elapsed_ns,
                                             "final": int(final)}]))


def ring_file(rank: int, size: int, nbytes: int, flushes: int = 3, *, peer: int | None = None,
              final: bool = True) -> bytes:
    """The file of one rank of a ring: ``flushes`` flushes, each adding ``nbytes`` sent to ``peer``
    (default the right neighbour) in one MPI_Isend message."""
    peer = (rank + 1) % size if peer is None else peer
    out = header(rank, size) + block(R.BT_STRINGS, strings({1: "MPI_Isend"}))
    p2p, dev, send = R.CLASSES.index("p2p"), R.MEMS.index("host"), R.DIRECTIONS.index("send")
    for i in range(flushes):
        out += block(R.BT_TRAFFIC, rows("TRAFFIC", [{"peer": peer, "op": 1, "klass": p2p, "mem": dev,
                                                    "dir": send, "bytes": nbytes, "msgs": 1}]))
        out += flush(i + 1, (i + 1) * 1_000_000, final and i == flushes - 1)
    return out


def block_offsets(data: bytes) -> list[int]:
    """Where each block of a file starts (the file as the writer framed it)."""
    out, off = [], R.HEADER_SIZE
    while off + R.BLOCK_HDR <= len(data):
        out.append(off)
        length = int.from_bytes(data[off + 8:off + 12], "little")
        off += R.BLOCK_HDR + length
    return out
