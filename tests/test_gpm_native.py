"""The native GPM reader (native/monitor/gpm_read.c) against the Python read it replaces.

Both readers run the same scripted scenario against the fake NVML, whose GPM reads the C code
calls back as C functions, under one scripted clock (the C reader's CLOCK_MONOTONIC and the
Python read's ``time.monotonic_ns`` replaced by the same sequence): every Counters, every error,
``gaps`` and ``discarded`` must be identical. The ABI the C file declares is held against
pynvml's ctypes structs (the installed nvidia-ml-py), and the fallback to the Python read is
checked where the build fails or the entry points do not resolve.
"""

from __future__ import annotations

import ctypes
import random
from types import SimpleNamespace

import pytest

import rankmap.counters.sampler as sm
from rankmap.counters import gpm_native
from rankmap.counters.sampler import Counters, GpmSource, GpmReaderError, open_source
from rankmap.errors import RankmapError
from test_sampler import GB, FakeNvml, fake_pynvml



def test_c_layout_matches_pynvml_and_the_fake():
    import pynvml  # the installed nvidia-ml-py, not the fake

    c = gpm_native.layout()
    M, R = pynvml.c_nvmlGpmMetric_t, pynvml.c_nvmlGpmMetricsGet_t
    want = {"metric_size": ctypes.sizeof(M), "metric.metricId": M.metricId.offset,
            "metric.nvmlReturn": M.nvmlReturn.offset, "metric.value": M.value.offset,
            "metric.metricInfo": M.metricInfo.offset, "request_head_size": R.metrics.offset,
            "request.version": R.version.offset, "request.numMetrics": R.numMetrics.offset,
            "request.sample1": R.sample1.offset, "request.sample2": R.sample2.offset,
            "request.metrics": R.metrics.offset}
    assert c == want
    # the request pynvml hands the driver is the head and NVML_GPM_METRIC_MAX metrics: the C reader
    # allocates as many
    assert ctypes.sizeof(R) == R.metrics.offset + pynvml.NVML_GPM_METRIC_MAX * ctypes.sizeof(M)
    assert M.metricInfo.size == 3 * ctypes.sizeof(ctypes.c_void_p)
    # the fake's C view, so that the side-by-side runs below drive the C code as a driver would
    fm, fh = fake_pynvml._CMetric, fake_pynvml._CRequestHead
    assert (ctypes.sizeof(fm), fm.nvmlReturn.offset, fm.value.offset, fm.metricInfo.offset, ctypes.sizeof(fh),
            fh.sample1.offset, fh.sample2.offset) == (c["metric_size"], c["metric.nvmlReturn"], c["metric.value"],
                                                       c["metric.metricInfo"], c["request.metrics"],
                                                       c["request.sample1"], c["request.sample2"])


class Clock:
    """A monotonic clock in ns that moves a few tens of microseconds per call, and as told."""

    def __init__(self, seed: int) -> None:
        self.t = 10**12
        self.rng = random.Random(seed)

    def __call__(self) -> int:
        self.t += self.rng.randint(5_000, 60_000)
        return self.t

    def advance(self, ns: int) -> None:
        self.t += ns


def run(reader: str, steps: list[tuple], monkeypatch, **cfg) -> tuple[list, int, int, str]:
    """Play ``steps`` against a fresh fake and clock with one reader: what every read returned."""
    clock = Clock(7)
    c_clock = ctypes.CFUNCTYPE(ctypes.c_int64)(clock)
    monkeypatch.setattr(sm, "time", SimpleNamespace(monotonic_ns=clock))
    monkeypatch.setattr(gpm_native, "CLOCK", c_clock)
    cfg.setdefault("rates", [[100 * GB, 50 * GB, 2 * GB, 1 * GB], [37 * GB, 81 * GB, 0, 3 * GB]])
    cfg.setdefault("gpm", True)
    cfg.setdefault("jitter_ns", 30_000)
    nv = FakeNvml(cfg)
    nv.t0, nv.now = 10**12, clock
    src = GpmSource(nv, reader=reader)
    assert src.reader == reader, src.reader_why
    got: list = []
    try:
        for step in steps:
            op = step[0]
            if op == "advance":
                clock.advance(step[1])
            elif op == "stall":  # the next snapshot call takes this long (the clock jumps inside it)
                nv.stall_next_ms, nv.on_stall = 1e-9, lambda g, t, ns=step[1]: clock.advance(ns)
            elif op == "fail":
                nv.fail_metrics_next = set(step[1])
            elif op == "metrics_error":
                nv.metrics_error_next = step[1]
            elif op == "sample_error":
                nv.sample_error_next = step[1]
            else:
                try:
                    got.append((step[1], src.read(step[1])))
                except nv.NVMLError as e:
                    got.append((step[1], ("NVMLError", e.value)))
        return got, src.gaps, src.discarded, src.reader
    finally:
        src.close()


def both(steps, monkeypatch, **cfg):
    py = run("python", steps, monkeypatch, **cfg)
    nat = run("native", steps, monkeypatch, **cfg)
    assert nat[:3] == py[:3]
    return py


def reads(n: int, gpus=(0, 1), gap_ms: int = 100) -> list[tuple]:
    out: list[tuple] = []
    for _ in range(n):
        out.append(("advance", gap_ms * 1_000_000))
        out += [("read", g) for g in gpus]
    return out


def test_steady_rates_identical(monkeypatch):
    got, gaps, discarded, _ = both(reads(30), monkeypatch)
    last = got[-2][1]
    # 3 s at 100 GB/s NVLink TX on GPU 0: not a vacuous comparison
    assert isinstance(last, Counters) and abs(last.nvlink_tx - 3 * 100 * GB) < 0.02 * 3 * 100 * GB, last
    assert got[-1][1].pcie_tx == 0 and (gaps, discarded) == (0, 0)


def test_metric_not_offered_identical(monkeypatch):
    got, gaps, _, _ = both(reads(5), monkeypatch, gpm_pcie=False)
    assert all(c.pcie_tx is None and c.pcie_rx is None and c.nvlink_tx > 0 for _g, c in got[2:])
    assert gaps == 0


def test_metric_failing_after_answering_counts_gaps_identically(monkeypatch):
    steps = reads(3) + [("fail", {0, 3})] + reads(1) + [("fail", {1})] + reads(2, gpus=(1,)) + reads(3)
    got, gaps, _, _ = both(steps, monkeypatch)
    assert gaps == 3  # TX and PCIe RX of GPU 0's 4th read, NVLink RX of GPU 1's 5th
    assert all(c.nvlink_tx is not None for _g, c in got)  # a gap keeps the metric: its bytes are missing


def test_stalled_snapshots_identical(monkeypatch):
    steps = ([("stall", 5_000_000), ("read", 0)]         # the first read stalls: used all the same
             + reads(3, gpus=(0,))
             + [("advance", 100_000_000), ("stall", 4_000_000), ("read", 0)]  # discarded
             + reads(2, gpus=(0,))
             + [("advance", 2_500_000_000), ("stall", 3_000_000), ("read", 0)]  # after 2.5 s: taken as it is
             + reads(2, gpus=(0,)))
    got, _, discarded, _ = both(steps, monkeypatch)
    assert discarded == 1
    assert got[4][1] == got[3][1]  # the discarded read returns the last totals


def test_entry_point_errors_identical_and_harmless(monkeypatch):
    steps = (reads(2) + [("advance", 100_000_000), ("sample_error", 15), ("read", 0), ("read", 1)]
             + [("advance", 100_000_000), ("metrics_error", 999), ("read", 0), ("read", 1)] + reads(2))
    got, *_ = both(steps, monkeypatch)
    assert got[4][1] == ("NVMLError", 15) and got[6][1] == ("NVMLError", 999)
    assert isinstance(got[5][1], Counters) and isinstance(got[7][1], Counters)


def test_many_reads_with_everything_mixed_identical(monkeypatch):
    rng = random.Random(3)
    steps: list[tuple] = []
    for _ in range(600):
        steps.append(("advance", rng.randint(20, 400) * 1_000_000))
        r = rng.random()
        if r < 0.05:
            steps.append(("stall", rng.randint(1, 20) * 1_000_000))
        elif r < 0.08:
            steps.append(("fail", {rng.randrange(4)}))
        elif r < 0.09:
            steps.append(("metrics_error", 999))
        steps += [("read", 0), ("read", 1)]
    got, gaps, discarded, _ = both(steps, monkeypatch, rates=[[97 * GB, 13 * GB, 3 * GB, 5 * GB], [1, 7, 0, 11 * GB]])
    assert gaps > 0 and discarded > 0
    assert any(isinstance(c, tuple) for _g, c in got)


def test_auto_uses_native_and_says_so():
    src = GpmSource(FakeNvml({"rates": [[GB, GB, 0, 0]], "gpm": True}))
    try:
        assert src.reader == "native" and "gpm_read.c" in src.reader_why
        assert src.read == src.read_native
    finally:
        src.close()


def test_python_forced_by_the_environment(monkeypatch):
    monkeypatch.setenv("RANKMAP_GPM_READER", "python")
    src = GpmSource(FakeNvml({"rates": [[GB, GB, 0, 0]], "gpm": True}))
    assert src.reader == "python" and src.read == src.read_python
    src.close()
    monkeypatch.setenv("RANKMAP_GPM_READER", "fast")
    with pytest.raises(RankmapError, match=r"^RANKMAP_GPM_READER='fast': choose one of auto, native, python$"):
        GpmSource(FakeNvml({"rates": [[GB, GB, 0, 0]], "gpm": True}))


class NoEntryPoints(FakeNvml):
    """An NVML module whose GPM functions are not C functions it can hand out."""

    def _nvmlGetFunctionPointer(self, name):
        raise fake_pynvml.NVMLError(13)


def test_fallback_when_the_entry_points_do_not_resolve(monkeypatch):
    cfg = {"rates": [[GB, GB, 0, 0]], "gpm": True}
    src = GpmSource(NoEntryPoints(cfg))
    assert src.reader == "python" and "nvmlGpmSampleGet did not resolve (NVML error 13)" in src.reader_why
    assert src.read(0).nvlink_tx > 0  # the Python read reads
    src.close()
    monkeypatch.setenv("RANKMAP_GPM_READER", "native")
    nv = NoEntryPoints(cfg)
    with pytest.raises(GpmReaderError, match=r"^RANKMAP_GPM_READER=native: the native GPM reader cannot be used "
                                                r"here: nvmlGpmSampleGet did not resolve"):
        open_source("auto", nvml=nv)  # asked for native: no quiet fall back to the field values
    assert nv.inits == 0  # NVML shut down again


def test_fallback_when_the_build_fails(monkeypatch, tmp_path):
    monkeypatch.setenv("RANKMAP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no compiler
    gpm_native._library.cache_clear()
    try:
        src = GpmSource(FakeNvml({"rates": [[GB, GB, 0, 0]], "gpm": True}))
        assert src.reader == "python"
        assert src.reader_why == "the native reader cannot be used here: cannot build the GPM reader: compiler 'cc' not found on PATH"
        src.close()
    finally:
        gpm_native._library.cache_clear()
