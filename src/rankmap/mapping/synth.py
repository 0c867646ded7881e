"""Small builders of node topologies for tests, benchmarks and what-if studies.

They describe well-known layouts from first principles (a hybrid cube-mesh, a two-socket PCIe tree, an
NVSwitch node) so that the placement code can be exercised and benchmarked with shapes that do not
depend on a recorded fixture. Where a fixture of a real system exists, prefer it.

``hier:...`` (:func:`parse_hierarchy`) describes a whole machine by levels, the way KaHIP's process
mapping and Scotch's ``tleaf`` targets do (``4x16x16:1,10,100``: 4 GPUs a group, 16 groups a node,
16 nodes; distances 1, 10, 100): the in-node levels become a switch tree whose link bandwidths make
every route's cost proportional to its distance, and the last level is the number of nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rankmap.errors import RankmapError
from rankmap.topology.model import Device, DeviceKind as K, Link, LinkKind as L, Topology

NVLINK2 = 25.0  # GB/s per direction per NVLink 2.0 link
PCIE3_X16 = 16.0
QPI = 19.2


def _pcie_tree(devs: list[Device], links: list[Link], gpus_per_switch: list[int], sockets: int,
               nics_per_switch: bool = True, cores_per_socket: int = 20) -> None:
    """Sockets joined by the CPU interconnect; per socket a host bridge with PCIe switches below."""
    gpu = 0
    nic = 0
    switches = len(gpus_per_switch)
    per_socket = switches // sockets
    for s in range(sockets):
        lo = s * cores_per_socket
        devs.append(Device(f"cpu{s}", K.CPU, s, attrs={"cpus": f"{lo}-{lo + cores_per_socket - 1}", "numa_node": s}))
        devs.append(Device(f"hb{s}", K.HOST_BRIDGE, s))
        links.append(Link(f"cpu{s}", f"hb{s}", L.PCIE, 32.0))
        if s:
            links.append(Link("cpu0", f"cpu{s}", L.CPU_INTERCONNECT, QPI))
    for w, n in enumerate(gpus_per_switch):
        s = w // per_socket
        devs.append(Device(f"sw{w}", K.PCIE_SWITCH, w))
        links.append(Link(f"hb{s}", f"sw{w}", L.PCIE, PCIE3_X16, generation=3, width=16))
        for _ in range(n):
            devs.append(Device(f"gpu{gpu}", K.GPU, gpu, attrs={"numa_node": s}))
            links.append(Link(f"sw{w}", f"gpu{gpu}", L.PCIE, PCIE3_X16, generation=3, width=16))
            gpu += 1
        if nics_per_switch:
            devs.append(Device(f"nic{nic}", K.NIC, nic, name=f"mlx5_{nic}", attrs={"bandwidth": 12.5}))
            links.append(Link(f"sw{w}", f"nic{nic}", L.PCIE, PCIE3_X16, generation=3, width=16))
            nic += 1


def cube_mesh_8(name: str = "cube-mesh-8") -> Topology:
    """The DGX-1 (V100) hybrid cube-mesh: two fully connected quads joined GPU i to i+4, some pairs
    doubled; PCIe switches of two GPUs, one NIC per switch, two sockets."""
    devs: list[Device] = []
    links: list[Link] = []
    _pcie_tree(devs, links, [2, 2, 2, 2], 2)
    nv = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2,
          (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}
    for (a, b), c in nv.items():
        links.append(Link(f"gpu{a}", f"gpu{b}", L.NVLINK, NVLINK2 * c, count=c, generation=2))
    return Topology(name, devs, links, source="rankmap.mapping.synth")


def pcie_tree(gpus_per_switch: list[int], sockets: int = 2, name: str | None = None,
              nvlink_pairs: dict[tuple[int, int], int] | None = None) -> Topology:
    """A PCIe tree (optionally with NVLink bridges between given GPU pairs)."""
    devs: list[Device] = []
    links: list[Link] = []
    _pcie_tree(devs, links, gpus_per_switch, sockets)
    for (a, b), c in (nvlink_pairs or {}).items():
        links.append(Link(f"gpu{a}", f"gpu{b}", L.NVLINK, NVLINK2 * c, count=c, generation=2))
    return Topology(name or f"pcie-{sum(gpus_per_switch)}gpu-{sockets}socket", devs, links,
                    source="rankmap.mapping.synth")


def nvswitch(n: int = 8, gbps: float = 300.0, name: str | None = None) -> Topology:
    """All GPUs on one NVSwitch fabric (modelled as one switch), two sockets, one NIC per GPU pair."""
    devs: list[Device] = []
    links: list[Link] = []
    _pcie_tree(devs, links, [2] * (n // 2), 2)
    devs.append(Device("nvswitch0", K.NVSWITCH, 0))
    for g in range(n):
        links.append(Link(f"gpu{g}", "nvswitch0", L.NVLINK, gbps, count=12, generation=3))
    return Topology(name or f"nvswitch-{n}", devs, links, source="rankmap.mapping.synth")


def builtin(name: str) -> Topology | None:
    """Synthetic topologies reachable by name (``synth:cube-mesh-8`` etc.)."""
    table = {
        "cube-mesh-8": cube_mesh_8,
        "pcie-8": lambda: pcie_tree([2, 2, 2, 2], 2, "pcie-8"),
        "pcie-12": lambda: pcie_tree([3, 3, 3, 3], 2, "pcie-12"),
        "pcie-16": lambda: pcie_tree([4, 4, 4, 4], 2, "pcie-16"),
        "pcie-16-nvbridge": lambda: pcie_tree([4, 4, 4, 4], 2, "pcie-16-nvbridge",
                                              {(0, 1): 2, (2, 3): 2, (4, 5): 2, (6, 7): 2, (8, 9): 2,
                                               (10, 11): 2, (12, 13): 2, (14, 15): 2}),
        "nvswitch-8": lambda: nvswitch(8),
        "nvswitch-16": lambda: nvswitch(16),
    }
    if name.startswith("hier:"):
        return hierarchy(parse_hierarchy(name[len("hier:"):]))
    f = table.get(name)
    return f() if f else None


def implied_nodes(name: str) -> int | None:
    """The number of nodes a synthetic machine names (the last level of ``hier:``), else None."""
    return parse_hierarchy(name[len("hier:"):]).nodes if name.startswith("hier:") else None


#: seconds per GB of route cost that one unit of a hierarchy's distance stands for (distance 1 between
#: the GPUs of one innermost group: two 100 GB/s links)
HIER_UNIT = 1.0 / 50.0


@dataclass(frozen=True)
class Hierarchy:
    """A machine described by levels, innermost first, as KaHIP and Scotch's ``tleaf`` describe one:
    ``arities[i]`` elements of level ``i`` form one of level ``i + 1``, and two GPUs whose closest
    common level is ``i`` are ``distances[i]`` apart. The last level counts nodes; the others are
    the switch tree inside a node."""

    arities: tuple[int, ...]
    distances: tuple[float, ...]

    @property
    def spec(self) -> str:
        return f"hier:{'x'.join(map(str, self.arities))}:{','.join(f'{d:g}' for d in self.distances)}"

    @property
    def nodes(self) -> int:
        return self.arities[-1]

    @property
    def gpus_per_node(self) -> int:
        return math.prod(self.arities[:-1])

    def bandwidths(self) -> tuple[list[float], float]:
        """GB/s of the links of each in-node level, and of the NIC's two links (its PCIe link and
        the network), chosen so that a route's cost (seconds per byte summed over its links) is
        ``distance x HIER_UNIT``: then total congestion is the distance-weighted sum of bytes,
        the objective KaHIP's process mapping minimises. A route between GPUs of common level
        ``i`` crosses every level up to ``i`` twice (up and down); one between nodes crosses every
        in-node level twice, then the NIC's PCIe link and its network link on both sides."""
        d = (0.0,) + self.distances
        levels = [2.0 / ((d[i + 1] - d[i]) * HIER_UNIT) for i in range(len(self.arities) - 1)]
        net = 4.0 / ((d[-1] - d[-2]) * HIER_UNIT)
        return levels, net


def parse_hierarchy(text: str) -> Hierarchy:
    """``A1xA2x...xAk:d1,d2,...,dk`` (``4x16x16:1,10,100``), innermost level first, as KaHIP's
    ``4:16:16`` and ``1:10:100``. Bad text is an error naming it."""
    where = f"synth:hier:{text}"
    parts = text.split(":")
    if len(parts) != 2:
        raise RankmapError(f"{where}: write the levels as AxBxC:DA,DB,DC, innermost first, e.g. "
                           f"synth:hier:4x16x16:1,10,100 (4 GPUs a group, 16 groups a node, 16 nodes)")
    ar, di = parts[0].split("x"), parts[1].split(",")
    try:
        arities = tuple(int(a) for a in ar)
        distances = tuple(float(x) for x in di)
    except ValueError:
        raise RankmapError(f"{where}: arities must be whole numbers and distances numbers") from None
    if len(arities) < 2:
        raise RankmapError(f"{where}: give at least two levels (GPUs per node, then nodes)")
    if len(distances) != len(arities):
        raise RankmapError(f"{where}: {len(arities)} levels but {len(distances)} distances")
    if any(a < 1 for a in arities) or math.prod(arities[:-1]) < 1:
        raise RankmapError(f"{where}: every arity must be at least 1")
    if math.prod(arities[:-1]) > 4096:
        raise RankmapError(f"{where}: {math.prod(arities[:-1])} GPUs per node; at most 4096 are supported")
    if not all(x > 0 for x in distances) or any(b <= a for a, b in zip(distances, distances[1:])):
        raise RankmapError(f"{where}: distances must be positive and grow outwards, got {','.join(di)}")
    return Hierarchy(arities, distances)


def hierarchy(h: Hierarchy) -> Topology:
    """One node of a :class:`Hierarchy`: GPUs under a tree of PCIe switches (one switch per element
    of each in-node level above the GPUs), the node's root a host bridge with the CPU and one NIC
    on it. Route costs follow the distances (:meth:`Hierarchy.bandwidths`)."""
    levels, net = h.bandwidths()
    inner = h.arities[:-1]
    devs: list[Device] = [Device("cpu0", K.CPU, 0, attrs={"cpus": "0-63", "numa_node": 0}),
                          Device("hb0", K.HOST_BRIDGE, 0)]
    links: list[Link] = [Link("cpu0", "hb0", L.PCIE, 4 * max(levels + [net]))]
    # build top-down: the root's children are elements of the outermost in-node level
    parents = ["hb0"]
    for depth in range(len(inner) - 1, 0, -1):
        nxt = []
        for p in parents:
            for _ in range(inner[depth]):
                sid = f"sw{depth}.{len(nxt)}"
                devs.append(Device(sid, K.PCIE_SWITCH, len(devs)))
                links.append(Link(p, sid, L.PCIE, levels[depth]))
                nxt.append(sid)
        parents = nxt
    g = 0
    for p in parents:
        for _ in range(inner[0]):
            devs.append(Device(f"gpu{g}", K.GPU, g, attrs={"numa_node": 0}))
            links.append(Link(p, f"gpu{g}", L.PCIE, levels[0]))
            g += 1
    devs.append(Device("nic0", K.NIC, 0, name="mlx5_0", attrs={"bandwidth": net}))
    links.append(Link("hb0", "nic0", L.PCIE, net))
    return Topology(h.spec, devs, links, source="rankmap.mapping.synth",
                    notes=[f"{h.nodes} nodes of {h.gpus_per_node} GPUs in levels {'x'.join(map(str, inner))}, "
                           f"distances {','.join(f'{d:g}' for d in h.distances)} (route cost = distance x "
                           f"{HIER_UNIT:g} s/GB)"])
