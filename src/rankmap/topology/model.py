"""The topology model: devices, links, and the routes the hardware takes between them.

Like hwloc, the model keeps few object types and one way to walk them. A :class:`Topology`
is an undirected multigraph of :class:`Device` objects joined by full-duplex :class:`Link`
objects; every consumer (the cost model, the dashboard, the reports) asks it for a
:class:`Route`, a list of *directed* hops, and never re-derives routing on its own.

Routing follows what the hardware does for peer-to-peer traffic:

1. a direct NVLink bundle between two GPUs;
2. else a path through NVSwitch devices only (GPUs do not forward NVLink traffic);
3. else the PCIe tree: up to the lowest common PCIe switch or host bridge, across the CPU
   interconnect when the two ends hang off different sockets, and down again. A GPU attached
   to its CPU by NVLink (POWER9, Grace) takes that NVLink in this phase as it would PCIe.

Bandwidths are GB/s (1e9 bytes/s) per direction.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator

from rankmap.errors import RankmapError


class DeviceKind(str, Enum):
    """What a device is. Values are the strings of the JSON form."""

    GPU = "gpu"
    NVSWITCH = "nvswitch"
    PCIE_SWITCH = "pcie_switch"
    HOST_BRIDGE = "host_bridge"  # a PCIe root complex, attached to one CPU socket / NUMA node
    CPU = "cpu"  # a CPU socket or NUMA node: owns cores and memory
    NIC = "nic"
    NODE = "node"  # a whole node seen from the network (multi-node topologies)


class LinkKind(str, Enum):
    NVLINK = "nvlink"
    PCIE = "pcie"
    CPU_INTERCONNECT = "cpu_interconnect"  # QPI/UPI/Infinity Fabric/X-Bus between sockets
    NETWORK = "network"


@dataclass(frozen=True)
class Device:
    """One device. ``id`` is unique within a topology (``gpu0``, ``nvswitch0``, ``cpu1``, ``nic2``)."""

    id: str
    kind: DeviceKind
    index: int = 0
    name: str = ""
    # Free-form facts: pci_bus_id, uuid, numa_node, cpus (e.g. "0-31"), netdev, ... A missing key
    # means "unknown": sources never guess, they list the unknowns in Topology.unknowns.
    attrs: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Link:
    """A full-duplex link (or bonded bundle of links) between two devices.

    ``bandwidth`` is the nominal (or measured, see ``measured``) GB/s in *each* direction for
    the whole bundle: ``count`` NVLinks of ``bandwidth / count`` each.
    """

    a: str
    b: str
    kind: LinkKind
    bandwidth: float
    count: int = 1  # NVLinks in the bundle; PCIe lanes are in ``width``
    generation: int | None = None  # NVLink 1-5 or PCIe Gen 1-6
    width: int | None = None  # PCIe lanes
    measured: bool = False
    attrs: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def id(self) -> str:
        return f"{self.a}-{self.b}"

    def other(self, dev: str) -> str:
        return self.b if dev == self.a else self.a


@dataclass(frozen=True)
class Hop:
    """One directed traversal of a link: from ``src`` to ``dst`` over ``links[link]``."""

    link: int  # index into Topology.links
    src: str
    dst: str


@dataclass(frozen=True)
class Route:
    """The directed hops from one device to another, with the label nvidia-smi would print."""

    src: str
    dst: str
    hops: tuple[Hop, ...]
    label: str  # X, NV#, PIX, PXB, PHB, NODE, SYS, NET

    def devices(self) -> list[str]:
        return [self.src] + [h.dst for h in self.hops]


class TopologyError(RankmapError):
    """A topology that is malformed or inconsistent. The message names the culprit."""


class Topology:
    """A node (or a set of nodes) as a graph of devices and links."""

    def __init__(
        self,
        name: str,
        devices: Iterable[Device],
        links: Iterable[Link],
        *,
        source: str = "",
        notes: Iterable[str] = (),
        unknowns: Iterable[str] = (),
    ) -> None:
        self.name = name
        self.source = source  # where the facts come from (a URL, "live", a file name)
        self.notes = list(notes)
        self.unknowns = list(unknowns)  # facts the source could not establish, said plainly
        self.devices: dict[str, Device] = {}
        for d in devices:
            if d.id in self.devices:
                raise TopologyError(f"topology {name!r}: device id {d.id!r} appears twice")
            self.devices[d.id] = d
        self.links: list[Link] = list(links)
        for i, l in enumerate(self.links):
            for end in (l.a, l.b):
                if end not in self.devices:
                    raise TopologyError(f"topology {name!r}: links[{i}] names unknown device {end!r}")
            if l.a == l.b:
                raise TopologyError(f"topology {name!r}: links[{i}] joins {l.a!r} to itself")
            if not (l.bandwidth > 0):
                raise TopologyError(f"topology {name!r}: links[{i}] ({l.id}) has bandwidth {l.bandwidth!r}, must be > 0")
        self._adj: dict[str, list[int]] = {d: [] for d in self.devices}
        for i, l in enumerate(self.links):
            self._adj[l.a].append(i)
            self._adj[l.b].append(i)
        self._routes: dict[tuple[str, str], Route] = {}

    # ----- walking ---------------------------------------------------------------------
    def of_kind(self, kind: DeviceKind) -> list[Device]:
        return sorted((d for d in self.devices.values() if d.kind == kind), key=lambda d: (d.index, d.id))

    @cached_property
    def gpus(self) -> list[Device]:
        return self.of_kind(DeviceKind.GPU)

    @cached_property
    def nics(self) -> list[Device]:
        return self.of_kind(DeviceKind.NIC)

    @cached_property
    def cpus(self) -> list[Device]:
        return self.of_kind(DeviceKind.CPU)

    def gpu(self, index: int) -> Device:
        for g in self.gpus:
            if g.index == index:
                return g
        raise TopologyError(f"topology {self.name!r} has no GPU {index}")

    def links_of(self, dev: str) -> Iterator[tuple[int, Link]]:
        for i in self._adj[dev]:
            yield i, self.links[i]

    def neighbours(self, dev: str) -> Iterator[str]:
        for _, l in self.links_of(dev):
            yield l.other(dev)

    # ----- routing ---------------------------------------------------------------------
    def _host_link(self, l: Link) -> bool:
        """A link of the host side: PCIe, or an NVLink with a CPU at one end.

        POWER9 (Summit, Sierra) and Grace attach GPUs to the CPU over NVLink instead of PCIe;
        traffic between GPUs of different sockets then runs GPU-NVLink-CPU-X-Bus-CPU-NVLink-GPU,
        so the host-side phase of routing must walk those links like PCIe ones."""
        if l.kind == LinkKind.PCIE:
            return True
        return l.kind == LinkKind.NVLINK and DeviceKind.CPU in (self.devices[l.a].kind, self.devices[l.b].kind)

    def _bfs(self, src: str, dst: str, allowed_links: set[LinkKind], transit: set[DeviceKind],
             accept: Callable[[Link], bool] | None = None) -> list[Hop] | None:
        """Shortest path (fewest hops, then widest bottleneck) using only the given link kinds
        (or, with ``accept``, the links it accepts), passing only through devices of the
        ``transit`` kinds."""
        prev: dict[str, tuple[str, int] | None] = {src: None}
        q = deque([src])
        while q:
            u = q.popleft()
            if u == dst:
                break
            if u != src and self.devices[u].kind not in transit:
                continue
            # widest links first so that ties between parallel paths pick the fatter one
            for i, l in sorted(self.links_of(u), key=lambda il: -il[1].bandwidth):
                if not (accept(l) if accept else l.kind in allowed_links):
                    continue
                v = l.other(u)
                if v not in prev:
                    prev[v] = (u, i)
                    q.append(v)
        if dst not in prev:
            return None
        hops: list[Hop] = []
        cur = dst
        while prev[cur] is not None:
            u, i = prev[cur]  # type: ignore[misc]
            hops.append(Hop(i, u, cur))
            cur = u
        return hops[::-1]

    def route(self, src: str, dst: str) -> Route:
        """The route the hardware takes from device ``src`` to device ``dst`` (ids)."""
        key = (src, dst)
        if key in self._routes:
            return self._routes[key]
        for d in (src, dst):
            if d not in self.devices:
                raise TopologyError(f"topology {self.name!r} has no device {d!r}")
        if src == dst:
            r = Route(src, dst, (), "X")
        else:
            r = self._route(src, dst)
        self._routes[key] = r
        return r

    def _route(self, src: str, dst: str) -> Route:
        K = DeviceKind
        # 1. direct NVLink
        direct = [(i, l) for i, l in self.links_of(src) if l.kind == LinkKind.NVLINK and l.other(src) == dst]
        if direct:
            i, l = max(direct, key=lambda il: il[1].bandwidth)
            return Route(src, dst, (Hop(i, src, dst),), f"NV{l.count}")
        # 2. through NVSwitches only
        hops = self._bfs(src, dst, {LinkKind.NVLINK}, {K.NVSWITCH})
        if hops:
            first = self.links[hops[0].link]
            return Route(src, dst, tuple(hops), f"NV{first.count}")
        # 3. PCIe tree and CPU interconnect
        hops = self._bfs(src, dst, set(), {K.PCIE_SWITCH, K.HOST_BRIDGE, K.CPU},
                         accept=lambda l: l.kind == LinkKind.CPU_INTERCONNECT or self._host_link(l))
        if hops:
            return Route(src, dst, tuple(hops), self._pcie_label(hops))
        # 4. the network (multi-node topologies)
        hops = self._bfs(src, dst, set(LinkKind), {K.PCIE_SWITCH, K.HOST_BRIDGE, K.CPU, K.NIC, K.NODE, K.NVSWITCH})
        if hops:
            return Route(src, dst, tuple(hops), "NET")
        raise TopologyError(f"topology {self.name!r}: no route from {src} to {dst}")

    def _pcie_label(self, hops: list[Hop]) -> str:
        inner = [self.devices[h.dst].kind for h in hops[:-1]]
        if any(self.links[h.link].kind == LinkKind.CPU_INTERCONNECT for h in hops):
            return "SYS"
        bridges = inner.count(DeviceKind.HOST_BRIDGE)
        if bridges >= 2:
            return "NODE"
        if bridges == 1 or DeviceKind.CPU in inner:
            return "PHB"
        switches = inner.count(DeviceKind.PCIE_SWITCH)
        return "PIX" if switches <= 1 else "PXB"

    def bandwidth(self, src: str, dst: str) -> float:
        """Bottleneck GB/s per direction of the route from ``src`` to ``dst``."""
        r = self.route(src, dst)
        if not r.hops:
            return float("inf")
        return min(self.links[h.link].bandwidth for h in r.hops)

    def gpu_matrix(self) -> list[list[Route]]:
        """Routes between every GPU pair, indexed by position in :attr:`gpus`."""
        return [[self.route(a.id, b.id) for b in self.gpus] for a in self.gpus]

    def local_cpu(self, dev: str) -> Device | None:
        """The CPU socket / NUMA node nearest to a device along the PCIe tree (None if unknown)."""
        seen = {dev}
        q = deque([dev])
        while q:
            u = q.popleft()
            for _, l in self.links_of(u):
                if not self._host_link(l):
                    continue
                v = l.other(u)
                if v in seen:
                    continue
                if self.devices[v].kind == DeviceKind.CPU:
                    return self.devices[v]
                if self.devices[v].kind in (DeviceKind.PCIE_SWITCH, DeviceKind.HOST_BRIDGE):
                    seen.add(v)
                    q.append(v)
        return None

    def nearest_nic(self, gpu: str) -> Device | None:
        """The NIC with the best route from ``gpu``: fewest PCIe levels crossed, then bandwidth."""
        order = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4, "NET": 5}
        best = None
        for nic in self.nics:
            try:
                r = self.route(gpu, nic.id)
            except TopologyError:
                continue
            key = (order.get(r.label, 9), -self.bandwidth(gpu, nic.id), nic.index)
            if best is None or key < best[0]:
                best = (key, nic)
        return best[1] if best else None

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, {len(self.gpus)} GPUs, {len(self.devices)} devices, {len(self.links)} links)"
