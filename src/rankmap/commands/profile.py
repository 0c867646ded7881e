"""``rankmap profile [options] -- <launch command>``: run a job with capture, store and summarise it."""

from __future__ import annotations

import argparse

from rankmap.errors import RankmapError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile", help="run a job and record who sends how many bytes to whom",
        description="Run an MPI, NCCL (torchrun) or single-process job with rankmap's capture injected, "
                    "stream its per-rank records into the store and print a summary. The job's exit "
                    "status is rankmap's.",
        usage="rankmap profile [options] -- <launch command>")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or sqlite:///~/.rankmap/rankmap.db)")
    p.add_argument("--bucket-ms", type=int, default=100, metavar="N", help="timeline bucket width (default 100)")
    p.add_argument("--flush-ms", type=int, default=1000, metavar="N",
                   help="how often ranks flush their records (default 1000)")
    p.add_argument("--mpicc", metavar="PATH", help="MPI compiler wrapper to build the shim with "
                   "(default: the one that belongs to the launcher)")
    p.add_argument("--run-dir", metavar="DIR", help="where the ranks write their record files "
                   "(default ~/.rankmap/runs/<timestamp>-<id>)")
    p.add_argument("--nccl", choices=("auto", "on", "off"), default="auto",
                   help="inject the NCCL profiler plugin (auto: for torchrun, and for MPI jobs when it builds)")
    p.add_argument("--cuda-activity", choices=("off", "copies", "on", "auto"), default=None,
                   help="record the GPUs' copies and kernels through CUPTI: on (copies and kernels), copies "
                        "(copies only), auto (on where this machine has a CUDA driver and a CUPTI, else off); "
                        "default off: on costs launch-bound loops 17-29 %% (docs/cuda-activity.md)")
    p.add_argument("--collectives", choices=("auto", "mirror", "library", "model"), default=None,
                   help="where collective pair traffic comes from: auto (default; $RANKMAP_COLLECTIVES if set): "
                        "the mirror of the MPI library's own algorithm choice where rankmap covers the library, "
                        "else the model; library: Open MPI's monitoring PML, counted per message (it costs every "
                        "message, and is refused for programs with neighbourhood collectives); mirror; model "
                        "(docs/collective-models.md)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--progress", action="store_true", help="show the progress line even when stderr is not a terminal")
    g.add_argument("--no-progress", action="store_true", help="never show the progress line")
    p.add_argument("--no-summary", action="store_true", help="do not print the summary after the job")
    p.add_argument("--no-link-sampler", action="store_true",
                   help="do not sample the GPUs' NVLink/PCIe counters while the job runs")
    p.add_argument("--link-ms", type=int, default=None, metavar="N",
                   help="the link sampler's interval (default: the flush interval, 1000); 100 gives a finer link "
                        "timeline and costs a job whose ranks poll every core in lockstep ~4 %% (docs/benchmarks.md)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the launch command, after --")
    # NumPy is imported once the job runs (pipeline/profile.py): 0.14 s off the fixed cost
    p.set_defaults(func=run, numpy_at_start=False)


def run(args: argparse.Namespace) -> int:
    from rankmap.pipeline.profile import profile_command

    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise RankmapError("no command to profile: rankmap profile [options] -- <launch command>")
    res = profile_command(cmd, store=args.db, bucket_ms=args.bucket_ms, flush_ms=args.flush_ms,
                          link_ms=args.link_ms, mpicc=args.mpicc, progress=not args.no_progress,
                          force_progress=args.progress, run_dir=args.run_dir, nccl=args.nccl,
                          link_sampler=not args.no_link_sampler, cuda=args.cuda_activity,
                          collectives=args.collectives, started=getattr(args, "started", None))
    if not args.no_summary and res.stored:
        from rankmap.report.summary import print_summary
        print_summary(res.store, res.job_id)
    return res.exit_status
