"""The conformance file: which collectives a mirror reproduces exactly, per MPI library build.

``rankmap doctor --collectives`` runs the conformance probe against an installed MPI and writes
what it found into ``collectives.json`` in rankmap's home; a profile reads it to decide whether the
mirror applies to a library version that no mirror names as its own release::

    {"format": "rankmap-collective-conformance", "version": 1,
     "builds": [{"name": "Open MPI", "version": "4.1.4", "fingerprint": "sha256:...",
                 "library": "Open MPI v4.1.4, package: ...", "file": "/usr/lib/.../libmpi.so.40",
                 "release": [4, 1], "truth": "Open MPI's monitoring PML", "checked": "2025-...Z",
                 "ranks": [3, 4, 5, 8], "sizes": [8, ...], "exact": ["allreduce", ...],
                 "inexact": {"reduce_scatter": "byte L1 20.1 % (12 of 32 calls)"}}]}

A build is named by its library's name, version and a fingerprint of its library file (a rebuilt
library of the same version is another build). ``release`` is the mirror's release that was
compared (the one that reproduced the most collectives); ``exact`` the collectives (the probe's
names: ``allreduce``, ``iallreduce``) whose pairs and message counts it reproduced on every call;
``inexact`` the others with why (byte L1, message counts, not mirrored). The reader names the file and the field at fault.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rankmap.errors import RankmapError
from rankmap.formats.jsontext import dumps

FORMAT = "rankmap-collective-conformance"
VERSION = 1


@dataclass(frozen=True)
class Build:
    """What the probe found for one library build."""

    name: str
    version: str
    fingerprint: str
    library: str
    file: str
    release: tuple[int, int]
    truth: str
    checked: str
    ranks: tuple[int, ...]
    sizes: tuple[int, ...]
    exact: tuple[str, ...]
    inexact: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.name, self.version, self.fingerprint

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("release", "ranks", "sizes", "exact"):
            d[k] = list(d[k])
        return d


def _build(d: object, where: str) -> Build:
    if not isinstance(d, dict):
        raise RankmapError(f"{where}: not an object")

    def text(k: str) -> str:
        v = d.get(k)
        if not isinstance(v, str) or (k in ("name", "version", "fingerprint") and not v):
            raise RankmapError(f"{where}.{k}: {v!r} is not a{' non-empty' if k in ('name', 'version') else ''} string")
        return v

    def ints(k: str, n: int | None = None) -> tuple[int, ...]:
        v = d.get(k)
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v) \
                or (n is not None and len(v) != n):
            raise RankmapError(f"{where}.{k}: {v!r} is not a list of {n or 'some'} non-negative integers")
        return tuple(v)

    exact = d.get("exact")
    if not isinstance(exact, list) or not all(isinstance(x, str) for x in exact):
        raise RankmapError(f"{where}.exact: {exact!r} is not a list of collective names")
    inexact = d.get("inexact", {})
    if not isinstance(inexact, dict) or not all(isinstance(v, str) for v in inexact.values()):
        raise RankmapError(f"{where}.inexact: {inexact!r} is not an object of collective -> why")
    rel = ints("release", 2)
    return Build(text("name"), text("version"), text("fingerprint"), text("library"), text("file"),
                 (rel[0], rel[1]), text("truth"), text("checked"), ints("ranks"), ints("sizes"), tuple(exact),
                 {str(k): v for k, v in inexact.items()})


def read(path: str | os.PathLike) -> list[Build]:
    """The builds of a conformance file (none where the file does not exist)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise RankmapError(f"cannot read {p}: {e.strerror}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise RankmapError(f"{p}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise RankmapError(f"{p}: not a {FORMAT} file (field 'format')")
    if doc.get("version") != VERSION:
        raise RankmapError(f"{p}: version {doc.get('version')!r} is not {VERSION} (field 'version')")
    builds = doc.get("builds")
    if not isinstance(builds, list):
        raise RankmapError(f"{p}: field 'builds' is not a list")
    return [_build(b, f"{p}: builds[{i}]") for i, b in enumerate(builds)]


def write(path: str | os.PathLike, builds: list[Build]) -> None:
    """Write ``builds`` whole, through a temporary file (a reader never sees half of it)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + f".{os.getpid()}.tmp")
    doc = {"format": FORMAT, "version": VERSION, "builds": [b.to_dict() for b in builds]}
    tmp.write_text(dumps(doc, depth=3))
    os.replace(tmp, p)


def put(path: str | os.PathLike, build: Build) -> None:
    """Add ``build`` to the file, in place of an earlier record of the same build."""
    try:
        kept = read(path)
    except RankmapError as e:
        raise RankmapError(f"{e}; nothing was recorded (remove the file to record afresh)") from None
    write(path, [b for b in kept if b.key != build.key] + [build])
