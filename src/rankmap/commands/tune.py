"""``rankmap tune -- <launch command>``: profile (or reuse a profile), place, store the mapping."""

from __future__ import annotations

import argparse

from rankmap.commands.map import add_solver_args
from rankmap.errors import RankmapError


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


def command_of(args: argparse.Namespace, verb: str) -> list[str]:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise RankmapError(f"no command: rankmap {verb} [options] -- <launch command>")
    return cmd


def world_size_of(cmd: list[str]) -> int:
    from rankmap.capture.launchers import recognise

    ws = recognise(cmd).world_size
    if ws is None:
        raise RankmapError(f"cannot tell how many ranks `{' '.join(cmd)}` starts: give the launcher -np/-n N")
    return ws


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from rankmap.commands.map import solve_for
    from rankmap.mapping.report import print_text
    from rankmap.mapping.traffic import job_traffic
    from rankmap.store import command_key, open_store

    cmd = command_of(args, "tune")
    ws = world_size_of(cmd)
    key = command_key(cmd)
    store = open_store(args.db)
    jid = None if args.force else store.find_job(key, ws)
    log = sys.stderr if args.format == "json" else sys.stdout
    if jid is None:
        from rankmap.capture.profile import profile_command

        res = profile_command(cmd, store=store, progress=False)
        if res.exit_status != 0:
            raise RankmapError(f"the profiling run of job {res.job_id} failed (exit status {res.exit_status}): "
                               f"fix the command, then tune again")
        jid = res.job_id
        print(f"profiled as job {jid}", file=log)
    else:
        print(f"using the stored profile of job {jid} (--force profiles again)", file=log)
    traffic = job_traffic(store, jid)  # host-staged bytes kept apart: they are routed via the host
    if traffic.n != ws:
        raise RankmapError(f"the profile of job {jid} has {traffic.n} ranks but the command starts {ws}: "
                           f"profile this rank count (rankmap tune --force -- ...)")
    if traffic.total == 0:
        raise RankmapError(f"job {jid} recorded no traffic between ranks: nothing to place")
    doc = solve_for(traffic, args, source={"job": jid, "command": cmd})
    mid = store.save_mapping(doc, job_id=jid, key=key, world_size=ws, topology=doc["topology"],
                             max_before=doc["default"]["max_congestion"], avg_before=doc["default"]["avg_congestion"],
                             max_after=doc["max_congestion"], avg_after=doc["avg_congestion"], optimal=doc["optimal"],
                             meta={"solver": doc["solver"], "nodes": doc["nodes"]})
    if args.format == "json":
        doc["mapping_id"] = mid
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_text(doc)
        print(f"stored as mapping {mid}; launch with: rankmap run -- {' '.join(cmd)}")
    return 0
