"""Pairwise swap refinement of a partition with exact part sizes (Kernighan-Lin style).

METIS asked for exact balance (``ufactor=1``) into parts of 4-8 ranks has almost no room to move a
vertex: a part may exceed its size by a thousandth of it, less than one rank. Its refinement is then
mostly idle, and on a random sparse graph cut into 512 parts of 8 it leaves several percent of the
cut that a partitioner with exact-balance swaps (KaHIP's) removes. This pass does the swaps: it keeps
``C[r, p]``, the weight from rank ``r`` to part ``p``, for every rank and part (a dense array; the pass
is skipped where that array would be too large), and per round

1. takes every rank's best other part and its gain ``C[r, v] - C[r, u]`` at once (numpy, over the
   whole array);
2. for each rank with a positive gain, the partner in the target part whose move back gains most,
   again for all candidates at once through a (parts x size) table of members;
3. applies the candidates best-first, each one's gain recomputed exactly first (the swaps before it
   changed ``C``, and the direct weight between the two ranks counts twice), only while it is still
   positive; ``C`` is updated in the time of the two ranks' edges.

Rounds repeat until one gains nothing; then Kernighan-Lin passes between every two parts joined
by an edge (:func:`_pairs`) take whole sequences of swaps, kept up to their best prefix, until a
round gains nothing or the deadline passes. The cut never grows, the sizes never
change, and the result depends only on the input (no random choices).
"""

from __future__ import annotations

import time

import numpy as np

#: the largest ranks x parts array the pass keeps (float64: 64 MB)
MAX_CELLS = 8_000_000

#: rounds at most (each one a full scan; a round that gains nothing ends the pass anyway)
MAX_ROUNDS = 30


def refine_cut(xadj: np.ndarray, adj: np.ndarray, w: np.ndarray, parts: np.ndarray, *,
               deadline: float | None = None, rounds: int = MAX_ROUNDS, kl: bool = True) -> np.ndarray:
    """``parts`` with a cut as low or lower (edge weights ``w`` of the CSR graph ``xadj, adj``, both
    directions listed), every part's size unchanged. ``kl``: the Kernighan-Lin passes between parts
    too (about a millisecond per pair of parts: for a node split within a deadline, not for the many
    small cuts inside every node)."""
    parts, w, C = _ties(xadj, adj, w, parts)
    if C is None:
        return parts
    n, P = C.shape
    sizes = np.bincount(parts, minlength=P)
    width = int(sizes.max())
    # members[p, :sizes[p]]: the ranks of part p; slot[r]: r's column there
    members = -np.ones((P, width), dtype=np.int64)
    slot = np.empty(n, dtype=np.int64)
    order = np.argsort(parts, kind="stable")
    first = np.searchsorted(parts[order], np.arange(P))
    slot[order] = np.arange(n) - first[parts[order]]
    members[parts, slot] = np.arange(n)
    eps = 1e-12 * float(w.sum())
    ar = np.arange(n)
    for _ in range(rounds):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        own = C[ar, parts]
        G = C - own[:, None]
        G[ar, parts] = -np.inf
        target = np.argmax(G, axis=1)
        gain = G[ar, target]
        cand = np.nonzero(gain > eps)[0]
        if not len(cand):
            break
        u, v = parts[cand], target[cand]
        mem = members[v]                                   # (candidates, width)
        back = np.where(mem >= 0, G[np.maximum(mem, 0), u[:, None]], -np.inf)
        est = gain[cand] + back.max(axis=1)
        keep = est > eps
        cand = cand[keep][np.argsort(-est[keep], kind="stable")]
        gained = 0.0
        for a in cand.tolist():
            if deadline is not None and time.perf_counter() >= deadline:
                break
            g = _apply_best(a, int(target[a]), parts, C, members, slot, xadj, adj, w, eps)
            gained += g
        if gained <= eps:
            break
    if kl:
        _pairs(parts, C, members, slot, xadj, adj, w, eps, deadline)
    return parts


def _ties(xadj, adj, w, parts) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A copy of ``parts``, the weights as floats, and ``C[r, p]``: the weight from rank ``r`` to part
    ``p``, None where there is nothing to refine (under 3 ranks, no edge, one part) or the array
    would exceed ``MAX_CELLS``."""
    parts = np.asarray(parts, dtype=np.int64).copy()
    w = np.asarray(w, dtype=float)
    n = len(parts)
    P = int(parts.max()) + 1 if n else 0
    if n < 3 or len(adj) == 0 or P < 2 or n * P > MAX_CELLS:
        return parts, w, None
    C = np.zeros((n, P))
    np.add.at(C, (np.repeat(np.arange(n), np.diff(xadj)), parts[adj]), w)
    return parts, w, C


def _pairs(parts, C, members, slot, xadj, adj, w, eps: float, deadline: float | None,
           rounds: int = 4) -> None:
    """Kernighan-Lin on every two parts joined by an edge, heaviest first: a whole sequence of swaps
    between them (each the best left, each rank swapped once), of which the best prefix is kept,
    so that a run of swaps that first loses and then gains more (a grid's boundary moved by a
    row) is found, which no single swap with a gain is."""
    n, P = C.shape
    rows = np.repeat(np.arange(n), np.diff(xadj))
    where = -np.ones(n, dtype=np.int64)     # scratch: a rank's position among the two parts' ranks
    dirty = np.ones(P, dtype=bool)          # parts changed since their pairs were last tried
    for _ in range(rounds):
        between = np.zeros((P, P))
        np.add.at(between, (parts[rows], parts[adj]), w)
        iu, iv = np.nonzero(np.triu(between, 1))
        keep = dirty[iu] | dirty[iv]
        iu, iv = iu[keep], iv[keep]
        now = np.zeros(P, dtype=bool)
        for k in np.argsort(-between[iu, iv], kind="stable").tolist():
            if deadline is not None and time.perf_counter() >= deadline:
                return
            u, v = int(iu[k]), int(iv[k])
            if not (dirty[u] or dirty[v] or now[u] or now[v]):
                continue
            if _kl(u, v, parts, C, members, slot, xadj, adj, w, eps, where) > 0:
                now[u] = now[v] = True
        if not now.any():
            return
        dirty = now


def _kl(u: int, v: int, parts, C, members, slot, xadj, adj, w, eps: float, where: np.ndarray) -> float:
    """One Kernighan-Lin pass between parts ``u`` and ``v``; returns the cut it removed."""
    U, V = members[u], members[v]
    U, V = U[U >= 0], V[V >= 0]
    both = np.concatenate([U, V])
    k = len(both)
    lo, hi = xadj[both], xadj[both + 1]
    counts = hi - lo
    idx = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
    own = np.repeat(np.arange(k), counts)
    where[both] = np.arange(k)
    local = where[adj[idx]]
    where[both] = -1
    inside = local >= 0
    if not inside.any():
        return 0.0
    A = np.zeros((k, k))
    np.add.at(A, (own[inside], local[inside]), w[idx][inside])
    nu = len(U)
    side = np.zeros(k, dtype=bool)
    side[nu:] = True                                    # False: in u, True: in v
    D = np.where(side, C[both, u] - C[both, v], C[both, v] - C[both, u])
    locked = np.zeros(k, dtype=bool)
    seq, gains = [], []
    for _ in range(min(nu, k - nu)):
        a_ok = ~locked[:nu]
        b_ok = ~locked[nu:]
        g = D[:nu, None] + D[None, nu:] - 2 * A[:nu, nu:]
        g[~a_ok, :] = -np.inf
        g[:, ~b_ok] = -np.inf
        i, j = np.unravel_index(int(np.argmax(g)), g.shape)
        j += nu
        seq.append((i, j))
        gains.append(float(g[i, j - nu]))
        locked[i] = locked[j] = True
        # a (i) goes to v and b (j) to u: every other rank's gain changes by its ties to the two
        same_a = ~side                                  # ranks on a's old side
        D += np.where(same_a, 2 * A[:, i] - 2 * A[:, j], 2 * A[:, j] - 2 * A[:, i])
    cum = np.cumsum(gains)
    best = int(np.argmax(cum))
    if cum[best] <= eps:
        return 0.0
    for i, j in seq[: best + 1]:
        _swap(int(both[i]), int(both[j]), u, v, parts, C, members, slot, xadj, adj, w)
    return float(cum[best])


def _apply_best(a: int, v: int, parts, C, members, slot, xadj, adj, w, eps: float) -> float:
    """Swap ``a`` (into part ``v``) with the member of ``v`` that makes the swap gain most, if that
    gain is positive; returns the gain (0 when nothing was swapped)."""
    u = int(parts[a])
    if u == v:
        return 0.0
    ga = C[a, v] - C[a, u]
    mem = members[v]
    mem = mem[mem >= 0]
    nb, ww = adj[xadj[a]:xadj[a + 1]], w[xadj[a]:xadj[a + 1]]
    inv = parts[nb] == v
    direct = np.zeros(len(mem))
    if inv.any():
        # weight between a and each member of v (a's neighbours in v, matched to the members)
        direct = ww[inv] @ (nb[inv][:, None] == mem[None, :])
    gb = C[mem, u] - C[mem, v] - 2 * direct
    i = int(np.argmax(gb))
    total = ga + float(gb[i])
    if total <= eps:
        return 0.0
    _swap(a, int(mem[i]), u, v, parts, C, members, slot, xadj, adj, w)
    return total


def _swap(a: int, b: int, u: int, v: int, parts, C, members, slot, xadj, adj, w) -> None:
    """``a`` (of part ``u``) and ``b`` (of part ``v``) trade parts, and columns in the members table."""
    _move(a, u, v, C, xadj, adj, w)
    _move(b, v, u, C, xadj, adj, w)
    parts[a], parts[b] = v, u
    sa, sb = slot[a], slot[b]
    members[v, sb], members[u, sa] = a, b
    slot[a], slot[b] = sb, sa


def _move(r: int, u: int, v: int, C, xadj, adj, w) -> None:
    nb, ww = adj[xadj[r]:xadj[r + 1]], w[xadj[r]:xadj[r + 1]]
    np.subtract.at(C[:, u], nb, ww)
    np.add.at(C[:, v], nb, ww)


def cut(xadj: np.ndarray, adj: np.ndarray, w: np.ndarray, parts: np.ndarray) -> float:
    """Weight of the edges between parts (each undirected edge once when both directions are listed)."""
    rows = np.repeat(np.arange(len(parts)), np.diff(xadj))
    return float(np.asarray(w, dtype=float)[parts[rows] != parts[adj]].sum()) / 2


def level_cut(xadj: np.ndarray, adj: np.ndarray, w: np.ndarray, parts: np.ndarray, *,
              deadline: float | None = None, steps: int = 200) -> np.ndarray:
    """``parts`` with the largest part's outside weight (its edges to other parts) lowered by swaps,
    no other part's raised to it, sizes unchanged.

    The busiest link of a node with one NIC is that NIC, and its load is the node's bytes to other
    nodes, whatever the GPUs: the split that cuts least in total (:func:`refine_cut`) can still leave
    one node above the others (a random graph of 512 ranks on 8 nodes of 64 GPUs: 24.8 GB against
    24.4 for KaHIP's). Each step takes the part with the most outside weight and, of all swaps of
    one of its ranks with a rank elsewhere, the one after which the larger of the two parts' outside
    weights is least, if that is below the part's weight now. The weights are the two directions
    together: a NIC's load either way where each pair's bytes are alike both ways, else a proxy (the
    candidate is scored like any other)."""
    parts, w, C = _ties(xadj, adj, w, parts)
    if C is None:
        return parts
    n, P = C.shape
    deg = C.sum(axis=1)
    ar = np.arange(n)
    eps = 1e-12 * float(w.sum())
    for _ in range(steps):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        ext = np.bincount(parts, weights=deg - C[ar, parts], minlength=P)
        u = int(np.argmax(ext))
        A = np.nonzero(parts == u)[0]
        B = np.nonzero(parts != u)[0]
        if not len(A) or not len(B):
            break
        vb = parts[B]
        # weight between each rank of u and every other rank
        Wab = np.zeros((len(A), n))
        lo, hi = xadj[A], xadj[A + 1]
        cnt = hi - lo
        idx = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt) + np.repeat(lo, cnt)
        np.add.at(Wab, (np.repeat(np.arange(len(A)), cnt), adj[idx]), w[idx])
        Wab = Wab[:, B]
        new_u = ext[u] + (2 * C[A, u] - deg[A])[:, None] + (deg[B] - 2 * C[B, u])[None, :] + 2 * Wab
        new_v = (ext[vb] + 2 * C[B, vb] - deg[B])[None, :] + deg[A][:, None] - 2 * C[A][:, vb] + 2 * Wab
        worst = np.maximum(new_u, new_v)
        i, j = np.unravel_index(int(np.argmin(worst)), worst.shape)
        if worst[i, j] >= ext[u] - eps:
            break
        a, b, v = int(A[i]), int(B[j]), int(vb[j])
        _move(a, u, v, C, xadj, adj, w)
        _move(b, v, u, C, xadj, adj, w)
        parts[a], parts[b] = v, u
    return parts
