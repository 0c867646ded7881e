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
from dataclasses import dataclass, field
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


@dataclass
class _Matrix:
    """What the text says, checked: the device columns, every pair's label, each GPU's affinity
    columns and the NIC legend. Everything :func:`parse` builds is inferred from this alone."""

    src: str                                   # the text's name in error messages
    cols: list[str]                            # device columns of the header, in order
    gpus: list[str]                            # the GPU columns (GPU0, GPU1, ...)
    nics: list[str]                            # every other device column (NIC0, mlx5_0, ...)
    affinity_cols: list[str] = field(default_factory=list)   # of _AFFINITY_COLUMNS, those the header has
    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    affinity: dict[str, dict[str, str]] = field(default_factory=dict)
    legend: dict[str, str] = field(default_factory=dict)     # NIC0 -> mlx5_0

    @property
    def ends(self) -> list[str]:
        return self.gpus + self.nics

    def label(self, a: str, b: str) -> str | None:
        return self.cells.get((a, b)) or self.cells.get((b, a))

    def ids(self) -> dict[str, str]:
        """Device ids of the columns: gpu<N> for GPU<N>, nic<k> for the k-th other column."""
        out = {c: f"gpu{int(c[3:])}" for c in self.gpus}
        out.update({c: f"nic{k}" for k, c in enumerate(self.nics)})
        return out

    def levels(self) -> dict[tuple[str, str], int]:
        """The PCIe level (PIX 1 .. SYS 5) of every endpoint pair the text gives one, both ways."""
        out = {}
        for a, b in combinations(self.ends, 2):
            lab = self.label(a, b)
            if lab in LEVELS:
                out[(a, b)] = out[(b, a)] = LEVELS[lab]
        return out


@dataclass
class _Built:
    """The device tree as it grows, with what the text said and did not say about it."""

    devices: list[Device] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)

    def pcie(self, a: str, b: str) -> None:
        self.links.append(Link(a, b, LinkKind.PCIE, PCIE_PLACEHOLDER, attrs={"nominal": True}))


def _header(lines: list[str], src: str) -> tuple[int, _Matrix]:
    """The header line (its index) and its columns: the devices, then the affinity columns."""
    at = None
    for n, line in enumerate(lines):
        toks = line.split()
        if toks and toks[0] == "GPU0" and (line[:1].isspace() or len(toks) == 1 or _cell(toks[1]) is None):
            at = n
            break
    if at is None:
        raise TopologyError(f"{src}: no 'nvidia-smi topo -m' matrix found (no header line starting with GPU0)")
    toks = lines[at].split()
    cols: list[str] = []
    i = 0
    while i < len(toks) and not (toks[i] in ("CPU", "NUMA") or (toks[i] == "GPU" and toks[i + 1:i + 2] == ["NUMA"])):
        cols.append(toks[i])
        i += 1
    if len(set(cols)) != len(cols):
        raise TopologyError(f"{src}: line {at + 1}: a column name appears twice in the header")
    rest = " ".join(toks[i:])
    gpus = [c for c in cols if re.fullmatch(r"GPU\d+", c)]
    return at, _Matrix(src, cols, gpus, [c for c in cols if c not in gpus],
                       [c for c in _AFFINITY_COLUMNS if c in rest])


def _row(m: _Matrix, toks: list[str], n: int) -> None:
    """One device row (line index ``n``): its labels, checked one by one, and a GPU's affinity."""
    row = toks[0]
    vals = toks[1:1 + len(m.cols)]
    if len(vals) < len(m.cols):
        raise TopologyError(f"{m.src}: line {n + 1}: row {row} has {len(vals)} cells, the header names "
                            f"{len(m.cols)} devices")
    for c, v in zip(m.cols, vals):
        lab = _cell(v)
        at = f"{m.src}: line {n + 1}: row {row}, column {c}"
        if lab is None:
            raise TopologyError(f"{at}: {v!r} is not a topology label (expected X, NV#, PIX, PXB, PHB, NODE or SYS)")
        if (lab == "X") != (c == row):
            raise TopologyError(f"{at}: {v!r} "
                                f"({'X belongs on the diagonal only' if lab == 'X' else 'the diagonal must be X'})")
        if lab.startswith("NV") and not (row in m.gpus and c in m.gpus):
            raise TopologyError(f"{at}: NVLink label {lab} between non-GPUs")
        m.cells[(row, c)] = lab
    if row in m.gpus:
        m.affinity[row] = dict(zip(m.affinity_cols, toks[1 + len(m.cols):]))


def _rows(m: _Matrix, lines: list[str], start: int) -> None:
    """The rows under the header and the NIC legend; then every GPU must have its row and the
    matrix must be symmetric. A repeated row (a second matrix pasted below) is ignored."""
    seen: set[str] = set()
    for n in range(start, len(lines)):
        toks = lines[n].split()
        if not toks:
            continue
        legend = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", lines[n])
        if legend:
            m.legend[legend.group(1)] = legend.group(2)
        elif toks[0] in m.cols and toks[0] not in seen:
            seen.add(toks[0])
            _row(m, toks, n)
    missing = [g for g in m.gpus if g not in seen]
    if not m.gpus or missing:
        raise TopologyError(f"{m.src}: the header names {', '.join(missing) or 'no GPU'} but the matrix has no row for it")
    for (a, b), lab in m.cells.items():
        other = m.cells.get((b, a))
        if other is not None and other != lab:
            raise TopologyError(f"{m.src}: matrix is not symmetric: {a}/{b} is {lab} but {b}/{a} is {other}")


def _endpoints(m: _Matrix, ids: dict[str, str], gpu_name: str | None, out: _Built) -> None:
    """The GPUs, with the CPU set and NUMA nodes their affinity columns give, and the NICs, named by the legend."""
    for c in m.gpus:
        attrs: dict = {}
        aff = m.affinity.get(c, {})
        cpus = aff.get("CPU Affinity")
        if cpus and cpus != "N/A":
            attrs["cpus"] = cpus
        numa = aff.get("NUMA Affinity")
        if numa and numa.isdigit():
            attrs["numa_node"] = int(numa)
        gnuma = aff.get("GPU NUMA ID")
        if gnuma and gnuma.isdigit():
            attrs["gpu_numa_id"] = int(gnuma)
        out.devices.append(Device(ids[c], DeviceKind.GPU, int(c[3:]), gpu_name or "", attrs))
    for k, c in enumerate(m.nics):
        out.devices.append(Device(ids[c], DeviceKind.NIC, k, m.legend.get(c, c), {}))
    if not any("cpus" in d.attrs for d in out.devices if d.kind == DeviceKind.GPU):
        out.unknowns.append("CPU affinity of the GPUs: the text has no CPU Affinity values.")
    if not any("numa_node" in d.attrs for d in out.devices if d.kind == DeviceKind.GPU):
        out.unknowns.append("NUMA node of the GPUs: the text has no NUMA Affinity values.")


def _cpu_groups(m: _Matrix, level: dict) -> tuple[list[list[str]], list[str]]:
    """Endpoints by CPU, in order of their first member: endpoints within NODE share a CPU, and so do
    GPUs of one NUMA (else CPU) affinity unless a SYS label sets them apart; those are listed second."""
    ends = m.ends
    uf = _UF(ends)
    for (a, b), lv in level.items():
        if lv <= 4:
            uf.union(a, b)
    by_affinity: dict[str, str] = {}
    split: list[str] = []
    for c in m.gpus:
        aff = m.affinity.get(c, {})
        key = aff.get("NUMA Affinity") if aff.get("NUMA Affinity") not in (None, "N/A") else aff.get("CPU Affinity")
        if not key or key == "N/A":
            continue
        if key not in by_affinity:
            by_affinity[key] = c
            continue
        other = by_affinity[key]
        groups = uf.groups(ends)
        ga = next(g for g in groups if c in g)
        gb = next(g for g in groups if other in g)
        if not any(level.get((x, y)) == 5 for x in ga for y in gb):
            uf.union(c, other)
        elif ga is not gb:
            split.append(f"{other}/{c}")
    return sorted(uf.groups(ends), key=lambda g: min(ends.index(x) for x in g)), split


def _cpu(ci: int, group: list[str], m: _Matrix, level: dict, ids: dict[str, str], out: _Built) -> bool:
    """CPU ``ci`` and the PCIe tree under it: host bridges (members within PHB), upper switches
    (within PXB), leaf switches (within PIX). True when members with no PCIe label among them
    were put under one host bridge (a guess the unknowns name)."""
    cpu_id = f"cpu{ci}"
    cattrs: dict = {}
    gaff = [m.affinity.get(c, {}) for c in group if c in m.gpus]
    numas = {a.get("NUMA Affinity") for a in gaff} - {None, "N/A"}
    if len(numas) == 1 and next(iter(numas)).isdigit():
        cattrs["numa_node"] = int(next(iter(numas)))
    cpusets = {a.get("CPU Affinity") for a in gaff} - {None, "N/A"}
    if len(cpusets) == 1:
        cattrs["cpus"] = next(iter(cpusets))
    out.devices.append(Device(cpu_id, DeviceKind.CPU, ci, "", cattrs))
    # host bridges: within PHB. Members with no known PCIe relation at all share one.
    related = {x for x in group if any(level.get((x, y)) is not None and level[(x, y)] <= 4 for y in group if y != x)}
    hb_groups = _components([x for x in group if x in related], level, 3)
    loose = [x for x in group if x not in related]
    if loose:
        hb_groups.append(loose)
    for hi, hb in enumerate(hb_groups):
        hb_id = f"hb{ci}_{hi}"
        out.devices.append(Device(hb_id, DeviceKind.HOST_BRIDGE,
                                  sum(d.kind == DeviceKind.HOST_BRIDGE for d in out.devices), "", {}))
        out.pcie(hb_id, cpu_id)
        for si, sub in enumerate(_components(hb, level, 2)):
            _switches(f"pcisw{ci}_{hi}_{si}", hb_id, sub, _components(sub, level, 1), ids, out)
    return bool(loose) and len(group) > 1


def _switches(top: str, parent: str, members: list[str], leaves: list[list[str]], ids: dict[str, str],
              out: _Built) -> None:
    """The endpoints (columns) under one host bridge within PXB of each other: alone, straight on
    the bridge; else under one switch ``top``, with a leaf switch per PIX group when there is more
    than one."""
    if len(members) == 1:
        out.pcie(ids[members[0]], parent)
        return
    out.devices.append(Device(top, DeviceKind.PCIE_SWITCH, 0, "", {}))
    out.pcie(top, parent)
    if len(leaves) == 1:
        for x in members:
            out.pcie(ids[x], top)
        return
    for wi, sw in enumerate(leaves):
        leaf = f"{top}_{wi}"
        out.devices.append(Device(leaf, DeviceKind.PCIE_SWITCH, 0, "", {}))
        out.pcie(leaf, top)
        for x in sw:
            out.pcie(ids[x], leaf)


def _nvlinks(m: _Matrix, ids: dict[str, str], gpu_name: str | None, out: _Built) -> None:
    """The NV# labels as NVLink bundles: direct between GPU pairs, or one NVSwitch fabric when every
    pair shows the same count and the GPUs could not have that many links (module docstring)."""
    nv = {}
    for a, b in combinations(m.gpus, 2):
        lab = m.label(a, b)
        if lab and lab.startswith("NV"):
            nv[(a, b)] = int(lab[2:])
    known = nvlink_per_link(gpu_name)
    gen, per = known if known else (None, NVLINK_DEFAULT_PER_LINK)
    if nv and not known:
        out.unknowns.append(f"NVLink generation and speed: the text does not name the GPU; "
                            f"{NVLINK_DEFAULT_PER_LINK:g} GB/s per link per direction assumed (NVLink 2 to 4).")
    n = len(m.gpus)
    counts = set(nv.values())
    all_pairs = len(nv) == n * (n - 1) // 2
    if nv and all_pairs and len(counts) == 1 and n > 2 and next(iter(counts)) * (n - 1) > 18:
        k = next(iter(counts))
        out.devices.append(Device("nvswitch0", DeviceKind.NVSWITCH, 0, "NVSwitch fabric (inferred)", {"inferred": True}))
        for c in m.gpus:
            out.links.append(Link(ids[c], "nvswitch0", LinkKind.NVLINK, round(k * per, 3), k, gen,
                                  attrs={"nominal": not known}))
        out.notes.append(f"Every GPU pair shows NV{k}: {n - 1} peers x {k} links exceed what one GPU has, so the "
                         f"GPUs meet in an NVSwitch fabric, modelled as one device.")
        out.unknowns.append("Number of NVSwitch chips: not in the text; modelled as one fabric device.")
        return
    for (a, b), k in nv.items():
        out.links.append(Link(ids[a], ids[b], LinkKind.NVLINK, round(k * per, 3), k, gen, attrs={"nominal": not known}))
    if n == 2 and nv:
        out.notes.append("Two GPUs joined by NVLink: an NVLink bridge or an NVSwitch system; modelled as a direct "
                         "bundle (routes and bandwidth are the same either way).")


def _placeholders(m: _Matrix, cpus: int, split: list[str], guessed_pcie: bool) -> list[str]:
    """What the text cannot say about the PCIe tree, the CPUs and the NICs, and what stands in."""
    out = [f"PCIe generations, widths and bandwidths: not in the text; PCIe links carry a "
           f"{PCIE_PLACEHOLDER:g} GB/s placeholder (Gen4 x16), marked nominal."]
    if cpus > 1:
        out.append(f"CPU interconnect bandwidth: not in the text; {CPU_LINK_PLACEHOLDER:g} GB/s placeholder.")
    if split:
        out.append(f"{', '.join(split[:4])}{' ...' if len(split) > 4 else ''}: same NUMA/CPU "
                   f"affinity but SYS between them; modelled on separate CPU nodes, as the labels say.")
    if guessed_pcie:
        out.append("PCIe placement of GPUs whose only relation is NVLink: not shown by nvidia-smi; "
                   "they are placed under one host bridge of their CPU.")
    if m.nics:
        out.append("NIC models and port rates: not in the text.")
    return out


def _unreconciled(topo: Topology, m: _Matrix, ids: dict[str, str]) -> list[str]:
    """The check: the tree must reproduce every PCIe label; one line per pair where it cannot."""
    out = []
    for a, b in combinations(m.ends, 2):
        want = m.label(a, b)
        if want in LEVELS:
            got = topo.route(ids[a], ids[b]).label
            if got != want:
                out.append(f"{a}/{b}: the text says {want}, which no single PCIe tree reconciles with the "
                           f"other labels; modelled as {got}.")
    return out


def _name(source: str) -> str:
    """The topology's name: the file's stem, else ``nvsmi``."""
    stem = re.sub(r"\.[^.]*$", "", source.replace("\\", "/").rsplit("/", 1)[-1]) if source else ""
    return stem or "nvsmi"


def parse(text: str, source: str = "", gpu_name: str | None = None) -> Topology:
    """Build a :class:`Topology` from ``nvidia-smi topo -m`` output.

    Tolerates terminal escape codes, tabs or spaces, the ``CPU Affinity``/``NUMA Affinity``/
    ``GPU NUMA ID`` columns, NIC rows and the ``NIC Legend``. ``gpu_name`` (if known from
    elsewhere) sets the NVLink generation and per-link bandwidth. The sections, in order: the
    header, the rows and legend (the checked :class:`_Matrix`), the GPUs and NICs, the CPUs with
    the PCIe tree under each, NVLink, then what the text left unsaid and the labels the tree
    could not reproduce.
    """
    lines = _ANSI.sub("", text).replace("\r", "").split("\n")
    at, m = _header(lines, source or "<nvidia-smi topo -m>")
    _rows(m, lines, at + 1)
    ids, level = m.ids(), m.levels()
    out = _Built(notes=["Parsed from nvidia-smi topo -m output."])
    _endpoints(m, ids, gpu_name, out)
    groups, split = _cpu_groups(m, level)
    guessed_pcie = False
    for ci, group in enumerate(groups):
        guessed_pcie |= _cpu(ci, group, m, level, ids, out)
    for a, b in combinations(range(len(groups)), 2):
        out.links.append(Link(f"cpu{a}", f"cpu{b}", LinkKind.CPU_INTERCONNECT, CPU_LINK_PLACEHOLDER,
                              attrs={"nominal": True}))
    # switch indices: their places in the device list
    out.devices = [Device(d.id, d.kind, k, d.name, d.attrs) if d.kind == DeviceKind.PCIE_SWITCH else d
                   for k, d in enumerate(out.devices)]
    _nvlinks(m, ids, gpu_name, out)
    out.unknowns += _placeholders(m, len(groups), split, guessed_pcie)
    topo = Topology(_name(source), out.devices, out.links, source=source, notes=out.notes, unknowns=out.unknowns)
    topo.unknowns = out.unknowns + _unreconciled(topo, m, ids)
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
