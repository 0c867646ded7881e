#!/usr/bin/env python3
"""Ingest cost of a long job: rankmap's own CPU per poll at the start and after an hour, rows/s.

usage: PYTHONPATH=src python3 bench/ingest.py [--minutes 60] [--stores sqlite,postgresql]
                                              [--pg URL] [--shapes defaults,fine] [--cycles 20]

Record files are written by rankmap's real writer (native/common/rmrec.c, built with a virtual
clock into bench/rmrec_synth.c) for a steady all-to-all job: every rank sends 1 KiB to every
other rank every millisecond. Two shapes:

  defaults  64 ranks x 63 peers, --flush-ms 1000 --bucket-ms 100
  fine      16 ranks x 15 peers, --flush-ms 100  --bucket-ms 10   (the 16-rank all-to-all check)

For each shape and store the writer runs in its own process, in lock step with the ingest
(rankmap.pipeline.ingest.RunIngest, what `rankmap profile` streams with), which runs in this
process's main thread:

  1. start: --cycles poll+write cycles of a live job, each after the writer has written one poll
     interval of the job (the profile's interval: 1 s for the defaults, 0.2 s for fine); the CPU
     time of each cycle (thread time: rankmap's work, not the writer's) is measured;
  2. an hour (--minutes) of the job, written and ingested minute by minute: rows/s of the store,
     MB/s of record data; what the reader has passed is punched out of the files (they keep their
     size, not their blocks) so an hour of 64 ranks fits on a small disk;
  3. the same live cycles again, at the end of the hour;
  4. the final cycle, then the stored matrix is compared with what the writer sent (exact).

CPU share: the CPU time of the cycles over the job time they cover. "at poll" polls at the
profile's interval whatever a cycle costs; "paced" is what `rankmap profile` does (next_wait: a
cycle that costs more than 1 % of the interval makes the next one wait longer, up to 30 s, so a
big job is stored in larger batches; the next cycle then has more to do, which the share counts).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rankmap.pipeline.ingest import CPU_BUDGET, RunIngest, next_wait  # noqa: E402
from rankmap.store import open_store  # noqa: E402

SHAPES = {"defaults": dict(ranks=64, flush_ms=1000, bucket_ms=100),
          "fine": dict(ranks=16, flush_ms=100, bucket_ms=10)}
BYTES_PER_MS = 1024


def build_writer(out: Path) -> Path:
    exe = out / "rmrec_synth"
    common = ROOT / "native" / "common"
    subprocess.run([shutil.which("cc") or "gcc", "-O2", "-std=gnu11", "-DRMREC_NO_TSC", "-DRMREC_VIRTUAL_CLOCK",
                    "-I", str(common), str(ROOT / "bench" / "rmrec_synth.c"), str(common / "rmrec.c"),
                    "-o", str(exe), "-lpthread"], check=True)
    return exe


class Writer:
    """The writer process, driven one step of virtual time at a time."""

    def __init__(self, exe: Path, run_dir: Path, ranks: int, flush_ms: int, bucket_ms: int):
        env = dict(os.environ, RANKMAP_FLUSH_MS=str(flush_ms), RANKMAP_BUCKET_MS=str(bucket_ms),
                   RANKMAP_TABLE_SLOTS="4096")
        self.p = subprocess.Popen([str(exe), str(run_dir), str(ranks), str(BYTES_PER_MS)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)
        self.t = 0.0
        self.sent = 0

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.p.stdin.write(f"{self.t:.3f}\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().split()
        if not line or line[0] != "ok":
            raise SystemExit(f"rmrec_synth failed at {self.t} s")
        self.sent = int(line[1])

    def close(self) -> None:
        self.p.stdin.close()
        if self.p.wait(timeout=600) != 0:
            raise SystemExit("rmrec_synth failed at close")


_libc = ctypes.CDLL(None, use_errno=True)


def punch(ing: RunIngest) -> None:
    """Free the disk blocks the readers have passed (the files keep their size and offsets)."""
    for name, r in ing.readers.items():
        upto = (r.offset // 4096) * 4096
        if upto <= 4096:
            continue
        fd = os.open(r.path, os.O_WRONLY)
        try:
            _libc.fallocate(fd, 0x02 | 0x01, ctypes.c_long(4096), ctypes.c_long(upto - 4096))  # PUNCH_HOLE|KEEP_SIZE
        finally:
            os.close(fd)


def live(w: Writer, ing: RunIngest, interval: float, cycles: int, paced: bool) -> tuple[float, float]:
    """(median CPU s of a cycle, CPU share of a core) over ``cycles`` cycles of the live job.

    ``paced``: each cycle comes after the wait `rankmap profile` takes after the previous one
    (next_wait); else after ``interval``, whatever a cycle costs."""
    costs, covered = [], []
    wait = interval
    for _ in range(cycles):
        w.advance(wait)
        covered.append(wait)
        t0 = time.thread_time()
        ing.poll()
        ing.write()
        costs.append(time.thread_time() - t0)
        wait = next_wait(costs[-1], interval) if paced else interval
    return statistics.median(costs), 100 * sum(costs) / sum(covered)


def run_one(shape: str, url: str, exe: Path, minutes: float, cycles: int, work: Path) -> dict:
    cfg = SHAPES[shape]
    run_dir = work / f"{shape}-{url.split(':')[0]}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    store = open_store(url)
    jid = store.create_job(["bench-ingest", shape], world_size=cfg["ranks"], run_dir=run_dir,
                           meta={"bucket_ms": cfg["bucket_ms"], "flush_ms": cfg["flush_ms"]})
    interval = min(1.0, max(0.2, cfg["flush_ms"] / 1000))
    w = Writer(exe, run_dir, cfg["ranks"], cfg["flush_ms"], cfg["bucket_ms"])
    ing = RunIngest(store, jid, run_dir, resume=False)
    start = live(w, ing, interval, cycles, False)
    start_paced = live(w, ing, interval, cycles, True)
    rows = 0
    cpu = 0.0
    data = 0
    step = 60.0
    while w.t + step <= minutes * 60:
        before = sum(r.offset for r in ing.readers.values())
        w.advance(step)
        t0 = time.thread_time()
        ing.poll()
        rows += ing.write()
        cpu += time.thread_time() - t0
        data += sum(r.offset for r in ing.readers.values()) - before
        punch(ing)
    end = live(w, ing, interval, cycles, False)
    end_paced = live(w, ing, interval, cycles, True)
    age_min = w.t / 60
    w.close()
    ing.poll(final=True)
    ing.write()
    n = cfg["ranks"]
    m = store.traffic_matrix(jid)
    exact = bool(m.shape == (n, n) and all(m[i, j] == (0 if i == j else w.sent) for i in range(n) for j in range(n)))
    tl_rows = len(store.timeline(jid))
    store.engine.dispose()

    return dict(shape=shape, store=url.split("+")[0].split(":")[0], pairs=f"{n}x{n - 1}", interval=interval,
                start_ms=1000 * start[0], end_ms=1000 * end[0], share_start=start[1], share_end=end[1],
                paced_start=start_paced[1], paced_end=end_paced[1],
                rows_s=rows / cpu if cpu else 0.0, mb_s=data / 1e6 / cpu if cpu else 0.0,
                age_min=age_min, timeline_rows=tl_rows, exact=exact)


def pg_server(stack: list):
    """A throwaway local PostgreSQL server (the tests' harness), appended to ``stack`` for the caller
    to stop; None where PostgreSQL is not installed."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from pg import PgCluster, _bindir
    except ImportError:
        return None
    if _bindir() is None:
        return None
    c = PgCluster(_bindir())
    c.start()
    stack.append(c)
    return c


def pg_url(given: str | None, stack: list) -> str | None:
    if given:
        return given
    c = pg_server(stack)
    return None if c is None else c.new_database()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--stores", default="sqlite,postgresql")
    ap.add_argument("--pg", metavar="URL", help="a PostgreSQL database (default: a throwaway local server)")
    ap.add_argument("--shapes", default="defaults,fine")
    ap.add_argument("--cycles", type=int, default=20)
    args = ap.parse_args()
    print(f"# {platform.node()}: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"python {platform.python_version()}; {args.minutes:g} min jobs, 1 KiB per pair per ms")
    servers: list = []
    results = []
    with tempfile.TemporaryDirectory(prefix="rankmap-bench-ingest-") as tmp:
        work = Path(tmp)
        exe = build_writer(work)
        try:
            for shape in args.shapes.split(","):
                for kind in args.stores.split(","):
                    if kind == "sqlite":
                        url = f"sqlite:///{work / f'{shape}.db'}"
                    else:
                        url = pg_url(args.pg, servers)
                        if url is None:
                            print("# postgresql: no server (give --pg URL, or install PostgreSQL)")
                            continue
                    r = run_one(shape, url, exe, args.minutes, args.cycles, work)
                    results.append(r)
                    print(f"# done {shape} {r['store']}", file=sys.stderr, flush=True)
        finally:
            for c in servers:
                c.stop()
    head = (f"{'shape':<9} {'store':<10} {'ranks':>6} {'poll s':>6} {'ms/cycle':>17} {'% core at poll':>16} "
            f"{'% core paced':>14} {'rows/s':>9} {'MB/s':>6} {'tl rows':>8} {'exact':>5}")
    print(head)
    print(f"{'':<9} {'':<10} {'':>6} {'':>6} {'start':>8} {'1h':>8} {'start':>7} {'1h':>8} {'start':>6} "
          f"{'1h':>7} {'':>9} {'':>6} {'':>8} {'':>5}")
    for r in results:
        print(f"{r['shape']:<9} {r['store']:<10} {r['pairs']:>6} {r['interval']:>6.1f} {r['start_ms']:>8.2f} "
              f"{r['end_ms']:>8.2f} {r['share_start']:>7.2f} {r['share_end']:>8.2f} {r['paced_start']:>6.2f} "
              f"{r['paced_end']:>7.2f} {r['rows_s']:>9.0f} {r['mb_s']:>6.1f} {r['timeline_rows']:>8} "
              f"{'yes' if r['exact'] else 'NO':>5}")
    print(f"# '1h' = after {results[0]['age_min']:.1f} min of the job; budget of a paced cycle: "
          f"{100 * CPU_BUDGET:g} % of a core" if results else "# nothing ran")


if __name__ == "__main__":
    main()
