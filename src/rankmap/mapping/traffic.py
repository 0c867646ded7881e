"""Where a traffic matrix comes from: the export CSV, or a stored job.

The CSV is what ``rankmap export --format csv`` writes, one row per (src, dst, class, operation)::

    src,dst,class,operation,bytes,messages
    0,1,p2p,MPI_Isend,1048576,16

Placement sums the bytes over classes and operations. The reader is strict, because a malformed
line silently dropped would skew the mapping: anything off is an error naming the file and line.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from rankmap.errors import RankmapError
from rankmap.mapping.cost import Traffic

HEADER = ["src", "dst", "class", "operation", "bytes", "messages"]


def read_csv(path: str | Path, world_size: int | None = None) -> Traffic:
    p = Path(path)
    try:
        f = p.open(newline="", encoding="utf-8")
    except OSError as e:
        raise RankmapError(f"cannot read traffic file {p}: {e.strerror}") from None
    src: list[int] = []
    dst: list[int] = []
    nbytes: list[int] = []
    with f:
        rows = csv.reader(f)
        try:
            header = next(rows)
        except StopIteration:
            raise RankmapError(f"{p}: empty file, expected the header {','.join(HEADER)}") from None
        except (csv.Error, UnicodeDecodeError) as e:
            raise RankmapError(f"{p}:1: not CSV text ({e})") from None
        if [h.strip() for h in header] != HEADER:
            raise RankmapError(f"{p}:1: bad header {','.join(header)!r}, expected {','.join(HEADER)}")
        line = 1
        try:
            for row in rows:
                line += 1
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != len(HEADER):
                    raise RankmapError(f"{p}:{line}: expected {len(HEADER)} fields, got {len(row)}")
                try:
                    s, d, b, m = int(row[0]), int(row[1]), int(row[4]), int(row[5])
                except ValueError:
                    raise RankmapError(f"{p}:{line}: src, dst, bytes and messages must be integers, "
                                       f"got {','.join(row)!r}") from None
                if s < 0 or d < 0 or b < 0 or m < 0:
                    raise RankmapError(f"{p}:{line}: negative value in {','.join(row)!r}")
                src.append(s)
                dst.append(d)
                nbytes.append(b)
        except (csv.Error, UnicodeDecodeError) as e:
            raise RankmapError(f"{p}:{line}: not CSV text ({e})") from None
    n = max([x + 1 for x in src + dst] + [0])
    if world_size is not None:
        if n > world_size:
            raise RankmapError(f"{p}: names rank {n - 1} but the job has {world_size} ranks")
        n = world_size
    if n == 0:
        raise RankmapError(f"{p}: no traffic rows")
    return Traffic.from_triples(n, src, dst, nbytes)


def write_csv(path: str | Path, T: np.ndarray, klass: str = "p2p", operation: str = "synthetic") -> None:
    """Write a dense matrix in the export format (tests, benchmarks, the demo's fallback)."""
    T = np.asarray(T)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for s, d in zip(*np.nonzero(T)):
            w.writerow([int(s), int(d), klass, operation, int(T[s, d]), 1])


def from_job(store, spec: str) -> tuple[Traffic, dict]:
    """The stored traffic of job ``spec`` ('latest' or an id) and its job row."""
    jid = store.resolve_job(spec)
    job = store.job(jid)
    T = np.asarray(store.traffic_matrix(jid), dtype=float)
    if T.size == 0 or not T.any():
        raise RankmapError(f"job {jid} recorded no traffic between ranks: nothing to place")
    return Traffic.from_dense(T), job
