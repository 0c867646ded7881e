"""Time ``dist.all_reduce`` from 8 B to 1 GiB (float32 for >= 4 B; 8 B = 2 floats) with CUDA events.

One torchrun job measures one configuration; run it alternately with and without the rankmap
NCCL profiler plugin (``NCCL_PROFILER_PLUGIN`` + ``RANKMAP_RUN_DIR``) and compare the medians
(``gpu/nccl.sh`` does that)::

    torchrun --nproc_per_node=2 bench/nccl_allreduce.py --out without.json
    NCCL_PROFILER_PLUGIN=$(...) RANKMAP_RUN_DIR=run torchrun --nproc_per_node=2 bench/nccl_allreduce.py --out with.json

For each size: a warm-up, then ``--trials`` timed loops of back-to-back all-reduces on the current
stream; a loop's time / its length is one sample; rank 0 writes
``{"calls": all-reduces issued per rank, "us_per_op": {size: [us per op, ...]}}``.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist


def sizes(lo: int, hi: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--budget-bytes", type=int, default=1 << 31, help="bytes reduced per timed loop (sets its length)")
    p.add_argument("--out", required=True, help="rank 0 writes the samples here (JSON)")
    a = p.parse_args()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    big = torch.ones(a.max_bytes // 4, device="cuda")
    dist.all_reduce(big[:1024])
    torch.cuda.synchronize()
    res: dict[int, list[float]] = {}
    calls = 1
    for size in sizes(a.min_bytes, a.max_bytes):
        t = big[: max(1, size // 4)]
        iters = max(10, min(200, a.budget_bytes // size))
        for _ in range(5):
            dist.all_reduce(t)
        calls += 5 + a.trials * iters
        samples = []
        for _ in range(a.trials):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                dist.all_reduce(t)
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop) * 1000.0 / iters)   # ms -> us per op
        res[size] = samples
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"calls": calls, "us_per_op": {str(k): v for k, v in res.items()}}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
