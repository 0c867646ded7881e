"""Placement: the cost model, the exact solver against brute force, the heuristic, multi-node, `rankmap map`."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from conftest import assert_one_line_error, cli
from rankmap.mapping import patterns, synth
from rankmap.mapping.automorph import Symmetry
from rankmap.mapping.cost import evaluate
from rankmap.mapping.exact import solve_exact
from rankmap.mapping.heuristic import solve_heuristic
from rankmap.mapping.platform import Platform, node_model
from rankmap.mapping.problem import NodeProblem
from rankmap.mapping.solve import place
from rankmap.mapping.traffic import write_csv
from rankmap.topology import fixtures

FIXTURES = list(fixtures.NAMES)


def _model(name: str):
    t = synth.builtin(name) or fixtures.get(name)
    return node_model(t)


def brute_force(p: NodeProblem) -> tuple[float, float]:
    """Best key of the problem's objective over every assignment ((max, total) by default; (avg, max),
    (hop-bytes, max)); host-staged pairs on one GPU load that GPU's links."""
    G, n, K = p.model.G, p.n, p.K
    if K == 1:
        assigns = np.array(list(itertools.permutations(range(G), n)), dtype=np.int64)
    else:
        allp = np.array(list(itertools.product(range(G), repeat=n)), dtype=np.int64)
        counts = np.stack([(allp == g).sum(axis=1) for g in range(G)], axis=1)
        assigns = allp[(counts <= K).all(axis=1)]
    # the bytes every assignment puts on each GPU pair (and off the node through each GPU), times
    # their cost per byte on every link: products, instead of gathering (assignments x links) per pair
    rows = np.arange(len(assigns))
    L = np.zeros((len(assigns), p.cpb.shape[2]))
    for T, cpb in ((p.T, p.cpb), (p.Th if p.Th is not None else np.zeros_like(p.T), p.hcpb)):
        W = np.zeros((len(assigns), G * G))
        for i, j in zip(*np.nonzero(T)):
            W[rows, assigns[:, i] * G + assigns[:, j]] += T[i, j]      # one GPU pair per assignment
        L += W @ cpb.reshape(G * G, -1)
    for ext, cost in ((p.eout, p.ext[0]), (p.ein, p.ext[1])):
        if np.any(ext):
            E = np.zeros((len(assigns), G))
            for i in np.nonzero(ext)[0]:
                E[rows, assigns[:, i]] += ext[i]
            L += E @ cost
    mx = L.max(axis=1)
    if p.objective == "max":
        prim, sec = mx, L.sum(axis=1)
    elif p.objective == "hop-bytes":
        prim, sec = L @ p.bw_bytes, mx  # bytes summed over the links they cross
    else:
        prim, sec = L.sum(axis=1) / np.count_nonzero(L, axis=1), mx
    best = prim.min()
    return float(best), float(sec[prim <= best * (1 + 1e-9)].min())


def assert_same(a, b):
    assert a[0] == pytest.approx(b[0], rel=1e-7), (a, b)
    assert a[1] == pytest.approx(b[1], rel=1e-7), (a, b)


# ----------------------------------------------------------------------------- cost model
def test_cost_model_by_hand():
    m = node_model(fixtures.get("dgx1-v100"))
    pf = Platform(m)
    T = np.zeros((2, 2))
    T[0, 1] = 1e9
    # GPU0 -> GPU1 is one NVLink (25 GB/s): 1e9 bytes take 0.04 s on it, nothing elsewhere
    nv = m.topo.links[m.topo.route("gpu0", "gpu1").hops[0].link]
    s = evaluate(pf, T, [0, 0], [0, 1])
    assert s.max_congestion == pytest.approx(1e9 / (nv.bandwidth * 1e9))
    assert s.avg_congestion == s.max_congestion
    assert (s.loads > 0).sum() == 1
    assert s.hop_bytes == 1e9
    # on the same GPU nothing touches a link
    s0 = evaluate(pf, T, [0, 0], [3, 3])
    assert s0.max_congestion == 0 and s0.hop_bytes == 0
    # a route across the CPU interconnect loads every hop of it, each direction separately
    r = m.topo.route("gpu0", "gpu7")
    s2 = evaluate(pf, T + T.T, [0, 0], [0, 7])
    assert (s2.loads > 0).sum() == 2 * len(r.hops)


def test_problem_matches_platform_score():
    m = _model("dgx1-v100")
    T = patterns.random_sparse(8, 3, seed=4)
    g = np.array([3, 1, 4, 0, 5, 2, 7, 6])
    p = NodeProblem(m, T, np.zeros(8), np.zeros(8))
    s = evaluate(Platform(m), T, np.zeros(8, dtype=int), g)
    assert p.key(g)[0] == pytest.approx(s.max_congestion)
    assert p.key(g)[1] == pytest.approx(s.total_congestion)


def test_multinode_network_links_loaded():
    m = _model("dgx1-v100")
    pf = Platform(m, 2)
    T = np.zeros((16, 16))
    T[0, 8] = 1e9
    s = evaluate(pf, T, [0] * 8 + [1] * 8, list(range(8)) * 2)
    labels = {pf.label(int(i)) for i in np.nonzero(s.loads)[0]}
    assert any(l.startswith("node0:nic") and l.endswith("->switch") for l in labels), labels
    assert any(l.startswith("switch->node1:nic") for l in labels), labels


# ----------------------------------------------------------------------------- automorphisms
def test_automorphisms():
    for name in ("dgx-a100", "hgx-h100"):
        s = Symmetry(_model(name), with_nics=False)
        assert s.symmetric and s.order == 40320
    s = Symmetry(_model("dgx1-v100"), with_nics=False)
    assert not s.symmetric
    assert s.is_automorphism(np.arange(8))
    assert s.order >= 2
    # every orbit merge is backed by a real automorphism
    for orb in s.orbits(frozenset()):
        for y in orb[1:]:
            p = s.find(frozenset(), orb[0], y)
            assert p is not None and s.is_automorphism(p)
    # a two-socket PCIe tree: swapping the sockets, the switches, the GPUs under a switch
    s = Symmetry(_model("pcie-8gpu-2socket"), with_nics=False)
    assert s.order >= 16


# ----------------------------------------------------------------------------- exact == brute force
@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("pattern", list(patterns.suite(8)))
def test_exact_equals_brute_force(name, pattern):
    m = _model(name)
    G = m.G
    T = patterns.suite(G, seed=7)[pattern]
    p = NodeProblem(m, T, np.zeros(G), np.zeros(G))
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert_same(r.key, p.key(r.gpu_of))  # the reported key is the key of the returned mapping
    assert sorted(r.gpu_of.tolist()) == list(range(G))
    assert_same(r.key, brute_force(p))


@pytest.mark.parametrize("objective", ["avg", "hop-bytes"])
@pytest.mark.parametrize("name", ["dgx1-v100", "pcie-8gpu-2socket", "summit", "hgx-h100"])
@pytest.mark.parametrize("pattern", ["ring", "halo3d", "random", "tree", "master-worker", "transpose"])
def test_exact_other_objectives_equal_brute_force(objective, name, pattern):
    """The average over used links and hop-bytes are proven optimal too, by their own bounds."""
    m = _model(name)
    G = m.G
    T = patterns.suite(G, seed=4)[pattern]
    p = NodeProblem(m, T, np.zeros(G), np.zeros(G), objective=objective)
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert_same(r.key, p.key(r.gpu_of))
    assert_same(r.key, brute_force(p))
    assert r.info["bound"] == pytest.approx(r.key[0])


@pytest.mark.parametrize("objective", ["max", "avg", "hop-bytes"])
def test_exact_objectives_with_off_node_host_staged_and_shared_gpus(objective):
    m = _model("dgx1-v100")
    rng = np.random.default_rng(8)
    T = patterns.random_sparse(6, 3, seed=5)
    H = T * (rng.uniform(size=T.shape) < 0.5)
    p = NodeProblem(m, T - H, rng.uniform(0, 2e8, 6), rng.uniform(0, 2e8, 6), K=2, Th=H, objective=objective)
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert_same(r.key, brute_force(p))


def test_objectives_rank_placements_differently():
    """Each objective's proven optimum is at least as good, by that objective, as the others' optima."""
    m = _model("dgx1-v100")
    T = patterns.random_sparse(8, 3, seed=3)
    res = {o: solve_exact(NodeProblem(m, T, np.zeros(8), np.zeros(8), objective=o), time_budget=60)
           for o in ("max", "avg", "hop-bytes")}
    for o, r in res.items():
        for other, q in res.items():
            po = NodeProblem(m, T, np.zeros(8), np.zeros(8), objective=o)
            assert po.key(r.gpu_of)[0] <= po.key(q.gpu_of)[0] * (1 + 1e-9), (o, other)


@pytest.mark.parametrize("name", ["dgx1-v100", "summit", "pcie-8gpu-2socket"])
def test_exact_with_off_node_traffic_equals_brute_force(name):
    m = _model(name)
    G = m.G
    rng = np.random.default_rng(3)
    T = patterns.halo(G, 2)
    p = NodeProblem(m, T, rng.uniform(0, 3e8, G), rng.uniform(0, 3e8, G))
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert_same(r.key, brute_force(p))


@pytest.mark.parametrize("pattern", ["ring", "random", "tree"])
def test_exact_fewer_ranks_than_gpus_on_12(pattern):
    """A 12-GPU node is too large for brute force over all 12! orders: 5 ranks give 95040 maps."""
    m = _model("pcie-12")
    T = {"ring": patterns.ring(5), "random": patterns.random_sparse(5, 2, seed=1), "tree": patterns.tree(5)}[pattern]
    p = NodeProblem(m, T, np.zeros(5), np.zeros(5))
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert_same(r.key, brute_force(p))


@pytest.mark.parametrize("name", ["summit", "dgx1-v100"])
def test_exact_two_ranks_per_gpu(name):
    m = _model(name)
    n = 6
    T = patterns.random_sparse(n, 3, seed=2)
    p = NodeProblem(m, T, np.zeros(n), np.zeros(n), K=2)
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert np.bincount(r.gpu_of, minlength=m.G).max() <= 2
    assert_same(r.key, brute_force(p))


# ----------------------------------------------------------------------------- heuristic
@pytest.mark.parametrize("name", ["dgx1-v100", "pcie-8gpu-2socket", "pcie-12"])
@pytest.mark.parametrize("pattern", ["ring", "halo2d", "halo3d", "random", "tree"])
def test_heuristic_within_two_percent(name, pattern):
    m = _model(name)
    G = m.G
    T = patterns.suite(G, seed=5)[pattern]
    p = NodeProblem(m, T, np.zeros(G), np.zeros(G))
    h = solve_heuristic(p, seed=0, time_budget=30)
    e = solve_exact(p, time_budget=120, upper=(h.gpu_of, h.key))
    assert e.optimal
    assert h.key[0] <= e.key[0] * 1.02
    assert_same(h.key, p.key(h.gpu_of))


def test_heuristic_deterministic_for_a_seed():
    m = _model("dgx1-v100")
    T = patterns.random_sparse(8, 3, seed=9)
    p = NodeProblem(m, T, np.zeros(8), np.zeros(8))
    a = solve_heuristic(p, seed=11, time_budget=60)
    b = solve_heuristic(p, seed=11, time_budget=60)
    assert a.gpu_of.tolist() == b.gpu_of.tolist()


# ----------------------------------------------------------------------------- whole placements
def test_ring_on_dgx1_beats_default():
    pl = place(Platform(_model("dgx1-v100")), patterns.ring(8))
    assert pl.optimal
    assert pl.default.max_congestion >= 2.5 * pl.score.max_congestion
    # the optimum keeps the ring on NVLink: nothing crosses the CPU interconnect
    kinds = {pl.platform.kind(int(i)) for i in np.nonzero(pl.score.loads)[0]}
    assert kinds == {"nvlink"}


def test_multinode_64_nodes_balanced():
    m = _model("dgx1-v100")
    n = 512
    T = patterns.halo(n, 4)
    pf = Platform(m, 64)
    pl = place(pf, T, time_budget=60)
    assert np.bincount(pl.node_of, minlength=64).tolist() == [8] * 64
    slots = set(zip(pl.node_of.tolist(), pl.gpu_of.tolist()))
    assert len(slots) == n  # one rank per GPU
    assert not pl.optimal
    assert pl.score.max_congestion <= pl.default.max_congestion * 1.0000001
    again = place(pf, T, time_budget=60)
    assert again.node_of.tolist() == pl.node_of.tolist() and again.gpu_of.tolist() == pl.gpu_of.tolist()


def test_uneven_ranks_over_nodes():
    pf = Platform(_model("summit"), 3)
    pl = place(pf, patterns.halo(14, 2), time_budget=20)
    sizes = np.bincount(pl.node_of, minlength=3)
    assert sizes.sum() == 14 and sizes.max() <= 6  # any sizes that fit the GPUs
    assert len(set(zip(pl.node_of.tolist(), pl.gpu_of.tolist()))) == 14
    assert pl.score.key[:2] == pytest.approx(evaluate(pf, patterns.halo(14, 2), pl.node_of, pl.gpu_of).key[:2])
    assert pl.score.max_congestion <= pl.default.max_congestion * (1 + 1e-9)


# ----------------------------------------------------------------------------- the map verb
def test_map_cli_json(tmp_path):
    f = tmp_path / "ring.csv"
    write_csv(f, patterns.ring(8))
    p = cli("map", "--traffic", str(f), "--topology", "dgx1-v100", "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["optimal"] is True
    assert set(doc["mapping"]) == {str(r) for r in range(8)}
    assert sorted(e["gpu"] for e in doc["mapping"].values()) == list(range(8))
    for e in doc["mapping"].values():
        assert e["cpus"] and e["nic"].startswith("nic") and e["netdev"].startswith("mlx5_")
        assert e["numa"] in (0, 1)
    assert doc["default"]["max_congestion"] > 2.5 * doc["max_congestion"]
    assert doc["avg_congestion"] <= doc["default"]["avg_congestion"]


def test_map_cli_text(tmp_path):
    f = tmp_path / "halo.csv"
    write_csv(f, patterns.halo(16, 4))
    p = cli("map", "--traffic", str(f), "--topology", "dgx1-v100", "--nodes", "2")
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())      # the report wraps its lines at the terminal's width
    for needle in ("max congestion", "avg congestion", "link loads", "mapping", "not proven optimal"):
        assert needle in text


def test_map_sums_classes_and_operations(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("src,dst,class,operation,bytes,messages\n0,1,p2p,MPI_Send,100,1\n0,1,collective,MPI_Allreduce,300,2\n"
                 "1,0,p2p,MPI_Send,50,1\n")
    p = cli("map", "--traffic", str(f), "--topology", "dgx1-v100", "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert sum(l["after_bytes"] for l in doc["links"]) >= 450


def test_map_bad_inputs(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("source,dst,class,operation,bytes,messages\n")
    assert_one_line_error(cli("map", "--traffic", str(bad), "--topology", "dgx1-v100"), "bad.csv:1", "header")
    row = tmp_path / "row.csv"
    row.write_text("src,dst,class,operation,bytes,messages\n0,1,p2p,MPI_Send,10,1\n0,x,p2p,MPI_Send,10,1\n")
    assert_one_line_error(cli("map", "--traffic", str(row), "--topology", "dgx1-v100"), "row.csv:3")
    short = tmp_path / "short.csv"
    short.write_text("src,dst,class,operation,bytes,messages\n0,1,p2p\n")
    assert_one_line_error(cli("map", "--traffic", str(short), "--topology", "dgx1-v100"), "short.csv:2")
    big = tmp_path / "big.csv"
    write_csv(big, patterns.ring(12))
    assert_one_line_error(cli("map", "--traffic", str(big), "--topology", "dgx1-v100"),
                          "12 ranks", "--ranks-per-gpu 2")
    ok = cli("map", "--traffic", str(big), "--topology", "dgx1-v100", "--ranks-per-gpu", "2", "--format", "json")
    assert ok.returncode == 0, ok.stderr
    assert max(np.bincount([e["gpu"] for e in json.loads(ok.stdout)["mapping"].values()])) <= 2
    assert_one_line_error(cli("map", "--traffic", str(tmp_path / "none.csv"), "--topology", "dgx1-v100"),
                          "none.csv")
    assert_one_line_error(cli("map", "--traffic", str(big), "--topology", "no-such-machine"), "no-such-machine")


def test_map_text_in_an_80_column_terminal(tmp_path):
    """In an 80-column terminal the link loads table cut its link names to "cpu1->pci…" and
    "pcisw2->g…", so a reader could not tell which link was loaded. Every link name and figure is now
    whole; only the kind folds."""
    import re

    f = tmp_path / "ring.csv"      # neighbours 1 and 4 apart: PCIe switch and CPU links loaded too
    f.write_text("src,dst,class,operation,bytes,messages\n" + "".join(
        f"{r},{(r + 1) % 16},p2p,MPI_Send,1000000000,100\n{r},{(r + 4) % 16},p2p,MPI_Send,300000000,100\n"
        for r in range(16)))
    args = ("map", "--traffic", str(f), "--topology", "dgx1-v100", "--ranks-per-gpu", "2")
    doc = json.loads(cli(*args, "--format", "json").stdout)
    p = cli(*args, env={"FORCE_COLOR": "1", "COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout)
    table = text[text.index("link loads"):text.index("max congestion")]
    assert max(map(len, table.splitlines())) <= 80 and "…" not in table, table
    names = [c.split("│")[1].strip() for c in table.splitlines() if c.startswith("│") and c.split("│")[1].strip()]
    assert names == [l["link"] for l in doc["links"][:len(names)]] and len(names) >= 20, table
    assert any(n.startswith("pcisw") for n in names) and "cpu0->cpu1" in names, names


def test_map_text_columns_keep_small_jobs_readable(tmp_path):
    """A profile of a few megabytes (a 3-D halo of 8 ranks with 328 kB per neighbour, placed on two
    DGX-1) printed its link loads in fixed GB and ms: 0.002 GB before against 0.001 GB after for
    congestions of 0.125 ms and 0.042 ms, and 0.000 for loads that were not zero. One unit per column
    pair, chosen by the largest figure, keeps every figure and the before/after ratio readable; the
    what-if's assumption names its bytes the same way."""
    import re

    f = tmp_path / "halo.csv"
    write_csv(f, patterns.halo(8, 3, nbytes=327680))
    args = ("map", "--traffic", str(f), "--topology", "dgx1-v100", "--nodes", "2")
    doc = json.loads(cli(*args, "--format", "json").stdout)
    p = cli(*args)
    assert p.returncode == 0, p.stderr
    head = next(l for l in p.stdout.splitlines() if "before" in l and "after" in l)
    bu, tu = re.search(r"before (\w+) .* before (\S+) ", head).groups()
    scale = {"GB": 1e9, "MB": 1e6, "kB": 1e3, "B": 1}[bu]
    tscale = {"ms": 1e-3, "µs": 1e-6, "ns": 1e-9}[tu]
    assert (bu, tu) == ("MB", "µs"), head
    links = {l["link"]: l for l in doc["links"]}
    rows = 0
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 7 and cells[0] in links:
            l, rows = links[cells[0]], rows + 1
            for cell, key, sc in ((cells[3], "before_bytes", scale), (cells[4], "before_congestion", tscale),
                                  (cells[5], "after_bytes", scale), (cells[6], "after_congestion", tscale)):
                assert float(cell) == pytest.approx(l[key] / sc, abs=6e-4), (cells, l)
                assert (float(cell) > 0) == (l[key] > 0), (cells, l)
    assert rows > 10
    m = re.search(r"max congestion: ([\d.]+) (\S+) -> ([\d.]+) (\S+)", p.stdout)
    assert m and m.group(2) == m.group(4) != "ms" and float(m.group(3)) > 0, p.stdout
    w = cli("map", "--traffic", str(f), "--topology", "dgx1-v100", "--as-gpu-resident", "--format", "json")
    assert w.returncode != 0   # a CSV without its mem column has no host-staged bytes
    fm = tmp_path / "halo-mem.csv"
    fm.write_text("src,dst,class,operation,bytes,messages,mem\n0,1,p2p,MPI_Send,7865280,240,host\n")
    w = cli("map", "--traffic", str(fm), "--topology", "dgx1-v100", "--as-gpu-resident", "--format", "json")
    assert json.loads(w.stdout)["assumption"].startswith("what-if: the 7.865 MB recorded as host-staged"), w.stdout


def _records(n: int, nbytes: int):
    from rankmap.store import RankTotals

    return [RankTotals(r, [((r + 1) % n, "p2p", "MPI_Send", "device", "send", nbytes, 1)] if nbytes else [],
                       host="h", pid=1) for r in range(n)]


def test_map_of_a_failed_job_names_the_failure(tmp_path):
    from rankmap.store import open_store

    db = f"sqlite:///{tmp_path / 'r.db'}"
    store = open_store(db)
    empty = store.create_job(["mpirun", "-np", "4", "./app"], launcher="openmpi", world_size=4)
    store.ingest(empty, _records(4, 0))
    store.finish_job(empty, exit_status=1)
    assert_one_line_error(cli("map", "--job", str(empty), "--db", db, "--topology", "dgx1-v100"),
                          f"job {empty} failed (exit 1) and recorded no traffic between ranks")
    part = store.create_job(["mpirun", "-np", "4", "./app"], launcher="openmpi", world_size=4)
    store.ingest(part, _records(4, 10**6))
    store.finish_job(part, exit_status=137)
    p = cli("map", "--job", str(part), "--db", db, "--topology", "dgx1-v100")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0].startswith(f"note: job {part} failed (exit 137): placing the traffic it recorded")
    j = cli("map", "--job", str(part), "--db", db, "--topology", "dgx1-v100", "--format", "json")
    assert j.returncode == 0 and f"job {part} failed (exit 137)" in j.stderr
    assert json.loads(j.stdout)["source"] == {"job": part, "command": "mpirun -np 4 ./app", "state": "failed",
                                              "exit_status": 137}
    ok = store.create_job(["mpirun", "-np", "4", "./app"], launcher="openmpi", world_size=4)
    store.ingest(ok, _records(4, 0))
    store.finish_job(ok, exit_status=0)
    p = cli("map", "--job", str(ok), "--db", db, "--topology", "dgx1-v100")
    assert_one_line_error(p, f"job {ok} recorded no traffic between ranks")
    assert "failed" not in p.stderr
