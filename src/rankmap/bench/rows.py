"""The one format of benchmark results: a :class:`Row` per measurement, a :class:`BenchRun` per run.

Every result of ``rankmap bench`` (JSON, the store, the dashboard, ``topo --measured``) is a row with
``benchmark`` (what was measured), ``size`` (bytes), ``buffer`` and either ``latency_us`` or
``bandwidth_GBps`` (GB = 1e9 bytes, per direction), plus what locates it: ``src``/``dst`` (GPU
indices, -1 = host memory) for ``bench p2p``; ``library`` (``cuda``, ``mpi``, ``nccl``); for
collectives in nccl-tests' terms ``algbw_GBps`` and ``busbw_GBps``; ``total_GBps`` for
bidirectional figures (both directions added, as nvbandwidth and OSU's bibw print them).

``buffer`` is ``host``, ``device``, ``device-staged`` or ``device-ipc`` for MPI and NCCL rows (see
``native/bench/mpi_bench.c``), ``device`` for GPU-to-GPU copies and ``pinned`` / ``pageable`` for
host<->device copies.
"""

from __future__ import annotations

import socket
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

FORMAT = "rankmap-bench"
VERSION = 1
BUFFERS = ("host", "device", "device-staged", "device-ipc", "pinned", "pageable")


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

    def summary(self) -> str:
        """The one line a user reads first: what was measured and what was not."""
        ran = ", ".join(self.ran) if self.ran else "nothing"
        line = f"bench {self.kind}: measured {ran}"
        if self.not_run:
            line += "; not measured: " + "; ".join(self.not_run)
        return line

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "kind": self.kind, "host": self.host, "command": self.command,
                "machine": self.machine, "ran": self.ran, "not_run": self.not_run, "notes": self.notes,
                "rows": [r.to_json() for r in self.rows]}


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
