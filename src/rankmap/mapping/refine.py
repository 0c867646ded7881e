"""Bottleneck-driven refinement of a multi-node placement.

METIS minimises the bytes that cross nodes, not the busiest link: a node can end up with one rank that
receives from many remote ranks, and the NIC that rank's GPU uses becomes the bottleneck. This pass
looks at the busiest directed link; when off-node traffic loads it, it takes the rank of that node
that puts most bytes on it, and tries to swap one of its heaviest remote partners into the node in
exchange for the node's rank least tied to it. Each trial re-solves only the two nodes involved and is
kept only when the whole placement gets lexicographically better (max, then total congestion).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from rankmap.mapping.cost import Score, Traffic, evaluate
from rankmap.mapping.exact import _lt
from rankmap.mapping.platform import Platform


def refine(pf: Platform, tr: Traffic, node_of: np.ndarray, gpu_of: np.ndarray, score: Score,
           solve_node: Callable[[np.ndarray, np.ndarray], np.ndarray], deadline: float,
           partners: int = 4) -> tuple[np.ndarray, np.ndarray, Score, int]:
    """Improve ``(node_of, gpu_of)`` until the deadline or no trial helps; returns the count of swaps.

    ``solve_node(ranks, node_of)`` places the given ranks of one node and returns their GPUs.
    """
    m = pf.node
    N, D = pf.nodes, m.D
    nn = len(m.nic_bw)
    nic = np.asarray([k if k is not None else 0 for k in m.nic_of], dtype=np.int64)
    node_of = node_of.copy()
    gpu_of = gpu_of.copy()
    accepted = 0
    tried: set[tuple[int, int]] = set()
    S = np.concatenate([tr.src, tr.dst])
    Dd = np.concatenate([tr.dst, tr.src])
    B = np.concatenate([tr.bytes, tr.bytes])
    order = np.argsort(S, kind="stable")
    S, Dd, B = S[order], Dd[order], B[order]
    starts = np.searchsorted(S, np.arange(tr.n + 1))
    while time.perf_counter() < deadline:
        d = int(np.argmax(score.congestion))
        if d < N * D:
            u, local = divmod(d, D)
            # only links on the way to or from a NIC carry off-node traffic
            gpus_out = np.nonzero(m.ext_out_inc[:, local] > 0)[0]
            gpus_in = np.nonzero(m.ext_in_inc[:, local] > 0)[0]
        else:
            u, r = divmod(d - N * D, 2 * nn)
            k, down = divmod(r, 2)
            gs = np.nonzero(nic == k)[0]
            gpus_out, gpus_in = (np.array([], dtype=np.int64), gs) if down else (gs, np.array([], dtype=np.int64))
        mine = np.nonzero(node_of == u)[0]
        contrib = np.zeros(len(mine))
        for i, r in enumerate(mine):
            if gpu_of[r] in gpus_out:
                sel = (tr.src == r) & (node_of[tr.dst] != u)
                contrib[i] += tr.bytes[sel].sum()
            if gpu_of[r] in gpus_in:
                sel = (tr.dst == r) & (node_of[tr.src] != u)
                contrib[i] += tr.bytes[sel].sum()
        if not contrib.any():
            break  # the bottleneck is in-node traffic: the node solver already did its best
        improved = False
        for i in np.argsort(-contrib):
            if contrib[i] <= 0 or time.perf_counter() >= deadline:
                break
            r = mine[i]
            nb, w = Dd[starts[r]:starts[r + 1]], B[starts[r]:starts[r + 1]]
            remote = node_of[nb] != u
            cand = nb[remote][np.argsort(-w[remote])][:partners]
            for q in cand:
                v = int(node_of[q])
                if (int(q), u) in tried:
                    continue
                tried.add((int(q), u))
                # the rank of u that loses least by moving to v
                best_s, best_gain = None, None
                for s_ in mine:
                    if s_ == r:
                        continue
                    nbs, ws = Dd[starts[s_]:starts[s_ + 1]], B[starts[s_]:starts[s_ + 1]]
                    gain = ws[node_of[nbs] == v].sum() - ws[node_of[nbs] == u].sum()
                    if best_gain is None or gain > best_gain:
                        best_s, best_gain = s_, gain
                if best_s is None:
                    continue
                new_node = node_of.copy()
                new_node[q], new_node[best_s] = u, v
                new_gpu = gpu_of.copy()
                for w_ in (u, v):
                    rk = np.nonzero(new_node == w_)[0]
                    new_gpu[rk] = solve_node(rk, new_node)
                sc = evaluate(pf, tr, new_node, new_gpu)
                if _lt(sc.key[:2], score.key[:2]):
                    node_of, gpu_of, score = new_node, new_gpu, sc
                    accepted += 1
                    improved = True
                    break
                if time.perf_counter() >= deadline:
                    break
            if improved:
                break
        if not improved:
            break
    return node_of, gpu_of, score, accepted
