"""``rankmap tune -- <launch command>``: profile (or reuse a profile), place, store the mapping."""

from __future__ import annotations

import argparse

from rankmap.commands._args import add_solver_args, launch_command, run_hint, solver_options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="profile a job (unless cached) and store the placement for `rankmap run`",
                       usage="rankmap tune [options] -- <launch command>",
                       description="Profile the job unless a profile of the same command and rank count is "
                                   "stored, compute the placement that minimises link congestion on this node "
                                   "(or --topology), store it for `rankmap run`, and print before/after.")
    add_solver_args(p)
    p.add_argument("--force", action="store_true", help="profile again even if a profile is cached")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or the SQLite file)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the launch command, after --")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import shlex
    import sys

    from rankmap.mapping.report import print_text
    from rankmap.pipeline.tune import tune, world_size_of
    from rankmap.store import open_store

    cmd = launch_command(args, "tune")
    log = sys.stderr if args.format == "json" else sys.stdout
    res = tune(cmd, open_store(args.db), world_size=world_size_of(cmd), force=args.force,
               log=lambda line: print(line, file=log), **solver_options(args))
    doc = res.doc
    if args.format == "json":
        doc["mapping_id"] = res.mapping_id
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_text(doc)
        print(f"stored as mapping {res.mapping_id}; launch with: {run_hint(shlex.join(cmd), args)}")
    return 0
