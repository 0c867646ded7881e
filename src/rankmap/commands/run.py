"""``rankmap run -- <launch command>``: launch a job with its stored placement applied."""

from __future__ import annotations

import argparse

from rankmap.commands._args import launch_command


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
    import os
    import shlex
    import sys

    from rankmap.pipeline.run import prepare, start

    launch = prepare(launch_command(args, "run"), mapping_file=args.mapping, topology=args.topology,
                     bind=not args.no_bind, hosts=args.hosts, run_dir=args.run_dir, db=args.db,
                     log=lambda line: print(line, file=sys.stderr))
    if args.dry_run:
        print(shlex.join(launch.argv))
        for k, v in sorted(launch.env.items()):  # what the launch adds to the environment
            if os.environ.get(k) != v:
                print(f"# environment: {k}={v}")
        return 0
    return start(launch)
