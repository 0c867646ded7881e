"""A PyTorch job whose NCCL all-reduce is captured into a CUDA graph and replayed.

    torchrun --nproc_per_node=2 gpu/torch_graphs.py --expect expect.json [--mib 64] [--replays 10]

One eager all-reduce (NCCL's warm-up), then a graph holding ``--ops`` all-reduces of ``--mib`` MiB is
captured once and replayed ``--replays`` times. NCCL's profiler hears of the graph's calls once, at
capture; the NVLink counters see every replay. Rank 0 writes what the profile must hold.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--expect", required=True)
    a.add_argument("--mib", type=int, default=64)
    a.add_argument("--ops", type=int, default=2)
    a.add_argument("--replays", type=int, default=10)
    args = a.parse_args()
    # A hang (say in teardown) prints every thread's stack before the caller's timeout kills it.
    faulthandler.dump_traceback_later(45, exit=True, file=sys.stderr)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    t = torch.ones(args.mib * (1 << 20) // 4, device="cuda")
    dist.all_reduce(t)                                   # eager: communicator and warm-up
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(args.ops):
                dist.all_reduce(t)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(args.replays):
        g.replay()
    torch.cuda.synchronize()
    dist.barrier()
    if dist.get_rank() == 0:
        b = t.numel() * 4
        with open(args.expect, "w") as fh:
            json.dump({"calls": [{"func": "AllReduce", "bytes": b, "calls": 1 + args.ops}],
                       "captured_calls": args.ops, "replays": args.replays}, fh)
    # The graph holds work on the communicator: free it before the communicator is destroyed.
    del g
    torch.cuda.synchronize()
    print(f"rank {dist.get_rank()}: replays done, destroying the process group", flush=True)
    dist.destroy_process_group()
    print(f"rank {local}: process group destroyed", flush=True)
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
