"""What the store reads of what it is given, declared once.

The store never imports the capture layer: :meth:`Store.append` (through :class:`~rankmap.store.batch.Batch`)
and :meth:`Store.ingest` take any :class:`RankCounts`, :meth:`Store.add_link_samples` any
:class:`LinkCounts`, :meth:`Store.save_bench_run` a :class:`BenchRunDoc`. The record reader's
``RankRecord`` and ``TrafficRow`` (``rankmap.formats.record``) are such counts as they are: the
totals of a file, the delta of a poll, the NCCL pair model's re-ranked records, the CUDA activity
totals. :class:`RankTotals` is one made by hand (a synthetic job, the demo, tests).

Everything here is read, never written back: the protocols declare read-only attributes, so a
frozen dataclass fits them as well as a plain one. Traffic rows are read by position (the hot path
of a streaming ingest: thousands a second), so they are tuples, :data:`TrafficCount`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, NotRequired, Protocol, Required, Sequence, TypedDict

#: A rank's counters with one peer, one class, one operation, read by position:
#: ``(peer, class, operation, mem, direction, bytes, messages[, label])``, of which the reader's
#: ``TrafficRow`` is the named form. ``send`` rows are the rank's sends (src = the rank); of the
#: ``recv`` rows only one-sided ones (class ``rma``: an ``MPI_Get`` moves bytes from the target, which
#: records nothing, to the origin) are kept. ``label`` says where the pair comes from (``call``,
#: ``library``, ``mirror``, ``model``); a row without one (7 long, or None) stores NULL.
TrafficCount = tuple[int, str, str, str, str, int, int] | tuple[int, str, str, str, str, int, int, str | None]
#: one timeline entry of a rank: (bucket, peer, class, bytes); the store keeps it per sending rank
TimelineCount = tuple[int, int, str, int]
#: one MPI_T sample: (variable id, t_ns, the values of its instances)
PvarSample = tuple[int, int, Sequence[int | float]]


class PvarDefinition(Protocol):
    """An MPI_T performance variable as the samples name it (``rankmap.formats.record.PvarDef``)."""

    @property
    def name(self) -> str: ...
    @property
    def cls(self) -> str: ...


class RankCounts(Protocol):
    """One rank's counters of one capture source: totals, or the delta of a few polls."""

    @property
    def world_rank(self) -> int: ...
    @property
    def source(self) -> str: ...                                # mpi, nccl, cuda
    @property
    def host(self) -> str | None: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def start_ns(self) -> int | None: ...                       # wall clock of its bucket 0 (<= the rank's start)
    @property
    def elapsed_ns(self) -> int: ...
    @property
    def finalized(self) -> bool: ...
    @property
    def traffic(self) -> Sequence[TrafficCount]: ...
    @property
    def op_time(self) -> Mapping[str, tuple[int, int]]: ...     # operation -> (calls, ns)
    @property
    def payload(self) -> Mapping[str, int]: ...                 # operation -> bytes it carried
    @property
    def histogram(self) -> Mapping[str, Sequence[int]]: ...     # operation -> calls per size bin
    @property
    def timeline(self) -> Sequence[TimelineCount]: ...
    @property
    def problems(self) -> Sequence[str]: ...
    @property
    def pvar_defs(self) -> Mapping[int, PvarDefinition]: ...
    @property
    def pvar_samples(self) -> Sequence[PvarSample]: ...


class CudaCounts(RankCounts, Protocol):
    """A rank's CUDA activity totals (source ``cuda``): copies, kernels, their timeline."""

    @property
    def meta(self) -> Mapping[str, str]: ...                    # cuda.activity, cuda.records, cuda.device.N
    @property
    def cuda_copies(self) -> Sequence[tuple[str, str, str, int, int, int, int, int]]: ...
    @property
    def cuda_kernels(self) -> Sequence[tuple[int, str, int, int]]: ...
    @property
    def cuda_timeline(self) -> Sequence[tuple[int, str, int, int, int]]: ...


@dataclass
class RankTotals:
    """A :class:`RankCounts` made by hand: a rank's totals for :meth:`Store.ingest`."""

    world_rank: int
    traffic: Sequence[TrafficCount] = ()
    source: str = "mpi"
    host: str | None = None
    pid: int | None = None
    start_ns: int | None = None
    elapsed_ns: int = 0
    finalized: bool = True
    op_time: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    payload: Mapping[str, int] = field(default_factory=dict)
    histogram: Mapping[str, Sequence[int]] = field(default_factory=dict)
    timeline: Sequence[TimelineCount] = ()
    problems: Sequence[str] = ()
    pvar_defs: Mapping[int, PvarDefinition] = field(default_factory=dict)
    pvar_samples: Sequence[PvarSample] = ()


class LinkCounts(TypedDict):
    """One link counter sample of the link sampler: a GPU's NVLink or PCIe bytes at ``t_ns``."""

    t_ns: int
    device: int
    link: str                                                   # nvlink, pcie
    tx_bytes: NotRequired[int | None]
    rx_bytes: NotRequired[int | None]


class BenchRunDoc(TypedDict, total=False):
    """One benchmark run in the JSON form of ``rankmap.linkbench.rows.BenchRun`` (``docs/bench.md``).

    ``rows`` are the JSON rows: ``benchmark``, ``library``, ``buffer``, ``src``, ``dst``, ``size``,
    the figures (``latency_us``, ``bandwidth_GBps``, ...) and whatever else a row carries.
    ``created`` is when it was measured (UTC, ISO 8601); a run without it is dated when stored."""

    kind: Required[str]                                         # p2p, mpi, nccl
    host: str | None
    command: str | None
    created: str
    machine: dict[str, Any]
    ran: list[str]
    not_run: list[str]
    notes: list[str]
    rows: list[dict[str, Any]]
