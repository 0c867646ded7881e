"""``rankmap ingest RUN_DIR [--db URL]``: store a run directory's record files (again, idempotently);
``rankmap ingest --from kineto TRACE.json ...`` / ``--from otf2 ARCHIVE``: a job from another tool's traces."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help="store the record files of a run directory (after a store outage, or "
                                      "gathered from other nodes), or a job from PyTorch profiler / OTF2 traces",
                       description="Read the record files of RUN_DIR and store what the store lacks: the rest "
                                   "of a job the store could not take while it ran, or the record files of other "
                                   "nodes copied into the run directory. Running it again adds nothing. The job is "
                                   "the one the run directory's job.json names, created when the store has none. "
                                   "With --from kineto (one PyTorch profiler trace per rank) or --from otf2 (an OTF2 "
                                   "archive, e.g. Score-P's), a new job is built from those traces instead: its "
                                   "pairs come from rankmap's NCCL and MPI models, and it can be mapped, shown and "
                                   "served like a profiled one.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="the run directory (rankmap profile prints it); with --from kineto the trace files "
                        "(.json or .json.gz, one per rank); with --from otf2 the archive (traces.otf2 or its folder)")
    p.add_argument("--from", dest="source", choices=("run", "kineto", "otf2"), default="run",
                   help="what PATH is (default: a rankmap run directory)")
    p.add_argument("--nccl-log", action="append", default=[], metavar="LOG",
                   help="--from kineto: a NCCL INFO log of the same run (NCCL_DEBUG=INFO), for NCCL's rings and "
                        "trees; repeatable (default: the nccl-debug*.log files beside the traces)")
    p.add_argument("--mpi-library", default="", metavar="TEXT",
                   help="--from otf2: the MPI library the run used, as MPI_Get_library_version prints it (e.g. "
                        "'Open MPI v4.1.6'), so that its collectives follow that library's algorithm choice; "
                        "default: rankmap's fixed model")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or the SQLite file in ~/.rankmap)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rankmap.errors import RankmapError, counted
    from rankmap.store import open_store

    if args.source != "run":
        from rankmap.pipeline.import_trace import import_traces

        got = import_traces(args.source, args.paths, open_store(args.db), nccl_logs=args.nccl_log,
                            mpi_library=args.mpi_library)
        for p in got.problems:
            print(f"rankmap: note: {p}")
        print(f"job {got.job_id} created from {counted(got.files, args.source + ' trace' if args.source == 'kineto' else 'OTF2 archive')}: "
              f"{counted(got.world_size, 'rank')}, {got.pair_bytes} bytes between rank pairs")
        return 0
    if args.nccl_log or args.mpi_library:
        raise RankmapError("--nccl-log and --mpi-library go with --from kineto / --from otf2")
    if len(args.paths) != 1:
        raise RankmapError(f"ingest takes one run directory, not {len(args.paths)} (traces of other tools: --from)")
    from rankmap.pipeline.ingest import ingest_run

    res = ingest_run(args.paths[0], open_store(args.db))
    for p in res.problems:
        print(f"rankmap: warning: {p}")
    how = "created" if res.created else "completed"
    # rows are rewritten with the same values on a repeat (a rank's totals): say what was new instead
    what = "nothing new" if res.new_bytes == 0 and not res.created else \
        f"{res.new_bytes} bytes of records stored in {res.rows} rows"
    print(f"job {res.job_id} {how} from {counted(res.files, 'record file')}: {what}, state {res.state}")
    return 0
