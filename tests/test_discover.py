"""Live discovery, driven by a fake NVML (populated from the H200 recording) and a fake sysfs tree."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from rankmap.topology import DeviceKind, LinkKind, TopologyError
from rankmap.topology.discover import cpulist, discover, pcie_gbs


class NVMLError(Exception):
    pass


class FakeNvml:
    """The pynvml calls discovery makes, answering like the driver did on a recorded machine."""

    NVMLError = NVMLError

    def __init__(self, gpus, *, remote="FFFFFFFF:FF:FF.0", remote_type=None, speed=26562, p2p=0, driver="580.159.04",
                 nvlinks=18):
        self.gpus, self.remote, self.remote_type = gpus, remote, remote_type
        self.speed, self.p2p, self.driver, self.nvlinks = speed, p2p, driver, nvlinks
        self.p2p_calls = []

    @classmethod
    def from_recording(cls, text: str, **kw):
        gpus = []
        for m in re.finditer(r"^(\d+) (NVIDIA \S+) (\S+) numa\? .*?cpuaff \[(.*?)\]", text, re.M):
            words = [int(w.strip(" '"), 16) for w in m.group(4).split(",")]
            gpus.append({"name": m.group(2), "bus": m.group(3), "cpuaff": words})
        speed = int(re.search(r"NVML_FI_DEV_NVLINK_GET_SPEED 0 1 (\d+)", text).group(1))
        links = len(re.findall(r"link \d+ state 1", text)) // len(gpus)
        remote = re.search(r"remote (\S+?);", text).group(1)
        kw.setdefault("speed", speed)
        kw.setdefault("nvlinks", links)
        kw.setdefault("remote", remote)
        return cls(gpus, **kw)

    def _g(self, h):
        return self.gpus[h]

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self._g(h)["name"]

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-0000000{h}"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._g(h)["bus"].encode())

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=143771 * 2**20)

    def nvmlDeviceGetCpuAffinity(self, h, n):
        return self._g(h)["cpuaff"][:max(n, 1)]

    def nvmlDeviceGetNumaNodeId(self, h):
        if "numa" in self._g(h):
            return self._g(h)["numa"]
        raise NVMLError("Not Supported")

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= self.nvlinks:
            raise NVMLError("Invalid Argument")
        return 1

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return 6  # what a real H200 answers: the enum value of NVLink 4.0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        r = self.remote(h, link) if callable(self.remote) else self.remote
        return SimpleNamespace(busId=r.encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        if self.remote_type is None:
            raise NVMLError("Not Supported")
        return self.remote_type

    def nvmlDeviceGetFieldValues(self, h, ids):
        out = []
        for f in ids:
            fid, scope = f if isinstance(f, tuple) else (f, 0)
            if fid == 164 and self.speed:
                out.append(SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=self.speed)))
            else:
                out.append(SimpleNamespace(nvmlReturn=3, valueType=0, value=SimpleNamespace(uiVal=0)))
        return out

    def nvmlDeviceGetP2PStatus(self, a, b, idx):
        if not isinstance(idx, int):
            raise TypeError("Don't know how to convert parameter 3")
        self.p2p_calls.append(idx)
        return self.p2p


def mkdev(root: Path, rel: str, **files):
    d = root / "sys" / "devices" / rel
    d.mkdir(parents=True, exist_ok=True)
    for k, v in files.items():
        (d / k).write_text(v + "\n")
    bus = rel.rsplit("/", 1)[-1]
    link = root / "sys" / "bus" / "pci" / "devices" / bus
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(os.path.relpath(d, link.parent))
    return d


def numa(root: Path, node: int, cpus: str):
    d = root / "sys" / "devices" / "system" / "node" / f"node{node}"
    d.mkdir(parents=True)
    (d / "cpulist").write_text(cpus + "\n")


def netdev(root: Path, cls: str, name: str, target: Path | None, **files):
    d = root / "sys" / "class" / cls / name
    d.mkdir(parents=True)
    if target is not None:
        (d / "device").symlink_to(target)
    for k, v in files.items():
        p = d / k
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(v + "\n")


@pytest.fixture
def h200_vm(tmp_path, recordings):
    """sysfs of the H200 VM: both GPUs on the root bus, one NUMA node, a virtio NIC, lo."""
    mkdev(tmp_path, "pci0000:00/0000:00:06.0", numa_node="-1", current_link_speed="32.0 GT/s PCIe", current_link_width="16")
    mkdev(tmp_path, "pci0000:00/0000:00:07.0", numa_node="-1", current_link_speed="32.0 GT/s PCIe", current_link_width="16")
    virtio = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:00:03.0" / "virtio0"
    virtio.mkdir(parents=True)
    numa(tmp_path, 0, "0-31")
    netdev(tmp_path, "net", "eth0", virtio, speed="-1")
    netdev(tmp_path, "net", "lo", None)
    nv = FakeNvml.from_recording((recordings / "h200x2-nvml-and-p2p.txt").read_text())
    return nv, tmp_path


def test_h200_vm(h200_vm):
    nv, root = h200_vm
    assert nv.speed == 26562 and nv.nvlinks == 18 and nv.remote == "FFFFFFFF:FF:FF.0"
    t = discover(nvml=nv, sysfs_root=root)
    assert [g.name for g in t.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert t.gpus[0].attrs["pci_bus_id"] == "00000000:00:06.0"
    assert t.gpus[0].attrs["cpus"] == "0-31" and t.gpus[0].attrs["memory_mib"] == 143771
    assert "numa_node" not in t.gpus[0].attrs  # NVML: Not Supported
    r = t.route("gpu0", "gpu1")
    assert r.label == "NV18" and r.devices() == ["gpu0", "nvswitch0", "gpu1"]
    l = t.links[r.hops[0].link]
    assert (l.count, l.attrs["per_link"], l.bandwidth, l.generation) == (18, 26.562, 478.116, 4)
    assert t.devices["nvswitch0"].attrs == {"inferred": True}
    assert nv.p2p_calls == [2]  # asked with NVML_P2P_CAPS_INDEX_NVLINK as a plain int
    assert any("FFFFFFFF:FF:FF.0" in u and "P2P over NVLink OK" in u for u in t.unknowns)
    # one NUMA node in sysfs: the GPUs hang under it, PCIe Gen5 x16 read from sysfs
    assert [c.id for c in t.cpus] == ["cpu0"] and t.cpus[0].attrs["cpus"] == "0-31"
    pcie = [l for _, l in t.links_of("gpu0") if l.kind == LinkKind.PCIE][0]
    assert (pcie.generation, pcie.width, pcie.bandwidth) == (5, 16, 63.02)
    assert t.nics == []
    assert any("eth0" in n for n in t.notes) and any("580.159.04" in n for n in t.notes)


def test_p2p_says_no_nvlink(h200_vm):
    nv, root = h200_vm
    nv.p2p = 4  # NVML_P2P_STATUS_NOT_SUPPORTED
    t = discover(nvml=nv, sysfs_root=root)
    assert not t.of_kind(DeviceKind.NVSWITCH)
    assert t.route("gpu0", "gpu1").label == "PHB"
    assert any("left out" in u for u in t.unknowns)


def test_missing_nvlink_speed_is_said(h200_vm):
    nv, root = h200_vm
    nv.speed = 0
    t = discover(nvml=nv, sysfs_root=root)
    l = [l for _, l in t.links_of("gpu0") if l.kind == LinkKind.NVLINK][0]
    assert l.bandwidth == 18 * 25.0 and l.attrs["nominal"] is True
    assert any("NVLink speed not given by NVML" in u for u in t.unknowns)


def test_bare_metal_tree(tmp_path):
    """Two sockets; GPU0 and an HDR NIC under one PCIe switch; GPU1 on the other socket; GPUs NVLinked directly."""
    r = tmp_path
    numa(r, 0, "0-15")
    numa(r, 1, "16-31")
    g5 = "current_link_speed"
    mkdev(r, "pci0000:00/0000:00:01.0", numa_node="0")
    mkdev(r, "pci0000:00/0000:00:01.0/0000:01:00.0", numa_node="0", **{g5: "16.0 GT/s PCIe"}, current_link_width="16")
    mkdev(r, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", numa_node="0")
    mkdev(r, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0", numa_node="0")
    mkdev(r, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", numa_node="0",
          **{g5: "16.0 GT/s PCIe"}, current_link_width="16")
    nic = mkdev(r, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0", numa_node="0",
                **{g5: "16.0 GT/s PCIe"}, current_link_width="8")
    mkdev(r, "pci0000:80/0000:80:01.0", numa_node="1")
    mkdev(r, "pci0000:80/0000:80:01.0/0000:81:00.0", numa_node="1", **{g5: "8.0 GT/s"}, current_link_width="8")
    netdev(r, "infiniband", "mlx5_0", nic, **{"ports/1/rate": "200 Gb/sec (4X HDR)"})
    netdev(r, "net", "ib0", nic, speed="200000")
    gpus = [{"name": "NVIDIA A100-SXM4-40GB", "bus": "00000000:03:00.0", "cpuaff": [0xFFFF], "numa": 0},
            {"name": "NVIDIA A100-SXM4-40GB", "bus": "00000000:81:00.0", "cpuaff": [0xFFFF0000], "numa": 1}]
    other = {0: "00000000:81:00.0", 1: "00000000:03:00.0"}
    nv = FakeNvml(gpus, remote=lambda h, link: other[h], remote_type=0, speed=25000, nvlinks=4)
    t = discover(nvml=nv, sysfs_root=r)
    assert t.route("gpu0", "gpu1").label == "NV4" and t.bandwidth("gpu0", "gpu1") == 100.0
    assert [n.name for n in t.nics] == ["mlx5_0"]
    assert t.nics[0].attrs == {"pci_bus_id": "0000:04:00.0", "rdma": True, "netdev": "ib0", "rate_gbps": 200}
    assert t.route("gpu0", "nic0").label == "PIX"
    assert t.route("gpu0", "nic0").devices() == ["gpu0", "pcisw:0000:01:00.0", "nic0"]
    assert t.route("gpu1", "nic0").label == "SYS"
    assert t.bandwidth("gpu0", "nic0") == 15.75  # NIC at Gen4 x8
    assert t.bandwidth("gpu1", "nic0") == 7.88   # GPU1 at Gen3 x8
    assert t.nearest_nic("gpu1").name == "mlx5_0"
    assert [c.attrs["cpus"] for c in t.cpus] == ["0-15", "16-31"]
    assert t.gpus[1].attrs["cpus"] == "16-31" and t.gpus[1].attrs["numa_node"] == 1
    assert any("CPU interconnect bandwidth" in u for u in t.unknowns)


def test_no_sysfs(tmp_path):
    nv = FakeNvml([{"name": "NVIDIA H100 80GB HBM3", "bus": "00000000:18:00.0", "cpuaff": [0xFF]}], nvlinks=0)
    t = discover(nvml=nv, sysfs_root=tmp_path / "empty")
    assert t.gpus[0].attrs["cpus"] == "0-7"
    assert t.local_cpu("gpu0").id == "cpu?"
    assert any("NUMA node unknown" in u for u in t.unknowns)
    assert any("PCIe path not visible" in u for u in t.unknowns)


def test_no_gpu():
    with pytest.raises(TopologyError, match=r"sees no GPU.*--fixture NAME"):
        discover(nvml=FakeNvml([]))


def test_helpers():
    assert cpulist([0xFFFFFFFF, 0, 0, 0]) == "0-31"
    assert cpulist([0b1011, 1]) == "0-1,3,64"
    assert cpulist([0]) == ""
    assert pcie_gbs("16.0 GT/s PCIe", "16") == (31.51, 4, 16)
    assert pcie_gbs("2.5 GT/s", "1") == (0.25, 1, 1)
    assert pcie_gbs("Unknown", "16") is None and pcie_gbs("8.0 GT/s", "0") is None


def test_remote_type_switch_with_hidden_bus(h200_vm):
    """Drivers that report the remote type (NVSwitch) but not its address: a switch, not an inference."""
    nv, root = h200_vm
    nv.remote_type = 2
    t = discover(nvml=nv, sysfs_root=root)
    assert t.route("gpu0", "gpu1").devices() == ["gpu0", "nvswitch0", "gpu1"]
    assert t.devices["nvswitch0"].attrs == {}
    assert nv.p2p_calls == []  # no inference needed
    assert any("end on an NVSwitch" in n for n in t.notes)


def test_bare_metal_nvswitch_addresses(h200_vm):
    nv, root = h200_vm
    nv.remote_type = 2
    nv.remote = lambda h, link: f"00000000:0{5 + link % 4}:00.0"
    t = discover(nvml=nv, sysfs_root=root)
    assert t.devices["nvswitch0"].attrs["physical_switches"] == ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0",
                                                                 "0000:08:00.0"]
    assert t.bandwidth("gpu0", "gpu1") == 478.116


def test_nvlink_to_gpu_outside_the_view(h200_vm):
    nv, root = h200_vm
    nv.remote_type = 0
    nv.remote = "00000000:8A:00.0"
    t = discover(nvml=nv, sysfs_root=root)
    assert not t.of_kind(DeviceKind.NVSWITCH)
    assert t.route("gpu0", "gpu1").label == "PHB"
    assert any("0000:8a:00.0" in u and "left out" in u for u in t.unknowns)
