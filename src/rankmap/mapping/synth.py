"""Small builders of node topologies for tests, benchmarks and what-if studies.

They describe well-known layouts from first principles (a hybrid cube-mesh, a two-socket PCIe tree, an
NVSwitch node) so that the placement code can be exercised and benchmarked with shapes that do not
depend on a recorded fixture. Where a fixture of a real system exists, prefer it.
"""

from __future__ import annotations

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
    f = table.get(name)
    return f() if f else None
