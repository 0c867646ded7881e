#!/usr/bin/env python3
"""What unit do NVML's GPM PCIe rates count in? Known host<->device copies against GPM's integral.

usage: PYTHONPATH=src python3 bench/gpm_pcie_unit.py [--mib 1024] [--copies 8] [--interval 100ms] [--gpu 0]

NVML documents ``NVML_GPM_METRIC_PCIE_TX_PER_SEC`` / ``..._RX_PER_SEC`` in MiB/s; the NVLink GPM rates,
documented the same way, were measured to be in units of 1,024,000 B/s (``GPM_NVLINK_UNIT`` in
``rankmap.capture.sampler``). NVML's PCIe byte counters are 32 bits wide and wrap every ~78 ms at
55 GB/s, so they cannot check a sampler; a copy of a known size can. With PyTorch on one GPU this
script copies a pinned host buffer of ``--mib`` MiB to the device ``--copies`` times (host to device:
the GPU receives, PCIe RX), then back (PCIe TX), while a ``GpmSource`` reads the GPU every
``--interval``, and integrates each phase's PCIe rates with one unit of 1 B/s (the rate as NVML
reports it). The bytes copied over that integral is the unit: 1,048,576 would confirm MiB/s,
1,024,000 the NVLink metrics' unit, 1,000,000 MB/s. PCIe also carries the protocol's own bytes
(packet headers, flow control; a few per cent) and the driver's small transfers, so a unit a few
per cent under a round figure means payload plus that overhead is counted.

Prints one row per phase: bytes copied, the GPM integral (rate units x s), their ratio (bytes per
rate unit), the copy's own bandwidth, and the other direction's integral during that phase.
Needs PyTorch with CUDA and an NVML with GPM (Hopper or newer).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import rankmap.capture.sampler as S  # noqa: E402
from rankmap.pipeline.monitor import parse_interval  # noqa: E402

CANDIDATES = {"MiB/s (documented)": 1 << 20, "1,024,000 B/s (the NVLink metrics)": 1_024_000, "MB/s": 1_000_000}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--interval", default="100ms")
    ap.add_argument("--gpu", type=int, default=0)
    a = ap.parse_args()
    import torch

    # integrate with unit 1: GpmSource's totals are then sums of rate x seconds, in NVML's rate units
    # (the Python reader, which takes the units from the module at each read)
    os.environ["RANKMAP_GPM_READER"] = "python"
    S.GPM_UNITS = (1, 1, 1, 1)
    src = S.GpmSource()
    g, period = a.gpu, parse_interval(a.interval)
    torch.cuda.set_device(g)
    n = a.mib << 20
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host.fill_(7)
    dev = torch.empty(n, dtype=torch.uint8, device=f"cuda:{g}")
    dev.copy_(host)
    torch.cuda.synchronize()

    marks: list[tuple[str, int]] = []
    totals: list[tuple[int, S.Counters]] = []
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            totals.append((time.monotonic_ns(), src.read(g)))
            stop.wait(period)

    t = threading.Thread(target=sampler, daemon=True)
    t.start()
    time.sleep(3 * period)

    def phase(name: str, fn) -> None:
        time.sleep(2 * period)                      # a quiet gap: phases do not share an interval
        marks.append((f"{name} start", time.monotonic_ns()))
        t0 = time.perf_counter()
        for _ in range(a.copies):
            fn()
        torch.cuda.synchronize()
        marks.append((f"{name} end", time.monotonic_ns()))
        rates[name] = n * a.copies / (time.perf_counter() - t0)

    rates: dict[str, float] = {}
    phase("host to device", lambda: dev.copy_(host, non_blocking=True))
    phase("device to host", lambda: host.copy_(dev, non_blocking=True))
    time.sleep(3 * period)
    stop.set()
    t.join()
    src.close()

    def at(ns: int, before: bool) -> S.Counters:
        """The last reading before ``ns`` (before=True) or the first after it."""
        got = [c for tt, c in totals if (tt <= ns if before else tt >= ns)]
        return got[-1] if before else got[0]

    m = dict(marks)
    print(f"== GPM PCIe unit, GPU {g}: {a.copies} copies of {a.mib} MiB each way, pinned host memory, "
          f"reads every {a.interval} ({len(totals)} reads)")
    print(f"{'phase':<16} {'bytes copied':>14} {'GPM integral':>16} {'bytes per unit':>15} {'copy GB/s':>10} "
          f"{'other dir integral':>19}")
    for name, field, other in (("host to device", "pcie_rx", "pcie_tx"), ("device to host", "pcie_tx", "pcie_rx")):
        c0, c1 = at(m[f"{name} start"], True), at(m[f"{name} end"], False)
        got, oth = getattr(c1, field) - getattr(c0, field), getattr(c1, other) - getattr(c0, other)
        ratio = n * a.copies / got if got else float("nan")
        print(f"{name:<16} {n * a.copies:>14} {got:>16.0f} {ratio:>15.0f} {rates[name] / 1e9:>10.2f} {oth:>19.0f}")
        best = min(CANDIDATES.items(), key=lambda kv: abs(kv[1] - ratio))
        print(f"   nearest unit: {best[0]} ({ratio / best[1] - 1:+.2%} from it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
