"""Balanced partitions of the traffic graph into parts of given sizes (METIS, then an exact fix-up).

The node split (:mod:`rankmap.mapping.split`) and the hierarchical placement of large nodes
(:mod:`rankmap.mapping.multilevel`) both need the ranks cut into parts of exact sizes with few bytes
between parts. METIS (pymetis) cuts them; :func:`rebalance` then moves ranks until every part has its
size, so a partitioner's slack never overfills a node or a group. (KaHIP's ``kaffpa`` was tried here
and dropped: asked for exact balance into many small parts it took 1-60 s where METIS takes
milliseconds; KaHIP serves instead through its process mapping, :mod:`rankmap.mapping.kahipmap`.)
"""

from __future__ import annotations

import numpy as np

from rankmap.mapping.swaps import refine_cut


def partition(S: np.ndarray, sizes: np.ndarray, *, seed: int = 0, deadline: float | None = None) -> np.ndarray:
    """Part of every row of the symmetric weight matrix ``S`` (bytes), ``sizes[i]`` rows in part ``i``:
    of METIS's k-way and recursive-bisection partitions (each refined by swaps), the one that cuts
    fewer bytes."""
    n = S.shape[0]
    us, ud = np.nonzero(S)
    w = S[us, ud]
    if not len(w):
        return _in_order(n, sizes)
    wi = np.maximum(1, np.round(w / w.max() * 1_000_000)).astype(np.int64)
    xadj = np.searchsorted(us, np.arange(n + 1))
    best, best_cut = None, None
    for rec in (False, True):
        parts = graph_parts((xadj, ud, wi), n, sizes, exact=True, seed=seed, fixed=True, recursive=rec,
                            deadline=deadline)
        cut = float(w[parts[us] != parts[ud]].sum())
        if best_cut is None or cut < best_cut:
            best, best_cut = parts, cut
    return best


def _in_order(n: int, sizes: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(sizes)), sizes)[:n]


def graph_parts(g, n: int, sizes: np.ndarray, *, exact: bool, seed: int, fixed: bool = False,
                recursive: bool = False, deadline: float | None = None, swaps: bool = True) -> np.ndarray:
    """A partition of the CSR graph ``g = (xadj, adjacency, weights)`` into ``len(sizes)`` parts aiming at
    ``sizes`` (exactly, or as maxima), then fixed up (:func:`rebalance`). ``fixed``: part ``i`` gets
    ``sizes[i]`` (parts are not alike); otherwise the sizes may be dealt out among the parts.
    ``recursive``: METIS's recursive bisection instead of its k-way scheme: into a few large parts it
    cuts far less on grids (a shuffled 16x8x8 grid into 16 parts: 470 edges against 640, the busiest
    part's 64-76 against 108-112), into many small ones more. Then pairwise swaps lower the cut
    (:func:`rankmap.mapping.swaps.refine_cut`, with its Kernighan-Lin passes until ``deadline`` where
    there is one; not with ``swaps=False``): METIS at exact balance has no room
    to move a rank into a small part, and leaves 12 % of the cut of a random graph into 512 parts of 8."""
    xadj, adj, w = g
    sizes = np.asarray(sizes, dtype=np.int64)
    live = np.nonzero(sizes > 0)[0]
    nparts = len(live)
    if nparts == 1:
        return np.full(n, live[0], dtype=np.int64)
    parts = live[_metis(xadj, adj, w, n, sizes, live, exact, seed, recursive)]
    parts = rebalance(parts, sizes, xadj, adj, w, exact=exact, fixed=fixed)
    return refine_cut(xadj, adj, w, parts, deadline=deadline, kl=deadline is not None) if swaps else parts


def _metis(xadj, adj, w, n: int, sizes: np.ndarray, live: np.ndarray, exact: bool, seed: int,
           recursive: bool = False) -> np.ndarray:
    import pymetis

    nparts = len(live)
    if exact:
        tp = [float(sizes[u]) / n for u in live]
        opts = pymetis.Options(seed=seed, ufactor=1)
    else:
        tp = [1.0 / nparts] * nparts
        # METIS's tolerance: the largest part may reach (1 + ufactor/1000) x the mean
        slack = int(1000 * (sizes[live].max() * nparts / n - 1))
        opts = pymetis.Options(seed=seed, ufactor=max(1, slack))
    tp[-1] = max(0.0, 1.0 - sum(tp[:-1]))  # METIS wants them to sum to at most 1
    adjacency = pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adj)
    _, parts = pymetis.part_graph(nparts, adjacency, eweights=w, tpwgts=tp, options=opts, recursive=recursive)
    return np.asarray(parts, dtype=np.int64)


def rebalance(parts: np.ndarray, sizes: np.ndarray, xadj, adj, w, *, exact: bool = True,
              fixed: bool = False) -> np.ndarray:
    """Move ranks until every node holds ``sizes`` ranks (``exact``) or at most that many, each time
    the rank of an over-full node that loses least cut weight, to the under-full node it is most
    tied to. Unless ``fixed``, an exact target's sizes go to the parts by their size, so fewer ranks
    move."""
    parts = parts.copy()
    nodes = len(sizes)
    count = np.bincount(parts, minlength=nodes)
    target = np.asarray(sizes, dtype=np.int64).copy()
    if exact and not fixed:
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
