"""Benchmark runs in the store (SQLite and PostgreSQL), and measured pair bandwidths as link strengths:
`rankmap topo --measured` shows them, `rankmap map --measured` places with them."""

from __future__ import annotations

import json

import pytest

from conftest import assert_one_line_error, rankmap
from pg import BACKENDS, pg_cluster  # noqa: F401  (session fixture)
from rankmap.linkbench.measured import figures, measured_topology
from rankmap.linkbench.rows import BenchRun, Row
from rankmap.store import open_store
from rankmap.topology import TopologyError, fixtures
from rankmap.topology import measured as tm


def p2p_run(pairs: dict[tuple[int, int], float], host: dict[int, float] | None = None, pci=None) -> dict:
    rows = [Row("ce_write", 1 << 29, "device", "cuda", bandwidth_GBps=bw, src=a, dst=b) for (a, b), bw in pairs.items()]
    rows += [Row("ce_read", 1 << 29, "device", "cuda", bandwidth_GBps=bw - 5, src=a, dst=b) for (a, b), bw in pairs.items()]
    rows += [Row("h2d_pinned", 1 << 29, "pinned", "cuda", bandwidth_GBps=bw, src=-1, dst=g) for g, bw in (host or {}).items()]
    rows += [Row("latency_ce", 8, "device", "cuda", latency_us=2.0, src=0, dst=1)]
    gpus = [{"index": i, "name": "GPU", "pci": p} for i, p in (pci or {}).items()]
    return BenchRun("p2p", rows, {"gpus": gpus}, ["pairs"], ["nothing else: a test"], command="rankmap-p2p",
                    host="testhost").to_json()


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        return open_store(f"sqlite:///{tmp_path / 'db' / 'rankmap.db'}")
    return open_store(request.getfixturevalue("pg_cluster").new_database())


def test_runs_round_trip_through_the_store(store):
    doc = p2p_run({(0, 1): 394.0, (1, 0): 390.0}, {0: 55.4})
    rid = store.save_bench_run(doc)
    other = store.save_bench_run(dict(doc, kind="mpi", rows=[{"benchmark": "latency", "size": 8, "buffer": "device-ipc",
                                                               "library": "mpi", "latency_us": 9.5, "iters": 1000}]))
    back = store.bench_run(rid)
    assert back["rows"] == doc["rows"] and back["ran"] == ["pairs"] and back["not_run"] == ["nothing else: a test"]
    assert back["kind"] == "p2p" and back["host"] == "testhost" and back["machine"] == doc["machine"]
    assert [r["id"] for r in store.bench_runs()] == [other, rid]
    assert store.latest_bench_run("p2p")["id"] == rid and store.latest_bench_run("nccl") is None
    assert store.bench_run(other)["rows"] == [{"benchmark": "latency", "size": 8, "buffer": "device-ipc",
                                               "library": "mpi", "latency_us": 9.5, "iters": 1000}]
    with pytest.raises(Exception, match="no benchmark run 999"):
        store.bench_run(999)


def test_links_get_the_fastest_transfer_that_crossed_them():
    topo = fixtures.get("h200x2-nvswitch")
    pairs, host, pci = figures(p2p_run({(0, 1): 394.0, (1, 0): 390.0}, {0: 55.4, 1: 55.3}))
    assert pairs == {(0, 1): 394.0, (1, 0): 390.0}             # the better of push and pull
    m = tm.apply(topo, pairs, host, source="test")
    by = {(l.a, l.b): l for l in m.links}
    assert by["gpu0", "nvswitch0"].bandwidth == 394.0 and by["gpu1", "nvswitch0"].bandwidth == 394.0
    assert by["gpu0", "hb0"].bandwidth == 55.4 and by["gpu1", "hb0"].bandwidth == 55.3
    assert by["hb0", "cpu0"].bandwidth == 55.4
    assert all(l.measured for l in m.links) and by["gpu0", "nvswitch0"].attrs["nominal_bandwidth"] == 478.116
    assert m.bandwidth("gpu0", "gpu1") == 394.0 and topo.bandwidth("gpu0", "gpu1") == 478.116


def test_gpus_are_matched_by_pci_bus_id():
    topo = fixtures.get("h200x2-nvswitch")                       # gpu0 is 00000000:00:06.0
    m = tm.apply(topo, {}, {0: 20.0, 1: 50.0}, pci={0: "0000:00:07.0", 1: "0000:00:06.0"})
    by = {(l.a, l.b): l.bandwidth for l in m.links}
    assert by["gpu1", "hb0"] == 20.0 and by["gpu0", "hb0"] == 50.0
    with pytest.raises(TopologyError, match="not in topology"):
        tm.apply(topo, {(0, 1): 1.0}, pci={0: "0000:aa:00.0", 1: "0000:00:06.0"})


def test_topo_measured_shows_both(tmp_path):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    open_store(db).save_bench_run(p2p_run({(0, 1): 394.0, (1, 0): 390.0}, {0: 55.4, 1: 55.3},
                                          pci={0: "0000:00:06.0", 1: "0000:00:07.0"}))
    p = rankmap("topo", "--fixture", "h200x2-nvswitch", "--measured", "--db", db)
    assert p.returncode == 0, p.stderr
    assert "nominal vs measured" in p.stdout
    row = next(l for l in p.stdout.splitlines() if "GPU0->GPU1" in l)
    assert "478" in row and "394" in row and "0.82" in row
    j = json.loads(rankmap("topo", "--fixture", "h200x2-nvswitch", "--measured", "1", "--db", db, "--format", "json").stdout)
    nv = [l for l in j["links"] if l["kind"] == "nvlink"]
    assert {l["bandwidth"] for l in nv} == {394.0} and all(l["measured"] for l in nv)
    assert_one_line_error(rankmap("topo", "--fixture", "h200x2-nvswitch", "--measured", "7", "--db", db),
                          "no benchmark run 7")
    empty = f"sqlite:///{tmp_path / 'e.db'}"
    open_store(empty)   # a store without bench runs (a path with no store at all is another error)
    assert_one_line_error(rankmap("topo", "--fixture", "h200x2-nvswitch", "--measured", "--db", empty),
                          "no stored `rankmap bench p2p` run")


def test_map_places_by_measured_strengths(tmp_path):
    """On a DGX-1 the two talkers go to a 2-link NVLink pair; when the measurements say one 1-link pair
    is the fastest, they go there."""
    csv = tmp_path / "t.csv"
    csv.write_text("src,dst,class,operation,bytes,messages\n0,1,p2p,MPI_Send,1000000000,10\n"
                   "1,0,p2p,MPI_Send,1000000000,10\n")
    topo = fixtures.get("dgx1-v100")
    pairs = {(a.index, b.index): 20.0 for a in topo.gpus for b in topo.gpus if a.id != b.id}
    pairs[2, 6] = pairs[6, 2] = 45.0                                     # an NV1 pair
    db = f"sqlite:///{tmp_path / 'r.db'}"
    open_store(db).save_bench_run(p2p_run(pairs))

    def gpus(*extra):
        p = rankmap("map", "--traffic", str(csv), "--topology", "dgx1-v100", "--format", "json", "--time-budget", "5",
                    *extra)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        return {doc["mapping"][r]["gpu"] for r in ("0", "1")}, doc

    nominal, _ = gpus()
    assert {topo.route(f"gpu{a}", f"gpu{b}").label for a in nominal for b in nominal if a != b} == {"NV2"}
    measured, doc = gpus("--measured", "--db", db)
    assert measured == {2, 6}
    assert doc["max_congestion"] == pytest.approx(1e9 / 45e9)


def test_measured_needs_a_p2p_run(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    rid = store.save_bench_run(dict(p2p_run({}), kind="mpi", rows=[]))
    with pytest.raises(Exception, match="is a mpi run"):
        measured_topology(fixtures.get("h200x2-nvswitch"), store, str(rid))
