"""``rankmap run``'s steps: the mapping (a file, or the one stored for the command), its checks
against the command and this node, the run directory with the mapping and the launcher's node
file, the wrapped command, and the launch.

The verb module only parses options and prints (the notes, and with ``--dry-run`` the command).
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from rankmap.errors import RankmapError, counted


@dataclass
class Launch:
    argv: list[str]               # the command as it will run: every rank through the exec wrapper
    env: dict[str, str]           # the environment it runs in


def _mapping(cmd: list[str], ws: int | None, mapping_file: str | None, db: str | None):
    """The mapping to apply, its name in messages and its run directory's tag."""
    from rankmap.formats import mapping_json
    from rankmap.store import command_key, open_store

    if mapping_file:
        return mapping_json.load(mapping_file), f"mapping {mapping_file}", Path(mapping_file).stem
    if ws is None:
        raise RankmapError(f"cannot tell how many ranks `{shlex.join(cmd)}` starts: give the launcher -np/-n N, "
                           f"or pass --mapping FILE")
    row = open_store(db, existing=True).latest_mapping(command_key(cmd), ws)
    if row is None:
        raise RankmapError(f"no cached mapping for this command with {counted(ws, 'rank')}: run `rankmap tune -- "
                           f"{shlex.join(cmd)}` first (or pass --mapping FILE)")
    return mapping_json.from_dict(row["mapping"], f"stored mapping {row['id']}"), f"mapping {row['id']}", \
        f"mapping-{row['id']}"


def _basis_note(m, name: str) -> str | None:
    """A what-if mapping says so: a placement for GPU-resident traffic gains nothing for host-staged bytes."""
    from rankmap.mapping import basis

    if not basis.is_what_if(m.doc):
        return None
    if m.doc.get("traffic_basis") == basis.GPU_RESIDENT:
        return (f"rankmap: note: {name} is a {m.doc.get('assumption')}; with an MPI that stages through host "
                f"memory this placement gains nothing")
    return f"rankmap: note: {name} was computed on {basis.assumption_text(m.doc)}"


def _cpus_not_here(m, name: str) -> str | None:
    """Why a one-node mapping's CPU sets cannot bind its ranks here: some rank's set has no CPU this
    process may run on (a mapping made for another machine, a fixture's node on a laptop), so the
    wrapper would bind nothing and warn once per rank of a binding nobody asked for. None when they fit."""
    import os

    from rankmap.mapping.execwrap import cpu_list, parse_cpus

    here = os.sched_getaffinity(0)
    try:
        off = sorted({p.cpus for p in m.ranks if p.cpus and not parse_cpus(p.cpus) & here})
    except ValueError:
        return None      # the wrapper says what is wrong with a CPU list
    if not off:
        return None
    return (f"rankmap: note: {name} binds ranks to CPUs {', '.join(off[:3])}{' ...' if len(off) > 3 else ''} of "
            f"{m.topology}, which this machine does not offer (rankmap may run on CPUs {cpu_list(here)}): the ranks "
            f"run where the launcher puts them (as with --no-bind)")


def prepare(cmd: Sequence[str], *, mapping_file: str | None = None, topology: str = "live", bind: bool = True,
            hosts: str | None = None, run_dir: str | None = None, db: str | None = None,
            log: Callable[[str], None] = print) -> Launch:
    """The launch of ``cmd`` on its mapping (``mapping_file``, else the newest stored for the command
    and its rank count), checked against ``topology`` (the node it runs on), with the mapping and
    a multi-node launcher's node file written to ``run_dir`` (default ``~/.rankmap/runs/<tag>``).
    ``log`` gets what the user should know of the mapping (a what-if's basis) before any check."""
    from rankmap.capture.launchers import recognise
    from rankmap.formats import mapping_json
    from rankmap.mapping import launch
    from rankmap.mapping.inputs import load_topology
    from rankmap.store import rankmap_home

    cmd = list(cmd)
    launcher = recognise(cmd)
    ws = launcher.world_size
    m, name, tag = _mapping(cmd, ws, mapping_file, db)
    note = _basis_note(m, name)
    if note:
        log(note)
    if ws is not None and ws != m.world_size:
        raise RankmapError(f"{name} places {counted(m.world_size, 'rank')} but the command starts {ws}")
    topo = load_topology(topology)
    if topo.name != m.topology or len(topo.gpus) != m.gpus_per_node:
        raise RankmapError(f"{name} was made for {m.topology} ({m.gpus_per_node} GPUs) "
                           f"but this node is {topo.name} ({len(topo.gpus)} GPUs): tune again here")
    if bind and m.nodes == 1:
        why = _cpus_not_here(m, name)
        if why:
            log(why)
            bind = False
    if m.nodes > 1 and launcher.kind == "plain":
        raise RankmapError(f"{name} spans {m.nodes} nodes; a single process cannot: launch it with mpirun, mpiexec, "
                           f"srun or torchrun")
    where = Path(run_dir) if run_dir else rankmap_home() / "runs" / tag
    node_file = node_hosts = None
    try:
        where.mkdir(parents=True, exist_ok=True)
        mf = where / "mapping.json"
        mf.write_text(mapping_json.dumps(m.doc))
        if m.nodes > 1 and launcher.kind in launch.NODE_FILE:
            node_hosts = launch.hosts_for(m, hosts)
            file_name, text = launch.node_file(launcher, m, node_hosts)
            node_file = str(where / file_name)
            Path(node_file).write_text(text)
    except OSError as e:
        raise RankmapError(f"cannot write to {where}: {e.strerror}") from None
    argv, env = launch.wrap(cmd, str(mf), bind=bind, node_file=node_file, mapping=m, hosts=node_hosts)
    return Launch(argv, env)


def start(run: Launch) -> int:
    """Run the launch in the foreground; its exit status is rankmap's."""
    try:
        return subprocess.call(run.argv, env=run.env)
    except OSError as e:
        raise RankmapError(f"cannot start {run.argv[0]}: {e.strerror}") from None
