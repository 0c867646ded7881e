"""A JAX job on every GPU of one process: all-reduce, all-gather, reduce-scatter and a permute.

    python3 gpu/jax_collectives.py --expect expect.json [--mib 32] [--times 3]

Each collective runs ``--times`` times (jit-compiled, each call waited for). XLA's command buffers
(CUDA graphs) are turned off, so each call reaches NCCL as itself. Writes what NCCL must have seen
per GPU: ``{"calls": [{"func", "bytes", "calls"}]}`` (bytes as the NCCL profiler records them).
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("XLA_FLAGS", "--xla_gpu_enable_command_buffer=")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--expect", required=True)
    a.add_argument("--mib", type=int, default=32, help="per-GPU payload of the all-reduce")
    a.add_argument("--times", type=int, default=3)
    args = a.parse_args()
    devs = jax.devices()
    n = len(devs)
    mesh = Mesh(devs, ("x",))
    per = args.mib * (1 << 20) // 4                      # float32 elements per GPU
    # Each GPU makes its own shard: building the array on GPU 0 and sharding it afterwards would copy
    # half of it over NVLink outside NCCL, and the NVLink check would see bytes no collective sent.
    shard = jax.sharding.NamedSharding(mesh, P("x"))
    x = jax.jit(lambda: jnp.ones((n * per,), jnp.float32), out_shardings=shard)()

    def sm(f, out):
        return jax.jit(shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=out))

    ops = {
        "AllReduce": (sm(lambda v: jax.lax.psum(v, "x"), P("x")), per * 4),
        "AllGather": (sm(lambda v: jax.lax.all_gather(v, "x", tiled=True), P("x")), per * 4),
        "ReduceScatter": (sm(lambda v: jax.lax.psum_scatter(v, "x", tiled=True), P("x")), per * 4 // n),
        "Send": (sm(lambda v: jax.lax.ppermute(v, "x", [(i, (i + 1) % n) for i in range(n)]), P("x")), per * 4),
    }
    for name, (f, _b) in ops.items():
        for _ in range(args.times):
            f(x).block_until_ready()
    calls = [{"func": k, "bytes": b, "calls": args.times} for k, (_f, b) in ops.items()]
    calls.append({"func": "Recv", "bytes": per * 4, "calls": args.times})
    with open(args.expect, "w") as fh:
        json.dump({"gpus": n, "calls": calls}, fh)
    print(f"jax {jax.__version__}: {n} GPUs, {args.times} x {', '.join(ops)} of {args.mib} MiB per GPU")


if __name__ == "__main__":
    main()
