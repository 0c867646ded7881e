"""``rankmap run -- <launch command>``: launch a job with its stored placement applied."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="launch a job on the placement `rankmap tune` stored for it (or a mapping file)",
                       usage="rankmap run [options] -- <launch command>",
                       description="Start every rank through rankmap's exec wrapper, which sets "
                                   "CUDA_VISIBLE_DEVICES to the rank's GPU, binds its CPUs and memory (set_mempolicy) "
                                   "near that GPU unless the launcher's own binding is asked for, and points "
                                   "UCX/NCCL at its NIC. Launchers: Open MPI "
                                   "mpirun, MPICH/MVAPICH mpiexec, Slurm srun, torchrun, a single process; across "
                                   "nodes the launcher is told which host every rank goes to. The job's exit "
                                   "status is rankmap's.")
    p.add_argument("--mapping", metavar="FILE", help="a mapping JSON (`rankmap map -o FILE`) instead of the one "
                   "stored for this command")
    p.add_argument("--topology", default="live", metavar="live|FIXTURE|FILE",
                   help="the node the job runs on, checked against the mapping (default: this node)")
    p.add_argument("--no-bind", action="store_true", help="set the GPU and NIC only; do not bind CPUs or memory")
    p.add_argument("--hosts", metavar="H1,H2,...", help="host names of nodes 0, 1, ... (multi-node mappings; "
                   "default: the Slurm allocation)")
    p.add_argument("--run-dir", metavar="DIR", help="where to write the mapping and launcher files "
                   "(default ~/.rankmap/runs/mapping-<id>)")
    p.add_argument("--db", metavar="URL", help="store URL")
    p.add_argument("--dry-run", action="store_true", help="print the command that would run, and stop")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the launch command, after --")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    from rankmap.capture.launchers import recognise
    from rankmap.commands.tune import command_of
    from rankmap.errors import RankmapError, counted
    from rankmap.formats import mapping_json
    from rankmap.mapping import launch
    from rankmap.mapping.inputs import load_topology
    from rankmap.store import command_key, open_store, rankmap_home

    cmd = command_of(args, "run")
    launcher = recognise(cmd)
    ws = launcher.world_size
    if args.mapping:
        m = mapping_json.load(args.mapping)
        name = f"mapping {args.mapping}"
        tag = Path(args.mapping).stem
    else:
        if ws is None:
            raise RankmapError(f"cannot tell how many ranks `{shlex.join(cmd)}` starts: give the launcher -np/-n N, "
                               f"or pass --mapping FILE")
        row = open_store(args.db, existing=True).latest_mapping(command_key(cmd), ws)
        if row is None:
            raise RankmapError(f"no cached mapping for this command with {counted(ws, 'rank')}: run `rankmap tune -- "
                               f"{shlex.join(cmd)}` first (or pass --mapping FILE)")
        m = mapping_json.from_dict(row["mapping"], f"stored mapping {row['id']}")
        name, tag = f"mapping {row['id']}", f"mapping-{row['id']}"
    from rankmap.mapping import basis

    if basis.is_what_if(m.doc):
        # a placement for GPU-resident traffic: right for a CUDA-aware MPI or NCCL, no gain for host-staged bytes
        if m.doc.get("traffic_basis") == basis.GPU_RESIDENT:
            print(f"rankmap: note: {name} is a {m.doc.get('assumption')}; with an MPI that stages through host "
                  f"memory this placement gains nothing", file=sys.stderr)
        else:
            print(f"rankmap: note: {name} was computed on {basis.assumption_text(m.doc)}", file=sys.stderr)
    if ws is not None and ws != m.world_size:
        raise RankmapError(f"{name} places {counted(m.world_size, 'rank')} but the command starts {ws}")
    topo = load_topology(args.topology)
    if topo.name != m.topology or len(topo.gpus) != m.gpus_per_node:
        raise RankmapError(f"{name} was made for {m.topology} ({m.gpus_per_node} GPUs) "
                           f"but this node is {topo.name} ({len(topo.gpus)} GPUs): tune again here")
    if m.nodes > 1 and launcher.kind == "plain":
        raise RankmapError(f"{name} spans {m.nodes} nodes; a single process cannot: launch it with mpirun, mpiexec, "
                           f"srun or torchrun")
    run_dir = Path(args.run_dir) if args.run_dir else rankmap_home() / "runs" / tag
    node_file = hosts = None
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        mf = run_dir / "mapping.json"
        mf.write_text(mapping_json.dumps(m.doc))
        if m.nodes > 1 and launcher.kind in launch.NODE_FILE:
            hosts = launch.hosts_for(m, args.hosts)
            file_name, text = launch.node_file(launcher, m, hosts)
            node_file = str(run_dir / file_name)
            Path(node_file).write_text(text)
    except OSError as e:
        raise RankmapError(f"cannot write to {run_dir}: {e.strerror}") from None
    argv, env = launch.wrap(cmd, str(mf), bind=not args.no_bind, node_file=node_file, mapping=m, hosts=hosts)
    if args.dry_run:
        import os

        print(shlex.join(argv))
        for k, v in sorted(env.items()):  # what the launch adds to the environment
            if os.environ.get(k) != v:
                print(f"# environment: {k}={v}")
        return 0
    try:
        return subprocess.call(argv, env=env)
    except OSError as e:
        raise RankmapError(f"cannot start {argv[0]}: {e.strerror}") from None
