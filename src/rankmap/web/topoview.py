"""What the dashboard draws of a topology: device positions, GPU pair routes, and link loads.

The drawing is computed here rather than in the browser so that it is one tested function:
the page only scales the coordinates and colours the links by the numbers given.

Loads follow the one routing rule of rankmap, the placement cost model's: peer-to-peer bytes travel
along ``Topology.route(gpu_a, gpu_b).hops``, host-staged bytes (sent from host memory) up to the
sender's CPU, across the CPU interconnect if need be and down to the receiver, also between two ranks
on one GPU; a hop adds the bytes to its link in the hop's direction. **Congestion** of a directed link is load / (bandwidth x 1e9) seconds, and a
placement is summed up by the maximum and the average congestion over the used directed
links (the figures ``rankmap map`` reports).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankmap.errors import RankmapError
from rankmap.mapping.cost import Traffic, route_loads
from rankmap.mapping.platform import Platform, node_model
from rankmap.topology import DeviceKind, Topology
from rankmap.formats import mapping_json
from rankmap.formats.topology_json import to_dict

# Rows from top to bottom. PCIe switches get one row per level of nesting (see _rows).
_ROW_OF_KIND = {DeviceKind.NODE: 0, DeviceKind.CPU: 1, DeviceKind.HOST_BRIDGE: 2}
_KIND_ORDER = {DeviceKind.GPU: 0, DeviceKind.NIC: 1}

SLOT_W = 84  # horizontal room per device, px in the drawing's own coordinates
ROW_H = 96
MARGIN = 48


def _switch_depths(topo: Topology) -> dict[str, int]:
    """Nesting level of each PCIe switch: 0 under a CPU or host bridge, +1 per switch above it."""
    depth: dict[str, int] = {}
    frontier = [d.id for d in topo.devices.values() if d.kind in (DeviceKind.CPU, DeviceKind.HOST_BRIDGE)]
    level = 0
    seen = set(frontier)
    while frontier:
        nxt = []
        for u in frontier:
            for v in topo.neighbours(u):
                if v in seen or topo.devices[v].kind != DeviceKind.PCIE_SWITCH:
                    continue
                seen.add(v)
                depth[v] = level
                nxt.append(v)
        frontier, level = nxt, level + 1
    for d in topo.devices.values():  # a switch hanging off nothing known still gets a row
        if d.kind == DeviceKind.PCIE_SWITCH:
            depth.setdefault(d.id, 0)
    return depth


def _rows(topo: Topology) -> list[list[str]]:
    """Devices grouped in layers: node, CPU, host bridge, PCIe switch levels, GPU+NIC, NVSwitch."""
    depth = _switch_depths(topo)
    n_sw = max(depth.values(), default=-1) + 1
    gpu_row = 3 + n_sw
    rows: dict[int, list[str]] = {}
    for d in topo.devices.values():
        if d.kind in _ROW_OF_KIND:
            r = _ROW_OF_KIND[d.kind]
        elif d.kind == DeviceKind.PCIE_SWITCH:
            r = 3 + depth[d.id]
        elif d.kind == DeviceKind.NVSWITCH:
            r = gpu_row + 1
        else:
            r = gpu_row
        rows.setdefault(r, []).append(d.id)
    return [rows[r] for r in sorted(rows)]


def layout(topo: Topology) -> dict[str, Any]:
    """Positions of every device, in layers, each layer ordered under the devices it hangs from.

    A device's place in its layer is the mean position of its neighbours in the layers above
    (the barycentre rule of layered graph drawing), which keeps a PCIe switch under its CPU and
    a GPU under its switch, so few links cross.
    """
    rows = _rows(topo)
    width = max(len(r) for r in rows) * SLOT_W if rows else SLOT_W
    pos: dict[str, tuple[float, float]] = {}
    for ri, row in enumerate(rows):
        def key(dev_id: str) -> tuple:
            d = topo.devices[dev_id]
            above = [pos[v][0] for v in topo.neighbours(dev_id) if v in pos]
            bary = sum(above) / len(above) if above else float("inf")
            # GPUs keep index order among equals; a device with no parent above goes last
            return (bary, _KIND_ORDER.get(d.kind, 2), d.index, d.id)

        ordered = sorted(row, key=key) if ri else sorted(row, key=lambda i: (topo.devices[i].index, i))
        slot = width / len(ordered)
        for i, dev_id in enumerate(ordered):
            pos[dev_id] = (MARGIN + slot * (i + 0.5), MARGIN + ROW_H * ri)
    arcs = arc_depths(topo, pos)
    return {
        "width": width + 2 * MARGIN,
        "height": ROW_H * (len(rows) - 1) + 2 * MARGIN + max(arcs.values(), default=0) + 24,
        "positions": {k: {"x": round(x, 1), "y": round(y, 1), "row": int((y - MARGIN) // ROW_H)}
                      for k, (x, y) in pos.items()},
        "arcs": {str(i): d for i, d in arcs.items()},
    }


ARC_BASE = 22   # px below the row of the shallowest arc
ARC_STEP = 12   # px between nested arcs


def arc_depths(topo: Topology, pos: dict[str, tuple[float, float]]) -> dict[int, int]:
    """How far below its row each link between two devices of one row dips (an NVLink mesh).

    Arcs are given lanes like intervals on a line: shortest first, each one lane deeper than any
    placed arc its span overlaps. Two arcs whose spans overlap therefore never run at the same
    depth, so no two are drawn on top of each other (they may cross, as the mesh does).
    """
    same_row = [(i, min(pos[l.a][0], pos[l.b][0]), max(pos[l.a][0], pos[l.b][0]))
                for i, l in enumerate(topo.links) if l.a in pos and l.b in pos and pos[l.a][1] == pos[l.b][1]]
    same_row.sort(key=lambda t: (t[2] - t[1], t[1]))
    lanes: dict[int, int] = {}
    placed: list[tuple[float, float, float, int]] = []  # (y, x0, x1, lane)
    for i, x0, x1 in same_row:
        y = pos[topo.links[i].a][1]
        over = [ln for (yy, a, b, ln) in placed if yy == y and a < x1 and x0 < b]
        lane = max(over, default=-1) + 1
        lanes[i] = lane
        placed.append((y, x0, x1, lane))
    return {i: ARC_BASE + ARC_STEP * ln for i, ln in lanes.items()}


def gpu_pairs(topo: Topology) -> dict[str, Any]:
    """Route label, bottleneck GB/s and directed hops between every GPU pair (by GPU index)."""
    gpus = topo.gpus
    labels, bw, routes = [], [], []
    for a in gpus:
        lrow, brow = [], []
        for b in gpus:
            r = topo.route(a.id, b.id)
            lrow.append(r.label)
            brow.append(None if a.id == b.id else topo.bandwidth(a.id, b.id))
            if a.id != b.id:
                routes.append({"a": a.index, "b": b.index, "label": r.label,
                               "hops": [{"link": h.link, "src": h.src, "dst": h.dst} for h in r.hops]})
        labels.append(lrow)
        bw.append(brow)
    return {"gpus": [g.index for g in gpus], "labels": labels, "bandwidth": bw, "routes": routes}


def topology_json(topo: Topology) -> dict[str, Any]:
    """The topology's JSON form plus the drawing and the GPU pair routes."""
    return {"topology": to_dict(topo), "layout": layout(topo), "pairs": gpu_pairs(topo)}


# ------------------------------------------------------------------------------ placements
@dataclass(frozen=True)
class Placement:
    """Where each world rank runs: GPU index, and node (None when the mapping does not say)."""

    gpu: list[int]
    node: list[Any] | None = None
    source: str = "default"  # 'default' (r mod G) or where the placement was read


def default_placement(n: int, n_gpus: int, hosts: list | None = None) -> Placement:
    """What a launcher does on its own: rank r on GPU r mod G; on a job that ran on several hosts
    (``hosts[r]``, as the ranks' records name them), the k-th rank of a host on its GPU k mod G."""
    if n_gpus <= 0:
        raise RankmapError("the topology has no GPU to place ranks on")
    if not hosts or len({h for h in hosts if h}) < 2:
        return Placement([r % n_gpus for r in range(n)], None, "default")
    seen: dict[Any, int] = {}
    gpu = []
    for r in range(n):
        h = hosts[r] if r < len(hosts) else None
        gpu.append(seen.get(h, 0) % n_gpus)
        seen[h] = seen.get(h, 0) + 1
    return Placement(gpu, [hosts[r] if r < len(hosts) else None for r in range(n)], "default per host")


def parse_placement(mapping: Any, n: int, where: str = "mapping") -> Placement:
    """The rank -> GPU placement of a stored mapping, read by the one mapping reader
    (:func:`rankmap.formats.mapping_json.placement`, which names the shapes it accepts)."""
    gpu, node = mapping_json.placement(mapping, n, where)
    return Placement(gpu, node, where)


# ------------------------------------------------------------------------------ loads
def on_node(traffic: Traffic, placement: Placement) -> tuple[Traffic, int]:
    """The pairs of ``traffic`` the drawing of one node shows (both ranks on one node of the
    placement, or every pair when it names no nodes), and the bytes of the others (off the node)."""
    n = traffic.n
    if len(placement.gpu) < n:
        raise RankmapError(f"the placement covers {len(placement.gpu)} ranks, the traffic has {n}")
    if not placement.node:
        return traffic, 0
    node = np.asarray(placement.node[:n], dtype=object)
    on = node[traffic.src] == node[traffic.dst]
    if on.all():
        return traffic, 0
    host = traffic.host[on] if traffic.host is not None else None
    kept = Traffic(n, traffic.src[on], traffic.dst[on], traffic.bytes[on], host if host is None or host.any() else None)
    return kept, int(traffic.bytes[~on].sum())


def link_loads(topo: Topology, traffic: Traffic, placement: Placement) -> dict[str, Any]:
    """Bytes on every directed link when ``traffic`` runs on ``placement``: routed by the cost model
    (:func:`directed_loads`), its host-staged part (``traffic.host``) via the host.

    Peer-to-peer pairs on the same GPU cross no link; pairs the placement puts on different nodes
    leave this node's drawing (their bytes are counted in ``off_node_bytes``).
    """
    gpus = {g.index: g.id for g in topo.gpus}
    n = traffic.n
    shown, off_node = on_node(traffic, placement)
    for r, g in enumerate(placement.gpu[:n]):
        if g not in gpus:
            raise RankmapError(f"{placement.source}: rank {r} is on GPU {g}, which topology "
                               f"{topo.name!r} does not have (GPUs {sorted(gpus)})")
    gpu = np.asarray(placement.gpu[:n], dtype=np.int64)
    b = shown.bytes
    hb = shown.host if shown.host is not None else np.zeros_like(b)
    same = gpu[shown.src] == gpu[shown.dst]
    # peer bytes between ranks on one GPU stay on it; host-staged ones go up to the host and back
    same_gpu = int((b - hb)[same].sum())
    routed = int(b.sum()) - same_gpu
    loads = directed_loads(topo, shown, gpu)
    bw = np.array([l.bandwidth for l in topo.links], dtype=np.float64) * 1e9
    cong = loads / bw[:, None] if len(bw) else loads
    used = loads > 0
    links = []
    for i, l in enumerate(topo.links):
        links.append({"link": i, "a": l.a, "b": l.b, "load_ab": int(loads[i, 0]), "load_ba": int(loads[i, 1]),
                      "congestion_ab": float(cong[i, 0]), "congestion_ba": float(cong[i, 1])})
    return {
        "placement": {"gpu": list(placement.gpu[:n]), "node": placement.node[:n] if placement.node else None,
                      "source": placement.source},
        "links": links,
        "max_congestion": float(cong.max()) if used.any() else 0.0,
        "avg_congestion": float(cong[used].mean()) if used.any() else 0.0,
        "routed_bytes": routed, "same_gpu_bytes": same_gpu, "off_node_bytes": off_node,
        "host_staged_bytes": int(hb.sum()),
    }


_MODELS: "weakref.WeakKeyDictionary[Topology, Any]" = weakref.WeakKeyDictionary()


def model_of(topo: Topology) -> Any:
    """The placement layer's route incidence of ``topo``, built once per topology object."""
    m = _MODELS.get(topo)
    if m is None:
        m = _MODELS[topo] = node_model(topo)
    return m


def gpu_positions(topo: Topology, gpu: np.ndarray) -> np.ndarray:
    """GPU index (as a placement names it) -> position in the cost model's GPU order."""
    model = model_of(topo)
    pos = np.zeros(max(g.index for g in model.gpus) + 1, dtype=np.int64)
    for i, g in enumerate(model.gpus):
        pos[g.index] = i
    return pos[np.asarray(gpu, dtype=np.int64)]


def directed_loads(topo: Topology, traffic: Traffic, gpu: np.ndarray, group: np.ndarray | None = None,
                   groups: int = 1) -> np.ndarray:
    """Bytes per link and direction, ``(links, 2)`` ([:, 0] a->b), of ``traffic`` (all on this node)
    when rank r runs on GPU index ``gpu[r]``: :func:`rankmap.mapping.cost.route_loads`, the one
    routing rule, read back onto the drawn links. With ``group`` (a group per row of ``traffic``)
    ``(groups, links, 2)``, each group's rows on their own (see ``route_loads``)."""
    model = model_of(topo)
    n = traffic.n
    per = route_loads(Platform(model), traffic, np.zeros(n, dtype=np.int64), gpu_positions(topo, gpu[:n]),
                      group, groups)
    per = per.reshape(groups if group is not None else 1, -1)
    loads = np.zeros((per.shape[0], len(topo.links), 2), dtype=np.float64)
    for d, (link, direction) in enumerate(model.dlinks):
        loads[:, link, direction] = per[:, d]
    return loads if group is not None else loads[0]


def placement_for(topo: Topology, n: int, mapping: Any | None, where: str, hosts: list | None = None) -> Placement:
    """The mapping's placement when there is one, else the default (per host, when ``hosts`` differ)."""
    if mapping is None:
        return default_placement(n, len(topo.gpus), hosts)
    return parse_placement(mapping, n, where)


def ranks_on_gpus(placement: Placement, n: int) -> dict[int, list[int]]:
    """GPU index -> the world ranks placed on it (the labels of the drawing)."""
    out: dict[int, list[int]] = {}
    for r, g in enumerate(placement.gpu[:n]):
        out.setdefault(g, []).append(r)
    return out


def congestion_summary(before: dict, after: dict) -> dict[str, float | None]:
    """Before/after figures and the relative drop of the maximum congestion."""
    mb, ma = before["max_congestion"], after["max_congestion"]
    return {"max_before": mb, "avg_before": before["avg_congestion"], "max_after": ma,
            "avg_after": after["avg_congestion"], "max_reduction": (1 - ma / mb) if mb > 0 else None}
