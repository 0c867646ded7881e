"""The node split's refinements: pairwise swaps that lower the cut at exact sizes, rings and paths cut
along their order, and the node solver's cache shared by nodes alike up to their ranks' numbers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rankmap.mapping import split, swaps, synth
from rankmap.mapping.cluster import Cluster
from rankmap.mapping.cost import Traffic, evaluate
from rankmap.mapping.multilevel import gpu_path
from rankmap.mapping.partition import graph_parts
from rankmap.mapping.platform import Platform, node_model
from rankmap.mapping.solve import place
from rankmap.topology import fixtures


def _csr(tr: Traffic):
    us, ud, w = tr.symmetric_edges()
    return np.searchsorted(us, np.arange(tr.n + 1)), ud, w


def _random(n: int, degree: int = 4, seed: int = 3) -> Traffic:
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(n), degree)
    dst = rng.integers(0, n, n * degree)
    keep = src != dst
    b = rng.uniform(0.2, 1.8, n * degree)[keep] * 1e8
    return Traffic.from_triples(n, src[keep], dst[keep], b)


def _ring(n: int, seed: int = 7) -> Traffic:
    perm = np.random.default_rng(seed).permutation(n)
    a, c = perm, np.roll(perm, -1)
    return Traffic.from_triples(n, np.concatenate([a, c]), np.concatenate([c, a]), np.full(2 * n, 1e8))


def test_swaps_lower_metis_cut_and_keep_sizes():
    """A random sparse graph into 64 parts of 8: METIS at exact balance cannot move a rank, the swaps
    can; the sizes stay and the cut drops (by 10 % here; never rises)."""
    tr = _random(512)
    xadj, adj, w = _csr(tr)
    sizes = np.full(64, 8)
    raw = graph_parts((xadj, adj, w), 512, sizes, exact=True, seed=0, swaps=False)
    ref = swaps.refine_cut(xadj, adj, w, raw)
    assert np.array_equal(np.bincount(ref, minlength=64), sizes)
    assert swaps.cut(xadj, adj, w, ref) < 0.95 * swaps.cut(xadj, adj, w, raw)
    # the single swaps alone (graph_parts without a deadline) cut more or as much as with the
    # Kernighan-Lin passes, and less than METIS
    greedy = graph_parts((xadj, adj, w), 512, sizes, exact=True, seed=0)
    assert np.array_equal(greedy, swaps.refine_cut(xadj, adj, w, raw, kl=False))
    assert swaps.cut(xadj, adj, w, ref) <= swaps.cut(xadj, adj, w, greedy) < swaps.cut(xadj, adj, w, raw)


def test_kernighan_lin_finds_a_run_of_swaps():
    """Two rows of a ladder dealt out in interleaved blocks: no single swap lowers the cut (each one
    cuts a rung more than it saves), a run of them does; the passes between parts find it."""
    # a 2 x 8 ladder, rows 0-7 and 8-15: heavy along the rows, light rungs
    src, dst, b = [], [], []
    for row in (0, 8):
        for i in range(7):
            src.append(row + i), dst.append(row + i + 1), b.append(10.0)
    for i in range(8):
        src.append(i), dst.append(8 + i), b.append(1.0)
    tr = Traffic.from_triples(16, np.array(src + dst), np.array(dst + src), np.array(b + b))
    xadj, adj, w = _csr(tr)
    start = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0])   # left half / right half
    # the start cuts 2 row edges and 8 rungs (28), the rows apart cut the 8 rungs alone
    assert swaps.cut(xadj, adj, w, swaps.refine_cut(xadj, adj, w, start, kl=False)) == swaps.cut(xadj, adj, w, start)
    got = swaps.refine_cut(xadj, adj, w, start)
    best = min(swaps.cut(xadj, adj, w, np.isin(np.arange(16), c).astype(np.int64))
               for c in itertools.combinations(range(16), 8))
    assert swaps.cut(xadj, adj, w, got) == pytest.approx(best)
    assert np.bincount(got).tolist() == [8, 8]


def test_swaps_reach_the_optimum_of_a_small_case():
    """Two cliques of 4 dealt out badly into two parts of 4: swaps find the split with no cut, the
    optimum by brute force."""
    T = np.zeros((8, 8))
    for grp in ([0, 2, 5, 7], [1, 3, 4, 6]):
        for i, j in itertools.permutations(grp, 2):
            T[i, j] = 1.0
    T[0, 1] = T[1, 0] = 0.1
    xadj, adj, w = _csr(Traffic.from_dense(T))
    start = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    best = min(swaps.cut(xadj, adj, w, np.isin(np.arange(8), c).astype(np.int64))
               for c in itertools.combinations(range(8), 4))
    got = swaps.refine_cut(xadj, adj, w, start)
    assert swaps.cut(xadj, adj, w, got) == pytest.approx(best)
    assert np.bincount(got).tolist() == [4, 4]


def test_chain_order_of_rings_and_paths():
    """Rings and paths are cut along their order; a rank with three partners means no chain."""
    pf = Platform(node_model(fixtures.get("dgx1-v100")), 8)
    tr = _ring(64)
    node, gpu = split.chain(tr, pf, 1)
    assert np.bincount(node).tolist() == [8] * 8
    crossing = node[tr.src] != node[tr.dst]
    assert np.count_nonzero(crossing) == 2 * 8                      # two edges off each node, each way
    assert sorted(zip(node.tolist(), gpu.tolist())) == [(u, g) for u in range(8) for g in range(8)]
    path = Traffic.from_triples(10, np.arange(9), np.arange(1, 10), np.ones(9))
    node, _ = split.chain(path, Platform(pf.node, 2), 1)
    assert np.count_nonzero(node[path.src] != node[path.dst]) == 1
    star = Traffic.from_triples(4, np.zeros(3, dtype=np.int64), np.arange(1, 4), np.ones(3))
    assert split.chain(star, pf, 1) is None


def test_shuffled_ring_keeps_neighbours_on_nodes():
    """A ring of 512 ranks in a shuffled order on 64 DGX-1s: every node holds one stretch of it, so
    each NIC carries at most one edge each way: the busiest link is one edge's bytes over a NIC, the
    least any placement can reach (every node has at least two edges off it and four NICs)."""
    pf = Platform(node_model(fixtures.get("dgx1-v100")), 64)
    tr = _ring(512)
    pl = place(pf, tr, time_budget=2, kahip="off")
    nic_bw = float(pf.node.nic_bw.max()) * 1e9
    assert pl.score.max_congestion == pytest.approx(1e8 / nic_bw, rel=1e-9)
    assert np.count_nonzero(pl.node_of[tr.src] != pl.node_of[tr.dst]) == 2 * 64


def test_cache_is_shared_by_nodes_alike_up_to_rank_numbers():
    """Two nodes holding stretches of a ring: the second one's problem is the first one's with other
    rank numbers, so it comes from the cache, and it scores as a solve of its own would."""
    pf = Platform(node_model(fixtures.get("dgx1-v100")), 2)
    tr = _ring(16)
    node, gpu = split.chain(tr, pf, 1)
    cl = Cluster(pf, tr, 1, "max")
    cl.set_split(node, gpu)
    cache: dict = {}
    cl.place_node(0, 1.0, cache=cache)
    cl.place_node(1, 1.0, cache=cache)
    assert len(cache) == 1
    fresh = Cluster(pf, tr, 1, "max")
    fresh.set_split(node, gpu)
    fresh.place_node(1, 1.0)
    assert cl.loads[1].max() == pytest.approx(fresh.loads[1].max(), rel=1e-9)
    s = evaluate(pf, tr, cl.node_of, cl.gpu_of)
    assert cl.key() == pytest.approx((s.max_congestion, s.total_congestion), rel=1e-9)


@pytest.mark.parametrize("objective", ["max", "hop-bytes"])
def test_gpu_path_is_the_cheapest_by_brute_force(objective):
    """The DGX-1's GPUs in the order a chain of ranks takes: no order of the 8 GPUs has a cheaper
    sum of route costs between neighbours (every one of the 40320 tried)."""
    m = node_model(fixtures.get("dgx1-v100"))
    c = m.inc.sum(axis=2).astype(float) if objective == "hop-bytes" else m.cpb.sum(axis=2)
    c = c + c.T
    path = gpu_path(m, objective)
    assert sorted(path.tolist()) == list(range(8))
    perms = np.array(list(itertools.permutations(range(8))))
    every = c[perms[:, :-1], perms[:, 1:]].sum(axis=1)
    assert c[path[:-1], path[1:]].sum() == pytest.approx(every.min(), rel=1e-12)
    assert c[np.arange(7), np.arange(1, 8)].sum() > every.min()       # GPU order is not the cheapest


def test_multisection_nests_nodes_and_groups():
    """One recursive bisection of a 3-D grid into the 256 slots of 4 nodes of 64 GPUs (16 groups of
    4): every slot taken once, and the grid's neighbours mostly share a node and a group (the
    bisection's ranges are the nodes and their groups)."""
    m = node_model(synth.builtin("hier:4x16x4:1,10,100"))
    pf = Platform(m, 4)
    n = 256
    c = np.stack(np.unravel_index(np.arange(n), (8, 8, 4)), axis=1)
    src, dst = [], []
    for k, size in enumerate((8, 8, 4)):
        nxt = c.copy()
        nxt[:, k] += 1
        ok = nxt[:, k] < size
        src.append(np.arange(n)[ok])
        dst.append(np.ravel_multi_index(nxt[ok].T, (8, 8, 4)))
    perm = np.random.default_rng(1).permutation(n)
    s, d = perm[np.concatenate(src)], perm[np.concatenate(dst)]
    tr = Traffic.from_triples(n, np.concatenate([s, d]), np.concatenate([d, s]), np.full(2 * len(s), 1e8))
    node, gpu = split.multisection(tr, pf, 1)
    assert len(set(zip(node.tolist(), gpu.tolist()))) == n
    group = node * 16 + gpu // 4                           # synth:hier numbers a group's GPUs side by side
    edges = len(s)
    assert np.count_nonzero(node[s] != node[d]) <= 0.15 * edges
    assert np.count_nonzero(group[s] != group[d]) <= 0.6 * edges
    rank_order = np.arange(n) // 4
    # 384 of the 704 edges leave a group, against 631 with the ranks in rank order
    assert np.count_nonzero(group[s] != group[d]) < 0.7 * np.count_nonzero(rank_order[s] != rank_order[d])
    assert split.multisection(_ring(255), pf, 1) is None          # ranks that do not fill the nodes


def test_levelled_split_lowers_the_most_cut_node():
    """A random graph into 8 parts of 64: after the swaps for the total cut, levelling lowers the
    outside weight of the most cut part, raises no other part's above it, and keeps the sizes. (It
    levels the two directions together: with each pair's bytes alike both ways, as here, that is
    each NIC's load either way.)"""
    one = _random(512)
    tr = Traffic.from_triples(512, np.concatenate([one.src, one.dst]), np.concatenate([one.dst, one.src]),
                              np.concatenate([one.bytes, one.bytes]))
    xadj, adj, w = _csr(tr)
    sizes = np.full(8, 64)
    parts = graph_parts((xadj, adj, w), 512, sizes, exact=True, seed=0)

    def outside(p):
        rows = np.repeat(np.arange(512), np.diff(xadj))
        return np.bincount(p[rows], weights=np.where(p[rows] != p[adj], w, 0.0), minlength=8)

    lev = swaps.level_cut(xadj, adj, w, parts)
    assert np.array_equal(np.bincount(lev, minlength=8), sizes)
    assert outside(lev).max() < outside(parts).max()
    # on 8 nodes of 64 GPUs with one NIC each, the busiest link follows
    pf = Platform(node_model(synth.builtin("hier:4x16x8:1,10,100")), 8)
    cl = Cluster(pf, tr, 1, "max")
    cl.set_split(parts)
    before = cl.key()[0]
    cl.set_split(lev)
    assert cl.key()[0] < before
