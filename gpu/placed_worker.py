"""A rank that says where it runs, as its environment and the kernel see it.

Started through rankmap's exec wrapper by ``rankmap run -- <launcher> ... gpu/placed_worker.py``
(gpu/run_torchrun.sh on two GPUs, and the launch tests under torchrun, srun and hydra). Prints one
line ``WORKER {json}`` with: the rank variables the launcher and the wrapper set, the host the
launcher says it started the rank on, the CUDA devices it sees, its CPU affinity, its memory policy
(get_mempolicy), the NIC variables, and, under torchrun with torch and CUDA, the UUID of the device
``LOCAL_RANK`` selects and the result of one NCCL all-reduce over the job. The checks against the
mapping are made by whoever started it. Standard library, plus torch when it can be imported.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time

MPOL = {0: "default", 1: "preferred", 2: "bind", 3: "interleave", 4: "local"}
GET_MEMPOLICY = {"x86_64": 239, "aarch64": 236}  # syscall numbers


def mempolicy() -> dict | None:
    """The calling thread's NUMA memory policy: mode and node list (None where unknown)."""
    nr = GET_MEMPOLICY.get(os.uname().machine)
    if nr is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    mode = ctypes.c_int(0)
    words = 16
    mask = (ctypes.c_ulong * words)()
    if libc.syscall(nr, ctypes.byref(mode), mask, ctypes.c_ulong(words * 64), None, ctypes.c_ulong(0)) != 0:
        return None
    nodes = [i for i in range(words * 64) if (mask[i // 64] >> (i % 64)) & 1]
    return {"mode": MPOL.get(mode.value, str(mode.value)), "nodes": nodes}


def main() -> None:
    t0 = time.time()
    env = os.environ
    rec = {k: env.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_WORLD_SIZE",
                                   "PMI_RANK", "PMI_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "SLURMD_NODENAME",
                                   "MPIR_CVAR_CH3_INTERFACE_HOSTNAME", "CUDA_VISIBLE_DEVICES", "RANKMAP_PLACED",
                                   "RANKMAP_CPUS", "RANKMAP_MEMBIND", "RANKMAP_DEVICE", "NCCL_IB_HCA",
                                   "UCX_NET_DEVICES")}
    # the world rank, whichever launcher started it
    rec["world_rank"] = int(next(env[k] for k in ("RANK", "PMI_RANK", "PMI_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")
                                 if k in env))
    rec["affinity"] = sorted(os.sched_getaffinity(0))
    rec["mempolicy"] = mempolicy()
    rec["pid"] = os.getpid()
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        rec["torch"] = None
    else:
        rec["torch"] = torch.__version__
        if torch.cuda.is_available() and "LOCAL_RANK" in env:
            local = int(env["LOCAL_RANK"])
            torch.cuda.set_device(local)
            props = torch.cuda.get_device_properties(local)
            rec["device_uuid"] = "GPU-" + str(props.uuid) if not str(props.uuid).startswith("GPU-") else str(props.uuid)
            rec["device_name"] = props.name
            dist.init_process_group("nccl", device_id=torch.device("cuda", local))
            x = torch.full((1,), float(int(env["RANK"]) + 1), device="cuda")
            dist.all_reduce(x)
            torch.cuda.synchronize()
            rec["allreduce"] = float(x.item())
            dist.destroy_process_group()
    rec["seconds"] = round(time.time() - t0, 3)
    # one write of one line: the workers share the launcher's stdout
    sys.stdout.flush()
    os.write(1, ("WORKER " + json.dumps(rec) + "\n").encode())


if __name__ == "__main__":
    sys.exit(main())
