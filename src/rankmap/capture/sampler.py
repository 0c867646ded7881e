"""The link sampler: NVLink and PCIe byte counters of every GPU, read while a job runs.

It runs in rankmap's own process, never in the application's, so its cost is rankmap's.
Facts it is built on (measured on an H200 node in a VM):

* ``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX`` count payload KiB; asked with scope
  ``0xFFFFFFFF`` they sum every link of the GPU in one query (~1 ms per query in a VM, so
  per-link queries are opt-in: 18 links x 2 directions would cost ~36 ms a sample).
* ``NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES`` are 32-bit and wrap: at ~55 GB/s a wrap comes every
  ~78 ms. The sampler unwraps them by assuming at most one wrap between two samples, which
  holds when the interval is shorter than 2**32 bytes / PCIe bandwidth; it says so in
  :attr:`LinkSampler.warnings` when a delta looks implausible.

All fields of one GPU are read in one ``nvmlDeviceGetFieldValues`` call so their timestamps agree.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from rankmap.errors import RankmapError

ALL_LINKS = 0xFFFFFFFF
PCIE_WRAP = 1 << 32


@dataclass(frozen=True)
class Counters:
    """Raw counter readings of one GPU at one instant (NVLink in bytes, PCIe as the 32-bit raw value)."""

    nvlink_tx: int | None
    nvlink_rx: int | None
    pcie_tx_raw: int | None
    pcie_rx_raw: int | None


@dataclass(frozen=True)
class LinkSample:
    """Cumulative bytes of one GPU since the sampler started (PCIe unwrapped)."""

    t_ns: int
    gpu: int
    nvlink_tx: int | None
    nvlink_rx: int | None
    pcie_tx: int | None
    pcie_rx: int | None


class CounterSource(Protocol):
    """Where counters come from: NVML on a real node, a recording in tests."""

    def gpu_count(self) -> int: ...

    def read(self, gpu: int) -> Counters: ...


class NvmlCounters:
    """Counters read through NVML (``nvidia-ml-py``)."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as e:  # pragma: no cover - dependency of the package
            raise RankmapError("nvidia-ml-py is not installed: pip install nvidia-ml-py") from e
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise RankmapError(f"NVML is not available ({e}): the link sampler needs an NVIDIA driver") from e
        self._nvml = pynvml
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self._fields = [
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
            (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
            (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0),
        ]

    def gpu_count(self) -> int:
        return len(self._handles)

    def _value(self, v) -> int | None:
        if v.nvmlReturn != 0:
            return None
        n = self._nvml
        vt = v.valueType
        if vt == n.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
            return int(v.value.ullVal)
        if vt == n.NVML_VALUE_TYPE_UNSIGNED_INT:
            return int(v.value.uiVal)
        if vt == n.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
            return int(v.value.sllVal)
        if vt == n.NVML_VALUE_TYPE_UNSIGNED_LONG:
            return int(v.value.ulVal)
        return int(v.value.ullVal)

    def read(self, gpu: int) -> Counters:
        vals = self._nvml.nvmlDeviceGetFieldValues(self._handles[gpu], self._fields)
        tx, rx, ptx, prx = (self._value(v) for v in vals)
        return Counters(
            nvlink_tx=None if tx is None else tx * 1024,
            nvlink_rx=None if rx is None else rx * 1024,
            pcie_tx_raw=ptx,
            pcie_rx_raw=prx,
        )

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down is best effort
            pass


def _unwrap(prev_raw: int | None, raw: int | None, total: int | None) -> int | None:
    if raw is None or prev_raw is None or total is None:
        return None
    return total + (raw - prev_raw) % PCIE_WRAP


@dataclass
class _GpuState:
    first: Counters
    last: Counters
    pcie_tx: int | None = 0
    pcie_rx: int | None = 0


@dataclass
class LinkSampler:
    """Samples every GPU's counters every ``interval_s`` in a background thread.

    ``on_sample`` (optional) receives each batch of samples as they are taken, e.g. to stream
    them into the store. :meth:`stop` returns every sample taken.
    """

    source: CounterSource
    interval_s: float = 0.05
    on_sample: Callable[[Sequence[LinkSample]], None] | None = None
    samples: list[LinkSample] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state: dict[int, _GpuState] = {}
        self._t0 = 0

    def sample_once(self) -> list[LinkSample]:
        """Take one sample of every GPU (the first call sets the zero point)."""
        batch: list[LinkSample] = []
        now = time.monotonic_ns()
        if not self._state:
            self._t0 = now
        for g in range(self.source.gpu_count()):
            c = self.source.read(g)
            st = self._state.get(g)
            if st is None:
                st = self._state[g] = _GpuState(first=c, last=c,
                                                pcie_tx=0 if c.pcie_tx_raw is not None else None,
                                                pcie_rx=0 if c.pcie_rx_raw is not None else None)
            else:
                st.pcie_tx = _unwrap(st.last.pcie_tx_raw, c.pcie_tx_raw, st.pcie_tx)
                st.pcie_rx = _unwrap(st.last.pcie_rx_raw, c.pcie_rx_raw, st.pcie_rx)
                st.last = c
            batch.append(LinkSample(
                t_ns=now - self._t0,
                gpu=g,
                nvlink_tx=None if c.nvlink_tx is None or st.first.nvlink_tx is None else c.nvlink_tx - st.first.nvlink_tx,
                nvlink_rx=None if c.nvlink_rx is None or st.first.nvlink_rx is None else c.nvlink_rx - st.first.nvlink_rx,
                pcie_tx=st.pcie_tx,
                pcie_rx=st.pcie_rx,
            ))
        self.samples.extend(batch)
        if self.on_sample:
            self.on_sample(batch)
        return batch

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as e:  # noqa: BLE001 - a sampler failure must not end the profile
                self.warnings.append(f"link sampler stopped: {e}")
                return
            next_t += self.interval_s
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (slow NVML): do not try to catch up in a burst
                next_t = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def start(self) -> "LinkSampler":
        self.sample_once()
        self._thread = threading.Thread(target=self._loop, name="rankmap-link-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[LinkSample]:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.sample_once()
        return self.samples

    def totals(self) -> dict[int, LinkSample]:
        """The last cumulative sample of every GPU."""
        out: dict[int, LinkSample] = {}
        for s in self.samples:
            out[s.gpu] = s
        return out
