"""The traffic CSV: what ``rankmap export --format csv`` writes and ``rankmap map --traffic`` reads.

One row per (src, dst, class, operation)::

    src,dst,class,operation,bytes,messages
    0,1,p2p,MPI_Isend,1048576,16

An optional seventh column ``mem`` (``rankmap export --by-mem`` writes it) says where the send
buffer lived: ``device``, ``host``, ``managed`` or ``unknown``. An optional last column
``pair_source`` (``rankmap export --pair-source``) says where the row's pairs come from: ``call``
(counted at the call, exact), ``library`` (the library's own accounting), ``mirror`` (its algorithm
choice followed), ``model``; empty for rows stored before rows carried it
(docs/collective-models.md). Placement reads it and ignores it.

The reader is strict, because a malformed line silently dropped would skew a placement: anything
off is an error naming the file and line. It returns a :class:`TrafficTable` (columns as
arrays); what the rows mean for placement is the mapping layer's business.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from rankmap.errors import RankmapError

HEADER = ["src", "dst", "class", "operation", "bytes", "messages"]
HEADER_MEM = HEADER + ["mem"]
MEM_KINDS = ("device", "host", "managed", "unknown")
PAIR_SOURCES = ("call", "library", "mirror", "model", "")
#: counts are int64 everywhere they are kept; ranks as many as a record file may name (formats.record)
INT64_MAX = 2**63 - 1
MAX_RANKS = 1 << 24
#: every header the reader takes: the six columns, then optionally mem, then optionally pair_source
HEADERS = (HEADER, HEADER_MEM, HEADER + ["pair_source"], HEADER_MEM + ["pair_source"])


@dataclass
class TrafficTable:
    """The rows of a traffic CSV as columns; ``mem`` is None when the file has no mem column."""

    src: np.ndarray          # int64
    dst: np.ndarray          # int64
    klass: list[str]
    operation: list[str]
    bytes: np.ndarray        # int64
    messages: np.ndarray     # int64
    mem: list[str] | None
    ranks: int               # 1 + the highest rank named
    pair_source: list[str] | None = None   # None when the file has no pair_source column

    def host_bytes(self) -> np.ndarray:
        """Bytes of the rows whose send buffer was in host memory (zeros without a mem column)."""
        if self.mem is None:
            return np.zeros_like(self.bytes)
        return np.where(np.array(self.mem) == "host", self.bytes, 0)


def read(path: str | Path) -> TrafficTable:
    """Read and check a traffic CSV; every fault names the file and line."""
    p = Path(path)
    try:
        f = p.open(newline="", encoding="utf-8")
    except OSError as e:
        raise RankmapError(f"cannot read traffic file {p}: {e.strerror}") from None
    cols: dict[str, list] = {k: [] for k in ("src", "dst", "class", "operation", "bytes", "messages", "mem",
                                             "pair_source")}
    with f:
        rows = csv.reader(f)
        try:
            header = next(rows)
        except StopIteration:
            raise RankmapError(f"{p}: empty file, expected the header {','.join(HEADER)}") from None
        except (csv.Error, UnicodeDecodeError) as e:
            raise RankmapError(f"{p}:1: not CSV text ({e})") from None
        names = [h.strip() for h in header]
        if names not in HEADERS:
            raise RankmapError(f"{p}:1: bad header {','.join(header)!r}, expected {','.join(HEADER)} "
                               f"(optionally followed by ,mem and then ,pair_source)")
        width = len(names)
        with_mem = "mem" in names
        with_ps = "pair_source" in names
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
                if max(s, d) >= MAX_RANKS:
                    raise RankmapError(f"{p}:{line}: rank {max(s, d)} is beyond the largest world rankmap reads "
                                       f"({MAX_RANKS} ranks)")
                if max(b, m) > INT64_MAX:
                    raise RankmapError(f"{p}:{line}: {'bytes' if b > INT64_MAX else 'messages'} {max(b, m)} is past "
                                       f"2**63-1, the most rankmap counts")
                mem = row[6].strip() if with_mem else "unknown"
                if mem not in MEM_KINDS:
                    raise RankmapError(f"{p}:{line}: mem must be one of {', '.join(MEM_KINDS)}, got {row[6]!r}")
                ps = row[-1].strip() if with_ps else ""
                if ps not in PAIR_SOURCES:
                    raise RankmapError(f"{p}:{line}: pair_source must be one of {', '.join(PAIR_SOURCES[:-1])} "
                                       f"or empty, got {row[-1]!r}")
                for k, v in zip(("src", "dst", "class", "operation", "bytes", "messages", "mem", "pair_source"),
                                (s, d, row[2].strip(), row[3].strip(), b, m, mem, ps)):
                    cols[k].append(v)
        except (csv.Error, UnicodeDecodeError) as e:
            raise RankmapError(f"{p}:{line}: not CSV text ({e})") from None
    ranks = max([x + 1 for x in cols["src"] + cols["dst"]] + [0])
    return TrafficTable(np.array(cols["src"], dtype=np.int64), np.array(cols["dst"], dtype=np.int64),
                        cols["class"], cols["operation"], np.array(cols["bytes"], dtype=np.int64),
                        np.array(cols["messages"], dtype=np.int64), cols["mem"] if with_mem else None, ranks,
                        cols["pair_source"] if with_ps else None)


def dumps(rows: Iterable[Mapping[str, Any]], *, by_mem: bool = False, pair_source: bool = False) -> str:
    """CSV text of rows with the keys of :data:`HEADER` (and ``mem`` when ``by_mem``, ``pair_source``
    when ``pair_source``; a row without one writes it empty)."""
    header = (HEADER_MEM if by_mem else HEADER) + (["pair_source"] if pair_source else [])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow([r[k] if k != "pair_source" else (r.get(k) or "") for k in header])
    return buf.getvalue()


def matrix_rows(T: np.ndarray, klass: str = "p2p", operation: str = "synthetic",
                host: np.ndarray | None = None) -> list[dict[str, Any]]:
    """Rows of a dense matrix (one message a pair). With ``host`` (the host-staged part of ``T``)
    each pair gets a ``device`` row and a ``host`` row, for ``dumps(..., by_mem=True)``."""
    T = np.asarray(T)
    out = []
    for s, d in zip(*np.nonzero(T)):
        row = {"src": int(s), "dst": int(d), "class": klass, "operation": operation, "messages": 1}
        if host is None:
            out.append(dict(row, bytes=int(T[s, d])))
            continue
        hb = int(host[s, d])
        for b, mem in ((int(T[s, d]) - hb, "device"), (hb, "host")):
            if b:
                out.append(dict(row, bytes=b, mem=mem))
    return out
