"""Host-staged traffic: routed GPU -> local CPU -> [CPU interconnect] -> CPU -> GPU, not peer-to-peer.

The exact solver against brute force with mixed peer/host-staged traffic, a hand-checked ring whose
every byte is host-staged, the heuristic's incremental swaps against recomputation, the CSV ``mem``
column and ``rankmap map --job`` on a stored job whose rows are host-staged.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_one_line_error, cli, rankmap
from test_mapping import assert_same, brute_force
from test_store import FakeRecord, Row
from rankmap.mapping import patterns
from rankmap.mapping.automorph import Symmetry
from rankmap.mapping.cost import Traffic, evaluate
from rankmap.mapping.exact import solve_exact
from rankmap.mapping.heuristic import _State, solve_heuristic
from rankmap.mapping.platform import Platform, node_model
from rankmap.mapping.problem import NodeProblem
from rankmap.mapping.solve import place
from rankmap.mapping.traffic import read_csv, write_csv
from rankmap.store import open_store
from rankmap.topology import fixtures

GB = 1e9


def _model(name: str):
    return node_model(fixtures.get(name))


def split(T: np.ndarray, seed: int, frac: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(peer part, host part) of T: a random share of every pair's bytes (or a fixed fraction)."""
    rng = np.random.default_rng(seed)
    f = rng.uniform(0, 1, T.shape) if frac is None else np.full(T.shape, frac)
    f[rng.uniform(0, 1, T.shape) < 0.3] = 0.0  # some pairs purely peer-to-peer
    f[rng.uniform(0, 1, T.shape) < 0.3] = 1.0  # some purely host-staged
    H = np.floor(T * f)
    return T - H, H


def labels_of(m, hinc_row) -> set[str]:
    return {m.dlink_label(int(d)) for d in np.nonzero(hinc_row)[0]}


# ----------------------------------------------------------------------------- the platform model
def test_host_routes_on_dgx1():
    m = _model("dgx1-v100")
    g = {d.id: i for i, d in enumerate(m.gpus)}
    # same socket: up to cpu0 and down again, no NVLink even where the GPUs have one
    assert labels_of(m, m.hinc[g["gpu0"], g["gpu1"]]) == {"gpu0->pcisw0", "pcisw0->cpu0", "cpu0->pcisw0",
                                                           "pcisw0->gpu1"}
    # other socket: across QPI
    assert labels_of(m, m.hinc[g["gpu0"], g["gpu5"]]) == {"gpu0->pcisw0", "pcisw0->cpu0", "cpu0->cpu1",
                                                           "cpu1->pcisw2", "pcisw2->gpu5"}
    # one GPU with itself: device -> host and back over the same PCIe links, each direction once
    assert labels_of(m, m.hinc[g["gpu3"], g["gpu3"]]) == {"gpu3->pcisw1", "pcisw1->cpu0", "cpu0->pcisw1",
                                                           "pcisw1->gpu3"}
    assert m.hinc[g["gpu3"], g["gpu3"]].sum() == 4 and m.hinc[g["gpu0"], g["gpu5"]].sum() == 5
    assert m.hinc.max() == 1
    assert not m.host_notes
    # no NVLink ever carries a host-staged byte
    nv = [d for d in range(m.D) if m.dlink_kind(d) == "nvlink"]
    assert not m.hinc[:, :, nv].any()
    assert np.allclose(m.hcpb, m.hinc / (m.bw * 1e9))


def test_gpu_without_local_cpu_falls_back_to_the_peer_route():
    from rankmap.topology.model import Topology

    t = fixtures.get("hgx-h100")
    # gpu7 keeps its NVSwitch link but loses its PCIe link: its local CPU is unknown
    keep = [l for l in t.links if {l.a, l.b} != {"gpu7", "pcisw7"}]
    m = node_model(Topology("cut", list(t.devices.values()), keep))
    g = {d.id: i for i, d in enumerate(m.gpus)}
    assert m.host_notes and "gpu7" in m.host_notes[0] and "gpu6" not in m.host_notes[0]
    assert (m.hinc[g["gpu7"], g["gpu2"]] == m.inc[g["gpu7"], g["gpu2"]]).all()
    assert (m.hinc[g["gpu2"], g["gpu7"]] == m.inc[g["gpu2"], g["gpu7"]]).all()
    assert not m.hinc[g["gpu7"], g["gpu7"]].any()
    assert labels_of(m, m.hinc[g["gpu0"], g["gpu1"]]) == {"gpu0->pcisw0", "pcisw0->hb0", "hb0->cpu0", "cpu0->hb1",
                                                           "hb1->pcisw1", "pcisw1->gpu1"}
    # the note reaches the report when host-staged bytes exist
    T = patterns.ring(8, nbytes=1e6)
    pl = place(Platform(m), Traffic.from_dense(T, host=T))
    assert pl.staging["notes"] == m.host_notes
    assert "notes" not in place(Platform(m), T).staging


# ----------------------------------------------------------------------------- hand-checked loads
def _expected_ring_loads(m, B: float) -> dict[str, float]:
    """A one-way ring of 8 ranks, every byte host-staged, on dgx1-v100 (gpu0-3 on cpu0, two per
    switch): each GPU sends B up and receives B down, each switch carries its two GPUs (2B) up and
    down, and the ring crosses QPI once each way (rank 3 -> 4 and 7 -> 0)."""
    want: dict[str, float] = {}
    for gi in range(8):
        sw, cpu = f"pcisw{gi // 2}", f"cpu{gi // 4}"
        want[f"gpu{gi}->{sw}"] = B
        want[f"{sw}->gpu{gi}"] = B
        want[f"{sw}->{cpu}"] = 2 * B
        want[f"{cpu}->{sw}"] = 2 * B
    want["cpu0->cpu1"] = B
    want["cpu1->cpu0"] = B
    return want


def test_all_host_staged_ring_on_dgx1_by_hand():
    m = _model("dgx1-v100")
    pf = Platform(m)
    B = 1e9
    T = patterns.ring(8, nbytes=B, bidirectional=False)
    tr = Traffic.from_dense(T, host=T)
    want = _expected_ring_loads(m, B)
    # the default mapping (rank r on GPU r) gives exactly these loads
    s = evaluate(pf, tr, np.zeros(8, dtype=int), np.arange(8))
    got = {pf.label(int(d)): float(s.loads[d]) for d in np.nonzero(s.loads)[0]}
    assert got == pytest.approx(want)
    assert s.max_congestion == pytest.approx(2 * B / (15.75 * GB))  # a switch uplink
    # every mapping puts the same loads on the PCIe links, and crossing QPI once each way is the
    # least a ring over two sockets can do: the optimum has these loads too (relabelled)
    pl = place(pf, tr)
    assert pl.optimal
    loaded = np.nonzero(pl.score.loads)[0]
    assert {pf.kind(int(d)) for d in loaded} == {"pcie", "cpu_interconnect"}
    assert sorted(pl.score.loads[loaded]) == pytest.approx(sorted(want.values()))
    assert pl.staging["host_staged_bytes"] == 8 * B and pl.staging["routed_via_host_bytes"] == 8 * B
    # the same ring peer-to-peer stays on NVLink (the existing behaviour)
    pp = place(pf, T)
    assert {pf.kind(int(d)) for d in np.nonzero(pp.score.loads)[0]} == {"nvlink"}
    assert pp.staging["host_staged_bytes"] == 0


def test_two_ranks_on_one_gpu_host_staged_still_load_its_pcie():
    m = _model("dgx1-v100")
    pf = Platform(m)
    T = np.zeros((2, 2))
    T[0, 1] = 1e9
    s = evaluate(pf, Traffic.from_dense(T, host=T), [0, 0], [3, 3])
    got = {pf.label(int(d)): float(s.loads[d]) for d in np.nonzero(s.loads)[0]}
    assert got == {"gpu3->pcisw1": 1e9, "pcisw1->cpu0": 1e9, "cpu0->pcisw1": 1e9, "pcisw1->gpu3": 1e9}
    assert s.hop_bytes == 4e9
    # peer-to-peer on one GPU loads nothing, as before
    assert evaluate(pf, T, [0, 0], [3, 3]).max_congestion == 0


def test_problem_matches_platform_score_with_host_part():
    m = _model("pcie-8gpu-2socket")
    T = patterns.random_sparse(8, 3, seed=4)
    P, H = split(T, 1)
    g = np.array([3, 1, 4, 0, 5, 2, 7, 6])
    p = NodeProblem(m, P, np.zeros(8), np.zeros(8), Th=H)
    s = evaluate(Platform(m), Traffic.from_dense(T, host=H), np.zeros(8, dtype=int), g)
    assert p.key(g)[0] == pytest.approx(s.max_congestion)
    assert p.key(g)[1] == pytest.approx(s.total_congestion)


def test_off_node_host_staged_bytes_keep_the_nic_route():
    m = _model("dgx1-v100")
    pf = Platform(m, 2)
    T = np.zeros((16, 16))
    T[0, 8] = 1e9
    T[1, 2] = 1e9
    nodes, gpus = [0] * 8 + [1] * 8, list(range(8)) * 2
    H = np.zeros_like(T)
    H[0, 8] = 1e9
    a = evaluate(pf, Traffic.from_dense(T), nodes, gpus)
    b = evaluate(pf, Traffic.from_dense(T, host=H), nodes, gpus)
    assert np.array_equal(a.loads, b.loads)


# ----------------------------------------------------------------------------- exact == brute force
@pytest.mark.parametrize("name", ["dgx1-v100", "pcie-8gpu-2socket", "hgx-h100"])
@pytest.mark.parametrize("pattern", ["ring", "halo2d", "halo3d", "alltoall", "random", "tree"])
def test_exact_equals_brute_force_mixed(name, pattern):
    m = _model(name)
    G = m.G
    T = patterns.suite(G, seed=7)[pattern]
    P, H = split(T, seed=len(pattern))
    p = NodeProblem(m, P, np.zeros(G), np.zeros(G), Th=H)
    assert p.has_host
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert_same(r.key, p.key(r.gpu_of))
    assert sorted(r.gpu_of.tolist()) == list(range(G))
    assert_same(r.key, brute_force(p))


@pytest.mark.parametrize("name", ["dgx1-v100", "pcie-8gpu-2socket"])
def test_exact_all_host_staged_equals_brute_force(name):
    m = _model(name)
    T = patterns.halo(8, 2)
    p = NodeProblem(m, np.zeros((8, 8)), np.zeros(8), np.zeros(8), Th=T)
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert_same(r.key, brute_force(p))


@pytest.mark.parametrize("name", ["dgx1-v100", "pcie-8gpu-2socket"])
def test_exact_mixed_with_off_node_traffic(name):
    m = _model(name)
    rng = np.random.default_rng(3)
    P, H = split(patterns.halo(8, 2), seed=2)
    p = NodeProblem(m, P, rng.uniform(0, 3e8, 8), rng.uniform(0, 3e8, 8), Th=H)
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert_same(r.key, brute_force(p))


@pytest.mark.parametrize("name", ["dgx1-v100", "pcie-8gpu-2socket"])
def test_exact_mixed_two_ranks_per_gpu(name):
    """Host-staged bytes between ranks sharing a GPU cost PCIe: the solver must see that."""
    m = _model(name)
    n = 6
    P, H = split(patterns.random_sparse(n, 3, seed=2), seed=5)
    p = NodeProblem(m, P, np.zeros(n), np.zeros(n), K=2, Th=H)
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert np.bincount(r.gpu_of, minlength=m.G).max() <= 2
    assert_same(r.key, p.key(r.gpu_of))
    assert_same(r.key, brute_force(p))


def test_exact_mixed_fewer_ranks_than_gpus():
    m = _model("pcie-8gpu-2socket")
    P, H = split(patterns.ring(5), seed=9)
    p = NodeProblem(m, P, np.zeros(5), np.zeros(5), Th=H)
    r = solve_exact(p, time_budget=60)
    assert r.optimal
    assert_same(r.key, brute_force(p))


def test_host_routes_break_nvswitch_symmetry():
    """On a two-socket NVSwitch node every GPU is alike for peer bytes, not for host-staged ones."""
    m = _model("hgx-h100")
    assert Symmetry(m, with_nics=False).symmetric
    s = Symmetry(m, with_nics=False, with_host=True)
    assert not s.symmetric
    for orb in s.orbits(frozenset()):
        for y in orb[1:]:
            q = s.find(frozenset(), orb[0], y)
            assert q is not None and s.is_automorphism(q)
            # an automorphism with host routes keeps every host-staged route's link multiset
            assert np.array_equal(np.sort(m.hcpb.sum(axis=2)[np.ix_(q, q)], axis=None),
                                  np.sort(m.hcpb.sum(axis=2), axis=None))
    # all host-staged ring: the optimum crosses the sockets twice, the default too, but a mapping
    # that alternates sockets crosses on every hop
    T = patterns.ring(8, nbytes=1e9, bidirectional=False)
    pl = place(Platform(m), Traffic.from_dense(T, host=T))
    qpi = [d for d in range(m.D) if m.dlink_kind(d) == "cpu_interconnect"]
    assert pl.optimal and pl.score.loads[qpi].sum() == pytest.approx(2e9)
    bad = evaluate(Platform(m), Traffic.from_dense(T, host=T), np.zeros(8, dtype=int), [0, 4, 1, 5, 2, 6, 3, 7])
    assert bad.loads[qpi].sum() == pytest.approx(8e9)


# ----------------------------------------------------------------------------- heuristic
@pytest.mark.parametrize("name,K,n", [("dgx1-v100", 1, 8), ("pcie-8gpu-2socket", 1, 6), ("dgx1-v100", 2, 11)])
def test_heuristic_incremental_swaps_match_recomputation(name, K, n):
    m = _model(name)
    rng = np.random.default_rng(n)
    P, H = split(patterns.random_sparse(n, 3, seed=1), seed=3)
    p = NodeProblem(m, P, rng.uniform(0, 1e8, n), rng.uniform(0, 1e8, n), K=K, Th=H)
    slots = np.repeat(np.arange(m.G), K)
    N = len(slots)
    st = _State(p, slots, rng.permutation(N))
    proj = p.projection()  # the search keeps the columns its key needs (busiest-capable links + total)
    loads = lambda g: p.loads(g) @ proj  # noqa: E731
    tol = 1e-12 * float(loads(st.g[:n]).max())  # float noise where a load cancels to zero
    assert np.allclose(st.loads, loads(st.g[:n]), rtol=1e-9, atol=tol)
    for _ in range(12):
        pred = st.all_swaps()
        for a in range(N):
            for b in range(N):
                g2 = st.g.copy()
                g2[a], g2[b] = g2[b], g2[a]
                want = loads(g2[:n])
                assert np.allclose(pred[a, b], want, rtol=1e-9, atol=tol), (a, b)
        a, b = rng.choice(N, 2, replace=False)
        st.swap(int(a), int(b))
        C_inc, loads_inc = st.C.copy(), st.loads.copy()
        st.recompute()
        assert np.allclose(C_inc, st.C, rtol=1e-9, atol=tol)
        assert np.allclose(loads_inc, st.loads, rtol=1e-9, atol=tol)
        assert np.allclose(st.loads, loads(st.g[:n]), rtol=1e-9, atol=tol)
    # the projection keeps the maximum and the total of the full link space
    full = p.loads(st.g[:n])
    assert st.loads[:-1].max() == pytest.approx(full.max(), rel=1e-9)
    assert st.loads[-1] == pytest.approx(full.sum(), rel=1e-9)


def test_heuristic_key_is_the_key_of_its_mapping_with_host_part():
    m = _model("pcie-8gpu-2socket")
    P, H = split(patterns.halo(8, 3), seed=4)
    p = NodeProblem(m, P, np.zeros(8), np.zeros(8), Th=H)
    h = solve_heuristic(p, seed=0, time_budget=30)
    assert_same(h.key, p.key(h.gpu_of))
    e = solve_exact(p, time_budget=60, upper=(h.gpu_of, h.key))
    assert e.optimal and h.key[0] <= e.key[0] * 1.02


# ----------------------------------------------------------------------------- inputs and the verbs
def test_csv_mem_column(tmp_path):
    T = patterns.ring(8, nbytes=1000, bidirectional=False)
    H = np.zeros_like(T)
    H[0, 1] = 400
    H[3, 4] = 1000
    f = tmp_path / "m.csv"
    write_csv(f, T, host=H)
    assert f.read_text().splitlines()[0] == "src,dst,class,operation,bytes,messages,mem"
    tr = read_csv(f)
    assert np.array_equal(tr.dense(), T) and np.array_equal(tr.dense_host(), H)
    # the six-column header is still valid and means "no host part"
    g = tmp_path / "p.csv"
    write_csv(g, T)
    assert read_csv(g).host is None
    bad = tmp_path / "bad.csv"
    bad.write_text("src,dst,class,operation,bytes,messages,mem\n0,1,p2p,MPI_Send,10,1,gpu\n")
    assert_one_line_error(cli("map", "--traffic", str(bad), "--topology", "dgx1-v100"), "bad.csv:2", "mem")
    short = tmp_path / "short.csv"
    short.write_text("src,dst,class,operation,bytes,messages,mem\n0,1,p2p,MPI_Send,10,1\n")
    assert_one_line_error(cli("map", "--traffic", str(short), "--topology", "dgx1-v100"), "short.csv:2",
                          "7 fields")


def _host_ring_job(db: str, B: int) -> int:
    store = open_store(db)
    jid = store.create_job(["mpirun", "-np", "8", "./ring"], launcher="openmpi", world_size=8)
    recs = [FakeRecord(r, world_size=8, traffic=[Row((r + 1) % 8, "p2p", "MPI_Send", "host", "send", B, 10),
                           Row((r - 1) % 8, "p2p", "MPI_Recv", "host", "recv", B, 10)]) for r in range(8)]
    assert store.ingest(jid, recs) == 8
    store.finish_job(jid, exit_status=0)
    return jid


def test_map_job_with_host_staged_rows(tmp_path):
    B = 1_000_000_000
    db = f"sqlite:///{tmp_path / 'rankmap.db'}"
    jid = _host_ring_job(db, B)
    p = cli("map", "--job", str(jid), "--db", db, "--topology", "dgx1-v100", "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["host_staged"]["host_staged_bytes"] == 8 * B
    assert doc["host_staged"]["routed_via_host_bytes"] == 8 * B
    assert doc["host_staged"]["peer_to_peer_bytes"] == 0
    m = _model("dgx1-v100")
    want = _expected_ring_loads(m, B)
    before = {l["link"]: l["before_bytes"] for l in doc["links"] if l["before_bytes"]}
    assert before == pytest.approx(want)  # the default placement, hand-checked
    after = [l for l in doc["links"] if l["after_bytes"]]
    assert {l["kind"] for l in after} == {"pcie", "cpu_interconnect"}
    assert sorted(l["after_bytes"] for l in after) == pytest.approx(sorted(want.values()))
    assert doc["optimal"] is True
    # the text report says it too
    t = cli("map", "--job", str(jid), "--db", db, "--topology", "dgx1-v100")
    assert t.returncode == 0, t.stderr
    assert "host-staged traffic: 8.000 GB of 8.000 GB (100 %)" in t.stdout
    # export --by-mem keeps the kinds, and map reads them back to the same answer
    e = cli("export", str(jid), "--db", db, "--by-mem", "-o", str(tmp_path / "t.csv"))
    assert e.returncode == 0, e.stderr
    assert (tmp_path / "t.csv").read_text().splitlines()[0] == "src,dst,class,operation,bytes,messages,mem"
    c = cli("map", "--traffic", str(tmp_path / "t.csv"), "--topology", "dgx1-v100", "--format", "json")
    assert c.returncode == 0, c.stderr
    assert json.loads(c.stdout)["links"] == doc["links"]
    # the default export is unchanged: six columns, no host part, routed peer-to-peer
    e6 = cli("export", str(jid), "--db", db)
    assert e6.stdout.splitlines()[0] == "src,dst,class,operation,bytes,messages"


def test_multinode_placement_with_host_staged_traffic():
    """Across nodes the split weighs all bytes; the report counts host-staged bytes kept in a node."""
    m = _model("dgx1-v100")
    pf = Platform(m, 2)
    T = patterns.halo(16, 2)
    P, H = split(T, seed=8)
    tr = Traffic.from_dense(T, host=H)
    pl = place(pf, tr, time_budget=10)
    assert np.bincount(pl.node_of, minlength=2).tolist() == [8, 8]
    s = evaluate(pf, tr, pl.node_of, pl.gpu_of)
    assert_same(pl.score.key[:2], s.key[:2])
    same = pl.node_of[:, None] == pl.node_of[None, :]
    assert pl.staging["host_staged_bytes"] == pytest.approx(H.sum())
    assert pl.staging["routed_via_host_bytes"] == pytest.approx(H[same].sum())
    assert pl.staging["off_node_host_staged_bytes"] == pytest.approx(H[~same].sum())
    # each node's share is proven optimal for the split (the split itself weighs all bytes alike,
    # so across nodes the result is not guaranteed to beat the default: see docs/placement.md)
    assert pl.info["nodes_proven_optimal"] == 2


# ----------------------------------------------------------------------------- the GPU-resident what-if
@pytest.mark.mpi
def test_map_as_gpu_resident_places_the_same_bytes_gpu_to_gpu(tmp_path):
    """``--as-gpu-resident`` places a host-staged job as if every byte went GPU to GPU: the same answer
    as the six-column export (which carries no memory kinds), labelled as a what-if in JSON and text,
    in the stored mapping and in ``rankmap run``."""
    B = 1_000_000_000
    db = f"sqlite:///{tmp_path / 'rankmap.db'}"
    jid = _host_ring_job(db, B)
    base = ["--db", db, "--topology", "dgx1-v100", "--format", "json"]
    rec = json.loads(cli("map", "--job", str(jid), *base).stdout)
    assert rec["traffic_basis"] == "as-recorded" and rec["assumption"] is None
    assert rec["improvement"]["max"] == 1.0  # all host-staged: PCIe and QPI whatever the order
    p = cli("map", "--job", str(jid), "--as-gpu-resident", *base)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["traffic_basis"] == "gpu-resident"
    assert doc["assumption"].startswith("what-if:") and "8.000 GB recorded as host-staged" in doc["assumption"]
    assert doc["recorded_host_staged_bytes"] == 8 * B
    assert doc["host_staged"]["host_staged_bytes"] == 0 and doc["host_staged"]["peer_to_peer_bytes"] == 8 * B
    # the default ring crosses GPU pairs with no NVLink (3 -> 4, 7 -> 0); rankmap's stays on NVLink
    assert {l["kind"] for l in doc["links"] if l["after_bytes"]} == {"nvlink"}
    assert {l["kind"] for l in doc["links"] if l["before_bytes"]} > {"nvlink"}
    assert doc["improvement"]["max"] > 1.5
    six = tmp_path / "six.csv"
    assert cli("export", str(jid), "--db", db, "-o", str(six)).returncode == 0
    peer = json.loads(cli("map", "--traffic", str(six), "--topology", "dgx1-v100", "--format", "json").stdout)
    assert peer["links"] == doc["links"] and peer["mapping"] == doc["mapping"]
    t = cli("map", "--job", str(jid), "--db", db, "--topology", "dgx1-v100", "--as-gpu-resident", "--save")
    assert t.returncode == 0, t.stderr
    assert "what-if: the 8.000 GB recorded as host-staged are counted as GPU-resident" in t.stdout
    assert "(what-if: GPU-resident)" in t.stdout
    row = open_store(db).latest_mapping(open_store(db).job(jid)["command_key"], 8)
    assert row["meta"]["traffic_basis"] == "gpu-resident" and row["mapping"]["traffic_basis"] == "gpu-resident"
    r = rankmap("run", "--db", db, "--topology", "dgx1-v100", "--dry-run", "--", "mpirun", "-np", "8", "./ring",
                env={"RANKMAP_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert f"mapping {row['id']} is a what-if:" in r.stderr and "gains nothing" in r.stderr


@pytest.mark.mpi
def test_unknown_basis_is_a_what_if_in_the_cli(tmp_path, capsys):
    """A stored mapping whose traffic basis this version does not know (made by a newer rankmap, say)
    is never presented as the recorded run: ``rankmap run`` names its basis in its note, and the text
    report says its figures rest on an assumption it cannot state -- as the dashboard does."""
    from rich.console import Console

    from rankmap.mapping import basis
    from rankmap.mapping.report import print_text

    B = 1_000_000_000
    db = f"sqlite:///{tmp_path / 'rankmap.db'}"
    jid = _host_ring_job(db, B)
    p = cli("map", "--job", str(jid), "--db", db, "--topology", "dgx1-v100", "--format", "json")
    doc = {**json.loads(p.stdout), "traffic_basis": "nic-offload", "assumption": None}
    assert basis.is_what_if(doc) and not basis.stated(doc)["known"]
    store = open_store(db)
    mid = store.save_mapping(doc, job_id=jid, topology="dgx1-v100")
    r = rankmap("run", "--db", db, "--topology", "dgx1-v100", "--dry-run", "--", "mpirun", "-np", "8", "./ring",
                env={"RANKMAP_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert f"mapping {mid} was computed on traffic basis 'nic-offload'" in r.stderr and "does not know" in r.stderr
    con = Console(record=True, width=200)
    print_text(doc, console=con)
    out = con.export_text()
    assert "traffic basis 'nic-offload', which this version of rankmap does not know" in out
    assert "placed here GPU to GPU" not in out        # that line belongs to the GPU-resident what-if only


def test_map_as_gpu_resident_without_host_staged_bytes_is_an_error(tmp_path):
    """Nothing host-staged: the what-if would be the recorded traffic under a misleading label."""
    B = 1_000_000
    db = f"sqlite:///{tmp_path / 'rankmap.db'}"
    jid = _host_ring_job(db, B)
    six = tmp_path / "six.csv"
    assert cli("export", str(jid), "--db", db, "-o", str(six)).returncode == 0
    assert_one_line_error(cli("map", "--traffic", str(six), "--topology", "dgx1-v100", "--as-gpu-resident"),
                          "six.csv", "--by-mem", "--as-gpu-resident would change nothing")
    T = patterns.ring(8, nbytes=1000)
    dev = tmp_path / "dev.csv"
    write_csv(dev, T, host=np.zeros_like(T))  # a mem column saying every byte was in device memory
    assert_one_line_error(cli("map", "--traffic", str(dev), "--topology", "dgx1-v100", "--as-gpu-resident"),
                          "dev.csv (host-staged rows need the mem column", "has no host-staged bytes")
