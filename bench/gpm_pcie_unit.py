#!/usr/bin/env python3
"""Do NVML's GPM PCIe rates add up to the bytes a job moved? Known host<->device copies against them.

usage: PYTHONPATH=src python3 bench/gpm_pcie_unit.py [--mib 1024] [--intervals 50ms,100ms,250ms,1s]
                                                    [--phase-s 2] [--gpu 0]

NVML documents ``NVML_GPM_METRIC_PCIE_TX_PER_SEC`` / ``..._RX_PER_SEC`` in MiB/s; the NVLink GPM rates,
documented the same way, were measured to be in units of 1,024,000 B/s (``GPM_NVLINK_UNIT`` in
``rankmap.counters.sampler``). With PyTorch on one GPU, for each GPM read interval this script copies
a pinned host buffer of ``--mib`` MiB to the device for ``--phase-s`` seconds (at least 8 intervals;
host to device: the GPU receives, PCIe RX), then back (PCIe TX), while a ``GpmSource`` reads the GPU
at that interval and integrates the PCIe rates with a unit of 1 B/s (the rate as NVML gives it).
Beside it, NVML's PCIe byte counters (``NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES``, 32 bits, wrapping
every ~78 ms at 55 GB/s) are read every 20 ms on another thread and unwrapped: the bytes the link
carried by the GPU's own count (payload and whatever protocol bytes it includes).

Per interval and direction: bytes copied, the counters' bytes, the GPM integral and the bytes per GPM
unit (copied / integral): constant across intervals and near 1,048,576 if the rates are MiB/s of
payload. Needs PyTorch with CUDA and an NVML with GPM (Hopper or newer).
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

import rankmap.counters.sampler as S  # noqa: E402
from rankmap.pipeline.monitor import parse_interval  # noqa: E402

COUNTER_PERIOD = 0.02  # s: under the 32-bit counters' wrap time at full PCIe speed


class Reader(threading.Thread):
    """Reads ``fn()`` every ``period`` seconds into ``self.seen`` [(monotonic ns, value)] until stopped."""

    def __init__(self, fn, period: float) -> None:
        super().__init__(daemon=True)
        self.fn, self.period, self.seen, self.halt = fn, period, [], threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.seen.append((time.monotonic_ns(), self.fn()))
            self.halt.wait(self.period)

    def delta(self, t0: int, t1: int, field: str) -> float:
        """Growth of ``field`` from the last reading before t0 to the first after t1."""
        a = [v for t, v in self.seen if t <= t0][-1]
        b = next(v for t, v in self.seen if t >= t1)
        return getattr(b, field) - getattr(a, field)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--intervals", default="50ms,100ms,250ms,1s")
    ap.add_argument("--phase-s", type=float, default=2.0)
    ap.add_argument("--gpu", type=int, default=0)
    a = ap.parse_args()
    import torch

    # GPM integrated with unit 1 (the Python reader takes the units from the module at each read)
    os.environ["RANKMAP_GPM_READER"] = "python"
    S.GPM_UNITS = (1, 1, 1, 1)
    g = a.gpu
    torch.cuda.set_device(g)
    n = a.mib << 20
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host.fill_(7)
    dev = torch.empty(n, dtype=torch.uint8, device=f"cuda:{g}")
    dev.copy_(host)
    torch.cuda.synchronize()
    fields = S.FieldSource()
    counters = Reader(lambda: fields.read(g), COUNTER_PERIOD)
    counters.start()
    print(f"== GPM PCIe rates against known copies, GPU {g}: {a.mib} MiB copies, pinned host memory; PCIe "
          f"counters read every {COUNTER_PERIOD * 1e3:.0f} ms")
    print(f"{'interval':>8} {'phase':<15} {'bytes copied':>14} {'counter bytes':>14} {'GPM integral':>13} "
          f"{'B per unit':>11} {'copy GB/s':>9} {'other dir':>10}")
    for spec in a.intervals.split(","):
        period = parse_interval(spec)
        gpm = S.GpmSource()
        reads = Reader(lambda: gpm.read(g), period)
        reads.start()
        time.sleep(3 * period)
        for name, field, other, fn in (("host to device", "pcie_rx", "pcie_tx", lambda: dev.copy_(host)),
                                       ("device to host", "pcie_tx", "pcie_rx", lambda: host.copy_(dev))):
            time.sleep(2 * period)                  # a quiet gap: the phases share no interval
            t0, c0, copies = time.monotonic_ns(), time.perf_counter(), 0
            while time.perf_counter() - c0 < max(a.phase_s, 8 * period):
                fn()
                torch.cuda.synchronize()
                copies += 1
            t1, secs = time.monotonic_ns(), time.perf_counter() - c0
            time.sleep(2 * period)                  # the first reading after the phase is taken
            moved = n * copies
            got, oth = reads.delta(t0, t1, field), reads.delta(t0, t1, other)
            cnt = counters.delta(t0, t1, field)
            print(f"{spec:>8} {name:<15} {moved:>14} {cnt:>14.0f} {got:>13.0f} {moved / got if got else float('nan'):>11.0f} "
                  f"{moved / secs / 1e9:>9.2f} {oth:>10.0f}", flush=True)
        reads.halt.set()
        reads.join()
        gpm.close()
    counters.halt.set()
    counters.join()
    fields.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
