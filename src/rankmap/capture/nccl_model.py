"""NCCL captures: communicators, operation tables and the pair traffic of collectives.

The NCCL profiler plugin (``native/nccl``) writes per process one record file
``rank-<world>.nccl.rmrec``. Besides the usual traffic rows (class ``nccl``) it keeps, per
communicator, an **operation table** in the record's meta (key ``nccl.ops.<hash>.<comm rank>``):
one row per distinct (function, bytes per call, algorithm, protocol, channels, root or peer)
with its calls and host-side time. This module reads those back and turns them into pair
traffic — which rank puts how many bytes on the way to which — with the model described in
``docs/nccl-capture.md``:

* Send/Recv: exact (peer from NCCL).
* RING (and anything NCCL runs as a ring): each rank sends to its ring successor
  AllReduce ``2(n-1)/n x S``; AllGather / ReduceScatter ``(n-1) x count x size`` (NCCL's count is
  per rank); Broadcast: every rank but the root's predecessor sends ``S`` along the chain from the
  root; Reduce: every rank but the root sends ``S`` along the chain ending at the root.
* TREE AllReduce: a chain in rank order, ``S`` each way between neighbours.
* NVLS, NVLS_TREE, COLLNET_*, PAT: no pair structure (switch or log-step exchanges): the ring
  volume spread evenly over the other members.
* AlltoAll ``count x size`` to every peer; Gather/Scatter ``count x size`` to/from the root.

The ring order is NCCL's own when it was learnt from its ``NCCL_DEBUG=INFO`` output
(``NCCL_DEBUG_SUBSYS=INIT,GRAPH``: lines ``Channel 00/04 : 0 1 2 3``, see :func:`parse_rings`),
bytes then being split evenly over the channels the operation used; otherwise rank order, as
the plugin itself assumes for the traffic rows it writes. :func:`pair_matrix` says which was used.

``wire=True`` also applies NCCL's protocol overhead, i.e. the bytes that really cross the link:
LL sends 8 flag bytes with every 8 data bytes (x2), LL128 8 flag bytes per 128-byte line
(x128/120), SIMPLE none; p2p uses LL up to ``channels x 16 KiB`` (NCCL_P2P_LL_THRESHOLD).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rankmap.capture import records as rec_mod
from rankmap.errors import RankmapError

WIRE_FACTOR = {"LL": 2.0, "LL128": 128.0 / 120.0, "SIMPLE": 1.0}
P2P_LL_THRESHOLD = 16384
SPREAD_ALGOS = {"NVLS", "NVLS_TREE", "COLLNET_DIRECT", "COLLNET_CHAIN", "PAT"}
ROOTED = {"Broadcast", "Reduce", "Gather", "Scatter"}


@dataclass(frozen=True)
class OpRow:
    """One row of a communicator's operation table, as one rank saw it."""

    func: str
    bytes: int            # payload of one call: count x datatype size
    algo: str             # "RING", "TREE", ... ("-" for p2p)
    proto: str            # "LL", "LL128", "SIMPLE" ("-" for p2p)
    channels: int
    root_or_peer: int     # collectives: root comm rank (-1 none); p2p: peer comm rank
    calls: int
    time_ns: int
    first_ns: int
    last_ns: int


@dataclass
class NcclComm:
    """One NCCL communicator of the job, joined over the ranks that recorded it."""

    hash: int
    name: str = ""
    nranks: int = 0
    members: list[int] = field(default_factory=list)    # world rank of each comm rank (-1 unknown)
    how: dict[int, str] = field(default_factory=dict)   # world rank -> how the plugin knew members
    rows: dict[int, list[OpRow]] = field(default_factory=dict)  # comm rank -> its table

    @property
    def resolved(self) -> bool:
        """True when every member's world rank is known."""
        return self.nranks > 0 and len(self.members) == self.nranks and min(self.members) >= 0


@dataclass
class NcclProfile:
    """All NCCL communicators of one run directory."""

    run_dir: Path
    world_size: int
    comms: dict[int, NcclComm]
    records: list


_OPS_KEY = re.compile(r"^nccl\.ops\.([0-9a-f]{16})\.(-?\d+)$")
_COMM_KEY = re.compile(r"^nccl\.comm\.([0-9a-f]{16})$")
_MEMBER_FILE = re.compile(r"^comm-([0-9a-f]{16})-(\d+)\.txt$")


def parse_op_table(text: str, where: str = "") -> list[OpRow]:
    """Parse the text of one ``nccl.ops.*`` meta value (header line, then one row per line)."""
    rows = []
    for i, line in enumerate(text.splitlines()):
        if i == 0 or not line.strip() or line.startswith("#"):
            continue
        f = line.split()
        if len(f) != 10:
            raise RankmapError(f"{where}: operation table line {i + 1} has {len(f)} fields, expected 10: {line!r}")
        try:
            rows.append(OpRow(f[0], int(f[1]), f[2], f[3], int(f[4]), int(f[5]), int(f[6]), int(f[7]),
                              int(f[8]), int(f[9])))
        except ValueError:
            raise RankmapError(f"{where}: operation table line {i + 1} is not numeric where expected: {line!r}") from None
    return rows


def _kv(text: str) -> dict[str, str]:
    return dict(tok.split("=", 1) for tok in text.split() if "=" in tok)


def load(run_dir: str | Path) -> NcclProfile:
    """Read every NCCL record file and ``comm-*.txt`` member file of ``run_dir``."""
    run_dir = Path(run_dir)
    recs = rec_mod.read_dir(run_dir, source="nccl")
    world = max([r.world_size for r in recs] + [0])
    comms: dict[int, NcclComm] = {}

    def comm(h: int) -> NcclComm:
        return comms.setdefault(h, NcclComm(h))

    for r in recs:
        own_rank: dict[int, int] = {}
        for k, v in r.meta.items():
            m = _COMM_KEY.match(k)
            if m:
                kv = _kv(v)
                c = comm(int(m.group(1), 16))
                c.name = kv.get("name", c.name) if kv.get("name", "-") != "-" else c.name
                c.nranks = max(c.nranks, int(kv.get("nranks", "0")))
                c.how[r.world_rank] = kv.get("members", "unknown")
                own_rank[c.hash] = int(kv.get("rank", "-1"))
        for k, v in r.meta.items():
            m = _OPS_KEY.match(k)
            if m:
                c = comm(int(m.group(1), 16))
                c.rows[int(m.group(2))] = parse_op_table(v, f"{r.path.name} meta {k}")
        for cm in r.communicators:
            c = comm(int(cm.id))
            _merge_members(c, list(cm.members))
        for h, cr in own_rank.items():     # at least we know where we sit
            c = comms[h]
            if cr >= 0 and c.nranks > cr:
                _merge_members(c, [r.world_rank if i == cr else -1 for i in range(c.nranks)])
    # member files: "<world rank> <comm rank> <nranks>"
    for p in sorted(run_dir.glob("comm-*.txt")):
        m = _MEMBER_FILE.match(p.name)
        if not m:
            continue
        try:
            f = p.read_text().split()
            w, cr, n = int(f[0]), int(f[1]), int(f[2])
        except (OSError, ValueError, IndexError):
            raise RankmapError(f"{p}: not a member file ('<world rank> <comm rank> <nranks>')") from None
        c = comm(int(m.group(1), 16))
        if n > 0:
            c.nranks = max(c.nranks, n)
        if 0 <= cr:
            size = max(c.nranks, cr + 1)
            _merge_members(c, [w if i == cr else -1 for i in range(size)])
    return NcclProfile(run_dir, world, comms, recs)


def _merge_members(c: NcclComm, members: list[int]) -> None:
    if len(members) > len(c.members):
        c.members = c.members + [-1] * (len(members) - len(c.members))
    for i, w in enumerate(members):
        if w >= 0:
            c.members[i] = w
    c.nranks = max(c.nranks, len(c.members))


# ---- NCCL's ring order from its INFO output -----------------------------------------------

# "host:pid:tid [dev] NCCL INFO ...", possibly behind a launcher's own prefix
_PREFIX = r"(?P<who>[^\s\[\]:][^\s\[\]]*?:\d+)(?::\d+)?\s+\[\d+\]\s+NCCL INFO\s+"
_CHAN = re.compile(_PREFIX + r"Channel (\d+)/(\d+) :((?:\s+\d+)+)\s*$")
_COMMLINE = re.compile(_PREFIX + r"comm (0x[0-9a-f]+) rank (\d+) nRanks (\d+)")
_DONE = re.compile(_PREFIX + r"\S+ comm (0x[0-9a-f]+) rank (\d+) nranks (\d+) .*commId (0x[0-9a-f]+) - Init COMPLETE")


def parse_rings(text: str) -> dict[int, list[list[int]]]:
    """Rings NCCL built, per communicator hash, from ``NCCL_DEBUG=INFO`` output (INIT,GRAPH).

    NCCL's comm rank 0 prints ``Channel cc/NN : r0 r1 ...`` for every ring between the
    ``comm 0x.. rank 0 nRanks n`` line and the ``... commId 0x<hash> - Init COMPLETE`` line of the
    same process. Communicators made by ``ncclCommSplit`` print no commId and are not matched.
    """
    current: dict[str, str] = {}               # process -> comm pointer being initialised
    pending: dict[tuple[str, str], dict[int, list[int]]] = {}
    out: dict[int, list[list[int]]] = {}
    for line in text.splitlines():
        m = _COMMLINE.search(line)
        if m:
            current[m.group("who")] = m.group(2)
            continue
        m = _CHAN.search(line)
        if m:
            who = m.group("who")
            if who in current:
                pending.setdefault((who, current[who]), {})[int(m.group(2))] = [int(x) for x in m.group(4).split()]
            continue
        m = _DONE.search(line)
        if m:
            rings = pending.pop((m.group("who"), m.group(2)), None)
            if rings:
                out[int(m.group(5), 16)] = [rings[k] for k in sorted(rings)]
    return out


# ---- the model ---------------------------------------------------------------------------------

def collective_sends(func: str, algo: str, n: int, r: int, nbytes: int, root: int,
                     ring: list[int] | None = None) -> list[tuple[int, int]]:
    """``[(peer comm rank, bytes)]`` that comm rank ``r`` of ``n`` sends for one collective call.

    ``nbytes`` is the call's payload as the plugin records it (count x datatype size, count per
    rank for AllGather/ReduceScatter, per peer for AlltoAll). ``ring`` is the ring order (comm
    ranks); None means rank order.
    """
    if n < 2 or not 0 <= r < n:
        return []
    order = ring if ring and len(ring) == n else list(range(n))
    pos = order.index(r)
    nxt = order[(pos + 1) % n]
    S = nbytes
    if func == "AllReduce":
        if algo == "TREE":
            return [(p, S) for p in (r - 1, r + 1) if 0 <= p < n]
        vol = (2 * (n - 1) * S + n // 2) // n
    elif func in ("AllGather", "ReduceScatter"):
        vol = (n - 1) * S
    elif func == "Broadcast":
        if not 0 <= root < n:
            return []
        rpos = order.index(root)
        return [] if order[(rpos - 1) % n] == r else [(nxt, S)]
    elif func == "Reduce":
        return [] if r == root or not 0 <= root < n else [(nxt, S)]
    elif func == "AlltoAll":
        return [(p, S) for p in range(n) if p != r]
    elif func == "Gather":
        return [] if r == root or not 0 <= root < n else [(root, S)]
    elif func == "Scatter":
        return [(p, S) for p in range(n) if p != r] if r == root else []
    else:
        return []
    if algo in SPREAD_ALGOS:
        each = vol // (n - 1)
        return [(p, each) for p in range(n) if p != r]
    return [(nxt, vol)]


def wire_factor(row: OpRow) -> float:
    """Bytes on the link per payload byte for this row's protocol (see the module docstring)."""
    if row.func in ("Send", "Recv"):
        return 2.0 if row.bytes <= max(row.channels, 1) * P2P_LL_THRESHOLD else 1.0
    return WIRE_FACTOR.get(row.proto, 1.0)


def pair_matrix(profile: NcclProfile, rings: dict[int, list[list[int]]] | None = None,
                wire: bool = False) -> tuple[np.ndarray, dict[int, str]]:
    """World-rank matrix T[src][dst] of NCCL bytes, and per communicator the ring order used.

    Sends only (every byte is counted once, by its sender). With ``rings`` (from
    :func:`parse_rings`) a communicator's collectives follow NCCL's rings, the bytes of each call
    split evenly over the first ``channels`` rings; otherwise rank order ("rank-order").
    Communicators whose members are not all known are skipped ("skipped: members unknown").
    """
    n = profile.world_size
    m = np.zeros((n, n), dtype=np.float64)
    used: dict[int, str] = {}
    for h, c in profile.comms.items():
        if not c.resolved:
            used[h] = "skipped: members unknown"
            continue
        crings = (rings or {}).get(h)
        used[h] = "nccl-graph" if crings else "rank-order"
        for cr, rows in c.rows.items():
            if not 0 <= cr < c.nranks:
                continue
            src = c.members[cr]
            for row in rows:
                f = wire_factor(row) if wire else 1.0
                if row.func == "Send":
                    if 0 <= row.root_or_peer < c.nranks:
                        m[src, c.members[row.root_or_peer]] += row.bytes * row.calls * f
                    continue
                if row.func in ("Recv", "SendRecv"):
                    continue
                if crings:
                    k = max(1, min(row.channels, len(crings)))
                    parts = [(crings[i], row.bytes / k) for i in range(k)]
                else:
                    parts = [(None, row.bytes)]
                for ring, share in parts:
                    # shares of a payload: model on the whole payload, scale (keeps integer rounding
                    # identical to the plugin's in the rank-order case)
                    for peer, b in collective_sends(row.func, row.algo, c.nranks, cr, row.bytes, row.root_or_peer, ring):
                        m[src, c.members[peer]] += b * (share / row.bytes if row.bytes else 0) * row.calls * f
    return m, used


def op_summary(profile: NcclProfile) -> dict[int, dict[tuple[str, int], int]]:
    """Calls per (function, bytes per call) for each world rank, over all its communicators."""
    out: dict[int, dict[tuple[str, int], int]] = {}
    for c in profile.comms.values():
        for cr, rows in c.rows.items():
            w = c.members[cr] if 0 <= cr < len(c.members) else -1
            d = out.setdefault(w, {})
            for row in rows:
                d[(row.func, row.bytes)] = d.get((row.func, row.bytes), 0) + row.calls
    return out
