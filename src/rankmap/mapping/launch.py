"""Launching a job with a mapping: the wrapped command and the launcher-native placement files.

Every rank is started through :mod:`rankmap.mapping.execwrap`: the launcher's own argv gets the
wrapper inserted right before the program (``mpirun [opts] PROG ARGS`` becomes
``mpirun [opts] -x RANKMAP_MAPPING=F python -S execwrap.py PROG ARGS``), the way the capture shim is
injected, using the launcher adapter of :mod:`rankmap.capture.launchers` to recognise the launcher
and find where its options end. Open MPI would otherwise bind each rank to a core of its own
choosing, which the wrapper could then not leave, so ``--bind-to none`` is added unless the user set
a binding. For several nodes the node assignment goes to the launcher: an Open MPI rankfile
(``--rankfile``) or a Slurm host list (``SLURM_HOSTFILE`` with ``--distribution=arbitrary``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rankmap.errors import RankmapError
from rankmap.formats.mapping_json import Mapping

WRAPPER = str(Path(__file__).with_name("execwrap.py"))


def wrapper_argv() -> list[str]:
    """How a rank starts the wrapper: this Python, without site initialisation (fast start)."""
    return [sys.executable, "-S", WRAPPER]


def wrap(argv: list[str], mapping_file: str, *, bind: bool = True, rankfile: str | None = None,
         hostfile: str | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) that launch ``argv`` with every rank placed by ``mapping_file``."""
    from rankmap.capture import launchers as L

    launcher = L.recognise(argv)
    env = dict(os.environ)
    ours = {"RANKMAP_MAPPING": str(Path(mapping_file).resolve())}
    if not bind:
        ours["RANKMAP_NO_BIND"] = "1"
    head, tail = argv[: launcher.prefix_len], argv[launcher.prefix_len:]
    if launcher.kind == "openmpi":
        prog = L.program_index(tail, L.OMPI_VALUE_OPTS, L._OMPI_TWO_VALUE_OPTS)
        opts = tail[:prog]
        extra = [t for k, v in ours.items() for t in ("-x", f"{k}={v}")]
        if rankfile:
            extra += ["--rankfile", rankfile]
        elif not any(o in ("--bind-to", "-bind-to") or o.startswith("--bind-to=") for o in opts):
            extra += ["--bind-to", "none"]
        return head + extra + opts + wrapper_argv() + tail[prog:], env
    if launcher.kind == "hydra":
        prog = L.program_index(tail, L.HYDRA_VALUE_OPTS, L.HYDRA_TWO_VALUE_OPTS)
        extra = [t for k, v in ours.items() for t in ("-genv", k, v)]
        return head + extra + tail[:prog] + wrapper_argv() + tail[prog:], env
    if launcher.kind == "srun":
        prog = L.program_index(tail, L.SRUN_VALUE_OPTS, set())
        opts = L.srun_export(tail[:prog], ours)
        if hostfile:
            env["SLURM_HOSTFILE"] = hostfile
            opts = [o for o in opts if not o.startswith("--distribution")] + ["--distribution=arbitrary"]
        return head + opts + wrapper_argv() + tail[prog:], env
    if launcher.kind == "plain":
        env.update(ours)
        env.setdefault("RANK", "0")
        return wrapper_argv() + argv, env
    raise RankmapError(f"rankmap run places MPI (Open MPI, MPICH/MVAPICH hydra, Slurm srun) and single-process "
                       f"jobs; {launcher.kind} launches are not supported yet")


def rankfile_text(m: Mapping, hosts: list[str]) -> str:
    """Open MPI rankfile: ``rank R=HOST slot=CPUS`` per rank, in rank order."""
    return "".join(f"rank {p.rank}={hosts[p.node]} slot={p.cpus or '0'}\n" for p in m.ranks)


def slurm_hostfile_text(m: Mapping, hosts: list[str]) -> str:
    """Slurm arbitrary distribution: line ``i`` names the host of task ``i``."""
    return "".join(f"{hosts[p.node]}\n" for p in m.ranks)


def hosts_for(m: Mapping, given: str | None) -> list[str]:
    """Host names of nodes 0..N-1: ``--hosts a,b,...``, else the Slurm allocation."""
    n = m.nodes
    if given:
        hosts = [h for h in given.split(",") if h]
    else:
        hosts = _slurm_hosts()
    if len(hosts) < n:
        raise RankmapError(f"the mapping spans {n} nodes but {len(hosts)} host name(s) are known: "
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
