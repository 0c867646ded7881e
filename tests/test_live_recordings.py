"""Topologies discovered on real GPU nodes, replayed: what rankmap found there must still load
and route the same way, and agree with what nvidia-smi printed on the same node."""

from pathlib import Path

from rankmap.topology import jsonio, load, nvsmi

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
    again = jsonio.loads(jsonio.dumps(live), source="again")
    assert nvsmi.labels(again) == nvsmi.labels(live)
