"""A multi-node placement being worked on: who is on which node and GPU, and every node's link loads.

Every directed link of the platform belongs to exactly one node's problem: the links inside node
``u`` and the up/down links of ``u``'s NICs (bytes leaving ``u`` load its NIC uplink, bytes entering
it the downlink). So the platform's congestion vector is the concatenation of the node problems'
vectors, and the objective's key of the whole placement (max and total, hop-bytes, or the average
over used links) comes from the per-node rows without routing anything again. Changing one node's
ranks or GPUs re-solves and re-scores only that node (and the nodes that exchange ranks with it):
what the split comparison, the refinement and the final polish all rely on.

The traffic is kept as two compressed adjacency lists (by sender and by receiver), so building one
node's problem costs the number of its ranks' edges, not the size of the whole matrix.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from rankmap.mapping.automorph import Symmetry
from rankmap.mapping.cost import Traffic, evaluate
from rankmap.mapping.exact import solve_exact
from rankmap.mapping.heuristic import solve_heuristic
from rankmap.mapping.multilevel import split_ranks
from rankmap.mapping.objective import better
from rankmap.mapping.platform import Platform
from rankmap.mapping.problem import NodeProblem


def _ranges(starts: np.ndarray, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated index ranges ``starts[r]:starts[r+1]`` of ``ranks``, and the position of the rank
    (in ``ranks``) each index belongs to."""
    lo, hi = starts[ranks], starts[ranks + 1]
    counts = hi - lo
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(ranks)), counts)
    if total == 0:
        return np.zeros(0, dtype=np.int64), owner
    offs = np.cumsum(counts) - counts
    idx = np.arange(total) - np.repeat(offs, counts) + np.repeat(lo, counts)
    return idx, owner


class Cluster:
    """Node and GPU of every rank, with per-node congestion rows kept up to date."""

    def __init__(self, pf: Platform, tr: Traffic, K: int, objective: str, *, seed: int = 0,
                 exact_max_gpus: int = 16) -> None:
        self.pf, self.tr, self.K, self.objective, self.seed = pf, tr, K, objective, seed
        self.exact_max_gpus = exact_max_gpus
        m = pf.node
        self.m = m
        self.cap = pf.G * K
        host = tr.host if tr.host is not None else np.zeros_like(tr.bytes)
        o = np.argsort(tr.src, kind="stable")
        self.o_dst, self.o_b, self.o_h = tr.dst[o], tr.bytes[o], host[o]
        self.o_start = np.searchsorted(tr.src[o], np.arange(tr.n + 1))
        i = np.argsort(tr.dst, kind="stable")
        self.i_src, self.i_b = tr.src[i], tr.bytes[i]
        self.i_start = np.searchsorted(tr.dst[i], np.arange(tr.n + 1))
        self.bw_bytes = m.bw_bytes
        self.node_of = np.zeros(tr.n, dtype=np.int64)
        self.gpu_of = np.zeros(tr.n, dtype=np.int64)
        self.loads = np.zeros((pf.nodes, m.n_cols))
        self.proven = np.zeros(pf.nodes, dtype=bool)
        self.sym: dict[tuple[bool, bool, bool], Symmetry] = {}
        self._pos = -np.ones(tr.n, dtype=np.int64)
        self.solvers: set[str] = set()

    # --- state --------------------------------------------------------------------------------
    def members(self, u: int, node_of: np.ndarray | None = None) -> np.ndarray:
        return np.nonzero((self.node_of if node_of is None else node_of) == u)[0]

    def set_split(self, node_of: np.ndarray, gpu_of: np.ndarray | None = None) -> None:
        """A new node split with every node's ranks on GPUs in rank order (as a launcher would), or
        on the GPUs ``gpu_of`` gives them."""
        self.node_of = np.asarray(node_of, dtype=np.int64).copy()
        if gpu_of is None:
            # local rank order: the position of each rank among its node's ranks
            o = np.argsort(self.node_of, kind="stable")
            first = np.searchsorted(self.node_of[o], np.arange(self.pf.nodes))
            local = np.empty(len(o), dtype=np.int64)
            local[o] = np.arange(len(o)) - first[self.node_of[o]]
            self.gpu_of = local % self.pf.G
        else:
            self.gpu_of = np.asarray(gpu_of, dtype=np.int64).copy()
        # every node's row at once from the platform's loads (one pass, not one problem per node)
        cong = evaluate(self.pf, self.tr, self.node_of, self.gpu_of).congestion
        N, D = self.pf.nodes, self.m.D
        self.loads[:, :D] = cong[: N * D].reshape(N, D)
        self.loads[:, D:] = cong[N * D:].reshape(N, -1)
        self.proven[:] = False

    def key(self, loads: np.ndarray | None = None) -> tuple[float, float]:
        """The objective's key of the whole placement, from the per-node rows."""
        L = self.loads if loads is None else loads
        mx = float(L.max()) if L.size else 0.0
        if self.objective == "max":
            return (mx, float(L.sum()))
        if self.objective == "hop-bytes":
            return (float((L @ self.bw_bytes).sum()), mx)
        used = int(np.count_nonzero(L))
        return (float(L.sum()) / used if used else 0.0, mx)

    def snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.node_of.copy(), self.gpu_of.copy(), self.loads.copy(), self.proven.copy()

    def restore(self, snap) -> None:
        self.node_of, self.gpu_of, self.loads, self.proven = (x.copy() for x in snap)

    # --- one node -------------------------------------------------------------------------------
    def problem(self, u: int, ranks: np.ndarray, node_of: np.ndarray | None = None) -> NodeProblem:
        """Node ``u``'s problem when it holds ``ranks`` (under ``node_of``, default the current split)."""
        node_of = self.node_of if node_of is None else node_of
        k = len(ranks)
        pos = self._pos
        pos[ranks] = np.arange(k)
        try:
            idx, own = _ranges(self.o_start, ranks)
            dst, b, h = self.o_dst[idx], self.o_b[idx], self.o_h[idx]
            inn = node_of[dst] == u
            T = np.zeros((k, k))
            Th = np.zeros((k, k))
            np.add.at(T, (own[inn], pos[dst[inn]]), b[inn] - h[inn])
            np.add.at(Th, (own[inn], pos[dst[inn]]), h[inn])
            eout = np.bincount(own[~inn], weights=b[~inn], minlength=k)
            idx, own = _ranges(self.i_start, ranks)
            src, b = self.i_src[idx], self.i_b[idx]
            off = node_of[src] != u
            ein = np.bincount(own[off], weights=b[off], minlength=k)
        finally:
            pos[ranks] = -1
        return NodeProblem(self.m, T, eout, ein, self.K, Th=Th if Th.any() else None, objective=self.objective)

    def solve(self, p: NodeProblem, budget: float, *, thorough: bool = True,
              start: np.ndarray | None = None) -> tuple[np.ndarray, bool, str, float | None]:
        """GPUs for a node problem: (positions, proven optimal, solver name, lower bound of the
        objective's primary figure for this node, or None when only the heuristic ran).

        ``thorough``: branch and bound (seeded by the tabu search on nodes above 8 GPUs), within
        ``budget``; otherwise one short tabu run, for the many trial solves of a large cluster.
        ``start`` (GPUs of the same ranks) seeds the tabu search and is never beaten by its answer."""
        m, K = self.m, self.K
        if p.n == 0:
            return np.zeros(0, dtype=np.int64), True, "trivial", 0.0
        if p.n == 1 and not p.has_ext and not p.has_host:
            return np.zeros(1, dtype=np.int64), True, "trivial", 0.0
        t0 = time.perf_counter()
        if start is not None and np.bincount(start, minlength=m.G).max() > K:
            start = None  # ranks that came from other nodes may share a GPU: no use as a start
        exact_ok = m.G <= self.exact_max_gpus
        if not exact_ok:
            return self._solve_large(p, budget, thorough=thorough, start=start)
        sk = (p.has_ext, p.has_host, p.has_peer)
        if sk not in self.sym:
            self.sym[sk] = Symmetry(m, with_nics=p.has_ext, with_host=p.has_host, with_peer=p.has_peer)
        sym = self.sym[sk]
        if thorough and m.G <= 8:
            e = solve_exact(p, time_budget=max(budget, 0.005), sym=sym, upper=_upper(p, start))
            return e.gpu_of, e.optimal, _name(e.optimal), e.info["bound"]
        restarts = 2 if thorough else 1
        iters = None if thorough else max(20, 2 * m.G * K)
        h = solve_heuristic(p, seed=self.seed, time_budget=max(budget * (0.3 if thorough else 1.0), 0.002),
                            restarts=restarts, iters=iters, start=start)
        best_g, best_key = h.gpu_of, h.key
        if start is not None:
            start_key = p.key(start)
            if not better(best_key, start_key):
                best_g, best_key = np.asarray(start), start_key
        if not thorough:
            return best_g, False, h.solver, None
        left = max(budget - (time.perf_counter() - t0), 0.005)
        e = solve_exact(p, time_budget=left, upper=(best_g, best_key), sym=sym)
        return e.gpu_of, e.optimal, _name(e.optimal), e.info["bound"]

    def _solve_large(self, p: NodeProblem, budget: float, *, thorough: bool,
                     start: np.ndarray | None) -> tuple[np.ndarray, bool, str, float | None]:
        """A node above ``exact_max_gpus`` GPUs: its ranks split along the node's switch tree
        (:mod:`rankmap.mapping.multilevel`), or the given start where that is better, then the swap
        search from there (one start; random restarts do not pay on a node this large)."""
        t0 = time.perf_counter()
        m, K = self.m, self.K
        best_g, best_key, name = None, None, "tabu swap search"
        if thorough or start is None:
            best_g = split_ranks(p, seed=self.seed)
            best_key, name = p.key(best_g), "hierarchical split + tabu swap search"
        if start is not None and (best_key is None or better(p.key(start), best_key)):
            best_g, best_key = np.asarray(start), p.key(start)
        iters = None if thorough else max(20, 2 * m.G * K)
        left = max(budget - (time.perf_counter() - t0), 0.002)
        h = solve_heuristic(p, seed=self.seed, time_budget=left, restarts=1, iters=iters, start=best_g)
        if better(h.key, best_key):
            best_g = h.gpu_of
        return best_g, False, name, None

    def split_node(self, u: int) -> None:
        """Node ``u``'s ranks split along the node's GPU tree (:func:`split_ranks`), where that is
        better than where they are."""
        r = self.members(u)
        if not len(r):
            return
        p = self.problem(u, r)
        g = split_ranks(p, seed=self.seed)
        if better(p.key(g), p.key(self.gpu_of[r])):
            self.assign_node(u, r, p, g, False)

    def place_node(self, u: int, budget: float, *, thorough: bool = True, cache: dict | None = None) -> None:
        """Solve node ``u`` again for its current ranks and update its row."""
        r = self.members(u)
        if not len(r):
            self.loads[u] = 0.0
            self.proven[u] = True
            return
        p = self.problem(u, r)
        key = None
        start = self.gpu_of[r]
        if cache is not None:
            # the problem with its ranks in the order of their GPUs: nodes whose ranks differ only in
            # their numbers (a ring's stretches, a halo's blocks) share one key and one solve
            o = np.argsort(start, kind="stable")
            ix = np.ix_(o, o)
            key = hashlib.sha1(p.T[ix].tobytes() + p.eout[o].tobytes() + p.ein[o].tobytes()
                               + (p.Th[ix].tobytes() if p.Th is not None else b"") + start[o].tobytes()
                               + bytes([thorough])).digest()
            if key in cache:
                go, ok = cache[key]
                g = np.empty_like(go)
                g[o] = go
                self.assign_node(u, r, p, g, ok)
                return
        g, ok, name, _ = self.solve(p, budget, thorough=thorough, start=start)
        self.solvers.add(name)
        if cache is not None:
            cache[key] = (g[o], ok)
        self.assign_node(u, r, p, g, ok)

    def assign_node(self, u: int, r: np.ndarray, p: NodeProblem, g: np.ndarray, ok: bool) -> None:
        self.gpu_of[r] = g
        self.loads[u] = p.loads(g)
        self.proven[u] = ok


def _upper(p: NodeProblem, start: np.ndarray | None):
    return None if start is None else (np.asarray(start), p.key(start))


def _name(optimal: bool) -> str:
    return "exact branch-and-bound" if optimal else "exact branch-and-bound (cut short)"
