"""``rankmap topo``: show a node's GPUs, links and routes (live, a fixture, or a file)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rankmap.topology import LinkKind, Topology, TopologyError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "topo",
        help="show the GPU/NVSwitch/PCIe/CPU/NIC graph and the link between every GPU pair",
        description="Show the node's GPU x GPU matrix (link label and GB/s per direction), CPU/NUMA/NIC "
                    "affinity and the NICs. Default: the live node (NVML and sysfs).",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--fixture", metavar="NAME", help="a built-in topology of a published system (see --list)")
    src.add_argument("--from", dest="from_file", metavar="FILE",
                     help="a topology JSON file or saved 'nvidia-smi topo -m' output")
    src.add_argument("--list", action="store_true", help="list the built-in fixtures and exit")
    p.add_argument("--format", choices=("table", "json", "nvsmi"), default="table",
                   help="table (default), json (the versioned topology JSON) or nvsmi (nvidia-smi topo -m layout)")
    p.add_argument("--measured", nargs="?", const="latest", metavar="RUN",
                   help="use the GPU-pair bandwidths measured by `rankmap bench p2p` (a stored run id, default the "
                        "latest) as link strengths, shown next to the nominal ones")
    p.add_argument("--db", metavar="URL", help="store URL for --measured (default $RANKMAP_DB or the SQLite file)")
    p.set_defaults(func=run)


def read_file(path: str) -> Topology:
    """A topology from a JSON file or ``nvidia-smi topo -m`` text, told apart by the first character."""
    from rankmap.formats import topology_json
    from rankmap.topology import nvsmi

    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise TopologyError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TopologyError(f"{path}: is a directory, expected a topology JSON or nvidia-smi topo -m file") from None
    except OSError as e:
        raise TopologyError(f"{path}: cannot read: {e.strerror}") from None
    text = data.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        return topology_json.loads(text, source=path)
    return nvsmi.parse(text, source=path)


def resolve(args: argparse.Namespace) -> Topology:
    from rankmap.topology import fixtures

    if args.fixture:
        return fixtures.get(args.fixture)
    if args.from_file:
        return read_file(args.from_file)
    from rankmap.topology.discover import discover

    return discover()


def run(args: argparse.Namespace) -> int:
    from rankmap.formats import topology_json
    from rankmap.topology import fixtures, nvsmi

    if args.list:
        width = max(len(n) for n in fixtures.NAMES)
        for name in fixtures.NAMES:
            print(f"{name:<{width}}  {fixtures.describe(name)}")
        return 0
    topo = resolve(args)
    nominal = None
    if args.measured:
        from rankmap.linkbench.measured import measured_topology
        from rankmap.store import open_store

        nominal, topo = topo, measured_topology(topo, open_store(args.db, existing=True), args.measured)
    if args.format == "json":
        sys.stdout.write(topology_json.dumps(topo))
    elif args.format == "nvsmi":
        sys.stdout.write(nvsmi.format_matrix(topo))
    else:
        print_table(topo, nominal)
    return 0


def _gbs(x: float) -> str:
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def print_table(topo: Topology, nominal: Topology | None = None) -> None:
    """The human view: matrix, per-GPU affinity and NVLink bundles, NICs, then unknowns and source.

    With ``nominal`` (``--measured``), ``topo`` carries measured link strengths and a table sets the
    measured GB/s of every GPU pair beside the nominal ones."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=250)
    gpus, nics = topo.gpus, topo.nics
    console.print(f"[bold]{topo.name}[/bold]: {len(gpus)} GPUs, {len(nics)} NICs, "
                  f"{len(topo.cpus)} CPU sockets/NUMA nodes")

    title = "GPU x GPU: link label and GB/s per direction (bottleneck of the route)"
    heads = [f"GPU{g.index}" for g in gpus]
    rows: list[tuple[str, list[str], list[str]]] = []     # label, the GPU cells, CPUs / NUMA / nearest NIC
    for a in gpus:
        cells = []
        for b in gpus:
            if a.id == b.id:
                cells.append("X")
            else:
                r = topo.route(a.id, b.id)
                cells.append(f"{r.label} {_gbs(topo.bandwidth(a.id, b.id))}")
        cpu = topo.local_cpu(a.id)
        cpus = a.attrs.get("cpus") or (cpu.attrs.get("cpus") if cpu else None) or "?"
        numa = a.attrs.get("numa_node", cpu.attrs.get("numa_node") if cpu else None)
        nic = topo.nearest_nic(a.id)
        nic_s = f"{nic.name or nic.id} ({topo.route(a.id, nic.id).label})" if nic else "-"
        rows.append((f"GPU{a.index}", cells, [str(cpus), "?" if numa is None else str(numa), nic_s]))

    def grid(cols: range, affinity: bool, title: str | None) -> Table:
        t = Table(title=title, title_justify="left")
        t.add_column("", no_wrap=True)
        for j in cols:
            t.add_column(heads[j], justify="center", no_wrap=True)
        if affinity:
            t.add_column("CPUs", no_wrap=True)
            t.add_column("NUMA", justify="center", no_wrap=True)
            t.add_column("nearest NIC", no_wrap=True)
        for lab, cells, aff in rows:
            t.add_row(lab, *[cells[j] for j in cols], *(aff if affinity else []))
        return t

    # A terminal too narrow for the whole grid (8 GPUs and their affinity need about 100 columns)
    # gets the GPU columns in panels and the affinity in a table of its own, rather than cells cut
    # to "GP…" and "25…" by rich; a file or a pipe gets the whole grid (250 columns).
    def fits(t: Table) -> bool:     # measured unbounded: a measurement is otherwise capped at the width
        return console.measure(t, options=console.options.update_width(1 << 16)).maximum <= console.width

    whole = grid(range(len(gpus)), True, title)
    if fits(whole):
        console.print(whole)
    else:
        per = 1
        while per < len(gpus) and fits(grid(range(per + 1), False, None)):
            per += 1
        for lo in range(0, len(gpus), per):
            console.print(grid(range(lo, min(len(gpus), lo + per)), False, title if lo == 0 else None))
        aff = Table(title="GPU affinity: CPUs, NUMA node, nearest NIC (its route)", title_justify="left")
        for c in ("", "CPUs", "NUMA", "nearest NIC"):
            aff.add_column(c, justify="center" if c == "NUMA" else "left")
        for lab, _, a in rows:
            aff.add_row(lab, *a)
        console.print(aff)
    if nominal is not None:
        print_measured(console, topo, nominal)

    lt = Table(title="NVLink bundles of each GPU", title_justify="left")
    for c in ("GPU", "to", "links", "gen", "GB/s per link", "GB/s per direction"):
        lt.add_column(c)
    any_nvl = False
    for g in gpus:
        for _, l in topo.links_of(g.id):
            if l.kind != LinkKind.NVLINK:
                continue
            any_nvl = True
            other = topo.devices[l.other(g.id)]
            if other.kind.value == "gpu" and other.index < g.index:
                continue  # each GPU pair once
            per = l.bandwidth / l.count
            nominal = " (nominal)" if l.attrs.get("nominal") else ""
            lt.add_row(f"GPU{g.index}", other.name or other.id if other.kind.value != "gpu" else f"GPU{other.index}",
                       str(l.count), "?" if l.generation is None else f"NVLink{l.generation}",
                       f"{per:g}{nominal}", f"{l.bandwidth:g}")
    if any_nvl:
        console.print(lt)
    else:
        console.print("No NVLink: GPUs talk over PCIe.")

    if nics:
        nt = Table(title="NICs", title_justify="left")
        for c in ("NIC", "name", "model", "Gb/s", "CPU/NUMA", "GPUs at PIX/PXB"):
            nt.add_column(c)
        for i, n in enumerate(nics):
            cpu = topo.local_cpu(n.id)
            where = f"{cpu.id}" + (f" / NUMA {cpu.attrs['numa_node']}" if cpu and "numa_node" in cpu.attrs else "") if cpu else "?"
            close = [f"GPU{g.index}" for g in gpus if topo.route(g.id, n.id).label in ("PIX", "PXB")]
            nt.add_row(f"NIC{i}", n.name or n.id, str(n.attrs.get("model", "?")), str(n.attrs.get("rate_gbps", "?")),
                       where, ", ".join(close) or "-")
        console.print(nt)
    else:
        console.print("NICs: none")

    if topo.unknowns:
        console.print("[bold]Unknown[/bold] (the source could not say):")
        for u in topo.unknowns:
            console.print(f"  - {u}", markup=False)
    console.print(f"Source: {topo.source or '?'}", markup=False)


def print_measured(console, topo: Topology, nominal: Topology) -> None:
    """Nominal vs measured bottleneck GB/s of every GPU pair, and where the measurements come from."""
    from rich.table import Table

    t = Table(title="GPU pairs: nominal vs measured GB/s per direction (measured = rankmap bench p2p)",
              title_justify="left")
    for c in ("pair", "route", "nominal", "measured", "measured / nominal"):
        t.add_column(c, justify="right" if c not in ("pair", "route") else "left")
    for a in topo.gpus:
        for b in topo.gpus:
            if a.id == b.id:
                continue
            r = topo.route(a.id, b.id)
            if not any(topo.links[h.link].measured for h in r.hops):
                continue
            nom, mea = nominal.bandwidth(a.id, b.id), topo.bandwidth(a.id, b.id)
            t.add_row(f"GPU{a.index}->GPU{b.index}", r.label, _gbs(nom), _gbs(mea), f"{mea / nom:.2f}")
    console.print(t)
    for n in topo.notes:
        if n.startswith("link bandwidths measured"):
            console.print(n, markup=False)
