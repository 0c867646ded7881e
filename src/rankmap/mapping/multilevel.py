"""Large nodes by their hierarchy: ranks split along the node's switch tree, then refined.

A node of 64 GPUs has 64! placements and no exact search reaches them, and a swap search that starts
from a random permutation spends its time undoing it. Large nodes are nearly always trees of groups
(GPUs under a PCIe or NVLink switch, switches under a socket or a root), and a route's cost grows with
the level at which its two GPUs meet. So the placement is built the way a graph partitioner maps onto a
hierarchy (KaHIP's global multisection, Scotch's ``tleaf``):

1. :func:`gpu_tree` reads the tree from the node's routes: two GPUs are in one group at a level when
   their route costs at most that level's cost (per byte, both directions); the groups of each level
   are the connected components of that relation, so a mesh that is no tree still gets groups;
2. :func:`split_ranks` cuts the ranks top-down into the children's capacities (``K`` ranks a GPU),
   each cut a balanced partition of the in-node traffic graph by :mod:`rankmap.mapping.partition`
   (METIS), fixed up to exact sizes;
3. at a leaf group the ranks take its GPUs in order.

The result is the start of the node's swap search (:mod:`rankmap.mapping.heuristic`), which sees the
whole cost model (every directed link, NIC routes, host-staged routes) and is kept only where it
improves on the start; the caller compares it with any other start it has.
"""

from __future__ import annotations

import numpy as np

from rankmap.mapping.partition import partition
from rankmap.mapping.platform import NodeModel
from rankmap.mapping.problem import NodeProblem


def gpu_tree(m: NodeModel) -> dict:
    """The node's GPUs as a tree: ``{"gpus": [...], "children": [subtrees]}``, leaves without children.

    Levels are the distinct route costs (seconds per byte, the two directions summed), cheapest
    first; a node's children are the connected components of "route cost <= the next cheaper level"
    among its GPUs. Cached on the model."""
    ck = ("gpu_tree",)
    if ck in m.solver_cache:
        return m.solver_cache[ck]
    c = m.cpb.sum(axis=2)
    c = c + c.T
    G = m.G
    if G > 1:
        off = c[~np.eye(G, dtype=bool)]
        scale = max(float(off.max()), 1e-300)
        levels = sorted(set(np.round(off / scale, 9).tolist()))
        thresholds = [x * scale * (1 + 1e-9) for x in levels]
    else:
        thresholds = []

    def build(gpus: list[int], depth: int) -> dict:
        # depth indexes thresholds from the top: below the node's own level, the next cheaper one
        while depth >= 0:
            comps = _components(gpus, c, thresholds[depth]) if depth < len(thresholds) else [gpus]
            if len(comps) > 1:
                return {"gpus": gpus, "children": [build(k, depth - 1) for k in comps]}
            depth -= 1
        return {"gpus": gpus, "children": []}

    tree = build(list(range(G)), len(thresholds) - 2)
    m.solver_cache[ck] = tree
    return tree


def _components(gpus: list[int], c: np.ndarray, t: float) -> list[list[int]]:
    """Connected components of ``gpus`` under "route cost <= t", each in GPU order."""
    left = set(gpus)
    out = []
    while left:
        start = min(left)
        comp, stack = {start}, [start]
        left.discard(start)
        while stack:
            g = stack.pop()
            near = [h for h in left if c[g, h] <= t]
            for h in near:
                left.discard(h)
                comp.add(h)
                stack.append(h)
        out.append(sorted(comp))
    return sorted(out)


def split_ranks(p: NodeProblem, *, seed: int = 0) -> np.ndarray:
    """GPU position of every rank of ``p``: the ranks cut top-down along :func:`gpu_tree` into the
    capacities of its groups, leaves filled in GPU order."""
    tree = gpu_tree(p.model)
    S = p.W + p.W.T
    gpu_of = np.zeros(p.n, dtype=np.int64)

    def place(node: dict, ranks: np.ndarray) -> None:
        if not len(ranks):
            return
        kids = [k for k in node["children"]]
        if not kids:
            gpus = node["gpus"]
            slots = np.repeat(gpus, p.K)[: len(ranks)] if p.K > 1 else np.asarray(gpus[: len(ranks)])
            gpu_of[ranks] = slots
            return
        caps = np.array([len(k["gpus"]) * p.K for k in kids], dtype=np.int64)
        sizes = _fill(len(ranks), caps)
        parts = partition(S[np.ix_(ranks, ranks)], sizes, seed=seed)
        for i, k in enumerate(kids):
            place(k, ranks[parts == i])

    place(gpu_tree(p.model), np.arange(p.n))
    return gpu_of


def _fill(n: int, caps: np.ndarray) -> np.ndarray:
    """Sizes of at most ``caps`` each summing to ``n``, proportional to the capacities (so that a
    node that is not full leaves room spread out, not at its end)."""
    total = int(caps.sum())
    sizes = np.floor(caps * n / total).astype(np.int64)
    rest = n - int(sizes.sum())
    for i in np.argsort(-(caps * n / total - sizes), kind="stable")[:rest]:
        sizes[i] += 1
    return np.minimum(sizes, caps)


def gpu_path(m: NodeModel, objective: str = "max") -> np.ndarray:
    """The node's GPUs in an order along which consecutive GPUs are close: for a chain of ranks
    (:func:`rankmap.mapping.split.chain`) laid onto the GPUs in this order, the sum of the route
    costs between neighbours is least (per byte, both directions: congestion, or links crossed for
    hop-bytes). Exact (dynamic programming over subsets) up to ``PATH_EXACT_GPUS`` GPUs, else the
    leaves of :func:`gpu_tree` in order. Cached on the model."""
    ck = ("gpu_path", objective)
    if ck in m.solver_cache:
        return m.solver_cache[ck]
    G = m.G
    if G > PATH_EXACT_GPUS:
        path = np.asarray(leaves(gpu_tree(m)), dtype=np.int64)
    else:
        c = m.inc.sum(axis=2).astype(float) if objective == "hop-bytes" else m.cpb.sum(axis=2)
        c = c + c.T
        full = (1 << G) - 1
        # best[s, g]: least cost of a path through the GPUs of set s ending at g
        best = np.full((1 << G, G), np.inf)
        back = np.full((1 << G, G), -1, dtype=np.int64)
        for g in range(G):
            best[1 << g, g] = 0.0
        for s in range(1, full + 1):
            for g in range(G):
                if not (s >> g) & 1 or not np.isfinite(best[s, g]):
                    continue
                for h in range(G):
                    if (s >> h) & 1:
                        continue
                    t = s | (1 << h)
                    x = best[s, g] + c[g, h]
                    if x < best[t, h] - 1e-18:
                        best[t, h], back[t, h] = x, g
        g = int(np.argmin(best[full]))
        out, s = [], full
        while g >= 0:
            out.append(g)
            g, s = int(back[s, g]), s & ~(1 << g)
        path = np.asarray(out[::-1], dtype=np.int64)
    m.solver_cache[ck] = path
    return path


#: up to this many GPUs :func:`gpu_path` is exact (2^G x G states)
PATH_EXACT_GPUS = 8


def leaves(tree: dict) -> list[int]:
    """The GPUs of :func:`gpu_tree`'s leaves, in the tree's order (a group's GPUs side by side)."""
    if not tree["children"]:
        return list(tree["gpus"])
    return [g for k in tree["children"] for g in leaves(k)]
