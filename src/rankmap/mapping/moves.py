"""Ranks moved from the default placement, and fewer of them at the same figures.

Moving a rank has costs the cost model does not see: the job's own assumptions about which ranks
share a node or a socket, warm caches, NIC affinity. So among placements whose key (the objective's
pair, :mod:`rankmap.mapping.objective`) equals the one a solver found, the one that moves the fewest
ranks from the default is preferred. Solvers stop at the first optimum they reach, often a
relabelling of the node away from the default, so :func:`fewest_moves` looks for placements of the
same key (within the float tolerance of :func:`rankmap.mapping.objective.better`) that move fewer
ranks:

1. across nodes, the nodes are relabelled to put the most ranks on their default node (an
   assignment problem): every node is alike and the network a non-blocking switch, so a relabelling
   keeps every figure;
2. a node whose ranks can be placed in at most ``EXHAUSTIVE_ROWS`` ways (8 ranks on 8 GPUs: 40320)
   is searched exhaustively, all placements scored at once: on one such node the result is the
   fewest moves of any placement with the key found;
3. on larger nodes (up to ``SYMMETRY_MAX_GPUS`` GPUs), automorphisms of the node
   (:mod:`rankmap.mapping.automorph`) that fix every GPU holding a rank already at home and bring one
   more rank home;
4. then a rank away from home is moved onto its default GPU when that has room, or swapped with a
   rank there that is not at home itself, while the key stays the same.

Every step is checked by scoring the whole placement, so none can make it worse. Beyond one node
of up to ``EXHAUSTIVE_ROWS`` placements the result is the fewest moves these steps find, not a
proven minimum.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from typing import TYPE_CHECKING

import numpy as np

from rankmap.mapping.cost import REL_EPS, evaluate
from rankmap.mapping.objective import better, projected_keys, score_key
from rankmap.mapping.problem import NodeProblem

if TYPE_CHECKING:
    from rankmap.mapping.cluster import Cluster

#: a node whose ranks can take at most this many placements is searched exhaustively
EXHAUSTIVE_ROWS = 40320

#: nodes up to this many GPUs get the automorphism step (the symmetry search grows with G)
SYMMETRY_MAX_GPUS = 16


def moved(node_of: np.ndarray, gpu_of: np.ndarray, d_node: np.ndarray, d_gpu: np.ndarray) -> int:
    """How many ranks are on another node or GPU than the default placement puts them."""
    return int(np.count_nonzero((np.asarray(node_of) != d_node) | (np.asarray(gpu_of) != d_gpu)))


def fewest_moves(cl: Cluster, node_of: np.ndarray, gpu_of: np.ndarray, d_node: np.ndarray, d_gpu: np.ndarray,
                 deadline: float, proven: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A placement with the key of (``node_of``, ``gpu_of``) that moves fewer ranks from the default
    (``d_node``, ``d_gpu``), or the given one; stops at ``deadline`` (``time.perf_counter()``).
    ``cl``: the solver's cluster (its platform, traffic, objective and node problems; its own
    placement is neither read nor changed). ``proven``: the placement is a proven optimum of one node
    (:func:`_exhaustive` then filters on the linear figure first)."""
    platform, tr, objective, K = cl.pf, cl.tr, cl.objective, cl.K
    proven = proven and platform.nodes == 1
    node_of = np.asarray(node_of, dtype=np.int64).copy()
    gpu_of = np.asarray(gpu_of, dtype=np.int64).copy()
    target = score_key(evaluate(platform, tr, node_of, gpu_of), objective)

    def same(nd: np.ndarray, gp: np.ndarray) -> bool:
        return not better(target, score_key(evaluate(platform, tr, nd, gp), objective))

    def home(nd: np.ndarray, gp: np.ndarray) -> np.ndarray:
        return (nd == d_node) & (gp == d_gpu)

    if platform.nodes > 1 and time.perf_counter() < deadline:
        nd = _relabel_nodes(platform.nodes, node_of, d_node)
        if moved(nd, gpu_of, d_node, d_gpu) < moved(node_of, gpu_of, d_node, d_gpu) and same(nd, gpu_of):
            node_of = nd
    large = []
    for u in range(platform.nodes):
        on = np.nonzero(node_of == u)[0]
        if not len(on) or time.perf_counter() >= deadline:
            continue
        g = _exhaustive(cl.problem(u, on, node_of), gpu_of[on], np.where(d_node[on] == u, d_gpu[on], -1),
                        proven=proven)
        if g is None:
            large.append(u)
        elif not np.array_equal(g, gpu_of[on]):
            gp = gpu_of.copy()
            gp[on] = g
            if same(node_of, gp):
                gpu_of = gp
    if large and platform.G <= SYMMETRY_MAX_GPUS:
        node_of, gpu_of = _by_automorphisms(platform, tr, large, node_of, gpu_of, d_node, d_gpu, same, home,
                                            deadline)
    return _by_swaps(platform, K, node_of, gpu_of, d_node, d_gpu, same, home, deadline)


def _exhaustive(p: NodeProblem, cur: np.ndarray, home: np.ndarray, proven: bool = False) -> np.ndarray | None:
    """The GPUs of a node's ranks with the key of ``cur`` (or better) and the fewest ranks off their
    ``home`` GPU (-1: a rank whose default node is another), every placement scored at once; None
    when the ranks have more than ``EXHAUSTIVE_ROWS`` placements.

    ``proven``: ``cur`` is optimal, so no placement has a better primary figure, and one as good must
    match it on the linear figure (the total congestion of ``max``, the hop-bytes of ``hop-bytes``)
    too: that figure alone is one gather a placement, so the placements that exceed it are dropped
    before their whole loads are computed (half the time of a dense pattern on 8 GPUs)."""
    G, n, K = p.model.G, p.n, p.K
    if (math.perm(G, n) if K == 1 else G ** n) > EXHAUSTIVE_ROWS:
        return None
    rows = _placements(G, n, K)
    moves = np.count_nonzero(rows != home, axis=1)
    proj = p.projection()
    terms = [(T, cpb @ proj) for T, cpb in p.terms()]
    eo, ei = (x @ proj for x in p.ext)

    def keys(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # each placement's bytes per GPU pair (a row of G*G), then one product with the pairs' link
        # costs: a pass over the placements per rank pair cost ten times more on a dense pattern
        R = len(rows)
        L = np.zeros((R, proj.shape[1]))
        base = (np.arange(R, dtype=np.int64) * (G * G))[:, None]
        for T, c in terms:
            ii, jj = np.nonzero(T)
            if not len(ii):
                continue
            flat = base + rows[:, ii] * G + rows[:, jj]
            W = np.bincount(flat.ravel(), weights=np.broadcast_to(T[ii, jj], flat.shape).ravel(),
                            minlength=R * G * G).reshape(R, G * G)
            L += W @ c.reshape(G * G, -1)
        for i in np.nonzero(p.eout)[0]:
            L += p.eout[i] * eo[rows[:, i]]
        for i in np.nonzero(p.ein)[0]:
            L += p.ein[i] * ei[rows[:, i]]
        return projected_keys(L, p.objective)

    def linear(rows: np.ndarray) -> np.ndarray:
        """The last (linear) column of the loads alone, for every placement."""
        lin = np.zeros(len(rows))
        for T, c in terms:
            ii, jj = np.nonzero(T)
            if len(ii):
                lin += c[:, :, -1].ravel()[rows[:, ii] * G + rows[:, jj]] @ T[ii, jj]
        for i in np.nonzero(p.eout)[0]:
            lin += p.eout[i] * eo[rows[:, i], -1]
        for i in np.nonzero(p.ein)[0]:
            lin += p.ein[i] * ei[rows[:, i], -1]
        return lin

    (t0,), (t1,) = keys(cur[None])
    # the linear figure a placement as good as a proven optimum cannot exceed (None: no filter)
    cap = {"max": t1, "hop-bytes": t0}.get(p.objective) if proven else None

    def tol(a: np.ndarray, b: float) -> np.ndarray:
        return REL_EPS * np.maximum(np.maximum(np.abs(a), abs(b)), 1e-30)

    # fewest moves first: the first level with a placement as good as the current one ends the search
    for k in range(int(np.count_nonzero(cur != home))):
        level = rows[moves == k]
        if cap is not None and len(level):
            # a looser tolerance than the test below: the two sums differ in their last bits
            level = level[linear(level) <= cap * (1 + 1e-7) + 1e-300]
        if not len(level):
            continue
        prim, sec = keys(level)
        # as good as the current placement: a better primary, or one no worse and a tie-break no worse
        ok = (prim < t0 - tol(prim, t0)) | ((prim <= t0 + tol(prim, t0)) & (sec <= t1 + tol(sec, t1)))
        if ok.any():
            return level[int(np.argmax(ok))]
    return cur


@functools.lru_cache(maxsize=8)
def _placements(G: int, n: int, K: int) -> np.ndarray:
    """Every placement of ``n`` ranks on ``G`` GPUs, at most ``K`` a GPU (a row each; read-only)."""
    if K == 1:
        rows = np.array(list(itertools.permutations(range(G), n)), dtype=np.int64).reshape(-1, n)
    else:
        rows = np.array(list(itertools.product(range(G), repeat=n)), dtype=np.int64).reshape(-1, n)
        rows = rows[np.all([np.count_nonzero(rows == h, axis=1) <= K for h in range(G)], axis=0)]
    rows.setflags(write=False)
    return rows


def _relabel_nodes(nodes: int, node_of: np.ndarray, d_node: np.ndarray) -> np.ndarray:
    """``node_of`` with the nodes renamed so that the most ranks are on their default node."""
    cnt = np.zeros((nodes, nodes))
    np.add.at(cnt, (node_of, d_node), 1)
    best = cnt.argmax(axis=1)
    if len(np.unique(best)) == nodes:
        # every node gets the name it shares most ranks with, and no two want the same: that is the
        # optimum of the assignment problem without solving it (and without importing scipy.optimize,
        # ~0.4 s: most of the fixed cost of a 4096-rank `rankmap map`)
        rows, cols = np.arange(nodes), best
    else:
        from scipy.optimize import linear_sum_assignment

        rows, cols = linear_sum_assignment(-cnt)
    name = np.empty(nodes, dtype=np.int64)
    name[rows] = cols
    return name[node_of]


def _by_automorphisms(platform, tr, nodes, node_of, gpu_of, d_node, d_gpu, same, home, deadline):
    from rankmap.mapping.automorph import Symmetry

    # every route the bytes may take must be kept: off-node bytes see the NICs, host-staged ones
    # the host routes
    sym = Symmetry(platform.node, with_nics=platform.nodes > 1, with_host=tr.host is not None)
    for u in nodes:
        changed = True
        while changed and time.perf_counter() < deadline:
            changed = False
            on = np.nonzero(node_of == u)[0]
            at_home = home(node_of, gpu_of)
            fixed = frozenset(int(g) for g in gpu_of[on[at_home[on]]])
            for r in on[~at_home[on] & (d_node[on] == u)]:
                x, y = int(gpu_of[r]), int(d_gpu[r])
                if y in fixed:
                    continue        # a rank at home holds that GPU (K > 1): the swaps may still help
                p = sym.find(fixed, x, y)
                if p is None:
                    continue
                gp = gpu_of.copy()
                gp[on] = p[gpu_of[on]]
                if np.count_nonzero(home(node_of, gp)) > np.count_nonzero(at_home) and same(node_of, gp):
                    gpu_of, changed = gp, True
                    break
    return node_of, gpu_of


def _by_swaps(platform, K, node_of, gpu_of, d_node, d_gpu, same, home, deadline):
    G = platform.G
    changed = True
    while changed and time.perf_counter() < deadline:
        changed = False
        for r in np.nonzero(~home(node_of, gpu_of))[0]:
            if time.perf_counter() >= deadline:
                break
            slot = d_node[r] * G + d_gpu[r]
            there = np.nonzero(node_of * G + gpu_of == slot)[0]
            if len(there) < K:
                tries = [None]                      # room on the default GPU: move r there
            else:                                   # else swap with a rank there that is not home
                tries = [int(s) for s in there if not (node_of[s] == d_node[s] and gpu_of[s] == d_gpu[s])]
            for s in tries:
                nd, gp = node_of.copy(), gpu_of.copy()
                nd[r], gp[r] = d_node[r], d_gpu[r]
                if s is not None:
                    nd[s], gp[s] = node_of[r], gpu_of[r]
                if same(nd, gp):
                    node_of, gpu_of, changed = nd, gp, True
                    break
    return node_of, gpu_of
