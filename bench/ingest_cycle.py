#!/usr/bin/env python3
"""CPU of one streaming cycle of `rankmap profile` on a real small MPI job, and the write period it allows.

usage: PYTHONPATH=src python3 bench/ingest_cycle.py [--ranks 4,16] [--stores sqlite,postgresql]
                                                    [--seconds 20] [--baseline REV] [--profile FILE]
                                                    [--show-cycles] [--mpirun mpirun.openmpi]
                                                    [--mpicc mpicc.openmpi]

A real job (examples/mpi/pairs_every_ms.c: every rank sends 1 KiB to every other rank every
millisecond, for --seconds) runs under the MPI shim at the profile's defaults (--flush-ms 1000,
--bucket-ms 100). While it runs, one ingest process per code version follows its run directory
into a store of its own, one poll+write cycle each per poll interval (1 s, the profile's pace at
the defaults), as `rankmap profile` does (rankmap.pipeline.ingest.RunIngest):

  new   this checkout's src/
  base  src/ of --baseline REV (git archive), when given: the same job, the same cycles, side by side
        (the two processes take turns at each cycle, in alternating order)

Each cycle's CPU is the ingest process's thread time, split into poll (read and parse what the
record files gained, sum it) and write (one store transaction). "period s" is the write period the
profile's pacing allows after a median cycle: max(interval, cycle / CPU_BUDGET), CPU_BUDGET = 1 % of
a core; "max s" the longest wait it would take after any cycle, the first ones included (when the
ranks' first flushes arrive: their settings, names and the first use of each statement), the
longest the live dashboard lags. After the job ends each process runs the final cycle, and the rows the two stored (every
table of the job) are compared: "same rows" must say yes.

--profile FILE: cProfile of the new version's live cycles (the first shape and store), sorted by
cumulative time, written to FILE.
"""

from __future__ import annotations

import argparse
import hashlib
import json
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
BYTES = 1024
FLUSH_MS, BUCKET_MS = 1000, 100
#: cycles that also open the files and compile statements: reported apart ("1st ms"), not profiled
WARM = 2


# ---------------------------------------------------------------------- the ingest process
def worker(url: str, run_dir: str, profile: str | None) -> None:
    """Follows ``run_dir`` into ``url``, one cycle per ``cycle`` line on stdin; imports the rankmap of
    its PYTHONPATH (this checkout's or the baseline's)."""
    import cProfile
    import pstats

    from rankmap.pipeline.ingest import RunIngest
    from rankmap.store import open_store

    store = open_store(url)
    jid = store.create_job(["bench-ingest-cycle"], world_size=None, run_dir=run_dir,
                           meta={"bucket_ms": BUCKET_MS, "flush_ms": FLUSH_MS})
    ing = RunIngest(store, jid, run_dir, resume=False)
    if hasattr(ing, "warm_up"):            # what `rankmap profile` does before the job starts, where it does
        ing.warm_up()
    prof = cProfile.Profile() if profile else None
    print("ready", flush=True)
    for k, line in enumerate(sys.stdin):
        cmd = line.strip()
        final = cmd == "final"
        on = prof is not None and not final and k >= WARM
        if on:
            prof.enable()
        t0 = time.thread_time()
        ing.poll(final=final)
        t1 = time.thread_time()
        ing.write()
        t2 = time.thread_time()
        if on:
            prof.disable()
        if final:
            print(json.dumps({"rows": stored_rows(store, jid)}), flush=True)
            break
        print(json.dumps({"poll": t1 - t0, "write": t2 - t1}), flush=True)
    if prof is not None:
        with open(profile, "w") as f:
            pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(45)
    store.engine.dispose()


def stored_rows(store, jid: int) -> dict[str, str]:
    """Per table of the job: its row count and a digest of its rows (sorted; ids and the job left out)."""
    import sqlalchemy as sa

    from rankmap.store import schema as S

    out = {}
    with store.engine.connect() as c:
        for t in S.metadata.sorted_tables:
            if "job" not in t.c or t.name == "jobs":
                continue
            cols = [col for col in t.c if col.name not in ("job", "id")]
            rows = sorted(json.dumps([r[i] for i in range(len(cols))], default=str)
                          for r in c.execute(sa.select(*cols).where(t.c.job == jid)))
            out[t.name] = f"{len(rows)} {hashlib.sha1(chr(10).join(rows).encode()).hexdigest()[:12]}"
    return out


# ---------------------------------------------------------------------- the driver
class Ingest:
    def __init__(self, name: str, src: Path, url: str, run_dir: Path, profile: str | None):
        env = dict(os.environ, PYTHONPATH=str(src))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", url, str(run_dir)]
        if profile:
            cmd += ["--profile", profile]
        self.name = name
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.costs: list[dict] = []
        if self.p.stdout.readline().strip() != "ready":
            raise SystemExit(f"the {name} ingest process did not start")

    def ask(self, cmd: str) -> dict:
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} ingest process failed")
        return json.loads(line)

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def baseline_src(rev: str, into: Path) -> Path:
    """src/ of ``rev`` (and the native/ it reads the record layout from), unpacked from git."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src", "native"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def run_job(args, ranks: int, url_of, versions: dict[str, Path], work: Path, exe: Path, shim: Path,
            profile: str | None) -> list[dict]:
    """One job followed by every version; a result row per version."""
    run_dir = work / f"run-{ranks}-{len(list(work.iterdir()))}"
    run_dir.mkdir()
    interval = min(1.0, max(0.2, FLUSH_MS / 1000))
    ings = [Ingest(name, src, url_of(name), run_dir, profile if name == "new" else None)
            for name, src in versions.items()]
    launch = [args.mpirun] + (["--allow-run-as-root", "--oversubscribe"] if "openmpi" in args.mpirun
                              or args.mpirun == "mpirun" else [])
    launch += ["-np", str(ranks), str(exe), str(BYTES), str(int(args.seconds * 1000)), "1000"]
    env = dict(os.environ, RANKMAP_RUN_DIR=str(run_dir), RANKMAP_FLUSH_MS=str(FLUSH_MS),
               RANKMAP_BUCKET_MS=str(BUCKET_MS), LD_PRELOAD=str(shim))
    job = subprocess.Popen(launch, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        k = 0
        while job.poll() is None:
            time.sleep(interval)
            order = ings if k % 2 == 0 else ings[::-1]
            for ing in order:
                ing.costs.append(ing.ask("cycle"))
            k += 1
        if job.returncode != 0:
            raise SystemExit(f"the job failed ({job.returncode}): {job.stderr.read()[-500:]}")
        finals = {ing.name: ing.ask("final")["rows"] for ing in ings}
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        for ing in ings:
            ing.close()
    if args.show_cycles:
        for ing in ings:
            print(ing.name, ranks, " ".join(f"{(c['poll'] + c['write']) * 1000:.1f}" for c in ing.costs), file=sys.stderr)
    ref = finals.get("base")
    from rankmap.pipeline.ingest import next_wait

    out = []
    for ing in ings:
        live = ing.costs[WARM:]
        poll = statistics.median(c["poll"] for c in live) * 1000
        write = statistics.median(c["write"] for c in live) * 1000
        total = [(c["poll"] + c["write"]) * 1000 for c in live]
        med = statistics.median(total)
        first = (ing.costs[0]["poll"] + ing.costs[0]["write"]) * 1000
        out.append(dict(ranks=ranks, version=ing.name, cycles=len(live), first=first, poll=poll, write=write, cycle=med,
                        p90=sorted(total)[int(0.9 * (len(total) - 1))],
                        period=next_wait(med / 1000, interval),
                        worst=max(next_wait(c["poll"] + c["write"], interval) for c in ing.costs),
                        same="-" if ref is None else ("yes" if finals[ing.name] == ref else "NO"),
                        rows=sum(int(v.split()[0]) for v in finals[ing.name].values()),
                        diff=None if ref is None or finals[ing.name] == ref else
                        {t: (finals[ing.name].get(t), ref.get(t)) for t in ref if finals[ing.name].get(t) != ref.get(t)}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", nargs=2, metavar=("URL", "RUN_DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--ranks", default="4,16")
    ap.add_argument("--stores", default="sqlite,postgresql")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--baseline", metavar="REV", help="compare with the ingest of this git revision, side by side")
    ap.add_argument("--profile", metavar="FILE", help="cProfile of the new version's cycles (first job)")
    ap.add_argument("--show-cycles", action="store_true", help="every cycle's CPU ms, on stderr")
    ap.add_argument("--mpirun", default="mpirun.openmpi" if shutil.which("mpirun.openmpi") else "mpirun")
    ap.add_argument("--mpicc", default="mpicc.openmpi" if shutil.which("mpicc.openmpi") else "mpicc")
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker, args.profile)
        return
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "bench"))
    from ingest import pg_server  # bench/ingest.py: the throwaway PostgreSQL server
    from rankmap.capture.shim_build import build_shim
    from rankmap.pipeline.ingest import CPU_BUDGET

    base_rev = None
    if args.baseline:
        base_rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline],
                                  capture_output=True, text=True, check=True).stdout.strip()
    print(f"# {platform.node()}: {os.cpu_count()} CPUs ({platform.machine()}), python {platform.python_version()}; "
          f"{args.mpirun}, pairs_every_ms 1 KiB per pair per ms for {args.seconds:g} s, --flush-ms {FLUSH_MS} "
          f"--bucket-ms {BUCKET_MS}" + (f"; base = {base_rev}" if base_rev else ""))
    servers: list = []
    results = []
    with tempfile.TemporaryDirectory(prefix="rankmap-bench-cycle-") as tmp:
        work = Path(tmp)
        exe = work / "pairs_every_ms"
        subprocess.run([args.mpicc, "-O2", "-o", str(exe), str(ROOT / "examples" / "mpi" / "pairs_every_ms.c")],
                       check=True)
        shim = build_shim(args.mpicc)
        versions = {"new": ROOT / "src"}
        if base_rev:
            versions = {"base": baseline_src(base_rev, work / "base"), **versions}
        runs = work / "runs"
        runs.mkdir()
        profile = args.profile and str(Path(args.profile).resolve())
        try:
            for kind in args.stores.split(","):
                pg = None
                if kind == "postgresql":
                    pg = pg_server(servers)
                    if pg is None:
                        print("# postgresql: no server installed, skipped")
                        continue
                for ranks in map(int, args.ranks.split(",")):
                    n = len(results)

                    def url_of(name: str) -> str:
                        if pg is not None:
                            return pg.new_database()
                        return f"sqlite:///{work / f'{kind}-{ranks}-{name}.db'}"

                    rows = run_job(args, ranks, url_of, versions, runs, exe, shim, profile)
                    profile = None
                    for r in rows:
                        r["store"] = kind
                    results += rows
                    print(f"# done {kind} {ranks} ranks", file=sys.stderr, flush=True)
                    for r in results[n:]:
                        if r["diff"]:
                            print(f"# {kind} {ranks} ranks: {r['version']} stored other rows: {r['diff']}")
        finally:
            for c in servers:
                c.stop()
    print(f"{'store':<10} {'ranks':>5} {'version':<7} {'cycles':>6} {'1st ms':>7} {'poll ms':>8} {'write ms':>9} {'cycle ms':>9} "
          f"{'p90 ms':>7} {'period s':>8} {'max s':>6} {'x base':>7} {'rows':>6} {'same rows':>9}")
    for r in results:
        base = next((b for b in results if b["version"] == "base" and b["store"] == r["store"]
                     and b["ranks"] == r["ranks"]), None)
        ratio = f"{base['cycle'] / r['cycle']:.1f}" if base and r["version"] != "base" else ""
        print(f"{r['store']:<10} {r['ranks']:>5} {r['version']:<7} {r['cycles']:>6} {r['first']:>7.1f} {r['poll']:>8.2f} {r['write']:>9.2f} "
              f"{r['cycle']:>9.2f} {r['p90']:>7.2f} {r['period']:>8.2f} {r['worst']:>6.2f} {ratio:>7} {r['rows']:>6} {r['same']:>9}")
    print(f"# 1st = the first cycle; the others are over the live cycles after the first {WARM} "
          f"(CPU thread time of the ingest process); max s = the longest wait the pacing would take after any "
          f"cycle, the first ones included (the dashboard's worst lag); period = the write period "
          f"the pacing allows: max(1 s, cycle / {100 * CPU_BUDGET:g} % of a core); x base = base cycle / this one")


if __name__ == "__main__":
    main()
