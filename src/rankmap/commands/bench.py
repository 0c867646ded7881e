"""``rankmap bench p2p|mpi|nccl|show|store``: measure the machine's links and libraries, store and print the figures."""

from __future__ import annotations

import argparse
import json
import re
import sys

from rankmap.errors import RankmapError

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}


def size_arg(text: str) -> int:
    """``512M``, ``64MiB``, ``8``, ``1G`` -> bytes (binary units, as nccl-tests and OSU read them)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8, 64K, 512M, 1G)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def size_range(text: str) -> tuple[int, int]:
    """``8:64M`` -> (8, 67108864); one size alone means that size only."""
    lo, _, hi = text.partition(":")
    a, b = size_arg(lo), size_arg(hi or lo)
    if a < 1 or b < a:
        raise argparse.ArgumentTypeError(f"not a size range MIN:MAX: {text!r}")
    return a, b


def _list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table (default) or json (the rows, see docs/bench.md)")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or sqlite:///~/.rankmap/rankmap.db)")
    p.add_argument("--no-store", action="store_true", help="do not keep the results in the store")
    p.add_argument("--timeout", type=float, default=1800, metavar="S",
                   help="stop the benchmark after S seconds (default 1800)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure GPU-pair, MPI and NCCL figures (nvbandwidth / OSU / nccl-tests style)",
                       description="Measure the machine: GPU-pair and host<->GPU copies (p2p), MPI point-to-point and "
                                   "collectives with host and device buffers next to CUDA IPC (mpi), NCCL collectives "
                                   "next to MPI's (nccl). Results go to the store, the dashboard's machine page, "
                                   "`rankmap topo --measured` and `rankmap map --measured`.")
    bs = p.add_subparsers(dest="bench", metavar="WHAT")

    q = bs.add_parser("p2p", help="every GPU pair: CE and SM bandwidth one way and both ways, latency; host<->GPU",
                      description="Copy bandwidth between every GPU pair through the copy engine and SM copy "
                                  "kernels, one way and both ways at once, small-message latency, and host<->GPU "
                                  "bandwidth per GPU with pinned and pageable memory. The CUDA code is compiled with "
                                  "nvcc on first use for this machine's GPU arch and cached.")
    q.add_argument("--size", type=size_arg, default=512 << 20, metavar="BYTES",
                   help="bytes per copy (default 512M, as nvbandwidth)")
    q.add_argument("--loops", type=int, default=16, metavar="N", help="copies per sample (default 16)")
    q.add_argument("--samples", type=int, default=3, metavar="N", help="samples per figure; the median is kept (default 3)")
    q.add_argument("--tests", type=_list, metavar="LIST", help="comma list of tests (default all): " + ", ".join(
        ["ce_write", "ce_read", "ce_bidir_write", "ce_bidir_read", "sm_write", "sm_read", "sm_bidir", "latency_ce",
         "latency_sm", "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable"]))
    q.add_argument("--devices", type=lambda t: [int(x) for x in _list(t)], metavar="LIST",
                   help="CUDA device indices to use (default all)")
    _common(q)
    q.set_defaults(func=run_p2p)

    m = bs.add_parser("mpi", help="MPI latency/bandwidth/collectives with host and device buffers, vs CUDA IPC",
                      usage="rankmap bench mpi [options] -- <MPI launcher and its options>",
                      description="OSU-style point-to-point and collective figures under the given MPI launcher "
                                  "(e.g. -- mpirun -np 2), with host buffers, device buffers (through the MPI when it "
                                  "is CUDA-aware), device buffers staged through host memory, and rankmap's CUDA IPC "
                                  "path between ranks 0 and 1.")
    m.add_argument("--sizes", type=size_range, default=(8, 64 << 20), metavar="MIN:MAX",
                   help="message sizes, doubling (default 8:64M)")
    m.add_argument("--coll-max-size", type=size_arg, default=16 << 20, metavar="BYTES",
                   help="largest collective message (default 16M, and never above the MAX of --sizes)")
    m.add_argument("--tests", type=_list, metavar="LIST",
                   help="latency, bw, bibw, allreduce, bcast, reduce, allgather, alltoall, reduce_scatter, barrier "
                        "(default all)")
    m.add_argument("--buffers", type=_list, metavar="LIST",
                   help="host, device, device-staged, device-ipc (default all that can run)")
    m.add_argument("--trials", type=int, default=3, metavar="N", help="repeats per figure; the median is kept (default 3)")
    m.add_argument("--window", type=int, default=64, metavar="N", help="messages in flight in bw/bibw (default 64)")
    m.add_argument("--max-iters", type=int, metavar="N",
                   help="at most N iterations per figure (default: 1000 for latency and collectives, 100 for "
                        "bandwidth, fewer for large messages)")
    m.add_argument("--cuda-aware", choices=("auto", "yes", "no"), default="auto",
                   help="treat the MPI as CUDA-aware or not (default: ask the MPI)")
    m.add_argument("--mpicc", metavar="PATH", help="MPI compiler wrapper (default: the one of the launcher)")
    _common(m)
    m.add_argument("command", nargs=argparse.REMAINDER, help="the MPI launcher and its options, after --")
    m.set_defaults(func=run_mpi)

    n = bs.add_parser("nccl", help="NCCL collectives and send/recv (nccl-tests' algbw/busbw), next to MPI's",
                      usage="rankmap bench nccl [options] [-- <MPI launcher and its options>]",
                      description="NCCL collectives and send/recv with nccl-tests' definitions of algbw and busbw. "
                                  "Without a launcher one process drives every GPU; with one (-- mpirun -np 2) each "
                                  "rank drives one GPU and the same collectives also run through MPI on the same "
                                  "GPUs. NCCL is loaded at run time (RANKMAP_NCCL_LIB to choose one).")
    n.add_argument("--ops", type=_list, metavar="LIST",
                   help="all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv (default all)")
    n.add_argument("--sizes", type=size_range, default=(8, 128 << 20), metavar="MIN:MAX",
                   help="sizes (default 8:128M)")
    n.add_argument("--step-factor", type=float, default=2, metavar="F", help="size multiplier (default 2)")
    n.add_argument("--iters", type=int, default=20, metavar="N", help="operations per timed loop (default 20)")
    n.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed operations per size (default 5)")
    n.add_argument("--trials", type=int, default=5, metavar="N", help="timed loops per size; the median is kept (default 5)")
    n.add_argument("--gpus", type=int, default=0, metavar="N", help="GPUs of the one-process run (default all)")
    n.add_argument("--no-mpi", action="store_true", help="with a launcher: skip the MPI collectives")
    n.add_argument("--mpi-max-size", type=size_arg, default=64 << 20, metavar="BYTES",
                   help="largest size run through MPI (default 64M)")
    n.add_argument("--cuda-aware", choices=("auto", "yes", "no"), default="auto",
                   help="treat the MPI as CUDA-aware or not (default: ask the MPI)")
    n.add_argument("--mpicc", metavar="PATH", help="MPI compiler wrapper (default: the one of the launcher)")
    _common(n)
    n.add_argument("command", nargs=argparse.REMAINDER, help="optional MPI launcher and its options, after --")
    n.set_defaults(func=run_nccl)

    s = bs.add_parser("show", help="print a stored benchmark run", description="Print a stored benchmark run again.")
    s.add_argument("run", nargs="?", default="latest", help="run id, or 'latest' (default)")
    s.add_argument("--kind", choices=("p2p", "mpi", "nccl"), help="with 'latest': the newest run of this kind")
    s.add_argument("--format", choices=("table", "json"), default="table")
    s.add_argument("--db", metavar="URL", help="store URL")
    s.set_defaults(func=run_show)

    k = bs.add_parser("store", help="store runs kept in files (when the store could not take them)",
                      description="Store benchmark runs from JSON files: the ones a benchmark kept when the store "
                                  "did not answer (it prints the command), or saved --format json output. A run "
                                  "stored already is not stored twice; a kept file is removed once stored.")
    k.add_argument("files", nargs="+", metavar="FILE", help="JSON files of runs")
    k.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or sqlite:///~/.rankmap/rankmap.db)")
    k.set_defaults(func=run_store)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _launcher(cmd: list[str]) -> list[str]:
    return cmd[1:] if cmd and cmd[0] == "--" else cmd


def _at_least(args: argparse.Namespace, **lows: float) -> None:
    """Counts below what the benchmark programs take are the user's, so one line names the option
    here; the programs' own check would read as a rankmap bug."""
    for name, lo in lows.items():
        value = getattr(args, name)
        if value is not None and value < lo:
            raise RankmapError(f"--{name.replace('_', '-')} must be at least {lo:g}, got {value:g}")


def _store(args: argparse.Namespace):
    """The store the results will go to, opened before measuring so that a wrong --db is said at
    once; one that does not answer now is no reason not to measure (the results are kept)."""
    if args.no_store:
        return None
    from rankmap.store import open_store

    store = open_store(args.db, lazy=True)
    if not store.ready:
        print(f"rankmap: warning: the store {store.url} does not answer now; measuring anyway (the results "
              f"are kept in a file if it still does not at the end)", file=sys.stderr)
    return store


def _finish(run, args: argparse.Namespace, store) -> int:
    """Store, print, and say in one line what was measured and what was not (an error when nothing
    was, and when the store did not take it: then the line says where the results are kept)."""
    if not run.rows:
        raise RankmapError(run.summary())
    doc = run.to_json()
    not_stored = None
    if store is not None:
        from rankmap.linkbench.kept import NotStored, store_or_keep

        try:
            doc["run_id"] = store_or_keep(doc, store)
        except NotStored as e:
            not_stored = e
    if args.format == "json":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        from rankmap.linkbench.report import print_run

        print_run(doc)
    print(run.summary() + (f" (stored as bench run {doc['run_id']})" if "run_id" in doc else ""), file=sys.stderr)
    if not_stored is not None:
        raise not_stored
    return 0


def run_p2p(args: argparse.Namespace) -> int:
    from rankmap.linkbench import p2p

    _at_least(args, loops=1, samples=1)
    store = _store(args)
    return _finish(p2p.run(size=args.size, loops=args.loops, samples=args.samples, tests=args.tests,
                           devices=args.devices, timeout=args.timeout), args, store)


def run_mpi(args: argparse.Namespace) -> int:
    from rankmap.linkbench import mpi

    cmd = _launcher(list(args.command))
    if not cmd:
        raise RankmapError("give the MPI launcher after --, e.g. rankmap bench mpi -- mpirun -np 2")
    _at_least(args, trials=1, window=1, max_iters=1)
    store = _store(args)
    return _finish(mpi.run(cmd, min_size=args.sizes[0], max_size=args.sizes[1], coll_max_size=args.coll_max_size,
                           tests=args.tests, buffers=args.buffers, trials=args.trials, window=args.window,
                           cuda_aware=args.cuda_aware, timeout=args.timeout, mpicc=args.mpicc,
                           budgets={f"max-{k}-iters": args.max_iters for k in ("latency", "bw", "coll")}
                           if args.max_iters else None), args, store)


def run_nccl(args: argparse.Namespace) -> int:
    from rankmap.linkbench import nccl

    _at_least(args, iters=1, warmup=0, trials=1, gpus=0, step_factor=1.01)
    cmd = _launcher(list(args.command))
    store = _store(args)
    return _finish(nccl.run(cmd or None, ops=args.ops, min_size=args.sizes[0], max_size=args.sizes[1],
                            step_factor=args.step_factor, iters=args.iters, warmup=args.warmup, trials=args.trials,
                            gpus=args.gpus, mpi=not args.no_mpi, mpi_max_size=args.mpi_max_size,
                            cuda_aware=args.cuda_aware, timeout=args.timeout, mpicc=args.mpicc), args, store)


def run_show(args: argparse.Namespace) -> int:
    from rankmap.store import open_store

    store = open_store(args.db, existing=True)
    if args.run == "latest":
        runs = store.bench_runs(args.kind, limit=1)
        if not runs:
            raise RankmapError(f"no benchmark runs{' of kind ' + args.kind if args.kind else ''} in {store.url}: "
                               f"run `rankmap bench p2p` (or mpi, nccl) first")
        rid = runs[0]["id"]
    else:
        try:
            rid = int(args.run)
        except ValueError:
            raise RankmapError(f"not a run id: {args.run!r} (give a number or 'latest')") from None
    doc = store.bench_run(rid)
    if args.format == "json":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        from rankmap.linkbench.report import print_run

        print_run(doc)
        print(f"bench run {rid} ({doc['kind']}) of {doc['created']} on {doc.get('host') or '?'}: measured "
              f"{', '.join(doc.get('ran') or []) or 'nothing'}"
              + ("; not measured: " + "; ".join(doc['not_run']) if doc.get("not_run") else ""), file=sys.stderr)
    return 0


def run_store(args: argparse.Namespace) -> int:
    from rankmap.linkbench.kept import store_file
    from rankmap.store import open_store

    store = open_store(args.db)
    for f in args.files:
        doc, rid, removed = store_file(f, store)
        print(f"{f}: bench {doc['kind']} run of {doc.get('created') or '?'} on {doc.get('host') or '?'} "
              f"stored as bench run {rid}" + (" (the kept file is removed)" if removed else ""))
    return 0
