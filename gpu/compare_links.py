"""Compare what a stored profile says each GPU sent and received with the NVLink / PCIe counters
that `rankmap profile` sampled during the same run. Prints PASS/FAIL lines; exit = FAIL count.

    PYTHONPATH=src python3 gpu/compare_links.py [--job latest] [--nccl-log FILE] [--tolerance 0.02]

Rank r is taken to run on GPU r (the default placement of torchrun and mpirun on one node).
On an NVSwitch node NVML counts bytes per GPU port, not per GPU pair, so the check is per GPU:
TX of GPU g = bytes g sent to every peer, RX = bytes every peer sent to g. For NCCL jobs the
bytes on the wire come from rankmap.pairs.nccl_model (NCCL's rings from the INFO log that
`rankmap profile` keeps in the run directory, or --nccl-log, protocol overhead included); for MPI jobs the device-resident bytes of the profile are
what could cross NVLink, and the host-staged bytes cross PCIe instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from rankmap.pairs import nccl_model
from rankmap.store import open_store

fails = 0


def check(ok: bool, what: str) -> None:
    global fails
    print(("PASS " if ok else "FAIL ") + what)
    fails += not ok


def last_counters(samples: list[dict]) -> dict[tuple[int, str], tuple[int, int]]:
    out: dict[tuple[int, str], tuple[int, int]] = {}
    for s in sorted(samples, key=lambda s: s["t_ns"]):
        out[(s["device"], s["link"])] = (s["tx_bytes"] or 0, s["rx_bytes"] or 0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", default="latest")
    ap.add_argument("--nccl-log")
    ap.add_argument("--tolerance", type=float, default=0.02)
    a = ap.parse_args()
    st = open_store()
    job_id = st.resolve_job(a.job)
    job = st.job(job_id)
    n = job["world_size"]
    counters = last_counters(st.link_samples(job_id))
    if not counters:
        check(False, f"job {job_id}: no link samples stored")
        return fails
    print(f"job {job_id}: {job['command']}  ({n} rank{'' if n == 1 else 's'})")
    ngpu = 1 + max(d for d, _ in counters)

    nccl_rows = [r for r in st.traffic(job_id) if r["class"] == "nccl"]
    if nccl_rows:
        prof = nccl_model.load(job["run_dir"], extra_logs=[Path(a.nccl_log)] if a.nccl_log else None)
        wire, used = nccl_model.pair_matrix(prof, wire=True)
        print(f"ring order per communicator: {used}")
        tx_model, rx_model = wire.sum(axis=1), wire.sum(axis=0)
        print(f"{'GPU':>4} {'profile TX':>14} {'NVLink TX':>14} {'diff %':>8} {'profile RX':>14} {'NVLink RX':>14} {'diff %':>8}")
        for g in range(min(n, ngpu)):
            tx, rx = counters.get((g, "nvlink"), (0, 0))
            dt = (tx - tx_model[g]) / tx_model[g] * 100 if tx_model[g] else float("nan")
            dr = (rx - rx_model[g]) / rx_model[g] * 100 if rx_model[g] else float("nan")
            print(f"{g:>4} {tx_model[g]:>14.0f} {tx:>14} {dt:>8.3f} {rx_model[g]:>14.0f} {rx:>14} {dr:>8.3f}")
            check(abs(dt) <= a.tolerance * 100, f"GPU{g} NVLink TX within {a.tolerance:.0%} of the profile ({dt:+.3f} %)")
            check(abs(dr) <= a.tolerance * 100, f"GPU{g} NVLink RX within {a.tolerance:.0%} of the profile ({dr:+.3f} %)")
        print("NCCL traffic matrix T[src][dst] on the wire (bytes):")
        for row in wire:
            print("  " + " ".join(f"{v:>13.0f}" for v in row))
    else:
        dev = np.zeros((n, n))
        host = np.zeros((n, n))
        for r in st.traffic(job_id, by_mem=True):
            (dev if r.get("mem") == "device" else host)[r["src"], r["dst"]] += r["bytes"]
        print(f"{'GPU':>4} {'MPI device B sent':>18} {'NVLink TX':>12} {'NVLink RX':>12} {'MPI host B sent':>16} {'PCIe TX':>14} {'PCIe RX':>14}")
        for g in range(min(n, ngpu)):
            tx, rx = counters.get((g, "nvlink"), (0, 0))
            ptx, prx = counters.get((g, "pcie"), (0, 0))
            print(f"{g:>4} {dev[g].sum():>18.0f} {tx:>12} {rx:>12} {host[g].sum():>16.0f} {ptx:>14} {prx:>14}")
            sent = dev[g].sum()
            # no device bytes: NVLink must stay quiet (a few KB of driver traffic at most)
            ok = abs(tx - sent) <= max(a.tolerance * sent, 1 << 20)
            check(ok, f"GPU{g} NVLink TX {tx} B agrees with the profile's device-resident MPI bytes {sent:.0f} B")
    return fails


if __name__ == "__main__":
    sys.exit(min(main(), 100))
