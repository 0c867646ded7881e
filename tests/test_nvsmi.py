"""The nvidia-smi topo -m reader and writer, on real outputs and on every fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankmap.topology import DeviceKind, LinkKind, TopologyError, fixtures, nvsmi

DATA = Path(__file__).parent / "data" / "nvsmi"


def read(name):
    return nvsmi.parse((DATA / name).read_text(), source=name)


def test_h200_recording_with_escape_codes(recordings):
    text = (recordings / "h200x2-nvidia-smi-topo-m.txt").read_text()
    assert "\x1b[4m" in text  # the real thing, escapes and all
    t = nvsmi.parse(text, source="h200x2-nvidia-smi-topo-m.txt")
    assert [g.id for g in t.gpus] == ["gpu0", "gpu1"]
    assert nvsmi.labels(t)[("GPU0", "GPU1")] == "NV18"
    (l,) = [l for l in t.links if l.kind == LinkKind.NVLINK]
    assert (l.a, l.b, l.count, l.bandwidth, l.attrs["nominal"]) == ("gpu0", "gpu1", 18, 450.0, True)
    assert all(g.attrs == {"cpus": "0-31", "numa_node": 0} for g in t.gpus)  # GPU NUMA ID N/A -> absent
    assert len(t.cpus) == 1 and t.cpus[0].attrs == {"numa_node": 0, "cpus": "0-31"}
    assert t.nics == []
    assert any("does not name the GPU" in u for u in t.unknowns)
    assert any("PCIe placement" in u for u in t.unknowns)


def test_gpu_name_sets_nvlink_speed(recordings):
    text = (recordings / "h200x2-nvidia-smi-topo-m.txt").read_text()
    t = nvsmi.parse(text, source="x", gpu_name="NVIDIA H200")
    (l,) = [l for l in t.links if l.kind == LinkKind.NVLINK]
    assert (l.generation, l.bandwidth, l.attrs["nominal"]) == (4, 450.0, False)
    assert not any("does not name the GPU" in u for u in t.unknowns)
    assert nvsmi.nvlink_per_link("Tesla V100-SXM2-16GB") == (2, 25.0)
    assert nvsmi.nvlink_per_link("NVIDIA B200") == (5, 50.0)
    assert nvsmi.nvlink_per_link("NVIDIA GeForce RTX 4090") is None


def test_dgx1_output():
    t = read("dgx1-v100.txt")
    lab = nvsmi.labels(t)
    assert [n.name for n in t.nics] == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]  # column order kept
    assert lab[("GPU0", "GPU3")] == "NV2" and lab[("GPU0", "GPU1")] == "NV1" and lab[("GPU0", "GPU5")] == "SYS"
    assert lab[("GPU0", "NIC0")] == "PIX" and lab[("GPU0", "NIC2")] == "PHB" and lab[("GPU0", "NIC1")] == "SYS"
    assert lab[("NIC0", "NIC2")] == "PHB"
    # the parsed matrix equals the fixture's, label for label, GPUs and NICs (NIC order differs)
    fx = nvsmi.labels(fixtures.get("dgx1-v100"))
    order = {"NIC0": "NIC0", "NIC1": "NIC2", "NIC2": "NIC1", "NIC3": "NIC3"}
    for (a, b), v in fx.items():
        assert lab[(order.get(a, a), order.get(b, b))] == v, (a, b)
    assert len(t.cpus) == 2 and t.cpus[0].attrs["cpus"] == "0-19,40-59"
    assert t.bandwidth("gpu0", "gpu3") == 50.0  # 2 x 25 nominal
    assert not any("no single PCIe tree" in u for u in t.unknowns)


def test_dgx_a100_nps4_output():
    t = read("dgx-a100-nps4.txt")
    assert len(t.gpus) == 8 and len(t.nics) == 10
    sw = t.of_kind(DeviceKind.NVSWITCH)
    assert len(sw) == 1 and sw[0].attrs["inferred"] is True
    assert t.route("gpu0", "gpu6").devices() == ["gpu0", "nvswitch0", "gpu6"]
    assert t.bandwidth("gpu0", "gpu6") == 300.0
    lab = nvsmi.labels(t)
    assert lab[("GPU0", "NIC1")] == "PXB" and lab[("GPU0", "NIC2")] == "SYS" and lab[("GPU6", "NIC7")] == "PXB"
    assert t.nics[9].name == "mlx5_9"
    # NUMA nodes 3, 1, 7, 5 hold the GPU pairs; the storage NICs sit on their own nodes
    numas = [t.local_cpu(g.id).attrs.get("numa_node") for g in t.gpus]
    assert numas == [3, 3, 1, 1, 7, 7, 5, 5]
    assert t.gpus[4].attrs["cpus"] == "112-127,240-255"
    assert not any("no single PCIe tree" in u for u in t.unknowns)


def test_nvlink_bridge_box():
    t = read("a100x3-nvbridge.txt")
    lab = nvsmi.labels(t)
    assert lab[("GPU0", "GPU1")] == "NV4" and lab[("GPU0", "GPU2")] == "NODE" and lab[("GPU2", "NIC0")] == "PHB"
    assert lab[("NIC0", "NIC1")] == "PIX"
    assert not t.of_kind(DeviceKind.NVSWITCH)  # 3 GPUs, not all pairs NVLinked: no switch
    assert t.route("gpu0", "gpu1").devices() == ["gpu0", "gpu1"]
    assert len(t.cpus) == 1 and t.cpus[0].attrs["numa_node"] == 1


def test_pcie_sys_box_tabs():
    t = read("pcie-8gpu-sys.txt")
    lab = nvsmi.labels(t)
    assert all(lab[(f"GPU{i}", f"GPU{j}")] == "SYS" for i in range(8) for j in range(8) if i != j)
    assert [t.nearest_nic(g.id).name for g in t.gpus] == [f"mlx5_{i}" for i in range(8)]
    assert any("same NUMA/CPU affinity but SYS" in u for u in t.unknowns)


@pytest.mark.parametrize("name", fixtures.NAMES)
def test_round_trip_every_fixture(name):
    fx = fixtures.get(name)
    text = nvsmi.format_matrix(fx)
    parsed = nvsmi.parse(text, source=f"{name}.txt")
    assert nvsmi.labels(parsed) == nvsmi.labels(fx)
    assert [n.name for n in parsed.nics] == [n.name for n in fx.nics]
    assert [g.attrs.get("cpus") for g in parsed.gpus] == [
        g.attrs.get("cpus") or fx.local_cpu(g.id).attrs.get("cpus") for g in fx.gpus]


def test_format_matrix_dgx1():
    text = nvsmi.format_matrix(fixtures.get("dgx1-v100"))
    rows = {line.split("\t")[0]: line.split("\t") for line in text.splitlines() if line.startswith(("GPU", "NIC"))}
    assert rows["GPU0"][1:9] == [" X ", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]
    assert rows["GPU4"][-4:] == ["20-39,60-79", "1", "", "N/A"]
    assert "  NIC2: mlx5_2" in text and "NV#  = Connection traversing a bonded set of # NVLinks" in text


@pytest.mark.parametrize("text,needle", [
    ("hello\nworld\n", "no 'nvidia-smi topo -m' matrix found"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \tjunk\nGPU1\tNV4\n", None),
    ("\tGPU0\tGPU1\nGPU0\t X \tQQQ\nGPU1\tQQQ\t X \n", "line 2: row GPU0, column GPU1: 'QQQ' is not a topology label"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV2\t X \n", "not symmetric: GPU0/GPU1 is NV4 but GPU1/GPU0 is NV2"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\n", "names GPU1 but the matrix has no row for it"),
    ("\tGPU0\tGPU1\nGPU0\tNV4\t X \nGPU1\t X \tNV4\n", "the diagonal must be X"),
    ("\tGPU0\tGPU1\tNIC0\nGPU0\t X \tPIX\n", "row GPU0 has 2 cells, the header names 3 devices"),
])
def test_bad_text(text, needle):
    if needle is None:  # extra trailing tokens and repeated rows are tolerated
        t = nvsmi.parse(text, source="m.txt")
        assert nvsmi.labels(t)[("GPU0", "GPU1")] == "NV4"
        return
    with pytest.raises(TopologyError) as e:
        nvsmi.parse(text, source="m.txt")
    assert str(e.value).startswith("m.txt: ") and needle in str(e.value)


def test_old_soc_label_and_spaces():
    text = "        GPU0    GPU1    CPU Affinity\nGPU0     X      SOC     0-7\nGPU1    SOC      X      8-15\n"
    t = nvsmi.parse(text, source="old.txt")
    assert nvsmi.labels(t)[("GPU0", "GPU1")] == "SYS"
    assert len(t.cpus) == 2 and [c.attrs["cpus"] for c in t.cpus] == ["0-7", "8-15"]
