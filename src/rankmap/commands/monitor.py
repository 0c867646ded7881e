"""``rankmap monitor [--interval 100ms] [--db URL]``: sample every GPU's NVLink and PCIe traffic into the store."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("monitor", help="sample every GPU's NVLink and PCIe TX/RX into the store, on its own",
                       description="Sample the NVLink and PCIe bytes of every GPU of this node until Ctrl-C "
                                   "(or --duration), into the store, where `rankmap serve` shows them live and "
                                   "on /metrics. Uses NVML GPM on Hopper and newer, NVML field values elsewhere.")
    p.add_argument("--interval", default="100ms", metavar="T", help="time between samples, e.g. 100ms, 1s (default 100ms)")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or the SQLite file in ~/.rankmap)")
    p.add_argument("--duration", metavar="T", help="stop after this long (e.g. 30s, 8h); default: until Ctrl-C")
    p.add_argument("--source", choices=("auto", "gpm", "fields"), default="auto",
                   help="NVML GPM rates or field-value counters (default auto: GPM where every GPU has it)")
    p.add_argument("--json", action="store_true", help="print the session's totals and costs as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rankmap.errors import counted
    from rankmap.pipeline.monitor import parse_interval, run_monitor
    from rankmap.store import open_store

    interval = parse_interval(args.interval)
    duration = parse_interval(args.duration, "--duration", longest=None) if args.duration else None
    store = open_store(args.db)

    def started(job_id: int, kind: str, n: int) -> None:
        print(f"rankmap: monitoring {counted(n, 'GPU')} ({kind}) every {args.interval} as job {job_id} "
              f"in {store.url}; Ctrl-C to stop", file=sys.stderr, flush=True)

    res = run_monitor(store, interval_s=interval, source=args.source, duration_s=duration, on_start=started)
    for w in res.warnings:
        print(f"rankmap: warning: {w}", file=sys.stderr)
    if args.json:
        json.dump(res.as_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        from rankmap.report.monitor import print_monitor

        print_monitor(res)
    return 0

