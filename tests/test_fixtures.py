"""Every built-in fixture: routes, labels and bandwidths as the published systems have them."""

from __future__ import annotations

import pytest

from rankmap.formats import topology_json
from rankmap.topology import DeviceKind, LinkKind, TopologyError, fixtures


def labels(t):
    return [[r.label for r in row] for row in t.gpu_matrix()]


def test_names_and_fresh_objects():
    assert fixtures.NAMES == ("dgx1-v100", "dgx-a100", "hgx-h100", "pcie-8gpu-2socket", "summit", "h200x2-nvswitch")
    assert fixtures.get("summit") is not fixtures.get("summit")


@pytest.mark.parametrize("name", fixtures.NAMES)
def test_every_fixture_says_where_its_facts_come_from(name):
    t = fixtures.get(name)
    assert t.name == name
    assert len(t.source) > 20 and t.notes
    # every GPU reaches every other GPU and every NIC
    for a in t.gpus:
        for b in t.gpus + t.nics:
            if a.id != b.id:
                assert t.route(a.id, b.id).hops
    # JSON round trip is lossless for routes
    t2 = topology_json.loads(topology_json.dumps(t), source="x.json")
    assert labels(t2) == labels(t)
    assert topology_json.dumps(t2) == topology_json.dumps(t)


def test_unknown_fixture():
    with pytest.raises(TopologyError, match=r"unknown fixture 'dgx9'; fixtures: dgx1-v100, dgx-a100"):
        fixtures.get("dgx9")


# ------------------------------------------------------------------ dgx1-v100
DGX1 = """
X   NV1 NV1 NV2 NV2 SYS SYS SYS
NV1 X   NV2 NV1 SYS NV2 SYS SYS
NV1 NV2 X   NV2 SYS SYS NV1 SYS
NV2 NV1 NV2 X   SYS SYS SYS NV1
NV2 SYS SYS SYS X   NV1 NV1 NV2
SYS NV2 SYS SYS NV1 X   NV2 NV1
SYS SYS NV1 SYS NV1 NV2 X   NV2
SYS SYS SYS NV1 NV2 NV1 NV2 X
"""


def test_dgx1_full_matrix():
    t = fixtures.get("dgx1-v100")
    want = [line.split() for line in DGX1.strip().splitlines()]
    assert labels(t) == want  # all 64 labels


def test_dgx1_bandwidths_and_routes():
    t = fixtures.get("dgx1-v100")
    assert t.bandwidth("gpu0", "gpu3") == 50.0
    assert t.bandwidth("gpu0", "gpu1") == 25.0
    # SYS pair: PCIe Gen3 x16 is the bottleneck, route crosses QPI
    assert t.bandwidth("gpu0", "gpu5") == 15.75
    r = t.route("gpu0", "gpu5")
    assert r.devices() == ["gpu0", "pcisw0", "cpu0", "cpu1", "pcisw2", "gpu5"]
    assert [t.links[h.link].kind for h in r.hops].count(LinkKind.CPU_INTERCONNECT) == 1
    # each GPU has 6 NVLinks (V100)
    for g in t.gpus:
        assert sum(l.count for _, l in t.links_of(g.id) if l.kind == LinkKind.NVLINK) == 6
    assert t.local_cpu("gpu3").id == "cpu0" and t.local_cpu("gpu4").id == "cpu1"


def test_dgx1_nic_routes():
    t = fixtures.get("dgx1-v100")
    assert [n.name for n in t.nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert t.route("gpu0", "nic0").label == "PIX"
    assert t.route("gpu0", "nic0").devices() == ["gpu0", "pcisw0", "nic0"]
    assert t.route("gpu0", "nic1").label == "PHB"
    assert t.route("gpu0", "nic2").label == "SYS"
    assert [t.nearest_nic(g.id).name for g in t.gpus] == ["mlx5_0"] * 2 + ["mlx5_1"] * 2 + ["mlx5_2"] * 2 + ["mlx5_3"] * 2
    assert t.nics[0].attrs["rate_gbps"] == 100


# ------------------------------------------------------------------ NVSwitch systems
@pytest.mark.parametrize("name,links,per_gpu", [("dgx-a100", 12, 300.0), ("hgx-h100", 18, 450.0)])
def test_nvswitch_fixtures(name, links, per_gpu):
    t = fixtures.get(name)
    n = len(t.gpus)
    assert n == 8
    assert labels(t) == [["X" if i == j else f"NV{links}" for j in range(n)] for i in range(n)]
    r = t.route("gpu0", "gpu7")
    assert r.devices() == ["gpu0", "nvswitch0", "gpu7"]
    assert t.bandwidth("gpu0", "gpu7") == per_gpu
    sw = t.of_kind(DeviceKind.NVSWITCH)
    assert len(sw) == 1
    for g in t.gpus:
        (l,) = [l for _, l in t.links_of(g.id) if l.kind == LinkKind.NVLINK]
        assert l.count == links and l.bandwidth / l.count == 25.0


def test_dgx_a100_nics():
    t = fixtures.get("dgx-a100")
    assert len(t.nics) == 8 and all(n.attrs["rate_gbps"] == 200 for n in t.nics)
    assert [t.route("gpu0", n.id).label for n in t.nics] == ["PXB", "PXB", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert [t.route("gpu5", n.id).label for n in t.nics] == ["SYS"] * 4 + ["PXB", "PXB", "NODE", "NODE"]
    assert t.bandwidth("gpu0", "nic0") == 31.5
    assert t.of_kind(DeviceKind.NVSWITCH)[0].attrs["physical_switches"] == 6


def test_hgx_h100_nics():
    t = fixtures.get("hgx-h100")
    assert [t.route("gpu2", n.id).label for n in t.nics] == ["NODE", "NODE", "PIX", "NODE"] + ["SYS"] * 4
    assert [t.nearest_nic(g.id).index for g in t.gpus] == list(range(8))
    assert t.nics[0].attrs["rate_gbps"] == 400
    assert t.bandwidth("gpu2", "nic2") == 63.0
    assert t.route("gpu0", "nic4").devices() == ["gpu0", "pcisw0", "hb0", "cpu0", "cpu1", "hb4", "pcisw4", "nic4"]


def test_pcie_box():
    t = fixtures.get("pcie-8gpu-2socket")
    assert not [l for l in t.links if l.kind == LinkKind.NVLINK]
    row0 = [r.label for r in t.gpu_matrix()[0]]
    assert row0 == ["X", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert t.route("gpu0", "gpu1").devices() == ["gpu0", "pcisw0", "gpu1"]
    assert t.route("gpu0", "gpu2").devices() == ["gpu0", "pcisw0", "hb0", "cpu0", "hb1", "pcisw1", "gpu2"]
    assert t.bandwidth("gpu0", "gpu7") == 31.5
    assert [t.route("gpu0", n.id).label for n in t.nics] == ["PIX", "NODE", "SYS", "SYS"]


def test_summit_routes_over_nvlink_to_the_cpu():
    t = fixtures.get("summit")
    assert len(t.gpus) == 6 and len(t.cpus) == 2
    assert labels(t) == [["X" if i == j else ("NV2" if i // 3 == j // 3 else "SYS") for j in range(6)] for i in range(6)]
    r = t.route("gpu0", "gpu3")
    assert r.devices() == ["gpu0", "cpu0", "cpu1", "gpu3"]
    kinds = [t.links[h.link].kind for h in r.hops]
    assert kinds == [LinkKind.NVLINK, LinkKind.CPU_INTERCONNECT, LinkKind.NVLINK]
    assert t.bandwidth("gpu0", "gpu3") == 50.0  # NVLink 2x25 is the bottleneck, X-Bus is 64
    assert t.bandwidth("gpu0", "gpu1") == 50.0
    assert t.route("gpu4", "nic1").devices() == ["gpu4", "cpu1", "nic1"]
    assert t.route("gpu4", "nic0").devices() == ["gpu4", "cpu1", "cpu0", "nic0"]
    assert t.local_cpu("gpu5").id == "cpu1"
    assert t.cpus[1].attrs["numa_node"] == 8


def test_h200x2():
    t = fixtures.get("h200x2-nvswitch")
    assert labels(t) == [["X", "NV18"], ["NV18", "X"]]
    assert t.route("gpu0", "gpu1").devices() == ["gpu0", "nvswitch0", "gpu1"]
    l = [l for _, l in t.links_of("gpu0") if l.kind == LinkKind.NVLINK][0]
    assert (l.count, l.attrs["per_link"], l.bandwidth) == (18, 26.562, 478.116)
    assert t.nics == []
    assert t.gpus[0].attrs["cpus"] == "0-31" and t.cpus[0].attrs["numa_node"] == 0
    assert t.gpus[1].attrs["pci_bus_id"] == "00000000:00:07.0"
    assert any("NUMA" in u for u in t.unknowns)
