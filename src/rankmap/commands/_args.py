"""Options more than one verb takes, declared once: the placement solver's (``map``, ``tune``) and
the launch command after ``--`` (``tune``, ``run``).

Not a verb (``cli.VERBS`` does not name it): verb modules import this module and never each other,
so a verb's module says everything it does (``tests/test_layers.py`` keeps it so).
"""

from __future__ import annotations

import argparse

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


def solver_options(args: argparse.Namespace) -> dict:
    """The options of :func:`rankmap.pipeline.map.place` that :func:`add_solver_args` parsed."""
    return dict(topology=args.topology, nodes=args.nodes, ranks_per_gpu=args.ranks_per_gpu, seed=args.seed,
                time_budget=args.time_budget, objective=args.objective, min_gain=args.min_gain / 100,
                min_gain_on=args.min_gain_on, kahip=args.kahip,
                measured=args.measured, db=getattr(args, "db", None))


def launch_command(args: argparse.Namespace, verb: str) -> list[str]:
    """The launch command given after ``--`` (``args.command``); none is an error naming the verb's usage."""
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise RankmapError(f"no command: rankmap {verb} [options] -- <launch command>")
    return cmd


def run_hint(command: str, args: argparse.Namespace) -> str:
    """The ``rankmap run`` line that launches ``command`` (shell text) on the mapping just stored: with
    the node and store this verb was given, or it would look for a GPU (or a store) that is not the
    one the mapping was made on (``tune --topology dgx1-v100`` printed a line that failed there)."""
    import shlex

    opts = []
    if getattr(args, "topology", "live") != "live":
        opts += ["--topology", args.topology]
    if getattr(args, "db", None):
        opts += ["--db", args.db]
    return shlex.join(["rankmap", "run", *opts, "--"]) + " " + command
