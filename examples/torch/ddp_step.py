"""A PyTorch DDP training step plus explicit send/recv, all_gather and all_reduce of known sizes.

Run under torchrun, one process per GPU::

    torchrun --nproc_per_node=2 examples/torch/ddp_step.py
    rankmap profile -- torchrun --nproc_per_node=2 examples/torch/ddp_step.py

Every rank does, with NCCL:

* ``--steps`` DDP training steps of a small MLP: DDP all-reduces every gradient once per step
  (float32, in buckets), so each rank's DDP AllReduce payload is ``steps x parameter bytes``;
  DDP's constructor also broadcasts the parameters from rank 0 and all-gathers their shapes;
* ``--reps`` explicit ``all_reduce`` of ``--ar-mib`` MiB (+4 bytes, so its size is unique),
  ``all_gather`` of ``--ag-mib`` MiB per rank (+4 bytes) and a ``send``/``recv`` exchange of
  ``--p2p-mib`` MiB (+4 bytes) with its partner rank (rank XOR 1).

Rank 0 prints the expected bytes per operation and, with ``--expect FILE``, writes them as JSON
(what ``gpu/nccl.sh`` checks the profile against). ``--backend gloo --cpu`` runs it without GPUs.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

MIB = 1 << 20


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3, help="DDP training steps")
    p.add_argument("--hidden", type=int, default=1024, help="MLP width")
    p.add_argument("--layers", type=int, default=3, help="MLP hidden layers")
    p.add_argument("--reps", type=int, default=4, help="repetitions of each explicit operation")
    p.add_argument("--ar-mib", type=int, default=64, help="explicit all_reduce size, MiB")
    p.add_argument("--ag-mib", type=int, default=16, help="explicit all_gather size per rank, MiB")
    p.add_argument("--p2p-mib", type=int, default=32, help="explicit send/recv size, MiB")
    p.add_argument("--backend", default="nccl")
    p.add_argument("--cpu", action="store_true", help="tensors on the CPU (with --backend gloo)")
    p.add_argument("--expect", help="rank 0 writes the expected operations here (JSON)")
    return p.parse_args()


def mlp(hidden: int, layers: int) -> nn.Module:
    mods: list[nn.Module] = []
    for _ in range(layers):
        mods += [nn.Linear(hidden, hidden), nn.ReLU()]
    mods.append(nn.Linear(hidden, 10))
    return nn.Sequential(*mods)


def main() -> None:
    a = parse()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if a.cpu:
        dev = torch.device("cpu")
    else:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    dist.init_process_group(a.backend)
    torch.manual_seed(0)

    # ---- DDP training steps ----
    model = mlp(a.hidden, a.layers).to(dev)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ddp = DDP(model, device_ids=None if a.cpu else [local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(64, a.hidden, device=dev)
    y = torch.randint(0, 10, (64,), device=dev)
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    # ---- explicit operations of known, unique sizes (float32: 4 bytes per element) ----
    ar_n, ag_n, p2p_n = a.ar_mib * MIB // 4 + 1, a.ag_mib * MIB // 4 + 1, a.p2p_mib * MIB // 4 + 1
    ar = torch.ones(ar_n, device=dev)
    ag_in = torch.full((ag_n,), float(rank), device=dev)
    ag_out = [torch.empty(ag_n, device=dev) for _ in range(world)]
    partner = rank ^ 1 if (rank ^ 1) < world else None
    buf = torch.full((p2p_n,), float(rank), device=dev)
    for _ in range(a.reps):
        dist.all_reduce(ar)
        dist.all_gather(ag_out, ag_in)
        if partner is not None:
            if rank % 2 == 0:     # even sends first, odd receives first: no cycle
                dist.send(buf, partner)
                dist.recv(buf, partner)
            else:
                dist.recv(buf, partner)
                dist.send(buf, partner)
    if not a.cpu:
        torch.cuda.synchronize()
    assert ag_out[world - 1][0].item() == world - 1, "all_gather result"

    expect = {
        "world_size": world,
        "steps": a.steps,
        "param_bytes": param_bytes,
        "ddp_allreduce_bytes_per_rank": a.steps * param_bytes,
        "explicit": [
            {"func": "AllReduce", "bytes": ar_n * 4, "calls": a.reps},
            {"func": "AllGather", "bytes": ag_n * 4, "calls": a.reps},
        ] + ([{"func": "Send", "bytes": p2p_n * 4, "calls": a.reps, "to": "rank^1"},
              {"func": "Recv", "bytes": p2p_n * 4, "calls": a.reps, "from": "rank^1"}] if world > 1 else []),
    }
    if rank == 0:
        print(f"ddp_step: world {world}, {a.steps} DDP steps, {param_bytes} parameter bytes")
        print(f"  DDP AllReduce payload per rank: {expect['ddp_allreduce_bytes_per_rank']} bytes")
        for e in expect["explicit"]:
            print(f"  nccl{e['func']:<14} {e['bytes']:>12} bytes x {e['calls']} calls per rank")
        if a.expect:
            with open(a.expect, "w") as f:
                json.dump(expect, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
