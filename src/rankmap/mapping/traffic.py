"""Where a traffic matrix comes from: the export CSV, or a stored job.

The CSV is what ``rankmap export --format csv`` writes, one row per (src, dst, class, operation)::

    src,dst,class,operation,bytes,messages
    0,1,p2p,MPI_Isend,1048576,16

Placement sums the bytes over classes and operations. The reader is strict, because a malformed
line silently dropped would skew the mapping: anything off is an error naming the file and line.

An optional seventh column ``mem`` (``rankmap export --by-mem`` writes it) says where the send buffer
lived: ``device``, ``host``, ``managed`` or ``unknown``. Rows marked ``host`` were staged through host
memory and are routed GPU -> host -> GPU by the cost model; without the column every byte is routed
peer-to-peer. A stored job always has the memory kind, so ``--job`` splits the same way.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from rankmap.errors import RankmapError
from rankmap.mapping.cost import Traffic

HEADER = ["src", "dst", "class", "operation", "bytes", "messages"]
HEADER_MEM = HEADER + ["mem"]
MEM_KINDS = ("device", "host", "managed", "unknown")


def read_csv(path: str | Path, world_size: int | None = None) -> Traffic:
    p = Path(path)
    try:
        f = p.open(newline="", encoding="utf-8")
    except OSError as e:
        raise RankmapError(f"cannot read traffic file {p}: {e.strerror}") from None
    src: list[int] = []
    dst: list[int] = []
    nbytes: list[int] = []
    host: list[int] = []
    with f:
        rows = csv.reader(f)
        try:
            header = next(rows)
        except StopIteration:
            raise RankmapError(f"{p}: empty file, expected the header {','.join(HEADER)}") from None
        except (csv.Error, UnicodeDecodeError) as e:
            raise RankmapError(f"{p}:1: not CSV text ({e})") from None
        cols = [h.strip() for h in header]
        if cols not in (HEADER, HEADER_MEM):
            raise RankmapError(f"{p}:1: bad header {','.join(header)!r}, expected {','.join(HEADER)} "
                               f"(optionally followed by ,mem)")
        width = len(cols)
        with_mem = width == len(HEADER_MEM)
        line = 1
        try:
            for row in rows:
                line += 1
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != width:
                    raise RankmapError(f"{p}:{line}: expected {width} fields, got {len(row)}")
                try:
                    s, d, b, m = int(row[0]), int(row[1]), int(row[4]), int(row[5])
                except ValueError:
                    raise RankmapError(f"{p}:{line}: src, dst, bytes and messages must be integers, "
                                       f"got {','.join(row)!r}") from None
                if s < 0 or d < 0 or b < 0 or m < 0:
                    raise RankmapError(f"{p}:{line}: negative value in {','.join(row)!r}")
                mem = row[6].strip() if with_mem else "unknown"
                if mem not in MEM_KINDS:
                    raise RankmapError(f"{p}:{line}: mem must be one of {', '.join(MEM_KINDS)}, got {row[6]!r}")
                src.append(s)
                dst.append(d)
                nbytes.append(b)
                host.append(b if mem == "host" else 0)
        except (csv.Error, UnicodeDecodeError) as e:
            raise RankmapError(f"{p}:{line}: not CSV text ({e})") from None
    n = max([x + 1 for x in src + dst] + [0])
    if world_size is not None:
        if n > world_size:
            raise RankmapError(f"{p}: names rank {n - 1} but the job has {world_size} ranks")
        n = world_size
    if n == 0:
        raise RankmapError(f"{p}: no traffic rows")
    return Traffic.from_triples(n, src, dst, nbytes, host if with_mem else None)


def write_csv(path: str | Path, T: np.ndarray, klass: str = "p2p", operation: str = "synthetic",
              host: np.ndarray | None = None) -> None:
    """Write a dense matrix in the export format (tests, benchmarks, the demo's fallback).

    With ``host`` (the host-staged part of ``T``) the ``mem`` column is written too: a ``host`` row
    for those bytes and a ``device`` row for the rest of each pair."""
    T = np.asarray(T)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER if host is None else HEADER_MEM)
        for s, d in zip(*np.nonzero(T)):
            if host is None:
                w.writerow([int(s), int(d), klass, operation, int(T[s, d]), 1])
                continue
            hb = int(host[s, d])
            for b, mem in ((int(T[s, d]) - hb, "device"), (hb, "host")):
                if b:
                    w.writerow([int(s), int(d), klass, operation, b, 1, mem])


def job_traffic(store, jid: int) -> Traffic:
    """A stored job's traffic, with the bytes whose send buffer was in host memory as the host part
    (device, managed and unknown buffers are routed peer-to-peer)."""
    n = store.world_size(jid)
    T = np.zeros((n, n))
    H = np.zeros((n, n))
    for r in store.traffic(jid, by_mem=True):
        T[r["src"], r["dst"]] += r["bytes"]
        if r["mem"] == "host":
            H[r["src"], r["dst"]] += r["bytes"]
    return Traffic.from_dense(T, H if H.any() else None)


def from_job(store, spec: str) -> tuple[Traffic, dict]:
    """The stored traffic of job ``spec`` ('latest' or an id) and its job row."""
    jid = store.resolve_job(spec)
    job = store.job(jid)
    tr = job_traffic(store, jid)
    if tr.total == 0:
        raise RankmapError(f"job {jid} recorded no traffic between ranks: nothing to place")
    return tr, job
