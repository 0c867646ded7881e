"""Topologies discovered on real GPU nodes, replayed: what rankmap found there must still load
and route the same way, and agree with what nvidia-smi printed on the same node."""

from pathlib import Path

from rankmap.formats import topology_json
from rankmap.topology import load, nvsmi

LIVE = Path(__file__).parent / "data" / "live"


def test_h200x2_live_topology_routes():
    topo = load(str(LIVE / "h200x2-topo.json"))
    assert [g.name for g in topo.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    r = topo.route("gpu0", "gpu1")
    assert r.label == "NV18"
    assert [topo.devices[d].kind.value for d in r.devices()] == ["gpu", "nvswitch", "gpu"]
    link = topo.links[r.hops[0].link]
    assert (link.count, link.generation) == (18, 4)
    assert round(link.bandwidth, 3) == 478.116  # 18 x 26.562 GB/s
    assert topo.gpus[0].attrs["cpus"] == "0-31"


def test_h200x2_live_agrees_with_nvidia_smi_of_same_node():
    live = load(str(LIVE / "h200x2-topo.json"))
    smi = nvsmi.parse((LIVE / "h200x2-nvidia-smi-topo-m.txt").read_text(), source="smi")
    assert nvsmi.labels(live) == nvsmi.labels(smi)
    # and the JSON form round-trips
    again = topology_json.loads(topology_json.dumps(live), source="again")
    assert nvsmi.labels(again) == nvsmi.labels(live)


def test_h200x4_live_topology_routes_and_matches_nvidia_smi():
    topo = load(str(LIVE / "h200x4-topo.json"))
    assert len(topo.gpus) == 4
    for a in topo.gpus:
        assert a.attrs["cpus"] == "0-63"
        for b in topo.gpus:
            if a is b:
                continue
            r = topo.route(a.id, b.id)
            assert r.label == "NV18"
            assert [topo.devices[d].kind.value for d in r.devices()] == ["gpu", "nvswitch", "gpu"]
            assert round(topo.bandwidth(a.id, b.id), 3) == 478.116
    smi = nvsmi.parse((LIVE / "h200x4-nvidia-smi-topo-m.txt").read_text(), source="smi")
    assert nvsmi.labels(topo) == nvsmi.labels(smi)


def test_placement_on_the_live_nvswitch_node_is_proven_optimal_and_equals_default(tmp_path):
    """On an NVSwitch node every GPU is equivalent: the solver must prove the default optimal."""
    import json

    from conftest import cli

    csv = tmp_path / "ring.csv"
    csv.write_text("src,dst,class,operation,bytes,messages\n"
                   + "".join(f"{r},{(r + 1) % 4},p2p,MPI_Sendrecv,1342177280,20\n" for r in range(4)))
    p = cli("map", "--traffic", str(csv), "--topology", str(LIVE / "h200x4-topo.json"), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["optimal"] is True
    assert doc["max_congestion"] == doc["default"]["max_congestion"]
    assert abs(doc["max_congestion"] - 1342177280 / 478.116e9) < 1e-12
