"""Launching a job with a mapping: the wrapped command and the launcher-native placement files.

Every rank is started through :mod:`rankmap.mapping.execwrap`: the launcher's own argv gets the
wrapper inserted right before the program (``mpirun [opts] PROG ARGS`` becomes
``mpirun [opts] -x RANKMAP_MAPPING=F python -S execwrap.py PROG ARGS``), the way the capture shim is
injected, using the launcher adapter of :mod:`rankmap.capture.launchers` to recognise the launcher
and find where its options end (in every app context of an MPMD command ``a : b``, each program
gets the wrapper):

* Open MPI: ``-x`` for the variables; Open MPI would otherwise bind each rank to a core of its own
  choosing, which the wrapper could then not leave, so ``--bind-to none`` is added unless the user
  set a binding;
* MPICH/MVAPICH hydra: ``-genv``;
* Slurm ``srun``: ``--export``;
* ``torchrun`` (or ``python -m torch.distributed.run``): torchrun starts its workers itself, so the
  wrapper becomes the workers' entrypoint through torchrun's ``--no-python``: ``torchrun [opts]
  SCRIPT ARGS`` becomes ``torchrun [opts] --no-python python -S execwrap.py PYTHON -u SCRIPT ARGS``
  (``-m MODULE`` becomes ``PYTHON -u -m MODULE``; a command already run with ``--no-python`` is
  wrapped as it is). The workers inherit the launcher's environment, which carries the variables;
  ``RANKMAP_LAUNCHER=torchrun`` tells the wrapper to read ``GROUP_RANK``/``LOCAL_RANK``;
* a single process: the environment.

Across nodes the node of every rank is given to the launcher in its own terms, and host names
come from ``--hosts`` or the Slurm allocation:

* Open MPI 4: a rankfile (``rank R=HOST slot=CPUS``, ``--rankfile``; the CPUs are the OS's numbers,
  so Open MPI 4 is told ``--mca rmaps_rank_file_physical 1``), and the hosts with their slot counts
  (``--host``) unless the user named hosts;
* Open MPI 5: a hostfile of one line per rank, in rank order, with ``--map-by seq`` (the sequential
  mapper puts rank ``i`` on the host of line ``i``) and ``--bind-to none``. Open MPI 5 reads a
  rankfile's slots as logical core indexes and has no option to read them as the OS's numbers, so on
  a node with hyperthreads (``0-19,40-59``) it refuses the rankfile; the CPUs are the wrapper's to
  bind anyway, so the launcher is only told the host;
* hydra: a machinefile of ``HOST:COUNT`` lines, one per run of consecutive ranks on one host
  (``-f``): hydra gives processes to its entries in order, so rank ``i`` lands on the host the
  mapping says;
* Slurm: ``SLURM_HOSTFILE`` with ``--distribution=arbitrary`` (task ``i`` on line ``i``);
* torchrun: nothing to write: every node runs its own torchrun, and the wrapper numbers the workers
  of node ``GROUP_RANK`` with the world ranks the mapping puts there (so the mapping's node split
  holds whatever ranks torchrun would have given them); node ``u`` of the mapping is the torchrun
  with node rank ``u``.

``RANKMAP_HOSTS`` (the host of node 0, 1, ..., separated by spaces) lets the wrapper warn when a rank starts on another host
than its mapping says.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rankmap.errors import RankmapError, counted, verb
from rankmap.formats.mapping_json import Mapping

WRAPPER = str(Path(__file__).with_name("execwrap.py"))

#: the file a multi-node launch of each launcher needs (torchrun and a single process need none);
#: Open MPI 5 takes a sequential hostfile instead of a rankfile (:func:`node_file`)
NODE_FILE = {"openmpi": "rankfile", "hydra": "machinefile", "srun": "slurm-hostfile"}
_OMPI5_NODE_FILE = "hostfile-seq"

_OMPI_HOST_OPTS = ("-H", "--host", "-host", "--hostfile", "-hostfile", "-machinefile", "--machinefile",
                   "--default-hostfile")
_OMPI_MAP_OPTS = ("--map-by", "-map-by", "--rankfile", "-rankfile", "-rf", "--npernode", "-npernode",
                  "-N", "--ppr", "-ppr")
_HYDRA_HOST_OPTS = ("-f", "-hostfile", "-machinefile", "-hosts", "-host", "-ppn")
_TORCH_NO_PYTHON = ("--no-python", "--no_python")
_TORCH_MODULE = ("-m", "--module")


def wrapper_argv() -> list[str]:
    """How a rank starts the wrapper: this Python, without site initialisation (fast start)."""
    return [sys.executable, "-S", WRAPPER]


def wrap(argv: list[str], mapping_file: str, *, bind: bool = True, node_file: str | None = None,
         mapping: Mapping | None = None, hosts: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) that launch ``argv`` with every rank placed by ``mapping_file``.

    ``node_file`` is the launcher's node placement (:func:`node_file_text`) of a multi-node
    ``mapping``, ``hosts`` the host name of every node of it."""
    from rankmap.capture import launchers as L

    launcher = L.recognise(argv)
    env = dict(os.environ)
    ours = {"RANKMAP_MAPPING": str(Path(mapping_file).resolve())}
    if not bind:
        ours["RANKMAP_NO_BIND"] = "1"
    if hosts:
        ours["RANKMAP_HOSTS"] = " ".join(hosts)  # no commas: srun --export splits on them
    head, tail = argv[: launcher.prefix_len], argv[launcher.prefix_len:]
    if launcher.kind == "openmpi":
        ctxs = _contexts(tail, L.OMPI_VALUE_OPTS, L._OMPI_TWO_VALUE_OPTS)
        opts = [t for c_opts, _ in ctxs for t in c_opts]
        xs = [t for k, v in ours.items() for t in ("-x", f"{k}={v}")]    # -x: per app context
        extra = []
        seq = node_file is not None and _sequential(launcher)
        if seq:
            # Open MPI 5: the sequential mapper places each rank on its line's host; the wrapper binds
            clash = [o for o in opts if o.split("=", 1)[0] in _OMPI_HOST_OPTS + _OMPI_MAP_OPTS]
            if clash:
                raise RankmapError(f"rankmap run puts the ranks of a multi-node mapping on their hosts itself "
                                   f"(Open MPI 5: --map-by seq with a hostfile): drop {' '.join(dict.fromkeys(clash))} "
                                   f"from the command and pass --hosts to rankmap run instead")
            extra += ["--map-by", "seq", "--hostfile", node_file]
        elif node_file:
            extra += ["--rankfile", node_file]
            # the rankfile's slots are the topology's CPU numbers (the OS's); Open MPI 4 reads them as
            # logical core indexes unless told otherwise, and on a machine with hyperthreads
            # ("0-19,40-59") fails on cores it does not have
            if L.openmpi_major(launcher.executable) is not None and "rmaps_rank_file_physical" not in opts:
                extra += ["--mca", "rmaps_rank_file_physical", "1"]
            if hosts and mapping is not None and not _has_opt(opts, _OMPI_HOST_OPTS):
                extra += ["--host", host_slots(mapping, hosts)]
        if (seq or not node_file) and not _has_opt(opts, ("--bind-to", "-bind-to")):
            extra += ["--bind-to", "none"]
        return head + L.join_contexts([(xs + (extra if i == 0 else []) + o + wrapper_argv() + p)
                                       for i, (o, p) in enumerate(ctxs)]), env
    if launcher.kind == "hydra":
        ctxs = _contexts(tail, L.HYDRA_VALUE_OPTS, L.HYDRA_TWO_VALUE_OPTS)
        opts = [t for c_opts, _ in ctxs for t in c_opts]
        extra = [t for k, v in ours.items() for t in ("-genv", k, v)]   # -genv: every app context
        if node_file:
            if _has_opt(opts, _HYDRA_HOST_OPTS) or len(ctxs) > 1:
                raise RankmapError("rankmap run puts the ranks of a multi-node mapping on their hosts itself: "
                                   "drop the command's host options (-f, -hosts, -ppn) and MPMD ':' and pass "
                                   "--hosts to rankmap run instead")
            extra += ["-f", node_file]
        return head + extra + L.join_contexts([o + wrapper_argv() + p for o, p in ctxs]), env
    if launcher.kind == "srun":
        prog = L.program_index(tail, L.SRUN_VALUE_OPTS, set())
        opts = L.srun_export(tail[:prog], ours)
        if node_file:
            env["SLURM_HOSTFILE"] = node_file
            opts = [o for o in opts if not o.startswith("--distribution")] + ["--distribution=arbitrary"]
        return head + opts + wrapper_argv() + tail[prog:], env
    if launcher.kind == "torchrun":
        prog = L.program_index(tail, L.TORCHRUN_VALUE_OPTS, set())
        opts = tail[:prog]
        entry = tail[prog:]
        if not entry:
            raise RankmapError("the torchrun command names no script to run")
        module = any(o in _TORCH_MODULE for o in opts)
        if any(o in _TORCH_NO_PYTHON for o in opts):
            inner = entry
        else:
            inner = [torchrun_python(launcher), "-u"] + (["-m"] if module else []) + entry
        opts = [o for o in opts if o not in _TORCH_NO_PYTHON + _TORCH_MODULE]
        env.update(ours, RANKMAP_LAUNCHER="torchrun")
        return head + opts + ["--no-python"] + wrapper_argv() + inner, env
    if launcher.kind == "plain":
        env.update(ours)
        env.setdefault("RANK", "0")
        return wrapper_argv() + argv, env
    raise RankmapError(f"rankmap run places MPI (Open MPI, MPICH/MVAPICH hydra, Slurm srun), torchrun and "
                       f"single-process jobs; {launcher.kind} launches are not supported")


def torchrun_python(launcher) -> str:
    """The Python torchrun runs its workers with: the one in ``python -m torch.distributed.run``, else
    the interpreter named on the ``torchrun`` script's first line, else ``python3``."""
    if launcher.prefix_len == 3:
        return launcher.argv[0]
    try:
        with open(launcher.executable, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace").strip()
    except (OSError, TypeError):
        first = ""
    if first.startswith("#!"):
        parts = first[2:].split()
        if parts and os.path.basename(parts[0]) == "env" and len(parts) > 1:
            return parts[1]
        if parts:
            return parts[0]
    return "python3"


def _contexts(tail: list[str], value_opts: set[str], two_value_opts: set[str]) -> list[tuple[list[str], list[str]]]:
    """(options, program and its arguments) of every app context of an MPI command (``a : b``):
    the wrapper goes before the program of each, or the ranks of the later ones run unplaced."""
    from rankmap.capture import launchers as L

    out = []
    for c in L.split_contexts(tail):
        i = L.program_index(c, value_opts, two_value_opts)
        out.append((c[:i], c[i:]))
    return out


def _has_opt(opts: list[str], names: tuple[str, ...]) -> bool:
    return any(o in names or o.split("=", 1)[0] in names for o in opts)


def _sequential(launcher) -> bool:
    """Whether an Open MPI launcher places a multi-node mapping with ``--map-by seq`` (Open MPI 5 on)."""
    from rankmap.capture import launchers as L

    major = L.openmpi_major(launcher.executable)
    return major is not None and major >= 5


def node_file(launcher, m: Mapping, hosts: list[str]) -> tuple[str, str]:
    """(file name, text) of the launcher's own node placement of a multi-node mapping."""
    if launcher.kind == "openmpi" and _sequential(launcher):
        return _OMPI5_NODE_FILE, sequential_hostfile_text(m, hosts)
    return NODE_FILE[launcher.kind], node_file_text(launcher.kind, m, hosts)


def node_file_text(kind: str, m: Mapping, hosts: list[str]) -> str:
    """The launcher's own node placement of a multi-node mapping (see :data:`NODE_FILE`)."""
    if kind == "openmpi":
        return rankfile_text(m, hosts)
    if kind == "hydra":
        return hydra_machinefile_text(m, hosts)
    if kind == "srun":
        return slurm_hostfile_text(m, hosts)
    raise ValueError(kind)


def rankfile_text(m: Mapping, hosts: list[str]) -> str:
    """Open MPI rankfile: ``rank R=HOST slot=CPUS`` per rank, in rank order."""
    return "".join(f"rank {p.rank}={hosts[p.node]} slot={p.cpus or '0'}\n" for p in m.ranks)


def slurm_hostfile_text(m: Mapping, hosts: list[str]) -> str:
    """Slurm arbitrary distribution: line ``i`` names the host of task ``i``."""
    return "".join(f"{hosts[p.node]}\n" for p in m.ranks)


#: Open MPI 5's sequential mapper reads the same file: line ``i`` names the host of rank ``i``
sequential_hostfile_text = slurm_hostfile_text


def hydra_machinefile_text(m: Mapping, hosts: list[str]) -> str:
    """Hydra machinefile: ``HOST:COUNT`` per run of consecutive ranks on one host, in rank order."""
    runs: list[list] = []
    for p in m.ranks:
        h = hosts[p.node]
        if runs and runs[-1][0] == h:
            runs[-1][1] += 1
        else:
            runs.append([h, 1])
    return "".join(f"{h}:{c}\n" for h, c in runs)


def host_slots(m: Mapping, hosts: list[str]) -> str:
    """``HOST:SLOTS,...``: every host of the mapping with the number of ranks it holds."""
    count = [0] * len(hosts)
    for p in m.ranks:
        count[p.node] += 1
    return ",".join(f"{h}:{c}" for h, c in zip(hosts, count) if c)


def hosts_for(m: Mapping, given: str | None) -> list[str]:
    """Host names of nodes 0..N-1: ``--hosts a,b,...``, else the Slurm allocation. Every node of the
    mapping is a machine of its own with its own GPUs, so a host named twice is an error: merged, it
    would put two nodes' ranks on one machine's GPUs (slots per host are rankmap's to count from the
    mapping, not the list's)."""
    n = m.nodes
    if given:
        hosts = [h for h in given.split(",") if h]
        seen: dict[str, int] = {}
        for i, h in enumerate(hosts):
            if h in seen:
                raise RankmapError(f"--hosts names {h} twice (nodes {seen[h]} and {i}): every node of the mapping "
                                   f"is a host of its own; name each host once")
            seen[h] = i
    else:
        hosts = _slurm_hosts()
    if len(hosts) < n:
        raise RankmapError(f"the mapping spans {counted(n, 'node')} but {counted(len(hosts), 'host name')} "
                           f"{verb(len(hosts), 'is', 'are')} known: "
                           f"pass --hosts h1,h2,... (or run inside a Slurm allocation)")
    return hosts[:n]


def _slurm_hosts() -> list[str]:
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodelist:
        return []
    import shutil
    import subprocess

    sc = shutil.which("scontrol")
    if sc:
        try:
            out = subprocess.run([sc, "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
            if out.returncode == 0:
                return out.stdout.split()
        except (OSError, subprocess.SubprocessError):
            pass
    return [] if "[" in nodelist else nodelist.split(",")
