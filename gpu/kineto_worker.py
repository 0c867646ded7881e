"""One rank of a small torch.distributed program under torch.profiler: the traces rankmap's Kineto
import is checked with (gpu/kineto_record.sh starts it under torchrun).

    kineto_worker.py --backend nccl|gloo --out DIR [--steps N]

Every rank runs one unprofiled warm-up step, then N profiled steps of: all_reduce (float32 and
bfloat16), all_gather_into_tensor, reduce_scatter_tensor, broadcast, reduce, all_to_all_single,
a send/recv ring (batch_isend_irecv; two ranks or more) and a barrier. It writes
DIR/rank<r>.pt.trace.json (torch.profiler's Chrome trace, CPU and, with NCCL, CUDA activity) and
DIR/expected-rank<r>.json: the calls it made and the bytes its p2p sends carried, from the program
itself, so that the import's exact p2p pairs can be checked where no profiler of rankmap's sees the
traffic (gloo). A gloo call the installed torch does not support is skipped and listed there.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile


def nccl_version() -> str:
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=2)
    a = ap.parse_args()
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    nccl = a.backend == "nccl"
    if nccl:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    done: list[str] = []
    skipped: dict[str, str] = {}
    sends: dict[int, int] = {}

    def attempt(name: str, fn) -> None:
        try:
            fn()
            done.append(name)
        except (RuntimeError, NotImplementedError, ValueError) as e:
            if nccl:
                raise
            skipped[name] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__

    def ring() -> None:
        t, r = torch.ones(3000, device=dev), torch.empty(3000, device=dev)
        ops = [dist.P2POp(dist.isend, t, (rank + 1) % world), dist.P2POp(dist.irecv, r, (rank - 1) % world)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        sends[(rank + 1) % world] = sends.get((rank + 1) % world, 0) + t.numel() * t.element_size()

    def step() -> None:
        f = lambda *s, dtype=torch.float32: torch.ones(*s, dtype=dtype, device=dev)  # noqa: E731
        attempt("all_reduce", lambda: dist.all_reduce(f(1 << 18)))
        attempt("all_reduce_bf16", lambda: dist.all_reduce(f(4096, dtype=torch.bfloat16)))
        attempt("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(
            torch.empty(world * 1024, device=dev), f(1024)))
        attempt("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(
            torch.empty(2048, device=dev), f(2048 * world)))
        attempt("broadcast", lambda: dist.broadcast(f(8192, dtype=torch.int8), src=0))
        attempt("reduce", lambda: dist.reduce(f(1000, dtype=torch.int32), dst=0))
        attempt("all_to_all_single", lambda: dist.all_to_all_single(torch.empty(world * 512, device=dev),
                                                                    f(world * 512)))
        if world > 1:
            attempt("send_recv_ring", ring)
        attempt("barrier", dist.barrier)
        if nccl:
            torch.cuda.synchronize()

    step()                                           # warm-up: communicators set up, not profiled
    done.clear()
    skipped.clear()
    sends.clear()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if nccl else [])
    with profile(activities=acts, record_shapes=False, with_stack=False) as prof:
        for _ in range(a.steps):
            step()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / f"rank{rank}.pt.trace.json"))
    (out / f"expected-rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "world_size": world, "backend": a.backend, "steps": a.steps, "calls": done,
         "skipped": skipped, "p2p_bytes_to": {str(k): v for k, v in sends.items()},
         "torch": torch.__version__, "nccl": nccl_version() if nccl else None}))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
