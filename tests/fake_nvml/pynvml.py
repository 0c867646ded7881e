"""A stand-in for ``pynvml`` (nvidia-ml-py) with GPUs whose NVLink and PCIe traffic is scripted.

The link sampler's NVML code runs against it on machines without a GPU, in two ways:

* in-process: ``FakeNvml(config)`` is handed to ``open_source(nvml=...)``;
* as the real module of a subprocess: put this folder first on ``PYTHONPATH`` and describe the
  node in the environment variable ``RANKMAP_FAKE_NVML`` (the same config, as JSON), so that
  ``rankmap monitor`` runs unchanged and imports this file as ``pynvml``.

Each GPU has true cumulative byte counts (NVLink TX/RX, PCIe TX/RX) that grow at the configured
rates from the moment the fake starts: ``rates`` is ``[[nvlink_tx, nvlink_rx, pcie_tx, pcie_rx], ...]``
in bytes/s per GPU, ``start`` the counts at that moment (PCIe near 2**32 tests the wrap). It answers
like the driver: NVLink DATA fields in KiB, PCIe field counters as 32-bit values, GPM snapshots
stamped with the GPU's own clock (``jitter_ns`` off the host's), GPM rates between two snapshots
in the units the driver uses (NVLink: 1,024,000 B/s, as measured on an H200; PCIe: MiB/s as documented). ``gpm: false`` makes GPM unsupported, ``gpm_pcie: false`` makes its PCIe metrics fail
(as in some VMs), ``fields: false`` makes field reads fail, ``reset_at_s`` zeroes the NVLink
counters once at that time (``nvidia-smi nvlink -r``). ``nvlink_header`` (default 0) is the NVLink
protocol overhead as a fraction of the payload: the RAW fields count payload plus that overhead, the
DATA fields and the GPM NVLink rates payload only (as the driver's counters do). With ``epoch_unix_ns`` the counts run from that
wall-clock instant instead of the fake's own start, so several processes see the same counters.

Its two GPM reads are also C functions (``_nvmlGetFunctionPointer``, as pynvml resolves them from
libnvidia-ml): ctypes callbacks into the same Python, taking the device handle (its index) and
the sample (its ``__index__``, a key of the fake's own) as pointers and the request of
``nvmlGpmMetricsGet`` as NVML lays it out, so rankmap's native GPM reader runs against the fake
too. Scripted failures: ``fail_metrics_next`` (metric indices whose next answer is an error),
``metrics_error_next`` / ``sample_error_next`` (the next call of either fails with that code).
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import time
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX = 140
NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX = 141
NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197
NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198
NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20
NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21
NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60
NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61
NVML_GPM_METRICS_GET_VERSION = 1
MIB = 1 << 20
GPM_UNITS = (1024 * 1000, 1024 * 1000, 1_000_000, 1_000_000)  # B/s per unit of the four GPM rates, as the driver answers

# metric id / field id -> index into [nvlink_tx, nvlink_rx, pcie_tx, pcie_rx]
_GPM = {NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 0, NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 1,
        NVML_GPM_METRIC_PCIE_TX_PER_SEC: 2, NVML_GPM_METRIC_PCIE_RX_PER_SEC: 3}
_FIELDS = {NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: 0, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: 1,
           NVML_FI_DEV_PCIE_COUNT_TX_BYTES: 2, NVML_FI_DEV_PCIE_COUNT_RX_BYTES: 3}
_RAW_FIELDS = {NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX: 0, NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX: 1}


class NVMLError(Exception):
    def __init__(self, value: int = NVML_ERROR_NOT_SUPPORTED) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class _CMetric(ctypes.Structure):
    """nvmlGpmMetric_t as the C ABI has it (pynvml's c_nvmlGpmMetric_t)."""
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint), ("value", ctypes.c_double),
                ("metricInfo", ctypes.c_char_p * 3)]


class _CRequestHead(ctypes.Structure):
    """The fixed part of nvmlGpmMetricsGet_t; the metrics follow it."""
    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", ctypes.c_void_p),
                ("sample2", ctypes.c_void_p)]


_SAMPLE_GET_C = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_METRICS_GET_C = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class FakeSample(SimpleNamespace):
    """A GPM sample buffer; ``__index__`` is the pointer value that stands for it in C."""

    def __index__(self) -> int:
        return self.key


class c_nvmlGpmMetricsGet_t:
    """The request/answer record of nvmlGpmMetricsGet (a ctypes struct in the real module)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(210)]


class FakeNvml:
    NVMLError = NVMLError
    c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t

    def __init__(self, config: dict) -> None:
        self.cfg = config
        n = len(config.get("rates", []))
        self.gpus = config.get("gpus") or [{"uuid": f"GPU-fake-{i:04d}", "name": "NVIDIA H200",
                                            "bus": f"00000000:{6 + i:02X}:00.0"} for i in range(n)]
        self.epoch = config.get("epoch_unix_ns")
        self.t0 = int(self.epoch) if self.epoch else time.monotonic_ns()
        self.rng = random.Random(config.get("seed", 1))
        self.inits = 0
        self.calls: dict[str, int] = {}
        self.history: dict[int, list[list[int]]] = {}  # per GPU: the true counts at every read
        # a driver stall: the next nvmlGpmSampleGet takes its snapshot on entry, then spins this many ms
        # of CPU (as the real driver does while a job sets up its contexts); on_stall(gpu, t_ns) is told
        # the snapshot's instant
        self.stall_next_ms = 0.0
        self.on_stall = None
        self.fail_metrics_next: set[int] = set()  # metric indices (0-3) the next nvmlGpmMetricsGet fails
        self.metrics_error_next = 0               # the next nvmlGpmMetricsGet raises this code
        self.sample_error_next = 0                # the next nvmlGpmSampleGet raises this code
        self.samples: dict[int, FakeSample] = {}  # pointer value -> sample, for the C entry points
        self._c_request = c_nvmlGpmMetricsGet_t()
        self._c_entries = {"nvmlGpmSampleGet": _SAMPLE_GET_C(self._sample_get_c),
                           "nvmlGpmMetricsGet": _METRICS_GET_C(self._metrics_get_c)}
        for k, v in globals().items():  # the module's constants, as attributes of the instance too
            if k.startswith("NVML_"):
                setattr(self, k, v)

    # ----------------------------------------------------------------- truth
    def true_bytes(self, gpu: int, t_ns: int) -> list[int]:
        """True cumulative bytes of a GPU at monotonic time t_ns (ints)."""
        s = (t_ns - self.t0) / 1e9
        rates = self.cfg["rates"][gpu]
        start = (self.cfg.get("start") or [[0, 0, 0, 0]] * len(self.gpus))[gpu]
        out = [int(start[k] + rates[k] * s) for k in range(4)]
        reset = self.cfg.get("reset_at_s")
        if reset is not None and s >= reset:  # NVLink counters zeroed at that moment
            for k in (0, 1):
                out[k] = int(rates[k] * (s - reset))
        return out

    def now(self) -> int:
        """The fake's clock: monotonic, or the wall clock when the counters share an epoch."""
        return time.time_ns() if self.epoch else time.monotonic_ns()

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    # ----------------------------------------------------------------- basics
    def nvmlInit(self) -> None:
        if self.cfg.get("no_driver"):
            raise NVMLError(9)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.gpus[h]["uuid"]

    def nvmlSystemGetDriverVersion(self) -> str:
        return "fake"

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.gpus[h]["name"]

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self.gpus[h]["bus"].encode())

    def _with_header(self, counts: list[int]) -> list[int]:
        """Counts as the RAW fields see them: NVLink payload plus protocol overhead."""
        h = float(self.cfg.get("nvlink_header", 0))
        return [int(c * (1 + h)) if k < 2 else c for k, c in enumerate(counts)]

    # ----------------------------------------------------------------- field values
    def nvmlDeviceGetFieldValues(self, h: int, fields: list) -> list:
        self._count("fields")
        now = self.true_bytes(h, self.now())
        self.history.setdefault(h, []).append(now)
        out = []
        for fid, _scope in fields:
            if fid in _RAW_FIELDS:  # NVLink RAW counters: payload and protocol overhead, KiB
                k = _RAW_FIELDS[fid]
                raw = self._with_header(now)[k]
                out.append(SimpleNamespace(nvmlReturn=0 if self.cfg.get("fields", True) else NVML_ERROR_NOT_SUPPORTED,
                                           valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                                           value=SimpleNamespace(ullVal=raw // 1024, uiVal=0)))
                continue
            k = _FIELDS[fid]
            if not self.cfg.get("fields", True):
                out.append(SimpleNamespace(nvmlReturn=NVML_ERROR_NOT_SUPPORTED, valueType=3,
                                           value=SimpleNamespace(ullVal=0, uiVal=0)))
            elif k < 2:   # NVLink DATA counters: KiB, 64-bit
                out.append(SimpleNamespace(nvmlReturn=0, valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                                           value=SimpleNamespace(ullVal=now[k] // 1024)))
            else:         # PCIe byte counters: 32-bit
                out.append(SimpleNamespace(nvmlReturn=0, valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
                                           value=SimpleNamespace(uiVal=now[k] % (1 << 32))))
        return out

    # ----------------------------------------------------------------- GPM
    def nvmlGpmQueryDeviceSupport(self, h: int) -> SimpleNamespace:
        if self.cfg.get("gpm") is None:
            raise NVMLError(13)  # an old driver: the function is not there
        return SimpleNamespace(isSupportedDevice=int(bool(self.cfg["gpm"])))

    def nvmlGpmSampleAlloc(self) -> FakeSample:
        s = FakeSample(gpu=None, t=None, counts=None, freed=False, key=0x1000 + 16 * len(self.samples))
        self.samples[s.key] = s
        return s

    def nvmlGpmSampleFree(self, s: SimpleNamespace) -> None:
        s.freed = True

    def nvmlGpmSampleGet(self, h: int, s: SimpleNamespace) -> SimpleNamespace:
        self._count("gpm_sample")
        if self.sample_error_next:
            code, self.sample_error_next = self.sample_error_next, 0
            raise NVMLError(code)
        t = self.now()
        jitter = int(self.cfg.get("jitter_ns", 0))
        true = self.true_bytes(h, t)
        s.gpu, s.counts = h, true  # GPM counts payload, like the DATA fields
        self.history.setdefault(h, []).append(true)
        s.t = t + (self.rng.randint(-jitter, jitter) if jitter else 0)  # the GPU's own timestamp
        if self.stall_next_ms:
            spin, self.stall_next_ms = self.stall_next_ms, 0.0
            if self.on_stall:
                self.on_stall(h, t)
            c0 = time.thread_time_ns()
            while time.thread_time_ns() - c0 < spin * 1e6:
                pass
        return s

    def nvmlGpmMetricsGet(self, g: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
        a, b = g.sample1, g.sample2
        if self.metrics_error_next:
            code, self.metrics_error_next = self.metrics_error_next, 0
            raise NVMLError(code)
        if a.freed or b.freed or a.gpu != b.gpu or a.t is None or b.t is None:
            raise NVMLError(2)
        dt = (b.t - a.t) / 1e9
        failing, self.fail_metrics_next = self.fail_metrics_next, set()
        for m in g.metrics[: g.numMetrics]:
            k = _GPM[m.metricId]
            if (k >= 2 and not self.cfg.get("gpm_pcie", True)) or k in failing:
                m.nvmlReturn, m.value = NVML_ERROR_NOT_SUPPORTED, 0.0
                continue
            m.nvmlReturn = 0
            m.value = (b.counts[k] - a.counts[k]) / dt / GPM_UNITS[k] if dt > 0 else 0.0
        return g

    # ----------------------------------------------------------------- the C entry points
    def _nvmlGetFunctionPointer(self, name: str) -> ctypes._CFuncPtr:
        if name not in self._c_entries:
            raise NVMLError(13)  # NVML_ERROR_FUNCTION_NOT_FOUND
        return self._c_entries[name]

    def _sample_get_c(self, device: int | None, sample: int | None) -> int:
        try:
            self.nvmlGpmSampleGet(device or 0, self.samples[sample or 0])
        except NVMLError as e:
            return e.value
        except Exception:  # noqa: BLE001 - an exception cannot cross into C: answer as the driver would
            return 999     # NVML_ERROR_UNKNOWN
        return NVML_SUCCESS

    def _metrics_get_c(self, request: int) -> int:
        """Reads the C request into the Python one, answers it, and writes the answers back."""
        head = _CRequestHead.from_address(request)
        metrics = (_CMetric * head.numMetrics).from_address(request + ctypes.sizeof(_CRequestHead))
        g = self._c_request  # one Python request, reused (a fresh one of 210 metrics per call is slow)
        g.version, g.numMetrics = head.version, head.numMetrics
        try:
            g.sample1, g.sample2 = self.samples[head.sample1 or 0], self.samples[head.sample2 or 0]
        except KeyError:
            return 2  # NVML_ERROR_INVALID_ARGUMENT
        for c, m in zip(metrics, g.metrics):
            m.metricId = c.metricId
        try:
            self.nvmlGpmMetricsGet(g)
        except NVMLError as e:
            return e.value
        except Exception:  # noqa: BLE001
            return 999
        for c, m in zip(metrics, g.metrics):
            c.nvmlReturn, c.value = m.nvmlReturn, m.value
        return NVML_SUCCESS


def _module_instance() -> FakeNvml | None:
    cfg = os.environ.get("RANKMAP_FAKE_NVML")
    return FakeNvml(json.loads(cfg)) if cfg else None


_INSTANCE = _module_instance()
if _INSTANCE is not None:  # used as the pynvml module of a subprocess: expose the instance's API
    for _name in dir(_INSTANCE):
        if _name.startswith(("nvml", "_nvml")):
            globals()[_name] = getattr(_INSTANCE, _name)
