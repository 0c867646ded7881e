"""Bottleneck-driven refinement of a multi-node placement.

A node split is chosen by the bytes that cross nodes, not by the busiest link, so it can leave a rank
that receives from many remote ranks behind one NIC, or keep together host-staged pairs whose bytes
then share one PCIe uplink. This pass looks at the busiest directed links (for ``hop-bytes``, the
links carrying most bytes) and at the ranks that put bytes on them:

* bytes from or to other nodes (a NIC's network link, or the route from a GPU to its NIC): one of the
  rank's heaviest remote partners is pulled into the node, into a free slot if there is one, else in
  exchange for the node's rank least tied to the node;
* bytes between ranks of the node: the rank is pushed out to the node it exchanges most with, or to a
  node with a free slot, into a free slot or in exchange for that node's rank least tied to it.

Each trial re-solves only the two nodes involved (:class:`rankmap.mapping.cluster.Cluster`) and is
kept only when the whole placement gets better by the objective's key, so the pass never makes a
placement worse. Moves into free slots let node sizes become uneven when that helps.
"""

from __future__ import annotations

import time

import numpy as np

from rankmap.mapping.cluster import Cluster
from rankmap.mapping.objective import better


class _Adjacency:
    """Both directions of every rank pair, summed: who a rank talks to and how much."""

    def __init__(self, cl: Cluster) -> None:
        tr = cl.tr
        S = np.concatenate([tr.src, tr.dst])
        D = np.concatenate([tr.dst, tr.src])
        B = np.concatenate([tr.bytes, tr.bytes])
        o = np.argsort(S, kind="stable")
        self.nb, self.w = D[o], B[o]
        self.start = np.searchsorted(S[o], np.arange(tr.n + 1))

    def of(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.start[r], self.start[r + 1]
        return self.nb[a:b], self.w[a:b]

    def tie(self, r: int, node_of: np.ndarray, u: int) -> float:
        nb, w = self.of(r)
        return float(w[node_of[nb] == u].sum())


def refine(cl: Cluster, deadline: float, *, thorough: bool, node_budget: float, partners: int = 4,
           links: int = 3) -> int:
    """Improve the cluster's placement until ``deadline`` or no trial helps; returns accepted moves."""
    adj = _Adjacency(cl)
    accepted = 0
    tried: set[tuple] = set()
    while time.perf_counter() < deadline:
        improved = False
        for u, d in _targets(cl, links):
            for move in _moves(cl, adj, u, d, partners):
                if time.perf_counter() >= deadline:
                    return accepted
                sig = (move, cl.key())
                if sig in tried:
                    continue
                tried.add(sig)
                if _try(cl, move, thorough=thorough, node_budget=node_budget):
                    accepted += 1
                    improved = True
                    break
            if improved:
                break
        if not improved:
            break
    return accepted


def _targets(cl: Cluster, links: int) -> list[tuple[int, int]]:
    """(node, column) of the links to relieve, worst first."""
    L = cl.loads * cl.bw_bytes[None, :] if cl.objective == "hop-bytes" else cl.loads
    flat = np.argsort(-L, axis=None, kind="stable")[:links]
    return [tuple(int(x) for x in np.unravel_index(i, L.shape)) for i in flat if L.flat[i] > 0]


def _moves(cl: Cluster, adj: _Adjacency, u: int, d: int, partners: int):
    """Candidate moves ``(rank, to_node, swap_with or -1)`` relieving column ``d`` of node ``u``."""
    m = cl.m
    ranks = cl.members(u)
    if not len(ranks):
        return
    p = cl.problem(u, ranks)
    g = cl.gpu_of[ranks]
    D = m.D
    nic = np.asarray([k if k is not None else 0 for k in m.nic_of])
    # bytes each rank of u puts on column d: off-node (out/in) and in-node (as sender or receiver)
    if d < D:
        off = p.eout * m.ext_out_inc[g, d] + p.ein * m.ext_in_inc[g, d]
        pair = p.T * m.inc[g[:, None], g[None, :], d]
        if p.Th is not None:
            pair = pair + p.Th * m.hinc[g[:, None], g[None, :], d]
        inn = pair.sum(axis=1) + pair.sum(axis=0)
    else:
        k, down = divmod(d - D, 2)
        off = np.where(nic[g] == k, p.ein if down else p.eout, 0.0)
        inn = np.zeros(len(ranks))
    contrib = off + inn
    sizes = np.bincount(cl.node_of, minlength=cl.pf.nodes)
    for i in np.argsort(-contrib, kind="stable"):
        if contrib[i] <= 0:
            break
        r = int(ranks[i])
        nb, w = adj.of(r)
        remote = cl.node_of[nb] != u
        if off[i] > 0:
            # pull one of r's heaviest remote partners into u
            for q in nb[remote][np.argsort(-w[remote], kind="stable")][:partners]:
                q = int(q)
                if sizes[u] < cl.cap:
                    yield (q, u, -1)
                    continue
                s = _least_tied(cl, adj, ranks, exclude=r, stay=u, go=int(cl.node_of[q]))
                if s is not None:
                    yield (q, u, s)
        if inn[i] > 0:
            # push r out: to the nodes it talks to most, then to nodes with room
            dest: list[int] = []
            if remote.any():
                by = np.bincount(cl.node_of[nb[remote]], weights=w[remote], minlength=cl.pf.nodes)
                dest += [int(v) for v in np.argsort(-by, kind="stable") if by[v] > 0]
            dest += [int(v) for v in np.nonzero(sizes < cl.cap)[0] if v != u and v not in dest]
            for v in dest[:partners]:
                if sizes[v] < cl.cap:
                    yield (r, v, -1)
                    continue
                s = _least_tied(cl, adj, cl.members(v), exclude=-1, stay=v, go=u)
                if s is not None:
                    yield (r, v, s)


def _least_tied(cl: Cluster, adj: _Adjacency, ranks: np.ndarray, *, exclude: int, stay: int,
                go: int) -> int | None:
    """The rank of ``ranks`` that loses least (or gains most) by moving from node ``stay`` to ``go``."""
    best, best_gain = None, None
    for s in ranks:
        s = int(s)
        if s == exclude:
            continue
        gain = adj.tie(s, cl.node_of, go) - adj.tie(s, cl.node_of, stay)
        if best_gain is None or gain > best_gain:
            best, best_gain = s, gain
    return best


def _try(cl: Cluster, move: tuple[int, int, int], *, thorough: bool, node_budget: float) -> bool:
    """Apply ``move`` if it makes the placement better (both nodes re-solved); say whether it did."""
    r, v, s = move
    u = int(cl.node_of[r])
    if u == v or (s >= 0 and int(cl.node_of[s]) != v) or (s < 0 and np.count_nonzero(cl.node_of == v) >= cl.cap):
        return False
    before = cl.key()
    snap = cl.snapshot()
    gr = int(cl.gpu_of[r])
    cl.node_of[r] = v
    if s >= 0:
        cl.node_of[s] = u
        # the two ranks trade GPUs as a start for the node solves
        cl.gpu_of[r], cl.gpu_of[s] = cl.gpu_of[s], gr
    else:
        cl.gpu_of[r] = _free_gpu(cl, v, r)
    for w in (u, v):
        cl.place_node(w, node_budget, thorough=thorough)
    if better(cl.key(), before):
        return True
    cl.restore(snap)
    return False


def _free_gpu(cl: Cluster, v: int, r: int) -> int:
    """A GPU of node ``v`` with room left for rank ``r``."""
    others = cl.members(v)
    others = others[others != r]
    used = np.bincount(cl.gpu_of[others], minlength=cl.pf.G)
    return int(np.argmin(used))
