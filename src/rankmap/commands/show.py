"""``rankmap show JOB``: the report of a stored job, with what its GPUs did (the CUDA activity table)."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="print the report of a stored job, with its GPUs' copies and kernels",
                       description="The summary `rankmap profile` prints, for any stored job, with the CUDA "
                                   "activity report in full: per-process time, instances, bytes of kernels, "
                                   "memory copies (H2D, D2H, D2D, P2P) and MPI/NCCL operations (average, min, "
                                   "max over ranks), bytes by copy kind, peer-to-peer copies by GPU, POP "
                                   "efficiencies of the GPUs and a verdict where the data support one.")
    p.add_argument("job", metavar="JOB", help="job id, or 'latest'")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="json: the CUDA activity report as data (as in `rankmap export --format json`)")
    p.add_argument("--gpu", action="store_true", help="only the GPU activity report (after the job's heading)")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or the SQLite file in ~/.rankmap)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rankmap.report.cuda import no_activity_text, renderables, report_for_job
    from rankmap.report.summary import print_summary
    from rankmap.store import open_store

    store = open_store(args.db, existing=True)
    job_id = store.resolve_job(args.job)
    if args.format == "json":
        sys.stdout.write(json.dumps(report_for_job(store, job_id).as_dict(), indent=1) + "\n")
        return 0
    from rich.console import Console, Group
    from rich.text import Text
    console = Console()
    if args.gpu:
        job = store.job(job_id)
        console.print(Text(f"rankmap job {job_id}  {job['command']}", style="bold"))
        rep = report_for_job(store, job_id, gpu_only=True)
        none = no_activity_text(job, rep)
        if none:
            console.print(Text(none), soft_wrap=True)
            return 0
    else:
        print_summary(store, job_id, console, cuda=False)
        rep = report_for_job(store, job_id)
    console.print(Group(*[Group(r, Text("")) for r in renderables(rep, full=True)]))
    return 0
