"""``rankmap demo``: profile the bundled 4-D halo with real MPI, place it, and judge it in SimGrid."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="profile a bundled 4-D halo exchange, place it, simulate before/after",
                       description="Profile the bundled 4-D halo example with real MPI on this machine, place it "
                                   "on this node's GPUs (or the dgx1-v100 fixture where there are none), show "
                                   "the link congestion before and after, the simulated time of both placements "
                                   "under SimGrid, and store the job and its mapping. Two blocks: the traffic as "
                                   "recorded (host-staged, since halo4d sends host memory), then the what-if of "
                                   "the same traffic GPU-resident, as a CUDA-aware MPI or NCCL would carry it.")
    p.add_argument("--topology", default=None, metavar="live|FIXTURE|FILE",
                   help="where to place (default: this node if it has GPUs, else dgx1-v100)")
    p.add_argument("--ranks", type=int, default=8, help="ranks of the halo exchange (default 8)")
    p.add_argument("--face", type=int, default=1 << 20, metavar="BYTES", help="halo face size (default 1 MiB)")
    p.add_argument("--iters", type=int, default=5, help="halo iterations (default 5)")
    p.add_argument("--as-recorded", action="store_true",
                   help="show only the placement of the traffic as recorded (host-staged: halo4d sends host memory)")
    p.add_argument("--as-gpu-resident", action="store_true",
                   help="show only the what-if: the same traffic as if it had stayed in GPU memory and gone GPU to "
                        "GPU (a CUDA-aware MPI or NCCL)")
    p.add_argument("--no-simulate", action="store_true", help="skip the SimGrid judge")
    p.add_argument("--no-measure", action="store_true",
                   help="skip running the job across two emulated nodes (network namespaces; done only as root)")
    p.add_argument("--synthetic", action="store_true", help="skip real MPI; use the built-in traffic matrix")
    p.add_argument("--db", metavar="URL", help="store URL")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankmap.errors import RankmapError
    from rankmap.pipeline import demo as D

    import sys

    con = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
    if args.ranks < 2:
        raise RankmapError("--ranks must be at least 2")
    for flag, value in (("--face", args.face), ("--iters", args.iters)):
        if value < 1:                    # halo4d would abort on a negative count; 0 sends nothing to place
            raise RankmapError(f"{flag} must be at least 1, got {value}")
    res = D.run_demo(args, con)
    return 0 if res else 1
