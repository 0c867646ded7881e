"""NCCL's own communication graph, read from its ``NCCL_DEBUG=INFO`` output (subsystems INIT,GRAPH).

NCCL builds its rings and trees from the hardware (NVLink meshes, PCIe switches, NICs) and prints
them while a communicator initialises; ``rankmap profile`` has NCCL write that output to
``<run dir>/nccl-debug.<host>.<pid>.log`` (``NCCL_DEBUG_FILE``), unless the user set ``NCCL_DEBUG``.
This module turns such text into one :class:`CommGraph` per communicator:

* rings, per channel, from comm rank 0's ``Channel 00/04 :    0   1   3   2`` (NCCL 2.7+), the older
  ``Ring 00 :    0   1   2   3``, or the per-rank form ``Ring 02 : 2 -> 0 -> 1`` (prev -> me -> next);
* trees, per channel, from every rank's ``Trees [0] 1/-1/-1->0->-1 [1] ...`` (children/... -> rank ->
  parent; NCCL 2.4-2.6 printed ``Trees [0] parent->rank->c0/c1/c2``);
* how many NVLS and CollNet channels it set up (``24 coll channels, 0 collnet channels, 16 nvls
  channels, ...``);
* the GPU (PCI bus id) of each comm rank, from ``... rank R nranks N cudaDev D nvmlDev D busId 18000
  commId 0x... - Init COMPLETE``.

Lines are attributed to a communicator through the ``comm 0x<ptr> rank R nRanks N`` line that NCCL
prints first in the same thread, and keyed by the ``commId`` that its ``Init COMPLETE`` line shows;
that id is the communicator hash the profiler plugin records. Logs without a commId (NCCL before
2.19) are kept under ``-(index)`` keys; :func:`match` pairs them with recorded communicators by size
when that is unambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# "host:pid:tid [dev] NCCL INFO ...", possibly behind a launcher's own prefix, or just "[dev] NCCL INFO"
_WHO = r"(?:(?P<who>[^\s\[\]:][^\s\[\]]*?:\d+(?::\d+)?)\s+)?\[\d+\]\s+NCCL INFO\s+"
_COMMLINE = re.compile(_WHO + r"comm (0x[0-9a-fA-F]+) rank (\d+) nRanks (\d+)(?: nNodes (\d+))?")
_CHAN = re.compile(_WHO + r"(?:Channel|Ring) (\d+)(?:/(\d+))? :((?:\s+\d+){2,})\s*$")
_RING_ARROW = re.compile(_WHO + r"Ring (\d+) : (-?\d+) -> (\d+) -> (-?\d+)\s*$")
_TREES = re.compile(_WHO + r"Trees((?: \[\d+\] \S+)+)\s*$")
_TREE_NEW = re.compile(r"\[(\d+)\] (-?\d+)/(-?\d+)/(-?\d+)->(\d+)->(-?\d+)")
_TREE_OLD = re.compile(r"\[(\d+)\] (-?\d+)->(\d+)->(-?\d+)/(-?\d+)/(-?\d+)")
_CHANNELS = re.compile(_WHO + r"(\d+) coll channels,(?: (\d+) collnet channels,)?(?: (\d+) nvls channels,)?")
_DONE = re.compile(_WHO + r"\S+ comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+)(?P<rest>.*?)- Init COMPLETE")
_COMMID = re.compile(r"commId (0x[0-9a-fA-F]+)")
_BUSID = re.compile(r"busId ([0-9a-fA-F]+)")


@dataclass
class CommGraph:
    """What NCCL printed about one communicator's graph."""

    key: int                                   # commId hash, or -(index) when the log showed none
    nranks: int = 0
    nnodes: int = 0
    rings: dict[int, list[int]] = field(default_factory=dict)              # channel -> ring order
    succ: dict[int, dict[int, int]] = field(default_factory=dict)          # channel -> rank -> next
    parent: dict[int, dict[int, int]] = field(default_factory=dict)        # channel -> rank -> parent (-1 root)
    children: dict[int, dict[int, list[int]]] = field(default_factory=dict)
    nvls_channels: int = 0
    collnet_channels: int = 0
    bus: dict[int, str] = field(default_factory=dict)                     # comm rank -> PCI bus id
    source: str = ""                                                        # file the lines came from

    def ring_succ(self, channel: int) -> dict[int, int]:
        """rank -> next rank on the ring of ``channel`` (from the full ring or per-rank lines)."""
        return self.succ.get(channel, {})

    def complete_rings(self) -> list[int]:
        """Channels whose ring names a successor for every rank."""
        return sorted(c for c, s in self.succ.items() if self.nranks and len(s) >= self.nranks)

    def complete_trees(self) -> list[int]:
        """Channels whose tree names the parent of every rank."""
        return sorted(c for c, p in self.parent.items() if self.nranks and len(p) >= self.nranks)


def nccl_bus_id(value: str) -> str:
    """NCCL's ``busId 18000`` (hex, domain<<20 | bus<<12 | device<<4 | function) as ``0000:18:00.0``."""
    v = int(value, 16)
    return f"{v >> 20:04x}:{(v >> 12) & 0xFF:02x}:{(v >> 4) & 0xFF:02x}.{v & 0xF:x}"


#: the most ranks a communicator may have: a line naming a rank or a count past it is damage (an
#: edited or corrupt log), skipped, so that one number cannot make a graph of a billion ranks
MAX_RANKS = 1 << 24
_NUMBER = re.compile(r"(?<![0-9A-Fa-fx])[0-9]{8,}(?![0-9A-Fa-f])")


def _too_large(line: str) -> bool:
    """Whether a line names a decimal number past :data:`MAX_RANKS` outside its hex fields (pointers,
    bus and comm ids are hex, and so are left alone)."""
    return any(int(m.group(0)) >= MAX_RANKS for m in _NUMBER.finditer(line.split("NCCL INFO", 1)[1]))


def parse(text: str, source: str = "") -> dict[int, CommGraph]:
    """Every communicator graph in one NCCL INFO text (see the module docstring)."""
    current: dict[str, tuple[str, int]] = {}          # thread -> (comm pointer, its comm rank)
    pending: dict[str, CommGraph] = {}                # comm pointer -> graph being read
    done: dict[int, CommGraph] = {}
    anon = 0

    orphan = CommGraph(0, source=source)           # lines of threads that printed no comm line

    def graph_of(who: str) -> tuple[CommGraph, int]:
        cur = current.get(who)
        g = pending.get(cur[0]) if cur else None
        return (g, cur[1]) if g is not None else (orphan, -1)

    for line in text.splitlines():
        if "NCCL INFO" not in line or _too_large(line):
            continue
        m = _COMMLINE.search(line)
        if m:
            ptr, rank, n = m.group(2), int(m.group(3)), int(m.group(4))
            current[m.group("who") or ""] = (ptr, rank)
            g = pending.setdefault(ptr, CommGraph(0, source=source))
            g.nranks = max(g.nranks, n)
            g.nnodes = max(g.nnodes, int(m.group(5) or 0))
            continue
        m = _RING_ARROW.search(line)
        if m:
            g, _ = graph_of(m.group("who") or "")
            g.succ.setdefault(int(m.group(2)), {})[int(m.group(4))] = int(m.group(5))
            continue
        m = _CHAN.search(line)
        if m:
            g, _ = graph_of(m.group("who") or "")
            ring, ch = [int(x) for x in m.group(4).split()], int(m.group(2))
            g.rings[ch] = ring
            g.succ[ch] = {ring[i]: ring[(i + 1) % len(ring)] for i in range(len(ring))}
            continue
        m = _TREES.search(line)
        if m:
            g, _ = graph_of(m.group("who") or "")
            _add_trees(g, m.group(2))
            continue
        m = _CHANNELS.search(line)
        if m:
            g, _ = graph_of(m.group("who") or "")
            g.collnet_channels = max(g.collnet_channels, int(m.group(3) or 0))
            g.nvls_channels = max(g.nvls_channels, int(m.group(4) or 0))
            continue
        m = _DONE.search(line)
        if m:
            ptr, rank = m.group(2), int(m.group(3))
            g = pending.pop(ptr, None) or CommGraph(0, nranks=int(m.group(4)), source=source)
            g.nranks = max(g.nranks, int(m.group(4)))
            rest = m.group("rest")
            cid, bus = _COMMID.search(rest), _BUSID.search(rest)
            if bus:
                g.bus[rank] = nccl_bus_id(bus.group(1))
            if cid:
                key = int(cid.group(1), 16)
            else:
                anon += 1
                key = -anon
            g.key = key
            _merge(done, key, g)
            current.pop(m.group("who") or "", None)
    # no Init COMPLETE line (an excerpt of a log): keep what was seen, if anything
    for g in [*pending.values(), orphan]:
        if not (g.succ or g.parent):
            continue
        g.nranks = max([g.nranks] + [max(s) + 1 for s in g.succ.values()] + [max(p) + 1 for p in g.parent.values()])
        anon += 1
        g.key = -anon
        _merge(done, g.key, g)
    return done


def _add_trees(g: CommGraph, spec: str) -> None:
    """One rank's ``Trees`` line: its parent and children on every channel."""
    new = list(_TREE_NEW.finditer(spec))
    for m in new or _TREE_OLD.finditer(spec):
        if new:     # [c] c0/c1/c2->rank->parent
            ch, kids, rank, up = int(m.group(1)), [int(m.group(i)) for i in (2, 3, 4)], int(m.group(5)), int(m.group(6))
        else:       # [c] parent->rank->c0/c1/c2
            ch, up, rank, kids = int(m.group(1)), int(m.group(2)), int(m.group(3)), [int(m.group(i)) for i in (4, 5, 6)]
        g.parent.setdefault(ch, {})[rank] = up
        g.children.setdefault(ch, {})[rank] = [k for k in kids if k >= 0]


def _merge(done: dict[int, CommGraph], key: int, g: CommGraph) -> None:
    """Every rank of a communicator completes its own init: join what each printed."""
    old = done.get(key)
    if old is None:
        done[key] = g
        return
    old.nranks, old.nnodes = max(old.nranks, g.nranks), max(old.nnodes, g.nnodes)
    for ch, r in g.rings.items():
        old.rings.setdefault(ch, r)
    for ch, s in g.succ.items():
        old.succ.setdefault(ch, {}).update(s)
    for ch, p in g.parent.items():
        old.parent.setdefault(ch, {}).update(p)
    for ch, c in g.children.items():
        old.children.setdefault(ch, {}).update(c)
    old.nvls_channels = max(old.nvls_channels, g.nvls_channels)
    old.collnet_channels = max(old.collnet_channels, g.collnet_channels)
    old.bus.update(g.bus)


def parse_files(paths: list[Path]) -> dict[int, CommGraph]:
    """All graphs of several log files (one per process), joined per communicator."""
    out: dict[int, CommGraph] = {}
    anon = 0
    for p in paths:
        try:
            text = p.read_text(errors="replace")
        except OSError:
            continue
        for key, g in parse(text, p.name).items():
            if key < 0:                                   # keep anonymous graphs apart per file
                anon += 1
                key = g.key = -anon
            _merge(out, key, g)
    return out


def match(graphs: dict[int, CommGraph], comms: dict[int, int]) -> dict[int, CommGraph]:
    """Graphs of the recorded communicators ``{hash: nranks}``: by hash, else (a log without commIds)
    by size when exactly one unmatched graph and one unmatched communicator have that size."""
    out = {h: graphs[h] for h in comms if h in graphs}
    free = [g for k, g in graphs.items() if k < 0]
    for h, n in comms.items():
        if h in out:
            continue
        same = [g for g in free if g.nranks == n]
        others = [c for c, m in comms.items() if c not in out and m == n]
        if len(same) == 1 and len(others) == 1:
            out[h] = same[0]
            free.remove(same[0])
    return out
