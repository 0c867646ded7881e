"""Discover the live node: GPUs and NVLinks from NVML, the PCIe tree, NUMA nodes and NICs from sysfs.

Both sources are injected (``discover(nvml=..., sysfs_root=...)``) so that the logic runs in
tests against a fake NVML populated from a recorded machine and a fake sysfs tree; on a
real node the defaults are the ``pynvml`` module and ``/``.

VMs and containers answer partially (NVML says *Not Supported* for the NUMA node; NVLink
remotes read ``FFFFFFFF:FF:FF.0`` when the NVSwitches are not passed through; sysfs shows
a flat PCIe bus). Every such gap is written to :attr:`Topology.unknowns` together with what
was assumed instead; nothing is guessed silently.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from rankmap.topology.model import Device, DeviceKind, Link, LinkKind, Topology, TopologyError

HINT = "use --fixture NAME (see rankmap topo --list) or --from FILE (topology JSON or nvidia-smi topo -m output)"
# nvmlDeviceGetNvLinkVersion answers an enum, not the generation: 1 = NVLink 1.0, 2 = 2.0,
# 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0, 8 = 6.0 (an H100/H200 answers 6).
_NVLINK_GENERATION = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}
INVALID_BUS = re.compile(r"^(0*:)?F{4,8}:FF:FF\.\d$", re.I)

# NVML constants, spelled out: some pynvml releases define NVML_P2P_CAPS_INDEX_READ as a
# tuple, which ctypes cannot pass (recorded on the H200 VM: "Don't know how to convert parameter 3").
P2P_CAPS_INDEX_READ = 0
P2P_CAPS_INDEX_NVLINK = 2
P2P_STATUS_OK = 0
NVLINK_REMOTE_GPU, NVLINK_REMOTE_IBMNPU, NVLINK_REMOTE_SWITCH = 0, 1, 2
FI_NVLINK_GET_SPEED = 164  # NVML_FI_DEV_NVLINK_GET_SPEED, Mb/s per link (scopeId = link)
FI_NVLINK_SPEED_MBPS_COMMON = 90
FI_NVLINK_LINK_COUNT = 91
MAX_LINKS = 18 * 2
PCIE_PLACEHOLDER = 31.5
CPU_LINK_PLACEHOLDER = 50.0
_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


# ------------------------------------------------------------------------------ NVML
def load_nvml() -> Any:
    """Import and initialise pynvml; any failure becomes one clear TopologyError.

    ``RANKMAP_NVML_LIB`` names the NVML library to load instead of ``libnvidia-ml.so.1``
    (for drivers installed in odd places; tests point it at a missing file).
    """
    try:
        import pynvml
    except ImportError:
        raise TopologyError(f"the nvidia-ml-py package (pynvml) is not installed, so NVML cannot be asked; "
                            f"pip install nvidia-ml-py, or {HINT}") from None
    lib = os.environ.get("RANKMAP_NVML_LIB")
    if lib:
        import ctypes

        try:
            pynvml.nvmlLib = ctypes.CDLL(lib)
        except OSError as e:
            raise TopologyError(f"no NVML: cannot load RANKMAP_NVML_LIB={lib} ({e.__class__.__name__}); {HINT}") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        raise TopologyError(f"no NVML on this machine (libnvidia-ml.so.1 not found: no NVIDIA driver); {HINT}") from None
    except pynvml.NVMLError as e:
        raise TopologyError(f"NVML did not start ({_errstr(e)}): is the NVIDIA driver loaded? {HINT}") from None
    return pynvml


def _errstr(e: Exception) -> str:
    try:
        return str(e) or e.__class__.__name__
    except Exception:  # pynvml's __str__ itself calls into NVML
        return e.__class__.__name__


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _bus(v: Any) -> str:
    """NVML bus id (``00000000:00:06.0``) -> sysfs name (``0000:00:06.0``), lower case."""
    s = _s(v).strip().lower()
    m = re.match(r"^([0-9a-f]+):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$", s)
    if not m:
        return s
    return f"{int(m.group(1), 16) & 0xFFFF:04x}:{m.group(2)}:{m.group(3)}.{m.group(4)}"


def cpulist(words: list[int], word_bits: int = 64) -> str:
    """NVML CPU-affinity bitmask words -> ``0-31,64-95``."""
    cpus = [w * word_bits + b for w, word in enumerate(words) for b in range(word_bits) if (int(word) >> b) & 1]
    out, start, prev = [], None, None
    for c in cpus + [None]:
        if c is not None and prev is not None and c == prev + 1:
            prev = c
            continue
        if start is not None:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = c
    return ",".join(out)


class _Nvml:
    """Thin, forgiving calls: each returns None where the driver says no."""

    def __init__(self, nvml: Any) -> None:
        self.n = nvml
        self.err = getattr(nvml, "NVMLError", Exception)

    def call(self, fn: str, *args: Any) -> Any:
        f = getattr(self.n, fn, None)
        if f is None:
            return None
        try:
            return f(*args)
        except (self.err, TypeError, ValueError, OSError):
            return None

    def field(self, h: Any, fid: int, scope: int | None = None) -> float | None:
        vals = self.call("nvmlDeviceGetFieldValues", h, [(fid, scope) if scope is not None else fid])
        if not vals:
            return None
        v = vals[0]
        if getattr(v, "nvmlReturn", 0) != 0:
            return None
        attr = _VALUE_FIELDS.get(getattr(v, "valueType", 1), "uiVal")
        return getattr(v.value, attr, None)


# ------------------------------------------------------------------------------ sysfs
_PCI = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def pcie_gbs(speed: str | None, width: str | None) -> tuple[float, int, int] | None:
    """sysfs ``current_link_speed`` ('16.0 GT/s PCIe') and width -> (GB/s per direction, generation, lanes)."""
    if not speed or not width:
        return None
    m = re.match(r"^\s*([\d.]+)\s*GT/s", speed)
    try:
        lanes = int(width)
    except ValueError:
        return None
    if not m or lanes <= 0:
        return None
    gts = float(m.group(1))
    gens = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
    gen = gens.get(gts)
    if gen is None:
        return None
    per_lane = gts * 0.8 / 8 if gen <= 2 else (gts * 128 / 130 / 8 if gen <= 5 else gts * 242 / 256 / 8)
    return round(per_lane * lanes, 2), gen, lanes


class _Sysfs:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.devices = self.root / "sys" / "devices"

    def pci_path(self, bus: str) -> list[str] | None:
        """Components from the root complex (``pci0000:00``) down to the device, or None."""
        p = self.root / "sys" / "bus" / "pci" / "devices" / bus
        if not p.exists():
            return None
        real = Path(os.path.realpath(p))
        try:
            rel = real.relative_to(os.path.realpath(self.devices))
        except ValueError:
            return None
        parts = list(rel.parts)
        return parts if parts and parts[0].startswith("pci") else None

    def attr(self, bus: str, name: str) -> str | None:
        return _read(self.root / "sys" / "bus" / "pci" / "devices" / bus / name)

    def numa_nodes(self) -> dict[int, str | None]:
        base = self.root / "sys" / "devices" / "system" / "node"
        out: dict[int, str | None] = {}
        if base.is_dir():
            for d in base.iterdir():
                m = re.fullmatch(r"node(\d+)", d.name)
                if m:
                    out[int(m.group(1))] = _read(d / "cpulist")
        return out

    def nics(self) -> list[dict]:
        """Physical NICs (PCI functions) from /sys/class/infiniband and /sys/class/net."""
        found: dict[str, dict] = {}
        skipped = []
        for cls in ("infiniband", "net"):
            base = self.root / "sys" / "class" / cls
            if not base.is_dir():
                continue
            for entry in sorted(base.iterdir(), key=lambda p: p.name):
                dev = entry / "device"
                if not dev.exists():
                    continue  # virtual: lo, bridges, veth, docker0, bonds
                real = Path(os.path.realpath(dev))
                bus = real.name
                if not _PCI.match(bus):
                    skipped.append(entry.name)  # virtio-net and other non-PCI functions
                    continue
                n = found.setdefault(bus, {"bus": bus, "name": entry.name, "netdevs": [], "rate_gbps": None,
                                           "rdma": False})
                if cls == "infiniband":
                    n["name"] = entry.name
                    n["rdma"] = True
                    rate = _read(entry / "ports" / "1" / "rate")
                    m = re.match(r"^\s*(\d+)", rate or "")
                    if m:
                        n["rate_gbps"] = int(m.group(1))
                else:
                    n["netdevs"].append(entry.name)
                    sp = _read(entry / "speed")
                    if n["rate_gbps"] is None and sp and sp.lstrip("-").isdigit() and int(sp) > 0:
                        n["rate_gbps"] = int(sp) // 1000
        return [found[k] for k in sorted(found)] + [{"skipped": s} for s in skipped]


# ------------------------------------------------------------------------------ discovery
def discover(nvml: Any = None, sysfs_root: str | os.PathLike = "/") -> Topology:
    """The topology of this node. ``nvml``: a pynvml-like object (default: the real one)."""
    if nvml is None:
        nvml = load_nvml()
    return _Discovery(_Nvml(nvml), _Sysfs(sysfs_root)).run()


class _Discovery:
    def __init__(self, nv: _Nvml, fs: _Sysfs) -> None:
        self.nv, self.fs = nv, fs
        self.devices: dict[str, Device] = {}
        self.links: list[Link] = []
        self.unknowns: list[str] = []
        self.notes: list[str] = []

    def add(self, d: Device) -> None:
        self.devices.setdefault(d.id, d)

    def run(self) -> Topology:
        nv = self.nv
        count = nv.call("nvmlDeviceGetCount")
        if not count:
            raise TopologyError(f"NVML is present but sees no GPU on this machine; {HINT}")
        driver = nv.call("nvmlSystemGetDriverVersion")
        if driver:
            self.notes.append(f"NVIDIA driver {_s(driver)}.")
        gpus = []
        for i in range(count):
            h = nv.call("nvmlDeviceGetHandleByIndex", i)
            if h is None:
                self.unknowns.append(f"GPU{i}: NVML gave no handle; left out.")
                continue
            gpus.append(self.gpu(i, h))
        self.numa = self.fs.numa_nodes()
        for g in gpus:
            self.place(g["id"], g["bus"], g.get("numa"))
        self.nvlinks(gpus)
        self.nic_devices()
        cpus = sorted(d.id for d in self.devices.values() if d.kind == DeviceKind.CPU)
        for a in range(len(cpus)):
            for b in range(a + 1, len(cpus)):
                self.links.append(Link(cpus[a], cpus[b], LinkKind.CPU_INTERCONNECT, CPU_LINK_PLACEHOLDER,
                                       attrs={"nominal": True}))
        if len(cpus) > 1:
            self.unknowns.append(f"CPU interconnect bandwidth: not readable from NVML or sysfs; "
                                 f"{CPU_LINK_PLACEHOLDER:g} GB/s placeholder.")
        return Topology(os.uname().nodename if hasattr(os, "uname") else "live", self.devices.values(), self.links,
                        source="live: NVML and sysfs", notes=self.notes, unknowns=self.unknowns)

    # -- GPUs
    def gpu(self, i: int, h: Any) -> dict:
        nv = self.nv
        name = _s(nv.call("nvmlDeviceGetName", h) or "")
        attrs: dict[str, Any] = {}
        uuid = nv.call("nvmlDeviceGetUUID", h)
        if uuid:
            attrs["uuid"] = _s(uuid)
        pci = nv.call("nvmlDeviceGetPciInfo", h)
        bus = _bus(getattr(pci, "busId", "")) if pci is not None else ""
        if bus:
            attrs["pci_bus_id"] = _s(getattr(pci, "busId"))
        else:
            self.unknowns.append(f"GPU{i}: PCI bus id not given by NVML.")
        mem = nv.call("nvmlDeviceGetMemoryInfo", h)
        if mem is not None and getattr(mem, "total", None):
            attrs["memory_mib"] = int(mem.total) // (1 << 20)
        words = nv.call("nvmlDeviceGetCpuAffinity", h, max(1, ((os.cpu_count() or 64) + 63) // 64))
        if words is not None:
            cl = cpulist(list(words))
            if cl:
                attrs["cpus"] = cl
        if "cpus" not in attrs:
            self.unknowns.append(f"GPU{i}: CPU affinity not given by NVML.")
        numa = nv.call("nvmlDeviceGetNumaNodeId", h)
        if numa is not None and int(numa) >= 0:
            attrs["numa_node"] = int(numa)
        gid = f"gpu{i}"
        self.add(Device(gid, DeviceKind.GPU, i, name, attrs))
        return {"id": gid, "h": h, "bus": bus, "name": name, "numa": attrs.get("numa_node"), "cpus": attrs.get("cpus")}

    # -- PCIe tree and NUMA placement
    def cpu_for(self, numa: int | None, what: str, cpus: str | None = None) -> str:
        if numa is None and len(self.numa) == 1:
            numa = next(iter(self.numa))
        if numa is None:
            self.unknowns.append(f"{what}: NUMA node unknown (sysfs and NVML do not say); placed on 'cpu?'.")
            if "cpu?" not in self.devices:
                self.add(Device("cpu?", DeviceKind.CPU, 999, "unknown NUMA node", {"cpus": cpus} if cpus else {}))
            return "cpu?"
        cid = f"cpu{numa}"
        if cid not in self.devices:
            attrs: dict[str, Any] = {"numa_node": numa}
            cl = self.numa.get(numa) or cpus
            if cl:
                attrs["cpus"] = cl
            self.add(Device(cid, DeviceKind.CPU, numa, f"NUMA node {numa}", attrs))
        return cid

    def _link_of(self, bus: str) -> tuple[float, int | None, int | None, bool]:
        got = pcie_gbs(self.fs.attr(bus, "current_link_speed"), self.fs.attr(bus, "current_link_width"))
        if got:
            return got[0], got[1], got[2], False
        return PCIE_PLACEHOLDER, None, None, True

    def place(self, dev_id: str, bus: str, numa: int | None, cpus: str | None = None) -> None:
        """Hang ``dev_id`` in the PCIe tree found in sysfs, under the CPU of its NUMA node."""
        label = dev_id.upper()
        path = self.fs.pci_path(bus) if bus else None
        s_numa = self.fs.attr(bus, "numa_node") if bus else None
        if s_numa is not None and s_numa.lstrip("-").isdigit() and int(s_numa) >= 0:
            numa = int(s_numa)
        cpu = self.cpu_for(numa, label, cpus)
        if path is None:
            hb = f"hb:{cpu}"
            self.add(Device(hb, DeviceKind.HOST_BRIDGE, 0, "unknown root complex", {}))
            self._once(hb, cpu, PCIE_PLACEHOLDER, None, None, True)
            self.links.append(Link(dev_id, hb, LinkKind.PCIE, PCIE_PLACEHOLDER, attrs={"nominal": True}))
            self.unknowns.append(f"{label}: PCIe path not visible in sysfs ({bus or 'no bus id'}); "
                                 f"attached to its CPU with a {PCIE_PLACEHOLDER:g} GB/s placeholder link.")
            return
        root, bridges = path[0], path[1:-1]
        hb = f"hb:{root}"
        self.add(Device(hb, DeviceKind.HOST_BRIDGE, 0, f"PCIe root complex {root}", {"pci": root}))
        # a switch = an upstream port (after the root port), then one of its downstream ports
        switches = bridges[1::2] if len(bridges) % 2 == 1 else bridges[1:]
        parent = hb
        for sw in switches:
            sid = f"pcisw:{sw}"
            self.add(Device(sid, DeviceKind.PCIE_SWITCH, 0, "PCIe switch", {"pci": sw}))
            bw, gen, width, nominal = self._link_of(sw)
            self._once(sid, parent, bw, gen, width, nominal)
            parent = sid
        bw, gen, width, nominal = self._link_of(bus)
        if nominal:
            self.unknowns.append(f"{label}: PCIe link speed/width not readable; {PCIE_PLACEHOLDER:g} GB/s placeholder.")
        self.links.append(Link(dev_id, parent, LinkKind.PCIE, bw, 1, gen, width, False, {"nominal": True} if nominal else {}))
        hb_bw = max((l.bandwidth for l in self.links if hb in (l.a, l.b)), default=PCIE_PLACEHOLDER)
        self._once(hb, cpu, hb_bw, None, None, False, internal=True)

    def _once(self, a: str, b: str, bw: float, gen: int | None, width: int | None, nominal: bool, **extra: Any) -> None:
        for i, l in enumerate(self.links):
            if {l.a, l.b} == {a, b}:
                if extra.get("internal") and bw > l.bandwidth:
                    self.links[i] = Link(l.a, l.b, l.kind, bw, l.count, l.generation, l.width, l.measured, l.attrs)
                return
        attrs = dict(extra)
        if nominal:
            attrs["nominal"] = True
        self.links.append(Link(a, b, LinkKind.PCIE, bw, 1, gen, width, False, attrs))

    # -- NVLink
    def nvlinks(self, gpus: list[dict]) -> None:
        nv = self.nv
        by_bus = {g["bus"]: g for g in gpus if g["bus"]}
        bundles: dict[tuple[str, str], list[float | None]] = {}
        invalid: dict[str, int] = {}
        switch_buses: set[str] = set()
        gen_of: dict[str, int | None] = {}
        typed_switch = 0
        outside: set[str] = set()
        for g in gpus:
            h = g["h"]
            common = nv.field(h, FI_NVLINK_SPEED_MBPS_COMMON)
            for link in range(MAX_LINKS):
                state = nv.call("nvmlDeviceGetNvLinkState", h, link)
                if state is None:
                    continue
                if int(state) != 1:
                    continue
                speed = nv.field(h, FI_NVLINK_GET_SPEED, link) or common
                gbs = float(speed) / 1000 if speed else None
                gen = nv.call("nvmlDeviceGetNvLinkVersion", h, link)
                gen_of[g["id"]] = _NVLINK_GENERATION.get(int(gen)) if gen else gen_of.get(g["id"])
                rinfo = nv.call("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
                rbus_raw = _s(getattr(rinfo, "busId", "")) if rinfo is not None else ""
                rtype = nv.call("nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
                rbus = _bus(rbus_raw) if rbus_raw else ""
                valid = bool(rbus) and not INVALID_BUS.match(rbus_raw)
                if valid and rbus in by_bus and rbus != g["bus"]:
                    other = by_bus[rbus]["id"]
                    if g["id"] < other:
                        bundles.setdefault((g["id"], other), []).append(gbs)
                elif rtype == NVLINK_REMOTE_IBMNPU:
                    cpu = self.cpu_for(g["numa"], g["id"].upper(), g["cpus"])
                    bundles.setdefault((g["id"], cpu), []).append(gbs)
                elif rtype == NVLINK_REMOTE_SWITCH:
                    if valid:
                        switch_buses.add(rbus)
                    else:
                        typed_switch += 1
                    bundles.setdefault((g["id"], "nvswitch0"), []).append(gbs)
                elif rtype == NVLINK_REMOTE_GPU and valid:
                    outside.add(rbus)  # a GPU NVML does not list (outside this container's view)
                else:
                    invalid[g["id"]] = invalid.get(g["id"], 0) + 1
                    bundles.setdefault((g["id"], "nvswitch0"), []).append(gbs)
        if outside:
            self.unknowns.append(f"NVLinks to GPUs that NVML does not list here ({', '.join(sorted(outside))}); left out.")
        if not bundles:
            return
        if typed_switch and not switch_buses:
            self.notes.append(f"{typed_switch} NVLinks end on an NVSwitch (NVML remote device type) whose PCI "
                              f"address is not visible; modelled as one NVSwitch fabric device.")
        if invalid:
            p2p = self.p2p_nvlink(gpus)
            n = sum(invalid.values())
            if p2p is False and not switch_buses:
                for (a, b) in [k for k in bundles if k[1] == "nvswitch0"]:
                    del bundles[(a, b)]
                self.unknowns.append(f"{n} active NVLinks report no remote device (bus FFFFFFFF:FF:FF.0) and P2P over "
                                     f"NVLink is not OK between the GPUs; left out.")
            else:
                why = "NVML reports P2P over NVLink OK between the GPUs" if p2p else "P2P status could not be read"
                self.unknowns.append(f"{n} active NVLinks report remote PCI bus FFFFFFFF:FF:FF.0 (remote device not "
                                     f"visible, as in VMs without the NVSwitches passed through); {why}: modelled as "
                                     f"links to one NVSwitch fabric (inferred).")
        if any(k[1] == "nvswitch0" for k in bundles):
            if switch_buses:
                attrs: dict[str, Any] = {"physical_switches": sorted(switch_buses)}
            else:
                attrs = {} if typed_switch and not invalid else {"inferred": True}
            self.add(Device("nvswitch0", DeviceKind.NVSWITCH, 0, "NVSwitch fabric", attrs))
        for (a, b), speeds in bundles.items():
            known = [s for s in speeds if s]
            gpu_name = self.devices[a].name
            if len(known) == len(speeds):
                total = sum(known)
                attrs = {"per_link": known[0]} if len(set(known)) == 1 else {"per_link": known}
            else:
                from rankmap.topology.nvsmi import NVLINK_DEFAULT_PER_LINK, nvlink_per_link

                per = (nvlink_per_link(gpu_name) or (None, NVLINK_DEFAULT_PER_LINK))[1]
                total = sum(known) + per * (len(speeds) - len(known))
                attrs = {"nominal": True}
                self.unknowns.append(f"{a.upper()}-{b}: NVLink speed not given by NVML; {per:g} GB/s per link assumed.")
            self.links.append(Link(a, b, LinkKind.NVLINK, round(total, 3), len(speeds), gen_of.get(a), None, False, attrs))

    def p2p_nvlink(self, gpus: list[dict]) -> bool | None:
        """True if any GPU pair reports P2P over NVLink OK, False if all say not OK, None if unreadable."""
        answers = []
        for i, a in enumerate(gpus):
            for b in gpus[i + 1:]:
                st = self.nv.call("nvmlDeviceGetP2PStatus", a["h"], b["h"], P2P_CAPS_INDEX_NVLINK)
                if st is not None:
                    answers.append(int(st) == P2P_STATUS_OK)
        if not answers:
            return None
        return any(answers)

    # -- NICs
    def nic_devices(self) -> None:
        k = 0
        skipped = []
        for n in self.fs.nics():
            if "skipped" in n:
                skipped.append(n["skipped"])
                continue
            nid = f"nic{k}"
            attrs: dict[str, Any] = {"pci_bus_id": n["bus"], "rdma": n["rdma"]}
            if n["netdevs"]:
                attrs["netdev"] = ",".join(n["netdevs"])
            if n["rate_gbps"]:
                attrs["rate_gbps"] = n["rate_gbps"]
            else:
                self.unknowns.append(f"NIC {n['name']}: port rate not readable.")
            self.add(Device(nid, DeviceKind.NIC, k, n["name"], attrs))
            self.place(nid, n["bus"], None)
            k += 1
        if skipped:
            self.notes.append(f"Skipped network interfaces that are not PCI functions: {', '.join(skipped)}.")
        if k == 0:
            self.notes.append("No physical NIC found in /sys/class/infiniband or /sys/class/net.")
