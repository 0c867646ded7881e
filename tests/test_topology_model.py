"""The routing rules of the Topology model, on small hand-made graphs."""

from __future__ import annotations

import pytest

from rankmap.topology import Device, DeviceKind as K, Link, LinkKind as L, Topology, TopologyError


def dev(i, kind, idx=0):
    return Device(i, kind, idx)


def test_labels_along_the_pcie_tree():
    # cpu0 - hb0 - sw0 - {g0, g1}; hb0 - sw1 - sw2 - g2 (PXB via two switches); cpu0 - hb1 - g3; cpu1 - g4
    devs = [dev("cpu0", K.CPU), dev("cpu1", K.CPU, 1), dev("hb0", K.HOST_BRIDGE), dev("hb1", K.HOST_BRIDGE, 1),
            dev("sw0", K.PCIE_SWITCH), dev("sw1", K.PCIE_SWITCH, 1), dev("sw2", K.PCIE_SWITCH, 2)]
    devs += [dev(f"g{i}", K.GPU, i) for i in range(5)]
    links = [Link("hb0", "cpu0", L.PCIE, 32), Link("hb1", "cpu0", L.PCIE, 32), Link("sw0", "hb0", L.PCIE, 32),
             Link("g0", "sw0", L.PCIE, 16), Link("g1", "sw0", L.PCIE, 16), Link("sw1", "sw0", L.PCIE, 32),
             Link("sw2", "sw1", L.PCIE, 32), Link("g2", "sw2", L.PCIE, 8), Link("g3", "hb1", L.PCIE, 16),
             Link("g4", "cpu1", L.PCIE, 16), Link("cpu0", "cpu1", L.CPU_INTERCONNECT, 40)]
    t = Topology("t", devs, links)
    assert t.route("g0", "g1").label == "PIX"
    assert t.route("g0", "g2").label == "PXB"
    assert t.route("g0", "g3").label == "NODE"
    assert t.route("g0", "g4").label == "SYS"
    assert t.route("g0", "g0").label == "X"
    assert t.bandwidth("g0", "g2") == 8
    assert t.route("g2", "g0").devices() == ["g2", "sw2", "sw1", "sw0", "g0"]
    # directed hops: reverse route uses the same links in the other direction
    fwd, back = t.route("g0", "g4"), t.route("g4", "g0")
    assert [h.link for h in fwd.hops] == [h.link for h in reversed(back.hops)]
    assert all(h.src == t.links[h.link].a or h.src == t.links[h.link].b for h in fwd.hops)


def test_nvlink_beats_pcie_and_gpus_do_not_forward():
    devs = [dev("cpu0", K.CPU)] + [dev(f"g{i}", K.GPU, i) for i in range(3)]
    links = [Link(f"g{i}", "cpu0", L.PCIE, 16) for i in range(3)]
    links += [Link("g0", "g1", L.NVLINK, 50, 2), Link("g1", "g2", L.NVLINK, 25, 1)]
    t = Topology("t", devs, links)
    assert t.route("g0", "g1").label == "NV2"
    # g0 -> g2 must not go through g1's NVLinks: GPUs do not forward
    r = t.route("g0", "g2")
    assert r.label == "PHB" and r.devices() == ["g0", "cpu0", "g2"]


def test_nvswitch_route_and_gpu_cpu_nvlink():
    devs = [dev("cpu0", K.CPU), dev("cpu1", K.CPU, 1), dev("sw", K.NVSWITCH)] + [dev(f"g{i}", K.GPU, i) for i in range(3)]
    links = [Link("g0", "sw", L.NVLINK, 300, 12), Link("g1", "sw", L.NVLINK, 300, 12),
             Link("g2", "cpu1", L.NVLINK, 50, 2), Link("g0", "cpu0", L.NVLINK, 50, 2),
             Link("cpu0", "cpu1", L.CPU_INTERCONNECT, 64)]
    t = Topology("t", devs, links)
    assert t.route("g0", "g1").label == "NV12" and t.route("g0", "g1").devices() == ["g0", "sw", "g1"]
    # a GPU attached only by NVLink to its CPU still has a host route (POWER9 style)
    r = t.route("g0", "g2")
    assert r.label == "SYS" and r.devices() == ["g0", "cpu0", "cpu1", "g2"]
    assert t.local_cpu("g2").id == "cpu1"
    with pytest.raises(TopologyError, match="no route from g1 to g2"):
        t.route("g1", "g2")


def test_constructor_rejects_bad_graphs():
    with pytest.raises(TopologyError, match="appears twice"):
        Topology("t", [dev("a", K.GPU), dev("a", K.GPU)], [])
    with pytest.raises(TopologyError, match="unknown device 'b'"):
        Topology("t", [dev("a", K.GPU)], [Link("a", "b", L.PCIE, 1)])
    with pytest.raises(TopologyError, match="must be > 0"):
        Topology("t", [dev("a", K.GPU), dev("b", K.GPU)], [Link("a", "b", L.PCIE, 0)])


def test_json_round_trip_minimal_and_attrs():
    from rankmap.formats import topology_json

    t = Topology("one", [Device("gpu0", K.GPU, 0, "X", {"uuid": "GPU-1", "cpus": "0-3"})], [])
    text = topology_json.dumps(t)
    back = topology_json.loads(text, source="one.json")
    assert back.name == "one" and back.links == [] and back.notes == [] and back.unknowns == []
    assert back.devices["gpu0"].attrs == {"uuid": "GPU-1", "cpus": "0-3"}
    t2 = Topology("two", [dev("a", K.GPU), dev("b", K.CPU)],
                  [Link("a", "b", L.NVLINK, 50.0, 2, 2, None, True, {"per_link": 25.0})], notes=["n"], unknowns=["u"])
    b2 = topology_json.loads(topology_json.dumps(t2), source="two.json")
    assert b2.links == t2.links and b2.links[0].measured is True and b2.links[0].attrs == {"per_link": 25.0}
    assert (b2.notes, b2.unknowns) == (["n"], ["u"])
    with pytest.raises(TopologyError, match=r"^x.json: expected an object, got \[1\]$"):
        topology_json.loads("[1]", source="x.json")
    with pytest.raises(TopologyError, match=r"^x.json: links\[0\].bandwidth: expected a positive number, got true$"):
        topology_json.loads('{"format": "rankmap-topology", "version": 1, "devices": [{"id": "a", "kind": "gpu"}, '
                     '{"id": "b", "kind": "gpu"}], "links": [{"a": "a", "b": "b", "kind": "pcie", "bandwidth": true}]}',
                     source="x.json")
    with pytest.raises(TopologyError, match=r"links\[0\]: joins 'a' to itself"):
        topology_json.loads('{"format": "rankmap-topology", "version": 1, "devices": [{"id": "a", "kind": "gpu"}], '
                     '"links": [{"a": "a", "b": "a", "kind": "pcie", "bandwidth": 1}]}', source="x.json")
