"""The multi-node view of a job: its nodes, their NICs, the network, and the traffic between nodes.

A job whose ranks ran on several hosts is drawn as those hosts side by side under one network
switch. Where each rank ran is the placement of the topology view: its mapping's nodes, else the
host its record names, ranks of a host taking GPUs 0, 1, ... in world-rank order as launchers do. The bytes then follow the placement layer's
platform model: ``nodes`` copies of the drawn node behind a non-blocking switch, off-node bytes
leaving through the GPU's nearest NIC (``rankmap.mapping.platform``). No counter measures NIC
traffic here, so every figure of this view comes from the traffic model, over the whole job.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankmap.mapping.cost import Traffic, route_loads
from rankmap.mapping.platform import Platform
from rankmap.topology import Topology
from rankmap.web import topoview as V
from rankmap.web.utilisation import bands_of


def rank_hosts(ranks: list[dict], n: int) -> list[str | None]:
    """World rank -> the host its record names (None when no record of it says)."""
    host: list[str | None] = [None] * n
    for r in ranks:
        w = int(r["world_rank"])
        if 0 <= w < n and host[w] is None and r.get("host"):
            host[w] = str(r["host"])
    return host


def cluster_view(topo: Topology, traffic: Traffic, placement: V.Placement, duration_s: float,
                 thresholds: tuple[float, ...]) -> dict[str, Any]:
    """Nodes, NIC up/down loads and utilisation, and bytes between nodes, of a multi-host job
    (``traffic.host``: the host-staged part, routed via the host inside a node)."""
    n = traffic.n
    hosts = [str(h) if h is not None else None for h in (placement.node or [None] * n)][:n]
    names = sorted({h for h in hosts if h})
    out: dict[str, Any] = {"multi_node": len(names) > 1, "hosts": names, "source": "model",
                           "duration_s": duration_s, "thresholds": list(thresholds)}
    if len(names) < 2:
        return out
    model = V.model_of(topo)
    G = model.G
    node_of = np.array([names.index(h) if h else -1 for h in hosts], dtype=np.int64)
    pos = {g.index: i for i, g in enumerate(model.gpus)}
    gpu_pos = np.array([pos.get(g, 0) for g in placement.gpu[:n]], dtype=np.int64)
    known = node_of >= 0
    keep = known[traffic.src] & known[traffic.dst]
    src, dst, b = traffic.src[keep], traffic.dst[keep], traffic.bytes[keep]
    hb = traffic.host[keep] if traffic.host is not None else None
    platform = Platform(model, len(names))
    loads = route_loads(platform, Traffic.from_triples(n, src, dst, b, hb), node_of.clip(0), gpu_pos)
    secs = max(duration_s, 1e-9)
    D = model.D
    nodes = []
    for u, name in enumerate(names):
        local = loads[u * D:(u + 1) * D]
        util = local / (model.bw * 1e9 * secs) * 100 if D else np.zeros(0)
        nics = []
        for k, bw in enumerate(model.nic_bw):
            up = float(loads[platform.net_index(u, k, False)])
            down = float(loads[platform.net_index(u, k, True)])
            uu, ud = up / (bw * 1e9 * secs) * 100, down / (bw * 1e9 * secs) * 100
            nic = model.nics[k] if model.nics else None
            nics.append({"id": nic.id if nic else "net", "name": (nic.name if nic else "") or (nic.id if nic else "network port"),
                         "bandwidth": float(bw), "up_bytes": int(up), "down_bytes": int(down),
                         "up_util": round(uu, 4), "down_util": round(ud, 4),
                         "band": int(bands_of(np.array([max(uu, ud)]), thresholds)[0])})
        ranks_here = np.nonzero(node_of == u)[0]
        nodes.append({"name": name, "ranks": ranks_here.tolist(),
                      "gpus": {str(model.gpus[g].index): ranks_here[gpu_pos[ranks_here] == g].tolist()
                               for g in range(G)},
                      "nics": nics, "local_peak_util": round(float(util.max()), 4) if util.size else 0.0,
                      "local_bytes": int(local.sum())})
    H = len(names)
    pairs = np.zeros((H, H))
    np.add.at(pairs, (node_of[src], node_of[dst]), b)
    np.fill_diagonal(pairs, 0)
    out.update(nodes=nodes, node_bytes=pairs.astype(np.int64).tolist(), off_node_bytes=int(pairs.sum()),
               unplaced_ranks=np.nonzero(~known)[0].tolist(), notes=list(model.notes))
    return out
