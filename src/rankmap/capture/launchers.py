"""Launcher adapters: recognise how a job is launched and inject rankmap's capture into its ranks.

Each launcher forwards environment variables to the ranks its own way, and the shim must reach
the ranks, never the launcher process itself (a PMPI library preloaded into ``mpirun`` would drag
libmpi into it). So:

* ``openmpi`` -- ``mpirun``/``mpiexec``/``orterun``/``prterun`` that resolve to Open MPI (by real
  path, else ``--version``): ``-x VAR=value`` inserted right after the launcher name, and after
  every ``:`` of an MPMD command (Open MPI's ``-x`` reaches only its own app context);
* ``hydra`` -- MPICH / MVAPICH / Intel MPI ``mpiexec``, ``mpiexec.hydra``, ``mpirun``:
  ``-genv VAR value`` right after the launcher name (it reaches every app context);
* ``srun`` -- Slurm: ``--export=ALL,VAR=value``, merged into the user's own ``--export``;
* ``torchrun`` -- ``torchrun`` or ``python -m torch.distributed.run``: the launcher's environment,
  which its workers inherit;
* ``plain`` -- a single process: its environment.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rankmap.capture.preload import preload_env
from rankmap.errors import RankmapError

SUPPORTED = ("mpirun/mpiexec/orterun/prterun (Open MPI)", "mpiexec/mpiexec.hydra/mpirun (MPICH, MVAPICH hydra)",
             "srun (Slurm)", "torchrun (or python -m torch.distributed.run)", "a single process")

OPENMPI_NAMES = {"orterun", "prterun", "prun", "mpirun.openmpi", "mpiexec.openmpi"}
HYDRA_NAMES = {"mpiexec.hydra", "mpirun.hydra", "mpiexec.mpich", "mpirun.mpich", "mpiexec.mvapich",
               "mpirun.mvapich", "mpirun_rsh"}
MPI_GENERIC = {"mpirun", "mpiexec"}
TORCH_MODULES = {"torch.distributed.run", "torch.distributed.launch"}
# Names of job launchers rankmap does not drive (yet): refusing them beats profiling the launcher.
OTHER_LAUNCHERS = {"aprun", "jsrun", "lrun", "flux", "ibrun", "poe", "qsub", "sbatch", "salloc", "charmrun",
                   "mpiexec_mpt", "ccmrun", "deepspeed", "accelerate", "horovodrun", "mpirun.mpt", "prun.slurm"}

# Options (before the program) that take a value, so the value is not mistaken for the program.
OMPI_VALUE_OPTS = {   # every option `mpirun --help all` (Open MPI 4.1) shows with an argument, both spellings
    "-np", "--np", "-n", "--n", "-c", "-N", "-x", "-H", "--host", "-host", "--hostfile", "-hostfile", "-machinefile",
    "--machinefile", "--default-hostfile", "-default-hostfile", "--map-by", "-map-by", "--rank-by", "-rank-by",
    "--bind-to", "-bind-to", "-npernode", "--npernode", "-npersocket", "--npersocket", "--ppr", "-wdir",
    "--wdir", "-wd", "--wd", "-path", "--path", "--prefix", "-prefix", "--preload-files", "-preload-files",
    "-tune", "--tune", "--output-filename", "-output-filename", "--timeout", "-timeout", "--rankfile", "-rf",
    "--app", "-am", "--cpus-per-proc", "-cpus-per-proc", "--cpus-per-rank", "-cpus-per-rank", "--cpu-list",
    "-cpu-list", "--cpu-set", "-cpu-set", "--cartofile", "-cf", "--output", "--personality", "-personality",
    "--stream-buffering", "--launch-agent", "-launch-agent", "--env", "--debugger", "-debugger", "--hnp", "-hnp",
    "--max-restarts", "-max-restarts", "--max-vm-size", "-max-vm-size", "--ompi-server", "-ompi-server",
    "--report-events", "-report-events", "--report-pid", "-report-pid", "--report-uri", "-report-uri",
    "--stdin", "-stdin", "--xml-file", "-xml-file", "--xterm", "-xterm",
    # Open MPI 5 (PRRTE's option table for the "ompi" personality; it takes one or two dashes)
    "--dvm", "-dvm", "--tmpdir", "-tmpdir", "--forward-signals", "-forward-signals", "--spawn-timeout",
    "-spawn-timeout", "--pset", "-pset", "--display", "-display", "--runtime-options", "-runtime-options",
    "--with-ft", "-with-ft", "--initial-errhandler", "-initial-errhandler", "--arch", "-arch", "--file", "-file",
    "--output-directory", "-output-directory", "--display-topo", "-display-topo", "--amca", "-amca", "--am",
    "-ppr", "--rankfile", "-rankfile", "-app", "-output", "--tune",
}
_OMPI_TWO_VALUE_OPTS = {"--mca", "-mca", "--gmca", "-gmca", "--omca", "-omca", "--gomca", "-gomca", "--pmixmca",
                        "-pmixmca", "--prtemca", "-prtemca"}
HYDRA_VALUE_OPTS = {  # `mpiexec.hydra --help`; -genvall, -genvnone, -pmi-port ... take none
    "-n", "-np", "-f", "-hostfile", "-machinefile", "-hosts", "-host", "-ppn", "-wdir", "-genvlist", "-envlist",
    "-configfile", "-launcher", "-launcher-exec", "-bootstrap", "-bootstrap-exec", "-rmk", "-bind-to",
    "-binding", "-map-by", "-iface", "-nameserver", "-demux", "-errfile-pattern", "-outfile-pattern",
    "-prepend-pattern", "-localhost", "-gpus-per-proc", "-membind", "-topolib", "-ckpointlib", "-order-nodes",
    "-ckpoint-prefix", "-ckpoint-num", "-ckpoint-interval", "-usize", "-errfile", "-outfile",
}
HYDRA_TWO_VALUE_OPTS = {"-genv", "-env"}
SRUN_VALUE_OPTS = {
    "-n", "--ntasks", "-N", "--nodes", "-c", "--cpus-per-task", "-p", "--partition", "-A", "--account", "-t",
    "--time", "-J", "--job-name", "-w", "--nodelist", "-x", "--exclude", "--ntasks-per-node", "--gpus",
    "-G", "--gpus-per-node", "--gpus-per-task", "--mem", "--mem-per-cpu", "--mem-per-gpu", "--mpi",
    "--export", "-o", "--output", "-e", "--error", "-i", "--input", "-D", "--chdir", "--cpu-bind",
    "--distribution", "-m", "--gres", "-C", "--constraint", "-q", "--qos", "--reservation", "-r",
    "--relative", "--het-group",
}
TORCHRUN_VALUE_OPTS = {
    "--nnodes", "--nproc-per-node", "--nproc_per_node", "--node-rank", "--node_rank", "--master-addr",
    "--master_addr", "--master-port", "--master_port", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint",
    "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--rdzv-conf", "--rdzv_conf", "--max-restarts",
    "--max_restarts", "--monitor-interval", "--monitor_interval", "--start-method", "--start_method",
    "--role", "--log-dir", "--log_dir", "-r", "--redirects", "-t", "--tee", "--local-addr", "--local_addr",
    "--logs-specs", "--logs_specs", "--local-ranks-filter", "--local_ranks_filter", "--event-log-handler",
}


@dataclass
class Launcher:
    """A recognised launch command and how to inject environment into its ranks."""

    kind: str                      # 'openmpi' | 'hydra' | 'srun' | 'torchrun' | 'plain'
    argv: list[str]                # the command as the user gave it
    executable: str | None         # resolved path of argv[0] (None: not found, only for 'plain' checks)
    world_size: int | None = None
    prefix_len: int = 1            # tokens that name the launcher (2 more for python -m torch...)

    @property
    def is_mpi(self) -> bool:
        """MPI launchers get the PMPI shim preloaded into their ranks."""
        return self.kind in ("openmpi", "hydra", "srun")

    def programs(self) -> list[list[str]]:
        """The command line of each program the launch starts (one per app context of ``a : b``)."""
        tail = self.argv[self.prefix_len:]
        if self.kind in ("openmpi", "hydra"):
            value, two = ((OMPI_VALUE_OPTS, _OMPI_TWO_VALUE_OPTS) if self.kind == "openmpi"
                          else (HYDRA_VALUE_OPTS, HYDRA_TWO_VALUE_OPTS))
            out = []
            for ctx in split_contexts(tail):
                i = program_index(ctx, value, two)
                if i < len(ctx):
                    out.append(ctx[i:])
            return out
        if self.kind == "srun":
            i = program_index(tail, SRUN_VALUE_OPTS, set())
            return [tail[i:]] if i < len(tail) else []
        return [list(self.argv)]

    def inject(self, env: dict[str, str], base_env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
        """The argv and environment that launch the same job with ``env`` set in every rank.

        ``LD_PRELOAD`` is prepended to the one the ranks would otherwise get, never replacing it.
        """
        base = dict(os.environ if base_env is None else base_env)
        env = dict(env)
        if "LD_PRELOAD" in env and base.get("LD_PRELOAD"):
            env["LD_PRELOAD"] = f"{env['LD_PRELOAD']}:{base['LD_PRELOAD']}"
        argv = list(self.argv)
        head, tail = argv[:self.prefix_len], argv[self.prefix_len:]
        if self.kind == "openmpi":
            # Open MPI's -x reaches only the ranks of its own app context: one per context of `a : b`
            extra = [t for k, v in env.items() for t in ("-x", f"{k}={v}")]
            return head + join_contexts([extra + c for c in split_contexts(tail)]), base
        if self.kind == "hydra":
            extra = [t for k, v in env.items() for t in ("-genv", k, v)]
            return head + extra + tail, base
        if self.kind == "srun":
            # srun --export cannot carry a value with a comma (NCCL_DEBUG_SUBSYS=INIT,GRAPH): where
            # the ranks get all of srun's environment anyway, such a value goes there instead
            commas = {k: v for k, v in env.items() if "," in v}
            if commas and srun_exports_all(tail):
                base.update(commas)
                env = {k: v for k, v in env.items() if k not in commas}
            return head + srun_export(tail, env), base
        base.update(env)
        return argv, base


def srun_export(tail: list[str], env: dict[str, str]) -> list[str]:
    """Merge rankmap's variables into the user's ``--export`` (or add ``--export=ALL,...``)."""
    if not env:
        return list(tail)
    for k, v in env.items():
        if "," in v:
            raise RankmapError(f"cannot pass {k}={v!r} through srun --export: the value contains a comma")
    ours = ",".join(f"{k}={v}" for k, v in env.items())
    prog = program_index(tail, SRUN_VALUE_OPTS, set())
    for i, t in enumerate(tail[:prog]):
        if t.startswith("--export="):
            user = t[len("--export="):]
            merged = ours if user.upper() == "NONE" else f"{user},{ours}"
            return tail[:i] + [f"--export={merged}"] + tail[i + 1:]
        if t == "--export" and i + 1 < prog:
            user = tail[i + 1]
            merged = ours if user.upper() == "NONE" else f"{user},{ours}"
            return tail[:i] + [f"--export={merged}"] + tail[i + 2:]
    return [f"--export=ALL,{ours}"] + tail


def srun_exports_all(tail: list[str]) -> bool:
    """Whether srun passes all of its environment to the tasks: no ``--export`` (Slurm's default is
    ALL) or one that starts with ALL."""
    prog = program_index(tail, SRUN_VALUE_OPTS, set())
    for i, t in enumerate(tail[:prog]):
        if t.startswith("--export="):
            return t[len("--export="):].split(",")[0].upper() == "ALL"
        if t == "--export" and i + 1 < prog:
            return tail[i + 1].split(",")[0].upper() == "ALL"
    return True


def program_index(tokens: Sequence[str], value_opts: set[str], two_value_opts: set[str]) -> int:
    """Index of the first token that is the program (not an option or an option's value)."""
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t == "--":
            return i + 1
        if not t.startswith("-") or t == "-":
            return i
        if "=" in t and t.split("=", 1)[0] in value_opts:
            i += 1
        elif t in two_value_opts:
            i += 3
        elif t in value_opts:
            i += 2
        else:
            i += 1
    return len(tokens)


def _int(v: str) -> int | None:
    try:
        n = int(v)
    except ValueError:
        return None
    return n if n > 0 else None


def _opt_values(tokens: Sequence[str], names: set[str], value_opts: set[str],
                two_value_opts: set[str]) -> list[str]:
    """Values of options ``names`` among the launcher options (``-n 4``, ``--np=4``, ``-n4`` for short)."""
    out: list[str] = []
    stop = program_index(tokens, value_opts, two_value_opts)
    i = 0
    while i < stop:
        t = tokens[i]
        if t in two_value_opts:
            i += 3
            continue
        if t in names and i + 1 < len(tokens):
            out.append(tokens[i + 1])
            i += 2
            continue
        if "=" in t and t.split("=", 1)[0] in names:
            out.append(t.split("=", 1)[1])
        elif re.fullmatch(r"-n\d+", t) and "-n" in names:
            out.append(t[2:])
        i += 2 if t in value_opts else 1
    return out


def _mpi_world_size(tokens: list[str], kind: str) -> int | None:
    """Sum of ``-np``/``-n`` over the app contexts of an MPMD (``a : b``) command; None if unsaid."""
    value_opts, two = ((OMPI_VALUE_OPTS, _OMPI_TWO_VALUE_OPTS) if kind == "openmpi"
                       else (HYDRA_VALUE_OPTS, HYDRA_TWO_VALUE_OPTS))
    names = {"-np", "--np", "-n", "--n", "-c"} if kind == "openmpi" else {"-n", "-np"}
    total = 0
    for ctx in split_contexts(tokens):
        vals = [_int(v) for v in _opt_values(ctx, names, value_opts, two)]
        if not vals or vals[-1] is None:
            return None
        total += vals[-1]
    return total or None


def split_contexts(tokens: Sequence[str]) -> list[list[str]]:
    """The app contexts of an MPMD command line (``-np 2 ./a : -np 2 ./b``), without the colons."""
    ctxs, cur = [], []
    for t in tokens:
        if t == ":":
            ctxs.append(cur)
            cur = []
        else:
            cur.append(t)
    ctxs.append(cur)
    return ctxs


def join_contexts(ctxs: Sequence[Sequence[str]]) -> list[str]:
    """The inverse of :func:`split_contexts`."""
    out: list[str] = []
    for i, c in enumerate(ctxs):
        out += ([":"] if i else []) + list(c)
    return out


def _srun_world_size(tokens: list[str]) -> int | None:
    vals = _opt_values(tokens, {"-n", "--ntasks"}, SRUN_VALUE_OPTS, set())
    if vals:
        return _int(vals[-1])
    nodes = _opt_values(tokens, {"-N", "--nodes"}, SRUN_VALUE_OPTS, set())
    per = _opt_values(tokens, {"--ntasks-per-node"}, SRUN_VALUE_OPTS, set())
    if per:
        n = _int(nodes[-1]) if nodes else 1
        p = _int(per[-1])
        return n * p if n and p else None
    return None


def _torchrun_world_size(tokens: list[str]) -> int | None:
    per = _opt_values(tokens, {"--nproc-per-node", "--nproc_per_node"}, TORCHRUN_VALUE_OPTS, set())
    nodes = _opt_values(tokens, {"--nnodes"}, TORCHRUN_VALUE_OPTS, set())
    p = _int(per[-1]) if per else 1
    if nodes:
        lo, _, hi = nodes[-1].partition(":")
        if hi and hi != lo:
            return None   # elastic range: the size is known only at run time
        n = _int(lo)
    else:
        n = 1
    return n * p if n and p else None


@functools.lru_cache(maxsize=32)
def _version_text(exe: str) -> str:
    """``<launcher> --version`` output, cached: it is what tells Open MPI from hydra behind ``mpirun``."""
    try:
        p = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return p.stdout + p.stderr


def openmpi_major(exe: str | None) -> int | None:
    """Major version of an Open MPI launcher (``mpirun (Open MPI) 4.1.4``, ``orterun (OpenRTE) 4.1.4``);
    None where it does not say."""
    m = re.search(r"\((?:Open MPI|OpenRTE)\) (\d+)\.", _version_text(exe)) if exe else None
    return int(m.group(1)) if m else None


def mpi_flavour(exe: str) -> str | None:
    """'openmpi' or 'hydra' for an MPI launcher executable, from its real path, else its --version."""
    real = os.path.basename(os.path.realpath(exe))
    name = os.path.basename(exe)
    for n in (name, real):
        if n in OPENMPI_NAMES:
            return "openmpi"
        if n in HYDRA_NAMES:
            return "hydra"
    text = _version_text(exe)
    if re.search(r"Open MPI|OpenRTE|PRRTE|prterun", text):
        return "openmpi"
    if re.search(r"HYDRA|MPICH|MVAPICH|Intel\(R\) MPI", text, re.IGNORECASE):
        return "hydra"
    return None


def check_openmpi_home(env: dict[str, str] | os._Environ) -> None:
    """Refuse, before anything is built or launched, a HOME that no Open MPI program can start under.

    Open MPI reads its MCA parameter files from a comma-separated list that starts with
    ``$HOME/.openmpi/mca-params.conf``, so a comma in HOME splits that path in two: the part before
    the comma is read as a parameter file, and where it is a folder (``HOME=/home/x,y`` beside a
    ``/home/x``), mpirun, mpicc and the ranks of Open MPI 4 and 5 all stop at "input in flex scanner
    failed". A part that is no file is skipped, so such a HOME works otherwise. A user who set
    ``OMPI_MCA_mca_base_param_files`` chose the list themselves; that is left to Open MPI."""
    home = env.get("HOME", "")
    if "," not in home or env.get("OMPI_MCA_mca_base_param_files"):
        return
    for part in f"{home}/.openmpi/mca-params.conf".split(",")[:-1]:
        if part and os.path.isdir(part):
            raise RankmapError(f"HOME ({home}) has a comma, and Open MPI reads its parameter files from a "
                               f"comma-separated list that starts in HOME: it would read the folder {part} as "
                               f"one and cannot start (\"input in flex scanner failed\"); run with a HOME "
                               f"without commas")


def _which(name: str, env_path: str | None = None) -> str | None:
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return shutil.which(name, path=env_path)


def recognise(argv: Sequence[str], env_path: str | None = None) -> Launcher:
    """Which launcher ``argv`` uses, with the world size when the command says it."""
    argv = list(argv)
    if not argv:
        raise RankmapError("no command to profile: give it after `--`, e.g. rankmap profile -- mpirun -np 4 ./app")
    name = os.path.basename(argv[0])
    exe = _which(argv[0], env_path)
    if name in OTHER_LAUNCHERS or name.split(".")[0] in OTHER_LAUNCHERS:
        raise RankmapError(f"launcher {name!r} is not supported; rankmap drives: {', '.join(SUPPORTED)}")
    if exe is None:
        raise RankmapError(f"command not found: {argv[0]}")
    if name == "torchrun":
        return Launcher("torchrun", argv, exe, _torchrun_world_size(argv[1:]))
    if re.fullmatch(r"python[\d.]*", name) and len(argv) >= 3 and argv[1] == "-m" and argv[2] in TORCH_MODULES:
        return Launcher("torchrun", argv, exe, _torchrun_world_size(argv[3:]), prefix_len=3)
    if name == "srun":
        return Launcher("srun", argv, exe, _srun_world_size(argv[1:]))
    base = name.split(".")[0]
    if base in MPI_GENERIC or name in OPENMPI_NAMES or name in HYDRA_NAMES:
        kind = mpi_flavour(exe)
        if kind is None:
            said = next((ln.strip() for ln in _version_text(exe).splitlines() if ln.strip()), "nothing")
            if "flex scanner" in said:      # Open MPI's parameter-file reader, stopped before it says more
                check_openmpi_home(os.environ)
            raise RankmapError(f"cannot tell which MPI {argv[0]} ({os.path.realpath(exe)}) belongs to: "
                               f"`{argv[0]} --version` names neither Open MPI nor MPICH/MVAPICH hydra "
                               f"(it said: {said[:200]})")
        if kind == "openmpi":
            check_openmpi_home(os.environ)
        return Launcher(kind, argv, exe, _mpi_world_size(argv[1:], kind))
    return Launcher("plain", argv, exe, 1)


def find_mpicc(launcher: Launcher, explicit: str | None = None) -> str:
    """The MPI compiler wrapper of the MPI that ``launcher`` runs, to build the shim against.

    ``mpirun.openmpi`` pairs with ``mpicc.openmpi`` and ``mpiexec.mpich`` with ``mpicc.mpich`` (the
    Debian alternatives), then the flavour's own name beside the launcher, then the ``mpicc`` beside
    the launcher's real path (a module-loaded MPI keeps both in one ``bin``), then ``mpicc`` on PATH.
    """
    if explicit:
        path = _which(explicit)
        if path is None:
            raise RankmapError(f"MPI compiler wrapper not found: {explicit}")
        return path
    flavour_name = {"openmpi": "mpicc.openmpi", "hydra": "mpicc.mpich"}.get(launcher.kind)
    cands: list[str] = []
    if launcher.executable:
        exe = launcher.executable
        here, real = os.path.dirname(exe), os.path.dirname(os.path.realpath(exe))
        name = os.path.basename(exe)
        if "." in name:
            cands.append(os.path.join(here, "mpicc." + name.split(".", 1)[1]))
        if flavour_name:
            cands.append(os.path.join(here, flavour_name))
        cands += [os.path.join(real, "mpicc"), os.path.join(here, "mpicc")]
    elif flavour_name and shutil.which(flavour_name):
        cands.append(shutil.which(flavour_name) or "")
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which("mpicc")
    if found:
        return found
    raise RankmapError(f"no MPI compiler wrapper (mpicc) found for {launcher.argv[0]}: install the MPI "
                       f"development package or give --mpicc PATH")


def nccl_debug_env(run_dir: str | os.PathLike, base_env: dict[str, str] | os._Environ) -> dict[str, str]:
    """NCCL's INIT and GRAPH output, into ``<run dir>/nccl-debug.<host>.<pid>.log``, never the job's output.

    That is where NCCL prints the rings and trees it built, which the ingest follows
    (:mod:`rankmap.pairs.nccl_graph`). A user who set ``NCCL_DEBUG`` keeps exactly what they asked
    for (the ingest then falls back to rank order unless the graph is in a file it is given).
    NCCL expands ``%h``, ``%p`` and ``%%`` anywhere in ``NCCL_DEBUG_FILE``, so each ``%`` of the run
    directory's own path is written doubled: a run directory named ``100%p`` stays itself.
    """
    if base_env.get("NCCL_DEBUG"):
        return {}
    folder = str(Path(run_dir).resolve()).replace("%", "%%")
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH",
            "NCCL_DEBUG_FILE": f"{folder}/nccl-debug.%h.%p.log"}


#: where collective pair traffic comes from (docs/collective-models.md); ``auto`` is the default
COLLECTIVE_SOURCES = ("auto", "mirror", "library", "model")


def collective_source(asked: str | None, base_env: dict[str, str] | os._Environ) -> str:
    """The source a profile asks for: ``asked`` (``--collectives``), else ``$RANKMAP_COLLECTIVES``,
    else ``auto``; an unknown name is an error naming it."""
    want = (asked or base_env.get("RANKMAP_COLLECTIVES") or "auto").strip().lower()
    if want not in COLLECTIVE_SOURCES:
        where = "--collectives" if asked else "RANKMAP_COLLECTIVES"
        raise RankmapError(f"{where} {want!r}: choose one of {', '.join(COLLECTIVE_SOURCES)}")
    return want


def collectives_env(launcher: Launcher, base_env: dict[str, str] | os._Environ,
                    source: str | None = None) -> dict[str, str]:
    """What the ranks need for the collective pair source ``source`` (see :func:`collective_source`).

    ``auto`` (the default) and ``mirror`` load nothing into the job: the shim records each call's
    facts and the ingest re-runs the library's algorithm choice (the mirror, where the library's
    release is covered; else the model). Only ``library`` turns on Open MPI's monitoring PML
    (``pml_monitoring_enable``), whose per-message accounting the shim then takes collective pairs
    from: it costs every message of the job (docs/benchmarks.md, "What `rankmap profile` costs"), and
    it brings Open MPI's coll/monitoring, which kills jobs that use neighbourhood collectives (see
    :mod:`rankmap.capture.program_scan`). A job that sets ``pml_monitoring_enable`` itself keeps its
    setting. The source is passed to the ranks (Open MPI's mpirun forwards only what it is told to).
    """
    want = collective_source(source, base_env)
    env = {"RANKMAP_COLLECTIVES": want}
    if launcher.kind == "openmpi" and want == "library" and "OMPI_MCA_pml_monitoring_enable" not in base_env:
        env["OMPI_MCA_pml_monitoring_enable"] = "2"
    return env


@dataclass
class Injection:
    """What :func:`prepare` decided: the command to run and what it carries."""

    launcher: Launcher
    argv: list[str]
    env: dict[str, str]
    injected: dict[str, str] = field(default_factory=dict)


def prepare(launcher: Launcher, *, run_dir: str | os.PathLike, shim: str | os.PathLike | None = None,
            nccl_plugin: str | os.PathLike | None = None, cuda_lib: str | os.PathLike | None = None,
            cupti: str | None = None, cuda_kinds: str = "all", bucket_ms: int = 100, flush_ms: int = 1000,
            base_env: dict[str, str] | None = None, collectives: str | None = None) -> Injection:
    """The launch command with capture injected the way ``launcher`` forwards environment.

    ``cuda_lib`` (the CUDA activity library) is loaded by the CUDA driver of every rank that
    initialises CUDA (``CUDA_INJECTION64_PATH``); where the launcher process itself gets the
    environment (torchrun), ``RANKMAP_CUDA_NEED_RANK`` keeps it out of a process with no rank;
    ``cuda_kinds`` (``all`` or ``copies``) is what it records. ``collectives`` is the source of
    collective pairs (:func:`collectives_env`; None: ``$RANKMAP_COLLECTIVES`` or ``auto``).
    """
    env: dict[str, str] = {"RANKMAP_RUN_DIR": str(Path(run_dir).resolve()),
                           "RANKMAP_BUCKET_MS": str(int(bucket_ms)), "RANKMAP_FLUSH_MS": str(int(flush_ms))}
    if shim is not None:
        env.update(preload_env(shim, os.environ if base_env is None else base_env))
        env.update(collectives_env(launcher, os.environ if base_env is None else base_env, collectives))
    if nccl_plugin is not None:
        env["NCCL_PROFILER_PLUGIN"] = str(nccl_plugin)
        env.update(nccl_debug_env(run_dir, os.environ if base_env is None else base_env))
    if cuda_lib is not None:
        env["CUDA_INJECTION64_PATH"] = str(cuda_lib)
        env["RANKMAP_CUDA_KINDS"] = cuda_kinds or "all"
        if cupti:
            env["RANKMAP_CUPTI"] = cupti
        if launcher.kind != "plain":
            env["RANKMAP_CUDA_NEED_RANK"] = "1"
    argv, full_env = launcher.inject(env, base_env)
    return Injection(launcher, argv, full_env, env)
