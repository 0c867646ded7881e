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


def implied_nodes(spec: str | None) -> int | None:
    """How many nodes the topology spec itself names (``synth:hier:...``'s last level), else None."""
    if spec and spec.startswith("synth:"):
        from rankmap.mapping import synth

        return synth.implied_nodes(spec[len("synth:"):])
    return None


def node_count(spec: str | None, nodes: int | None) -> int:
    """``--nodes``, or the count the topology names; both given and different is an error."""
    implied = implied_nodes(spec)
    if nodes is None:
        return implied or 1
    if nodes < 1:
        raise RankmapError(f"--nodes must be at least 1, got {nodes}")
    if implied is not None and nodes != implied:
        raise RankmapError(f"--topology {spec} describes {implied} nodes but --nodes says {nodes}: leave --nodes "
                           f"out or change the last level")
    return nodes
