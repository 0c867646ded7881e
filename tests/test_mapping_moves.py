"""Placement moves no rank without a real gain: fewest moves among equal placements, and the default
kept under --min-gain, with the optimality statements kept true."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from conftest import assert_one_line_error, cli
from rankmap.mapping import patterns, synth
from rankmap.mapping.cost import as_traffic, default_mapping, evaluate
from rankmap.mapping.objective import score_key
from rankmap.mapping.platform import Platform, node_model
from rankmap.mapping.solve import place
from rankmap.mapping.traffic import write_csv
from rankmap.topology import fixtures


def _platform(name: str, nodes: int = 1) -> Platform:
    return Platform(node_model(synth.builtin(name) or fixtures.get(name)), nodes)


def near_uniform(G: int, seed: int, noise: float = 0.002) -> np.ndarray:
    """An all-to-all whose pairs differ by a fraction of a percent: the default placement is within a
    hair of the best one on any node."""
    T = patterns.alltoall(G, 1e9) * (1 + noise * np.random.default_rng(seed).random((G, G)))
    np.fill_diagonal(T, 0)
    return T


def fewest_equal(pf: Platform, T: np.ndarray, objective: str) -> tuple[tuple[float, float], int]:
    """Brute force over every assignment of one node: the best key, and the fewest ranks any
    placement of that key moves from the default (rank r on GPU r)."""
    G, n = pf.G, len(T)
    tr = as_traffic(T)
    rows = np.array(list(itertools.permutations(range(G), n)))
    keys = np.array([score_key(evaluate(pf, tr, np.zeros(n, dtype=np.int64), g), objective) for g in rows])
    best = keys[:, 0].min()
    tie = keys[:, 0] <= best * (1 + 1e-9)
    best2 = keys[tie, 1].min()
    tie &= keys[:, 1] <= best2 * (1 + 1e-9)
    return (float(best), float(best2)), int(np.count_nonzero(rows[tie] != np.arange(n), axis=1).min())


@pytest.mark.parametrize("name,pattern,objective", [
    ("cube-mesh-8", "ring", "max"), ("cube-mesh-8", "halo4d", "avg"), ("cube-mesh-8", "tree", "hop-bytes"),
    ("cube-mesh-8", "transpose", "max"), ("cube-mesh-8", "butterfly", "hop-bytes"),
    ("pcie-8", "random-dense", "max"), ("dgx1-v100", "halo3d", "max"), ("summit", "random", "max"),
])
def test_equal_placements_prefer_the_fewest_moved_ranks(name, pattern, objective):
    """The exact search stopped at the first optimum it reached, often a relabelling of the node away
    from the default: the cube mesh's ring moved 6 ranks where 5 do, its tree 7 for hop-bytes where
    2 do. Among optimal placements the one moving the fewest ranks is now returned."""
    pf = _platform(name)
    T = patterns.suite(pf.G, seed=7)[pattern]
    pl = place(pf, T, objective=objective)
    key, fewest = fewest_equal(pf, T, objective)
    assert pl.optimal and not pl.default_kept
    assert score_key(pl.score, objective) == pytest.approx(key, rel=1e-7)
    assert int(np.count_nonzero(pl.gpu_of != np.arange(len(T)))) == fewest
    assert pl.moved == fewest


def test_fewest_moves_relabels_nodes_and_keeps_the_key():
    """Across nodes a placement's nodes can be renamed at no cost: the one with the most ranks on
    their default node is kept, with the same figures."""
    from rankmap.mapping.cluster import Cluster
    from rankmap.mapping.moves import fewest_moves, moved

    pf = _platform("dgx1-v100", 2)
    T = patterns.rings(16, 2, interleaved=True)
    pl = place(pf, T, time_budget=5, min_gain=0)
    tr = as_traffic(T)
    d_node, d_gpu = default_mapping(16, pf)
    swapped = 1 - pl.node_of           # the same placement with nodes 0 and 1 renamed
    key = score_key(evaluate(pf, tr, swapped, pl.gpu_of), "max")
    assert key == pytest.approx(score_key(pl.score, "max"), rel=1e-9)
    node_of, gpu_of = fewest_moves(Cluster(pf, tr, 1, "max"), swapped, pl.gpu_of, d_node, d_gpu,
                                   deadline=float("inf"))
    assert score_key(evaluate(pf, tr, node_of, gpu_of), "max") == pytest.approx(key, rel=1e-9)
    assert moved(node_of, gpu_of, d_node, d_gpu) <= pl.moved < moved(swapped, pl.gpu_of, d_node, d_gpu)


@pytest.mark.parametrize("name", ["dgx1-v100", "pcie-8gpu-2socket", "summit"])
def test_a_gain_under_min_gain_keeps_the_default(name):
    """On a near-uniform all-to-all the optimum beat the default by 0.01-0.05 % and moved up to every
    rank, reported as "1.00x". Under --min-gain (1 % by default) the default is kept, and the
    figures say how far it is from the proven optimum instead of calling it optimal."""
    pf = _platform(name)
    T = near_uniform(pf.G, seed=1)
    pl = place(pf, T)
    assert pl.default_kept and pl.moved == 0
    assert pl.gpu_of.tolist() == list(range(pf.G)) and pl.node_of.tolist() == [0] * pf.G
    assert not pl.optimal and pl.best["optimal"] and pl.best["moved_ranks"] > 0
    assert 0 < pl.best["gain"] < 0.01
    assert pl.bound == pytest.approx(pl.best["max_congestion"]) and pl.bound < pl.score.max_congestion
    assert pl.gap == pytest.approx(pl.best["gain"])
    assert "within" in pl.notes[0] and "of the optimum on maximum congestion" in pl.notes[0]
    every = place(pf, T, min_gain=0)     # 0: any better placement is taken
    assert every.optimal and not every.default_kept and every.moved == pl.best["moved_ranks"]
    assert every.score.max_congestion == pytest.approx(pl.best["max_congestion"])


def test_map_cli_keeps_the_default_and_says_by_how_little(tmp_path):
    f = tmp_path / "a2a.csv"
    write_csv(f, near_uniform(8, seed=1))
    args = ("map", "--traffic", str(f), "--topology", "dgx1-v100")
    p = cli(*args, "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [doc["mapping"][str(r)]["gpu"] for r in range(8)] == list(range(8))
    assert doc["default_kept"] and doc["moved_ranks"] == 0 and doc["min_gain"] == 0.01
    assert doc["optimal"] is False and doc["best"]["optimal"] is True and 0 < doc["gap"] < 0.01
    assert doc["max_congestion"] == doc["default"]["max_congestion"] and doc["improvement"]["max"] == 1.0
    t = cli(*args)
    assert t.returncode == 0, t.stderr
    note = next(l for l in t.stdout.splitlines() if l.startswith("note: the default placement is kept"))
    assert "of the optimum on maximum congestion, a gain under --min-gain 1 %" in note, note
    assert "ranks moved from the default placement: 0 of 8" in t.stdout
    solver = next(l for l in t.stdout.splitlines() if l.startswith("solver:"))
    assert "the default placement" in solver and "above the proven optimum" in solver, solver
    assert "proven optimal" not in solver
    moved_all = json.loads(cli(*args, "--min-gain", "0", "--format", "json").stdout)
    assert moved_all["optimal"] and not moved_all["default_kept"] and moved_all["moved_ranks"] > 0
    assert 1 < moved_all["improvement"]["max"] < 1.01


def test_a_gain_on_the_tie_break_alone_is_weighed_too(tmp_path):
    """An all-to-all with a few bytes more on one pair: no placement lowers the busiest link, one
    lowers the total congestion by a hair and moved ranks for it."""
    T = patterns.alltoall(8, 1e9)
    T[0, 1] += 1000
    f = tmp_path / "t.csv"
    write_csv(f, T)
    doc = json.loads(cli("map", "--traffic", str(f), "--topology", "dgx1-v100", "--format", "json").stdout)
    assert doc["default_kept"] and doc["moved_ranks"] == 0 and doc["best"]["gain"] == 0
    assert 0 < doc["best"]["tie_break_gain"] < 0.01
    assert "as good as the optimum on maximum congestion and within" in doc["notes"][0]
    assert "of it on total congestion" in doc["notes"][0]


def test_a_real_gain_still_moves_ranks(tmp_path):
    f = tmp_path / "ring.csv"
    write_csv(f, patterns.ring(8))
    doc = json.loads(cli("map", "--traffic", str(f), "--topology", "dgx1-v100", "--format", "json").stdout)
    assert doc["optimal"] and not doc["default_kept"] and doc["best"] is None
    assert doc["moved_ranks"] == sum(e["gpu"] != int(r) for r, e in doc["mapping"].items()) > 0


def test_bad_min_gain_is_one_line(tmp_path):
    f = tmp_path / "ring.csv"
    write_csv(f, patterns.ring(8))
    for bad in ("-1", "100"):
        assert_one_line_error(cli("map", "--traffic", str(f), "--topology", "dgx1-v100", "--min-gain", bad),
                              "--min-gain", bad)


def test_min_gain_default_matches_the_library():
    from rankmap.commands._args import MIN_GAIN_PERCENT
    from rankmap.mapping.solve import MIN_GAIN

    assert MIN_GAIN_PERCENT == pytest.approx(100 * MIN_GAIN)
