"""Measured link strengths: a topology whose links carry the GB/s a benchmark achieved across them.

Input (plain numbers, so this layer needs nothing from the benchmark layer above it): the best
one-way copy bandwidth measured from GPU ``a`` to GPU ``b`` for some directed pairs, and the best
host<->GPU bandwidth per GPU. Each measurement is a route's worth: the bytes crossed every link of
``Topology.route(a, b)``. A link is at least as strong as the fastest single transfer that crossed
it, so each link on a measured route gets the largest measurement among the routes that cross it,
in either direction (links are full duplex and modelled with one figure per direction).
Host figures go to the links of the route from the GPU to its local CPU. Links no measurement
crossed keep their nominal figure. A measured link says so: ``measured=True`` and, in ``attrs``,
``nominal_bandwidth`` and ``measured_by``.

GPUs are matched by PCI bus id when both the measurement and the topology know it, else by index
(rankmap runs the benchmarks with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA's order is NVML's).
"""

from __future__ import annotations

from dataclasses import replace

from rankmap.topology.model import Link, Topology, TopologyError


def _bus(pci: str | None) -> str | None:
    """``00000000:19:00.0`` / ``0000:19:00.0`` -> ``19:00.0`` with the domain as a number, lower case."""
    if not pci:
        return None
    parts = pci.strip().lower().split(":")
    if len(parts) < 3:
        return None
    try:
        return f"{int(parts[-3], 16):x}:{parts[-2]}:{parts[-1]}"
    except ValueError:
        return None


def gpu_ids(topo: Topology, pci: dict[int, str] | None, indices: set[int]) -> dict[int, str]:
    """Measured GPU index -> topology device id."""
    by_bus = {_bus(g.attrs.get("pci_bus_id")): g.id for g in topo.gpus if _bus(g.attrs.get("pci_bus_id"))}
    out: dict[int, str] = {}
    for i in sorted(indices):
        b = _bus((pci or {}).get(i))
        if b and by_bus:
            if b not in by_bus:
                raise TopologyError(f"the measured GPU {i} ({(pci or {}).get(i)}) is not in topology {topo.name!r}: "
                                    f"measure this node, or pass its topology")
            out[i] = by_bus[b]
        else:
            out[i] = topo.gpu(i).id
    return out


def apply(topo: Topology, pairs: dict[tuple[int, int], float], host: dict[int, float] | None = None, *,
          pci: dict[int, str] | None = None, source: str = "measured") -> Topology:
    """A copy of ``topo`` with the links crossed by measured routes set to the measured GB/s."""
    gpus_measured = {g for pair in pairs for g in pair} | set(host or {})
    if not gpus_measured:
        raise TopologyError("no GPU-pair or host measurement to apply")
    ids = gpu_ids(topo, pci, gpus_measured)
    best: dict[int, float] = {}
    for (a, b), gbps in pairs.items():
        if a == b or not gbps or gbps <= 0:
            continue
        for hop in topo.route(ids[a], ids[b]).hops:
            best[hop.link] = max(best.get(hop.link, 0.0), gbps)
    for g, gbps in (host or {}).items():
        cpu = topo.local_cpu(ids[g])
        if cpu is None or not gbps or gbps <= 0:
            continue
        for hop in topo.route(ids[g], cpu.id).hops:
            best[hop.link] = max(best.get(hop.link, 0.0), gbps)
    links: list[Link] = []
    for i, l in enumerate(topo.links):
        if i in best:
            attrs = dict(l.attrs, nominal_bandwidth=l.bandwidth, measured_by=source)
            links.append(replace(l, bandwidth=round(best[i], 3), measured=True, attrs=attrs))
        else:
            links.append(l)
    notes = list(topo.notes) + [f"link bandwidths measured: {source} ({len(best)} of {len(topo.links)} links)"]
    return Topology(topo.name, topo.devices.values(), links, source=topo.source, notes=notes,
                    unknowns=topo.unknowns)
