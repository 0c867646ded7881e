"""Per-rank exec wrapper: put this rank on its mapped GPU, CPUs and NIC, then become the program.

``rankmap run`` starts every rank as ``python -S execwrap.py PROGRAM ARGS...`` with
``RANKMAP_MAPPING`` naming the mapping JSON. This file imports nothing but the standard library and
the mapping JSON reader (``rankmap.formats.mapping_json``, itself standard library only), and ``-S``
skips site initialisation, so it adds only a few tens of milliseconds per rank before ``os.execvp``
replaces it with the program: no Python stays behind.

What it does, in order:

1. find this rank: world rank from ``OMPI_COMM_WORLD_RANK``, ``PMIX_RANK``, ``PMI_RANK``,
   ``SLURM_PROCID`` or ``RANK``; local rank from ``OMPI_COMM_WORLD_LOCAL_RANK``, ``MPI_LOCALRANKID``,
   ``SLURM_LOCALID`` or ``LOCAL_RANK`` (used when no world rank is known);
2. ``CUDA_VISIBLE_DEVICES`` = the mapped GPU (its UUID when the mapping knows it and
   ``RANKMAP_GPU_BY=uuid``, else its index), so the program's device 0 is the right GPU;
3. unless ``RANKMAP_NO_BIND=1``: CPU affinity to the GPU's local cores (``os.sched_setaffinity``,
   intersected with what the launcher allowed), and memory to its NUMA node by re-executing through
   ``numactl --membind`` when ``numactl`` exists (otherwise CPU affinity only, and
   ``RANKMAP_MEMBIND=unavailable`` says so to whoever looks);
4. ``UCX_NET_DEVICES`` and ``NCCL_IB_HCA`` to the rank's NIC when the mapping names one with a
   device name;
5. ``RANKMAP_PLACED=node:gpu:cpus:nic`` for the program's own logs.

A failure to read the mapping or to find the rank is fatal (one ``rankmap execwrap:`` line, exit 127)
because running unplaced would silently invalidate what the user asked for.
"""

from __future__ import annotations

import os
import shutil
import sys

if not __package__:   # run as a file (python -S .../rankmap/mapping/execwrap.py): the package is two up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from rankmap.errors import RankmapError  # noqa: E402
from rankmap.formats import mapping_json  # noqa: E402

WORLD_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "RANK")
LOCAL_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK")


def _die(msg: str) -> None:
    sys.stderr.write(f"rankmap execwrap: {msg}\n")
    sys.exit(127)


def _first_int(env: dict, names: tuple[str, ...]) -> int | None:
    for n in names:
        v = env.get(n)
        if v is not None and v.strip().lstrip("-").isdigit():
            return int(v)
    return None


def parse_cpus(text: str) -> set[int]:
    """``"0-3,8,10-11"`` -> {0, 1, 2, 3, 8, 10, 11}."""
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    return out


def plan(mapping: mapping_json.Mapping | dict, env: dict) -> tuple[mapping_json.RankPlacement, dict]:
    """(this rank's placement, the environment variables to set). Pure: tested without exec."""
    if isinstance(mapping, dict):
        mapping = mapping_json.from_dict(mapping)
    world = _first_int(env, WORLD_VARS)
    local = _first_int(env, LOCAL_VARS)
    if world is None:
        if local is None:
            raise LookupError("no rank variable set (" + ", ".join(WORLD_VARS + LOCAL_VARS) + ")")
        world = local
    if not 0 <= world < len(mapping.ranks):
        raise LookupError(f"the mapping has no rank {world} (it places {len(mapping.ranks)} ranks)")
    entry = mapping.ranks[world]
    out: dict[str, str] = {}
    by_uuid = env.get("RANKMAP_GPU_BY") == "uuid" and entry.uuid
    out["CUDA_VISIBLE_DEVICES"] = str(entry.uuid) if by_uuid else str(entry.gpu)
    if entry.netdev:
        out["UCX_NET_DEVICES"] = f"{entry.netdev}:1"
        out["NCCL_IB_HCA"] = str(entry.netdev)
    out["RANKMAP_PLACED"] = f"{entry.node}:{entry.gpu}:{entry.cpus or ''}:{entry.nic or ''}"
    return entry, out


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        _die("no program to run")
    path = os.environ.get("RANKMAP_MAPPING")
    if not path:
        _die("RANKMAP_MAPPING is not set")
    try:
        entry, env = plan(mapping_json.load(path), dict(os.environ))
    except (LookupError, RankmapError) as e:
        _die(str(e))
    os.environ.update(env)
    cmd = argv
    if os.environ.get("RANKMAP_NO_BIND") != "1":
        cpus = entry.cpus
        if cpus:
            try:
                want = parse_cpus(cpus)
                allowed = os.sched_getaffinity(0)
                use = want & allowed
                if use:
                    os.sched_setaffinity(0, use)
                    os.environ["RANKMAP_CPUS"] = ",".join(str(c) for c in sorted(use))
                else:
                    os.environ["RANKMAP_CPUS"] = "unbound: none of " + cpus + " is allowed here"
            except (ValueError, OSError) as e:
                os.environ["RANKMAP_CPUS"] = f"unbound: {e}"
        numa = entry.numa
        numactl = shutil.which("numactl")
        if numa is not None and numactl:
            cmd = [numactl, f"--membind={int(numa)}", "--"] + cmd
            os.environ["RANKMAP_MEMBIND"] = str(numa)
        else:
            os.environ["RANKMAP_MEMBIND"] = "unavailable" if numa is not None else "unknown"
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        _die(f"cannot run {cmd[0]}: {e.strerror}")


if __name__ == "__main__":
    main()
