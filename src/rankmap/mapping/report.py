"""A placement as the mapping JSON (versioned, what ``rankmap run`` reads) and as text tables.

The JSON keeps both the mapping and the reasons for it: congestion before and after, per-link loads,
the solver and whether the optimum is proven, so a stored mapping explains itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankmap.errors import counted
from rankmap.formats.mapping_json import FORMAT, VERSION
from rankmap.mapping import basis as B
from rankmap.mapping.cost import REL_EPS
from rankmap.mapping.objective import DESCRIPTION, FIGURES
from rankmap.mapping.solve import Placement
from rankmap.mapping.units import BYTE_UNITS, TIME_UNITS, amount, amount_in, fmt, percent, unit


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b > 0 else None


def _entries(pl: Placement) -> dict[str, dict]:
    """Every rank's entry; the GPU's part (CPUs, memory node, NIC) is worked out once per GPU, not
    once per rank (the topology walks behind it cost a second at 4096 ranks)."""
    per_gpu: dict[int, dict] = {}
    out = {}
    for r in range(len(pl.gpu_of)):
        g = int(pl.gpu_of[r])
        if g not in per_gpu:
            per_gpu[g] = pl.rank_entry(r)
        out[str(r)] = {**per_gpu[g], "node": int(pl.node_of[r])}
    return out


def to_json(pl: Placement, *, topology: str, ranks_per_gpu: int = 1, source: dict | None = None,
            link_rows: int | None = None, basis: dict | None = None) -> dict[str, Any]:
    """``basis``: the fields of :func:`rankmap.mapping.basis.fields` (default: the traffic as recorded)."""
    n = len(pl.gpu_of)
    s, d = pl.score, pl.default
    links = []
    bw = pl.platform.bw
    idx = np.nonzero((s.loads > 0) | (d.loads > 0))[0]
    idx = idx[np.argsort(-np.maximum(s.congestion[idx], d.congestion[idx]), kind="stable")]
    if link_rows is not None:
        idx = idx[:link_rows]
    for i in idx:
        links.append({"link": pl.platform.label(int(i)), "kind": pl.platform.kind(int(i)),
                      "bandwidth": float(bw[i]), "before_bytes": float(d.loads[i]),
                      "after_bytes": float(s.loads[i]), "before_congestion": float(d.congestion[i]),
                      "after_congestion": float(s.congestion[i])})
    return {
        "format": FORMAT, "version": VERSION,
        "world_size": n, "topology": topology, "nodes": pl.platform.nodes,
        "gpus_per_node": pl.platform.G, "ranks_per_gpu": ranks_per_gpu,
        "mapping": _entries(pl),
        "max_congestion": s.max_congestion, "avg_congestion": s.avg_congestion,
        "total_congestion": s.total_congestion, "hop_bytes": s.hop_bytes,
        "time_bound_s": s.time_bound,
        "default": {"max_congestion": d.max_congestion, "avg_congestion": d.avg_congestion,
                    "total_congestion": d.total_congestion, "hop_bytes": d.hop_bytes,
                    "description": "local rank r on GPU r mod G, ranks in blocks per node"},
        "improvement": {"max": _ratio(d.max_congestion, s.max_congestion),
                        "avg": _ratio(d.avg_congestion, s.avg_congestion)},
        "optimal": bool(pl.optimal), "solver": pl.solver, "seconds": round(pl.seconds, 4),
        # what was minimised, a lower bound of its primary figure over all placements and the gap
        "objective": pl.objective, "bound": pl.bound, "gap": round(pl.gap, 6),
        "default_kept": bool(pl.default_kept), "notes": list(pl.notes),
        # ranks the placement moves from the default; the least gain worth moving them for, and when
        # that kept the default, what the best placement found would have given (``best``)
        "moved_ranks": int(pl.moved), "min_gain": pl.min_gain, "best": pl.best,
        # the figure the least gain had to be on, and the one the placement taken gains on
        "min_gain_on": pl.min_gain_on, "gain_on": pl.gain_on,
        "info": {k: v for k, v in pl.info.items()},
        "links": links, "source": source or {},
        # what the traffic was taken to be: as recorded, or the GPU-resident what-if (with its assumption)
        **(basis or B.fields(B.AS_RECORDED)),
        # bytes staged through host memory (mem = host in the profile, or the CSV's mem column) and
        # how many of them the cost model routed GPU -> host -> GPU (the in-node ones)
        "host_staged": dict(pl.staging),
        "units": {"congestion": "seconds (bytes / (GB/s * 1e9))", "bandwidth": "GB/s per direction"},
    }


def print_text(doc: dict, *, console=None, max_links: int = 30, show_mapping: int = 64) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = console or Console(highlight=False)
    if console is None and not con.is_terminal:     # a file or a pipe: room for the whole table
        con = Console(highlight=False, width=132)
    con.print(f"[bold]placement of {counted(doc['world_size'], 'rank')} on {doc['nodes']} x {doc['topology']}"
              f" ({counted(doc['gpus_per_node'], 'GPU')} per node, {counted(doc['ranks_per_gpu'], 'rank')} per GPU)[/bold]")
    if B.is_what_if(doc):
        con.print(f"[bold]{escape(B.assumption_text(doc))}[/bold]")
    t = Table(title="link loads: default -> rankmap (busiest first)", title_justify="left")
    shown = doc["links"][:max_links]
    bu = unit(max([max(r["before_bytes"], r["after_bytes"]) for r in shown], default=0), BYTE_UNITS)
    tu = unit(max([max(r["before_congestion"], r["after_congestion"]) for r in shown], default=0), TIME_UNITS)
    for c, j in (("link", "left"), ("kind", "left"), ("GB/s", "right"), (f"before {bu[1]}", "right"),
                 (f"before {tu[1]}", "right"), (f"after {bu[1]}", "right"), (f"after {tu[1]}", "right")):
        # the link names and figures whole in an 80-column terminal (rich cut them to "cpu1->pci…"):
        # only the kind, whose few words read well folded, gives way
        t.add_column(c, justify=j, no_wrap=c != "kind", overflow="fold" if c == "kind" else "ellipsis")
    for row in shown:
        t.add_row(row["link"], row["kind"], f"{row['bandwidth']:g}", fmt(row["before_bytes"], bu),
                  fmt(row["before_congestion"], tu), fmt(row["after_bytes"], bu), fmt(row["after_congestion"], tu))
    if len(doc["links"]) > max_links:
        t.caption = f"{len(doc['links']) - max_links} more links not shown (--format json has all)"
    con.print(t)
    d = doc["default"]
    imp = doc["improvement"]
    mu = unit(max(d["max_congestion"], doc["max_congestion"]), TIME_UNITS)
    au = unit(max(d["avg_congestion"], doc["avg_congestion"]), TIME_UNITS)
    con.print(f"max congestion: {amount_in(d['max_congestion'], mu)} -> {amount_in(doc['max_congestion'], mu)}"
              f"  ({imp['max']:.2f}x)" if imp["max"] else "max congestion: no traffic on any link")
    con.print(f"avg congestion over used links: {amount_in(d['avg_congestion'], au)} -> "
              f"{amount_in(doc['avg_congestion'], au)}" + (f"  ({imp['avg']:.2f}x)" if imp["avg"] else ""))
    con.print(f"predicted communication time bound (busiest link): {amount_in(doc['time_bound_s'], mu)}")
    if "moved_ranks" in doc:
        con.print(f"ranks moved from the default placement: {doc['moved_ranks']} of {doc['world_size']}")
    if doc.get("gain_on"):
        con.print(f"taken for its gain on {doc['gain_on']} (--min-gain {100 * doc['min_gain']:g} %, "
                  f"--min-gain-on {doc.get('min_gain_on', 'primary')})")
    hs = doc.get("host_staged") or {}
    if hs.get("host_staged_bytes"):
        tot = hs["total_bytes"] or 1.0
        hu = unit(hs["total_bytes"], BYTE_UNITS)
        line = (f"host-staged traffic: {amount_in(hs['host_staged_bytes'], hu)} of {amount_in(hs['total_bytes'], hu)} "
                f"({100 * hs['host_staged_bytes'] / tot:.0f} %); routed GPU -> host memory -> GPU: "
                f"{amount_in(hs['routed_via_host_bytes'], hu)}")
        if hs.get("off_node_host_staged_bytes"):
            line += f", between nodes (through the NICs): {amount_in(hs['off_node_host_staged_bytes'], hu)}"
        con.print(line)
        for note in hs.get("notes", []):
            con.print(f"note: {note}")
    elif doc.get("traffic_basis") == B.GPU_RESIDENT:
        con.print(f"host-staged traffic: none in this what-if; recorded host-staged "
                  f"{amount(doc.get('recorded_host_staged_bytes', 0))}, placed here GPU to GPU")
    m = Table(title="mapping", title_justify="left")
    for c in ("rank", "node", "GPU", "CPUs", "NIC"):
        m.add_column(c)
    for r, e in list(doc["mapping"].items())[:show_mapping]:
        m.add_row(r, str(e["node"]), str(e["gpu"]), e["cpus"] or "?", e["nic"] or "-")
    if len(doc["mapping"]) > show_mapping:
        m.caption = f"{len(doc['mapping']) - show_mapping} more ranks (--format json has all)"
    con.print(m)
    obj = doc.get("objective", "max")
    bound = amount(doc["bound"], BYTE_UNITS if obj == "hop-bytes" else TIME_UNITS)
    best = doc.get("best")
    if doc["optimal"]:
        how = "proven optimal"
    elif best and best["optimal"]:
        # the default kept under --min-gain: the bound is the proven optimum
        if best["gain"] > REL_EPS:     # the primary figure gained (else only the tie-break did)
            how = f"the default placement, {percent(doc['gap'])} above the proven optimum {bound}"
        else:
            how = f"the default placement, as good as the proven optimum {bound} on {FIGURES[obj][0]}"
    else:
        how = f"not proven optimal; lower bound {bound}, at most {100 * doc['gap']:.1f} % above it"
        if best:
            how = f"the default placement, {percent(best['gain'])} above the best found; " + how
    con.print(f"objective: {DESCRIPTION.get(obj, obj)}")
    con.print(f"solver: {doc['solver']} ({how}), {doc['seconds']:.3f} s")
    for note in doc.get("notes", []):
        con.print(f"note: {note}")
