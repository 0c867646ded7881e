"""Heuristic node placement: tabu swap search with incremental link loads.

Empty GPU slots are padded with silent dummy ranks, so "move a rank to a free slot" is just a swap
and the neighbourhood is all rank pairs. The search keeps ``C[x, h]``, the congestion vector rank
``x`` would put on the links were it on GPU ``h`` (given everybody else where they are). The loads after
swapping ``a`` and ``b`` are then ``loads - C[a, g_a] - C[b, g_b] + C[a, g_b] + C[b, g_a]`` plus a
correction for the ``a``-``b`` traffic itself, so *every* swap is scored at once with a few array
operations, and one swap updates ``C`` in ``O(n G D)``.

Moves are chosen best-first by the objective's key (:meth:`NodeProblem.key_of_loads`: max then
total congestion by default); a swapped pair is tabu for a few
iterations unless it beats the best mapping seen (aspiration). Restarts from random permutations,
drawn from a generator seeded by ``seed``, diversify the search. The search is deterministic for a
seed: it runs a fixed number of iterations, and the time budget only cuts it short on a machine too
slow to finish them.
"""

from __future__ import annotations

import time

import numpy as np

from rankmap.mapping.exact import NodeResult
from rankmap.mapping.objective import better, projected_keys
from rankmap.mapping.problem import NodeProblem


class _State:
    """Incremental loads of one assignment, for every in-node term (peer, then host-staged) at once.

    With ``terms = [(T_k, c_k)]`` the loads are ``sum_k sum_ij T_k[i,j] c_k[g_i, g_j]`` plus the
    off-node unary part ``U``. ``C[x, h]`` sums, over the terms, what rank ``x`` would cause on GPU
    ``h``. A host-staged route has a non-zero diagonal (``c_k[g, g]``: two ranks on one GPU still go
    through the host), so the swap formula carries a diagonal correction, zero for peer routes.
    """

    def __init__(self, p: NodeProblem, slots_gpu: np.ndarray, perm: np.ndarray) -> None:
        n = p.n
        N = len(slots_gpu)
        # loads are kept in the projected columns of the problem (links the key needs + linear column)
        pr = p.projected()
        self.terms = []
        for Tk, which in p.projected_terms():
            T = np.zeros((N, N))
            T[:n, :n] = Tk
            ck = pr[which]
            diag = np.einsum("ggd->gd", ck)
            self.terms.append((T, ck, diag if diag.any() else None))
        unary = p.projected_unary()
        U = np.zeros((N,) + unary.shape[1:])
        U[:n] = unary
        self.U = U
        self.g = slots_gpu[perm].astype(np.int64)  # GPU of each (padded) rank
        self.recompute()

    def recompute(self) -> None:
        self.C = self.U.copy()
        for T, cpb, _ in self.terms:
            cg = cpb[:, self.g, :]  # (G, N, D): cpb[h, g_j]
            cgT = cpb[self.g, :, :]  # (N, G, D): cpb[g_j, h]
            self.C += np.einsum("xj,hjd->xhd", T, cg) + np.einsum("jx,jhd->xhd", T, cgT)
        N = len(self.g)
        self.loads = 0.5 * (self.C[np.arange(N), self.g] - self.U[np.arange(N), self.g]).sum(axis=0) \
            + self.U[np.arange(N), self.g].sum(axis=0)

    def all_swaps(self) -> np.ndarray:
        """(N, N, D) loads after swapping every pair."""
        g = self.g
        N = len(g)
        Cs = self.C[np.arange(N), g]  # (N, D)
        X = self.C[:, g, :]  # X[a, b] = C[a, g_b]
        ga, gb = g[:, None], g[None, :]
        new = self.loads[None, None] - Cs[:, None] - Cs[None, :] + X + X.transpose(1, 0, 2)
        for T, cpb, diag in self.terms:
            Q = T[:, :, None] * cpb[ga, gb]  # T[a,b] cpb[g_a, g_b]
            R = T[:, :, None] * cpb[gb, ga]  # T[a,b] cpb[g_b, g_a]
            # one term at a time, left to right: the same float sums as a one-term problem always had
            new += Q
            new += Q.transpose(1, 0, 2)
            new += R
            new += R.transpose(1, 0, 2)
            if diag is not None:
                # C[a, g_b] counted the a-b bytes with both on g_b (and C[b, g_a] both on g_a)
                S = T + T.T
                new -= S[:, :, None] * (diag[ga] + diag[gb])
        return new

    def swap(self, a: int, b: int) -> None:
        ga, gb = int(self.g[a]), int(self.g[b])
        new_loads = self.all_pair(a, b)
        for T, cpb, _ in self.terms:
            # ranks x see a move from ga to gb and b from gb to ga
            self.C += (T[:, a][:, None, None] * (cpb[:, gb, :] - cpb[:, ga, :])[None]
                       + T[a, :][:, None, None] * (cpb[gb, :, :] - cpb[ga, :, :])[None]
                       + T[:, b][:, None, None] * (cpb[:, ga, :] - cpb[:, gb, :])[None]
                       + T[b, :][:, None, None] * (cpb[ga, :, :] - cpb[gb, :, :])[None])
        self.g[a], self.g[b] = gb, ga
        self.loads = new_loads

    def all_pair(self, a: int, b: int) -> np.ndarray:
        g = self.g
        ga, gb = g[a], g[b]
        res = self.loads - self.C[a, ga] - self.C[b, gb] + self.C[a, gb] + self.C[b, ga]
        for T, cpb, diag in self.terms:
            res = res + T[a, b] * (cpb[ga, gb] + cpb[gb, ga]) + T[b, a] * (cpb[gb, ga] + cpb[ga, gb])
            if diag is not None:
                res = res - (T[a, b] + T[b, a]) * (diag[ga] + diag[gb])
        return res


def _swap_keys(p: NodeProblem, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(primary, tie-break) of the objective for every swap's projected loads ``new`` (N, N, k+1)."""
    # incremental sums leave float dust where a link lost all its bytes: that is not a used link
    dust = 1e-12 * max(float(new[..., :-1].max(initial=0.0)), 1e-300)
    return projected_keys(new, p.objective, dust)


def solve_heuristic(p: NodeProblem, *, seed: int = 0, time_budget: float = 5.0, restarts: int = 8,
                    iters: int | None = None, start: np.ndarray | None = None) -> NodeResult:
    t0 = time.perf_counter()
    m = p.model
    G, K, n = m.G, p.K, p.n
    slots = np.repeat(np.arange(G), K)  # slot -> GPU
    N = len(slots)
    rng = np.random.default_rng(seed)
    iters = iters or max(50, 6 * N)
    tenure = max(3, N // 4)
    best_g = None
    best_key = (np.inf, np.inf)
    evaluated = 0
    timed_out = False
    for rs in range(restarts):
        if rs == 0:
            if start is not None:
                # the given start: rank r on GPU start[r], dummies on what is left
                perm = _perm_from_gpus(np.asarray(start), slots, n)
            else:
                perm = np.arange(N)
        else:
            perm = rng.permutation(N)
        st = _State(p, slots, perm)
        cur_key = p.key(st.g[:n])
        if better(cur_key, best_key):
            best_key, best_g = cur_key, st.g[:n].copy()
        tabu = np.zeros((N, N), dtype=np.int64)
        for it in range(iters):
            if time.perf_counter() - t0 > time_budget:
                timed_out = True
                break
            new = st.all_swaps()
            evaluated += N * N
            mx, sm = _swap_keys(p, new)
            same_gpu = st.g[:, None] == st.g[None, :]
            mask = np.triu(np.ones((N, N), dtype=bool), 1) & ~same_gpu
            if n < N:
                mask[n:, n:] = False  # dummy with dummy: a no-op
            aspir = (mx < best_key[0] * (1 - 1e-9)) | ((mx <= best_key[0] * (1 + 1e-9)) & (sm < best_key[1] * (1 - 1e-9)))
            allowed = mask & ((tabu <= it) | aspir)
            if not allowed.any():
                break
            # lexicographic best (max, then total); the max is rounded so float noise cannot hide ties
            idx = np.flatnonzero(allowed)
            scale = max(cur_key[0], 1e-30)
            pick = idx[np.lexsort((sm.ravel()[idx], np.round(mx.ravel()[idx] / scale, 9)))[0]]
            a, b = np.unravel_index(int(pick), mx.shape)
            st.swap(int(a), int(b))
            tabu[a, b] = tabu[b, a] = it + tenure + int(rng.integers(0, 3))
            cur_key = (float(mx[a, b]), float(sm[a, b]))
            if better(cur_key, best_key):
                best_key, best_g = cur_key, st.g[:n].copy()
        if timed_out:
            break
    # the incremental loads drift by float dust over many swaps: the key handed back is recomputed
    best_key = p.key(best_g) if best_g is not None else best_key
    return NodeResult(best_g, best_key, False, "tabu swap search", evaluated, time.perf_counter() - t0,
                      {"restarts": restarts, "iterations": iters, "timed_out": timed_out})


def _perm_from_gpus(gpus: np.ndarray, slots: np.ndarray, n: int) -> np.ndarray:
    N = len(slots)
    free = {int(h): list(np.nonzero(slots == h)[0]) for h in np.unique(slots)}
    perm = np.empty(N, dtype=np.int64)
    for r in range(n):
        perm[r] = free[int(gpus[r])].pop(0)
    rest = sorted(s for lst in free.values() for s in lst)
    perm[n:] = rest
    return perm
