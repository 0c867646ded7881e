"""Resolving what the placement verbs were told: the topology and the traffic."""

from __future__ import annotations

from rankmap.errors import RankmapError
from rankmap.topology.model import Topology


def load_topology(spec: str | None) -> Topology:
    """``live`` / fixture / file as :func:`rankmap.topology.load`, plus ``synth:NAME`` shapes."""
    if spec and spec.startswith("synth:"):
        from rankmap.mapping import synth

        t = synth.builtin(spec[len("synth:"):])
        if t is None:
            raise RankmapError(f"unknown synthetic topology {spec!r}")
        return t
    from rankmap.topology import fixtures, load

    if spec in (None, "", "live"):
        try:
            t = load(spec)
        except RankmapError as e:
            why = str(e).split(";")[0]
            raise RankmapError(f"cannot read this node's topology ({why}); pass --topology FIXTURE or FILE "
                               f"(fixtures: {', '.join(fixtures.NAMES)})") from None
        if not t.gpus:
            raise RankmapError("this node has no GPU to place ranks on; pass --topology FIXTURE or FILE "
                               f"(fixtures: {', '.join(fixtures.NAMES)})")
        return t
    return load(spec)
