"""The one reader of rankmap record files (``rank-<world>.<source>.rmrec``).

The format is specified in ``docs/record-format.md`` and written by ``native/common/rmrec.c``.
Its layout (header, block header, row structs, block type numbers, codes) is declared once, in
``native/common/rmrec_layout.h``: the C writer expands that file into its structs, and this
module parses the same file into numpy dtypes, so the two cannot drift apart.

Counters are stored as deltas per flush. :class:`RecordReader` resumes where it stopped: each
:meth:`~RecordReader.poll` parses only the blocks appended since the previous one and returns
their sums as a :class:`RankRecord` (a *delta*), so following a growing file costs what was
appended, not what the file holds. :func:`read` is one poll of a whole file (the totals).

A truncated or corrupt block (a job killed mid-flush, a damaged disk block) is reported in
:attr:`RankRecord.problems` with the file and offset, and every intact block is used. A file
that is not a record file at all (wrong magic, unknown version, damaged header) raises
:class:`~rankmap.errors.RankmapError` naming the file and offset.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from rankmap.errors import RankmapError, counted
from rankmap.native_sources import native_dir

# ------------------------------------------------------------------ the layout, from the C header
_CTYPES = {"u8": "u1", "u16": "<u2", "u32": "<u4", "u64": "<u8", "i32": "<i4", "i64": "<i8"}


@dataclass(frozen=True)
class Layout:
    """What ``rmrec_layout.h`` declares: numbers, code lists and packed rows."""

    numbers: dict[str, int]
    lists: dict[str, list[tuple[str, int, str]]]   # e.g. CLASSES -> [(P2P, 0, "p2p"), ...]
    rows: dict[str, np.dtype]                      # e.g. TRAFFIC -> packed little-endian dtype


def parse_layout(text: str) -> Layout:
    """Parse the declaration (the macro forms documented at the top of ``rmrec_layout.h``)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S).replace("\\\n", " ")
    numbers: dict[str, int] = {}
    lists: dict[str, list[tuple[str, int, str]]] = {}
    rows: dict[str, np.dtype] = {}
    for line in text.splitlines():
        m = re.match(r"\s*#define\s+RMREC_ROW_(\w+)\(F,\s*A\)\s+(.*)$", line)
        if m:
            fields = []
            for kind, ctype, name, count in re.findall(r"([FA])\((\w+),\s*(\w+)(?:,\s*(\d+))?\)", m.group(2)):
                if ctype not in _CTYPES:
                    raise RankmapError(f"rmrec_layout.h: row {m.group(1)}: unknown type {ctype}")
                if kind == "F":
                    fields.append((name, _CTYPES[ctype]))
                elif ctype == "u8":
                    fields.append((name, f"V{int(count)}"))   # raw bytes: padding, magic, text
                else:
                    fields.append((name, _CTYPES[ctype], (int(count),)))
            rows[m.group(1)] = np.dtype(fields)
            continue
        m = re.match(r"\s*#define\s+RMREC_(\w+)\(X\)\s+(.*)$", line)
        if m:
            lists[m.group(1)] = [(n, int(v, 0), s) for n, v, s in
                                 re.findall(r'X\((\w+),\s*(\w+),\s*"([^"]*)"\)', m.group(2))]
            continue
        m = re.match(r"\s*#define\s+RMREC_(\w+)\s+(0[xX][0-9a-fA-F]+|\d+)\s*$", line)
        if m:
            numbers[m.group(1)] = int(m.group(2), 0)
    return Layout(numbers, lists, rows)


@lru_cache(maxsize=None)
def layout() -> Layout:
    """The layout of this installation's writer (``native/common/rmrec_layout.h``)."""
    path = native_dir() / "common" / "rmrec_layout.h"
    try:
        return parse_layout(path.read_text())
    except OSError as e:
        raise RankmapError(f"cannot read the record layout {path}: {e.strerror}") from None


def _codes(name: str) -> tuple[str, ...]:
    """A code list as a tuple indexed by code value (gaps named ``<list>#<n>``)."""
    entries = layout().lists[name]
    out = [f"{name.lower()}#{i}" for i in range(max(v for _, v, _ in entries) + 1)]
    for _, v, s in entries:
        out[v] = s
    return tuple(out)


_L = layout()
MAGIC = b"RMREC\r\n\x1a"
BLOCK_MAGIC = b"RMBK"
VERSION = _L.numbers["VERSION"]
HEADER_SIZE = _L.numbers["HEADER_SIZE"]
BLOCK_HDR = _L.numbers["BLOCK_HDR_SIZE"]
MAX_BLOCK = _L.numbers["BLOCK_LIMIT"]
HIST_BINS = _L.numbers["HIST_BINS"]

CLASSES = _codes("CLASSES")
MEMS = _codes("MEMS")
DIRECTIONS = _codes("DIRECTIONS")
SOURCES = _codes("SOURCES")
#: CUDA activity (source cuda): what a copy moved, and the CUPTI memory kinds of its two ends
COPY_KINDS = _codes("COPY_KINDS")
CUDA_MEMS = _codes("CUDA_MEMS")
#: MPI: where a traffic row's peer attribution comes from; MPI_T performance variable classes
ORIGINS = _codes("ORIGINS")
PVAR_CLASSES = _codes("PVAR_CLASSES")

#: block type number by name (``BLOCK_TYPES["TRAFFIC"] == 2``)
BLOCK_TYPES: dict[str, int] = {n: v for n, v, _ in _L.lists["BLOCKS"]}
BT_STRINGS, BT_TRAFFIC, BT_HIST, BT_OPTIME, BT_TIMELINE, BT_COMM, BT_META, BT_FLUSH = (
    BLOCK_TYPES[n] for n in ("STRINGS", "TRAFFIC", "HIST", "OPTIME", "TIMELINE", "COMM", "META", "FLUSH"))
BT_COLLFACTS, BT_PVARS = BLOCK_TYPES["COLLFACTS"], BLOCK_TYPES["PVARS"]
BT_CUDA_COPY, BT_CUDA_KERNEL = BLOCK_TYPES["CUDA_COPY"], BLOCK_TYPES["CUDA_KERNEL"]

_HEADER = _L.rows["HEADER"]
_BLOCK = _L.rows["BLOCK"]
_FLUSH = _L.rows["FLUSH"]
_STRING = _L.rows["STRING_ENTRY"]
_META = _L.rows["META_ENTRY"]
_COMM = _L.rows["COMM_ENTRY"]
_KERNEL = _L.rows["CUDA_KERNEL_ENTRY"]
_FACT_SIG = _L.rows["COLLFACT_SIG"]
_FACT_CALLS = _L.rows["COLLFACT_CALLS"]
_PVAR_DEF = _L.rows["PVAR_DEF"]
_PVAR_SAMPLE = _L.rows["PVAR_SAMPLE"]
#: dtype of the rows of every fixed-size block type, by type number (a BLOCK with a ROW list)
ROW_TYPES: dict[int, np.dtype] = {v: _L.rows[n] for n, v in BLOCK_TYPES.items()
                                  if n in _L.rows and n != "FLUSH"}
_CRC_AT = _HEADER.fields["crc"][1]
#: the largest world a header may name: a larger one is damage (or a hostile file), not a job
MAX_WORLD_SIZE = 1 << 24
#: counters are int64 where they are stored and summed: a row or a sum past this is out of range
INT64_MAX = 2**63 - 1


# ------------------------------------------------------------------------------ what a file holds
class TrafficRow(NamedTuple):
    """One traffic row: ``label`` says where the peer attribution comes from -- ``call`` (counted
    by the hook at the call), ``library`` (the MPI library's own accounting), ``mirror`` (the
    library's algorithm choice followed), ``model`` (a fixed algorithm; also every collective row
    of files written before rows carried their origin)."""

    peer: int
    klass: str
    operation: str
    mem: str
    direction: str
    bytes: int
    messages: int
    label: str


@dataclass(frozen=True)
class CollFact:
    """One collective signature a rank recorded (COLLFACTS): the arguments the MPI library decides
    with. Counts are elements, ``ssize``/``rsize`` bytes per element, ``vec`` per-rank bytes of the
    v/w collectives; ``comm`` names a communicator of the record's COMM blocks."""

    sig: int
    operation: str
    comm: int
    size: int
    rank: int
    root: int
    scount: int
    ssize: int
    rcount: int
    rsize: int
    flags: int
    mem: str
    vec: tuple[int, ...] = ()


@dataclass(frozen=True)
class PvarDef:
    """An MPI_T performance variable the rank sampled: its class (:data:`PVAR_CLASSES`), value type
    (``u64``, ``i64``, ``f64``), bound to a communicator (MPI_COMM_WORLD) or not, values per sample."""

    id: int
    name: str
    cls: str
    vtype: str
    bound: bool
    count: int


_VTYPES = ("u64", "i64", "f64")
_VDTYPES = {0: "<u8", 1: "<i8", 2: "<f8"}


@dataclass
class Communicator:
    """A communicator seen by the rank: id (source-specific), name, members' world ranks."""

    id: int
    name: str
    members: list[int]


@dataclass
class RankRecord:
    """What one rank recorded from one source: the sums over a run of intact blocks.

    From :func:`read`, the whole file (totals); from :meth:`RecordReader.poll`, only the blocks
    that poll parsed (a delta: add it to what came before).

    traffic rows are :class:`TrafficRow` ``(peer, klass, operation, mem, direction, bytes, messages,
    label)`` with peer a world rank, klass in :data:`CLASSES`, mem in :data:`MEMS`, direction in
    :data:`DIRECTIONS`, label in :data:`ORIGINS`.
    ``coll_facts`` are the collective signatures known so far (every poll carries all of them) and
    ``coll_calls`` ``(signature, timeline bucket, calls)`` the calls counted in these blocks;
    ``pvar_defs`` the MPI_T performance variables known so far and ``pvar_samples``
    ``(variable id, ns since the rank's start, values)`` the samples in these blocks.
    ``histogram[op][k]`` counts calls whose payload fell in bin k (0: 0 bytes; k >= 1:
    2**(k-1) <= bytes < 2**k).  ``op_time[op] = (calls, ns)``; ``payload[op]`` the logical bytes.
    ``timeline`` rows are ``(bucket, peer, klass, bytes_sent)``, bucket = elapsed // bucket_ns.
    ``rows`` holds the raw rows of fixed-size block types this module does not sum itself, by
    type number (block types added to the layout later arrive here without reader changes).

    CUDA activity (source ``cuda``): ``cuda_copies`` rows ``(kind, src_mem, dst_mem, src_dev, dst_dev,
    count, bytes, ns)`` summed over time (kind in :data:`COPY_KINDS`, mems in :data:`CUDA_MEMS`,
    devices CUDA ordinals of the process or -1 for host memory); ``cuda_kernels`` rows ``(device,
    name, count, ns)``; ``cuda_timeline`` rows ``(bucket, what, count, bytes, ns)`` with what a copy
    kind or ``kernel`` (kernels by the bucket of their start; bytes 0).
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
    traffic: list[TrafficRow] = field(default_factory=list)
    histogram: dict[str, list[int]] = field(default_factory=dict)
    op_time: dict[str, tuple[int, int]] = field(default_factory=dict)
    payload: dict[str, int] = field(default_factory=dict)
    timeline: list[tuple[int, int, str, int]] = field(default_factory=list)
    communicators: list[Communicator] = field(default_factory=list)
    cuda_copies: list[tuple[str, str, str, int, int, int, int, int]] = field(default_factory=list)
    cuda_kernels: list[tuple[int, str, int, int]] = field(default_factory=list)
    cuda_timeline: list[tuple[int, str, int, int, int]] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    blocks: int = 0
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    coll_facts: list[CollFact] = field(default_factory=list)
    coll_calls: list[tuple[int, int, int]] = field(default_factory=list)
    pvar_defs: dict[int, PvarDef] = field(default_factory=dict)
    pvar_samples: list[tuple[int, int, tuple]] = field(default_factory=list)

    @property
    def bytes_sent(self) -> int:
        return sum(r[5] for r in self.traffic if r[4] == "send")

    def empty(self) -> bool:
        """Nothing to store: no counted rows, names, communicators or flushes."""
        return not (self.traffic or self.histogram or self.op_time or self.timeline or self.communicators
                    or self.meta or self.flushes or self.rows or self.cuda_copies or self.cuda_kernels
                    or self.coll_calls or self.pvar_samples)


@dataclass(frozen=True)
class Header:
    version: int
    source: str
    world_rank: int
    world_size: int
    pid: int
    start_ns: int
    bucket_ns: int
    host: str


def _parse_header(path: Path, data: bytes) -> Header:
    if len(data) < 8 or data[:8] != MAGIC:
        raise RankmapError(f"{path}: not a rankmap record file (bad magic at offset 0)")
    if len(data) < HEADER_SIZE:
        raise RankmapError(f"{path}: truncated header at offset {len(data)} (need {HEADER_SIZE} bytes)")
    h = np.frombuffer(data, dtype=_HEADER, count=1)[0]
    if int(h["version"]) != VERSION:
        raise RankmapError(f"{path}: unsupported record format version {int(h['version'])} at offset "
                           f"{_HEADER.fields['version'][1]} (this rankmap reads version {VERSION})")
    if int(h["header_size"]) != HEADER_SIZE:
        raise RankmapError(f"{path}: bad header size {int(h['header_size'])} at offset "
                           f"{_HEADER.fields['header_size'][1]}")
    if zlib.crc32(data[:_CRC_AT]) != int(h["crc"]):
        raise RankmapError(f"{path}: header checksum mismatch at offset {_CRC_AT}")
    src = int(h["source"])
    if src >= len(SOURCES) or "#" in SOURCES[src]:
        raise RankmapError(f"{path}: unknown source kind {src} at offset {_HEADER.fields['source'][1]}")
    rank, size = int(h["world_rank"]), int(h["world_size"])
    if not 1 <= size <= MAX_WORLD_SIZE:
        raise RankmapError(f"{path}: world size {size} at offset {_HEADER.fields['world_size'][1]} is out of range "
                           f"(1 to {MAX_WORLD_SIZE})")
    if not 0 <= rank < size:
        raise RankmapError(f"{path}: world rank {rank} at offset {_HEADER.fields['world_rank'][1]} is outside "
                           f"its world of {size}")
    host = bytes(h["host"]).split(b"\0", 1)[0].decode("utf-8", "replace")
    return Header(VERSION, SOURCES[src], int(h["world_rank"]), int(h["world_size"]), int(h["pid"]),
                  int(h["start_ns"]), int(h["bucket_ns"]), host)


def _block_ok(data: bytes | memoryview, off: int) -> tuple[str | None, int, int]:
    """Check the block at ``off``: returns (problem or None, type, payload length)."""
    if len(data) - off < BLOCK_HDR:
        return "truncated block header", 0, 0
    if bytes(data[off:off + 4]) != BLOCK_MAGIC:
        return "corrupt block (bad block magic)", 0, 0
    b = np.frombuffer(data, dtype=_BLOCK, count=1, offset=off)[0]
    btype, length, crc = int(b["type"]), int(b["length"]), int(b["crc"])
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


_STRUCT_CODES = {"i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I", "i8": "q", "u8": "Q"}


@lru_cache(maxsize=None)
def _head_struct(dt: np.dtype) -> tuple[struct.Struct, tuple[str, ...]]:
    """The entry head ``dt`` (little-endian integer fields) as a :class:`struct.Struct` and its
    field names: a rank's first flush names hundreds of settings, one small head each, and
    unpacking them with numpy one at a time costs more than the rest of the poll."""
    fmt, at, names = "<", 0, []
    for n in sorted(dt.names, key=lambda n: dt.fields[n][1]):
        ft, off = dt.fields[n][:2]
        if ft.kind == "V":                  # padding: skipped
            continue
        fmt += "x" * (off - at) + _STRUCT_CODES[f"{ft.kind}{ft.itemsize}"]
        names.append(n)
        at = off + ft.itemsize
    fmt += "x" * (dt.itemsize - at)
    return struct.Struct(fmt), tuple(names)


def _head(dt: np.dtype, payload: memoryview, p: int = 0) -> dict[str, int]:
    """One head of type ``dt`` at byte ``p`` of ``payload``, as a dict of its fields."""
    st, names = _head_struct(dt)
    return dict(zip(names, st.unpack_from(payload, p)))


def _entries(payload: memoryview, dt: np.dtype, tail: Callable[[dict], int]) -> Iterator[tuple[dict, memoryview]]:
    """The entries of a variable-size block: a head of type ``dt`` (as a dict of its fields), then
    ``tail(head)`` bytes."""
    st, names = _head_struct(dt)
    p = 0
    while p + st.size <= len(payload):
        e = dict(zip(names, st.unpack_from(payload, p)))
        p += st.size
        n = tail(e)
        yield e, payload[p:p + n]
        p += n


#: roots of a collective that are no rank: MPI_ROOT and MPI_PROC_NULL of intercommunicators (either MPI)
_SPECIAL_ROOTS = range(-4, 0)


def _fact_in_range(e: dict[str, int], vec: tuple[int, ...], world: int) -> bool:
    """Whether a collective signature can be a real call of a rank of a world of ``world`` ranks: a
    communicator no larger than the world, a rank and root inside it, counts whose bytes fit int64
    (the pairs derived from them are bytes: a hostile count must not make them pass it, or make the
    derivation walk 2**31 ranks)."""
    size, rank, root = e["size"], e["rank"], e["root"]
    if not (1 <= size <= world and 0 <= rank < size and (root < size and (root >= 0 or root in _SPECIAL_ROOTS))):
        return False
    for count, width in ((e["scount"], e["ssize"]), (e["rcount"], e["rsize"])):
        if count < 0 or width < 0 or count * width * size > INT64_MAX:
            return False
    # a v-collective's vector: a value per rank, alltoallv/w's two (bytes to each peer, then from each)
    return len(vec) <= 2 * size and all(0 <= v <= INT64_MAX // max(size, 1) for v in vec)


def _text(b: memoryview) -> str:
    return bytes(b).decode("utf-8", "replace")


def _code(names: tuple[str, ...], i: int, what: str) -> str:
    return names[i] if 0 <= i < len(names) else f"{what}#{i}"


@lru_cache(maxsize=None)
def _code_table(names: tuple[str, ...]) -> np.ndarray:
    """``names`` and a last slot for unknown codes, as the object array :func:`_codes_of` indexes
    (made once per code list: a live ingest names the codes of every file at every poll)."""
    return np.array(list(names) + [None], dtype=object)


def _codes_of(names: tuple[str, ...], values: np.ndarray, what: str) -> list[str]:
    """Names of many codes at once (a numpy lookup; unknown codes named ``<what>#<n>``); a few codes,
    what a streaming poll mostly has, are looked up one by one (numpy's set-up costs more)."""
    if len(values) <= 64:
        n = len(names)
        return [names[v] if 0 <= v < n else f"{what}#{v}" for v in values.tolist()]
    table = _code_table(names)
    idx = np.where((values >= 0) & (values < len(names)), values, len(names))
    out = table[idx]
    for i in np.flatnonzero(idx == len(names)):
        out[i] = f"{what}#{int(values[i])}"
    return out.tolist()


def _sum_rows(t: np.ndarray, keys: list[str], values: list[str],
              over: list[int] | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Group the rows of ``t`` by its ``keys`` columns and sum its ``values`` columns.

    Sort and reduce in uint64 (exact: float weights would round byte counts above 2**53). A few rows,
    what a streaming poll mostly has, are summed in Python: numpy's set-up per call costs more.
    A group whose sum passes int64 (only a hostile or damaged file gets there) is left out and
    counted in ``over``."""
    if len(t) <= 64:
        return _sum_few_rows(t, keys, values, over)
    order = np.lexsort([t[c] for c in reversed(keys)])
    s = t[order]
    change = np.zeros(len(s), dtype=bool)
    change[0] = True
    for c in keys:
        change[1:] |= s[c][1:] != s[c][:-1]
    starts = np.flatnonzero(change)
    keys_out = [s[c][starts].astype(np.int64) for c in keys]
    sums = []
    near = np.zeros(len(starts), dtype=bool)
    for v in values:
        col = s[v].astype(np.uint64)
        sums.append(np.add.reduceat(col, starts))
        # uint64 wraps past 2**64: a float sum says which groups come near int64's end, and those are
        # summed exactly (rows are each below 2**63, so only such groups can wrap)
        near |= np.add.reduceat(col.astype(np.float64), starts) >= 2.0**62
    if near.any():
        ends = list(starts[1:]) + [len(s)]
        exact = [[int(sum(s[v][a:b].tolist())) for v in values] for a, b in zip(starts, ends)]
        keep = np.array([max(e) <= INT64_MAX for e in exact])
        if over is not None and not keep.all():
            over.append(int((~keep).sum()))
        keys_out = [k[keep] for k in keys_out]
        sums = [np.array([e[j] for e, k in zip(exact, keep) if k], dtype=np.uint64) for j in range(len(values))]
    return keys_out, sums


def _sum_few_rows(t: np.ndarray, keys: list[str], values: list[str],
                  over: list[int] | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """:func:`_sum_rows` of a small table, the same result (sorted by the keys' values as stored,
    keys as int64, sums in uint64)."""
    names = t.dtype.names
    ki, vi = [names.index(k) for k in keys], [names.index(v) for v in values]
    acc: dict[tuple, list[int]] = {}
    for row in t.tolist():
        k = tuple(row[i] for i in ki)
        a = acc.get(k)
        if a is None:
            acc[k] = [row[i] for i in vi]
        else:
            for j, i in enumerate(vi):
                a[j] += row[i]
    ks = sorted(k for k, v in acc.items() if max(v, default=0) <= INT64_MAX)   # a sum past int64: dropped
    if over is not None and len(ks) < len(acc):
        over.append(len(acc) - len(ks))
    return ([np.array([k[j] for k in ks], dtype=t.dtype[c]).astype(np.int64) for j, c in enumerate(keys)],
            [np.array([acc[k][j] for k in ks], dtype=np.uint64) for j in range(len(values))])


# ------------------------------------------------------------------------------ the reader
class RecordReader:
    """Follows one record file: every :meth:`poll` parses the blocks appended since the last one.

    The reader keeps the byte offset of the first block it has not used, the operation names
    (ids are per file; a STRINGS block names them in the flush that first uses them) and the
    first damage it met. :meth:`state` / ``RecordReader(path, state=...)`` carry these over to
    another process, so an ingest interrupted half-way resumes exactly where it stopped.
    """

    def __init__(self, path: str | Path, state: dict[str, Any] | None = None, *, peer_timeline: bool = True):
        """``peer_timeline=False``: timeline rows summed over peers, ``(bucket, -1, klass, bytes)``
        (what a store that keeps the bytes each rank sends over time needs, at a fraction of the rows)."""
        self.path = Path(path)
        self.peer_timeline = peer_timeline
        self.header: Header | None = None
        self.offset = HEADER_SIZE
        self.strings: dict[int, str] = {}
        self.blocks = 0
        self.flushes = 0
        self.elapsed_ns = 0
        self.finalized = False
        self.bad_at: int | None = None
        self.bad_why = ""
        self.used_before = 0
        self.size = 0
        self.pending = False
        self.facts: dict[int, CollFact] = {}
        self.pvars: dict[int, PvarDef] = {}
        self._names: dict[str, list] | None = None     # strings, facts, pvars as state() writes them
        if state:
            self.offset = int(state["offset"])
            self.strings = {int(k): v for k, v in state.get("strings", {}).items()}
            self.blocks, self.flushes = int(state.get("blocks", 0)), int(state.get("flushes", 0))
            self.elapsed_ns, self.finalized = int(state.get("elapsed_ns", 0)), bool(state.get("finalized"))
            self.bad_at, self.bad_why = state.get("bad_at"), state.get("bad_why", "")
            self.used_before = int(state.get("used_before", 0))
            self.facts = {int(f["sig"]): CollFact(**{**f, "vec": tuple(f["vec"])}) for f in state.get("facts", [])}
            self.pvars = {int(v["id"]): PvarDef(**v) for v in state.get("pvars", [])}

    def state(self) -> dict[str, Any]:
        """What a later reader of the same file needs to go on from here (JSON-able).

        The names, facts and variables part is kept until a block adds to them (a live ingest asks
        for the state of every file at every poll, and they rarely change after the first flushes);
        the caller must not modify what it gets."""
        if self._names is None:
            self._names = {"strings": {str(k): v for k, v in self.strings.items()},
                           "facts": [{**f.__dict__, "vec": list(f.vec)} for f in self.facts.values()],
                           "pvars": [dict(v.__dict__) for v in self.pvars.values()]}
        n = self._names
        return {"offset": self.offset, "strings": n["strings"],
                "blocks": self.blocks, "flushes": self.flushes, "elapsed_ns": self.elapsed_ns,
                "finalized": self.finalized, "bad_at": self.bad_at, "bad_why": self.bad_why,
                "used_before": self.used_before, "facts": n["facts"], "pvars": n["pvars"]}

    def _record(self, h: Header) -> RankRecord:
        return RankRecord(path=self.path, version=h.version, source=h.source, world_rank=h.world_rank,
                          world_size=h.world_size, host=h.host, pid=h.pid, start_ns=h.start_ns,
                          bucket_ns=h.bucket_ns)

    def _damage(self, off: int, why: str) -> None:
        if self.bad_at is None:
            self.bad_at, self.bad_why, self.used_before = off, why, self.blocks

    def problems(self, live: bool) -> list[str]:
        """The reader's findings so far: the first damaged block, and (unless ``live``) a missing end."""
        out = []
        if self.bad_at is not None:
            later = self.blocks - self.used_before
            msg = f"{self.path.name}: {self.bad_why} at offset {self.bad_at}; {self.used_before} earlier blocks used"
            if later:
                msg += f", {later} later blocks used"
            out.append(msg)
        if not self.finalized and not live:
            out.append(f"{self.path.name}: no finalize marker (the rank ended without a final flush); "
                       f"data up to {self.elapsed_ns / 1e9:.3f} s used")
        return out

    def poll(self, *, final: bool = False, max_bytes: int | None = None) -> RankRecord | None:
        """Parse the complete blocks appended since the last poll; their sums, or None before a header.

        While the rank may still write (``final=False``) an incomplete last block is a flush in
        progress: it is left for the next poll. With ``final`` it is damage, reported. A header
        not yet written raises only when ``final``. ``max_bytes`` bounds what one poll reads (call
        again while :attr:`pending` says more is there).
        """
        try:
            with self.path.open("rb") as f:
                if self.header is None:
                    head = f.read(HEADER_SIZE)
                    if len(head) < HEADER_SIZE and not final and MAGIC.startswith(head[:len(MAGIC)]):
                        return None                  # the writer has not finished its header yet
                    self.header = _parse_header(self.path, head)
                f.seek(self.offset)
                data = f.read(max(max_bytes, 2 * (MAX_BLOCK + BLOCK_HDR))) if max_bytes else f.read()
                self.size = f.seek(0, 2)
        except OSError as e:
            raise RankmapError(f"cannot read record file {self.path}: {e.strerror or e}") from None
        rec = self._record(self.header)
        parts: dict[int, list[np.ndarray]] = {}
        comms: dict[tuple[int, str], Communicator] = {}
        off, base = 0, self.offset
        more = max_bytes is not None and base + len(data) < self.size
        while off < len(data):
            why, btype, length = _block_ok(data, off)
            if why is not None:
                if why.startswith("truncated") and (more or not final):
                    break                            # the rest of this block comes later
                nxt = _resync(data, off)
                if nxt < 0 and not final and not more:
                    break                            # look again when more is written
                self._damage(base + off, why)
                if nxt < 0:                          # nothing intact in what was read
                    off = max(off + 1, len(data) - BLOCK_HDR) if more else len(data)
                    break
                off = nxt
                continue
            payload = memoryview(data)[off + BLOCK_HDR:off + BLOCK_HDR + length]
            self.blocks += 1
            rec.blocks += 1
            self._block(rec, btype, payload, base + off, parts, comms)
            off += BLOCK_HDR + length
        self.offset = base + off
        self.pending = self.offset < self.size
        rec.communicators = list(comms.values())
        rec.elapsed_ns, rec.finalized = self.elapsed_ns, self.finalized
        self._sum(rec, parts)
        rec.coll_facts = list(self.facts.values())
        rec.pvar_defs = dict(self.pvars)
        return rec

    def _block(self, rec: RankRecord, btype: int, payload: memoryview, at: int,
               parts: dict[int, list[np.ndarray]], comms: dict[tuple[int, str], Communicator]) -> None:
        length = len(payload)
        if btype in ROW_TYPES:
            dt = ROW_TYPES[btype]
            if length % dt.itemsize:
                rec.problems.append(f"{self.path.name}: block at offset {at} has {length} bytes, "
                                    f"not a multiple of {dt.itemsize}; ignored")
            else:
                parts.setdefault(btype, []).append(self._in_range(rec, np.frombuffer(payload, dtype=dt), at))
        elif btype == BT_STRINGS:
            for e, tail in _entries(payload, _STRING, lambda e: int(e["length"])):
                self.strings[int(e["id"])] = _text(tail)
                self._names = None
        elif btype == BT_META:
            for e, tail in _entries(payload, _META, lambda e: int(e["key_length"]) + int(e["value_length"])):
                kl = int(e["key_length"])
                rec.meta[_text(tail[:kl])] = _text(tail[kl:])
        elif btype == BT_COMM:
            for e, tail in _entries(payload, _COMM, lambda e: int(e["name_length"]) + 4 * int(e["size"])):
                nl = int(e["name_length"])
                if len(tail) < nl + 4 * int(e["size"]):
                    rec.problems.append(f"{self.path.name}: communicator entry in the block at offset {at} runs "
                                        f"past the block; the rest of the block ignored")
                    break
                name = _text(tail[:nl])
                members = np.frombuffer(tail, dtype="<i4", count=int(e["size"]), offset=nl).tolist()
                comms[(int(e["id"]), name)] = Communicator(int(e["id"]), name, members)
        elif btype == BT_CUDA_KERNEL:
            kernels = parts.setdefault(BT_CUDA_KERNEL, [])
            for e, tail in _entries(payload, _KERNEL, lambda e: int(e["name_length"])):
                if len(tail) < int(e["name_length"]):
                    rec.problems.append(f"{self.path.name}: kernel entry in the block at offset {at} runs past "
                                        f"the block; the rest of the block ignored")
                    break
                kernels.append((int(e["bucket"]), int(e["device"]), _text(tail), int(e["count"]), int(e["ns"])))
        elif btype == BT_COLLFACTS:
            self._collfacts(rec, payload, at)
        elif btype == BT_PVARS:
            self._pvars(rec, payload, at)
        elif btype == BT_FLUSH and length >= _FLUSH.itemsize:
            f = _head(_FLUSH, payload)
            self.flushes += 1
            rec.flushes += 1
            self.elapsed_ns = max(self.elapsed_ns, int(f["elapsed_ns"]))
            self.finalized = self.finalized or bool(f["final"])
        # unknown block types are skipped (forward compatible within a version)

    def _in_range(self, rec: RankRecord, rows: np.ndarray, at: int) -> np.ndarray:
        """The rows of one block whose counters fit int64 and whose peer is a rank of the file's world;
        the others are damage (a valid checksum does not make a peer of rank 930 million, or
        2**64 - 1 bytes, true), named once per block."""
        names = rows.dtype.names
        ok = None
        for n in names:
            ft = rows.dtype.fields[n][0]
            if ft.kind == "u" and ft.itemsize == 8:
                bad = rows[n] > INT64_MAX
            elif n == "peer":
                bad = (rows[n] < 0) | (rows[n] >= self.header.world_size)
            else:
                continue
            ok = ~bad if ok is None else ok & ~bad
        if ok is None or ok.all():
            return rows
        dropped = int((~ok).sum())
        rec.problems.append(f"{self.path.name}: block at offset {at}: {counted(dropped, 'row')} with a peer outside "
                            f"the world of {self.header.world_size} or a count out of range (past 2**63-1) ignored")
        return rows[ok]

    def _collfacts(self, rec: RankRecord, payload: memoryview, at: int) -> None:
        """Signatures (kind 1, then nvec x i64) and calls per bucket (kind 2), in any order."""
        p, calls, refused = 0, {}, 0
        while p < len(payload):
            kind = payload[p]
            if kind == 1 and p + _FACT_SIG.itemsize <= len(payload):
                e = _head(_FACT_SIG, payload, p)
                nvec = int(e["nvec"])
                p += _FACT_SIG.itemsize
                if p + 8 * nvec > len(payload):
                    break
                vec = tuple(np.frombuffer(payload, dtype="<i8", count=nvec, offset=p).tolist())
                p += 8 * nvec
                if not _fact_in_range(e, vec, self.header.world_size):
                    refused += 1
                    continue
                self._names = None
                self.facts[int(e["sig"])] = CollFact(
                    int(e["sig"]), self._opname(int(e["op"])), int(e["comm"]), int(e["size"]), int(e["rank"]),
                    int(e["root"]), int(e["scount"]), int(e["ssize"]), int(e["rcount"]), int(e["rsize"]),
                    int(e["flags"]), _code(MEMS, int(e["mem"]), "mem"), vec)
            elif kind == 2 and p + _FACT_CALLS.itemsize <= len(payload):
                e = _head(_FACT_CALLS, payload, p)
                key = (int(e["sig"]), int(e["bucket"]))
                p += _FACT_CALLS.itemsize
                if calls.get(key, 0) + int(e["calls"]) > INT64_MAX:
                    refused += 1
                    continue
                calls[key] = calls.get(key, 0) + int(e["calls"])
            else:
                break
        if p < len(payload):
            rec.problems.append(f"{self.path.name}: collective facts block at offset {at} ends in a broken "
                                f"entry at byte {p}; the entries before it used")
        if refused:
            rec.problems.append(f"{self.path.name}: collective facts block at offset {at}: {counted(refused, 'entry')} "
                                f"out of range (a communicator larger than the world of {self.header.world_size}, "
                                f"a rank outside it, or counts past 2**63-1) ignored")
        rec.coll_calls += [(s, b, n) for (s, b), n in calls.items()]

    def _pvars(self, rec: RankRecord, payload: memoryview, at: int) -> None:
        """Variables (kind 1, then the name) and samples (kind 2, then count x 8 bytes)."""
        p = 0
        while p < len(payload):
            kind = payload[p]
            if kind == 1 and p + _PVAR_DEF.itemsize <= len(payload):
                e = _head(_PVAR_DEF, payload, p)
                p += _PVAR_DEF.itemsize
                nl = int(e["name_length"])
                name = _text(payload[p:p + nl])
                p += nl
                self._names = None
                self.pvars[int(e["id"])] = PvarDef(int(e["id"]), name, _code(PVAR_CLASSES, int(e["cls"]), "class"),
                                                   _code(_VTYPES, int(e["vtype"]), "vtype"), bool(e["bound"]),
                                                   int(e["count"]))
            elif kind == 2 and p + _PVAR_SAMPLE.itemsize <= len(payload):
                e = _head(_PVAR_SAMPLE, payload, p)
                p += _PVAR_SAMPLE.itemsize
                n, vt = int(e["count"]), int(e["vtype"])
                if p + 8 * n > len(payload):
                    break
                vals = np.frombuffer(payload, dtype=_VDTYPES.get(vt, "<u8"), count=n, offset=p).tolist()
                p += 8 * n
                rec.pvar_samples.append((int(e["id"]), int(e["t_ns"]), tuple(vals)))
            else:
                break
        if p < len(payload):
            rec.problems.append(f"{self.path.name}: pvar block at offset {at} ends in a broken entry at "
                                f"byte {p}; the entries before it used")

    def _opname(self, i: int) -> str:
        return self.strings.get(int(i), f"op#{int(i)}")

    def _sum(self, rec: RankRecord, parts: dict[int, list[np.ndarray]]) -> None:
        kernels = parts.pop(BT_CUDA_KERNEL, [])
        over: list[int] = []
        tables = {t: np.concatenate(p) for t, p in parts.items()}
        t = tables.pop(BT_TRAFFIC, None)
        if t is not None and len(t):
            (peer, op, kl, mem, d, og), (by, ms) = _sum_rows(t, ["peer", "op", "klass", "mem", "dir", "origin"],
                                                             ["bytes", "msgs"], over)
            ops = {o: self._opname(o) for o in set(op.tolist())}
            labels = [_label(k, g) for k, g in zip(kl.tolist(), og.tolist())]
            rec.traffic = sorted(
                TrafficRow(*row) for row in zip(peer.tolist(), _codes_of(CLASSES, kl, "class"),
                                                [ops[o] for o in op.tolist()], _codes_of(MEMS, mem, "mem"),
                                                _codes_of(DIRECTIONS, d, "dir"), by.tolist(), ms.tolist(), labels))
        t = tables.pop(BT_OPTIME, None)
        if t is not None and len(t):
            (op,), (calls, ns, by) = _sum_rows(t, ["op"], ["calls", "ns", "bytes"], over)
            for o, c, n, b in zip(op.tolist(), calls.tolist(), ns.tolist(), by.tolist()):
                rec.op_time[self._opname(o)] = (c, n)
                rec.payload[self._opname(o)] = b
        t = tables.pop(BT_HIST, None)
        if t is not None and len(t):
            (op, b), (n,) = _sum_rows(t, ["op", "bin"], ["count"], over)
            for o, k, c in zip(op.tolist(), b.tolist(), n.tolist()):
                if k < HIST_BINS:
                    rec.histogram.setdefault(self._opname(o), [0] * HIST_BINS)[k] += c
        t = tables.pop(BT_TIMELINE, None)
        if t is not None and len(t):
            if self.peer_timeline:
                (b, peer, kl), (by,) = _sum_rows(t, ["bucket", "peer", "klass"], ["bytes"], over)
                peers = peer.tolist()
            else:
                (b, kl), (by,) = _sum_rows(t, ["bucket", "klass"], ["bytes"], over)
                peers = [-1] * len(b)
            rec.timeline = list(zip(b.tolist(), peers, _codes_of(CLASSES, kl, "class"), by.tolist()))
        _sum_cuda(rec, tables.pop(BT_CUDA_COPY, None), kernels, over)
        rec.rows = tables
        if over:
            rec.problems.append(f"{self.path.name}: {counted(sum(over), 'sum')} of the blocks up to offset "
                                f"{self.offset} out of range (past 2**63-1) left out")


def _sum_cuda(rec: RankRecord, copies: np.ndarray | None, kernels: list[tuple[int, int, str, int, int]],
              over: list[int] | None = None) -> None:
    """CUDA copies summed over time per kind and ends, kernels per device and name, and both per bucket."""
    tl: dict[tuple[int, str], list[int]] = {}
    if copies is not None and len(copies):
        (k, sm, dm, sd, dd), (c, by, ns) = _sum_rows(copies, ["kind", "src_mem", "dst_mem", "src_dev", "dst_dev"],
                                                     ["count", "bytes", "ns"], over)
        rec.cuda_copies = sorted(
            (_code(COPY_KINDS, a, "kind"), _code(CUDA_MEMS, b, "mem"), _code(CUDA_MEMS, m, "mem"), x, y, n, v, t)
            for a, b, m, x, y, n, v, t in zip(k.tolist(), sm.tolist(), dm.tolist(), sd.tolist(), dd.tolist(),
                                              c.tolist(), by.tolist(), ns.tolist()))
        timed = copies[copies["bucket"] >= 0]
        if len(timed):
            (b, k), (c, by, ns) = _sum_rows(timed, ["bucket", "kind"], ["count", "bytes", "ns"], over)
            for x, a, n, v, t in zip(b.tolist(), k.tolist(), c.tolist(), by.tolist(), ns.tolist()):
                tl[(x, _code(COPY_KINDS, a, "kind"))] = [n, v, t]
    per_name: dict[tuple[int, str], list[int]] = {}
    for bucket, dev, name, count, ns in kernels:
        a = per_name.setdefault((dev, name), [0, 0]) if bucket < 0 else tl.setdefault((bucket, "kernel"), [0, 0, 0])
        a[0] += count
        a[-1] += ns
    rec.cuda_kernels = sorted((d, n, c, ns) for (d, n), (c, ns) in per_name.items())
    rec.cuda_timeline = sorted((b, w, *v) for (b, w), v in tl.items())


_COLL = CLASSES.index("collective")


def _label(klass: int, origin: int) -> str:
    """A row's label: its origin, except that collective rows counted "at the call" are the model
    of files written before rows carried an origin."""
    if klass == _COLL and origin == 0:
        return "model"
    return _code(ORIGINS, origin, "origin")


def read(path: str | Path, live: bool = False) -> RankRecord:
    """Read and validate one whole record file: the sums of all its intact flushes.

    ``live=True`` reads a file that its rank may still be writing: a truncated last block (a flush
    in progress) and the missing finalize marker are then not reported as problems.
    """
    reader = RecordReader(path)
    rec = reader.poll(final=not live)
    if rec is None:                                  # live, and not even a header yet
        raise RankmapError(f"{reader.path}: truncated header at offset 0 (need {HEADER_SIZE} bytes)")
    rec.problems += reader.problems(live)
    return rec


def read_header(path: str | Path) -> Header:
    """Only the header of a record file (who wrote it, on which host): cheap enough to call on
    every file of a run before reading any of them."""
    path = Path(path)
    with open(path, "rb") as f:
        return _parse_header(path, f.read(HEADER_SIZE))


def read_dir(rundir: str | Path, source: str | None = None, live: bool = False) -> list[RankRecord]:
    """Read every ``rank-*.rmrec`` file in ``rundir`` (optionally of one source), by world rank."""
    rundir = Path(rundir)
    if not rundir.is_dir():
        raise RankmapError(f"run directory {rundir} does not exist")
    pattern = f"rank-*.{source}.rmrec" if source else "rank-*.rmrec"
    recs = [read(p, live=live) for p in sorted(rundir.glob(pattern))]
    recs.sort(key=lambda r: (r.source, r.world_rank))
    return recs


def _fold(records: list[RankRecord], what: str, world_size: int | None, cell) -> np.ndarray:
    """A rank x rank int64 matrix: each traffic row adds its bytes (or messages) at ``cell(rank, row)``."""
    n = world_size or max([r.world_size for r in records] + [0])
    m = np.zeros((n, n), dtype=np.int64)
    col = 5 if what == "bytes" else 6
    for r in records:
        for row in r.traffic:
            ij = cell(r.world_rank, row)
            if ij is not None and 0 <= ij[0] < n and 0 <= ij[1] < n:
                m[ij] += row[col]
    return m


def traffic_matrix(records: list[RankRecord], klass: str | None = None, operation: str | None = None,
                   what: str = "bytes", world_size: int | None = None) -> np.ndarray:
    """The traffic matrix T[src][dst] (int64) of bytes (or ``what="messages"``).

    Built from the sender's view: send rows of src with peer dst; for class ``rma`` a recv row
    (MPI_Get and the fetch part of Get_accumulate / Fetch_and_op / Compare_and_swap: data moves
    from the target to the origin) counts as T[target][origin].
    """
    def cell(rank: int, row: tuple) -> tuple[int, int] | None:
        peer, k, op, _mem, d = row[:5]
        if (klass and k != klass) or (operation and op != operation):
            return None
        return (rank, peer) if d == "send" else (peer, rank) if k == "rma" else None
    return _fold(records, what, world_size, cell)


def received_matrix(records: list[RankRecord], klass: str | None = None, operation: str | None = None,
                    what: str = "bytes", world_size: int | None = None) -> np.ndarray:
    """R[src][dst] from the receiver's view: recv rows of dst with peer src (not rma)."""
    def cell(rank: int, row: tuple) -> tuple[int, int] | None:
        peer, k, op, _mem, d = row[:5]
        if d != "recv" or k == "rma" or (klass and k != klass) or (operation and op != operation):
            return None
        return peer, rank
    return _fold(records, what, world_size, cell)
