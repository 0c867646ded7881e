"""The placement view of a machine: GPU positions, directed links, and route incidence as arrays.

The topology layer answers "which hops does traffic from device A to device B take"; the solvers ask
that question millions of times. So a :class:`NodeModel` asks it once per GPU pair (and once per GPU
for its NIC) and keeps the answers as a dense incidence tensor ``inc[g, h, d]`` over *directed* links
``d``: a full-duplex link carries each direction at full bandwidth, so the two directions are two
independent resources. ``cpb[g, h, d] = inc / (bandwidth * 1e9)`` is the congestion (seconds) one
byte from GPU ``g`` to GPU ``h`` puts on ``d``; a mapping's link congestion is then a weighted sum of
``cpb`` slices, and moving one rank changes it by a sum of a few slices (what the heuristic's
incremental swaps and the exact solver's bounds rely on).

A :class:`Platform` is ``nodes`` copies of one node joined by a non-blocking network switch: each NIC
has one up- and one down-link to the switch. Off-node traffic leaves its GPU along the route to the
GPU's NIC, crosses the sender NIC's uplink and the receiver NIC's downlink, and enters along the
receiver's NIC route. The switch core is taken as non-blocking (a fat tree at full bisection), so
only NIC links can congest on the network side.

Host-staged bytes (an MPI without CUDA support: the application copies device -> host, the MPI moves
host memory, the receiver copies host -> device) do not take the GPU-to-GPU route. They go up from
the sending GPU to its local CPU (PCIe, or the NVLink to the CPU on POWER9/Grace), across the CPU
interconnect when the receiver's GPU hangs off another socket, and down to the receiving GPU. A
second incidence tensor ``hinc[g, h, d]`` (and ``hcpb``) describes that path for every GPU pair,
*including* ``g == h``: two ranks on one GPU that exchange host buffers still push the bytes up and
down that GPU's link to the host. Directed links that only host-staged routes use are appended after
the peer and NIC links, so the indices of the others do not depend on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from rankmap.errors import RankmapError
from rankmap.topology.model import Device, DeviceKind, LinkKind, Topology

#: Network bandwidth per NIC (GB/s per direction) when the topology does not say: 200 Gb/s.
DEFAULT_NIC_GBPS = 25.0


@dataclass
class NodeModel:
    """Route incidence of one node, indexed by GPU position (order of ``topo.gpus``)."""

    topo: Topology
    gpus: list[Device]
    dlinks: list[tuple[int, int]]  # (link index, 0 = a->b / 1 = b->a)
    bw: np.ndarray  # (D,) GB/s per direction
    inc: np.ndarray  # (G, G, D) uint8
    cpb: np.ndarray  # (G, G, D) seconds per byte
    nic_of: list[int | None]  # NIC position (in ``nics``) chosen for each GPU
    nics: list[Device]
    nic_bw: np.ndarray  # (NICs,) network GB/s per direction
    ext_out_inc: np.ndarray  # (G, D) 0/1: directed links from GPU g to its NIC (off-node traffic out)
    ext_in_inc: np.ndarray  # (G, D) 0/1: directed links from GPU g's NIC to g (off-node traffic in)
    notes: list[str] = field(default_factory=list)
    # host-staged routes (GPU -> local CPU -> [CPU interconnect] -> local CPU -> GPU), diagonal included
    hinc: np.ndarray | None = None  # (G, G, D) uint8 counts
    host_notes: list[str] = field(default_factory=list)  # only relevant when host-staged bytes exist
    # arrays the solvers derive from this model once and share among all its node problems
    solver_cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.hinc is None:  # a model built without host routes: host-staged bytes follow peer routes
            self.hinc = self.inc.copy()

    @property
    def G(self) -> int:
        return len(self.gpus)

    @property
    def D(self) -> int:
        return len(self.dlinks)

    @cached_property
    def ext_out(self) -> np.ndarray:
        """(G, D) seconds per byte that GPU g sends off the node puts on the in-node links."""
        return self.ext_out_inc / (self.bw * 1e9) if self.D else self.ext_out_inc

    @cached_property
    def ext_in(self) -> np.ndarray:
        return self.ext_in_inc / (self.bw * 1e9) if self.D else self.ext_in_inc

    def dlink_label(self, d: int) -> str:
        i, direction = self.dlinks[d]
        l = self.topo.links[i]
        a, b = (l.a, l.b) if direction == 0 else (l.b, l.a)
        return f"{a}->{b}"

    def dlink_kind(self, d: int) -> str:
        return self.topo.links[self.dlinks[d][0]].kind.value

    @cached_property
    def hcpb(self) -> np.ndarray:
        """(G, G, D) seconds per byte that a host-staged byte from GPU g to GPU h puts on each link."""
        return self.hinc / (self.bw * 1e9) if self.D else self.hinc.astype(float)

    @property
    def n_cols(self) -> int:
        """Columns of a node problem: the D directed links, then up/down of every NIC's network link."""
        return self.D + 2 * len(self.nic_bw)

    @cached_property
    def padded_cpb(self) -> np.ndarray:
        """(G, G, n_cols) ``cpb`` with zero network columns (GPU pairs stay in the node)."""
        out = np.zeros((self.G, self.G, self.n_cols))
        out[:, :, : self.D] = self.cpb
        return out

    @cached_property
    def padded_hcpb(self) -> np.ndarray:
        out = np.zeros((self.G, self.G, self.n_cols))
        out[:, :, : self.D] = self.hcpb
        return out

    @cached_property
    def padded_ext(self) -> tuple[np.ndarray, np.ndarray]:
        """(G, n_cols) seconds per byte of off-node traffic leaving / entering at each GPU: its NIC
        route, then its NIC's uplink (leaving) or downlink (entering)."""
        eo = np.zeros((self.G, self.n_cols))
        ei = np.zeros_like(eo)
        eo[:, : self.D] = self.ext_out
        ei[:, : self.D] = self.ext_in
        for g in range(self.G):
            k = self.nic_of[g] or 0
            eo[g, self.D + 2 * k] = 1.0 / (self.nic_bw[k] * 1e9)
            ei[g, self.D + 2 * k + 1] = 1.0 / (self.nic_bw[k] * 1e9)
        return eo, ei

    @cached_property
    def bw_bytes(self) -> np.ndarray:
        """(n_cols,) bandwidth of every column in bytes/s: congestion x this = bytes on the link."""
        return np.concatenate([self.bw, np.repeat(self.nic_bw, 2)]) * 1e9


def node_model(topo: Topology) -> NodeModel:
    """Build the incidence arrays of one node; raises if the topology has no GPU."""
    gpus = list(topo.gpus)
    if not gpus:
        raise RankmapError(f"topology {topo.name!r} has no GPU to place ranks on")
    G = len(gpus)
    routes = {}
    used: dict[tuple[int, int], int] = {}
    dlinks: list[tuple[int, int]] = []

    def dl(hop) -> int:
        l = topo.links[hop.link]
        key = (hop.link, 0 if hop.src == l.a else 1)
        if key not in used:
            used[key] = len(dlinks)
            dlinks.append(key)
        return used[key]

    for g in range(G):
        for h in range(G):
            if g != h:
                routes[g, h] = [dl(hp) for hp in topo.route(gpus[g].id, gpus[h].id).hops]
    nics = list(topo.nics)
    nic_of: list[int | None] = [None] * G
    nic_routes: dict[int, tuple[list[int], list[int]]] = {}
    notes: list[str] = []
    if nics:
        nic_of = _balanced_nics(topo, gpus, nics)
        for g in range(G):
            k = nic_of[g]
            if k is None:
                continue
            out = [dl(hp) for hp in topo.route(gpus[g].id, nics[k].id).hops]
            back = [dl(hp) for hp in topo.route(nics[k].id, gpus[g].id).hops]
            nic_routes[g] = (out, back)
    host_routes, host_notes = _host_routes(topo, gpus, routes, dl)
    D = len(dlinks)
    bw = np.array([topo.links[i].bandwidth for i, _ in dlinks], dtype=float)
    inc = np.zeros((G, G, D), dtype=np.uint8)
    for (g, h), ds in routes.items():
        inc[g, h, ds] = 1
    cpb = inc / (bw * 1e9) if D else inc.astype(float)
    hinc = np.zeros((G, G, D), dtype=np.uint8)
    for (g, h), ds in host_routes.items():
        np.add.at(hinc[g, h], ds, 1)  # counts: a link crossed twice carries the bytes twice
    ext_out = np.zeros((G, D))
    ext_in = np.zeros((G, D))
    for g, (out, back) in nic_routes.items():
        ext_out[g, out] = 1.0
        ext_in[g, back] = 1.0
    if nics:
        nic_bw = np.array([_nic_gbps(topo, n) for n in nics], dtype=float)
    else:
        nic_bw = np.array([DEFAULT_NIC_GBPS])
        nic_of = [0] * G
        notes.append(f"topology {topo.name!r} lists no NIC: off-node traffic is modelled through one "
                     f"{DEFAULT_NIC_GBPS:g} GB/s network port per node with no in-node route")
    return NodeModel(topo, gpus, dlinks, bw, inc, cpb, nic_of, nics, nic_bw, ext_out, ext_in, notes, hinc,
                     host_notes)


def _host_routes(topo: Topology, gpus: list[Device], routes: dict[tuple[int, int], list[int]],
                 dl) -> tuple[dict[tuple[int, int], list[int]], list[str]]:
    """Directed-link lists of the host-staged path for every GPU pair (diagonal included).

    Up from the sender to its local CPU, across to the receiver's local CPU (nothing when it is the
    same one), down to the receiver. A GPU whose local CPU the topology does not say cannot be routed
    that way: its pairs keep the peer route (and a GPU with itself then loads nothing), and a note
    says so, because the model is then optimistic about that GPU's host traffic."""
    G = len(gpus)
    cpu: list[Device | None] = [topo.local_cpu(g.id) for g in gpus]
    up: list[list[int]] = []
    down: list[list[int]] = []
    for g in range(G):
        c = cpu[g]
        up.append([dl(hp) for hp in topo.route(gpus[g].id, c.id).hops] if c is not None else [])
        down.append([dl(hp) for hp in topo.route(c.id, gpus[g].id).hops] if c is not None else [])
    across: dict[tuple[str, str], list[int]] = {}
    res: dict[tuple[int, int], list[int]] = {}
    for g in range(G):
        for h in range(G):
            cg, ch = cpu[g], cpu[h]
            if cg is None or ch is None:
                res[g, h] = list(routes.get((g, h), []))
                continue
            if cg.id != ch.id and (cg.id, ch.id) not in across:
                across[cg.id, ch.id] = [dl(hp) for hp in topo.route(cg.id, ch.id).hops]
            mid = across[cg.id, ch.id] if cg.id != ch.id else []
            res[g, h] = up[g] + mid + down[h]
    missing = [gpus[g].id for g in range(G) if cpu[g] is None]
    notes = []
    if missing:
        notes.append(f"no local CPU known for {', '.join(missing)}: host-staged bytes to or from "
                     f"{'it' if len(missing) == 1 else 'them'} are routed like peer-to-peer bytes")
    return res, notes


def _nic_gbps(topo: Topology, nic: Device) -> float:
    """Network GB/s of a NIC: its ``bandwidth``/``gbps`` attribute, a network link, else the default."""
    for key in ("bandwidth", "network_bandwidth"):
        v = nic.attrs.get(key)
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    v = nic.attrs.get("rate_gbps") or nic.attrs.get("gbps") or nic.attrs.get("speed_gbps")
    if isinstance(v, (int, float)) and v > 0:
        return float(v) / 8.0
    for _, l in topo.links_of(nic.id):
        if l.kind == LinkKind.NETWORK:
            return l.bandwidth
    return DEFAULT_NIC_GBPS


def _balanced_nics(topo: Topology, gpus: list[Device], nics: list[Device]) -> list[int | None]:
    """Nearest NIC per GPU; among equally near NICs, the least used so far (NICs shared evenly)."""
    order = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4, "NET": 5}
    load = [0] * len(nics)
    res: list[int | None] = []
    for g in gpus:
        best = None
        for k, n in enumerate(nics):
            try:
                r = topo.route(g.id, n.id)
            except RankmapError:
                continue
            bwk = min((topo.links[hp.link].bandwidth for hp in r.hops), default=0.0)
            key = (order.get(r.label, 9), len(r.hops), -bwk)
            if best is None or key < best[0]:
                best = (key, [k])
            elif key == best[0]:
                best[1].append(k)
        if best is None:
            res.append(None)
            continue
        k = min(best[1], key=lambda k: (load[k], k))
        load[k] += 1
        res.append(k)
    return res


@dataclass
class Platform:
    """``nodes`` copies of a node model behind one non-blocking switch.

    Directed-link numbering: node ``u``'s local link ``d`` is ``u * D + d``; NIC ``k`` of node ``u``
    has its uplink at ``nodes * D + 2 * (u * NICs + k)`` and its downlink right after it.
    """

    node: NodeModel
    nodes: int = 1

    @property
    def G(self) -> int:
        return self.node.G

    @property
    def slots_per_node(self) -> int:
        return self.node.G

    @property
    def n_links(self) -> int:
        return self.nodes * self.node.D + 2 * self.nodes * len(self.node.nic_bw)

    @cached_property
    def bw(self) -> np.ndarray:
        net = np.repeat(np.tile(self.node.nic_bw, self.nodes), 2)
        return np.concatenate([np.tile(self.node.bw, self.nodes), net])

    def net_index(self, u: int, k: int, down: bool) -> int:
        return self.nodes * self.node.D + 2 * (u * len(self.node.nic_bw) + k) + (1 if down else 0)

    def label(self, d: int) -> str:
        D = self.node.D
        if d < self.nodes * D:
            u, local = divmod(d, D)
            lab = self.node.dlink_label(local)
            return lab if self.nodes == 1 else f"node{u}:{lab}"
        rest = d - self.nodes * D
        u, r = divmod(rest, 2 * len(self.node.nic_bw))
        k, down = divmod(r, 2)
        nic = self.node.nics[k].id if self.node.nics else "net"
        return f"node{u}:{nic}->switch" if not down else f"switch->node{u}:{nic}"

    def kind(self, d: int) -> str:
        if d < self.nodes * self.node.D:
            return self.node.dlink_kind(d % self.node.D)
        return LinkKind.NETWORK.value


def gpu_cpus(topo: Topology, gpu: Device) -> str:
    """The CPU list local to a GPU (``"0-19,40-59"``), from the GPU or its socket; "" if unknown."""
    c = gpu.attrs.get("cpus") or gpu.attrs.get("cpu_affinity")
    if c:
        return str(c)
    cpu = topo.local_cpu(gpu.id)
    if cpu is not None:
        return str(cpu.attrs.get("cpus", ""))
    return ""


def gpu_numa(topo: Topology, gpu: Device) -> int | None:
    v = gpu.attrs.get("numa_node")
    if isinstance(v, int) and v >= 0:
        return v
    cpu = topo.local_cpu(gpu.id)
    if cpu is not None:
        v = cpu.attrs.get("numa_node", cpu.index if cpu.kind == DeviceKind.CPU else None)
        if isinstance(v, int) and v >= 0:
            return v
    return None
