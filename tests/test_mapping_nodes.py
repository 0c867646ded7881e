"""Multi-node placement: never worse than the default, uneven node splits, host-staged bytes weighed as
they travel, the objectives across nodes, and lower bounds that hold (checked against brute force)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from conftest import cli
from test_mapping_staged import split as host_split
from rankmap.mapping import patterns, split
from rankmap.mapping.bounds import lower_bound
from rankmap.mapping.cluster import Cluster
from rankmap.mapping.cost import Traffic, default_mapping, evaluate
from rankmap.mapping.objective import score_key
from rankmap.mapping.platform import Platform, node_model
from rankmap.mapping.solve import place
from rankmap.mapping.traffic import write_csv
from rankmap.topology import fixtures


def _pf(name: str, nodes: int) -> Platform:
    return Platform(node_model(fixtures.get(name)), nodes)


TWO_NODE = patterns.two_node_suite()


def check_placement(pf: Platform, tr, pl, objective: str = "max") -> None:
    """A valid placement, scored right, never worse than the default by the objective."""
    n = tr.n if isinstance(tr, Traffic) else tr.shape[0]
    cap = pf.G
    assert np.bincount(pl.node_of, minlength=pf.nodes).max() <= cap
    assert len(set(zip(pl.node_of.tolist(), pl.gpu_of.tolist()))) == n  # one rank per GPU
    s = evaluate(pf, tr, pl.node_of, pl.gpu_of)
    assert score_key(pl.score, objective) == pytest.approx(score_key(s, objective), rel=1e-9)
    got, dflt = score_key(pl.score, objective), score_key(pl.default, objective)
    assert got[0] <= dflt[0] * (1 + 1e-9), (got, dflt)
    if got[0] >= dflt[0] * (1 - 1e-9):
        assert got[1] <= dflt[1] * (1 + 1e-9)
    assert pl.bound <= got[0] * (1 + 1e-9)
    assert 0.0 <= pl.gap <= 1.0


@pytest.mark.parametrize("pattern", list(TWO_NODE))
@pytest.mark.parametrize("host", ["none", "all", "random"])
def test_two_node_patterns_never_worse_than_default(pattern, host):
    pf = _pf("dgx1-v100", 2)
    T = TWO_NODE[pattern]
    H = None if host == "none" else (T if host == "all" else host_split(T, seed=5)[1])
    tr = Traffic.from_dense(T, H)
    pl = place(pf, tr, time_budget=5)
    check_placement(pf, tr, pl)


@pytest.mark.parametrize("name", ["pcie-8gpu-2socket", "hgx-h100"])
@pytest.mark.parametrize("pattern", ["transpose 5+4+3", "two rings 12", "butterfly 12", "interleaved rings 16"])
def test_two_node_patterns_other_nodes(name, pattern):
    pf = _pf(name, 2)
    T = TWO_NODE[pattern]
    for H in (None, host_split(T, seed=2)[1]):
        tr = Traffic.from_dense(T, H)
        check_placement(pf, tr, place(pf, tr, time_budget=5))


def test_pencil_transpose_keeps_rows_whole_with_an_uneven_split():
    """12 ranks in three rows of 4 on two 8-GPU nodes: 8 + 4 keeps every row on one node (nothing
    crosses the network); a 6 + 6 split must cut a row. The default blocks are already 8 + 4 and
    optimal here, so rankmap keeps them and says so."""
    pf = _pf("dgx1-v100", 2)
    T = patterns.transpose([4, 4, 4])
    pl = place(pf, T, time_budget=5)
    check_placement(pf, T, pl)
    assert pl.default_kept and pl.notes and "default placement is kept" in pl.notes[0]
    d_node, d_gpu = default_mapping(12, pf)
    assert pl.node_of.tolist() == d_node.tolist() and pl.gpu_of.tolist() == d_gpu.tolist()
    assert pl.score.loads[pf.nodes * pf.node.D:].sum() == 0  # no byte on the network


def test_uneven_rows_find_an_uneven_split():
    """Rows of 5, 4 and 3 on two NVSwitch nodes: 5 + 3 on one node and 4 on the other keeps every
    row whole; the default blocks (8 + 4) cut the row of 4."""
    pf = _pf("hgx-h100", 2)
    T = patterns.transpose([5, 4, 3])
    pl = place(pf, T, time_budget=5)
    check_placement(pf, T, pl)
    assert sorted(np.bincount(pl.node_of, minlength=2).tolist()) == [4, 8]
    assert pl.score.loads[pf.nodes * pf.node.D:].sum() == 0
    assert pl.default.max_congestion > 5 * pl.score.max_congestion
    assert not pl.default_kept


def test_host_staged_pairs_are_weighed_as_they_travel():
    """Keeping a host-staged pair on one node saves less than keeping a peer-to-peer pair there: it
    still goes up to the host and down again."""
    for name in ("dgx1-v100", "pcie-8gpu-2socket", "hgx-h100"):
        wp, wh = split.edge_weights(node_model(fixtures.get(name)))
        assert 0 < wh < wp, name


@pytest.mark.parametrize("seed", range(4))
def test_halo_with_host_staged_share_never_worse_than_default(seed):
    """A 16-rank 2-D halo over two DGX-1 with a random host-staged share, where a split weighing all
    bytes alike could do worse than the default blocks."""
    pf = _pf("dgx1-v100", 2)
    T = patterns.halo(16, 2)
    _, H = host_split(T, seed=seed)
    tr = Traffic.from_dense(T, H)
    check_placement(pf, tr, place(pf, tr, time_budget=5))


@pytest.mark.parametrize("objective", ["avg", "hop-bytes"])
def test_other_objectives_across_nodes(objective):
    pf = _pf("dgx1-v100", 2)
    for T in (patterns.transpose([5, 4, 3]), patterns.butterfly(16), patterns.rings(12)):
        tr = Traffic.from_dense(T)
        pl = place(pf, tr, time_budget=5, objective=objective)
        assert pl.objective == objective
        check_placement(pf, tr, pl, objective)


def test_cluster_key_is_the_platform_key():
    """The per-node rows add up to the whole platform's figures, for every objective."""
    pf = _pf("dgx1-v100", 3)
    T = patterns.random_sparse(20, 4, seed=2)
    _, H = host_split(T, seed=1)
    tr = Traffic.from_dense(T, H)
    rng = np.random.default_rng(0)
    for objective in ("max", "avg", "hop-bytes"):
        cl = Cluster(pf, tr, 1, objective)
        slots = rng.permutation(24)[:20]
        cl.set_split(slots // 8)
        for u in range(3):
            r = cl.members(u)
            cl.assign_node(u, r, cl.problem(u, r), slots[r] % 8, False)
        s = evaluate(pf, tr, cl.node_of, cl.gpu_of)
        assert cl.key() == pytest.approx(score_key(s, objective), rel=1e-9)


def test_split_candidates():
    pf = _pf("dgx1-v100", 3)
    tr = Traffic.from_dense(patterns.transpose([5, 4, 3]))
    cands = split.candidates(tr, pf, 1)
    assert cands[0][0] == "default"
    names = [c[0] for c in cands]
    assert len(set(names)) == len(names)
    for _, parts in cands:
        assert np.bincount(parts, minlength=3).max() <= 8
        assert parts[0] == 0  # nodes numbered by their lowest rank
    assert len({c[1].tobytes() for c in cands}) == len(cands)


@pytest.mark.parametrize("objective", ["max", "avg", "hop-bytes"])
def test_lower_bounds_hold_against_brute_force(objective):
    """Every placement of 5 ranks on 3 two-GPU nodes is at least the bound."""
    pf = _pf("h200x2-nvswitch", 3)
    T = patterns.random_sparse(5, 3, seed=4)
    _, H = host_split(T, seed=3)
    for tr in (Traffic.from_dense(T), Traffic.from_dense(T, H)):
        b = lower_bound(pf, tr, 1, objective)
        best = min(score_key(evaluate(pf, tr, np.array(s) // 2, np.array(s) % 2), objective)[0]
                   for s in itertools.permutations(range(6), 5))
        assert 0 < b <= best * (1 + 1e-9)
        pl = place(pf, tr, time_budget=2, objective=objective)
        assert pl.bound <= best * (1 + 1e-9)
        assert pl.value >= best * (1 - 1e-9)


def test_cut_short_search_returns_best_so_far_with_its_gap():
    pf = Platform(node_model(fixtures.get("dgx1-v100")), 64)
    tr = Traffic.from_dense(patterns.random_sparse(512, 4, seed=1))
    pl = place(pf, tr, time_budget=0.5)
    check_placement(pf, tr, pl)
    assert not pl.optimal and pl.bound > 0 and 0 < pl.gap < 1


def test_map_cli_objective_and_default_note(tmp_path):
    f = tmp_path / "rows.csv"
    write_csv(f, patterns.transpose([4, 4, 4]))
    p = cli("map", "--traffic", str(f), "--topology", "dgx1-v100", "--nodes", "2", "--format", "json",
                "--time-budget", "3")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["objective"] == "max" and doc["default_kept"] is True
    assert doc["notes"] and doc["bound"] <= doc["max_congestion"]
    t = cli("map", "--traffic", str(f), "--topology", "dgx1-v100", "--nodes", "2", "--time-budget", "3")
    assert "note: the default placement is kept" in t.stdout
    g = tmp_path / "tree.csv"
    write_csv(g, patterns.tree(8))
    h = cli("map", "--traffic", str(g), "--topology", "dgx1-v100", "--objective", "hop-bytes", "--format", "json")
    assert h.returncode == 0, h.stderr
    hd = json.loads(h.stdout)
    assert hd["objective"] == "hop-bytes" and hd["optimal"] is True and hd["gap"] == 0
    assert hd["hop_bytes"] <= hd["default"]["hop_bytes"]
    bad = cli("map", "--traffic", str(f), "--topology", "dgx1-v100", "--objective", "fastest")
    assert bad.returncode != 0 and "invalid choice" in bad.stderr


def test_objective_choices_match_the_library():
    from rankmap.commands._args import OBJECTIVE_CHOICES
    from rankmap.mapping.objective import OBJECTIVES

    assert tuple(OBJECTIVE_CHOICES) == OBJECTIVES
