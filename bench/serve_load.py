#!/usr/bin/env python3
"""What ``rankmap serve`` answers under load: a Prometheus scrape of ``/metrics`` with many jobs
in the store, and a client guessing its token.

usage: PYTHONPATH=src python3 bench/serve_load.py [--jobs 64] [--running 8] [--ranks 64]
                                                  [--ops 3] [--scrapes 20] [--load-threads 4]
                                                  [--guess-s 5] [--guess-threads 4]
                                                  [--store sqlite|URL] [--src DIR ...]

The store is filled through its own ingest: ``--jobs`` jobs of ``--ranks`` ranks each, every rank
sending to every other rank in two classes and ``--ops`` operations (``ranks x (ranks - 1) x 2``
pair series a job before the caps), ``--running`` of them still running with a link sampler
(two GPUs, NVLink and PCIe, fresh samples), the others ended a minute ago (so /metrics still
shows their final totals). Then ``rankmap serve`` (the real command, one server per ``--src``: a
checkout's ``src`` directory, this one's by default; give an older one's too for a before/after)
is scraped:

  series    how many series one scrape exposes, in all and the pair series of the largest job,
            and its size
  idle      ``--scrapes`` scrapes one after the other
  loaded    as many, while ``--load-threads`` threads ask that server's API for the jobs, a
            job's matrix and its utilisation without pause (the dashboard's own readers)

Everything is interleaved: each round scrapes every server idle, then each under load, so all see
the same machine; each prints p50 and p99 in ms.

  guesses   then every server, one after the other, started again with a token of its own
            (``--token``), gets ``--guess-s`` seconds of wrong tokens from ``--guess-threads``
            threads, as fast as it answers: the guesses per second it looked at (401) and those it
            refused unread (429, a slowed-down guesser).
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=64)
    p.add_argument("--running", type=int, default=8)
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--ops", type=int, default=3)
    p.add_argument("--scrapes", type=int, default=20)
    p.add_argument("--load-threads", type=int, default=4)
    p.add_argument("--guess-s", type=float, default=5.0, help="seconds of token guessing per server (0: none)")
    p.add_argument("--guess-threads", type=int, default=4)
    p.add_argument("--store", default="sqlite", help="sqlite (a file in a temporary directory) or a store URL")
    p.add_argument("--src", action="append", help="a rankmap checkout's src directory (repeatable; default this one's)")
    return p.parse_args()


def fill(store, jobs: int, running: int, ranks: int, ops: int) -> list[int]:
    from datetime import datetime, timedelta, timezone

    from rankmap.store import RankTotals

    ids = []
    now = time.time_ns()
    for j in range(jobs):
        live = j >= jobs - running
        meta = {"bucket_ms": 100}
        if live:
            meta["link_sampler"] = {"source": "gpm", "interval_ms": 100, "t0_unix_ns": now - 10**9, "host": f"node{j}",
                                    "gpus": [{"index": g, "uuid": f"GPU-{j}-{g}", "name": "H200"} for g in range(2)]}
        jid = store.create_job(["mpirun", "-np", str(ranks), f"./app{j}"], launcher="openmpi", world_size=ranks,
                               hosts=[f"node{j}"], meta=meta)
        recs = [RankTotals(world_rank=r, host=f"node{j}", pid=r, start_ns=now - 10**9, elapsed_ns=10**9,
                           traffic=[(d, klass, f"{op}{k}", "device", "send", 1000 * (r + 1) + d, 1)
                                    for d in range(ranks) if d != r
                                    for klass, op in (("p2p", "MPI_Isend"), ("collective", "MPI_Allreduce"))
                                    for k in range(ops)])
                for r in range(ranks)]
        store.ingest(jid, recs, timeline=False)
        if live:
            store.add_link_samples(jid, [{"t_ns": k * 10**8, "device": g, "link": link, "tx_bytes": k * 10**9,
                                          "rx_bytes": k * 10**9} for k in range(10) for g in range(2)
                                         for link in ("nvlink", "pcie")])
        else:
            store.finish_job(jid, exit_status=0, elapsed_ns=10**9,
                             ended=datetime.now(timezone.utc) - timedelta(seconds=60))
        ids.append(jid)
    return ids


def serve(src: str, url: str, *extra: str) -> tuple[subprocess.Popen, str]:
    """``rankmap serve`` of the package under ``src`` over the store ``url``, on a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=src)
    p = subprocess.Popen([sys.executable, "-m", "rankmap", "serve", "--db", url, "--port", str(port),
                          "--topology", "h200x2-nvswitch", *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            get(base + "/")
            return p, base
        except OSError:
            if p.poll() is not None:
                raise RuntimeError(f"rankmap serve ({src}) ended: {p.stderr.read()}") from None
            time.sleep(0.1)
    raise RuntimeError(f"rankmap serve ({src}) did not answer")


def get(url: str) -> tuple[float, bytes]:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return time.perf_counter() - t, body


def guesses(src: str, url: str, seconds: float, threads: int) -> dict[int, float]:
    """Answers per second by status of a server with a token, to wrong tokens sent without pause."""
    token = "the-token-this-bench-gave-" + "x" * 8
    p, base = serve(src, url, "--token", token)
    seen: dict[int, int] = {}
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def guess(k: int) -> None:
        n = 0
        while time.monotonic() < end:
            req = urllib.request.Request(base + "/api/jobs", headers={"Authorization": f"Bearer guess-{k}-{n}"})
            try:
                urllib.request.urlopen(req, timeout=30).read()
                code = 200
            except urllib.error.HTTPError as e:
                code = e.code
            n += 1
            with lock:
                seen[code] = seen.get(code, 0) + 1

    ts = [threading.Thread(target=guess, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    p.terminate()
    p.wait(30)
    return {code: n / seconds for code, n in seen.items()}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def counts(text: str) -> dict[str, float]:
    series = [l for l in text.splitlines() if l and not l.startswith("#")]
    per_job: dict[str, int] = {}
    for l in series:
        if l.startswith("rankmap_pair_bytes_total"):
            jid = l.split('job="', 1)[1].split('"', 1)[0]
            per_job[jid] = per_job.get(jid, 0) + 1
    return {"series": len(series), "pairs": sum(per_job.values()), "largest": max(per_job.values(), default=0),
            "jobs": len(per_job), "kB": len(text) / 1000}


def main() -> int:
    a = parse()
    srcs = a.src or [str(ROOT / "src")]
    sys.path.insert(0, srcs[0])
    from rankmap.store import open_store

    tmp = tempfile.TemporaryDirectory()
    url = f"sqlite:///{Path(tmp.name) / 'bench.db'}" if a.store == "sqlite" else a.store
    store = open_store(url)
    t = time.perf_counter()
    ids = fill(store, a.jobs, a.running, a.ranks, a.ops)
    filled = time.perf_counter() - t
    servers = [serve(src, url) for src in srcs]
    try:
        figures = [counts(get(base + "/metrics")[1].decode()) for _, base in servers]
        target = [servers[0][1]]
        stop, on = threading.Event(), threading.Event()
        answered = [0]

        def load() -> None:
            paths = ["/api/jobs", f"/api/jobs/{ids[-1]}/matrix", f"/api/jobs/{ids[0]}/utilisation"]
            k = 0
            while not stop.is_set():
                if not on.wait(0.05):
                    continue
                get(target[0] + paths[k % len(paths)])
                answered[0] += 1
                k += 1

        threads = [threading.Thread(target=load, daemon=True) for _ in range(a.load_threads)]
        for th in threads:
            th.start()
        idle = [[] for _ in servers]
        loaded = [[] for _ in servers]
        for _ in range(a.scrapes):
            for i, (_, base) in enumerate(servers):
                on.clear()
                time.sleep(0.2)  # the load's requests in flight finish
                idle[i].append(get(base + "/metrics")[0])
            for i, (_, base) in enumerate(servers):
                target[0] = base
                on.set()
                time.sleep(0.2)
                loaded[i].append(get(base + "/metrics")[0])
                on.clear()
        stop.set()
        on.set()
        for th in threads:
            th.join(60)
    finally:
        for p, _ in servers:
            p.terminate()
            p.wait(30)

    print(f"# /metrics of rankmap serve: {a.jobs} jobs of {a.ranks} ranks ({a.running} running), {a.ops} operations "
          f"a class; store {url.split(':', 1)[0]}, filled in {filled:.1f} s; {a.scrapes} scrapes a column")
    print(f"# machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    for i, src in enumerate(srcs):
        print(f"# column {i + 1}: {src}")
    head = f"{'figure':<36}" + "".join(f"{'src ' + str(i + 1):>12}" for i in range(len(srcs)))
    print(head)
    rows = [("series in one scrape", "series", "{:.0f}"), ("pair series", "pairs", "{:.0f}"),
            ("pair series, largest job", "largest", "{:.0f}"), ("jobs with pair series", "jobs", "{:.0f}"),
            ("scrape size (kB)", "kB", "{:.1f}")]
    for label, key, fmt in rows:
        print(f"{label:<36}" + "".join(f"{fmt.format(f[key]):>12}" for f in figures))
    for name, xs in (("idle", idle), (f"loaded ({a.load_threads} API threads)", loaded)):
        for q, what in ((0.5, "p50"), (0.99, "p99")):
            print(f"{'scrape ' + what + ' ms, ' + name:<36}" + "".join(f"{1000 * pct(x, q):>12.1f}" for x in xs))
    print(f"{'API requests answered meanwhile':<36}{answered[0]:>12}")
    if a.guess_s > 0:
        rates = [guesses(src, url, a.guess_s, a.guess_threads) for src in srcs]
        print(f"# token guesses: {a.guess_s:g} s from {a.guess_threads} threads per server")
        print(f"{'guesses/s looked at (401)':<36}" + "".join(f"{r.get(401, 0.0):>12.1f}" for r in rates))
        print(f"{'guesses/s refused unread (429)':<36}" + "".join(f"{r.get(429, 0.0):>12.1f}" for r in rates))
    return 0


if __name__ == "__main__":
    sys.exit(main())
