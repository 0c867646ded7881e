"""``rankmap run -- <launch command>``: launch a job with its stored placement applied."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="launch a job on the placement `rankmap tune` stored for it",
                       usage="rankmap run [options] -- <launch command>",
                       description="Start every rank through rankmap's exec wrapper, which sets "
                                   "CUDA_VISIBLE_DEVICES to the rank's GPU, binds its CPUs (and memory, with "
                                   "numactl) near that GPU and points UCX/NCCL at its NIC. The job's exit "
                                   "status is rankmap's.")
    p.add_argument("--topology", default="live", metavar="live|FIXTURE|FILE",
                   help="the node the job runs on, checked against the mapping (default: this node)")
    p.add_argument("--no-bind", action="store_true", help="set the GPU and NIC only; do not bind CPUs or memory")
    p.add_argument("--hosts", metavar="H1,H2,...", help="host names of nodes 0, 1, ... (multi-node mappings)")
    p.add_argument("--run-dir", metavar="DIR", help="where to write the mapping and launcher files "
                   "(default ~/.rankmap/runs/mapping-<id>)")
    p.add_argument("--db", metavar="URL", help="store URL")
    p.add_argument("--dry-run", action="store_true", help="print the command that would run, and stop")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the launch command, after --")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shlex
    import subprocess
    from pathlib import Path

    from rankmap.commands.tune import command_of, world_size_of
    from rankmap.errors import RankmapError
    from rankmap.formats import mapping_json
    from rankmap.mapping import launch
    from rankmap.mapping.inputs import load_topology
    from rankmap.store import command_key, open_store, rankmap_home

    cmd = command_of(args, "run")
    ws = world_size_of(cmd)
    store = open_store(args.db)
    row = store.latest_mapping(command_key(cmd), ws)
    if row is None:
        raise RankmapError(f"no cached mapping for this command with {ws} ranks: run `rankmap tune -- "
                           f"{shlex.join(cmd)}` first")
    m = mapping_json.from_dict(row["mapping"], f"stored mapping {row['id']}")
    topo = load_topology(args.topology)
    if topo.name != m.topology or len(topo.gpus) != m.gpus_per_node:
        raise RankmapError(f"mapping {row['id']} was made for {m.topology} ({m.gpus_per_node} GPUs) "
                           f"but this node is {topo.name} ({len(topo.gpus)} GPUs): tune again here")
    run_dir = Path(args.run_dir) if args.run_dir else rankmap_home() / "runs" / f"mapping-{row['id']}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        mf = run_dir / "mapping.json"
        mf.write_text(mapping_json.dumps(m.doc))
        rankfile = hostfile = None
        if m.nodes > 1:
            hosts = launch.hosts_for(m, args.hosts)
            rankfile = str(run_dir / "rankfile")
            Path(rankfile).write_text(launch.rankfile_text(m, hosts))
            hostfile = str(run_dir / "slurm-hostfile")
            Path(hostfile).write_text(launch.slurm_hostfile_text(m, hosts))
    except OSError as e:
        raise RankmapError(f"cannot write to {run_dir}: {e.strerror}") from None
    argv, env = launch.wrap(cmd, str(mf), bind=not args.no_bind, rankfile=rankfile, hostfile=hostfile)
    if args.dry_run:
        print(shlex.join(argv))
        return 0
    try:
        return subprocess.call(argv, env=env)
    except OSError as e:
        raise RankmapError(f"cannot start {argv[0]}: {e.strerror}") from None
