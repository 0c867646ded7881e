"""Machines described by levels (synth:hier:), large nodes placed along their switch tree, KaHIP's
process mapping as a seed, and the figure --min-gain is on."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_one_line_error, rankmap
from rankmap.errors import RankmapError
from rankmap.mapping import kahipmap, patterns, synth
from rankmap.mapping.cost import Traffic, default_mapping, evaluate
from rankmap.mapping.multilevel import gpu_tree, split_ranks
from rankmap.mapping.objective import score_key
from rankmap.mapping.platform import Platform, node_model
from rankmap.mapping.problem import NodeProblem, route_rows, undominated
from rankmap.mapping.solve import _gain_on, place
from rankmap.mapping.traffic import write_csv
from rankmap.topology import fixtures

HIER = "hier:4x16x16:1,10,100"


def test_route_costs_follow_the_distances():
    """Total congestion is the distance-weighted byte sum KaHIP minimises: a byte between GPUs of one
    group costs distance 1, of one node 10, of two nodes 100 (x HIER_UNIT seconds per GB)."""
    m = node_model(synth.builtin(HIER))
    c = m.cpb.sum(axis=2) * 1e9
    assert m.G == 64 and synth.implied_nodes(HIER) == 16
    assert c[0, 1] == pytest.approx(1 * synth.HIER_UNIT)      # same group of 4
    assert c[0, 4] == pytest.approx(10 * synth.HIER_UNIT)     # another group, same node
    off = (m.ext_out[0].sum() + m.ext_in[0].sum()) * 1e9 + 2 / m.nic_bw[0]
    assert off == pytest.approx(100 * synth.HIER_UNIT)        # another node
    tree = gpu_tree(m)
    assert [k["gpus"] for k in tree["children"]][:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(tree["children"]) == 16 and all(not k["children"] for k in tree["children"])


def test_four_levels_and_kahip_hierarchy():
    pf = Platform(node_model(synth.builtin("hier:2x2x2x4:1,5,10,100")), 4)
    arities, dists = kahipmap.hierarchy(pf, "max")
    assert arities == [2, 2, 2, 4]
    assert np.allclose(np.array(dists) / dists[-1], [0.01, 0.05, 0.1, 1.0], atol=1e-3)
    assert kahipmap.hierarchy(pf, "hop-bytes")[1][:3] == [200, 400, 600]   # 2, 4, 6 links of 10


@pytest.mark.parametrize("spec, needle", [
    ("synth:hier:4x16:1", "2 levels but 1 distances"),
    ("synth:hier:4x16x16", "write the levels"),
    ("synth:hier:4x0x16:1,10,100", "at least 1"),
    ("synth:hier:4x16x16:1,100,10", "grow outwards"),
    ("synth:hier:4xax16:1,10,100", "whole numbers"),
])
def test_bad_hierarchy_is_one_line(tmp_path, spec, needle):
    f = tmp_path / "ring.csv"
    write_csv(f, patterns.ring(8))
    assert_one_line_error(rankmap("map", "--traffic", str(f), "--topology", spec), needle)


def test_hierarchy_names_its_nodes(tmp_path):
    f = tmp_path / "ring.csv"
    write_csv(f, patterns.ring(32))
    spec = "synth:hier:4x4x2:1,10,100"
    doc = json.loads(rankmap("map", "--traffic", str(f), "--topology", spec, "--time-budget", "2",
                             "--format", "json").stdout)
    assert doc["nodes"] == 2 and doc["gpus_per_node"] == 16
    assert_one_line_error(rankmap("map", "--traffic", str(f), "--topology", spec, "--nodes", "3"),
                          "describes 2 nodes", "--nodes says 3")


def _shuffled(T: np.ndarray, seed: int = 0) -> np.ndarray:
    p = np.random.default_rng(seed).permutation(len(T))
    return T[np.ix_(p, p)]


def test_large_node_split_along_its_tree():
    """A shuffled ring on 64 GPUs in 16 groups of 4: the split along the tree keeps neighbours in
    groups, so only a few bytes per group leave it; the placement is at least that good."""
    m = node_model(synth.builtin("hier:4x16x1:1,10,100"))
    T = _shuffled(patterns.ring(64))
    p = NodeProblem(m, T, np.zeros(64), np.zeros(64))
    g = split_ranks(p)
    assert sorted(g.tolist()) == list(range(64))
    groups = g // 4
    tr = Traffic.from_dense(T)
    crossing = np.count_nonzero(groups[tr.src] != groups[tr.dst])
    assert crossing <= 2 * 16 * 2, crossing      # a ring cut into 16 arcs crosses 32 times each way at best
    pf = Platform(m)
    pl = place(pf, T, time_budget=3, kahip="off")
    assert "hierarchical split" in pl.solver
    assert score_key(pl.score, "max") <= p.key(g) or np.isclose(pl.score.max_congestion, p.key(g)[0])
    d = evaluate(pf, T, *default_mapping(64, pf))
    assert pl.score.max_congestion < 0.5 * d.max_congestion


def test_undominated_matches_its_definition():
    """The link filter by shared routes keeps what the pairwise definition keeps, on every fixture."""
    def by_definition(X):
        idx = np.nonzero(X.any(axis=1))[0]
        X = X[idx]
        le = (X[:, None, :] <= X[None, :, :] * (1 + 1e-12)).all(axis=2)
        keep = [idx[a] for a in range(len(idx))
                if not any(b != a and (not le[b, a] or b < a) for b in np.nonzero(le[a])[0])]
        return np.asarray(keep if keep else idx[:1])

    for name in list(fixtures.NAMES) + ["pcie-12", "nvswitch-16", "hier:2x4x1:1,10,100"]:
        m = node_model(synth.builtin(name) or fixtures.get(name))
        eo, ei = m.padded_ext
        for X in (route_rows(m.padded_cpb, eo, ei, None), route_rows(m.padded_cpb, eo, ei, m.padded_hcpb),
                  route_rows(None, eo, ei, m.padded_hcpb)):
            assert np.array_equal(undominated(X), by_definition(X)), name


def test_repair_gives_one_rank_an_element_within_its_group():
    pe = kahipmap.repair(np.array([0, 0, 1, 1, 4, 4, 6, 7]), [4, 2])
    assert sorted(pe.tolist()) == list(range(8))
    assert (pe[:4] < 4).all() and (pe[4:] >= 4).all()     # moved inside the group of 4, not across


@pytest.mark.skipif(not kahipmap.available(), reason="KaHIP (pip install 'rankmap[kahip]') is not installed")
def test_kahip_seed_is_scored_like_any_split():
    pf = Platform(node_model(synth.builtin("hier:4x4x4:1,10,100")), 4)
    T = _shuffled(patterns.halo(64, 3, nbytes=1e8), seed=2)
    tr = Traffic.from_dense(T)
    arities, dists = kahipmap.hierarchy(pf, "max")
    pe = kahipmap.process_mapping(tr, arities, dists, mode="fast")
    assert sorted(pe.tolist()) == list(range(64))
    pl = place(pf, T, time_budget=3, kahip="on")
    assert "KaHIP" in pl.info["kahip"] and any(t["split"] == "KaHIP" for t in pl.info["splits_tried"])
    d = evaluate(pf, T, *default_mapping(64, pf))
    assert pl.score.max_congestion <= d.max_congestion


def test_kahip_on_without_kahip_is_an_error(monkeypatch):
    monkeypatch.setattr(kahipmap, "available", lambda: False)
    pf = Platform(node_model(fixtures.get("dgx1-v100")), 2)
    with pytest.raises(RankmapError, match="needs KaHIP"):
        place(pf, patterns.ring(16), kahip="on")
    pl = place(pf, patterns.ring(16), kahip="auto", time_budget=2)    # auto without it: the default path
    assert "kahip" not in pl.info


def test_min_gain_figure():
    """--min-gain-on primary: a placement that gains only on the tie-break (the total congestion for
    --objective max) keeps the default; either takes it; a gain on the primary figure counts in both."""
    d = (1.0, 10.0)
    tie_only = (1.0, 8.3)          # 0 % on the busiest link, 17 % on the total
    assert _gain_on(tie_only, d, "max", 0.01, "primary") is None
    assert _gain_on(tie_only, d, "max", 0.01, "either") == "total congestion"
    assert _gain_on(tie_only, d, "max", 0.0, "primary") == "total congestion"    # 0: any better placement
    assert _gain_on((0.9, 12.0), d, "max", 0.01, "primary") == "maximum congestion"
    assert _gain_on((0.995, 5.0), d, "max", 0.01, "primary") is None
    assert _gain_on((0.995, 5.0), d, "max", 0.01, "either") == "total congestion"
    assert _gain_on((9.0, 1.0), (10.0, 0.5), "hop-bytes", 0.01, "primary") == "hop-bytes"


def test_min_gain_on_in_the_json(tmp_path):
    f = tmp_path / "ring.csv"
    write_csv(f, patterns.ring(8))
    doc = json.loads(rankmap("map", "--traffic", str(f), "--topology", "dgx1-v100", "--format", "json").stdout)
    assert doc["min_gain_on"] == "primary" and doc["gain_on"] == "maximum congestion"
    t = rankmap("map", "--traffic", str(f), "--topology", "dgx1-v100", "--min-gain-on", "either")
    assert "taken for its gain on maximum congestion (--min-gain 1 %, --min-gain-on either)" in t.stdout, t.stdout


def test_min_gain_figure_defaults_by_objective():
    """The busiest link is the tie-break of hop-bytes and avg: a gain there counts by default."""
    pf = Platform(node_model(fixtures.get("dgx1-v100")))
    assert place(pf, patterns.ring(8)).min_gain_on == "primary"
    assert place(pf, patterns.ring(8), objective="hop-bytes").min_gain_on == "either"
    assert place(pf, patterns.ring(8), objective="avg", min_gain_on="primary").min_gain_on == "primary"


def test_gain_on_choices_match_the_library():
    from rankmap.commands._args import GAIN_ON_CHOICES
    from rankmap.mapping.solve import GAIN_ON

    assert GAIN_ON_CHOICES == GAIN_ON


def test_command_budget_counts_start_up():
    import time

    from rankmap.cli import process_started
    from rankmap.pipeline.map import OUTPUT_SECONDS_PER_RANK, solver_budget

    started = process_started()
    assert started <= time.perf_counter()
    assert solver_budget(10.0, None, 4096) == 10.0
    left = solver_budget(10.0, time.perf_counter() - 2.0, 4096)
    assert left == pytest.approx(10.0 - 2.0 - OUTPUT_SECONDS_PER_RANK * 4096, abs=0.05)
    assert solver_budget(1.0, time.perf_counter() - 5.0, 10) == pytest.approx(0.1)   # a tenth at least
