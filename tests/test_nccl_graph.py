"""NCCL's own rings and trees, replayed from real NCCL INFO logs, decide who sends to whom.

The logs under tests/data/nccl/ are excerpts of output that users of three kinds of machines posted
publicly (each file names its source): an NVLink mesh (4x V100 with NVLink between every pair), GPUs
behind PCIe switches in two nodes joined by InfiniBand, and an 8x H100 NVSwitch node; and one whole
log recorded by rankmap's own GPU validation (NCCL 2.28.9, nccl-tests ``all_reduce_perf -g 2`` on two
H200 behind NVSwitch). The expected pairs below are worked out by hand from the rings and trees those
logs print.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rankmap.pairs import nccl_graph, nccl_model
from rankmap.formats import record as records
from rankmap.pairs.nccl_model import NcclComm, NcclProfile, OpRow

DATA = Path(__file__).resolve().parent / "data" / "nccl"


def graph_of(name: str) -> nccl_graph.CommGraph:
    (g,) = nccl_graph.parse((DATA / name).read_text(), name).values()
    return g


def profile(n: int, rows: list[OpRow], graph: nccl_graph.CommGraph | None) -> NcclProfile:
    """n ranks (one file each), one communicator whose every rank ran ``rows``."""
    c = NcclComm(0x77, "c", n, {r: r for r in range(n)}, {r: list(rows) for r in range(n)}, graph)
    return NcclProfile(None, [None] * n, list(range(n)), "test", {0x77: c})


def row(func: str, S: int, algo: str = "RING", root: int = -1, channels: int = 8, calls: int = 1) -> OpRow:
    return OpRow(func, S, algo, "SIMPLE", channels, root, calls, 0, 0, 0, 0)


def matrix(n: int, sends: dict[int, dict[int, int]]) -> np.ndarray:
    m = np.zeros((n, n), dtype=np.int64)
    for s, d in sends.items():
        for t, b in d.items():
            m[s, t] += b
    return m


def test_nvlink_mesh_rings() -> None:
    g = graph_of("nvlink-mesh-4xv100.log")
    assert g.nranks == 4 and g.complete_rings() == [5, 6, 7]
    assert g.rings == {5: [0, 2, 1, 3], 6: [0, 1, 3, 2], 7: [0, 3, 1, 2]}
    assert g.complete_trees() == []                   # only rank 0's trees were posted
    # AllReduce 4000 B on 8 channels: 2(n-1)/n x S = 6000 B per rank, a third on each ring shown
    p = profile(4, [row("AllReduce", 4000)], g)
    want = matrix(4, {0: {2: 2000, 1: 2000, 3: 2000}, 1: {3: 4000, 2: 2000},
                      2: {1: 2000, 0: 4000}, 3: {0: 2000, 2: 2000, 1: 2000}})
    assert np.array_equal(nccl_model.pair_matrix(p)[0], want)
    assert nccl_model.pairs(p).order == {0x77: "nccl-graph"}
    assert {k[3] for k in nccl_model.pairs(p).rows} == {"mirror"}
    # without NCCL's log the same call is a ring in rank order: a different matrix
    ro = nccl_model.pair_matrix(profile(4, [row("AllReduce", 4000)], None))[0]
    assert np.array_equal(ro, matrix(4, {r: {(r + 1) % 4: 6000} for r in range(4)})) and not np.array_equal(ro, want)
    # trees incomplete: a TREE AllReduce falls back to the chain in rank order, labelled a model
    t = nccl_model.pairs(profile(4, [row("AllReduce", 100, "TREE")], g))
    assert t.rows == {(r, p, "ncclAllReduce", "model"): [100, 1] for r in range(4) for p in (r - 1, r + 1) if 0 <= p < 4}


def test_pcie_tree_two_nodes_trees_and_ring() -> None:
    g = graph_of("pcie-ib-2x4gpu.log")
    assert g.nranks == 8 and g.complete_trees() == [0, 1] and g.complete_rings() == [1]
    assert g.parent[0] == {0: -1, 1: 0, 2: 1, 3: 2, 4: 0, 5: 4, 6: 5, 7: 6}
    assert g.parent[1] == {0: 4, 1: 0, 2: 1, 3: 2, 4: -1, 5: 4, 6: 5, 7: 6}
    # TREE AllReduce 8000 B on 2 channels: 4000 B per tree, to the parent and to every child
    p = profile(8, [row("AllReduce", 8000, "TREE", channels=2)], g)
    want = matrix(8, {0: {1: 8000, 4: 8000}, 1: {0: 8000, 2: 8000}, 2: {1: 8000, 3: 8000}, 3: {2: 8000},
                      4: {0: 8000, 5: 8000}, 5: {4: 8000, 6: 8000}, 6: {5: 8000, 7: 8000}, 7: {6: 8000}})
    assert np.array_equal(nccl_model.pair_matrix(p)[0], want)
    # between the nodes only 0 <-> 4 carries tree traffic (NCCL's inter-node tree edge)
    cross = [(s, d) for s in range(8) for d in range(8) if want[s, d] and (s < 4) != (d < 4)]
    assert cross == [(0, 4), (4, 0)]
    # a RING AllGather follows the one ring the log shows, node by node: 0 3 2 1 | 4 7 6 5
    a = nccl_model.pairs(profile(8, [row("AllGather", 1000, channels=2)], g))
    ring = [0, 3, 2, 1, 4, 7, 6, 5]
    assert a.rows == {(ring[i], ring[(i + 1) % 8], "ncclAllGather", "mirror"): [7000, 1] for i in range(8)}


def test_nvswitch_ring_not_in_rank_order() -> None:
    g = graph_of("nvswitch-8xh100.log")
    assert g.nranks == 8 and g.rings == {4: [0, 3, 1, 2, 4, 7, 5, 6]}
    assert g.parent[0] == {1: 3} and g.children[0] == {1: [2]}
    ring = [0, 3, 1, 2, 4, 7, 5, 6]
    # Broadcast from root 0 along NCCL's ring: every member but the root's predecessor (6) forwards it
    b = nccl_model.pairs(profile(8, [row("Broadcast", 1024, root=0, channels=24)], g))
    assert b.rows == {(ring[i], ring[i + 1], "ncclBroadcast", "mirror"): [1024, 1] for i in range(7)}
    # Reduce to root 2: every member but the root sends to its ring successor
    r = nccl_model.pairs(profile(8, [row("Reduce", 512, root=2, channels=24)], g))
    assert r.rows == {(ring[i], ring[(i + 1) % 8], "ncclReduce", "mirror"): [512, 1] for i in range(8) if ring[i] != 2}
    # NVLS (through the switch) has no pair structure: the ring volume spread, labelled a model
    nv = nccl_model.pairs(profile(8, [row("AllReduce", 8000, "NVLS", channels=24)], g))
    assert nv.rows[(0, 1, "ncclAllReduce", "model")] == [2000, 1] and len(nv.rows) == 56


def test_nvswitch_two_h200_recorded_log() -> None:
    """The whole INIT/GRAPH log of a real run: 24 rings 0 -> 1 and 24 trees, half rooted at each GPU."""
    g = graph_of("nvswitch-2xh200.log")
    assert g.nranks == 2 and g.complete_rings() == list(range(24)) and g.complete_trees() == list(range(24))
    assert set(map(tuple, g.rings.values())) == {(0, 1)}
    roots = {ch: next(r for r, p in g.parent[ch].items() if p == -1) for ch in range(24)}
    assert [ch for ch, r in roots.items() if r == 1] == [*range(6, 12), *range(18, 24)]
    # What the GPU run measured on NVLink: 14 all-reduces each of 32, 64 and 128 MiB put 3288334336
    # bytes on the wire in each direction (NVML's counters agreed within 0.006 %)
    sizes = [32 << 20, 64 << 20, 128 << 20]
    p = profile(2, [row("AllReduce", s, channels=24, calls=14) for s in sizes], g)
    assert np.array_equal(nccl_model.pair_matrix(p)[0], matrix(2, {0: {1: 3288334336}, 1: {0: 3288334336}}))
    # as trees: each channel reduces up and broadcasts down its two-GPU tree, the same bytes each way
    t = nccl_model.pair_matrix(profile(2, [row("AllReduce", 24 << 20, "TREE", channels=24)], g))[0]
    assert np.array_equal(t, matrix(2, {0: {1: 24 << 20}, 1: {0: 24 << 20}}))
    assert {k[3] for k in nccl_model.pairs(p).rows} == {"mirror"}
