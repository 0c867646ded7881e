"""Per-rank exec wrapper: put this rank on its mapped GPU, CPUs and NIC, then become the program.

``rankmap run`` starts every rank as ``python -S execwrap.py PROGRAM ARGS...`` with
``RANKMAP_MAPPING`` naming the mapping JSON. This file imports nothing but the standard library and
the mapping JSON reader (``rankmap.formats.mapping_json``, itself standard library only), and ``-S``
skips site initialisation, so it adds only a few tens of milliseconds per rank before ``os.execvp``
replaces it with the program: no Python stays behind.

What it does, in order:

1. find this rank: world rank from ``OMPI_COMM_WORLD_RANK``, ``PMIX_RANK``, ``PMI_RANK``, ``PMI_ID``
   (MPICH's hydra sets it instead of ``PMI_RANK`` under ``-pmi-port``), ``SLURM_PROCID`` or ``RANK``;
   local rank from ``OMPI_COMM_WORLD_LOCAL_RANK``, ``MPI_LOCALRANKID``, ``SLURM_LOCALID`` or
   ``LOCAL_RANK``, used when no world rank is known and the mapping has one node (where a local
   rank is the world rank); on a mapping of several nodes that is fatal. Under torchrun
   (``RANKMAP_LAUNCHER=torchrun``) the worker is local rank ``LOCAL_RANK`` of node ``GROUP_RANK``, and
   its world rank is the ``LOCAL_RANK``-th of the ranks the mapping puts on that node (in rank
   order): ``RANK`` (and ``ROLE_RANK``) are set to it, so that ``torch.distributed`` sees the mapped
   rank; torchrun must start as many workers on the node as the mapping places there;
2. ``CUDA_VISIBLE_DEVICES`` = the mapped GPU (its UUID when the mapping knows it and
   ``RANKMAP_GPU_BY=uuid``, else its index), so the program's device 0 is the right GPU. Under
   torchrun, programs pick ``cuda:LOCAL_RANK`` instead, so the node's GPUs are listed with the mapped
   one at position ``LOCAL_RANK``; ``RANKMAP_DEVICE`` says which device index is the mapped GPU;
3. unless ``RANKMAP_NO_BIND=1``: CPU affinity to the GPU's local cores (``os.sched_setaffinity``,
   intersected with what the launcher allowed; where a binding the user asked the launcher for leaves
   none of them, the rank stays where the launcher put it and says so on stderr), and memory to its
   NUMA node with the
   ``set_mempolicy(MPOL_BIND)`` system call, whose policy the program inherits across ``execve``
   (``RANKMAP_MEMBIND`` names the node, or says why memory stayed unbound: a node this machine does not
   have, a kernel without NUMA);
4. ``UCX_NET_DEVICES`` and ``NCCL_IB_HCA`` to the rank's NIC when the mapping names one with a
   device name (an IP interface of the node, such as ``eth0``: ``UCX_NET_DEVICES`` without a port,
   and ``NCCL_SOCKET_IFNAME`` instead of ``NCCL_IB_HCA``);
5. ``RANKMAP_PLACED=node:gpu:cpus:nic`` for the program's own logs;
6. with ``RANKMAP_HOSTS`` (node -> host, from ``rankmap run`` across nodes): a warning on stderr when
   the launcher started the rank on another host than its mapping says (the host as hydra names it
   in ``MPIR_CVAR_CH3_INTERFACE_HOSTNAME``, else Slurm's ``SLURMD_NODENAME``, else this machine's
   name; compared without domain).

A failure to read the mapping or to find the rank is fatal (one ``rankmap execwrap:`` line, exit 127)
because running unplaced would silently invalidate what the user asked for.
"""

from __future__ import annotations

import os
import sys

if not __package__:   # run as a file (python -S .../rankmap/mapping/execwrap.py): the package is two up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from rankmap.errors import RankmapError, counted  # noqa: E402
from rankmap.formats import mapping_json  # noqa: E402

# PMI_ID: hydra with -pmi-port (no PMI_RANK then); before SLURM_PROCID, which under hydra's Slurm
# launcher numbers its proxies, not the ranks
WORLD_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "PMI_ID", "SLURM_PROCID", "RANK")
LOCAL_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK")


def _die(msg: str) -> None:
    sys.stderr.write(f"rankmap execwrap: {msg}\n")
    sys.exit(127)


def _first_set(env: dict, names: tuple[str, ...]) -> tuple[str, int] | None:
    """(name, value) of the first of ``names`` set to a number."""
    for n in names:
        v = env.get(n)
        if v is not None and v.strip().lstrip("-").isdigit():
            return n, int(v)
    return None


def _first_int(env: dict, names: tuple[str, ...]) -> int | None:
    found = _first_set(env, names)
    return None if found is None else found[1]


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


def cpu_list(cpus: set[int]) -> str:
    """``0-3,8`` for {0, 1, 2, 3, 8}: the notation of the mapping's CPU sets."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def torchrun_rank(mapping: mapping_json.Mapping, env: dict) -> int:
    """The world rank of torchrun worker ``LOCAL_RANK`` of node ``GROUP_RANK``."""
    node, local = _first_int(env, ("GROUP_RANK",)), _first_int(env, ("LOCAL_RANK",))
    if node is None or local is None:
        raise LookupError("torchrun set no GROUP_RANK/LOCAL_RANK")
    here = [p.rank for p in mapping.ranks if p.node == node]
    workers = _first_int(env, ("LOCAL_WORLD_SIZE",))
    if workers is not None and workers != len(here):
        raise LookupError(f"torchrun starts {workers} workers on node {node} but the mapping places "
                          f"{counted(len(here), 'rank')} there: give this node --nproc-per-node {len(here)}")
    size = _first_int(env, ("WORLD_SIZE",))
    if size is not None and size != len(mapping.ranks):
        raise LookupError(f"the job has {size} workers but the mapping places {counted(len(mapping.ranks), 'rank')}")
    if not 0 <= local < len(here):
        raise LookupError(f"the mapping places {counted(len(here), 'rank')} on node {node}, not a local rank {local}")
    return here[local]


def plan(mapping: mapping_json.Mapping | dict, env: dict) -> tuple[mapping_json.RankPlacement, dict]:
    """(this rank's placement, the environment variables to set). Pure: tested without exec."""
    if isinstance(mapping, dict):
        mapping = mapping_json.from_dict(mapping)
    torchrun = env.get("RANKMAP_LAUNCHER") == "torchrun"
    out: dict[str, str] = {}
    if torchrun:
        world = torchrun_rank(mapping, env)
        out["RANK"] = out["ROLE_RANK"] = str(world)
    else:
        world = _first_int(env, WORLD_VARS)
        if world is None:
            local = _first_set(env, LOCAL_VARS)
            if local is None:
                raise LookupError("no rank variable set (" + ", ".join(WORLD_VARS + LOCAL_VARS) + ")")
            if mapping.nodes > 1:
                raise LookupError(f"the launcher gave only a local rank ({local[0]}={local[1]}), and the mapping "
                                  f"spans {counted(mapping.nodes, 'node')}: one of " + ", ".join(WORLD_VARS)
                                  + " must name the world rank")
            world = local[1]
    if not 0 <= world < len(mapping.ranks):
        raise LookupError(f"the mapping has no rank {world} (it places {counted(len(mapping.ranks), 'rank')})")
    entry = mapping.ranks[world]
    by_uuid = env.get("RANKMAP_GPU_BY") == "uuid" and entry.uuid
    out["CUDA_VISIBLE_DEVICES"] = str(entry.uuid) if by_uuid else str(entry.gpu)
    out["RANKMAP_DEVICE"] = "0"
    local = _first_int(env, ("LOCAL_RANK",))
    G = mapping.gpus_per_node
    if torchrun and not by_uuid and G and local is not None and local < G and entry.gpu < G:
        # device LOCAL_RANK is the mapped GPU, the node's other GPUs behind it
        order = list(range(G))
        order[order.index(entry.gpu)], order[local] = order[local], entry.gpu
        out["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in order)
        out["RANKMAP_DEVICE"] = str(local)
    if entry.netdev:
        if ip_interface(str(entry.netdev)):
            # an IP interface (Ethernet, or TCP on an emulated node): UCX names it as it is, and NCCL
            # takes its sockets there
            out["UCX_NET_DEVICES"] = str(entry.netdev)
            out["NCCL_SOCKET_IFNAME"] = str(entry.netdev)
        else:
            out["UCX_NET_DEVICES"] = f"{entry.netdev}:1"
            out["NCCL_IB_HCA"] = str(entry.netdev)
    out["RANKMAP_PLACED"] = f"{entry.node}:{entry.gpu}:{entry.cpus or ''}:{entry.nic or ''}"
    return entry, out


def ip_interface(name: str, sys_root: str = "/sys") -> bool:
    """Whether the NIC ``name`` is an IP interface of this machine rather than an RDMA device:
    UCX names an RDMA device with its port (``mlx5_0:1``), an IP interface by itself (``eth0``)."""
    return (os.path.isdir(f"{sys_root}/class/net/{name}")
            and not os.path.isdir(f"{sys_root}/class/infiniband/{name}"))


def wrong_host(entry: mapping_json.RankPlacement, env: dict) -> str | None:
    """A warning when the rank runs on another host than ``RANKMAP_HOSTS`` names for its node."""
    hosts = env.get("RANKMAP_HOSTS", "").split()
    if not hosts or entry.node >= len(hosts) or env.get("RANKMAP_LAUNCHER") == "torchrun":
        return None
    here = env.get("MPIR_CVAR_CH3_INTERFACE_HOSTNAME") or env.get("SLURMD_NODENAME")
    if not here:
        import socket

        here = socket.gethostname()
    want = hosts[entry.node]
    if here.split(".")[0] == want.split(".")[0]:
        return None
    return f"rank {entry.rank} runs on {here} but the mapping puts it on node {entry.node} ({want})"


# set_mempolicy(2) by architecture; MPOL_BIND = 2
_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}


def bind_memory(node: int) -> str:
    """Bind this process's memory (and the program's it becomes) to NUMA ``node``; returns the node,
    or ``unbound: why``."""
    nr = _SET_MEMPOLICY.get(os.uname().machine)
    if nr is None:
        return f"unbound: no set_mempolicy number known for {os.uname().machine}"
    import ctypes

    words = node // 64 + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // 64] = 1 << (node % 64)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(nr, 2, mask, ctypes.c_ulong(words * 64 + 1)) != 0:
        err = ctypes.get_errno()
        nodes = "/sys/devices/system/node"
        if os.path.isdir(nodes) and not os.path.isdir(f"{nodes}/node{node}"):
            return f"unbound: this machine has no NUMA node {node}"
        return f"unbound: set_mempolicy to node {node}: {os.strerror(err)}"
    return str(node)


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
    warning = wrong_host(entry, dict(os.environ))
    if warning:
        sys.stderr.write(f"rankmap execwrap: warning: {warning}\n")
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
                    if len(allowed) >= (os.cpu_count() or 0):   # nothing bound it: the CPUs are not here
                        why = (f"its GPU's CPUs {cpus} are not on this machine (CPUs {cpu_list(allowed)}): the "
                               f"mapping was made for another node; it runs unbound")
                    else:
                        why = (f"the launcher bound it to CPUs {cpu_list(allowed)}, none of its GPU's CPUs {cpus}: "
                               f"it runs where the launcher put it (leave the binding to rankmap run: drop the "
                               f"launcher's binding option, e.g. --bind-to, -bind-to, --cpu-bind)")
                    sys.stderr.write(f"rankmap execwrap: warning: rank {entry.rank}: {why}\n")
            except (ValueError, OSError) as e:
                os.environ["RANKMAP_CPUS"] = f"unbound: {e}"
        numa = entry.numa
        os.environ["RANKMAP_MEMBIND"] = bind_memory(int(numa)) if numa is not None else "unknown"
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        _die(f"cannot run {cmd[0]}: {e.strerror}")


if __name__ == "__main__":
    main()
