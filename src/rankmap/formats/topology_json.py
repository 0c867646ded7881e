"""The versioned JSON form of a :class:`~rankmap.topology.model.Topology`.

One file format for fixtures, ``rankmap topo --format json`` and ``--from FILE``::

    {"format": "rankmap-topology", "version": 1, "name": ..., "source": ..., "notes": [...],
     "unknowns": [...], "devices": [{"id", "kind", "index", "name", "attrs"}, ...],
     "links": [{"a", "b", "kind", "bandwidth", "count", "generation", "width", "measured",
                "attrs"}, ...]}

The reader validates every field and names the file and the field at fault
(``topo.json: links[3].bandwidth: expected a positive number, got "x"``), because a
topology is often written by hand and a wrong number silently skews every mapping.

The one import from a layer above ``formats/``: the format's objects are those of
``rankmap.topology.model``, a module that imports nothing of rankmap but its errors.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rankmap.errors import shown as _show
from rankmap.topology.model import Device, DeviceKind, Link, LinkKind, Topology, TopologyError

FORMAT = "rankmap-topology"
VERSION = 1

_TOP_KEYS = {"format", "version", "name", "source", "notes", "unknowns", "devices", "links"}
_DEVICE_KEYS = {"id", "kind", "index", "name", "attrs"}
_LINK_KEYS = {"a", "b", "kind", "bandwidth", "count", "generation", "width", "measured", "attrs"}


def to_dict(topo: Topology) -> dict[str, Any]:
    """The JSON-ready dict of a topology (keys in a fixed order so diffs stay small)."""
    devices = []
    for d in topo.devices.values():
        devices.append({"id": d.id, "kind": d.kind.value, "index": d.index, "name": d.name, "attrs": dict(d.attrs)})
    links = []
    for l in topo.links:
        links.append({
            "a": l.a, "b": l.b, "kind": l.kind.value, "bandwidth": l.bandwidth, "count": l.count,
            "generation": l.generation, "width": l.width, "measured": l.measured, "attrs": dict(l.attrs),
        })
    return {
        "format": FORMAT, "version": VERSION, "name": topo.name, "source": topo.source,
        "notes": list(topo.notes), "unknowns": list(topo.unknowns), "devices": devices, "links": links,
    }


def dumps(topo: Topology) -> str:
    """JSON text with one device or link per line: readable, and diffable by line."""
    d = to_dict(topo)
    out = ["{"]
    for key in ("format", "version", "name", "source"):
        out.append(f"  {json.dumps(key)}: {json.dumps(d[key])},")
    for key in ("notes", "unknowns", "devices", "links"):
        items = d[key]
        if not items:
            out.append(f"  {json.dumps(key)}: []" + ("," if key != "links" else ""))
            continue
        out.append(f"  {json.dumps(key)}: [")
        for i, item in enumerate(items):
            out.append("    " + json.dumps(item) + ("," if i < len(items) - 1 else ""))
        out.append("  ]" + ("," if key != "links" else ""))
    out.append("}")
    return "\n".join(out) + "\n"


class _Reader:
    """Field-by-field checks; every failure says ``<source>: <field path>: <what>``."""

    def __init__(self, source: str) -> None:
        self.source = source or "<topology>"

    def fail(self, where: str, what: str) -> TopologyError:
        return TopologyError(f"{self.source}: {where}: {what}" if where else f"{self.source}: {what}")

    def obj(self, v: Any, where: str, allowed: set[str], required: set[str]) -> dict:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, got {_show(v)}")
        for k in v:
            if k not in allowed:
                k = k if k.isprintable() and k.strip() == k and k else repr(k)   # a key of blanks or controls, quoted
                raise self.fail(f"{where}.{k}" if where else k,
                                f"unexpected field (allowed: {', '.join(sorted(allowed))})")
        for k in sorted(required):
            if k not in v:
                raise self.fail(f"{where}.{k}" if where else k, "missing")
        return v

    def string(self, v: Any, where: str, nonempty: bool = False) -> str:
        if not isinstance(v, str) or (nonempty and not v):
            raise self.fail(where, f"expected a {'non-empty ' if nonempty else ''}string, got {_show(v)}")
        return v

    def integer(self, v: Any, where: str, minimum: int, optional: bool = False) -> int | None:
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            kind = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
            raise self.fail(where, f"expected {kind}{' or null' if optional else ''}, got {_show(v)}")
        return v

    def positive(self, v: Any, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise self.fail(where, f"expected a positive number, got {_show(v)}")
        return float(v)

    def strings(self, v: Any, where: str) -> list[str]:
        if not isinstance(v, list):
            raise self.fail(where, f"expected a list of strings, got {_show(v)}")
        return [self.string(x, f"{where}[{i}]") for i, x in enumerate(v)]

    def enum(self, v: Any, where: str, enum: type) -> Any:
        values = [e.value for e in enum]
        if v not in values:
            raise self.fail(where, f"expected one of {', '.join(values)}, got {_show(v)}")
        return enum(v)


def from_dict(data: Any, source: str = "") -> Topology:
    """Validate ``data`` (parsed JSON) and build the topology."""
    r = _Reader(source)
    top = r.obj(data, "", _TOP_KEYS, {"format", "version", "devices", "links"})
    if top["format"] != FORMAT:
        raise r.fail("format", f"expected {FORMAT!r}, got {_show(top['format'])}: not a rankmap topology file")
    version = top["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise r.fail("version", f"expected an integer, got {_show(version)}")
    if version > VERSION:
        raise r.fail("version", f"version {version} is newer than this rankmap reads ({VERSION}); upgrade rankmap")
    if version < 1:
        raise r.fail("version", f"expected 1, got {version}")
    name = r.string(top.get("name", ""), "name")
    src = r.string(top.get("source", ""), "source")
    notes = r.strings(top.get("notes", []), "notes")
    unknowns = r.strings(top.get("unknowns", []), "unknowns")

    if not isinstance(top["devices"], list):
        raise r.fail("devices", f"expected a list, got {_show(top['devices'])}")
    devices: list[Device] = []
    seen: set[str] = set()
    for i, dv in enumerate(top["devices"]):
        w = f"devices[{i}]"
        d = r.obj(dv, w, _DEVICE_KEYS, {"id", "kind"})
        did = r.string(d["id"], f"{w}.id", nonempty=True)
        if did in seen:
            raise r.fail(f"{w}.id", f"duplicate device id {did!r}")
        seen.add(did)
        kind = r.enum(d["kind"], f"{w}.kind", DeviceKind)
        index = r.integer(d.get("index", 0), f"{w}.index", 0)
        dname = r.string(d.get("name", ""), f"{w}.name")
        attrs = d.get("attrs", {})
        if not isinstance(attrs, dict):
            raise r.fail(f"{w}.attrs", f"expected an object, got {_show(attrs)}")
        devices.append(Device(did, kind, index, dname, dict(attrs)))

    if not isinstance(top["links"], list):
        raise r.fail("links", f"expected a list, got {_show(top['links'])}")
    links: list[Link] = []
    for i, lv in enumerate(top["links"]):
        w = f"links[{i}]"
        l = r.obj(lv, w, _LINK_KEYS, {"a", "b", "kind", "bandwidth"})
        a = r.string(l["a"], f"{w}.a", nonempty=True)
        b = r.string(l["b"], f"{w}.b", nonempty=True)
        for end, v in (("a", a), ("b", b)):
            if v not in seen:
                raise r.fail(f"{w}.{end}", f"unknown device {v!r} (not in devices)")
        if a == b:
            raise r.fail(w, f"joins {a!r} to itself")
        kind = r.enum(l["kind"], f"{w}.kind", LinkKind)
        bw = r.positive(l["bandwidth"], f"{w}.bandwidth")
        count = r.integer(l.get("count", 1), f"{w}.count", 1)
        gen = r.integer(l.get("generation"), f"{w}.generation", 1, optional=True)
        width = r.integer(l.get("width"), f"{w}.width", 1, optional=True)
        measured = l.get("measured", False)
        if not isinstance(measured, bool):
            raise r.fail(f"{w}.measured", f"expected true or false, got {_show(measured)}")
        attrs = l.get("attrs", {})
        if not isinstance(attrs, dict):
            raise r.fail(f"{w}.attrs", f"expected an object, got {_show(attrs)}")
        links.append(Link(a, b, kind, bw, count, gen, width, measured, dict(attrs)))
    return Topology(name, devices, links, source=src, notes=notes, unknowns=unknowns)


def loads(text: str, source: str = "") -> Topology:
    """Parse and validate topology JSON; ``source`` (usually the file path) prefixes every error."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TopologyError(f"{source or '<topology>'}: not valid JSON: line {e.lineno} column {e.colno}: {e.msg}") from None
    return from_dict(data, source)
