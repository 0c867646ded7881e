"""The link sampler: NVLink and PCIe bytes of every GPU, read in rankmap's process while jobs run.

Two ways to read them, chosen per node (``open_source``):

* **GPM** (GPU Performance Monitoring, Hopper and newer): ``nvmlGpmSampleGet`` snapshots the
  GPU's counters in about 30 us, and ``nvmlGpmMetricsGet`` turns two snapshots into rates
  (``NVML_GPM_METRIC_NVLINK_TOTAL_TX/RX_PER_SEC``, ``NVML_GPM_METRIC_PCIE_TX/RX_PER_SEC``,
  documented in MiB/s; the NVLink ones are measured to be in units of 1,024,000 B/s, see
  ``GPM_NVLINK_UNIT``). GPM gives rates, not byte counts, so :class:`GpmSource` integrates them:
  bytes += rate x unit x the host time between the two snapshots. That is exact up to the difference between
  the host's and the GPU's view of each interval; consecutive intervals share their end points,
  so the error does not grow with the number of samples while the rate stays steady (the GPU
  check in ``gpu/monitor.sh`` measures it against the DATA counters, which count what GPM counts: payload).
* **Field values** (every NVLink GPU): ``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX`` count payload
  KiB over all links (scope ``0xFFFFFFFF``); ``NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES`` are 32-bit and
  wrap (every ~78 ms at 55 GB/s). One ``nvmlDeviceGetFieldValues`` call per GPU reads all four,
  but it costs ~0.7 ms per GPU on an H200 VM, 20x a GPM snapshot; hence GPM wherever it exists.

**Driver stalls.** While a job creates its CUDA contexts and its NCCL communicators (and again
when it tears them down), a single NVML read can spin 3-100 ms of CPU inside the driver, waiting
behind the job's own driver work; at 10 Hz a handful of those outweigh every other read of a job's
life. Two rules keep that cheap and exact: :class:`LinkSampler` leaves every GPU alone for
``hold_s`` (1 s) after a read that burnt more than ``stall_ms`` (2 ms) of CPU, so a burst of stalls
costs one slow read instead of ten; it also holds them for ``open_hold_s`` (0.5 s) after another
process opened or closed a GPU's device file (:mod:`rankmap.counters.devwatch`), which comes before
the first stalled read of a burst, up to ``open_cap_s`` (2 s) of continuous hold; and :class:`GpmSource`
does not use a snapshot whose call took longer than ``SNAP_MAX_NS`` as an end point of the integral
(the snapshot lies somewhere in a call of milliseconds, so its instant is unknown), the next good
snapshot closes the interval instead. GPM
rates between snapshots up to 4 s apart were measured exact on 2x H200 (within 0.05 % of the DATA
counters, ``docs/benchmarks.md``), so the gap loses nothing.

Whatever the source, the sampler hands out **cumulative bytes since it started**, with counter
wrap and counter resets (``nvidia-smi nvlink -r``) folded in by :class:`Unwrap`, so consumers
(the store, the dashboard, ``/metrics``) never see a counter go backwards.
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from rankmap.counters import gpm_native
from rankmap.counters.devwatch import DeviceFileWatch, gpu_device_files
from rankmap.counters.gpm_native import NativeReader
from rankmap.errors import RankmapError

ALL_LINKS = 0xFFFFFFFF
PCIE_WRAP = 1 << 32
MIB = 1 << 20
# Bytes per unit of NVML_GPM_METRIC_NVLINK_TOTAL_TX/RX_PER_SEC. NVML documents "MiB/s" (2**20 B/s), but
# the rate is bytes / 1024 / 1000 per second. Measured on 2x H200 (NV18), driver 580.159.04, in two runs
# of gpu/monitor.sh with NCCL all-reduces of 1 GiB: the GPM integral taken with 2**20 B per unit over
# NVML's exact NVLink DATA (payload) counter deltas of the same span was 1.02399 / 1.02583 (monitor,
# GPU0 / GPU1), 1.02428 / 1.02600 (profile sampler), 1.02408 / 1.02384 (profile sampler, first run):
# 1024 / 1000 = 1.024 every time, up to the integration's own error, while the RAW counters (payload
# and protocol overhead) were 1.21-1.22 x DATA. So GPM counts payload, in units of 1,024,000 B/s.
GPM_NVLINK_UNIT = 1024 * 1000
# Bytes per unit of NVML_GPM_METRIC_PCIE_TX/RX_PER_SEC, documented "MiB/s" too. Measured on one H200, driver
# 580.159.04 (bench/gpm_pcie_unit.py: 1 GiB copies between pinned host memory and the GPU at 55 GB/s for
# 2-8 s per direction, GPM read every 100 ms / 250 ms / 1 s): payload bytes per rate unit 1.0125e6 /
# 1.0245e6, 1.0021e6 / 1.0141e6 and 0.9635e6 / 0.9780e6 (device to host / host to device). So the rates
# count payload in about MB/s (10**6 B/s), within -3.7 % / +2.5 % of it depending on the interval (not as
# exact as the NVLink rates: an estimate). NVML's PCIe byte counters, read every 20 ms, counted 9.4 % /
# 7.8 % more than the payload (protocol bytes). Snapshots 50 ms apart gave half the bytes (2.0e6 B per
# unit): the PCIe rates are only right between snapshots at least GPM_MIN_INTERVAL_S apart.
GPM_PCIE_UNIT = 1_000_000
GPM_MIN_INTERVAL_S = 0.1
GPM_UNITS = (GPM_NVLINK_UNIT, GPM_NVLINK_UNIT, GPM_PCIE_UNIT, GPM_PCIE_UNIT)
# A GPM snapshot whose nvmlGpmSampleGet call took longer than this (wall) is not used as an end point:
# its instant is unknown within the call, and a misplaced end point moves bytes between intervals
# (or, where the rate changes at that moment, adds or loses them). Normal calls take 0.04-0.3 ms.
SNAP_MAX_NS = 1_000_000
# ... unless the last good snapshot is this old: then the slow one is taken as it is (GPM was measured
# exact across 4 s; a driver that stays slow must not freeze the totals). Above LinkSampler's hold
# (1 s), so that the first read after a hold may still be skipped.
SNAP_MAX_GAP_NS = 2_000_000_000
SOURCES = ("auto", "gpm", "fields")
READERS = ("auto", "native", "python")  # who does a GPM read (GpmSource)
READER_ENV = "RANKMAP_GPM_READER"


@dataclass(frozen=True)
class Counters:
    """Cumulative bytes of one GPU as its source counts them (any zero point; None = not available)."""

    nvlink_tx: int | None
    nvlink_rx: int | None
    pcie_tx: int | None
    pcie_rx: int | None


@dataclass(frozen=True)
class LinkSample:
    """Cumulative bytes of one GPU since the sampler started, ``t_ns`` after its first sample."""

    t_ns: int
    gpu: int
    nvlink_tx: int | None
    nvlink_rx: int | None
    pcie_tx: int | None
    pcie_rx: int | None


@dataclass(frozen=True)
class GpuInfo:
    """What ``/metrics`` labels a GPU with (dcgm-exporter's ``gpu``, ``UUID``, ``modelName``)."""

    index: int
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""


class GpmReaderError(RankmapError):
    """The GPM reader asked for (``RANKMAP_GPM_READER``) is unknown or cannot be used: a mistake to
    report, not a reason to fall back to the field values."""


class CounterSource(Protocol):
    """Where counters come from: NVML (GPM or field values) on a node, a script in tests."""

    kind: str

    def gpu_count(self) -> int: ...

    def read(self, gpu: int) -> Counters: ...


class Unwrap:
    """A hardware counter turned into a monotone 64-bit total.

    ``bits`` is the counter's width: a smaller reading than the last is a wrap when the counter
    is narrow (at most one wrap between two readings is assumed: the sampling interval must be
    shorter than 2**bits bytes / link bandwidth), and a reset to zero when it is 64 bits wide
    (nothing that counts bytes wraps 64 bits), so the new reading is all new bytes.
    """

    def __init__(self, bits: int) -> None:
        self.modulus = 1 << bits
        self.narrow = bits < 64
        self.last: int | None = None
        self.total = 0

    def __call__(self, raw: int | None) -> int | None:
        if raw is None:
            return None
        if self.last is not None:
            if raw >= self.last:
                self.total += raw - self.last
            elif self.narrow:
                self.total += (raw - self.last) % self.modulus
            else:
                self.total += raw
        self.last = raw
        return self.total


def _import_nvml() -> Any:
    try:
        import pynvml
    except ImportError as e:  # pragma: no cover - a dependency of the package
        raise RankmapError("nvidia-ml-py is not installed: pip install nvidia-ml-py") from e
    return pynvml


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class _Nvml:
    """An initialised NVML with the handles of every GPU; shared by both sources."""

    def __init__(self, nvml: Any = None) -> None:
        self.nvml = nvml or _import_nvml()
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as e:
            raise RankmapError(f"NVML is not available ({e}): the link sampler needs an NVIDIA driver") from None
        self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.nvml.nvmlDeviceGetCount())]

    def gpus(self) -> list[GpuInfo]:
        out = []
        for i, h in enumerate(self.handles):
            def ask(fn: str, *attr: str) -> str:
                try:
                    v = getattr(self.nvml, fn)(h)
                    for a in attr:
                        v = getattr(v, a)
                    return _text(v)
                except Exception:  # noqa: BLE001 - a label we cannot read stays empty
                    return ""
            out.append(GpuInfo(i, ask("nvmlDeviceGetUUID"), ask("nvmlDeviceGetName"),
                               ask("nvmlDeviceGetPciInfo", "busId")))
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down is best effort
            pass


class FieldSource(_Nvml):
    """Counters read with ``nvmlDeviceGetFieldValues``: NVLink DATA KiB (all links) and PCIe bytes."""

    kind = "fields"
    gap_safe = False  # the 32-bit PCIe counters wrap every ~78 ms at full speed: no read may be skipped

    def __init__(self, nvml: Any = None) -> None:
        super().__init__(nvml)
        n = self.nvml
        self._fields = [
            (n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
            (n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
            (n.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
            (n.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0),
        ]
        # NVLink counters are 64-bit (KiB), the PCIe byte counters 32-bit
        self._unwrap = [[Unwrap(64), Unwrap(64), Unwrap(32), Unwrap(32)] for _ in self.handles]

    def gpu_count(self) -> int:
        return len(self.handles)

    def _value(self, v: Any) -> int | None:
        if v.nvmlReturn != 0:
            return None
        n = self.nvml
        vt = v.valueType
        if vt == n.NVML_VALUE_TYPE_UNSIGNED_INT:
            return int(v.value.uiVal)
        if vt == n.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
            return int(v.value.sllVal)
        if vt == n.NVML_VALUE_TYPE_UNSIGNED_LONG:
            return int(v.value.ulVal)
        return int(v.value.ullVal)

    def raw(self, gpu: int) -> list[int | None]:
        """The four raw readings (NVLink in KiB, PCIe as 32-bit byte counts), one NVML call."""
        return [self._value(v) for v in self.nvml.nvmlDeviceGetFieldValues(self.handles[gpu], self._fields)]

    def nvlink_data_raw(self, gpu: int) -> list[int | None]:
        """NVLink DATA TX/RX (payload) and RAW TX/RX (payload and protocol overhead) KiB, all links,
        in one NVML call: the exact counters a GPM integral is checked against."""
        n = self.nvml
        fields = [(n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS), (n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
                  (getattr(n, "NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX", 140), ALL_LINKS),
                  (getattr(n, "NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX", 141), ALL_LINKS)]
        return [self._value(v) for v in n.nvmlDeviceGetFieldValues(self.handles[gpu], fields)]

    def read(self, gpu: int) -> Counters:
        tx, rx, ptx, prx = (u(v) for u, v in zip(self._unwrap[gpu], self.raw(gpu)))
        return Counters(None if tx is None else tx * 1024, None if rx is None else rx * 1024, ptx, prx)


class GpmSource(_Nvml):
    """Counters integrated from GPM rates: one ``nvmlGpmSampleGet`` per GPU per read.

    Each GPU keeps two sample buffers and alternates between them; a read snapshots into the
    older one and asks ``nvmlGpmMetricsGet`` for the four rates between the two snapshots.

    ``reader`` (else ``$RANKMAP_GPM_READER``, else ``auto``) picks who does that: ``native``, one C
    call per read (:mod:`rankmap.counters.gpm_native`: the Python around the driver calls is the
    part of a read that a 10 Hz sampler pays cold), ``python`` (:meth:`read_python`, the reference),
    or ``auto``: native where it builds and NVML's entry points resolve, else Python.
    ``reader`` says which one reads, ``reader_why`` why.
    """

    kind = "gpm"
    gap_safe = True  # rates between any two snapshots: reads may be skipped (LinkSampler's stall guard)

    def __init__(self, nvml: Any = None, reader: str | None = None) -> None:
        super().__init__(nvml)
        n = self.nvml
        try:
            unsupported = [i for i, h in enumerate(self.handles)
                           if not n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice]
        except (n.NVMLError, AttributeError) as e:
            self.close()
            raise RankmapError(f"NVML GPM is not available here ({e})") from None
        if unsupported or not self.handles:
            self.close()
            raise RankmapError(f"NVML GPM is not supported on GPU {unsupported[0] if unsupported else '-'} "
                               f"(GPM needs Hopper or newer)")
        self._ids = [n.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, n.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
                     n.NVML_GPM_METRIC_PCIE_TX_PER_SEC, n.NVML_GPM_METRIC_PCIE_RX_PER_SEC]
        self._get = n.c_nvmlGpmMetricsGet_t()
        self._get.version = n.NVML_GPM_METRICS_GET_VERSION
        self._get.numMetrics = len(self._ids)
        self._bufs: list[list[Any]] = []
        self._prev_t: list[int] = []
        self._totals: list[list[float]] = []
        self._ok: list[list[bool | None]] = []  # per metric: None until the first read answers
        self._last: list[Counters | None] = [None] * len(self.handles)
        self._gaps = 0  # see the properties gaps and discarded (the Python read's share)
        self._discarded = 0
        self._native: list[NativeReader] = []
        try:
            for h in self.handles:
                bufs = [n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()]
                self._bufs.append(bufs)
                t_a = time.monotonic_ns()
                n.nvmlGpmSampleGet(h, bufs[0])
                self._prev_t.append((t_a + time.monotonic_ns()) // 2)
                self._totals.append([0.0] * 4)
                self._ok.append([None] * 4)
        except n.NVMLError as e:
            self.close()
            raise RankmapError(f"NVML GPM sampling failed ({e})") from None
        self.reader, self.reader_why = self._choose_reader(reader)
        if self.reader == "native":
            self.read = self.read_native  # type: ignore[method-assign]

    def _choose_reader(self, reader: str | None) -> tuple[str, str]:
        """``native`` where the C reader builds and NVML's entry points resolve, else ``python``; and why."""
        want = (reader or os.environ.get(READER_ENV) or "auto").strip().lower()
        if want not in READERS:
            self.close()
            raise GpmReaderError(f"{READER_ENV}={want!r}: choose one of {', '.join(READERS)}")
        if want == "python":
            return "python", f"asked for ({READER_ENV} or the caller)"
        n = self.nvml
        try:
            lib = gpm_native.library()
            entries = (gpm_native.entry_point(n, "nvmlGpmSampleGet"), gpm_native.entry_point(n, "nvmlGpmMetricsGet"))
            for g, h in enumerate(self.handles):
                self._native.append(NativeReader(
                    lib, entries, h, self._bufs[g], self._prev_t[g], self._ids, GPM_UNITS, SNAP_MAX_NS,
                    SNAP_MAX_GAP_NS, n.NVML_GPM_METRICS_GET_VERSION, int(getattr(n, "NVML_GPM_METRIC_MAX", 4))))
        except Exception as e:  # noqa: BLE001 - whatever stops the C reader, the Python one reads
            self._close_native()
            if want == "native":
                self.close()
                raise GpmReaderError(f"{READER_ENV}=native: the native GPM reader cannot be used here: {e}") from None
            return "python", f"the native reader cannot be used here: {e}"
        return "native", "one C call per read (native/monitor/gpm_read.c)"

    def gpu_count(self) -> int:
        return len(self.handles)

    @property
    def gaps(self) -> int:
        """Intervals a supported metric failed to answer (their bytes are missing), all GPUs."""
        return self._gaps + sum(r.out[gpm_native.OUT_GAPS] for r in self._native)

    @property
    def discarded(self) -> int:
        """Snapshots not used as end points (their call stalled, see ``SNAP_MAX_NS``), all GPUs."""
        return self._discarded + sum(r.out[gpm_native.OUT_DISCARDED] for r in self._native)

    def read_native(self, gpu: int) -> Counters:
        """:meth:`read_python` in one C call (``native/monitor/gpm_read.c``): the same totals and counts."""
        rc = self._native[gpu].read()
        if rc:
            if rc == gpm_native.DISCARDED:
                return self._last[gpu]  # type: ignore[return-value]
            raise self.nvml.NVMLError(rc)  # as pynvml raises it: nothing changed
        tx, rx, ptx, prx, m = self._native[gpu].out[:5]
        c = self._last[gpu] = Counters(tx if m & 1 else None, rx if m & 2 else None, ptx if m & 4 else None,
                                       prx if m & 8 else None)
        return c

    def read_python(self, gpu: int) -> Counters:
        """The reference read, in Python (the fallback of :meth:`read_native`)."""
        n, g = self.nvml, self._get
        prev, cur = self._bufs[gpu]
        t_a = time.monotonic_ns()
        n.nvmlGpmSampleGet(self.handles[gpu], cur)
        t_b = time.monotonic_ns()
        now = (t_a + t_b) // 2  # the snapshot lies inside the call: its midpoint errs least
        if (t_b - t_a > SNAP_MAX_NS and now - self._prev_t[gpu] < SNAP_MAX_GAP_NS
                and self._last[gpu] is not None):
            self._discarded += 1  # a stalled call: the next good snapshot closes this interval
            return self._last[gpu]
        dt = (now - self._prev_t[gpu]) / 1e9
        for i, mid in enumerate(self._ids):
            g.metrics[i].metricId = mid
        g.sample1, g.sample2 = prev, cur
        n.nvmlGpmMetricsGet(g)
        tot, ok = self._totals[gpu], self._ok[gpu]
        for i in range(4):
            m = g.metrics[i]
            if m.nvmlReturn != 0:
                if ok[i] is None:
                    ok[i] = False  # not offered here (PCIe metrics in some VMs): None from now on
                elif ok[i]:
                    self._gaps += 1
                continue
            if ok[i] is None:
                ok[i] = True
            if ok[i] and m.value > 0:
                tot[i] += m.value * GPM_UNITS[i] * dt
        self._bufs[gpu] = [cur, prev]
        self._prev_t[gpu] = now
        c = self._last[gpu] = Counters(*(int(round(tot[i])) if ok[i] else None for i in range(4)))
        return c

    read = read_python  # replaced per instance by read_native where that is the reader

    def _close_native(self) -> None:
        for r in getattr(self, "_native", []):
            self._gaps += r.out[gpm_native.OUT_GAPS]  # the counts outlive the readers
            self._discarded += r.out[gpm_native.OUT_DISCARDED]
            r.close()
        self._native = []

    def close(self) -> None:
        self._close_native()
        for bufs in getattr(self, "_bufs", []):
            for b in bufs:
                try:
                    self.nvml.nvmlGpmSampleFree(b)
                except Exception:  # noqa: BLE001
                    pass
        self._bufs = []
        super().close()


def check_interval(source: Any, interval_s: float, option: str = "--interval") -> None:
    """A GPM source sampled faster than GPM_MIN_INTERVAL_S would count PCIe bytes wrong: a one-line error."""
    if getattr(source, "kind", None) == "gpm" and interval_s < GPM_MIN_INTERVAL_S - 1e-9:
        raise RankmapError(f"{option} {interval_s * 1e3:g}ms: NVML GPM's PCIe rates are only right between "
                           f"snapshots at least {GPM_MIN_INTERVAL_S * 1e3:g} ms apart (at 50 ms they counted half the "
                           f"bytes): sample every {GPM_MIN_INTERVAL_S * 1e3:g}ms or more, or use --source fields")


def open_source(kind: str = "auto", nvml: Any = None) -> FieldSource | GpmSource:
    """The node's counter source: ``gpm``, ``fields``, or ``auto`` (GPM where every GPU has it)."""
    if kind not in SOURCES:
        raise RankmapError(f"counter source {kind!r}: choose one of {', '.join(SOURCES)}")
    if kind in ("auto", "gpm"):
        try:
            return GpmSource(nvml)
        except GpmReaderError:
            raise
        except RankmapError:
            if kind == "gpm":
                raise
    return FieldSource(nvml)


READ_RING = 4096  # wall times of the last reads kept for the median (a fixed array: no per-read allocation)


@dataclass
class SamplerCost:
    """What sampling costs rankmap, split so that each figure says what it measures.

    * wall time inside the counter reads: what a sample's reads take from start to end, including
      waits that cost no CPU (the driver's lock held by a job creating its context, the thread
      preempted by a busy job, the GIL held by another thread of the process);
    * the sampler thread's CPU time inside the reads: the reads' own cost (the driver's ioctl
      included), the figure the per-sample target applies to;
    * the sampler thread's CPU time in the ``on_sample`` callback (store writes) and in total.
    """

    samples: int = 0          # sample_once calls
    reads: int = 0            # GPU reads (samples x GPUs)
    read_ns: int = 0          # wall time inside source.read, all GPUs
    read_cpu_ns: int = 0      # sampler thread CPU time inside source.read, all GPUs
    max_read_ns: int = 0      # slowest single GPU read (wall)
    callback_cpu_ns: int = 0  # sampler thread CPU time in on_sample (the store writes)
    thread_cpu_ns: int = 0    # CPU time of the sampler thread (reads, callbacks, bookkeeping)
    wall_ns: int = 0          # from the first to the last sample
    stalls: int = 0           # reads that burnt more than the sampler's stall_ms of CPU
    held: int = 0             # ticks skipped because a read had just stalled (hold_s)
    held_open: int = 0        # ticks skipped because another process had just opened or closed a GPU's device file
    open_capped: int = 0      # ticks read all the same, the open hold having lasted open_cap_s
    open_watch: str | None = None  # what the device-file watch watches, or why it is off (None: not asked for)
    reader: str | None = None  # who reads GPM: "native" (one C call) or "python" (GpmSource.reader)
    ring: Any = field(default_factory=lambda: array("q", bytes(8 * READ_RING)), repr=False)

    def add_read(self, wall_ns: int, cpu_ns: int) -> None:
        self.ring[self.reads % READ_RING] = wall_ns
        self.reads += 1
        self.read_ns += wall_ns
        self.read_cpu_ns += cpu_ns
        if wall_ns > self.max_read_ns:
            self.max_read_ns = wall_ns

    @property
    def per_gpu_sample_ms(self) -> float | None:
        """Mean wall time of one GPU read (waits included)."""
        return self.read_ns / self.reads / 1e6 if self.reads else None

    @property
    def per_gpu_sample_cpu_ms(self) -> float | None:
        """Mean CPU time of one GPU read: the sampler's own cost per GPU per sample."""
        return self.read_cpu_ns / self.reads / 1e6 if self.reads else None

    @property
    def median_read_ms(self) -> float | None:
        """Median wall time of one GPU read over the last ``READ_RING`` reads."""
        if not self.reads:
            return None
        return statistics.median(self.ring[: min(self.reads, READ_RING)]) / 1e6

    @property
    def cpu_share(self) -> float | None:
        """The sampler thread's CPU time / wall time (0.01 = 1 % of one core)."""
        return self.thread_cpu_ns / self.wall_ns if self.wall_ns > 0 else None

    def as_dict(self) -> dict:
        w = self.wall_ns
        return {"samples": self.samples, "reads": self.reads, "per_gpu_sample_ms": self.per_gpu_sample_ms,
                "per_gpu_sample_cpu_ms": self.per_gpu_sample_cpu_ms, "median_read_ms": self.median_read_ms,
                "max_read_ms": self.max_read_ns / 1e6, "thread_cpu_s": self.thread_cpu_ns / 1e9,
                "callback_cpu_s": self.callback_cpu_ns / 1e9, "wall_s": w / 1e9, "cpu_share": self.cpu_share,
                "read_cpu_share": self.read_cpu_ns / w if w > 0 else None,
                "callback_cpu_share": self.callback_cpu_ns / w if w > 0 else None,
                "stalls": self.stalls, "held": self.held, "held_open": self.held_open,
                "open_capped": self.open_capped, "open_watch": self.open_watch, "reader": self.reader}


@dataclass
class LinkSampler:
    """Samples every GPU's counters every ``interval_s`` in a background thread.

    ``on_sample`` (optional) receives each batch of samples as they are taken, e.g. to stream
    them into the store. ``keep`` = False keeps only the last sample per GPU (a monitor that
    runs for days). :meth:`stop` returns the samples kept.

    A read that burns more than ``stall_ms`` of CPU means the driver is busy with a job's set-up
    (module docstring): the rest of that tick's GPUs are left unread and no GPU is read for
    ``hold_s``; the next reads carry the bytes of the gap. Only for a source that says it is
    ``gap_safe`` (GPM; not the field values, whose PCIe counters wrap between two skipped reads);
    ``stall_ms=None`` reads every tick whatever the source.

    With that guard on, the sampler also watches ``open_paths`` (default: the GPUs' own device files,
    ``/dev/nvidia<N>``, never ``/dev/nvidiactl``; see :mod:`rankmap.counters.devwatch`) and takes no
    sample for ``open_hold_s`` after another process opened or closed one, which it does while
    creating a CUDA context and while tearing one down, before the driver stalls. A hold that has
    lasted ``open_cap_s`` lets one tick read all the same, so a job that keeps opening the files
    cannot starve the monitor. The hold is for the
    whole tick, every GPU, as the stall hold is: which GPUs' reads a context's set-up on one GPU
    stalls was not measured, and stalls come in bursts across the GPUs. ``open_hold_s=None``: no
    watch.
    """

    source: CounterSource
    interval_s: float = 0.1
    on_sample: Callable[[Sequence[LinkSample]], None] | None = None
    keep: bool = True
    samples: list[LinkSample] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cost: SamplerCost = field(default_factory=SamplerCost)
    stall_ms: float | None = 2.0
    hold_s: float = 1.0
    open_hold_s: float | None = 0.5
    open_cap_s: float = 2.0
    open_paths: Sequence[str] | None = None  # None: gpu_device_files() of /dev

    def __post_init__(self) -> None:
        self._hold_until = 0         # monotonic ns before which the loop takes no sample
        self._guard = self.stall_ms is not None and getattr(self.source, "gap_safe", False)
        self.open_watch: DeviceFileWatch | None = None  # set up by start() (the loop's watch)
        self._open_until = 0         # monotonic ns before which another process's open holds the loop
        self._open_since: int | None = None  # when the current continuous open hold began
        self.cost.reader = getattr(self.source, "reader", None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first: dict[int, Counters] = {}
        self._last: dict[int, LinkSample] = {}
        self.t0_ns = 0               # monotonic time of the first sample
        self.t0_unix_ns = 0          # the same instant on the wall clock (to line samples up with jobs)
        self._lock = threading.Lock()

    @staticmethod
    def _since(first: int | None, now: int | None) -> int | None:
        return None if first is None or now is None else now - first

    def sample_once(self, every_gpu: bool = True) -> list[LinkSample]:
        """Take one sample of every GPU (the first call sets the zero point).

        ``every_gpu`` = False (the sampling loop) stops at a read that stalled (``stall_ms``) and
        holds the sampler for ``hold_s``; the first and the last sample always read every GPU."""
        with self._lock:
            cpu0 = time.thread_time_ns()
            now = time.monotonic_ns()
            if not self.cost.samples:
                self.t0_ns, self.t0_unix_ns = now, time.time_ns()
            batch: list[LinkSample] = []
            for g in range(self.source.gpu_count()):
                c0, r0 = time.thread_time_ns(), time.perf_counter_ns()
                c = self.source.read(g)
                cpu = time.thread_time_ns() - c0
                self.cost.add_read(time.perf_counter_ns() - r0, cpu)
                f = self._first.setdefault(g, c)
                s = LinkSample(now - self.t0_ns, g, self._since(f.nvlink_tx, c.nvlink_tx),
                               self._since(f.nvlink_rx, c.nvlink_rx), self._since(f.pcie_tx, c.pcie_tx),
                               self._since(f.pcie_rx, c.pcie_rx))
                self._last[g] = s
                batch.append(s)
                if self._guard and cpu > self.stall_ms * 1e6:
                    self._stalled()
                    if not every_gpu:
                        break
            self.cost.samples += 1
            self.cost.wall_ns = now - self.t0_ns
            if self.keep:
                self.samples.extend(batch)
            if self.on_sample:
                cb0 = time.thread_time_ns()
                self.on_sample(batch)
                self.cost.callback_cpu_ns += time.thread_time_ns() - cb0
            if self.open_watch:
                self.open_watch.drain()  # events during the reads (and the callback) were this process's own
            self.cost.thread_cpu_ns += time.thread_time_ns() - cpu0
            return batch

    def _stalled(self) -> None:
        """Hold the sampler for ``hold_s`` after a stalled read (a job's set-up stalls in bursts)."""
        self.cost.stalls += 1
        self._hold_until = time.monotonic_ns() + int(self.hold_s * 1e9)

    def _loop(self) -> None:
        """Ticks at the multiples of ``interval_s`` on the wall clock, the first at least one interval
        after the start's sample. Those are the moments the ranks' record writers wake (they start
        their timeline buckets there, native/common/rmrec.c), so a job whose ranks busy-poll every core
        in lockstep is held once per tick for all of rankmap, not once for the ranks and again for
        the sampler at its own phase."""
        iv = max(1, int(self.interval_s * 1e9))
        k = time.time_ns() // iv + 2
        while not self._stop.is_set():
            wall = time.time_ns()
            if k * iv <= wall:  # fell behind (a slow NVML): the next tick, not a burst to catch up
                k = wall // iv + 1
            if self._stop.wait((k * iv - wall) / 1e9):
                break
            k += 1
            now = time.monotonic_ns()
            self._look_for_opens(now)
            if now < self._hold_until:
                self.cost.held += 1
                continue
            if self._held_by_open(now):
                continue
            try:
                self.sample_once(every_gpu=False)
            except Exception as e:  # noqa: BLE001 - a sampler failure must not end the job
                self.warnings.append(f"link sampler stopped: {e}")
                return

    def _look_for_opens(self, now: int) -> None:
        """On waking: a GPU's device file opened or closed while the loop slept was another process's
        (this process's own events were drained after its reads); hold for ``open_hold_s`` from now."""
        if self.open_watch is None:
            return
        c0 = time.thread_time_ns()
        if self.open_watch.others():
            self._open_until = now + int(self.open_hold_s * 1e9)  # type: ignore[operator]
        self.cost.thread_cpu_ns += time.thread_time_ns() - c0

    def _held_by_open(self, now: int) -> bool:
        """Whether another process's open holds this tick (counted), unless the hold has lasted ``open_cap_s``."""
        if now >= self._open_until:
            self._open_since = None
            return False
        if self._open_since is None:
            self._open_since = now
        if now - self._open_since >= self.open_cap_s * 1e9:
            self._open_since = None  # one tick reads; a hold goes on from the next
            self.cost.open_capped += 1
            return False
        self.cost.held_open += 1
        return True

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called: the batch being handed out is the last or nearly."""
        return self._stop.is_set()

    def start(self) -> "LinkSampler":
        if self._guard and self.open_hold_s is not None:
            paths = gpu_device_files() if self.open_paths is None else list(self.open_paths)
            w = DeviceFileWatch(paths)
            self.cost.open_watch = w.status
            self.open_watch = w if w.ok else None
        self.sample_once()
        self._thread = threading.Thread(target=self._loop, name="rankmap-link-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[LinkSample]:
        """Stop the thread and take a last sample, so the totals cover the whole run."""
        self._stop.set()
        if self._thread:
            self._thread.join()
        try:
            self.sample_once()
        except Exception as e:  # noqa: BLE001
            self.warnings.append(f"link sampler: last sample failed: {e}")
        if self.open_watch:
            self.open_watch.close()
        return self.samples

    def totals(self) -> dict[int, LinkSample]:
        """The last cumulative sample of every GPU."""
        with self._lock:
            return dict(self._last)


def link_rows(samples: Sequence[LinkSample]) -> list[dict]:
    """Samples as rows of the store's ``link_samples`` table (one per GPU and link kind)."""
    rows = []
    for s in samples:
        if s.nvlink_tx is not None or s.nvlink_rx is not None:
            rows.append(dict(t_ns=s.t_ns, device=s.gpu, link="nvlink", tx_bytes=s.nvlink_tx, rx_bytes=s.nvlink_rx))
        if s.pcie_tx is not None or s.pcie_rx is not None:
            rows.append(dict(t_ns=s.t_ns, device=s.gpu, link="pcie", tx_bytes=s.pcie_tx, rx_bytes=s.pcie_rx))
    return rows


class StoreWriter:
    """Streams samples into the store in batches (one insert a ``every_s``), from the sampler thread.

    A failed insert (the store is briefly unreachable) keeps its rows and tries again with the next
    batch, so an outage loses no sample as long as the process lives; the first failure is noted
    in ``warnings``.
    """

    def __init__(self, store: Any, job_id: int, every_s: float = 1.0) -> None:
        self.store, self.job_id, self.every_s = store, job_id, every_s
        self.pending: list[dict] = []
        self.written = 0
        self.warnings: list[str] = []
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, batch: Sequence[LinkSample]) -> None:
        with self._lock:
            self.pending.extend(link_rows(batch))
        if time.monotonic() - self._last >= self.every_s:
            self.flush()

    def flush(self) -> bool:
        """Write what is pending; False (rows kept) when the store refused."""
        with self._lock:
            rows, self.pending = self.pending, []
            self._last = time.monotonic()
            if not rows:
                return True
            try:
                self.store.add_link_samples(self.job_id, rows)
            except Exception as e:  # noqa: BLE001 - keep sampling; retry with the next batch
                self.pending = rows + self.pending
                if not self.warnings:
                    self.warnings.append(f"storing link samples failed (kept, retrying): {str(e).splitlines()[0]}")
                return False
            self.written += len(rows)
            return True


def hostname() -> str:
    """The node's name as dcgm-exporter's ``Hostname`` label gives it (the short host name)."""
    return socket.gethostname()
