"""The mapping JSON: a placement of ranks on GPUs, CPUs, memory and NICs, and why it was chosen.

``rankmap map`` / ``tune`` write it (``rankmap.mapping.report.to_json``), the store keeps it, and
``rankmap run``, the per-rank exec wrapper and the dashboard read it, all through :func:`from_dict`
(the dashboard through :func:`placement`, which also takes the plainer placements other tools hold)::

    {"format": "rankmap-mapping", "version": 1, "world_size": 4, "topology": "dgx1-v100",
     "nodes": 1, "gpus_per_node": 8, "ranks_per_gpu": 1,
     "mapping": {"0": {"node": 0, "gpu": 3, "uuid": "GPU-...", "cpus": "0-19", "numa": 0,
                       "nic": "nic0", "netdev": "mlx5_0"}, ...},
     ... the figures that explain it: congestion before/after, per-link loads, solver ...}

The reader checks what a launch depends on (every rank placed once, node and GPU indices that are
non-negative integers, within ``nodes``) and names the document and field at fault. Everything
else in the document is kept as it is in :attr:`Mapping.doc`.

Standard library only, and no dataclasses: the exec wrapper imports this module from a bare
``python -S`` on every rank, before the program starts.
"""

from __future__ import annotations

import json
import re

from rankmap.errors import RankmapError
from rankmap.errors import counted
from rankmap.errors import shown as _show

FORMAT = "rankmap-mapping"
VERSION = 1
_ENTRY_KEYS = ("node", "gpu", "uuid", "cpus", "numa", "nic", "netdev")
#: what one node can have: a placement past these is damage, not a machine (the exec wrapper expands
#: a CPU list into a set and a NUMA node into a mask: they must stay small)
MAX_CPUS = 1 << 16
MAX_GPUS = 1 << 10
MAX_NUMA = 1 << 10
_CPU_LIST = re.compile(r"[0-9]{1,9}(-[0-9]{1,9})?(,[0-9]{1,9}(-[0-9]{1,9})?)*")


class RankPlacement:
    """Where one world rank runs: node index, GPU index on that node, and what lives near it."""

    __slots__ = ("rank",) + _ENTRY_KEYS

    def __init__(self, rank: int, node: int, gpu: int, uuid: str | None = None, cpus: str | None = None,
                 numa: int | None = None, nic: str | None = None, netdev: str | None = None):
        self.rank, self.node, self.gpu, self.uuid = rank, node, gpu, uuid
        self.cpus, self.numa, self.nic, self.netdev = cpus, numa, nic, netdev

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in _ENTRY_KEYS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RankPlacement) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self) -> str:
        return f"RankPlacement({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"


class Mapping:
    """A read mapping: the placement of every rank (``ranks[r]`` is world rank r) and the document."""

    __slots__ = ("world_size", "topology", "nodes", "gpus_per_node", "ranks_per_gpu", "ranks", "doc", "source")

    def __init__(self, *, world_size: int, topology: str | None, nodes: int, gpus_per_node: int | None,
                 ranks_per_gpu: int, ranks: list, doc: dict, source: str):
        self.world_size, self.topology, self.nodes = world_size, topology, nodes
        self.gpus_per_node, self.ranks_per_gpu, self.ranks = gpus_per_node, ranks_per_gpu, ranks
        self.doc, self.source = doc, source

    @property
    def gpu_of(self) -> list[int]:
        return [p.gpu for p in self.ranks]

    @property
    def node_of(self) -> list[int]:
        return [p.node for p in self.ranks]


def _fail(source: str, where: str, what: str) -> RankmapError:
    return RankmapError(f"{source}: {where}: {what}" if where else f"{source}: {what}")


def _int(v: object, source: str, where: str, minimum: int = 0, optional: bool = False) -> int | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise _fail(source, where, f"expected an integer >= {minimum}{' or null' if optional else ''}, got {_show(v)}")
    return v


def _str(v: object, source: str, where: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, (str, int)) or isinstance(v, bool):
        raise _fail(source, where, f"expected a string or null, got {_show(v)}")
    return str(v)


def _cpus(v: object, source: str, where: str) -> str | None:
    """A CPU list (``0-19,40-59``) whose CPUs are numbers a machine can have (below :data:`MAX_CPUS`),
    ranges in order: what the exec wrapper expands into a set."""
    s = _str(v, source, where)
    if s is None:
        return None
    if not _CPU_LIST.fullmatch(s):
        raise _fail(source, where, f"expected a CPU list such as \"0-19,40-59\", got {_show(v)}")
    for part in s.split(","):
        a, _, b = part.partition("-")
        lo, hi = int(a), int(b or a)
        if hi >= MAX_CPUS or lo > hi:
            raise _fail(source, where, f"CPUs {part} {'are not in order' if lo > hi else f'past the {MAX_CPUS} a machine can have'}")
    return s


def _entry(rank: int, e: object, source: str, where: str) -> RankPlacement:
    if not isinstance(e, dict):
        raise _fail(source, where, f"expected an object with node and gpu, got {_show(e)}")
    placed = RankPlacement(rank, _int(e.get("node", 0), source, f"{where}.node"),
                           _int(e.get("gpu"), source, f"{where}.gpu"),
                           _str(e.get("uuid"), source, f"{where}.uuid"), _cpus(e.get("cpus"), source, f"{where}.cpus"),
                           _int(e.get("numa"), source, f"{where}.numa", optional=True),
                           _str(e.get("nic"), source, f"{where}.nic"), _str(e.get("netdev"), source, f"{where}.netdev"))
    for k, top in (("gpu", MAX_GPUS), ("numa", MAX_NUMA)):
        v = getattr(placed, k)
        if v is not None and v >= top:
            raise _fail(source, f"{where}.{k}", f"{k} {v} is past the {top} a node can have")
    return placed


def from_dict(doc: object, source: str = "mapping") -> Mapping:
    """Check a mapping document (parsed JSON) and read its placement; ``source`` prefixes every error."""
    if not isinstance(doc, dict):
        raise _fail(source, "", f"expected a JSON object, got {_show(doc)}")
    if doc.get("format") != FORMAT:
        raise _fail(source, "format", f"expected {FORMAT!r}, got {_show(doc.get('format'))}: not a rankmap mapping")
    version = doc.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _fail(source, "version", f"expected an integer >= 1, got {_show(version)}")
    if version > VERSION:
        raise _fail(source, "version", f"version {version} is newer than this rankmap reads ({VERSION}); upgrade rankmap")
    entries = doc.get("mapping")
    if not isinstance(entries, dict) or not entries:
        raise _fail(source, "mapping", f"expected an object of rank -> placement, got {_show(entries)}")
    placed: dict[int, RankPlacement] = {}
    for k, e in entries.items():
        if not (isinstance(k, str) and k.isascii() and k.isdigit()):
            raise _fail(source, f"mapping[{k!r}]", "expected a world rank (a non-negative integer)")
        placed[int(k)] = _entry(int(k), e, source, f"mapping[{k!r}]")
    n = len(placed)
    ws = _int(doc.get("world_size", n), source, "world_size", 1)
    # the first rank left out is among the first n + 1 (n ranks are placed): never walk a world_size
    # of 10**18 to find it
    missing = next((r for r in range(min(ws, n + 1)) if r not in placed), None)
    if missing is not None or n != ws:
        first = missing if missing is not None else max(placed)
        raise _fail(source, "mapping", f"places {n} ranks but world_size is {ws} (rank {first} "
                                       f"{'missing' if missing is not None else 'is extra'})")
    nodes = _int(doc.get("nodes", 1), source, "nodes", 1)
    for p in placed.values():
        if p.node >= nodes:
            raise _fail(source, f"mapping['{p.rank}'].node", f"node {p.node} but the mapping spans {counted(nodes, 'node')}")
    topology = doc.get("topology")
    return Mapping(world_size=ws, topology=None if topology is None else str(topology), nodes=nodes,
                   gpus_per_node=_int(doc.get("gpus_per_node"), source, "gpus_per_node", 1, optional=True),
                   ranks_per_gpu=_int(doc.get("ranks_per_gpu", 1), source, "ranks_per_gpu", 1),
                   ranks=[placed[r] for r in range(ws)], doc=doc, source=source)


def _gpu_of_entry(e: object, where: str) -> tuple[int, object]:
    if isinstance(e, bool):
        raise RankmapError(f"{where}: expected a GPU index or an object with 'gpu', got {e!r}")
    if isinstance(e, int):
        return e, None
    if isinstance(e, dict):
        g = e.get("gpu", e.get("gpu_index", e.get("device")))
        if isinstance(g, int) and not isinstance(g, bool):
            return g, e.get("node", e.get("host"))
    raise RankmapError(f"{where}: expected a GPU index or an object with 'gpu', got {str(e)[:60]}")


def placement(doc: object, n: int, where: str = "mapping") -> tuple[list[int], list | None]:
    """Just the rank -> GPU (and node) placement of ``n`` ranks, from a mapping document or the
    plainer placements other tools and a job's metadata hold: (GPU per rank, node per rank or None).

    Accepted: a mapping document (above); ``{"ranks": [{"rank": r, "gpu": g, "node": ...}, ...]}``
    (rows may say ``world_rank``; without either the list position is the rank);
    ``{"gpu_of": [...], "node_of": [...]}``; ``{"<rank>": g | {"gpu": g}}``; a plain list; any of
    these under a ``"mapping"`` key. A rank left out is an error, named.
    """
    if isinstance(doc, dict) and doc.get("format") == FORMAT:
        m = from_dict(doc, where)
        if m.world_size < n:
            raise RankmapError(f"{where}: rank {m.world_size} has no GPU ({n - m.world_size} of {n} ranks missing)")
        return m.gpu_of[:n], m.node_of[:n]
    d = doc
    if isinstance(d, dict) and "mapping" in d and not ({"ranks", "gpu_of"} & set(d)):
        d = d["mapping"]
    gpu: dict[int, int] = {}
    node: dict[int, object] = {}
    if isinstance(d, dict) and isinstance(d.get("gpu_of"), list):
        for r, g in enumerate(d["gpu_of"]):
            gpu[r], _ = _gpu_of_entry(g, f"{where}.gpu_of[{r}]")
        for r, u in enumerate(d.get("node_of") or []):
            node[r] = u
    elif isinstance(d, list) or (isinstance(d, dict) and isinstance(d.get("ranks"), list)):
        for i, e in enumerate(d if isinstance(d, list) else d["ranks"]):
            r = i
            if isinstance(e, dict):
                rr = e.get("rank", e.get("world_rank", i))
                r = int(rr) if isinstance(rr, (int, str)) and str(rr).lstrip("-").isdigit() else i
            gpu[r], u = _gpu_of_entry(e, f"{where}.ranks[{i}]")
            if u is not None:
                node[r] = u
    elif isinstance(d, dict) and d and all(str(k).isdigit() for k in d):
        for k, e in d.items():
            gpu[int(k)], u = _gpu_of_entry(e, f"{where}[{k!r}]")
            if u is not None:
                node[int(k)] = u
    else:
        raise RankmapError(f"{where}: no rank -> GPU placement found (expected 'ranks', 'gpu_of' or a list)")
    missing = [r for r in range(n) if r not in gpu]
    if missing:
        raise RankmapError(f"{where}: rank {missing[0]} has no GPU ({len(missing)} of {n} ranks missing)")
    return [gpu[r] for r in range(n)], ([node.get(r) for r in range(n)] if node else None)


def loads(text: str, source: str = "mapping") -> Mapping:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise _fail(source, "", f"not valid JSON ({e})") from None
    except RecursionError:
        raise _fail(source, "", "not valid JSON (nested too deep)") from None
    return from_dict(doc, source)


def load(path: str) -> Mapping:
    """Read a mapping JSON file (the file names every error)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise RankmapError(f"cannot read mapping {path}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _fail(str(path), "", f"not a mapping JSON: not UTF-8 text (byte {e.start})") from None
    return loads(text, str(path))


def check_node(m: Mapping, gpus: int, name: str) -> None:
    """Every rank's GPU is one of the ``gpus`` of the node it runs on: a mapping made for another
    node (or edited by hand) must not launch with ``CUDA_VISIBLE_DEVICES=99``."""
    for p in m.ranks:
        if p.gpu >= gpus:
            raise RankmapError(f"{name}: mapping['{p.rank}'].gpu: GPU {p.gpu} but this node has "
                               f"{counted(gpus, 'GPU')} (0 to {gpus - 1})")


def dumps(doc: dict) -> str:
    """The mapping file's text: one rank and one link per line (formats.jsontext)."""
    from rankmap.formats.jsontext import dumps as text

    return text(doc)
