"""Topology layer: the model (:mod:`.model`) and its sources.

Sources: live discovery (:mod:`.discover`, NVML + sysfs), ``nvidia-smi topo -m`` text
(:mod:`.nvsmi`), fixtures of published systems (:mod:`.fixtures`) and the versioned JSON form
(:mod:`rankmap.formats.topology_json`). :func:`load` is the one entry point that resolves what a user typed.
"""

from __future__ import annotations

from pathlib import Path

from rankmap.topology.model import (
    Device,
    DeviceKind,
    Hop,
    Link,
    LinkKind,
    Route,
    Topology,
    TopologyError,
)

__all__ = ["Device", "DeviceKind", "Hop", "Link", "LinkKind", "Route", "Topology", "TopologyError", "load"]


def load(spec: str | None) -> Topology:
    """Resolve ``live`` (or None), a fixture name, or a file (topology JSON or ``nvidia-smi topo -m`` text)."""
    from rankmap.topology import fixtures

    if spec in (None, "", "live"):
        from rankmap.topology.discover import discover

        return discover()
    if spec in fixtures.NAMES:
        return fixtures.get(spec)
    p = Path(spec)
    if p.exists():
        from rankmap.formats import topology_json
        from rankmap.topology import nvsmi

        text = p.read_text(errors="replace")
        if text.lstrip().startswith("{"):
            return topology_json.loads(text, source=str(p))
        return nvsmi.parse(text, source=str(p))
    raise TopologyError(
        f"unknown topology {spec!r}: not 'live', not a file, and not a fixture "
        f"(fixtures: {', '.join(fixtures.NAMES)})"
    )
