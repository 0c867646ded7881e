"""Exact node placement: depth-first branch and bound over rank -> GPU assignments.

Ranks are placed one at a time, the next one chosen *fail first*: the unplaced rank whose cheapest
placement is already the most congested (ties: heaviest and most connected first). For every unplaced
rank ``j`` the search keeps ``A[j, h]``: the congestion vector that placing ``j`` on GPU ``h`` would add
given the ranks already placed. That table makes the following cheap:

* the children of a node: ``loads + A[r, h]`` for every free GPU ``h`` at once;
* the **look-ahead bound** on the maximum: every unplaced rank must go somewhere, so the final maximum
  congestion is at least ``max_j min_h max(loads + A[j, h])`` (loads only ever grow);
* the **per-link bound**: each link gets at least ``sum_j min_h A[j, h, d]`` more, and for the links
  where that bites hardest the unplaced ranks must take distinct GPUs (an assignment problem, solved
  exactly), which is what makes a cut like a PCIe switch uplink count;
* the bound on the total: the least total the unplaced ranks add on distinct free GPUs, plus the bytes
  still to be exchanged among them times the cheapest route between free GPUs.

Host-staged bytes (``NodeProblem.Th``, routed GPU -> CPU -> GPU) enter ``A`` exactly like peer bytes,
with their own route tensor, so the look-ahead and per-link bounds keep their proof: ``A[j, h]`` is
still the exact congestion that the pairs of ``j`` with placed ranks add, every term is non-negative,
and distinct ranks' terms are disjoint. In the total bound the pending bytes of each kind are
multiplied by the cheapest route *of that kind* between distinct free GPUs.

Links that can never be the busiest are dropped and the total is carried as one extra column, so the
arrays stay small. A subtree is cut when its bound is not lexicographically better than the best
mapping found so far (seeded by the heuristic). Symmetry: at every level only one GPU per orbit of the
automorphisms that fix the GPUs already in use is tried (orbits cached per set of used GPUs). The
search reports ``optimal`` only when it ran to completion.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

try:  # the assignment-problem bounds need SciPy; without it the search is still exact, only slower
    from scipy.optimize import linear_sum_assignment
except ImportError:  # pragma: no cover
    linear_sum_assignment = None

from rankmap.mapping.automorph import Symmetry
from rankmap.mapping.cost import REL_EPS
from rankmap.mapping.problem import NodeProblem


@dataclass
class NodeResult:
    gpu_of: np.ndarray
    key: tuple[float, float]
    optimal: bool
    solver: str
    nodes: int = 0
    seconds: float = 0.0
    info: dict = field(default_factory=dict)


def _lt(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """a strictly better than b (lexicographic, relative tolerance)."""
    for x, y in zip(a, b):
        if x == y:
            continue
        if np.isinf(x) or np.isinf(y):
            return x < y
        tol = REL_EPS * max(abs(x), abs(y), 1e-30)
        if x < y - tol:
            return True
        if x > y + tol:
            return False
    return False


def undominated(cpb: np.ndarray | None, eo: np.ndarray, ei: np.ndarray, hcpb: np.ndarray | None = None) -> np.ndarray:
    """Indices of directed links that can be the most congested one.

    Link ``a`` is dominated by ``b`` when every GPU pair (and every off-node route, and every
    host-staged route when ``hcpb`` is given) puts at least as much congestion per byte on ``b`` as on
    ``a``: then ``b``'s congestion is never below ``a``'s, whatever the mapping. Of identical links one
    is kept. ``cpb`` None: no byte takes a peer route."""
    G = eo.shape[0]
    rows = ([cpb.reshape(G * G, -1)] if cpb is not None else []) + [eo, ei] \
        + ([hcpb.reshape(G * G, -1)] if hcpb is not None else [])
    X = np.concatenate(rows, axis=0).T  # (D, rows)
    used = X.any(axis=1)
    idx = np.nonzero(used)[0]
    X = X[idx]
    le = (X[:, None, :] <= X[None, :, :] * (1 + 1e-12)).all(axis=2)  # le[a, b]: a <= b everywhere
    keep = []
    for a in range(len(idx)):
        dominated = False
        for b in np.nonzero(le[a])[0]:
            if b == a:
                continue
            if not le[b, a] or b < a:  # strictly dominated, or a duplicate of an earlier link
                dominated = True
                break
        if not dominated:
            keep.append(idx[a])
    return np.asarray(keep if keep else idx[:1], dtype=np.int64)


def rank_order(p: NodeProblem) -> list[int]:
    """Heaviest rank first, then greedily the rank most connected to those already ordered."""
    S = p.W + p.W.T
    weight = S.sum(axis=1) + p.eout + p.ein
    n = p.n
    if n == 0:
        return []
    order = [int(np.argmax(weight))]
    left = set(range(n)) - set(order)
    while left:
        cand = sorted(left)
        conn = S[np.ix_(cand, order)].sum(axis=1)
        best = max(range(len(cand)), key=lambda i: (conn[i], weight[cand[i]], -cand[i]))
        order.append(cand[best])
        left.discard(cand[best])
    return order


def solve_exact(p: NodeProblem, *, time_budget: float = 10.0, upper: tuple[np.ndarray, tuple] | None = None,
                sym: Symmetry | None = None, sym_depth: int = 64, lsa_links: int = 4,
                dynamic: bool = True) -> NodeResult:
    t0 = time.perf_counter()
    m = p.model
    G, K, n = m.G, p.K, p.n
    if n == 0:
        return NodeResult(np.zeros(0, dtype=np.int64), (0.0, 0.0), True, "exact", 0, 0.0)
    order = rank_order(p)
    S = p.W + p.W.T
    active = [r for r in order if S[r].any() or p.eout[r] or p.ein[r]]
    idle = [r for r in order if r not in set(active)]
    if sym is None:
        sym = Symmetry(m, with_nics=p.has_ext, with_host=p.has_host, with_peer=p.has_peer)
    # the symmetry may be used only if it respects every route the problem's bytes take
    use_sym = ((sym.with_nics or not p.has_ext) and (sym.with_host or not p.has_host)
               and (sym.with_peer or not p.has_peer))
    if upper is None:
        g0 = np.arange(n) % G
        upper = (g0, p.key(g0))
    best_g, best_key = np.asarray(upper[0]).copy(), tuple(upper[1])
    T = p.T
    Th = p.Th if p.has_host else np.zeros_like(T)
    cpb = p.cpb
    hcpb = p.hcpb if p.has_host else None
    offdiag = T[~np.eye(n, dtype=bool)] if n > 1 else np.zeros(1)
    hoff = Th[~np.eye(n, dtype=bool)] if n > 1 else np.zeros(1)
    if K == 1 and n == G and not p.has_ext and np.all(offdiag == offdiag[0]) and np.all(hoff == hoff[0]):
        # uniform all-to-all over every GPU: ranks are interchangeable, all assignments cost the same
        return NodeResult(best_g, p.key(best_g), True, "exact (uniform traffic)", 1, time.perf_counter() - t0)
    if sym.symmetric and use_sym and K == 1:
        # every assignment of n == G ranks is a relabelling of any other: all cost the same
        return NodeResult(best_g, best_key, True, "exact (all GPUs equivalent)", 1,
                          time.perf_counter() - t0, {"automorphisms": sym.order})
    PC = cpb.sum(axis=2) + np.diag(np.full(G, np.inf))
    PCh = hcpb.sum(axis=2) + np.diag(np.full(G, np.inf)) if hcpb is not None else None
    A0 = p.unary()  # (n, G, D')
    # Work in a smaller space: the links that can ever be the busiest (a link whose every route also
    # crosses a link at least as congested is dropped) plus one last column carrying the total
    # congestion, which is all the total needs (it is linear in the loads).
    eo, ei = p.ext
    keep = undominated(cpb if p.has_peer else None, eo, ei, hcpb)
    proj = np.zeros((cpb.shape[2], len(keep) + 1))
    proj[keep, np.arange(len(keep))] = 1.0
    proj[:, -1] = 1.0
    cpb = cpb @ proj
    A0 = A0 @ proj
    cpbT = np.ascontiguousarray(cpb.transpose(1, 0, 2))  # cpbT[h] = cpb[:, h, :]
    if hcpb is not None:
        hcpb = hcpb @ proj
        hcpbT = np.ascontiguousarray(hcpb.transpose(1, 0, 2))
    Dp = cpb.shape[2]
    M = slice(0, Dp - 1)  # the link columns; column -1 is the total
    cap0 = np.full(G, K, dtype=np.int64)
    assign = -np.ones(n, dtype=np.int64)
    state = {"nodes": 0, "best_g": best_g, "best_key": best_key, "timeout": False}
    deadline = t0 + time_budget
    depth_n = len(active)
    if linear_sum_assignment is None:
        lsa_links = 0

    def finish_idle(cap: np.ndarray) -> None:
        free = [h for h in range(G) for _ in range(cap[h])]
        for r, h in zip(idle, free):
            assign[r] = h

    def rec(depth: int, loads: np.ndarray, A: np.ndarray, cap: np.ndarray, used: frozenset[int]) -> None:
        state["nodes"] += 1
        if state["nodes"] % 16 == 0 and time.perf_counter() > deadline:
            state["timeout"] = True
        if state["timeout"]:
            return
        if depth == depth_n:
            key = (float(loads[M].max()) if Dp > 1 else 0.0, float(loads[-1]))
            if _lt(key, state["best_key"]):
                finish_idle(cap)
                state["best_key"] = key
                state["best_g"] = assign.copy()
            return
        rest = [j for j in active if assign[j] < 0]
        free = np.nonzero(cap > 0)[0]
        # bounds from the look-ahead table (all unplaced active ranks)
        Ar = A[np.ix_(rest, free)] if len(rest) else None  # (U, F, D')
        tot = loads[None, None, M] + Ar[:, :, M]
        mx = tot.max(axis=2)  # (U, F)
        lbmax = max(float(loads[M].max()), float(mx.min(axis=1).max()))
        # per link: every unplaced rank adds at least its cheapest contribution to it; for the
        # links where that bites hardest, the ranks must also take distinct GPUs (an assignment
        # problem per link, solved exactly), which is what makes cuts like a switch uplink count
        per_link = loads[M] + Ar[:, :, M].min(axis=1).sum(axis=0)
        lbmax = max(lbmax, float(per_link.max()))
        if lsa_links and len(rest) > 1 and K == 1 and lbmax <= state["best_key"][0] * (1 + REL_EPS):
            for d in np.argsort(-per_link)[:lsa_links]:
                cost = Ar[:, :, d]
                ri, ci = linear_sum_assignment(cost)
                lbmax = max(lbmax, float(loads[d] + cost[ri, ci].sum()))
        if K == 1 and len(rest) > 1 and lsa_links:
            cost = Ar[:, :, -1]
            ri, ci = linear_sum_assignment(cost)  # distinct GPUs for the unplaced ranks
            sums = cost[ri, ci].sum()
        else:
            sums = Ar[:, :, -1].min(axis=1).sum()
        pend = T[np.ix_(rest, rest)].sum()
        if pend and K == 1:
            pc = PC[np.ix_(free, free)]
            minpair = float(pc.min()) if pc.size else 0.0
        else:
            minpair = 0.0
        lbsum = float(loads[-1]) + float(sums) + float(pend) * minpair
        if PCh is not None and K == 1:
            # host-staged bytes among unplaced ranks: at least the cheapest host route between two
            # distinct free GPUs each (with K > 1 they might share a GPU: nothing is claimed)
            pendh = Th[np.ix_(rest, rest)].sum()
            if pendh:
                pc = PCh[np.ix_(free, free)]
                lbsum += float(pendh) * (float(pc.min()) if pc.size else 0.0)
        if not _lt((lbmax, lbsum), state["best_key"]):
            return
        # fail first: the rank whose cheapest placement is already the most congested goes next
        # (ties: the static order, heaviest and most connected first)
        r = rest[int(np.argmax(mx.min(axis=1)))] if dynamic else rest[0]
        cands = free
        if depth < sym_depth and use_sym:
            # one GPU per orbit of the stabiliser of the GPUs in use (GPUs holding K>1 ranks
            # remain in use, so their capacities are preserved by every such automorphism)
            reps = [min(o) for o in sym.orbits(used)]
            if K > 1:
                reps = sorted(set(reps) | {h for h in used if cap[h] > 0})
            cands = np.array([h for h in free if h in set(reps)], dtype=np.int64)
        ck = loads[None, :] + A[r, cands]
        cmax = ck[:, M].max(axis=1)
        csum = ck[:, -1]
        for i in np.lexsort((csum, cmax)):
            h = int(cands[i])
            if not _lt((float(cmax[i]), float(csum[i])), state["best_key"]):
                # a child's own loads bound its subtree; children come in order of their maximum
                if float(cmax[i]) > state["best_key"][0] * (1 + REL_EPS):
                    break
                continue
            assign[r] = h
            A2 = A.copy()
            # every unplaced rank j now also talks to r on GPU h
            nxt = [j for j in rest if j != r]
            if nxt:
                A2[nxt] += T[nxt, r][:, None, None] * cpbT[h][None] + T[r, nxt][:, None, None] * cpb[h][None]
                if hcpb is not None:
                    A2[nxt] += Th[nxt, r][:, None, None] * hcpbT[h][None] + Th[r, nxt][:, None, None] * hcpb[h][None]
            cap[h] -= 1
            rec(depth + 1, loads + A[r, h], A2, cap, used | {h})
            cap[h] += 1
            assign[r] = -1
            if state["timeout"]:
                return

    rec(0, np.zeros(Dp), A0, cap0, frozenset())
    dt = time.perf_counter() - t0
    ok = not state["timeout"]
    return NodeResult(np.asarray(state["best_g"]), state["best_key"], ok, "exact branch-and-bound",
                      state["nodes"], dt, {"automorphisms": sym.order if G <= 16 else None,
                                           "symmetry_queries": sym.queries})
