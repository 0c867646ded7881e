"""What ``rankmap monitor`` prints when its session ends: bytes per GPU, rates, and what sampling cost."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from rankmap.report.summary import human_bytes


def _b(v: int | None) -> str:
    return "–" if v is None else human_bytes(v)


def _rate(v: int | None, s: float) -> str:
    return "–" if v is None or s <= 0 else f"{v / s / 1e9:.3f}"


def print_monitor(res: Any, console: Console | None = None) -> None:
    """``res`` is a :class:`rankmap.pipeline.monitor.MonitorResult`."""
    con = console or Console(highlight=False)
    t = Table(title=f"job {res.job_id}: {res.host}, {len(res.gpus)} GPUs, {res.source}, "
                    f"every {res.interval_s * 1000:g} ms for {res.elapsed_s:.1f} s")
    for col in ("GPU", "NVLink TX", "NVLink RX", "PCIe TX", "PCIe RX", "NVLink GB/s TX/RX", "PCIe GB/s TX/RX"):
        t.add_column(col, justify="right")
    for g in sorted(res.totals):
        s = res.totals[g]
        t.add_row(str(g), _b(s.nvlink_tx), _b(s.nvlink_rx), _b(s.pcie_tx), _b(s.pcie_rx),
                  f"{_rate(s.nvlink_tx, res.elapsed_s)} / {_rate(s.nvlink_rx, res.elapsed_s)}",
                  f"{_rate(s.pcie_tx, res.elapsed_s)} / {_rate(s.pcie_rx, res.elapsed_s)}")
    con.print(t)
    c = res.cost
    per, cpu = c.get("per_gpu_sample_ms"), c.get("per_gpu_sample_cpu_ms")
    share = res.process_cpu_share
    if per is not None and share is not None:
        reader = f" ({c['reader']} GPM reader)" if c.get("reader") else ""
        con.print(f"cost: {c['samples']} samples; per GPU per sample {cpu:.3f} ms CPU{reader}, {per:.3f} ms wall "
                  f"(median {c['median_read_ms']:.3f} ms, slowest {c['max_read_ms']:.3f} ms); rankmap used "
                  f"{share * 100:.2f} % of one core (sampler thread {c['cpu_share'] * 100:.2f} %, of which store "
                  f"writes {c['callback_cpu_share'] * 100:.2f} %)")
        if c.get("stalls"):
            con.print(f"{c['stalls']} reads stalled in the driver (a job setting up or tearing "
                      f"down its GPU contexts); {c['held']} ticks were skipped after them, their bytes carried "
                      f"by the next reads")
        if c.get("held_open") or c.get("open_capped"):
            con.print(f"{c['held_open']} ticks were skipped because another process had just opened or closed a GPU's "
                      f"device file (a CUDA context being set up or torn down, before the driver stalls)"
                      + (f"; {c['open_capped']} read all the same after {'a' if c['open_capped'] == 1 else 'each'} "
                         f"long hold" if c.get("open_capped") else ""))
        if (c.get("open_watch") or "").startswith("off"):
            con.print(f"device-file watch {c['open_watch']}: only the stall guard holds the sampler")
    else:
        con.print(f"cost: {c['samples']} samples")
    for row in res.data_check or []:
        parts = []
        for d in ("tx", "rx"):
            data, raw_b, data_b = row.get(f"diff_data_{d}"), row.get(f"raw_{d}"), row.get(f"data_{d}")
            parts.append(f"{d.upper()} {_b(row.get(f'sampled_{d}'))} vs DATA {_b(data_b)}"
                         + (f" ({data * 100:+.2f} %)" if data is not None else "")
                         + (f", RAW/DATA {raw_b / data_b:.2f}" if raw_b is not None and data_b else ""))
        con.print(f"GPU{row['gpu']} NVLink, GPM integral vs NVML DATA counters: " + "; ".join(parts))
