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
* the bound on the **linear column** (the total congestion, or the hop-bytes): the least the unplaced
  ranks add on distinct free GPUs, plus the bytes still to be exchanged among them times the cheapest
  route between free GPUs;
* for the ``avg`` objective (linear column / links used), an upper bound on the links a completion
  can use: those already used plus every link on a route that touches a free GPU (all bytes still to
  be placed have an end on one), so ``avg >= linear bound / that count``.

The key ranked by is the objective's (:mod:`rankmap.mapping.objective`): (max, total), (hop-bytes,
max) or (avg, max); each bound above bounds its component, so a subtree is cut when its bound tuple is
not lexicographically better than the best mapping found so far, and a finished search proves the
optimum for that objective.

Host-staged bytes (``NodeProblem.Th``, routed GPU -> CPU -> GPU) enter ``A`` exactly like peer bytes,
with their own route tensor, so the bounds keep their proof: ``A[j, h]`` is still the exact
congestion that the pairs of ``j`` with placed ranks add, every term is non-negative, and distinct
ranks' terms are disjoint. In the linear bound the pending bytes of each kind are multiplied by the
cheapest route *of that kind* between distinct free GPUs.

For the maximum, links that can never be the busiest are dropped and the linear column is carried
as one extra column, so the arrays stay small. When at most ``tail`` ranks are left, every way of
placing them is scored at once (one array operation instead of a subtree of Python calls); this is
where most nodes of a search are (at most ``tail_rows`` ways, else the search goes on). Symmetry: at every level above the tail only one GPU per orbit of
the automorphisms that fix the GPUs already in use is tried (orbits cached per set of used GPUs).
The search reports ``optimal`` only when it ran to completion, and otherwise the bound at its root.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np


def linear_sum_assignment(cost: np.ndarray):
    """SciPy's assignment solver, imported at its first use: importing scipy.optimize takes ~0.7 s,
    more than a whole 8-GPU solve, and most placements finish without an assignment bound."""
    from scipy.optimize import linear_sum_assignment as lsa

    return lsa(cost)


@functools.cache
def _have_scipy() -> bool:
    """The assignment-problem bounds need SciPy; without it the search is still exact, only slower.
    Asked once a process: a multi-node placement runs this search once per node."""
    import importlib.util

    return importlib.util.find_spec("scipy") is not None

from rankmap.mapping.automorph import Symmetry
from rankmap.mapping.cost import REL_EPS
from rankmap.mapping.objective import better, projected_keys
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


def _placements(free: int, k: int, K: int) -> int:
    """How many ways ``k`` ranks can take ``free`` GPUs (distinct ones when K == 1; an upper bound
    otherwise)."""
    if K == 1:
        return math.perm(free, k)
    return free ** k


def _best_row(prim: np.ndarray, sec: np.ndarray) -> int:
    """Index of the lexicographically least (prim, sec), ties in prim within float tolerance."""
    lo = float(prim.min())
    near = np.nonzero(prim <= lo + REL_EPS * max(abs(lo), 1e-30))[0]
    return int(near[np.argmin(sec[near])])


def solve_exact(p: NodeProblem, *, time_budget: float = 10.0, upper: tuple[np.ndarray, tuple] | None = None,
                sym: Symmetry | None = None, sym_depth: int = 64, lsa_links: int = 4,
                dynamic: bool = True, tail: int = 5, tail_rows: int = 256) -> NodeResult:
    """The optimum of ``p`` by branch and bound, or the best found within ``time_budget`` (then
    ``optimal`` is false and ``info["bound"]`` the root's bound). ``upper``: a placement and its key
    to beat (default: rank order). The phases: :func:`_at_once` (problems every placement solves
    alike), :class:`_Search` (the tables, then the search), :meth:`_Search.result`."""
    t0 = time.perf_counter()
    m = p.model
    if p.n == 0:
        return NodeResult(np.zeros(0, dtype=np.int64), (0.0, 0.0), True, "exact", 0, 0.0, {"bound": 0.0})
    if sym is None:
        sym = Symmetry(m, with_nics=p.has_ext, with_host=p.has_host, with_peer=p.has_peer)
    # the symmetry may be used only if it respects every route the problem's bytes take
    use_sym = ((sym.with_nics or not p.has_ext) and (sym.with_host or not p.has_host)
               and (sym.with_peer or not p.has_peer))
    if upper is None:
        g0 = np.arange(p.n) % m.G
        upper = (g0, p.key(g0))
    done = _at_once(p, upper, sym, use_sym, t0)
    if done is not None:
        return done
    search = _Search(p, upper, sym if use_sym else None, deadline=t0 + time_budget, sym_depth=sym_depth,
                     lsa_links=lsa_links if _have_scipy() else 0, dynamic=dynamic,
                     tail=tail, tail_rows=tail_rows)
    search.run()
    return search.result(sym, time.perf_counter() - t0)


def _at_once(p: NodeProblem, upper: tuple, sym: Symmetry, use_sym: bool, t0: float) -> NodeResult | None:
    """The answer without a search, when every assignment costs the same: a uniform all-to-all over
    every GPU, or a node whose GPUs are all equivalent; else None."""
    G, K, n = p.model.G, p.K, p.n
    best_g, best_key = np.asarray(upper[0]).copy(), tuple(upper[1])
    T = p.T
    Th = p.Th if p.has_host else np.zeros_like(T)
    offdiag = T[~np.eye(n, dtype=bool)] if n > 1 else np.zeros(1)
    hoff = Th[~np.eye(n, dtype=bool)] if n > 1 else np.zeros(1)
    if K == 1 and n == G and not p.has_ext and np.all(offdiag == offdiag[0]) and np.all(hoff == hoff[0]):
        # uniform all-to-all over every GPU: ranks are interchangeable, all assignments cost the same
        return NodeResult(best_g, p.key(best_g), True, "exact (uniform traffic)", 1, time.perf_counter() - t0,
                          {"bound": p.key(best_g)[0]})
    if sym.symmetric and use_sym and K == 1:
        # every assignment of n == G ranks is a relabelling of any other: all cost the same
        return NodeResult(best_g, best_key, True, "exact (all GPUs equivalent)", 1,
                          time.perf_counter() - t0, {"automorphisms": sym.order, "bound": best_key[0]})
    return None


class _Search:
    """One branch-and-bound search: the tables it needs (built once), its bounds, its completions of
    the last levels, and the recursion over the rest."""

    def __init__(self, p: NodeProblem, upper: tuple, sym: Symmetry | None, *, deadline: float, sym_depth: int,
                 lsa_links: int, dynamic: bool, tail: int, tail_rows: int) -> None:
        self.p = p
        m = p.model
        G, n = m.G, p.n
        self.G, self.K, self.n, self.obj = G, p.K, n, p.objective
        self.sym, self.sym_depth, self.lsa_links = sym, sym_depth, lsa_links
        self.dynamic, self.tail, self.tail_rows, self.deadline = dynamic, tail, tail_rows, deadline
        order = rank_order(p)
        S = p.W + p.W.T
        self.active = [r for r in order if S[r].any() or p.eout[r] or p.ein[r]]
        self.idle = [r for r in order if r not in set(self.active)]
        self.T = p.T
        self.Th = p.Th if p.has_host else np.zeros_like(p.T)
        self._tables()
        self.assign = -np.ones(n, dtype=np.int64)
        self.nodes = 0
        self.best_g, self.best_key = np.asarray(upper[0]).copy(), tuple(upper[1])
        self.timeout = False
        self.root: float | None = None
        self.perm_cache: dict[tuple, np.ndarray] = {}

    def _tables(self) -> None:
        """Route tensors in a smaller space: the links the objective needs plus one last column
        carrying the linear part of the key (total congestion, or hop-bytes), linear in the loads."""
        p, G = self.p, self.G
        proj = p.projection()
        pr = p.projected()
        self.cpb = cpb = pr["cpb"]
        self.A0 = p.unary() @ proj
        self.cpbT = np.ascontiguousarray(cpb.transpose(1, 0, 2))  # cpbT[h] = cpb[:, h, :]
        self.hcpb = self.hcpbT = None
        if p.has_host:
            self.hcpb = pr["hcpb"]
            self.hcpbT = np.ascontiguousarray(self.hcpb.transpose(1, 0, 2))
        self.Dp = Dp = cpb.shape[2]
        self.M = M = slice(0, Dp - 1)  # the link columns; column -1 is the linear one
        inf_diag = np.diag(np.full(G, np.inf))
        self.PC = cpb[:, :, -1] + inf_diag
        self.PCh = self.hcpb[:, :, -1] + inf_diag if self.hcpb is not None else None
        self.touch = None
        if self.obj == "avg":
            # links a route touching GPU h may load (peer, host-staged, to/from its NIC)
            pos = lambda x: x[..., M] > 0  # noqa: E731
            eo, ei = p.ext
            touch = pos(cpb).any(axis=1) | pos(cpb).any(axis=0) | pos(eo @ proj) | pos(ei @ proj)
            if self.hcpb is not None:
                touch |= pos(self.hcpb).any(axis=1) | pos(self.hcpb).any(axis=0)
            self.touch = touch
        # per-byte route rows of every GPU pair, peer then host-staged, for the completions' one gather
        self.pair_tab = cpb.reshape(G * G, Dp) if self.hcpb is None else np.concatenate(
            [cpb.reshape(G * G, Dp), self.hcpb.reshape(G * G, Dp)])
        self.W2 = self.T != 0
        self.Wh2 = self.Th != 0

    # --- scoring ----------------------------------------------------------------------------------
    def keys(self, L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return projected_keys(L, self.obj)

    def finish_idle(self, cap: np.ndarray) -> None:
        free = [h for h in range(self.G) for _ in range(cap[h])]
        for r, h in zip(self.idle, free):
            self.assign[r] = h

    def record(self, L: np.ndarray, cap: np.ndarray) -> None:
        prim, sec = self.keys(L[None])
        key = (float(prim[0]), float(sec[0]))
        if better(key, self.best_key):
            self.finish_idle(cap)
            self.best_key = key
            self.best_g = self.assign.copy()

    # --- the last levels, every completion at once -----------------------------------------------
    def completions(self, rest: list[int], cap: np.ndarray) -> np.ndarray:
        """Every placement of ``rest`` on the GPUs with room left, as rows of GPU indices."""
        K = self.K
        free = tuple(int(h) for h in np.nonzero(cap > 0)[0])
        ck = (free, len(rest), tuple(int(cap[h]) for h in free) if K > 1 else ())
        if ck not in self.perm_cache:
            if K == 1:
                rows = list(itertools.permutations(free, len(rest)))
            else:
                rows = [c for c in itertools.product(free, repeat=len(rest))
                        if all(c.count(h) <= cap[h] for h in set(c))]
            self.perm_cache[ck] = np.asarray(rows, dtype=np.int64).reshape(-1, len(rest))
        return self.perm_cache[ck]

    def finish_tail(self, rest: list[int], loads: np.ndarray, A: np.ndarray, cap: np.ndarray) -> None:
        G, n, Dp, T, Th = self.G, self.n, self.Dp, self.T, self.Th
        P = self.completions(rest, cap)
        k = len(rest)
        ra = np.asarray(rest)
        L = loads[None] + A.reshape(n * G, Dp)[ra[None, :] * G + P].sum(axis=1)
        if k > 1:
            # the bytes among the ranks being placed, every completion at once: one gather from the
            # table of per-byte routes (peer, then host-staged), one weighted sum
            sub = self.W2[np.ix_(ra, ra)]
            ii, jj = np.nonzero(sub if self.hcpb is None else (sub + self.Wh2[np.ix_(ra, ra)]))
            if len(ii):
                w = T[ra[ii], ra[jj]]
                idx = P[:, ii] * G + P[:, jj]
                if self.hcpb is not None:
                    w = np.concatenate([w, Th[ra[ii], ra[jj]]])
                    idx = np.concatenate([idx, idx + G * G], axis=1)
                L += np.matmul(w, self.pair_tab[idx])
        prim, sec = self.keys(L)
        b = _best_row(prim, sec)
        key = (float(prim[b]), float(sec[b]))
        if better(key, self.best_key):
            for i, r in enumerate(rest):
                self.assign[r] = P[b, i]
            cap2 = cap.copy()
            np.subtract.at(cap2, P[b], 1)
            self.finish_idle(cap2)
            self.best_key = key
            self.best_g = self.assign.copy()
            for r in rest:
                self.assign[r] = -1

    # --- bounds -------------------------------------------------------------------------------------
    def bound(self, loads: np.ndarray, Ar: np.ndarray, rest: list[int], free: np.ndarray,
              cheap: bool) -> tuple[tuple[float, float], np.ndarray]:
        """Lower bound of the key over every completion, and the look-ahead maxima (U, F).
        ``cheap``: skip the assignment-problem bounds (the caller enumerates every completion next)."""
        K, M, obj, T, Th = self.K, self.M, self.obj, self.T, self.Th
        lsa = 0 if cheap else self.lsa_links
        tot = loads[None, None, M] + Ar[:, :, M]
        mx = tot.max(axis=2)  # (U, F)
        lbmax = max(float(loads[M].max()), float(mx.min(axis=1).max()))
        # per link: every unplaced rank adds at least its cheapest contribution to it
        per_link = loads[M] + Ar[:, :, M].min(axis=1).sum(axis=0)
        lbmax = max(lbmax, float(per_link.max()))
        if obj == "max" and lsa and len(rest) > 1 and K == 1 and lbmax <= self.best_key[0] * (1 + REL_EPS):
            # for the links where that bites hardest the ranks must also take distinct GPUs (an
            # assignment problem per link, solved exactly): what makes cuts like a switch uplink count
            for d in np.argsort(-per_link)[:self.lsa_links]:
                cost = Ar[:, :, d]
                ri, ci = linear_sum_assignment(cost)
                lbmax = max(lbmax, float(loads[d] + cost[ri, ci].sum()))
        if K == 1 and len(rest) > 1 and lsa:
            cost = Ar[:, :, -1]
            ri, ci = linear_sum_assignment(cost)  # distinct GPUs for the unplaced ranks
            sums = cost[ri, ci].sum()
        else:
            sums = Ar[:, :, -1].min(axis=1).sum()
        lbsum = float(loads[-1]) + float(sums)
        if K == 1 and len(rest) > 1:
            # bytes among unplaced ranks: at least the cheapest route of their kind between two
            # distinct free GPUs (with K > 1 they might share a GPU: nothing is claimed)
            ix = np.ix_(rest, rest)
            ff = np.ix_(free, free)
            pend = T[ix].sum()
            if pend:
                lbsum += float(pend) * float(self.PC[ff].min())
            if self.PCh is not None:
                pendh = Th[ix].sum()
                if pendh:
                    lbsum += float(pendh) * float(self.PCh[ff].min())
        if obj == "max":
            return (lbmax, lbsum), mx
        if obj == "hop-bytes":
            return (lbsum, lbmax), mx
        most = int(np.count_nonzero((loads[M] > 0) | self.touch[free].any(axis=0)))
        return (lbsum / max(most, 1), lbmax), mx

    # --- the search -------------------------------------------------------------------------------
    def run(self) -> None:
        self.rec(0, np.zeros(self.Dp), self.A0, np.full(self.G, self.K, dtype=np.int64), frozenset())

    def rec(self, depth: int, loads: np.ndarray, A: np.ndarray, cap: np.ndarray, used: frozenset[int]) -> None:
        self.nodes += 1
        if time.perf_counter() > self.deadline:
            self.timeout = True
        if self.timeout:
            return
        if depth == len(self.active):
            self.record(loads, cap)
            return
        rest = [j for j in self.active if self.assign[j] < 0]
        free = np.nonzero(cap > 0)[0]
        Ar = A[rest][:, free]  # (U, F, D')
        last = len(rest) <= self.tail and _placements(len(free), len(rest), self.K) <= self.tail_rows
        lb, mx = self.bound(loads, Ar, rest, free, cheap=last and depth > 0)
        if self.root is None:
            self.root = lb[0]
        if not better(lb, self.best_key):
            return
        if last:
            self.finish_tail(rest, loads, A, cap)
            return
        # fail first: the rank whose cheapest placement is already the most congested goes next
        # (ties: the static order, heaviest and most connected first)
        r = rest[int(np.argmax(mx.min(axis=1)))] if self.dynamic else rest[0]
        for h in self.children(r, loads, A, free, cap, used, depth):
            self.descend(r, h, rest, depth, loads, A, cap, used)
            if self.timeout:
                return

    def children(self, r: int, loads: np.ndarray, A: np.ndarray, free: np.ndarray, cap: np.ndarray,
                 used: frozenset[int], depth: int):
        """The GPUs to try for rank ``r``, best child first, while a child can still beat the best."""
        cands = free
        if depth < self.sym_depth and self.sym is not None:
            # one GPU per orbit of the stabiliser of the GPUs in use (GPUs holding K>1 ranks
            # remain in use, so their capacities are preserved by every such automorphism)
            reps = {min(o) for o in self.sym.orbits(used)}
            if self.K > 1:
                reps |= {h for h in used if cap[h] > 0}
            cands = np.array([h for h in free if h in reps], dtype=np.int64)
        ck = loads[None, :] + A[r, cands]
        prim, sec = self.keys(ck)
        monotone = self.obj != "avg"  # a child's own primary bounds its subtree's (not so for a ratio)
        for i in np.lexsort((sec, prim)):
            if monotone and not better((float(prim[i]), float(sec[i])), self.best_key):
                # children come in order of their primary: none after this one can do better
                if float(prim[i]) > self.best_key[0] * (1 + REL_EPS):
                    return
                continue
            yield int(cands[i])

    def descend(self, r: int, h: int, rest: list[int], depth: int, loads: np.ndarray, A: np.ndarray,
                cap: np.ndarray, used: frozenset[int]) -> None:
        """Place ``r`` on ``h``, update the look-ahead table, search below, undo."""
        T, Th = self.T, self.Th
        self.assign[r] = h
        A2 = A.copy()
        # every unplaced rank j now also talks to r on GPU h
        nxt = [j for j in rest if j != r]
        if nxt:
            A2[nxt] += T[nxt, r][:, None, None] * self.cpbT[h][None] + T[r, nxt][:, None, None] * self.cpb[h][None]
            if self.hcpb is not None:
                A2[nxt] += (Th[nxt, r][:, None, None] * self.hcpbT[h][None]
                            + Th[r, nxt][:, None, None] * self.hcpb[h][None])
        cap[h] -= 1
        self.rec(depth + 1, loads + A[r, h], A2, cap, used | {h})
        cap[h] += 1
        self.assign[r] = -1

    def result(self, sym: Symmetry, seconds: float) -> NodeResult:
        ok = not self.timeout
        g = np.asarray(self.best_g)
        key = self.p.key(g)
        root = self.root if self.root is not None else key[0]
        return NodeResult(g, key, ok, "exact branch-and-bound", self.nodes, seconds,
                          {"automorphisms": sym.order if self.G <= 16 else None, "symmetry_queries": sym.queries,
                           "bound": key[0] if ok else min(root, key[0])})
