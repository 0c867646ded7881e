"""Ranks -> nodes: the candidate node splits a multi-node placement starts from.

No single split is right for every job. Balancing ranks over the nodes spreads NIC load, but can cut
a group that fits on one node: 12 ranks in three rows of 4 that talk only within their row fit as
8 + 4 on two 8-GPU nodes with no byte crossing the network, while any 6 + 6 split cuts a row. So
several splits are built, each one is placed (node by node) and scored with the real cost model,
and the best is kept:

* ``default``: blocks of G x K ranks per node, what launchers do; always a candidate, so a placement
  that keeps it can only be as good as the default or better;
* ``METIS balanced``: METIS on the traffic graph, then an exact balance fix-up
  (``ceil(n/N)`` or ``floor(n/N)`` ranks per node);
* ``METIS packed``: as few nodes as the ranks need, each filled to its G x K slots (the default's
  sizes, with METIS choosing who goes where);
* ``METIS recursive``: balanced by recursive bisection, which cuts far less than the k-way scheme
  into a few large nodes (up to ``RECURSIVE_MAX_NODES``);
* ``METIS free``: any sizes that fit the slots (METIS's imbalance tolerance opened up to the
  capacity), where METIS decides how uneven to be.

Edge weights say what keeping a pair on one node saves, per kind of byte, the way the bytes travel
(:func:`edge_weights`): a peer-to-peer byte kept in a node takes an NVLink or PCIe route instead of
GPU -> NIC -> network -> NIC -> GPU, a host-staged byte kept in a node still goes up to the host and
down again, so it saves less. Weighing both alike (as bytes) would keep host-staged pairs together
that save little, and leave the PCIe links they share as the bottleneck.
"""

from __future__ import annotations

import numpy as np

from rankmap.errors import RankmapError
from rankmap.mapping.cost import Traffic
from rankmap.mapping.partition import graph_parts
from rankmap.mapping.platform import NodeModel, Platform


#: up to this many nodes the recursive-bisection split is tried too (beyond, METIS's k-way cuts less)
RECURSIVE_MAX_NODES = 256


def edge_weights(m: NodeModel, objective: str = "max") -> tuple[float, float]:
    """(per peer-to-peer byte, per host-staged byte) saving of keeping a pair on one node.

    Costs are summed along routes, per byte: congestion (1 / bandwidth) for the congestion
    objectives, one per link for hop-bytes; averaged over the node's GPUs and GPU pairs. The saving
    is the off-node route's cost less the in-node route's, never below 5 % of the off-node cost (a pair
    kept together never costs more than sending it over the network and back in this model)."""
    G = m.G
    nn = len(m.nic_bw)
    if objective == "hop-bytes":
        c, c_net = np.ones(m.D), np.ones(nn)
    else:
        c, c_net = 1.0 / (m.bw * 1e9), 1.0 / (m.nic_bw * 1e9)
    nic = np.asarray([k if k is not None else 0 for k in m.nic_of])
    off = float((m.ext_out_inc @ c).mean() + (m.ext_in_inc @ c).mean() + 2 * c_net[nic].mean())
    pairs = ~np.eye(G, dtype=bool)
    if G > 1:
        peer = float((m.inc.astype(float) @ c)[pairs].mean())
        host = float((m.hinc.astype(float) @ c)[pairs].mean())
    else:
        peer, host = 0.0, float((m.hinc.astype(float) @ c).mean())
    floor = 0.05 * off
    return max(off - peer, floor), max(off - host, floor)


def candidates(tr: Traffic, pf: Platform, K: int, *, seed: int = 0, objective: str = "max",
               tries: int = 1) -> list[tuple[str, np.ndarray]]:
    """Distinct node splits to try, the default first; each names its method. ``tries``: seeds of the
    recursive bisection (its result varies with the seed far more than the k-way one's)."""
    n, N = tr.n, pf.nodes
    cap = pf.G * K
    if n > N * cap:
        raise RankmapError(f"{n} ranks do not fit on {N} nodes of {cap} slots")
    out: list[tuple[str, np.ndarray]] = [("default", np.arange(n) // cap)]
    wp, wh = edge_weights(pf.node, objective)
    us, ud, wi = tr.symmetric_edges(peer_weight=wp, host_weight=wh)
    if len(wi):
        xadj = np.zeros(n + 1, dtype=np.int64)
        np.add.at(xadj, us + 1, 1)
        xadj = np.cumsum(xadj)
        g = (xadj, ud, wi)
        balanced = np.full(N, n // N)
        balanced[: n % N] += 1
        used = -(-n // cap)
        packed = np.zeros(N, dtype=np.int64)
        packed[:used] = cap
        packed[used - 1] = n - cap * (used - 1)
        out.append(("METIS balanced", graph_parts(g, n, balanced, exact=True, seed=seed)))
        if not np.array_equal(np.sort(packed), np.sort(balanced)):
            out.append(("METIS packed", graph_parts(g, n, packed, exact=True, seed=seed)))
        if N <= RECURSIVE_MAX_NODES:
            # into a few large nodes recursive bisection cuts far less on grids (partition.graph_parts)
            for k in range(tries):
                name = "METIS recursive" + (f" (seed {seed + k})" if k else "")
                out.append((name, graph_parts(g, n, balanced, exact=True, seed=seed + k, recursive=True)))
        if N * cap > n:
            out.append(("METIS free", graph_parts(g, n, np.full(N, cap), exact=False, seed=seed)))
    seen: set[bytes] = set()
    res = []
    for name, parts in out:
        c = canonical(parts)
        if c.tobytes() not in seen:
            seen.add(c.tobytes())
            res.append((name, c))
    return res


def canonical(parts: np.ndarray) -> np.ndarray:
    """Nodes renumbered by their lowest rank (all nodes are alike, so the labels carry nothing)."""
    parts = np.asarray(parts, dtype=np.int64)
    _, first = np.unique(parts, return_index=True)
    order = np.argsort(first, kind="stable")
    labels = np.unique(parts)[order]
    rename = np.empty(int(parts.max()) + 1, dtype=np.int64)
    rename[labels] = np.arange(len(labels))
    return rename[parts]
