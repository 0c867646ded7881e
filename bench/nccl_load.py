#!/usr/bin/env python3
"""An NVLink load for the link sampler's cost measurements (gpu/monitor.sh, bench/gpm_timeline.py).

    torchrun --nproc_per_node=N bench/nccl_load.py        (LOAD_S: seconds, default 20)

All-reduces of 256 MiB (fp32) in a loop, up to LOAD_S seconds (rank 0's clock decides, every rank
stops together); prints 'loading' once the traffic runs."""
import os
import time
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
r = dist.get_rank()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", r)))
x = torch.ones(1 << 26, device="cuda")
stop = torch.zeros(1, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
end = time.monotonic() + float(os.environ.get("LOAD_S", "20"))
if r == 0:
    print(f"loading: {dist.get_world_size()} ranks, all-reduce of {x.numel() * 4} bytes in a loop", flush=True)
while True:
    for _ in range(4):
        dist.all_reduce(x)
    stop.fill_(1.0 if r == 0 and time.monotonic() > end else 0.0)
    dist.all_reduce(stop)
    if stop.item() > 0:
        break
dist.destroy_process_group()
