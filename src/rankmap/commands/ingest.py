"""``rankmap ingest RUN_DIR [--db URL]``: store a run directory's record files (again, idempotently)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help="store the record files of a run directory (after a store outage, or "
                                      "gathered from other nodes)",
                       description="Read the record files of RUN_DIR and store what the store lacks: the rest "
                                   "of a job the store could not take while it ran, or the record files of other "
                                   "nodes copied into the run directory. Running it again adds nothing. The job is "
                                   "the one the run directory's job.json names, created when the store has none.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (rankmap profile prints it)")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or the SQLite file in ~/.rankmap)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rankmap.errors import counted
    from rankmap.pipeline.ingest import ingest_run
    from rankmap.store import open_store

    res = ingest_run(args.run_dir, open_store(args.db))
    for p in res.problems:
        print(f"rankmap: warning: {p}")
    how = "created" if res.created else "completed"
    # rows are rewritten with the same values on a repeat (a rank's totals): say what was new instead
    what = "nothing new" if res.new_bytes == 0 and not res.created else \
        f"{res.new_bytes} bytes of records stored in {res.rows} rows"
    unknown = "" if res.ended_known else (" (every rank finalised; exit status unknown: the profiler ended before "
                                          "the job)" if res.state == "finished" else
                                          " (the profiler ended before the job, and not every rank finalised)")
    print(f"job {res.job_id} {how} from {counted(res.files, 'record file')}: {what}, state {res.state}{unknown}")
    return 0
