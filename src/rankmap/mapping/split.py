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
  capacity), where METIS decides how uneven to be;
* ``METIS multisection`` (:func:`multisection`, with GPUs; nodes above the exact search's size): one
  recursive bisection of the whole job into its slots, nodes and their switch groups as ranges;
* ``chain order`` (:func:`chain`, with GPUs): where every rank talks to at most two others (rings and
  paths), the ranks in order along them, in blocks.

Each METIS split is also tried refined by pairwise swaps (:mod:`rankmap.mapping.swaps`, ``+ swaps``):
the swaps lower the bytes between nodes, which is not always what relieves the busiest link; for the
congestion objectives each of those also with its most cut node levelled down (``, levelled``:
:func:`rankmap.mapping.swaps.level_cut`), for nodes whose one NIC carries all their bytes off the node.

Edge weights say what keeping a pair on one node saves, per kind of byte, the way the bytes travel
(:func:`edge_weights`): a peer-to-peer byte kept in a node takes an NVLink or PCIe route instead of
GPU -> NIC -> network -> NIC -> GPU, a host-staged byte kept in a node still goes up to the host and
down again, so it saves less. Weighing both alike (as bytes) would keep host-staged pairs together
that save little, and leave the PCIe links they share as the bottleneck.
"""

from __future__ import annotations

import time

import numpy as np

from rankmap.errors import RankmapError
from rankmap.mapping.cost import Traffic
from rankmap.mapping.multilevel import gpu_path, gpu_tree, leaves
from rankmap.mapping.partition import graph_parts
from rankmap.mapping.platform import NodeModel, Platform
from rankmap.mapping.swaps import cut, level_cut, refine_cut


#: up to this many nodes the recursive-bisection split is tried too (beyond, METIS's k-way cuts less)
RECURSIVE_MAX_NODES = 256

#: seeds of the recursive bisection computed when several are to be tried (the best kept by cut)
RECURSIVE_SEEDS = 16


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
               tries: int = 1, deadline: float | None = None) -> list[tuple[str, np.ndarray]]:
    """Distinct node splits to try, the default first; each names its method. ``tries``: seeds of the
    recursive bisection (its result varies with the seed far more than the k-way one's); ``deadline``:
    when the swap refinement of METIS's splits stops (:mod:`rankmap.mapping.swaps`)."""
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
        metis = [("METIS balanced", graph_parts(g, n, balanced, exact=True, seed=seed, swaps=False))]
        if not np.array_equal(np.sort(packed), np.sort(balanced)):
            metis.append(("METIS packed", graph_parts(g, n, packed, exact=True, seed=seed, swaps=False)))
        if N <= RECURSIVE_MAX_NODES:
            # into a few large nodes recursive bisection cuts far less on grids (partition.graph_parts)
            # its result varies with the seed: of RECURSIVE_SEEDS seeds (fewer when the deadline is
            # half gone), the ``tries`` that cut least (a shuffled 16x8x8 grid into 16 nodes: 448 to
            # 523 edges by seed, 448 the optimum, reached by 3 seeds of 20)
            half = None if deadline is None else time.perf_counter() + 0.5 * (deadline - time.perf_counter())
            rec = []
            for k in range(max(tries, RECURSIVE_SEEDS if tries > 1 else 1)):
                if k >= tries and half is not None and time.perf_counter() >= half:
                    break
                parts = graph_parts(g, n, balanced, exact=True, seed=seed + k, recursive=True, swaps=False)
                rec.append((cut(xadj, ud, wi, parts), k, parts))
            for _, k, parts in sorted(rec, key=lambda x: (x[0], x[1]))[:tries]:
                metis.append(("METIS recursive" + (f" (seed {seed + k})" if k else ""), parts))
        if N * cap > n:
            metis.append(("METIS free", graph_parts(g, n, np.full(N, cap), exact=False, seed=seed, swaps=False)))
        out += metis
        # each also refined by swaps: a lower cut, not always a less busy link, so both are candidates
        for i, (name, parts) in enumerate(metis):
            # each split its share of the time left
            end = None if deadline is None else time.perf_counter() + (deadline - time.perf_counter()) / (len(metis) - i)
            out.append((f"{name} + swaps", refine_cut(xadj, ud, wi, parts, deadline=end, kl=end is not None)))
        if objective != "hop-bytes":
            # for the busiest link: the swapped splits with their most cut node levelled down
            out += [(f"{name}, levelled", level_cut(xadj, ud, wi, parts, deadline=deadline))
                    for name, parts in out[-len(metis):]]
    seen: set[bytes] = set()
    res = []
    for name, parts in out:
        c = canonical(parts)
        if c.tobytes() not in seen:
            seen.add(c.tobytes())
            res.append((name, c))
    return res


def chain(tr: Traffic, pf: Platform, K: int, objective: str = "max") -> tuple[np.ndarray, np.ndarray] | None:
    """(node, GPU position) of every rank when the traffic graph is rings and paths (no rank talks
    to more than two others), else None: the ranks in order along each ring or path, cut into
    blocks of the balanced node sizes, each block's ranks on the node's GPUs in that order, along
    the GPUs' cheapest path (:func:`rankmap.mapping.multilevel.gpu_path`).

    A ring in a shuffled order is the case: every node then holds one stretch of it and has two
    edges off the node, the least any split of a ring can have, where METIS's split of 4096 ranks
    into 512 nodes left some nodes four. The nodes' problems are all alike in GPU order, so the
    node solver's cache (:meth:`rankmap.mapping.cluster.Cluster.place_node`) solves one of them."""
    n, N = tr.n, pf.nodes
    us, ud, _ = tr.symmetric_edges()
    if n < 3 or not len(us):
        return None
    deg = np.bincount(us, minlength=n)
    if deg.max() > 2:
        return None
    start = np.searchsorted(us, np.arange(n + 1))
    seen = np.zeros(n, dtype=bool)
    order: list[int] = []
    # paths from their ends first, then the rings, each from its lowest rank
    for r in [int(x) for x in np.nonzero(deg <= 1)[0]] + list(range(n)):
        if seen[r]:
            continue
        prev, cur = -1, r
        while cur >= 0 and not seen[cur]:
            seen[cur] = True
            order.append(cur)
            nxt = [int(x) for x in ud[start[cur]:start[cur + 1]] if x != prev and not seen[x]]
            prev, cur = cur, (nxt[0] if nxt else -1)
    balanced = np.full(N, n // N)
    balanced[: n % N] += 1
    cap = pf.G * K
    if balanced.max() > cap:
        return None
    pos = np.empty(n, dtype=np.int64)
    pos[np.asarray(order)] = np.arange(n)
    node_at = np.repeat(np.arange(N), balanced)
    local_at = np.arange(n) - np.repeat(np.cumsum(balanced) - balanced, balanced)
    return node_at[pos], gpu_path(pf.node, objective)[local_at[pos] // K]


def multisection(tr: Traffic, pf: Platform, K: int, *, seed: int = 0, objective: str = "max",
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """(node, GPU position) of every rank from one recursive bisection of the whole job into its
    slots (one rank a part), or None unless the ranks fill the nodes: the parts of METIS's
    recursive bisection are numbered so that a bisection's two halves are two ranges, so with
    nodes of 2^k slots each node's ranks are one range, and each group of the node's switch tree
    one range within it (the slots taken in the tree's leaf order, :func:`rankmap.mapping.multilevel.leaves`).
    A placement along the whole hierarchy in one call (20 ms for 1024 ranks on 16 nodes of 64 GPUs),
    for large nodes, where splitting each node along its tree takes ~8 ms a node."""
    n, N = tr.n, pf.nodes
    cap = pf.G * K
    if n != N * cap or n < 2:
        return None
    wp, wh = edge_weights(pf.node, objective)
    us, ud, wi = tr.symmetric_edges(peer_weight=wp, host_weight=wh)
    if not len(wi):
        return None
    xadj = np.searchsorted(us, np.arange(n + 1))
    slot = graph_parts((xadj, ud, wi), n, np.ones(n, dtype=np.int64), exact=True, seed=seed, fixed=True,
                       recursive=True, swaps=False)
    order = np.asarray(leaves(gpu_tree(pf.node)), dtype=np.int64)
    return slot // cap, order[(slot % cap) // K]


def canonical(parts: np.ndarray) -> np.ndarray:
    """Nodes renumbered by their lowest rank (all nodes are alike, so the labels carry nothing)."""
    parts = np.asarray(parts, dtype=np.int64)
    _, first = np.unique(parts, return_index=True)
    order = np.argsort(first, kind="stable")
    labels = np.unique(parts)[order]
    rename = np.empty(int(parts.max()) + 1, dtype=np.int64)
    rename[labels] = np.arange(len(labels))
    return rename[parts]
