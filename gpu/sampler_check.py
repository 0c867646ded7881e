"""GPU check of the link sampler: copy a known number of bytes GPU0 -> GPU1 with PyTorch and
compare with the NVLink DATA counters the sampler reads. Prints PASS/FAIL lines.

Run on a node with >= 2 NVLink-connected GPUs:  PYTHONPATH=src python3 gpu/sampler_check.py
"""

import sys
import time

import torch

from rankmap.counters.sampler import FieldSource, LinkSampler

size = 1 << 30  # bytes per copy
reps = 8
a = torch.empty(size, dtype=torch.uint8, device="cuda:0").fill_(1)
b = torch.empty(size, dtype=torch.uint8, device="cuda:1")
b.copy_(a)  # warm up peer access
torch.cuda.synchronize(0); torch.cuda.synchronize(1)
time.sleep(0.2)

src = FieldSource()
t0 = time.perf_counter_ns()
s = LinkSampler(src, interval_s=0.02).start()
for _ in range(reps):
    b.copy_(a)
torch.cuda.synchronize(0); torch.cuda.synchronize(1)
time.sleep(0.1)
samples = s.stop()
cost_ns = []
for _ in range(20):
    t = time.perf_counter_ns(); src.read(0); cost_ns.append(time.perf_counter_ns() - t)
tot = s.totals()
moved = size * reps
print(f"bytes copied GPU0->GPU1: {moved}")
ok = True
for g, name, want in ((0, "nvlink_tx", moved), (1, "nvlink_rx", moved)):
    got = getattr(tot[g], name)
    err = (got - want) / want
    flag = "PASS" if abs(err) <= 0.02 else "FAIL"
    ok &= flag == "PASS"
    print(f"{flag} GPU{g} {name}: {got} bytes ({err*100:+.3f} % vs copied)")
for g in (0, 1):
    t = tot[g]
    print(f"GPU{g}: nvlink tx {t.nvlink_tx} rx {t.nvlink_rx}; pcie tx {t.pcie_tx} rx {t.pcie_rx}")
print(f"samples: {len(samples)} over {(time.perf_counter_ns()-t0)/1e6:.0f} ms; one GPU read "
      f"(4 fields, one call) median {sorted(cost_ns)[10]/1e3:.0f} us")
sys.exit(0 if ok else 1)
