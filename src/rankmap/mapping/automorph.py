"""Automorphisms of a node: GPU permutations under which every mapping keeps its cost.

A permutation ``p`` of GPU positions is an automorphism when some permutation of the directed links
(keeping bandwidths) carries the route of every GPU pair ``(g, h)`` onto the route of
``(p[g], p[h])``, and every GPU's NIC route onto its image's. Then moving every rank from ``g`` to
``p[g]`` permutes the link loads without changing a single value, so the exact solver needs to try
only one GPU per orbit of the automorphisms that fix the GPUs already used.

The test is exact: each directed link is described by the set of "route rows" (GPU pairs, GPU->NIC,
NIC->GPU, NIC uplink/downlink sharing) that use it, plus its bandwidth; ``p`` is an automorphism iff
the multiset of those descriptions is unchanged when ``p`` renames the rows. Candidate permutations
come from a backtracking search that keeps only images consistent in *pair colours* (hop count and
bandwidths along the route), a necessary condition that prunes almost everything that would fail.
On an NVSwitch node all GPUs are alike: the transpositions (0 i) are automorphisms, they generate the
full symmetric group, and any placement is optimal.

When a problem has host-staged bytes (``with_host``), the host-staged route of every GPU pair (and of
every GPU with itself) is one more route row: an automorphism must carry those routes too. On a
two-socket NVSwitch node that breaks the full symmetry, since host-staged bytes see the sockets.
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from rankmap.mapping.platform import NodeModel


class Symmetry:
    """Automorphism queries on one node model (results cached by fixed-point set)."""

    def __init__(self, model: NodeModel, *, with_nics: bool = True, with_host: bool = False,
                 with_peer: bool = True, query_budget: int = 4000) -> None:
        self.m = model
        G, D = model.G, model.D
        self.G = G
        self.query_budget = query_budget
        self.with_host = with_host
        # a problem whose every in-node byte is host-staged need not respect the peer routes
        self.with_peer = with_peer = with_peer or not with_host
        rows = G * G + (2 * G if with_nics else 0) + (G * G if with_host else 0)
        nn = len(model.nic_bw)
        cols = D + (2 * nn if with_nics else 0)
        M = np.zeros((rows, cols), dtype=np.uint8)
        if with_peer:
            M[: G * G, :D] = model.inc.reshape(G * G, D)
        bw = list(model.bw)
        if with_nics:
            M[G * G: G * G + G, :D] = model.ext_out_inc > 0
            M[G * G + G: G * G + 2 * G, :D] = model.ext_in_inc > 0
            for k in range(nn):
                for g in range(G):
                    if model.nic_of[g] == k:
                        M[G * G + g, D + 2 * k] = 1
                        M[G * G + G + g, D + 2 * k + 1] = 1
                bw += [model.nic_bw[k], model.nic_bw[k]]
        if with_host:
            # host-staged routes as rows of their own; a link crossed twice keeps its count
            M[rows - G * G:, :D] = model.hinc.reshape(G * G, D)
        used = M.any(axis=0)
        self.M = M[:, used]
        bwc = np.asarray(bw)[used]
        _, self.bw_code = np.unique(np.round(bwc, 9), return_inverse=True)
        self.with_nics = with_nics
        self._ref = self._signature(np.arange(rows))
        # pair colours: (hops, sorted bandwidths) of each route; diagonal: the GPU's NIC route; with
        # host routes, the same of the host-staged route too (on an NVSwitch node the peer routes
        # are all alike and only the host routes tell the sockets apart)
        col: dict[tuple, int] = {}
        C = np.zeros((G, G), dtype=np.int64)

        def host_colour(g: int, h: int) -> tuple:
            if not with_host:
                return ()
            ds = np.nonzero(model.hinc[g, h])[0]
            return (tuple(sorted(zip(np.round(model.bw[ds], 9), model.hinc[g, h, ds]))),)

        for g in range(G):
            for h in range(G):
                if g == h:
                    ds = np.nonzero(M[G * G + g])[0] if with_nics else []
                    key = ("self", tuple(sorted(np.round(np.asarray(bw)[ds], 9)))) + host_colour(g, g)
                elif with_peer:
                    ds = np.nonzero(model.inc[g, h])[0]
                    key = (len(ds), tuple(sorted(np.round(model.bw[ds], 9)))) + host_colour(g, h)
                else:
                    key = ("pair",) + host_colour(g, h)
                C[g, h] = col.setdefault(key, len(col))
        self.C = C
        vkey = {}
        self.vcol = np.array([vkey.setdefault((tuple(sorted(C[g])), tuple(sorted(C[:, g]))), len(vkey))
                              for g in range(G)])
        self._orbit_cache: dict[frozenset[int], list[list[int]]] = {}
        self.queries = 0

    # --- the exact test ---------------------------------------------------------------------
    def _row_map(self, p: np.ndarray) -> np.ndarray:
        G = self.G
        g = np.arange(G)
        pair = (p[:, None] * G + p[None, :]).reshape(-1)
        parts = [pair]
        if self.with_nics:
            parts += [G * G + p[g], G * G + G + p[g]]
        if self.with_host:
            base = G * G + (2 * G if self.with_nics else 0)
            parts.append(base + pair)
        return np.concatenate(parts) if len(parts) > 1 else pair

    def _signature(self, rowmap: np.ndarray) -> np.ndarray:
        Mp = np.empty_like(self.M)
        Mp[rowmap] = self.M
        cols = np.ascontiguousarray(np.vstack([Mp, self.bw_code[None, :].astype(np.uint8)]).T)
        v = cols.view(np.dtype((np.void, cols.shape[1])))[:, 0]
        return np.sort(v)

    def is_automorphism(self, p) -> bool:
        p = np.asarray(p, dtype=np.int64)
        if not np.array_equal(self.C[np.ix_(p, p)], self.C):
            return False
        return bool(np.array_equal(self._signature(self._row_map(p)), self._ref))

    # --- search -----------------------------------------------------------------------------
    def find(self, fixed: set[int] | frozenset[int], x: int, y: int) -> np.ndarray | None:
        """An automorphism fixing ``fixed`` pointwise and sending ``x`` to ``y``, or None (also when
        the search budget runs out: a missed symmetry only costs pruning, never correctness)."""
        self.queries += 1
        G = self.G
        if self.vcol[x] != self.vcol[y]:
            return None
        if (x in fixed or y in fixed) and x != y:
            return None
        p = -np.ones(G, dtype=np.int64)
        taken = np.zeros(G, dtype=bool)
        for f in fixed:
            p[f] = f
            taken[f] = True
        p[x] = y
        taken[y] = True
        order = [g for g in range(G) if p[g] < 0]
        budget = [self.query_budget]
        C, vcol = self.C, self.vcol

        def rec(i: int) -> bool:
            budget[0] -= 1
            if budget[0] < 0:
                return False
            if i == len(order):
                return self.is_automorphism(p)
            g = order[i]
            mapped = np.nonzero(p >= 0)[0]
            # prefer the identity first: automorphisms often fix most points
            cands = [g] + [h for h in range(G) if h != g]
            for h in cands:
                if taken[h] or vcol[h] != vcol[g] or C[g, g] != C[h, h]:
                    continue
                pm = p[mapped]
                if np.any(C[g, mapped] != C[h, pm]) or np.any(C[mapped, g] != C[pm, h]):
                    continue
                p[g] = h
                taken[h] = True
                if rec(i + 1):
                    return True
                p[g] = -1
                taken[h] = False
            return False

        return p.copy() if rec(0) else None

    def orbits(self, fixed: frozenset[int], free: list[int] | None = None) -> list[list[int]]:
        """Orbits of the pointwise stabiliser of ``fixed`` on the other GPUs (cached)."""
        if fixed in self._orbit_cache:
            return self._orbit_cache[fixed]
        G = self.G
        pts = [g for g in range(G) if g not in fixed]
        parent = {g: g for g in pts}

        def root(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        if self.symmetric:
            res = [pts] if pts else []
        else:
            # colour refinement: points that see the fixed GPUs (and each other) differently can
            # never share an orbit, so only pairs of equal colour are worth a search
            fx = sorted(fixed)
            colour = {g: (int(self.vcol[g]),) + tuple(int(self.C[f, g]) for f in fx)
                      + tuple(int(self.C[g, f]) for f in fx) for g in pts}
            for _ in range(3):
                ids: dict = {}
                newc = {g: ids.setdefault((colour[g], tuple(sorted((int(self.C[g, h]), colour[h])
                                                                   for h in pts if h != g))), len(ids))
                        for g in pts}
                if len(set(newc.values())) == len(set(colour.values())):
                    break
                colour = newc
            for i, x in enumerate(pts):
                for y in pts[i + 1:]:
                    if root(x) == root(y) or colour[x] != colour[y]:
                        continue
                    p = self.find(fixed, x, y)
                    if p is not None:
                        # every point moved by p joins its image's orbit: free extra merges
                        for a in pts:
                            b = int(p[a])
                            ra, rb = root(a), root(b)
                            if ra != rb:
                                parent[max(ra, rb)] = min(ra, rb)
            groups: dict[int, list[int]] = {}
            for g in pts:
                groups.setdefault(root(g), []).append(g)
            res = sorted(groups.values())
        self._orbit_cache[fixed] = res
        return res

    @cached_property
    def symmetric(self) -> bool:
        """True when every GPU permutation is an automorphism (transpositions (0 i) generate S_G)."""
        G = self.G
        for i in range(1, G):
            p = np.arange(G)
            p[0], p[i] = i, 0
            if not self.is_automorphism(p):
                return False
        return True

    @cached_property
    def order(self) -> int:
        """Group order by orbit-stabiliser along the base 0, 1, 2, ... (a lower bound if a search ran
        out of budget)."""
        if self.symmetric:
            return math.factorial(self.G)
        total = 1
        fixed: frozenset[int] = frozenset()
        for b in range(self.G):
            orb = next((o for o in self.orbits(fixed) if b in o), [b])
            total *= len(orb)
            fixed = fixed | {b}
        return total
