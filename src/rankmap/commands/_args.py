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
# rankmap.mapping.solve.MIN_GAIN in percent, spelled out for the same reason
MIN_GAIN_PERCENT = 1.0


def add_solver_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", default="live", metavar="live|FIXTURE|FILE",
                   help="the node to place on (default: this node)")
    p.add_argument("--nodes", type=int, default=1, metavar="N", help="number of such nodes (default 1)")
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
    p.add_argument("--measured", nargs="?", const="latest", metavar="RUN",
                   help="use the GPU-pair bandwidths measured by `rankmap bench p2p` (a stored run id, default "
                        "the latest) as link strengths")


def solver_options(args: argparse.Namespace) -> dict:
    """The options of :func:`rankmap.pipeline.map.place` that :func:`add_solver_args` parsed."""
    return dict(topology=args.topology, nodes=args.nodes, ranks_per_gpu=args.ranks_per_gpu, seed=args.seed,
                time_budget=args.time_budget, objective=args.objective, min_gain=args.min_gain / 100,
                measured=args.measured, db=getattr(args, "db", None))


def launch_command(args: argparse.Namespace, verb: str) -> list[str]:
    """The launch command given after ``--`` (``args.command``); none is an error naming the verb's usage."""
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise RankmapError(f"no command: rankmap {verb} [options] -- <launch command>")
    return cmd
