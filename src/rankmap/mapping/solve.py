"""Placement entry point: ranks -> (node, GPU, CPUs, NIC) for one node or many.

One node: the tabu heuristic first (a good upper bound in milliseconds), then branch and bound from it
when the node has at most ``exact_max_gpus`` GPUs; ``optimal`` is true only when the search finished.

Several nodes: ranks are split into nodes by graph partitioning (METIS through pymetis, edge weight =
bytes exchanged in both directions), then rebalanced to an exact number of ranks per node; each node is
then solved on its own, with the bytes its ranks exchange with other nodes charged to the route from
their GPU to its NIC and to that NIC's network links. Finally :mod:`rankmap.mapping.refine` swaps
ranks between nodes where off-node traffic makes the busiest link. The node split is a heuristic, so a
multi-node mapping is never reported as proven optimal (each node's share may be, and ``info`` says
how many).

Host-staged bytes (``Traffic.host``) are routed GPU -> host -> GPU inside a node and, like all other
off-node bytes, through the NIC across nodes; the node split weighs all bytes alike.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import numpy as np

from rankmap.errors import RankmapError
from rankmap.mapping.automorph import Symmetry
from rankmap.mapping.cost import Score, Traffic, as_traffic, default_mapping, evaluate
from rankmap.mapping.exact import _lt, solve_exact
from rankmap.mapping.heuristic import solve_heuristic
from rankmap.mapping.platform import Platform, gpu_cpus, gpu_numa
from rankmap.mapping.problem import NodeProblem


@dataclass
class Placement:
    platform: Platform
    node_of: np.ndarray
    gpu_of: np.ndarray  # GPU position in platform.node.gpus
    score: Score
    default: Score
    optimal: bool
    solver: str
    seconds: float
    info: dict = field(default_factory=dict)
    # how much of the traffic was host-staged, and how much of that the model routed via the host
    staging: dict = field(default_factory=dict)

    def rank_entry(self, r: int) -> dict:
        m = self.platform.node
        g = int(self.gpu_of[r])
        gpu = m.gpus[g]
        k = m.nic_of[g]
        nic = m.nics[k].id if (m.nics and k is not None) else None
        netdev = None
        if nic:
            # the HCA name (mlx5_0) is what UCX_NET_DEVICES and NCCL_IB_HCA take
            d = m.nics[k]
            netdev = d.attrs.get("hca") or d.name or (str(d.attrs.get("netdev", "")).split(",")[0] or None)
        return {"node": int(self.node_of[r]), "gpu": int(gpu.index), "uuid": gpu.attrs.get("uuid"),
                "cpus": gpu_cpus(m.topo, gpu), "numa": gpu_numa(m.topo, gpu), "nic": nic, "netdev": netdev}


def check_fit(n: int, platform: Platform, ranks_per_gpu: int) -> None:
    cap = platform.nodes * platform.G * ranks_per_gpu
    if ranks_per_gpu < 1:
        raise RankmapError(f"--ranks-per-gpu must be at least 1, got {ranks_per_gpu}")
    if n > cap:
        need = -(-n // (platform.nodes * platform.G))
        raise RankmapError(
            f"{n} ranks do not fit on {platform.nodes} node(s) x {platform.G} GPUs with {ranks_per_gpu} "
            f"rank(s) per GPU: pass --ranks-per-gpu {need} or more nodes (--nodes)")


def place(platform: Platform, traffic, *, ranks_per_gpu: int = 1, seed: int = 0, time_budget: float = 10.0,
          exact_max_gpus: int = 16) -> Placement:
    t0 = time.perf_counter()
    tr = as_traffic(traffic)
    n = tr.n
    check_fit(n, platform, ranks_per_gpu)
    d_node, d_gpu = default_mapping(n, platform, ranks_per_gpu)
    default = evaluate(platform, tr, d_node, d_gpu)
    if platform.nodes == 1:
        node_of = np.zeros(n, dtype=np.int64)
        parts = [np.arange(n)]
        info: dict = {}
    else:
        node_of = partition(tr, platform.nodes, platform.G * ranks_per_gpu, seed=seed)
        parts = [np.nonzero(node_of == u)[0] for u in range(platform.nodes)]
        info = {"partition": "METIS (pymetis), rebalanced"}
    gpu_of = np.zeros(n, dtype=np.int64)
    # across nodes, 30 % of the budget is kept for refining the node split against the busiest link
    deadline = t0 + time_budget * (0.65 if platform.nodes > 1 else 1.0)
    proven = 0
    solvers = set()
    cache: dict[bytes, np.ndarray] = {}
    sym_cache: dict[tuple[bool, bool, bool], Symmetry] = {}
    T = tr.dense() if n <= 1024 else None
    H = tr.dense_host() if (T is not None and tr.host is not None) else None
    work = []
    for u, ranks in enumerate(parts):
        if len(ranks):
            sub, subh, eout, ein = _node_traffic(tr, T, H, ranks, node_of, u)
            raw = sub.tobytes() + eout.tobytes() + ein.tobytes() + (subh.tobytes() if subh is not None else b"")
            work.append((ranks, (sub, subh), eout, ein, hashlib.sha1(raw).digest()))
    distinct = len({w[4] for w in work})
    for ranks, sub, eout, ein, key in work:
        if key in cache:
            gpu_of[ranks] = cache[key][0]
            proven += int(cache[key][1])
            continue
        left = max(deadline - time.perf_counter(), 0.0)
        # nodes with the same sub-problem are solved once, so the budget is shared among distinct
        # ones; a margin for the work around the solvers keeps the total in budget
        share = 0.8 * left / max(1, distinct - len(cache))
        res, ok, name = _solve_node(platform, sub, eout, ein, ranks_per_gpu, seed, share, exact_max_gpus, sym_cache)
        solvers.add(name)
        proven += int(ok)
        cache[key] = (res, ok)
        gpu_of[ranks] = res
    score = evaluate(platform, tr, node_of, gpu_of)
    if platform.nodes > 1:
        from rankmap.mapping.refine import refine

        def resolve(ranks: np.ndarray, nodes: np.ndarray) -> np.ndarray:
            u = int(nodes[ranks[0]])
            sub, subh, eout, ein = _node_traffic(tr, T, H, ranks, nodes, u)
            g, _, _ = _solve_node(platform, (sub, subh), eout, ein, ranks_per_gpu, seed, 0.02, exact_max_gpus,
                                  sym_cache)
            return g

        node_of, gpu_of, score, swaps = refine(platform, tr, node_of, gpu_of, score, resolve,
                                               t0 + 0.95 * time_budget)
        info["refinement_swaps"] = swaps
    if _lt(default.key[:2], score.key[:2]) and platform.nodes == 1:
        # never hand back something worse than the default (only possible if a search was cut short)
        node_of, gpu_of, score = d_node, d_gpu, default
    busy = sum(1 for p in parts if len(p))
    optimal = platform.nodes == 1 and proven == busy
    info.update({"nodes_proven_optimal": proven, "nodes_used": busy})
    solver = " + ".join(sorted(solvers)) or "trivial"
    if platform.nodes > 1:
        solver = "METIS partition + " + solver
    staging = staging_summary(platform, tr, node_of)
    return Placement(platform, node_of, gpu_of, score, default, optimal, solver, time.perf_counter() - t0, info,
                     staging)


def staging_summary(platform: Platform, tr: Traffic, node_of: np.ndarray) -> dict:
    """Host-staged bytes, and how many of them the model routes via host memory (those within a node;
    host-staged bytes between nodes go through the NICs like the rest)."""
    total = tr.total
    host = tr.host_total
    if tr.host is not None:
        same = node_of[tr.src] == node_of[tr.dst]
        via_host = float(tr.host[same].sum())
    else:
        via_host = 0.0
    res = {"total_bytes": total, "host_staged_bytes": host, "routed_via_host_bytes": via_host,
           "off_node_host_staged_bytes": host - via_host,
           "peer_to_peer_bytes": total - host}
    if host > 0 and platform.node.host_notes:
        res["notes"] = list(platform.node.host_notes)
    return res


def _node_traffic(tr: Traffic, T: np.ndarray | None, H: np.ndarray | None, ranks: np.ndarray,
                  node_of: np.ndarray, u: int):
    """In-node bytes of node ``u``'s ranks (all, and the host-staged part or None), and per rank the
    bytes sent to and received from other nodes."""
    if T is not None:
        sub = T[np.ix_(ranks, ranks)]
        subh = H[np.ix_(ranks, ranks)] if H is not None else None
        off = node_of != u
        eout = T[np.ix_(ranks, np.nonzero(off)[0])].sum(axis=1)
        ein = T[np.ix_(np.nonzero(off)[0], ranks)].sum(axis=0)
        return sub, subh, eout, ein
    pos = -np.ones(tr.n, dtype=np.int64)
    pos[ranks] = np.arange(len(ranks))
    k = len(ranks)
    sub = np.zeros((k, k))
    s_in, d_in = pos[tr.src] >= 0, pos[tr.dst] >= 0
    both = s_in & d_in
    np.add.at(sub, (pos[tr.src[both]], pos[tr.dst[both]]), tr.bytes[both])
    subh = None
    if tr.host is not None:
        subh = np.zeros((k, k))
        np.add.at(subh, (pos[tr.src[both]], pos[tr.dst[both]]), tr.host[both])
    eout = np.bincount(pos[tr.src[s_in & ~d_in]], weights=tr.bytes[s_in & ~d_in], minlength=k)
    ein = np.bincount(pos[tr.dst[d_in & ~s_in]], weights=tr.bytes[d_in & ~s_in], minlength=k)
    return sub, subh, eout, ein


def _solve_node(platform: Platform, sub, eout, ein, K, seed, budget, exact_max_gpus, sym_cache):
    """``sub`` is (all in-node bytes, their host-staged part or None)."""
    m = platform.node
    tot, host = sub
    if host is not None and host.any():
        p = NodeProblem(m, tot - host, eout, ein, K, Th=host)
    else:
        p = NodeProblem(m, tot, eout, ein, K)
    quick = p.n <= 1
    if quick:
        return np.zeros(p.n, dtype=np.int64), True, "trivial"
    has_ext = p.has_ext
    sk = (has_ext, p.has_host, p.has_peer)
    if m.G <= exact_max_gpus:
        if sk not in sym_cache:
            sym_cache[sk] = Symmetry(m, with_nics=has_ext, with_host=p.has_host, with_peer=p.has_peer)
        if sym_cache[sk].symmetric and K == 1:
            # all GPUs alike: branch and bound answers at once, no heuristic needed
            e = solve_exact(p, time_budget=max(budget, 0.01), sym=sym_cache[sk])
            return e.gpu_of, e.optimal, "exact branch-and-bound"
    # where branch and bound follows, the heuristic only seeds its upper bound: two restarts do
    restarts = 2 if (m.G <= exact_max_gpus or platform.nodes > 1) else 8
    h = solve_heuristic(p, seed=seed, time_budget=max(budget * 0.3, 0.01), restarts=restarts)
    if m.G > exact_max_gpus:
        return h.gpu_of, False, h.solver
    e = solve_exact(p, time_budget=max(budget * 0.7, 0.01), upper=(h.gpu_of, h.key), sym=sym_cache[sk])
    return e.gpu_of, e.optimal, "exact branch-and-bound" if e.optimal else "exact branch-and-bound (cut short)"


def partition(tr: Traffic, nodes: int, per_node: int, *, seed: int = 0) -> np.ndarray:
    """Ranks -> nodes: METIS on the symmetrised traffic graph, then an exact balance fix-up."""
    import pymetis

    n = tr.n
    sizes = np.full(nodes, n // nodes)
    sizes[: n % nodes] += 1
    if sizes.max() > per_node:
        raise RankmapError(f"{n} ranks do not fit on {nodes} nodes of {per_node} slots")
    us, ud, wi = tr.symmetric_edges()
    if len(wi) == 0:
        return np.repeat(np.arange(nodes), sizes)[:n]
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.add.at(xadj, us + 1, 1)
    xadj = np.cumsum(xadj)
    opts = pymetis.Options(seed=seed, ufactor=1)
    adjacency = pymetis.CSRAdjacency(adj_starts=xadj, adjacent=ud)
    _, parts = pymetis.part_graph(nodes, adjacency, eweights=wi, options=opts)
    parts = np.asarray(parts, dtype=np.int64)
    return _rebalance(parts, sizes, xadj, ud, wi)


def _rebalance(parts: np.ndarray, sizes: np.ndarray, xadj, adj, w) -> np.ndarray:
    """Move ranks from over-full to under-full nodes, each time the rank that loses least cut weight."""
    nodes = len(sizes)
    count = np.bincount(parts, minlength=nodes)
    # give the larger targets to the parts METIS made larger, so fewer ranks move
    order_parts = np.argsort(-count, kind="stable")
    target = np.empty(nodes, dtype=np.int64)
    target[order_parts] = np.sort(sizes)[::-1]
    for p in np.nonzero(count > target)[0]:
        while count[p] > target[p]:
            under = set(np.nonzero(count < target)[0].tolist())
            fallback = min(under)
            best = None
            for r in np.nonzero(parts == p)[0]:
                nb = adj[xadj[r]:xadj[r + 1]]
                ww = w[xadj[r]:xadj[r + 1]]
                own = ww[parts[nb] == p].sum()
                conn: dict[int, float] = {}
                for q, x in zip(parts[nb].tolist(), ww.tolist()):
                    if q in under:
                        conn[q] = conn.get(q, 0) + x
                q = max(conn, key=lambda k: (conn[k], -k)) if conn else fallback
                gain = conn.get(q, 0) - own
                if best is None or gain > best[0]:
                    best = (gain, r, q)
            _, r, q = best
            count[p] -= 1
            parts[r] = q
            count[q] += 1
    return parts
