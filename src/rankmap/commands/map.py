"""``rankmap map``: what-if placement of a recorded or given traffic matrix on a topology."""

from __future__ import annotations

import argparse
import sys

from rankmap.commands._args import add_solver_args, run_hint, solver_options
from rankmap.errors import RankmapError
from rankmap.formats import mapping_json


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


def run(args: argparse.Namespace) -> int:
    from rankmap.pipeline.map import map_traffic

    log = sys.stderr if args.format == "json" else sys.stdout
    res = map_traffic(job=args.job, traffic_csv=args.traffic, save=args.save, as_gpu_resident=args.as_gpu_resident,
                      log=lambda line: print(line, file=log), started=args.started,     # --time-budget covers the whole command
                      **solver_options(args))
    doc, job = res.doc, res.job
    text = mapping_json.dumps(doc) if args.output or args.format == "json" else ""
    if args.output:
        try:
            with open(args.output, "w") as f:
                f.write(text)
        except OSError as e:
            raise RankmapError(f"cannot write {args.output}: {e.strerror}") from None
    if args.format == "json":
        sys.stdout.write(text)
    else:
        from rankmap.mapping.report import print_text

        print_text(doc)
    if res.mapping_id is not None:
        how = run_hint(job["command"] if job.get("command") else "<its command>", args)
        from rankmap.mapping.basis import stated

        st = stated(doc)       # the words the dashboard shows beside this mapping
        basis = f" ({st['label']})" if st["what_if"] else ""
        print(f"stored as mapping {res.mapping_id} of job {job['id']}{basis}; launch with: {how}", file=log)
    return 0
