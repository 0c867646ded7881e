"""NCCL captures: global ranks, communicators, and the ONE model of collective pair traffic.

The NCCL profiler plugin (``native/nccl``) records facts only: per GPU of each process one record
file ``rank-<r>.nccl.rmrec`` holding every operation's calls and payload, and per communicator its
hash, comm rank, size, GPU and an **operation table** (meta ``nccl.ops.<hash>.<comm rank>``: one row
per distinct function, bytes per call, algorithm, protocol, channels, root or peer, with calls,
calls captured into CUDA graphs and host-side time). This module turns those facts into pair
traffic, at ingest:

1. **Global ranks** (:func:`global_ranks`): the launcher's ranks when every file has one and no
   process drives several GPUs; otherwise the comm ranks of the largest communicator, joined
   across all files by its hash (files outside it are numbered after it).
2. **Communicators** are joined the same way: (hash, comm rank) -> file -> global rank. Nothing is
   dropped for want of members at run time; bytes a file sent towards a comm rank that no file
   recorded are reported (``unattributed``), not silently lost.
3. **The model** (:func:`sends`), per operation-table row, with NCCL's rings and trees when its
   INFO log was captured (:mod:`rankmap.pairs.nccl_graph`), split evenly over the channels the
   operation ran on. Every pair row says where it comes from (``label``):

   * ``library`` -- exact from NCCL's own task facts: Send/Recv (peer and bytes), AlltoAll (count
     per peer), Gather/Scatter (to/from the root);
   * ``mirror`` -- NCCL's decision followed: RING collectives along NCCL's printed rings (AllReduce
     ``2(n-1)/n x S`` to the successor, AllGather/ReduceScatter ``(n-1) x S``, Broadcast/Reduce
     ``S`` along the chain from / to the root), TREE AllReduce along NCCL's printed trees (``S`` to
     the parent and to each child);
   * ``model`` -- no graph to follow: rings and chains in rank order (no log), and the algorithms
     that have no pair structure, NVLS/NVLS_TREE (through the NVSwitch), COLLNET_* (through the
     network), PAT (log-step exchanges) and copy-engine (CE) collectives: the ring volume (CE:
     the payload, written to every peer directly) spread evenly over the other members.

``wire=True`` (:func:`pair_matrix`) adds NCCL's protocol overhead, i.e. the bytes that cross the
link: LL 8 flag bytes per 8 data bytes (x2), LL128 8 per 128-byte line (x128/120), SIMPLE none;
p2p uses LL up to ``channels x 16 KiB`` (NCCL_P2P_LL_THRESHOLD).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from rankmap.pairs import nccl_graph
from rankmap.formats import record as rec_mod
from rankmap.formats.record import TrafficRow
from rankmap.errors import RankmapError, counted

WIRE_FACTOR = {"LL": 2.0, "LL128": 128.0 / 120.0, "SIMPLE": 1.0}
P2P_LL_THRESHOLD = 16384
SPREAD_ALGOS = {"NVLS", "NVLS_TREE", "COLLNET_DIRECT", "COLLNET_CHAIN", "PAT", "CE"}
OPS = {"AllReduce": "ncclAllReduce", "AllGather": "ncclAllGather", "ReduceScatter": "ncclReduceScatter",
       "Broadcast": "ncclBroadcast", "Reduce": "ncclReduce", "Send": "ncclSend", "Recv": "ncclRecv",
       "AlltoAll": "ncclAlltoAll", "Gather": "ncclGather", "Scatter": "ncclScatter",
       "SendRecv": "ncclSendRecv", "Other": "ncclOther"}
LABELS = ("library", "mirror", "model")
DEBUG_LOG_GLOB = "nccl-debug*.log"


@dataclass(frozen=True)
class OpRow:
    """One row of a communicator's operation table, as one comm rank saw it."""

    func: str
    bytes: int            # payload of one call: count x datatype size
    algo: str             # "RING", "TREE", ..., "CE" ("-" for p2p)
    proto: str            # "LL", "LL128", "SIMPLE" ("-" for p2p and CE)
    channels: int
    root_or_peer: int     # collectives: root comm rank (-1 none); p2p: peer comm rank
    calls: int
    time_ns: int
    first_ns: int
    last_ns: int
    captured: int = 0     # calls captured into a CUDA graph (NCCL reports them once, at capture)


@dataclass
class NcclComm:
    """One NCCL communicator of the job, joined over the files that recorded a rank of it."""

    hash: int
    name: str = ""
    nranks: int = 0
    files: dict[int, int] = field(default_factory=dict)       # comm rank -> index in NcclProfile.records
    rows: dict[int, list[OpRow]] = field(default_factory=dict)  # comm rank -> its table
    graph: nccl_graph.CommGraph | None = None

    @property
    def resolved(self) -> bool:
        """True when every comm rank was recorded by some file."""
        return self.nranks > 0 and all(r in self.files for r in range(self.nranks))


@dataclass
class NcclProfile:
    """All NCCL record files of one run directory, with global ranks and communicators."""

    run_dir: Path | None
    records: list
    ranks: list[int]                       # global rank of each record
    ranks_from: str                        # how the global ranks were derived
    comms: dict[int, NcclComm]
    problems: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return max(self.ranks, default=-1) + 1


_OPS_KEY = re.compile(r"^nccl\.ops\.([0-9a-f]{16})\.(-?\d+)$")
_COMM_KEY = re.compile(r"^nccl\.comm\.([0-9a-f]{16})$")


def parse_op_table(text: str, where: str = "") -> list[OpRow]:
    """Parse the text of one ``nccl.ops.*`` meta value (header line, then one row per line)."""
    rows = []
    for i, line in enumerate(text.splitlines()):
        if i == 0 or not line.strip() or line.startswith("#"):
            continue
        f = line.split()
        if len(f) not in (10, 11):
            raise RankmapError(f"{where}: operation table line {i + 1} has {len(f)} fields, expected 11: {line!r}")
        try:
            rows.append(OpRow(f[0], int(f[1]), f[2], f[3], *map(int, f[4:])))
        except ValueError:
            raise RankmapError(f"{where}: operation table line {i + 1} is not numeric where expected: {line!r}") from None
    return rows


def _kv(text: str) -> dict[str, str]:
    return dict(tok.split("=", 1) for tok in text.split() if "=" in tok)


# ---- global ranks and communicators --------------------------------------------------------------

def _comm_facts(rec) -> dict[int, dict[str, str]]:
    return {int(m.group(1), 16): _kv(v) for k, v in rec.meta.items() if (m := _COMM_KEY.match(k))}


def global_ranks(records: list) -> tuple[list[int], str]:
    """The global rank of each NCCL record file, and how it was derived (module docstring, 1)."""
    procs: dict[tuple[str, int], int] = {}
    for r in records:
        procs[(r.host, r.pid)] = procs.get((r.host, r.pid), 0) + 1
    env = [r.world_rank for r in records]
    if records and all(r.meta.get("nccl.world_rank_from") == "environment" for r in records) \
            and len(set(env)) == len(env) and max(procs.values()) == 1:
        return env, "environment"
    members: dict[int, dict[int, int]] = {}
    sizes: dict[int, int] = {}
    for i, r in enumerate(records):
        for h, kv in _comm_facts(r).items():
            cr = int(kv.get("rank", "-1"))
            if cr >= 0:
                members.setdefault(h, {})[cr] = i
            sizes[h] = max(sizes.get(h, 0), int(kv.get("nranks", "0")), cr + 1)
    if not members:
        return env, "record files"
    # the largest communicator, preferring one every rank of which was recorded
    best = max(members, key=lambda h: (len(members[h]) == sizes[h], sizes[h], len(members[h]), -h))
    ranks = [-1] * len(records)
    for cr, i in members[best].items():
        ranks[i] = cr
    nxt = max(ranks) + 1
    rest = sorted((i for i in range(len(records)) if ranks[i] < 0),
                  key=lambda i: (records[i].host, records[i].pid, records[i].meta.get("nccl.gpu", ""), i))
    for i in rest:
        ranks[i], nxt = nxt, nxt + 1
    return ranks, f"communicator {best:016x} ({sizes[best]} ranks)"


def from_records(records: list, run_dir: Path | None = None, graphs: dict[int, nccl_graph.CommGraph] | None = None) -> NcclProfile:
    """Join NCCL record files: global ranks, communicators, operation tables, NCCL's graphs."""
    records = [r for r in records if r.source == "nccl"]
    ranks, how = global_ranks(records)
    comms: dict[int, NcclComm] = {}
    problems: list[str] = []
    for i, r in enumerate(records):
        facts = _comm_facts(r)
        for h, kv in facts.items():
            c = comms.setdefault(h, NcclComm(h))
            if kv.get("name", "-") != "-":
                c.name = kv["name"]
            cr = int(kv.get("rank", "-1"))
            c.nranks = max(c.nranks, int(kv.get("nranks", "0")), cr + 1)
            if cr >= 0:
                if cr in c.files and c.files[cr] != i:
                    problems.append(f"{r.path.name}: communicator {h:016x} rank {cr} also recorded by "
                                    f"{records[c.files[cr]].path.name}; the later file's table is used")
                c.files[cr] = i
        for k, v in r.meta.items():
            m = _OPS_KEY.match(k)
            if m:
                c = comms.setdefault(int(m.group(1), 16), NcclComm(int(m.group(1), 16)))
                c.rows[int(m.group(2))] = parse_op_table(v, f"{r.path.name} meta {k}")
    if graphs:
        for h, g in nccl_graph.match(graphs, {h: c.nranks for h, c in comms.items()}).items():
            comms[h].graph = g
    return NcclProfile(run_dir, records, ranks, how, comms, problems)


def load(run_dir: str | Path, extra_logs: list[Path] | None = None, live: bool = False) -> NcclProfile:
    """Read every NCCL record file and NCCL debug log (``nccl-debug*.log``) of ``run_dir``."""
    run_dir = Path(run_dir)
    recs = rec_mod.read_dir(run_dir, source="nccl", live=live)
    logs = sorted(run_dir.glob(DEBUG_LOG_GLOB)) + list(extra_logs or [])
    return from_records(recs, run_dir, nccl_graph.parse_files(logs) if logs else None)


# ---- the model ---------------------------------------------------------------------------------------

def _split(total: int, k: int) -> list[int]:
    """``total`` in ``k`` integer parts that add up exactly (the first ones one larger)."""
    base, extra = divmod(total, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def _ring_channels(g: nccl_graph.CommGraph | None, channels: int) -> list[int]:
    """The complete rings an operation on ``channels`` channels used: channels 0..channels-1 that the
    log shows, else every ring it shows."""
    if g is None:
        return []
    full = g.complete_rings()
    used = [c for c in full if c < max(channels, 1)]
    return used or full


def _tree_channels(g: nccl_graph.CommGraph | None, channels: int) -> list[int]:
    if g is None:
        return []
    full = g.complete_trees()
    used = [c for c in full if c < max(channels, 1)]
    return used or full


def sends(row: OpRow, n: int, r: int, graph: nccl_graph.CommGraph | None = None) -> list[tuple[int, int, str]]:
    """``[(peer comm rank, bytes, label)]`` that comm rank ``r`` of ``n`` sends for ONE call of ``row``.

    ``row.bytes`` is the call's payload as the plugin records it (count x datatype size; count per
    rank for AllGather/ReduceScatter, per peer for AlltoAll). ``graph``: NCCL's rings and trees of
    the communicator, or None (rank order). Integer bytes: a call's volume split over channels adds
    up exactly.
    """
    S, f, algo, root = row.bytes, row.func, row.algo, row.root_or_peer
    if n < 2 or not 0 <= r < n or S <= 0:
        return []
    if f == "Send":
        return [(root, S, "library")] if 0 <= root < n and root != r else []
    if f in ("Recv", "SendRecv", "Other"):
        return []
    if f == "AlltoAll":
        return [(p, S, "library") for p in range(n) if p != r]
    if f in ("Gather", "Scatter"):
        if not 0 <= root < n:
            return []
        if f == "Gather":
            return [] if r == root else [(root, S, "library")]
        return [(p, S, "library") for p in range(n) if p != r] if r == root else []
    if f in ("Broadcast", "Reduce") and not 0 <= root < n:
        return []
    if algo == "CE":            # the copy engines write straight into every destination buffer
        if f in ("AllGather", "Broadcast") and (f == "AllGather" or r == root):
            return [(p, S, "model") for p in range(n) if p != r]
        if f == "Broadcast":
            return []
    ring_vol = {"AllReduce": (2 * (n - 1) * S + n // 2) // n, "AllGather": (n - 1) * S,
                "ReduceScatter": (n - 1) * S}.get(f, S)
    if algo in SPREAD_ALGOS:
        if f == "Broadcast":             # the root's data reaches every other member
            return [(p, S, "model") for p in range(n) if p != r] if r == root else []
        if f == "Reduce":
            return [] if r == root else [(root, S, "model")]
        return [(p, part, "model") for p, part in zip((p for p in range(n) if p != r), _split(ring_vol, n - 1))]
    out: dict[int, int] = {}
    if f == "AllReduce" and algo == "TREE":
        chans = _tree_channels(graph, row.channels)
        if chans:                        # reduce up NCCL's trees, broadcast back down
            for ch, share in zip(chans, _split(S, len(chans))):
                up, kids = graph.parent[ch].get(r, -1), graph.children.get(ch, {}).get(r, [])
                for p in ([up] if up >= 0 else []) + kids:
                    out[p] = out.get(p, 0) + share
            return [(p, b, "mirror") for p, b in sorted(out.items()) if b and p != r]
        return [(p, S, "model") for p in (r - 1, r + 1) if 0 <= p < n]   # a chain in rank order
    chans = _ring_channels(graph, row.channels)
    label = "mirror" if chans else "model"
    rings = [graph.ring_succ(c) for c in chans] if chans else [{i: (i + 1) % n for i in range(n)}]
    parts = _split(S if f in ("Broadcast", "Reduce") else ring_vol, len(rings))
    for succ, share in zip(rings, parts):
        nxt = succ.get(r, -1)
        if f == "Broadcast":             # chain root -> ... -> the root's predecessor
            if nxt == root:
                continue
        elif f == "Reduce" and r == root:   # chain root+1 -> ... -> root
            continue
        if 0 <= nxt < n and nxt != r:
            out[nxt] = out.get(nxt, 0) + share
    return [(p, b, label) for p, b in sorted(out.items()) if b]


def wire_factor(row: OpRow) -> float:
    """Bytes on the link per payload byte for this row's protocol (see the module docstring)."""
    if row.func in ("Send", "Recv"):
        return 2.0 if row.bytes <= max(row.channels, 1) * P2P_LL_THRESHOLD else 1.0
    return WIRE_FACTOR.get(row.proto, 1.0)


@dataclass
class Pairs:
    """The pair traffic of a profile: integer bytes and calls per (src, dst, operation, label)."""

    rows: dict[tuple[int, int, str, str], list[int]]
    order: dict[int, str]               # communicator -> "nccl-graph" | "rank-order"
    unattributed: int = 0               # bytes towards comm ranks no file recorded
    notes: list[str] = field(default_factory=list)

    def matrix(self, n: int, label: str | None = None) -> np.ndarray:
        m = np.zeros((n, n), dtype=np.int64)
        for (s, d, _op, lab), (b, _c) in self.rows.items():
            if (label is None or lab == label) and 0 <= s < n and 0 <= d < n:
                m[s, d] += b
        return m


def pairs(profile: NcclProfile) -> Pairs:
    """Every NCCL pair row of the profile, from sender to receiver, in global ranks."""
    out: dict[tuple[int, int, str, str], list[int]] = {}
    order: dict[int, str] = {}
    lost = 0
    for h, c in profile.comms.items():
        order[h] = "nccl-graph" if c.graph is not None and (c.graph.complete_rings() or c.graph.complete_trees()) \
            else "rank-order"
        for cr, rows in c.rows.items():
            if cr not in c.files:
                continue
            src = profile.ranks[c.files[cr]]
            for row in rows:
                for peer, b, label in sends(row, c.nranks, cr, c.graph):
                    if peer not in c.files:
                        lost += b * row.calls
                        continue
                    key = (src, profile.ranks[c.files[peer]], OPS.get(row.func, "nccl" + row.func), label)
                    acc = out.setdefault(key, [0, 0])
                    acc[0] += b * row.calls
                    acc[1] += row.calls
    notes = []
    blind = sorted(h for h, c in profile.comms.items() if order[h] == "rank-order" and any(
        row.func not in ("Send", "Recv", "AlltoAll", "Gather", "Scatter") and row.algo not in SPREAD_ALGOS
        for rows in c.rows.values() for row in rows))
    if blind:
        notes.append(f"NCCL: no rings or trees of {counted(len(blind), 'communicator')} in a NCCL log ({', '.join(f'{h:016x}' for h in blind[:4])}"
                     f"{', ...' if len(blind) > 4 else ''}): their collectives follow rank order (pair rows labelled 'model')")
    if lost:
        notes.append(f"NCCL: {lost} bytes went to communicator ranks that no record file holds "
                     f"(a node's run directory missing?); they are not in the pair matrix")
    return Pairs(out, order, lost, notes)


def pair_matrix(profile: NcclProfile, wire: bool = False) -> tuple[np.ndarray, dict[int, str]]:
    """Global-rank matrix T[src][dst] of NCCL bytes, and the order used per communicator.

    With ``wire`` the bytes include the protocol overhead (:func:`wire_factor`; float matrix).
    """
    p = pairs(profile)
    if not wire:
        return p.matrix(profile.world_size), p.order
    m = np.zeros((profile.world_size,) * 2, dtype=np.float64)
    for c in profile.comms.values():
        for cr, rows in c.rows.items():
            if cr not in c.files:
                continue
            for row in rows:
                for peer, b, _label in sends(row, c.nranks, cr, c.graph):
                    if peer in c.files:
                        m[profile.ranks[c.files[cr]], profile.ranks[c.files[peer]]] += b * row.calls * wire_factor(row)
    return m, p.order


def op_summary(profile: NcclProfile) -> dict[int, dict[tuple[str, int], int]]:
    """Calls per (function, bytes per call) for each global rank, over all its communicators."""
    out: dict[int, dict[tuple[str, int], int]] = {}
    for c in profile.comms.values():
        for cr, rows in c.rows.items():
            w = profile.ranks[c.files[cr]] if cr in c.files else -1
            d = out.setdefault(w, {})
            for row in rows:
                d[(row.func, row.bytes)] = d.get((row.func, row.bytes), 0) + row.calls
    return out


def captured_calls(profile: NcclProfile) -> dict[int, int]:
    """Per global rank: calls NCCL saw while they were being captured into a CUDA graph."""
    out: dict[int, int] = {}
    for c in profile.comms.values():
        for cr, rows in c.rows.items():
            if cr in c.files:
                w = profile.ranks[c.files[cr]]
                out[w] = out.get(w, 0) + sum(r.captured for r in rows)
    return {w: n for w, n in out.items() if n}


# ---- records for the store -------------------------------------------------------------------------

def _apportion(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainder: the parts add up exactly)."""
    s = sum(weights)
    if s <= 0 or total <= 0:
        return [0] * len(weights)
    raw = [total * w for w in weights]
    parts = [x // s for x in raw]
    for i in sorted(range(len(weights)), key=lambda i: -(raw[i] % s))[: total - sum(parts)]:
        parts[i] += 1
    return parts


def ingest_records(profile: NcclProfile) -> list:
    """One record per NCCL file, re-ranked and carrying the model's pair rows, for the store.

    Each record keeps its calls, payload and histograms; its world rank becomes the global rank;
    its traffic becomes the pair rows (:class:`TrafficRow`, send rows of the sender and receive rows
    of the receiver, with their ``label``); its timeline (the payload of each 100 ms bucket) is
    spread over its destinations in proportion to the bytes it sent each. Notes (ranks derived
    from a communicator, calls captured into CUDA graphs, unattributed bytes) join its problems.
    """
    p = pairs(profile)
    n = profile.world_size
    by_rank: dict[int, list[TrafficRow]] = {}
    for (s, d, op, label), (b, calls) in sorted(p.rows.items()):
        by_rank.setdefault(s, []).append(TrafficRow(d, "nccl", op, "device", "send", b, calls, label))
        by_rank.setdefault(d, []).append(TrafficRow(s, "nccl", op, "device", "recv", b, calls, label))
    captured = captured_calls(profile)
    out = []
    for i, rec in enumerate(profile.records):
        w = profile.ranks[i]
        traffic = by_rank.get(w, [])
        sent: dict[int, int] = {}
        for t in traffic:
            if t.direction == "send":
                sent[t.peer] = sent.get(t.peer, 0) + t.bytes
        buckets = sorted({b for b, _p, k, _v in rec.timeline if k == "nccl"})
        payload = {b: 0 for b in buckets}
        for b, _p, k, v in rec.timeline:
            if k == "nccl":
                payload[b] += v
        timeline = [(b, peer, k, v) for b, peer, k, v in rec.timeline if k != "nccl"]
        for dst, total in sorted(sent.items()):
            for b, v in zip(buckets, _apportion(total, [payload[b] for b in buckets])):
                if v:
                    timeline.append((b, dst, "nccl", v))
        problems = list(rec.problems) + list(profile.problems if i == 0 else [])
        if i == 0:
            problems += p.notes
        if captured.get(w):
            problems.append(f"rank {w}: {captured[w]} NCCL calls were captured into CUDA graphs; NCCL reports "
                            f"each once, when it is captured, not when a graph is replayed, so replays are not "
                            f"counted")
        meta = dict(rec.meta, **{"nccl.global_rank_from": profile.ranks_from,
                                 "nccl.global_rank": str(w)})
        out.append(replace(rec, world_rank=w, world_size=n, traffic=traffic, timeline=sorted(timeline),
                           problems=problems, meta=meta))
    return out
