"""``rankmap export JOB --format csv|json|trace [-o FILE]``: a stored profile as data for other tools."""

from __future__ import annotations

import argparse
import sys

from rankmap.errors import RankmapError

FORMATS = ("csv", "json", "trace")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a stored profile as CSV (traffic), JSON (everything) or a "
                                      "Chrome/Perfetto trace (timeline)",
                       description="CSV: the traffic, one row per (src, dst, class, operation), header "
                                   "src,dst,class,operation,bytes,messages (with --by-mem one more column, "
                                   "mem; with --pair-source a last one, pair_source). JSON: the whole profile. "
                                   "trace: the Trace Event Format JSON that Perfetto's UI and the Catapult "
                                   "trace viewer open, one track group per rank (docs/interop.md).")
    p.add_argument("job", metavar="JOB", help="job id, or 'latest'")
    p.add_argument("--format", choices=FORMATS, default="csv")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    p.add_argument("--by-mem", action="store_true",
                   help="CSV: one row per memory kind of the send buffer, with a last column mem "
                        "(device, host, managed, unknown); rankmap map routes host rows via the host")
    p.add_argument("--pair-source", action="store_true",
                   help="CSV: one row per source of the pairs, with a last column pair_source (call: "
                        "counted at the call; library, mirror, model: see docs/collective-models.md)")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or the SQLite file in ~/.rankmap)")
    p.set_defaults(func=run)


def _say_what_it_holds(store, job_id: int, asked: str, empty: bool) -> None:
    """A CSV of a job that did not finish says so on stderr; one that holds no row at all is an
    error for such a job (a header alone would pass for "no traffic"), a note for a finished one."""
    from rankmap.store import schema as S

    job = store.job(job_id)
    state = S.state_words(job["state"], job["exit_status"])
    which = f"job {job_id}" + (f" (the {asked} one)" if asked == "latest" else "")
    if job["state"] in ("failed", "incomplete"):
        if empty:
            raise RankmapError(f"{which} is {state} and recorded no traffic: nothing to export "
                               f"(`rankmap jobs` lists the others)")
        print(f"rankmap: {which} is {state}: its traffic up to the ranks' last flush", file=sys.stderr)
    elif empty:
        print(f"rankmap: {which} recorded no traffic: the CSV has its header alone", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from rankmap.report.export import to_csv, to_json
    from rankmap.store import open_store

    store = open_store(args.db, existing=True)
    job_id = store.resolve_job(args.job)
    if args.format == "trace":
        from rankmap.report.trace import to_trace
        text = to_trace(store, job_id)
    elif args.format == "csv":
        text = to_csv(store, job_id, by_mem=args.by_mem, pair_source=args.pair_source)
        _say_what_it_holds(store, job_id, args.job, empty=text.count("\n") <= 1)
    else:
        text = to_json(store, job_id)
    if args.output:
        try:
            with open(args.output, "w", newline="") as f:
                f.write(text)
        except OSError as e:
            raise RankmapError(f"cannot write {args.output}: {e.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0
