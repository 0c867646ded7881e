"""Read and write the ``nvidia-smi topo -m`` matrix.

That matrix is what users already have and paste into tickets, so rankmap reads it
(``rankmap topo --from FILE``) and prints it (``--format nvsmi``). The text says how each
pair of GPUs/NICs is connected (``NV#`` or a PCIe level: PIX < PXB < PHB < NODE < SYS) and
each GPU's CPU/NUMA affinity; it says nothing about link generations, widths or
bandwidths, nor which PCIe path two NVLink-connected GPUs would take. :func:`parse`
rebuilds the simplest device tree that reproduces every label it was given and lists
what the text could not say in :attr:`Topology.unknowns`, with the placeholder it used.

Decisions, so that readers of a parsed topology know what is inferred:

* ``NV#`` between two GPUs becomes a direct bundle of # NVLinks, except when every GPU
  pair shows the same ``NVk`` and there are more than two GPUs with ``k*(n-1) > 18``:
  no GPU has that many NVLinks, so the GPUs must meet in an NVSwitch fabric, modelled as
  one ``nvswitch0`` with a k-link bundle to each GPU. Two GPUs at ``NV18`` may be an
  NVSwitch system or an NVLink bridge; both route the same, the direct bundle is kept.
* Per-link NVLink bandwidth comes from the GPU name when the caller knows it (the text
  does not carry names); otherwise 25 GB/s per direction (NVLink 2 to 4) is used and said.
* PCIe: endpoints within PIX share one switch; within PXB share an upper switch; within
  PHB share one host bridge; within NODE share one CPU (NUMA node); SYS pairs are on
  different CPUs, joined by a CPU interconnect. Link bandwidths are placeholders.
"""

from __future__ import annotations

import re
from itertools import combinations

from rankmap.topology.model import Device, DeviceKind, Link, LinkKind, Topology, TopologyError

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_NV = re.compile(r"^NV(\d+)$")
LEVELS = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
_ALIASES = {"SOC": "SYS"}  # drivers before 2017 printed SOC for what is now SYS
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

# Nominal placeholders for what the text cannot say (GB/s per direction), named in unknowns.
PCIE_PLACEHOLDER = 31.5  # PCIe Gen4 x16
CPU_LINK_PLACEHOLDER = 50.0
NVLINK_DEFAULT_PER_LINK = 25.0  # NVLink 2, 3 and 4 alike

# GPU name fragment -> (NVLink generation, GB/s per link per direction). Longest match wins.
NVLINK_BY_GPU = {
    "P100": (1, 20.0), "V100": (2, 25.0), "A100": (3, 25.0), "A800": (3, 25.0),
    "H100": (4, 25.0), "H800": (4, 25.0), "H200": (4, 25.0), "H20": (4, 25.0), "GH200": (4, 25.0),
    "B100": (5, 50.0), "B200": (5, 50.0), "GB200": (5, 50.0), "B300": (5, 50.0),
}

_LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""


def nvlink_per_link(gpu_name: str | None) -> tuple[int, float] | None:
    """(generation, GB/s per link per direction) for a known GPU name, else None."""
    if not gpu_name:
        return None
    best = None
    for frag, v in NVLINK_BY_GPU.items():
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(frag)}(?![0-9])", gpu_name) and (best is None or len(frag) > len(best[0])):
            best = (frag, v)
    return best[1] if best else None


# ------------------------------------------------------------------------------ writing
def _cpu_attrs(topo: Topology, dev: Device) -> tuple[str, str]:
    cpu = topo.local_cpu(dev.id)
    cpus = dev.attrs.get("cpus") or (cpu.attrs.get("cpus") if cpu else None)
    numa = dev.attrs.get("numa_node", cpu.attrs.get("numa_node") if cpu else None)
    return (str(cpus) if cpus else "N/A", "N/A" if numa is None else str(numa))


def format_matrix(topo: Topology) -> str:
    """The ``nvidia-smi topo -m`` layout of ``topo`` (tab-separated, legend and NIC legend)."""
    gpus, nics = topo.gpus, topo.nics
    names = [f"GPU{g.index}" for g in gpus] + [f"NIC{i}" for i in range(len(nics))]
    devs = gpus + nics
    out = ["\t" + "\t".join(names + list(_AFFINITY_COLUMNS))]
    for i, a in enumerate(devs):
        cells = []
        for b in devs:
            cells.append(" X " if a.id == b.id else topo.route(a.id, b.id).label)
        row = names[i] + "\t" + "\t".join(cells)
        if a.kind == DeviceKind.GPU:
            cpus, numa = _cpu_attrs(topo, a)
            gnuma = a.attrs.get("gpu_numa_id")
            row += f"\t{cpus}\t{numa}\t\t{'N/A' if gnuma is None else gnuma}"
        out.append(row)
    out += ["", _LEGEND]
    if nics:
        out += ["", "NIC Legend:", ""]
        out += [f"  NIC{i}: {n.name or n.id}" for i, n in enumerate(nics)]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------ reading
def _cell(tok: str) -> str | None:
    tok = _ALIASES.get(tok, tok)
    if tok == "X" or tok in LEVELS or _NV.match(tok):
        return tok
    return None


class _UF:
    def __init__(self, items):
        self.p = {i: i for i in items}

    def find(self, x):
        while self.p[x] != x:
            self.p[x] = self.p[self.p[x]]
            x = self.p[x]
        return x

    def union(self, a, b):
        self.p[self.find(a)] = self.find(b)

    def groups(self, items):
        out: dict = {}
        for i in items:
            out.setdefault(self.find(i), []).append(i)
        return list(out.values())


def _components(members: list[str], level: dict, max_level: int) -> list[list[str]]:
    uf = _UF(members)
    for a, b in combinations(members, 2):
        lv = level.get((a, b))
        if lv is not None and lv <= max_level:
            uf.union(a, b)
    return uf.groups(members)


def parse(text: str, source: str = "", gpu_name: str | None = None) -> Topology:
    """Build a :class:`Topology` from ``nvidia-smi topo -m`` output.

    Tolerates terminal escape codes, tabs or spaces, the ``CPU Affinity``/``NUMA Affinity``/
    ``GPU NUMA ID`` columns, NIC rows and the ``NIC Legend``. ``gpu_name`` (if known from
    elsewhere) sets the NVLink generation and per-link bandwidth.
    """
    src = source or "<nvidia-smi topo -m>"
    lines = _ANSI.sub("", text).replace("\r", "").split("\n")

    # -- header
    hdr_at = None
    for n, line in enumerate(lines):
        toks = line.split()
        if toks and toks[0] == "GPU0" and (line[:1].isspace() or len(toks) == 1 or _cell(toks[1]) is None):
            hdr_at = n
            break
    if hdr_at is None:
        raise TopologyError(f"{src}: no 'nvidia-smi topo -m' matrix found (no header line starting with GPU0)")
    toks = lines[hdr_at].split()
    cols: list[str] = []
    i = 0
    while i < len(toks) and not (toks[i] in ("CPU", "NUMA") or (toks[i] == "GPU" and toks[i + 1:i + 2] == ["NUMA"])):
        cols.append(toks[i])
        i += 1
    rest = " ".join(toks[i:])
    aff_cols = [c for c in _AFFINITY_COLUMNS if c in rest]
    if len(set(cols)) != len(cols):
        raise TopologyError(f"{src}: line {hdr_at + 1}: a column name appears twice in the header")
    gpu_cols = [c for c in cols if re.fullmatch(r"GPU\d+", c)]
    nic_cols = [c for c in cols if c not in gpu_cols]

    # -- rows and legend
    cells: dict[tuple[str, str], str] = {}
    affinity: dict[str, dict[str, str]] = {}
    legend: dict[str, str] = {}
    seen_rows: set[str] = set()
    for n in range(hdr_at + 1, len(lines)):
        toks = lines[n].split()
        if not toks:
            continue
        m = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", lines[n])
        if m:
            legend[m.group(1)] = m.group(2)
            continue
        if toks[0] not in cols or toks[0] in seen_rows:
            continue
        row = toks[0]
        seen_rows.add(row)
        vals = toks[1:1 + len(cols)]
        if len(vals) < len(cols):
            raise TopologyError(f"{src}: line {n + 1}: row {row} has {len(vals)} cells, the header names {len(cols)} devices")
        for c, v in zip(cols, vals):
            lab = _cell(v)
            if lab is None:
                raise TopologyError(f"{src}: line {n + 1}: row {row}, column {c}: {v!r} is not a topology label "
                                    f"(expected X, NV#, PIX, PXB, PHB, NODE or SYS)")
            if (lab == "X") != (c == row):
                raise TopologyError(f"{src}: line {n + 1}: row {row}, column {c}: {v!r} "
                                    f"({'X belongs on the diagonal only' if lab == 'X' else 'the diagonal must be X'})")
            if lab.startswith("NV") and not (row in gpu_cols and c in gpu_cols):
                raise TopologyError(f"{src}: line {n + 1}: row {row}, column {c}: NVLink label {lab} between non-GPUs")
            cells[(row, c)] = lab
        if row in gpu_cols:
            affinity[row] = dict(zip(aff_cols, toks[1 + len(cols):]))
    missing = [g for g in gpu_cols if g not in seen_rows]
    if not gpu_cols or missing:
        raise TopologyError(f"{src}: the header names {', '.join(missing) or 'no GPU'} but the matrix has no row for it")
    for (a, b), lab in cells.items():
        other = cells.get((b, a))
        if other is not None and other != lab:
            raise TopologyError(f"{src}: matrix is not symmetric: {a}/{b} is {lab} but {b}/{a} is {other}")

    def label(a: str, b: str) -> str | None:
        return cells.get((a, b)) or cells.get((b, a))

    # -- devices
    unknowns: list[str] = []
    notes = ["Parsed from nvidia-smi topo -m output."]
    ids = {c: f"gpu{int(c[3:])}" for c in gpu_cols}
    for k, c in enumerate(nic_cols):
        ids[c] = f"nic{k}"
    devices: list[Device] = []
    for c in gpu_cols:
        attrs: dict = {}
        aff = affinity.get(c, {})
        cpus = aff.get("CPU Affinity")
        if cpus and cpus != "N/A":
            attrs["cpus"] = cpus
        numa = aff.get("NUMA Affinity")
        if numa and numa.isdigit():
            attrs["numa_node"] = int(numa)
        gnuma = aff.get("GPU NUMA ID")
        if gnuma and gnuma.isdigit():
            attrs["gpu_numa_id"] = int(gnuma)
        devices.append(Device(ids[c], DeviceKind.GPU, int(c[3:]), gpu_name or "", attrs))
    for k, c in enumerate(nic_cols):
        devices.append(Device(ids[c], DeviceKind.NIC, k, legend.get(c, c), {}))
    if not any("cpus" in d.attrs for d in devices if d.kind == DeviceKind.GPU):
        unknowns.append("CPU affinity of the GPUs: the text has no CPU Affinity values.")
    if not any("numa_node" in d.attrs for d in devices if d.kind == DeviceKind.GPU):
        unknowns.append("NUMA node of the GPUs: the text has no NUMA Affinity values.")

    links: list[Link] = []
    ends = gpu_cols + nic_cols
    level = {}
    for a, b in combinations(ends, 2):
        lab = label(a, b)
        if lab in LEVELS:
            level[(a, b)] = level[(b, a)] = LEVELS[lab]

    # -- CPUs: endpoints within NODE share a CPU; GPUs with one NUMA affinity too, unless SYS apart
    uf = _UF(ends)
    for (a, b), lv in level.items():
        if lv <= 4:
            uf.union(a, b)
    by_affinity: dict[str, str] = {}
    split_affinity: list[str] = []
    for c in gpu_cols:
        aff = affinity.get(c, {})
        key = aff.get("NUMA Affinity") if aff.get("NUMA Affinity") not in (None, "N/A") else aff.get("CPU Affinity")
        if not key or key == "N/A":
            continue
        if key in by_affinity:
            other = by_affinity[key]
            groups = uf.groups(ends)
            ga = next(g for g in groups if c in g)
            gb = next(g for g in groups if other in g)
            if not any(level.get((x, y)) == 5 for x in ga for y in gb):
                uf.union(c, other)
            elif ga is not gb:
                split_affinity.append(f"{other}/{c}")
        else:
            by_affinity[key] = c
    cpu_groups = sorted(uf.groups(ends), key=lambda g: min(ends.index(x) for x in g))
    guessed_pcie = False
    for ci, group in enumerate(cpu_groups):
        cpu_id = f"cpu{ci}"
        cattrs: dict = {}
        gaff = [affinity.get(c, {}) for c in group if c in gpu_cols]
        numas = {a.get("NUMA Affinity") for a in gaff} - {None, "N/A"}
        if len(numas) == 1 and next(iter(numas)).isdigit():
            cattrs["numa_node"] = int(next(iter(numas)))
        cpusets = {a.get("CPU Affinity") for a in gaff} - {None, "N/A"}
        if len(cpusets) == 1:
            cattrs["cpus"] = next(iter(cpusets))
        devices.append(Device(cpu_id, DeviceKind.CPU, ci, "", cattrs))
        # host bridges: within PHB. Members with no known PCIe relation at all share one.
        related = {x for x in group if any(level.get((x, y)) is not None and level[(x, y)] <= 4 for y in group if y != x)}
        hb_groups = _components([x for x in group if x in related], level, 3)
        loose = [x for x in group if x not in related]
        if loose:
            if len(group) > 1:
                guessed_pcie = True
            hb_groups.append(loose)
        for hi, hb in enumerate(hb_groups):
            hb_id = f"hb{ci}_{hi}"
            devices.append(Device(hb_id, DeviceKind.HOST_BRIDGE, len([d for d in devices if d.kind == DeviceKind.HOST_BRIDGE]), "", {}))
            links.append(Link(hb_id, cpu_id, LinkKind.PCIE, PCIE_PLACEHOLDER, attrs={"nominal": True}))
            for si, sub in enumerate(_components(hb, level, 2)):
                if len(sub) == 1:
                    links.append(Link(ids[sub[0]], hb_id, LinkKind.PCIE, PCIE_PLACEHOLDER, attrs={"nominal": True}))
                    continue
                sw_groups = _components(sub, level, 1)
                top = f"pcisw{ci}_{hi}_{si}"
                devices.append(Device(top, DeviceKind.PCIE_SWITCH, 0, "", {}))
                links.append(Link(top, hb_id, LinkKind.PCIE, PCIE_PLACEHOLDER, attrs={"nominal": True}))
                if len(sw_groups) == 1:
                    for x in sub:
                        links.append(Link(ids[x], top, LinkKind.PCIE, PCIE_PLACEHOLDER, attrs={"nominal": True}))
                    continue
                for wi, sw in enumerate(sw_groups):
                    leaf = f"{top}_{wi}"
                    devices.append(Device(leaf, DeviceKind.PCIE_SWITCH, 0, "", {}))
                    links.append(Link(leaf, top, LinkKind.PCIE, PCIE_PLACEHOLDER, attrs={"nominal": True}))
                    for x in sw:
                        links.append(Link(ids[x], leaf, LinkKind.PCIE, PCIE_PLACEHOLDER, attrs={"nominal": True}))
    for a, b in combinations(range(len(cpu_groups)), 2):
        links.append(Link(f"cpu{a}", f"cpu{b}", LinkKind.CPU_INTERCONNECT, CPU_LINK_PLACEHOLDER, attrs={"nominal": True}))
    # switch indices: number them in order of appearance
    devices = [Device(d.id, d.kind, k, d.name, d.attrs) if d.kind in (DeviceKind.PCIE_SWITCH,) else d
               for k, d in enumerate(devices)]

    # -- NVLink
    nv = {}
    for a, b in combinations(gpu_cols, 2):
        lab = label(a, b)
        if lab and lab.startswith("NV"):
            nv[(a, b)] = int(lab[2:])
    known = nvlink_per_link(gpu_name)
    gen, per = known if known else (None, NVLINK_DEFAULT_PER_LINK)
    if nv and not known:
        unknowns.append(f"NVLink generation and speed: the text does not name the GPU; "
                        f"{NVLINK_DEFAULT_PER_LINK:g} GB/s per link per direction assumed (NVLink 2 to 4).")
    n = len(gpu_cols)
    counts = set(nv.values())
    all_pairs = len(nv) == n * (n - 1) // 2
    if nv and all_pairs and len(counts) == 1 and n > 2 and next(iter(counts)) * (n - 1) > 18:
        k = next(iter(counts))
        devices.append(Device("nvswitch0", DeviceKind.NVSWITCH, 0, "NVSwitch fabric (inferred)", {"inferred": True}))
        for c in gpu_cols:
            links.append(Link(ids[c], "nvswitch0", LinkKind.NVLINK, round(k * per, 3), k, gen, attrs={"nominal": not known}))
        notes.append(f"Every GPU pair shows NV{k}: {n - 1} peers x {k} links exceed what one GPU has, so the GPUs "
                     f"meet in an NVSwitch fabric, modelled as one device.")
        unknowns.append("Number of NVSwitch chips: not in the text; modelled as one fabric device.")
    else:
        for (a, b), k in nv.items():
            links.append(Link(ids[a], ids[b], LinkKind.NVLINK, round(k * per, 3), k, gen, attrs={"nominal": not known}))
        if n == 2 and nv:
            notes.append("Two GPUs joined by NVLink: an NVLink bridge or an NVSwitch system; modelled as a direct bundle "
                         "(routes and bandwidth are the same either way).")

    unknowns.append(f"PCIe generations, widths and bandwidths: not in the text; PCIe links carry a "
                    f"{PCIE_PLACEHOLDER:g} GB/s placeholder (Gen4 x16), marked nominal.")
    if len(cpu_groups) > 1:
        unknowns.append(f"CPU interconnect bandwidth: not in the text; {CPU_LINK_PLACEHOLDER:g} GB/s placeholder.")
    if split_affinity:
        unknowns.append(f"{', '.join(split_affinity[:4])}{' ...' if len(split_affinity) > 4 else ''}: same NUMA/CPU "
                        f"affinity but SYS between them; modelled on separate CPU nodes, as the labels say.")
    if guessed_pcie:
        unknowns.append("PCIe placement of GPUs whose only relation is NVLink: not shown by nvidia-smi; "
                        "they are placed under one host bridge of their CPU.")
    if nic_cols:
        unknowns.append("NIC models and port rates: not in the text.")
    name = "nvsmi"
    if source:
        stem = re.sub(r"\.[^.]*$", "", source.replace("\\", "/").rsplit("/", 1)[-1])
        name = stem or name
    topo = Topology(name, devices, links, source=source, notes=notes, unknowns=unknowns)

    # -- check: the tree must reproduce every PCIe label; say where it cannot
    for a, b in combinations(ends, 2):
        want = label(a, b)
        if want in LEVELS:
            got = topo.route(ids[a], ids[b]).label
            if got != want:
                unknowns.append(f"{a}/{b}: the text says {want}, which no single PCIe tree reconciles with the "
                                f"other labels; modelled as {got}.")
    topo.unknowns = unknowns
    return topo


def labels(topo: Topology) -> dict[tuple[str, str], str]:
    """Every pair label of the matrix, keyed by (row, column) names as nvidia-smi prints them."""
    names = {g.id: f"GPU{g.index}" for g in topo.gpus}
    names.update({n.id: f"NIC{i}" for i, n in enumerate(topo.nics)})
    out = {}
    for a in names:
        for b in names:
            out[(names[a], names[b])] = "X" if a == b else topo.route(a, b).label
    return out
