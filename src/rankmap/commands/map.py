"""``rankmap map``: what-if placement of a recorded or given traffic matrix on a topology."""

from __future__ import annotations

import argparse
import json
import sys

from rankmap.errors import RankmapError

# rankmap.mapping.objective.OBJECTIVES, spelled out so that the CLI starts without numpy (a test
# keeps the two equal)
OBJECTIVE_CHOICES = ("max", "avg", "hop-bytes")
# rankmap.mapping.solve.MIN_GAIN in percent, and solve.GAIN_ON, spelled out for the same reason
MIN_GAIN_PERCENT = 1.0
GAIN_ON_CHOICES = ("primary", "either")


def add_solver_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", default="live", metavar="live|FIXTURE|FILE|synth:NAME",
                   help="the node to place on (default: this node); synth:hier:AxBxC:DA,DB,DC describes a "
                        "machine by levels, innermost first, as KaHIP does (synth:hier:4x16x16:1,10,100: 4 GPUs a "
                        "group, 16 groups a node, 16 nodes, distances 1, 10, 100)")
    p.add_argument("--nodes", type=int, default=None, metavar="N",
                   help="number of such nodes (default 1, or the count a synth:hier: topology names)")
    p.add_argument("--ranks-per-gpu", type=int, default=1, metavar="K", help="ranks that may share a GPU (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the heuristic search (default 0)")
    p.add_argument("--time-budget", type=float, default=10.0, metavar="S",
                   help="seconds the solvers may use (default 10); when it runs out the best placement "
                        "found so far is returned with its gap to a lower bound")
    p.add_argument("--objective", choices=OBJECTIVE_CHOICES, default="max",
                   help="what to minimise: the busiest link's congestion (default), the average "
                        "congestion over used links, or hop-bytes")
    p.add_argument("--min-gain", type=float, default=MIN_GAIN_PERCENT, metavar="PCT",
                   help=f"keep the default placement unless the best one gains at least PCT %% on the objective "
                        f"(default {MIN_GAIN_PERCENT:g}; 0: take any better placement): moving ranks has costs the "
                        f"model does not see")
    p.add_argument("--min-gain-on", choices=GAIN_ON_CHOICES, default=None,
                   help="which figure the least gain must be on: the objective's primary one (the busiest link for "
                        "--objective max), or either (a placement that only lowers the tie-break counts too); "
                        "default: primary for max (its tie-break, the total congestion, alone is no reason to move "
                        "ranks), either for hop-bytes and avg (their tie-break is the busiest link)")
    p.add_argument("--kahip", choices=("auto", "on", "off"), default="auto",
                   help="seed the placement with KaHIP's process mapping: auto (default) where KaHIP is installed "
                        "(pip install 'rankmap[kahip]'), on (required), off; it is one more start, taken only where "
                        "it scores better by rankmap's objective (its time comes out of the budget)")
    p.add_argument("--measured", nargs="?", const="latest", metavar="RUN",
                   help="use the GPU-pair bandwidths measured by `rankmap bench p2p` (a stored run id, default "
                        "the latest) as link strengths")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("map", help="place a traffic matrix on a topology (what-if, runs nothing)",
                       description="Compute the rank -> GPU placement that minimises link congestion for a "
                                   "recorded job or a traffic CSV, and compare it with the default placement.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--job", metavar="JOB", help="a stored job: id or 'latest'")
    src.add_argument("--traffic", metavar="FILE.csv", help="traffic in the export CSV format")
    add_solver_args(p)
    p.add_argument("--as-gpu-resident", action="store_true",
                   help="what-if: place the traffic as if its host-staged bytes had stayed in GPU memory and gone "
                        "GPU to GPU over the node's links (a CUDA-aware MPI or NCCL); every output says so")
    p.add_argument("--db", metavar="URL", help="store URL (for --job and --measured)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--output", "-o", metavar="FILE", help="also write the mapping JSON to FILE")
    p.add_argument("--save", action="store_true",
                   help="with --job: store the mapping for the job, so that `rankmap run -- <its command>` and "
                        "the dashboard use it")
    p.set_defaults(func=run)


def solver_options(args: argparse.Namespace) -> dict:
    """The options of :func:`rankmap.pipeline.tune.place` that :func:`add_solver_args` parsed."""
    return dict(topology=args.topology, nodes=args.nodes, ranks_per_gpu=args.ranks_per_gpu, seed=args.seed,
                time_budget=args.time_budget, objective=args.objective, min_gain=args.min_gain / 100,
                min_gain_on=args.min_gain_on, kahip=args.kahip,
                measured=args.measured, db=getattr(args, "db", None))


def run(args: argparse.Namespace) -> int:
    from rankmap.pipeline.tune import command_started

    started = command_started()     # --time-budget covers the whole command, start-up included
    from rankmap.mapping import traffic as tr
    from rankmap.pipeline.tune import place

    if args.save and not args.job:
        raise RankmapError("--save stores the mapping of a stored job: use it with --job JOB")
    store = job = None
    if args.traffic:
        traffic = tr.read_csv(args.traffic)
        source = {"traffic": args.traffic}
        what = f"{args.traffic} (host-staged rows need the mem column, which `rankmap export --by-mem` writes)"
    else:
        from rankmap.store import open_store

        store = open_store(args.db, existing=True)
        traffic, job = tr.from_job(store, args.job)
        source = {"job": job["id"], "command": job.get("command")}
        what = f"job {job['id']}"
        if job["state"] == "failed":
            from rankmap.store.schema import state_words

            # what a failed run recorded may be only part of its traffic: say so before placing it
            source.update(state=job["state"], exit_status=job["exit_status"])
            print(f"note: job {job['id']} {state_words(job['state'], job['exit_status'])}: placing the traffic it "
                  f"recorded before it ended, which may be only part of what the job exchanges",
                  file=sys.stderr if args.format == "json" else sys.stdout)
    doc = place(traffic, source=source, as_gpu_resident=args.as_gpu_resident, what=what, started=started,
                **solver_options(args))
    saved = None
    if args.save:
        from rankmap.pipeline.tune import store_mapping

        saved = store_mapping(store, doc, job["id"])
        doc["mapping_id"] = saved
    if args.output:
        try:
            with open(args.output, "w") as f:
                json.dump(doc, f, indent=1)
        except OSError as e:
            raise RankmapError(f"cannot write {args.output}: {e.strerror}") from None
    if args.format == "json":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        from rankmap.mapping.report import print_text

        print_text(doc)
    if saved is not None:
        how = f"rankmap run -- {job['command']}" if job.get("command") else "rankmap run -- <its command>"
        from rankmap.mapping.basis import stated

        st = stated(doc)       # the words the dashboard shows beside this mapping
        basis = f" ({st['label']})" if st["what_if"] else ""
        print(f"stored as mapping {saved} of job {job['id']}{basis}; launch with: {how}",
              file=sys.stderr if args.format == "json" else sys.stdout)
    return 0
