"""Write PyTorch profiler (Kineto) traces of known torch.distributed programs, for the import's tests.

torch is not installed where the tests run, so this writes what ``torch.profiler`` would for a
program whose calls are given: per rank one JSON object with ``schemaVersion``,
``deviceProperties``, ``distributedInfo`` (rank, world size, backend, ``pg_config``,
``nccl_version``) and ``traceEvents`` -- the c10d op (``c10d::allreduce_``, ...) on the main
thread, inside it the ``record_param_comms`` cpu_op whose args are the ones the profiler's
``saveNcclMeta`` writes (names and value forms as in PyTorch's source: lists as text, strings
quoted, ``Rank`` the own group rank, the root for rooted calls, the peer for send/recv), the
cuda_runtime launch, and the NCCL kernel on its stream carrying the same args, named as NCCL
2.19+ names its kernels. A few ordinary ops and a ``ProfilerStep`` annotation are around them, and
the ``init`` record c10d writes when a communicator is set up.

Run as a script it writes the NCCL harness scenario: ``python tests/kineto_gen.py OUT_DIR [N]``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

NCCL_TYPE = {"Float": "f32", "Half": "f16", "BFloat16": "bf16", "Double": "f64", "Int": "i32", "Long": "i64",
             "Char": "i8", "Byte": "u8"}
C10D_OP = {"allreduce": "c10d::allreduce_", "_allgather_base": "c10d::_allgather_base_",
           "_reduce_scatter_base": "c10d::_reduce_scatter_base_", "broadcast": "c10d::broadcast_",
           "reduce": "c10d::reduce_", "send": "c10d::send", "recv": "c10d::recv_", "all_to_all": "c10d::alltoall_base_",
           "all_to_allv": "c10d::alltoall_base_", "barrier": "c10d::barrier", "init": "c10d::init"}


@dataclass(frozen=True)
class Group:
    name: str                 # Process Group Name (c10d's pg uid: "0" for the default group)
    desc: str                 # Process Group Description
    ranks: tuple[int, ...]    # global ranks, group rank = index


@dataclass(frozen=True)
class Call:
    coll: str                 # Collective name
    group: Group
    in_nelems: int
    out_nelems: int
    dtype: str
    rank_arg: int             # what c10d passes as rank: own group rank, the root, or the p2p peer
    kernel: str | None        # NCCL kernel name (None: no GPU activity recorded for it)
    in_split: tuple[int, ...] = ()
    out_split: tuple[int, ...] = ()


def kernel(func: str, dtype: str, algo: str, proto: str, redop: str | None = "Sum") -> str:
    typ = f"_{NCCL_TYPE[dtype]}" if redop else ""
    return f"ncclDevKernel_{func}{'_' + redop if redop else ''}{typ}_{algo}_{proto}(ncclDevKernelArgsStorage<4096ul>)"


def _fmt(values: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, values)) + "]"


def _args(c: Call, me: int, world: int) -> dict:
    g = c.group
    a = {"Collective name": c.coll, "dtype": c.dtype, "In msg nelems": c.in_nelems, "Out msg nelems": c.out_nelems,
         "In split size": _fmt(c.in_split), "Out split size": _fmt(c.out_split), "Group size": len(g.ranks),
         "Process Group Name": g.name, "Process Group Description": g.desc,
         "Process Group Ranks": _fmt(g.ranks) if len(g.ranks) <= 30 else _fmt(g.ranks[:30])[:-1] + ", ...]",
         "Rank": c.rank_arg}
    stride = g.ranks[1] - g.ranks[0] if len(g.ranks) > 1 else 1
    if all(g.ranks[i] == g.ranks[0] + i * stride for i in range(len(g.ranks))) and stride > 0:
        a["Global rank start"], a["Global rank stride"] = g.ranks[0], stride
    if c.coll == "send":
        a["Dst Rank"] = g.ranks[c.rank_arg]
    elif c.coll == "recv":
        a["Src Rank"] = g.ranks[c.rank_arg]
    return a


def trace(rank: int, world: int, calls: list[Call], groups: list[Group], *, nccl_version: str = "2.28.3",
          backend: str = "nccl", t0_us: float = 1_750_000_000_000_000.0) -> dict:
    """The trace ``torch.profiler`` would write for one rank making ``calls``."""
    pid, tid, stream = 4000 + rank, 4000 + rank, 7
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": pid, "tid": tid, "ts": t0_us,
         "dur": 100.0 * (len(calls) + 2), "args": {"External id": 1, "Record function id": 0}},
    ]
    ext, corr, t = 2, 100, t0_us + 5.0
    for g in groups:                       # communicator set-up: an init record without payload
        if rank in g.ranks:
            ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": tid, "ts": t,
                       "dur": 3.0, "args": {"External id": ext, "Record function id": 0, **_args(
                           Call("init", g, 0, 0, "Byte", g.ranks.index(rank), None), rank, world)}})
            ext, t = ext + 1, t + 5.0
    for c in calls:
        args = _args(c, rank, world)
        ev.append({"ph": "X", "cat": "cpu_op", "name": C10D_OP.get(c.coll, "c10d::" + c.coll), "pid": pid, "tid": tid,
                   "ts": t, "dur": 40.0, "args": {"External id": ext, "Record function id": 0, "Sequence number": ext}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": tid, "ts": t + 1.0,
                   "dur": 30.0, "args": {"External id": ext + 1, "Record function id": 0, **args}})
        if c.kernel:
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                       "ts": t + 20.0, "dur": 4.0, "args": {"External id": ext + 1, "cbid": 211, "correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": c.kernel, "pid": 0, "tid": stream, "ts": t + 30.0,
                       "dur": 55.0, "args": {"External id": ext + 1, "queued": 0, "device": 0, "context": 1,
                                             "stream": stream, "correlation": corr, "registers per thread": 96,
                                             "shared memory": 0, "blocks per SM": 0.03, "grid": [4, 1, 1],
                                             "block": [640, 1, 1], **args}})
            ev.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": t + 30.0, "cat": "ac2g",
                       "name": "ac2g", "bp": "e"})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": pid, "tid": tid, "ts": t + 60.0,
                   "dur": 8.0, "args": {"External id": ext + 2, "Record function id": 0}})
        ext, corr, t = ext + 3, corr + 1, t + 100.0
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150_121_529_344,
                                  "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
            "distributedInfo": {"backend": backend, "rank": rank, "world_size": world, "pg_count": len(groups),
                                "pg_config": [{"pg_name": g.name, "pg_desc": g.desc, "backend_config": "cuda:nccl",
                                               "pg_size": len(g.ranks), "ranks": list(g.ranks)} for g in groups],
                                "nccl_version": nccl_version},
            "record_shapes": 1, "with_stack": 0, "cuda_runtime_version": 12080, "cupti_version": 26,
            "trace_id": f"{rank:032X}", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1_750_000_000_000_000_000,
            "traceEvents": ev, "traceName": f"rank{rank}.pt.trace.json"}


def harness_scenario(n: int) -> tuple[list[Group], dict[int, list[Call]]]:
    """The NCCL harness's scenario (tests/nccl_harness/harness.c) as the torch.distributed calls that
    make NCCL run it: group A the world in rank order, group B the same ranks reversed (a rank order
    a group's rank list can hold, though ``new_group`` itself would sort it)."""
    a = Group("0", "default_pg", tuple(range(n)))
    b = Group("1", "reversed", tuple(reversed(range(n))))
    calls: dict[int, list[Call]] = {}
    for r in range(n):
        rb = n - 1 - r
        c = [Call("allreduce", a, 1200, 1200, "Float", r, kernel("AllReduce", "Float", "RING", "SIMPLE"))
             for _ in range(3)]
        c += [Call("_allgather_base", a, 256, 256 * n, "Half", r, kernel("AllGather", "Half", "RING", "LL", None))
              for _ in range(2)]
        c.append(Call("_reduce_scatter_base", a, 128 * n, 128, "Double", r,
                      kernel("ReduceScatter", "Double", "RING", "LL128")))
        c.append(Call("broadcast", a, 4096, 4096, "Char", 1 % n, kernel("Broadcast", "Char", "RING", "SIMPLE", None)))
        c.append(Call("reduce", a, 100, 100, "Int", 0, kernel("Reduce", "Int", "RING", "SIMPLE")))
        for _ in range(2):
            c.append(Call("send", a, 5000, 5000, "Float", (r + 1) % n, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"))
            c.append(Call("recv", a, 5000, 5000, "Float", (r + n - 1) % n, None))
        c.append(Call("allreduce", a, 65536, 65536, "BFloat16", r, kernel("AllReduce", "BFloat16", "TREE", "LL128")))
        c.append(Call("allreduce", b, 300, 300, "Float", rb, kernel("AllReduce", "Float", "RING", "SIMPLE")))
        c.append(Call("send", b, 64, 64, "Byte", (rb + 1) % n, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"))
        calls[r] = c
    return [a, b], calls


def write(out: Path, groups: list[Group], calls: dict[int, list[Call]], **kw) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    world = len(calls)
    for r, c in sorted(calls.items()):
        p = out / f"rank{r}.pt.trace.json"
        p.write_text(json.dumps(trace(r, world, c, [g for g in groups if r in g.ranks], **kw)))
        paths.append(p)
    return paths


if __name__ == "__main__":
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    for p in write(Path(sys.argv[1]), *harness_scenario(n)):
        print(p)
