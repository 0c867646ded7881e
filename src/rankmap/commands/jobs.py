"""``rankmap jobs [--format json]``: the stored jobs, newest first."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="list the stored jobs: id, state, command, ranks, bytes, start, duration",
                       description="The stored jobs, newest first. A job is running while the rankmap that "
                                   "profiles it is alive, finished when it stored everything and the job exited "
                                   "0, failed when the job exited non-zero (its launcher started no rank, or it "
                                   "crashed), incomplete when that rankmap is gone without storing everything "
                                   "(rankmap ingest RUN_DIR completes it).")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or the SQLite file in ~/.rankmap)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="at most N jobs (default 50)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from rankmap.errors import RankmapError
    from rankmap.store import open_store

    if args.limit < 1:                  # SQLite reads a negative LIMIT as none, PostgreSQL refuses it
        raise RankmapError(f"--limit must be at least 1, got {args.limit}")
    store = open_store(args.db, existing=True)   # a mistyped --db is said, not made (the default store is)
    store.settle_jobs()
    rows = store.job_list(args.limit)
    if args.format == "table" and not rows:
        print(store.no_jobs_text())
        return 0
    if args.format == "json":
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    from rankmap.report.summary import human_bytes
    from rankmap.store.schema import state_words

    t = Table(title=f"jobs in {store.url}", title_justify="left")
    for c, j in (("id", "right"), ("state", "left"), ("ranks", "right"), ("bytes", "right"),
                 ("start (UTC)", "left"), ("duration", "right"), ("command", "left")):
        t.add_column(c, justify=j, overflow="fold")
    for r in rows:
        dur = "" if r["duration_s"] is None else f"{r['duration_s']:.1f} s"
        state = state_words(r["state"], r["exit_status"])
        t.add_row(str(r["id"]), state, str(r["ranks"]), human_bytes(r["bytes"]),
                  (r["start"] or "")[:19].replace("T", " "), dur, r["command"])
    Console(highlight=False, width=None if sys.stdout.isatty() else 160).print(t)
    return 0
