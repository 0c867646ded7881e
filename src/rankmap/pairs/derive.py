"""Collective pair rows from the facts the MPI shim records: which source applies, and the rows.

:func:`derive` turns one rank's facts into send rows (the traffic matrix uses the sender's view)
and timeline rows; :func:`apply` adds them to a record; :func:`read_dir` reads a run directory
with them applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rankmap.errors import RankmapError
from rankmap.formats import record as records
from rankmap.formats.record import CollFact, RankRecord, TrafficRow
from rankmap.pairs import model
from rankmap.pairs.call import FLAG_COMMUTE, FLAG_COMMUTE_KNOWN, FLAG_INPLACE, FLAG_LIBRARY, Call, kind_of
from rankmap.pairs.library import Library

LABELS = ("library", "mirror", "model")


def call_of(f: CollFact) -> Call | None:
    """The :class:`Call` of a recorded signature (None for what is not a collective of :data:`KINDS`)."""
    kind, form = kind_of(f.operation)
    if kind is None:
        return None
    commute = bool(f.flags & FLAG_COMMUTE) if f.flags & FLAG_COMMUTE_KNOWN else None
    return Call(kind, form, f.size, f.rank, f.root, f.scount, f.ssize, f.rcount, f.rsize,
                bool(f.flags & FLAG_INPLACE), commute, tuple(f.vec))


@dataclass(frozen=True)
class DerivedRow:
    """A send row derived from facts: to world rank ``peer``, summed over the calls."""

    peer: int
    operation: str
    mem: str
    bytes: int
    messages: int
    label: str


def derive(facts: list[CollFact], calls: list[tuple[int, int, int]], meta: dict[str, str],
           members: dict[int, list[int]], node_of: Callable[[int], int] | None = None,
           source: str | None = None) -> tuple[list[DerivedRow], list[tuple[int, int, int]], dict[str, int]]:
    """Send rows and timeline rows of one rank's collective facts.

    ``calls``: (signature, timeline bucket, calls); ``members``: communicator id -> world ranks (the
    record's COMM blocks); ``node_of``: world rank -> node index (MPICH's node-aware compositions;
    None: one node); ``source``: see :func:`apply`. Returns (rows, timeline rows ``(bucket, world
    peer, bytes)``, calls per label).
    """
    lib = Library(meta, source)
    by_sig = {f.sig: f for f in facts}
    totals: dict[tuple[int, str, str, str], list[int]] = {}
    timeline: dict[tuple[int, int], int] = {}
    counted = {lab: 0 for lab in LABELS}
    cache: dict[int, tuple[list[tuple[int, int]], str] | None] = {}
    for sig, bucket, n in calls:
        f = by_sig.get(sig)
        if f is None or n <= 0:
            continue
        if f.flags & FLAG_LIBRARY and source is None:
            counted["library"] += n
            continue
        if sig not in cache:
            cache[sig] = _rows_of(f, lib, members, node_of)
        got = cache[sig]
        if got is None:
            continue
        msgs, label = got
        counted[label] += n
        for peer, nbytes in msgs:
            key = (peer, f.operation, f.mem, label)
            t = totals.setdefault(key, [0, 0])
            t[0] += nbytes * n
            t[1] += n
            if nbytes:
                timeline[(bucket, peer)] = timeline.get((bucket, peer), 0) + nbytes * n
    rows = [DerivedRow(peer, op, mem, b, m, label) for (peer, op, mem, label), (b, m) in sorted(totals.items())]
    tl = [(b, peer, v) for (b, peer), v in sorted(timeline.items())]
    return rows, tl, counted


def _rows_of(f: CollFact, lib: Library, members: dict[int, list[int]], node_of: Callable[[int], int] | None
             ) -> tuple[list[tuple[int, int]], str] | None:
    """(world peer, bytes) per message of one call of ``f``, and the label."""
    c = call_of(f)
    world = members.get(f.comm)
    if c is None or c.p < 2 or world is None or len(world) != c.p:
        return None
    nodes = tuple(node_of(w) for w in world) if node_of else None
    got = lib.mirror.messages(c, nodes) if lib.mirror else None
    if got is not None:
        msgs, label = got.msgs, "model" if got.modeled else "mirror"
    else:
        msgs, label = model.messages(c), "model"
    return [(world[m.dst], m.nbytes) for m in msgs if 0 <= m.dst < len(world)], label


def apply(rec: RankRecord, node_of: Callable[[int], int] | None = None, source: str | None = None
          ) -> dict[str, int]:
    """Add the collective rows derived from ``rec``'s facts to its traffic and timeline.

    ``node_of``: world rank -> node index (from the hosts of the job's ranks); None: one node.
    ``source``: None takes what the record holds (the library's rows where it gave them, else the
    best of mirror and model, as RANKMAP_COLLECTIVES asked); ``mirror`` or ``model`` derives every
    call that way instead and drops the library's collective rows -- to compare the sources on
    one run. Returns the calls per label (``library`` counts the calls whose rows the library gave).
    """
    if source is not None:
        if source not in ("mirror", "model"):
            raise ValueError(f"unknown collective source {source!r} (mirror or model)")
        rec.traffic = [t for t in rec.traffic if not (t.klass == "collective" and t.label == "library")]
        if any(f.flags & FLAG_LIBRARY for f in rec.coll_facts):   # the library counted the collectives
            rec.timeline = [t for t in rec.timeline if t[2] != "collective"]
    if not rec.coll_calls:
        return {lab: 0 for lab in LABELS}
    members = {c.id: list(c.members) for c in rec.communicators}
    members.setdefault(0, list(range(rec.world_size)))
    rows, tl, counted = derive(rec.coll_facts, rec.coll_calls, rec.meta, members, node_of, source)
    rec.traffic = sorted(rec.traffic + [TrafficRow(r.peer, "collective", r.operation, r.mem, "send", r.bytes,
                                                   r.messages, r.label) for r in rows])
    merged: dict[tuple[int, int, str], int] = {}
    for b, peer, klass, v in rec.timeline:
        merged[(b, peer, klass)] = merged.get((b, peer, klass), 0) + v
    for b, peer, v in tl:
        merged[(b, peer, "collective")] = merged.get((b, peer, "collective"), 0) + v
    rec.timeline = [(b, p, k, v) for (b, p, k), v in sorted(merged.items())]
    rec.coll_calls = []                      # applied: a second apply adds nothing
    return counted


def node_index(hosts: dict[int, str]) -> Callable[[int], int]:
    """world rank -> node index, from the host name each rank's record names."""
    ids: dict[str, int] = {}
    for r in sorted(hosts):
        ids.setdefault(hosts[r], len(ids))
    return lambda w: ids.get(hosts.get(w, ""), 0)


def run_hosts(rundir: str | Path) -> dict[int, str]:
    """world rank -> host of every MPI record file in ``rundir`` (headers only; files whose header
    is not written yet are left out)."""
    hosts: dict[int, str] = {}
    for p in sorted(Path(rundir).glob("rank-*.mpi.rmrec")):
        try:
            h = records.read_header(p)
        except (OSError, RankmapError):
            continue
        hosts[h.world_rank] = h.host
    return hosts


def read_dir(rundir: str | Path, live: bool = False) -> list[RankRecord]:
    """The MPI records of a run directory with their collective rows applied: what a reader that
    wants pairs (not facts) reads."""
    recs = records.read_dir(rundir, source="mpi", live=live)
    node_of = node_index({r.world_rank: r.host for r in recs})
    for r in recs:
        apply(r, node_of)
    return recs
