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
    p.add_argument("--links", action="store_true",
                   help="the link ledger: per link, the measured bytes, the bytes the recorded pairs explain "
                        "(top three pairs) and the unexplained remainder (docs/interop.md)")
    p.add_argument("--topology", metavar="SPEC", default="live",
                   help="with --links: the node the job ran on (rankmap topo spec; default live)")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or the SQLite file in ~/.rankmap)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rankmap.report.cuda import no_activity_text, renderables, report_for_job
    from rankmap.report.summary import print_summary
    from rankmap.store import open_store

    store = open_store(args.db, existing=True)
    job_id = store.resolve_job(args.job)
    if args.links:
        return show_links(store, job_id, args)
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


def show_links(store, job_id: int, args: argparse.Namespace) -> int:
    """``--links``: the link ledger of the job on ``--topology``, as a table or JSON."""
    from rankmap.mapping.traffic import job_traffic
    from rankmap.report.summary import human_bytes
    from rankmap.topology import load
    from rankmap.web import cluster as C
    from rankmap.web import topoview as V
    from rankmap.web.ledger import ledger

    topo = load(args.topology)
    job = store.job(job_id)
    traffic = job_traffic(store, job_id)
    n = traffic.n
    mapping = (job.get("meta") or {}).get("mapping")
    placement = V.placement_for(topo, n, mapping, f"job {job_id} meta.mapping",
                                C.rank_hosts(store.ranks(job_id), n) if mapping is None else None)
    led = ledger(store, job, topo, placement, traffic)
    if args.format == "json":
        sys.stdout.write(json.dumps(led, indent=1) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    def b(v):
        return "-" if v is None else human_bytes(v)

    t = Table(title=f"job {job_id} on {topo.name}: link ledger (placement: {led['placement']}; "
                    f"measured: {led['measured'] or 'no counters'})")
    for col in ("link", "dir", "measured", "explained", "unexplained", "top pairs"):
        t.add_column(col)
    for l in led["links"]:
        if not (l["explained_ab"] or l["explained_ba"] or l["measured_ab"] or l["measured_ba"]):
            continue
        for d, (x, y) in (("ab", (l["a"], l["b"])), ("ba", (l["b"], l["a"]))):
            tops = ", ".join(f"{p['src']}->{p['dst']} {human_bytes(p['bytes'])}" for p in l["top_pairs"]
                             if p["direction"] == d)
            t.add_row(f"{x}->{y}", l["kind"], b(l[f"measured_{d}"]), b(l[f"explained_{d}"]),
                      b(l[f"unexplained_{d}"]), tops)
    Console().print(t)
    return 0
