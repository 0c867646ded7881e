"""Stored GPU-pair measurements as link strengths: what ``rankmap topo --measured`` shows and
``rankmap map --measured`` places with.

From a ``bench p2p`` run: the pair figure is the better of the copy engine's push and pull
(``ce_write``, ``ce_read``) one way, the host figure the better of pinned host->GPU and GPU->host.
:func:`rankmap.topology.measured.apply` puts them on the links those transfers crossed.
"""

from __future__ import annotations

import socket

from rankmap.errors import RankmapError
from rankmap.topology import Topology
from rankmap.topology import measured as tm

PAIR_TESTS = ("ce_write", "ce_read")
HOST_TESTS = ("h2d_pinned", "d2h_pinned")


def figures(run: dict) -> tuple[dict[tuple[int, int], float], dict[int, float], dict[int, str]]:
    """(pair GB/s, host GB/s per GPU, PCI bus id per GPU) of a stored p2p run."""
    pairs: dict[tuple[int, int], float] = {}
    host: dict[int, float] = {}
    for r in run.get("rows") or []:
        bw = r.get("bandwidth_GBps")
        if bw is None:
            continue
        if r["benchmark"] in PAIR_TESTS:
            k = (int(r["src"]), int(r["dst"]))
            pairs[k] = max(pairs.get(k, 0.0), float(bw))
        elif r["benchmark"] in HOST_TESTS:
            g = int(r["dst"] if r["src"] == -1 else r["src"])
            host[g] = max(host.get(g, 0.0), float(bw))
    pci = {int(g["index"]): g.get("pci") for g in (run.get("machine") or {}).get("gpus", []) if g.get("pci")}
    return pairs, host, pci


def find_run(store, spec: str, topo: Topology) -> dict:
    """The p2p run ``spec`` names: an id, or ``latest`` (this host's newest when the topology is the
    live node, else the newest of any host)."""
    if spec != "latest":
        try:
            rid = int(spec)
        except ValueError:
            raise RankmapError(f"--measured takes a benchmark run id or 'latest', not {spec!r}") from None
        run = store.bench_run(rid)
        if run["kind"] != "p2p":
            raise RankmapError(f"bench run {rid} is a {run['kind']} run; --measured needs a p2p run")
        return run
    live = topo.source == "live" or str(topo.source).startswith("live")
    run = store.latest_bench_run("p2p", socket.gethostname() if live else None)
    if run is None:
        where = f" from {socket.gethostname()}" if live else ""
        raise RankmapError(f"no stored `rankmap bench p2p` run{where} in {store.url}: run it first, or drop --measured")
    return run


def measured_topology(topo: Topology, store, spec: str = "latest") -> Topology:
    run = find_run(store, spec, topo)
    pairs, host, pci = figures(run)
    if not pairs and not host:
        raise RankmapError(f"bench run {run['id']} has no copy-engine or pinned host figures to use as link strengths")
    return tm.apply(topo, pairs, host, pci=pci, source=f"rankmap bench p2p run {run['id']} ({run.get('host') or '?'}, "
                                                        f"{run.get('created')})")
