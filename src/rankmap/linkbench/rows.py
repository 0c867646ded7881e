"""The one format of benchmark results: a :class:`Row` per measurement, a :class:`BenchRun` per run.

Every result of ``rankmap bench`` (JSON, the store, the dashboard, ``topo --measured``) is a row with
``benchmark`` (what was measured), ``size`` (bytes), ``buffer`` and either ``latency_us`` or
``bandwidth_GBps`` (GB = 1e9 bytes, per direction), plus what locates it: ``src``/``dst`` (GPU
indices, -1 = host memory) for ``bench p2p``; ``library`` (``cuda``, ``mpi``, ``nccl``); for
collectives in nccl-tests' terms ``algbw_GBps`` and ``busbw_GBps``; ``total_GBps`` for
bidirectional figures (both directions added, as nvbandwidth and OSU's bibw print them).

``buffer`` is ``host``, ``device``, ``device-staged`` or ``device-ipc`` for MPI and NCCL rows (see
``native/linkbench/mpi_bench.c``), ``device`` for GPU-to-GPU copies and ``pinned`` / ``pageable`` for
host<->device copies.

A run's JSON (:meth:`BenchRun.to_json`: ``--format json``, and the file of results the store could
not take) is read back by :func:`read_run`, which names the file and the field at fault.
"""

from __future__ import annotations

import json
import socket
import statistics
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from rankmap.errors import RankmapError

FORMAT = "rankmap-bench"
VERSION = 1                 # "created" (when it was measured) came later: a run without it is still version 1
KINDS = ("p2p", "mpi", "nccl")
BUFFERS = ("host", "device", "device-staged", "device-ipc", "pinned", "pageable")


def utc_stamp() -> str:
    """Now, as the store gives times back: UTC, ISO 8601 with microseconds and ``Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Row:
    benchmark: str
    size: int
    buffer: str
    library: str
    latency_us: float | None = None
    bandwidth_GBps: float | None = None
    src: int | None = None
    dst: int | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    total_GBps: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)   # iterations, window, samples, min/max, ...

    def to_json(self) -> dict[str, Any]:
        """The JSON row: unset figures are left out, so a row carries latency_us or bandwidth_GBps."""
        d = {k: v for k, v in asdict(self).items() if v is not None and k != "extra"}
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Row":
        names = {f for f in cls.__dataclass_fields__ if f != "extra"}
        return cls(**{k: v for k, v in d.items() if k in names},
                   extra={k: v for k, v in d.items() if k not in names})


@dataclass
class BenchRun:
    """One run of a benchmark verb: what ran, what could not and why, the machine, the rows."""

    kind: str                                   # p2p | mpi | nccl
    rows: list[Row]
    machine: dict[str, Any]
    ran: list[str]
    not_run: list[str]                          # "what: why"
    command: str = ""
    host: str = field(default_factory=socket.gethostname)
    notes: list[str] = field(default_factory=list)
    created: str = field(default_factory=utc_stamp)   # when it was measured: a run is made once it ends

    def summary(self) -> str:
        """The one line a user reads first: what was measured and what was not."""
        ran = ", ".join(self.ran) if self.ran else "nothing"
        line = f"bench {self.kind}: measured {ran}"
        if self.not_run:
            line += "; not measured: " + "; ".join(self.not_run)
        return line

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "kind": self.kind, "host": self.host, "command": self.command,
                "created": self.created, "machine": self.machine, "ran": self.ran, "not_run": self.not_run,
                "notes": self.notes, "rows": [r.to_json() for r in self.rows]}


def read_run(path: str | Path) -> dict[str, Any]:
    """A run's JSON document from ``path``, checked: what the store keeps of it has the types it needs.

    Raises :class:`RankmapError` naming the file and the field at fault."""
    path = Path(path)

    def fail(where: str, why: str) -> RankmapError:
        return RankmapError(f"{path}: {where}: {why}")

    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise RankmapError(f"cannot read {path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RankmapError(f"{path}: not JSON ({e}): not a rankmap bench run") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise fail("format", f"expected {FORMAT!r}, got {got!r}: not a rankmap bench run")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
        raise fail("version", f"{version!r} is not one this rankmap reads (1..{VERSION}): upgrade rankmap")
    if doc.get("kind") not in KINDS:
        raise fail("kind", f"{doc.get('kind')!r} is not one of {', '.join(KINDS)}")
    fields: tuple[tuple[str, type], ...] = (("host", str), ("command", str), ("created", str), ("machine", dict),
                                            ("ran", list), ("not_run", list), ("notes", list))
    for key, kind in fields:
        if doc.get(key) is not None and not isinstance(doc[key], kind):
            raise fail(key, f"expected {'text' if kind is str else 'a JSON ' + ('object' if kind is dict else 'list')}, "
                            f"got {type(doc[key]).__name__}")
    if doc.get("created") is not None:
        try:
            datetime.fromisoformat(doc["created"])
        except ValueError:
            raise fail("created", f"{doc['created']!r} is not an ISO 8601 time") from None
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise fail("rows", "expected a JSON list of rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise fail(f"rows[{i}]", "expected a JSON object")
        for key, kind in (("benchmark", str), ("buffer", str), ("library", str), ("size", int)):
            if not isinstance(row.get(key), kind) or isinstance(row.get(key), bool):
                raise fail(f"rows[{i}].{key}", f"missing or not {'a whole number' if kind is int else 'text'}")
        for key, kinds in (("src", int), ("dst", int), ("latency_us", (int, float)), ("bandwidth_GBps", (int, float)),
                           ("total_GBps", (int, float)), ("algbw_GBps", (int, float)), ("busbw_GBps", (int, float))):
            v = row.get(key)
            if v is not None and (not isinstance(v, kinds) or isinstance(v, bool)):
                raise fail(f"rows[{i}].{key}", f"expected a number, got {type(v).__name__}")
    return doc


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def gbps(nbytes: float, ns: float) -> float:
    """GB/s (1e9 bytes per second) of ``nbytes`` moved in ``ns`` nanoseconds."""
    return nbytes / ns if ns > 0 else float("nan")


def human_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"
