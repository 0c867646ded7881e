#!/usr/bin/env python3
"""What `rankmap profile` costs a job, as a user sees it: `mpirun ...` against `rankmap profile -- mpirun ...`.

usage: PYTHONPATH=src python3 bench/profile_cost.py [--osu-src DIR] [--reps 7] [--part-reps 3]
           [--ranks 16] [--rounds 6000] [--workloads lat,rate,bw,pairs,fixed] [--parts shim,monitor,...]
           [--mpirun mpirun] [--mpicc mpicc] [--out DIR] [--budget-s 480] [--quick]

Every figure is the whole command a user runs, side by side in one run: for each repetition, each
workload runs once under each mode, the modes' order rotated from one repetition to the next (so no
mode always follows the same neighbour on a machine whose load drifts). Modes:

  plain      the launch alone
  profile    rankmap profile --no-summary --no-progress -- <the launch>   (every default)
and, to take the difference apart (the last --part-reps repetitions):
  shim       the launch with the MPI shim preloaded and capture on (LD_PRELOAD, RANKMAP_RUN_DIR): the
             ranks' share, no Python process
  monitor    the launch with Open MPI's monitoring PML on (--mca pml_monitoring_enable 2), no shim:
             what the library source of collective pairs costs the ranks by itself
  library    rankmap profile --collectives library (shim + monitoring PML + the Python process)
  python     rankmap profile -- env <the launch>: the Python process (store, streaming ingest, link
             sampler) beside an uninstrumented job (`env` is a plain launch: no shim reaches the ranks)
  pynosampler  the python part with --no-link-sampler: the Python process without its link sampler
  pylink100  the python part with --link-ms 100: its link sampler ten times a second, not once
  link100    rankmap profile --link-ms 100 (the link timeline at the timeline buckets' 100 ms)
  popen      a bare Python parent (subprocess.call of the launch): what any parent process costs, the control
  nosampler  rankmap profile --no-link-sampler
  flush100   rankmap profile --flush-ms 100 (the ranks flush ten times as often)

Workloads (2 ranks unless said): "lat" osu_latency at 8 B; "rate" osu_mbw_mr at 8 B (one pair);
"bw" osu_bw at 64 KiB and 1 MiB; "pairs" examples/mpi/pairs_every_ms on --ranks ranks (1 KiB from every
rank to every other every ~1 ms, --rounds rounds: its loop time as rank 0 prints it); "fixed" a job
that does nothing (bench/mpi_init_finalize.c), whose wall time under a profile minus the plain one is
rankmap's fixed cost. The OSU programs are built from --osu-src (the OSU micro-benchmarks' source
tree, 7.x: c/mpi/pt2pt/standard and c/util) with the MPI's own mpicc; without it the project's
bench/pingpong.c stands in for all three (its MPI_ column: one-way latency, the 8 B message rate of
osu_mbw_mr's pattern, the 1 MiB ping-pong's bandwidth), and the table says so.

Per run it records the command's wall time, the job's own figure, and for the profiled modes the
rankmap process's own CPU time (user + system of every thread of that process, not of the job, from
getrusage(RUSAGE_SELF) at its exit) and its CPU time while the job ran (what it stores as
rankmap_cpu_s), split into the streaming ingest and the link sampler thread (the job's meta).

The table: per workload and mode the median over the repetitions with its distribution-free 95 %
interval, and against plain the median of the repetitions' own ratios (each against the plain run of
its repetition) with its interval; then one line per target of issue 27 (PASS, FAIL) and the raw runs.
--out DIR writes the table (profile_cost.txt), every run as JSON (profile_cost.json) and the build
and run logs there. --quick: 3 repetitions, 1 of the parts, 600 rounds (a check of the script itself).
Exit status: the number of targets not met.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchstats import median_ci  # noqa: E402

WORKLOADS = ("lat", "rate", "bw", "pairs", "fixed")
PARTS = ("shim", "monitor", "library", "python", "pynosampler", "pylink100", "popen", "nosampler", "link100", "flush100")
PROFILED = {"profile": [], "library": ["--collectives", "library"], "python": [], "nosampler": ["--no-link-sampler"],
            "pynosampler": ["--no-link-sampler"], "pylink100": ["--link-ms", "100"],
            "link100": ["--link-ms", "100"], "flush100": ["--flush-ms", "100"]}
#: the parts that profile a plain `env <the launch>`: no shim reaches the ranks, only the Python process runs beside them
UNDER_ENV = ("python", "pynosampler", "pylink100")
PAIR_BYTES = 1024


def shim_knobs(part: str) -> list[str]:
    """``shim:RANKMAP_PVARS=0+RANKMAP_FLUSH_MS=600000`` -> the shim alone with those settings of the
    record writer and the shim: the part that takes a shim's cost apart, setting by setting;
    ``profile:RANKMAP_DB=sqlite:////dev/shm/x.db`` -> the default profile with that environment."""
    return [kv for kv in part.partition(":")[2].split("+") if kv]


def _known_part(p: str) -> bool:
    return p in PARTS or (p.startswith(("shim:", "profile:")) and all("=" in kv for kv in shim_knobs(p))
                          and bool(shim_knobs(p)))


def _profiled(mode: str) -> str | None:
    """The PROFILED entry a mode runs (``profile:...`` runs the default profile), else None."""
    return "profile" if mode.startswith("profile:") else mode if mode in PROFILED else None
#: parts that say nothing new about a workload (a job that sends nothing; the monitoring PML of a
#: job without collectives is the per-message figure the 2-rank workloads already give)
SKIP_PARTS = {"fixed": ("monitor", "library", "flush100"), "pairs": ("monitor",)}
# rankmap, run so that its own process's CPU time (every thread; not its children's) is written at exit
BOOT = ("import atexit, os, resource, sys\n"
        "def _cpu():\n"
        "    r = resource.getrusage(resource.RUSAGE_SELF)\n"
        "    open(os.environ['RANKMAP_BENCH_CPU'], 'w').write(f'{r.ru_utime + r.ru_stime:.6f}')\n"
        "atexit.register(_cpu)\n"
        "sys.argv[0] = 'rankmap'\n"
        "from rankmap.cli import entry\n"
        "entry()\n")


# ---------------------------------------------------------------------------------------- programs
@dataclass
class Programs:
    """The job programs of every workload, built with the MPI's mpicc."""

    osu: dict[str, Path] = field(default_factory=dict)     # osu_latency, osu_mbw_mr, osu_bw
    pingpong: Path | None = None                           # the fallback of the three
    pairs: Path | None = None
    nothing: Path | None = None
    source: str = ""                                       # what the 2-rank figures are measured with


def build(mpicc: str, osu_src: Path | None, work: Path, log: Callable[[str], None]) -> Programs:
    progs = Programs()
    work.mkdir(parents=True, exist_ok=True)

    def cc(out: Path, *srcs: Path, extra: tuple[str, ...] = ()) -> bool:
        cmd = [mpicc, "-O2", "-w", "-o", str(out), *map(str, srcs), *extra]
        p = subprocess.run(cmd, capture_output=True, text=True)
        log(f"$ {' '.join(cmd)}\n{p.stdout}{p.stderr}(exit {p.returncode})")
        return p.returncode == 0
    if osu_src:
        util = osu_src / "c" / "util"
        std = osu_src / "c" / "mpi" / "pt2pt" / "standard"
        libs = [util / f for f in ("osu_util.c", "osu_util_mpi.c", "osu_util_validation.c", "osu_util_graph.c",
                                   "osu_util_papi.c")]
        for name in ("osu_latency", "osu_mbw_mr", "osu_bw"):
            have = [p for p in libs if p.exists()]
            if (std / f"{name}.c").exists() and cc(work / name, std / f"{name}.c", *have, extra=("-I", str(util), "-lm")):
                progs.osu[name] = work / name
        version = ""
        ch = osu_src / "CHANGES"
        if ch.exists():
            m = re.search(r"OSU Micro Benchmarks v([\d.]+)", ch.read_text(errors="replace")[:2000])
            version = f" {m.group(1)}" if m else ""
        if len(progs.osu) == 3:
            progs.source = f"OSU micro-benchmarks{version} (built from {osu_src})"
    if len(progs.osu) < 3:
        progs.osu = {}
        if cc(work / "pingpong", ROOT / "bench" / "pingpong.c"):
            progs.pingpong = work / "pingpong"
        why = "no --osu-src given" if not osu_src else f"building OSU from {osu_src} failed (see build.log)"
        progs.source = f"bench/pingpong.c, NOT the OSU micro-benchmarks ({why})"
    if cc(work / "pairs_every_ms", ROOT / "examples" / "mpi" / "pairs_every_ms.c"):
        progs.pairs = work / "pairs_every_ms"
    if cc(work / "mpi_init_finalize", ROOT / "bench" / "mpi_init_finalize.c"):
        progs.nothing = work / "mpi_init_finalize"
    return progs


# ---------------------------------------------------------------------------------------- figures
def _osu_value(stdout: str, size: int, col: int = 1) -> float | None:
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) > col and parts[0] == str(size):
            try:
                return float(parts[col])
            except ValueError:
                return None
    return None


def _pingpong(stdout: str, test: str, size: int) -> float | None:
    """bench/pingpong.c's MPI_ column (the second) of one figure."""
    m = re.search(rf"^{test} {size} \S+ (\S+)$", stdout, re.M)
    return float(m.group(1)) if m else None


@dataclass(frozen=True)
class Figure:
    name: str
    unit: str
    higher_better: bool
    read: Callable[[str], float | None]


def workload_jobs(w: str, progs: Programs, ranks: int, rounds: int) -> tuple[list[list[str]], list[Figure]]:
    """The job command lines of workload ``w`` (without the launcher) and the figures read from their output."""
    if w == "pairs":
        return ([["-np", str(ranks), str(progs.pairs), str(PAIR_BYTES), str(rounds), "1000"]],
                [Figure("loop", "s", False, lambda o: float(m.group(1)) if (m := re.search(r"rounds in ([0-9.]+) s", o))
                        else None)])
    if w == "fixed":
        return [["-np", "2", str(progs.nothing)]], []
    if progs.osu:
        if w == "lat":
            return ([["-np", "2", str(progs.osu["osu_latency"]), "-m", "8:8", "-i", "100000", "-x", "10000"]],
                    [Figure("8 B latency", "us", False, lambda o: _osu_value(o, 8))])
        if w == "rate":
            return ([["-np", "2", str(progs.osu["osu_mbw_mr"]), "-m", "8:8", "-i", "20000", "-x", "2000"]],
                    [Figure("8 B message rate", "M/s", True, lambda o: (v / 1e6) if (v := _osu_value(o, 8, 2)) else None)])
        return ([["-np", "2", str(progs.osu["osu_bw"]), "-m", "65536:1048576"]],
                [Figure("64 KiB bandwidth", "MB/s", True, lambda o: _osu_value(o, 65536)),
                 Figure("1 MiB bandwidth", "MB/s", True, lambda o: _osu_value(o, 1048576))])
    pp = ["-np", "2", str(progs.pingpong)]
    if w == "lat":
        return [pp + ["8", "1", "5"]], [Figure("8 B latency", "us", False, lambda o: _pingpong(o, "lat", 8))]
    if w == "rate":
        return ([pp + ["8", "4", "5"]],
                [Figure("8 B message rate", "M/s", True, lambda o: (v / 1e6) if (v := _pingpong(o, "osu", 8)) else None)])
    return ([pp + ["1048576", "1", "3"]],
            [Figure("1 MiB bandwidth", "MB/s", True,
                    lambda o: 1048576 / v if (v := _pingpong(o, "lat", 1048576)) else None)])


# ---------------------------------------------------------------------------------------- running
@dataclass
class Run:
    workload: str
    mode: str
    rep: int
    wall_s: float
    rc: int
    figures: dict[str, float | None]
    cpu_s: float | None = None          # rankmap's process, whole life
    job_cpu_s: float | None = None      # rankmap's process while the job ran
    job_s: float | None = None          # the job's wall time as rankmap saw it
    ingest_cpu_s: float | None = None
    sampler_cpu_s: float | None = None
    sampler: str | None = None          # the link sampler's source, or None where there was none
    exact: bool | None = None
    launch_s: float | None = None       # rankmap's start to the job's launch (the job's meta)
    end_s: float | None = None          # the job's end to its finish in the store
    kernel: dict[str, float] = field(default_factory=dict)  # kernel_counts() per second while it ran


def kernel_counts() -> dict[str, int]:
    """The machine's context switches (``ctxt``), interrupts (``intr``) and each interrupt source's
    count over every CPU (/proc/interrupts: a device's name, or LOC, RES, CAL, TLB, ...) since boot;
    empty off Linux.

    A job whose ranks poll every core in lockstep loses to anything that takes a core from a rank,
    including the kernel's work on rankmap's behalf (driver calls, file writes, cross-CPU calls) that
    rankmap's own CPU time does not show: per mode, these say where the kernel was busier beside the job."""
    out: dict[str, int] = {}
    try:
        for ln in Path("/proc/stat").read_text().splitlines():
            if ln.startswith(("ctxt ", "intr ")):
                out[ln.split()[0]] = int(ln.split()[1])
        rows = Path("/proc/interrupts").read_text().splitlines()
    except OSError:
        return out
    ncpu = len(rows[0].split()) if rows else 0
    for ln in rows[1:]:
        f = ln.split()
        counts = [int(x) for x in f[1:1 + ncpu] if x.isdigit()]
        if not f or not counts:
            continue
        name = f[-1] if f[0][:-1].isdigit() else f[0][:-1]
        out[name] = out.get(name, 0) + sum(counts)
    return out


def kernel_rates(k0: dict[str, int], k1: dict[str, int], wall: float) -> dict[str, float]:
    return {k: (k1[k] - k0[k]) / wall for k in k0.keys() & k1.keys() if k1[k] != k0[k]}


class Bench:
    def __init__(self, a: argparse.Namespace, work: Path, progs: Programs, log: Callable[[str], None]):
        self.a, self.work, self.progs, self.log = a, work, progs, log
        self.launch = [a.mpirun] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) + a.mpirun_opts
        self.env = dict(os.environ, RANKMAP_HOME=str(work / "home"), RANKMAP_DB=f"sqlite:///{work / 'rankmap.db'}",
                        PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.env.pop("RANKMAP_COLLECTIVES", None)
        from rankmap.capture import launchers as L
        from rankmap.capture.shim_build import build_shim
        # the shim a profile of this launcher injects (the mpicc that belongs to the launcher)
        self.shim = build_shim(L.find_mpicc(L.recognise(self.launch + ["true"])))
        self.n = 0
        self.stores: dict = {}         # store URL -> open store (a part may name its own)

    def command(self, mode: str, job: list[str]) -> tuple[list[str], dict[str, str]]:
        env = dict(self.env)
        if mode == "plain":
            return self.launch + job, env
        if mode == "shim" or mode.startswith("shim:"):
            self.n += 1
            rd = self.work / "preload" / str(self.n)
            knobs = [x for kv in shim_knobs(mode) for x in ("-x", kv)]
            return self.launch + ["-x", f"LD_PRELOAD={self.shim}", "-x", f"RANKMAP_RUN_DIR={rd}",
                                  "-x", "RANKMAP_COLLECTIVES=auto", *knobs] + job, env
        if mode == "monitor":
            return self.launch + ["--mca", "pml_monitoring_enable", "2"] + job, env
        if mode == "popen":
            return [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))",
                    *self.launch, *job], env
        env["RANKMAP_BENCH_CPU"] = str(self.work / "cpu.txt")
        env.update(kv.split("=", 1) for kv in (shim_knobs(mode) if mode.startswith("profile:") else []))
        head = ["env"] if mode in UNDER_ENV else []
        return ([sys.executable, "-c", BOOT, "profile", "--no-summary", "--no-progress", *PROFILED[_profiled(mode)], "--",
                 *head, *self.launch, *job], env)

    def run(self, w: str, mode: str, rep: int) -> Run:
        jobs, figs = workload_jobs(w, self.progs, self.a.ranks, self.a.rounds)
        cmd, env = self.command(mode, (self.a.pairs_opts if w == "pairs" else []) + jobs[0])
        cpu_file = self.work / "cpu.txt"
        cpu_file.unlink(missing_ok=True)
        k0 = kernel_counts()
        t0 = time.monotonic()
        child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
        try:
            out, err = child.communicate(timeout=self.a.run_timeout_s)
        except BaseException:          # a run past its time, or the bench stopped: the job goes too
            os.killpg(child.pid, 9)
            child.communicate()
            raise
        p = subprocess.CompletedProcess(cmd, child.returncode, out, err)
        wall = time.monotonic() - t0
        k1 = kernel_counts()
        self.log(f"[{w} {mode} rep {rep}] $ {' '.join(cmd[:1] + cmd[3:] if cmd[1:2] == ['-c'] else cmd)}\n"
                 f"exit {p.returncode} in {wall:.3f} s\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
        r = Run(w, mode, rep, wall, p.returncode, {f.name: f.read(p.stdout) for f in figs})
        r.kernel = kernel_rates(k0, k1, wall)
        if _profiled(mode) and cpu_file.exists():
            r.cpu_s = float(cpu_file.read_text())
            self._job_meta(r, w, env["RANKMAP_DB"])
        return r

    def _job_meta(self, r: Run, w: str, url: str) -> None:
        from rankmap.store import open_store
        store = self.stores[url] = self.stores.get(url) or open_store(url)
        j = store.job(store.resolve_job("latest"))
        meta = j.get("meta") or {}
        r.job_cpu_s = meta.get("rankmap_cpu_s")
        r.job_s = (j.get("elapsed_ns") or 0) / 1e9 or None
        r.ingest_cpu_s = meta.get("ingest_cpu_s")
        r.launch_s, r.end_s = meta.get("launch_s"), meta.get("end_s")
        ls = meta.get("link_sampler") or {}
        r.sampler = ls.get("source")
        r.sampler_cpu_s = (ls.get("cost") or {}).get("thread_cpu_s")
        if w == "pairs" and r.mode not in UNDER_ENV:
            n = self.a.ranks
            m = store.traffic_matrix(j["id"], classes=["p2p"])
            r.exact = all(int(m[i, k]) == (PAIR_BYTES * self.a.rounds if i != k else 0)
                          for i in range(n) for k in range(n))


class Stopped(Exception):
    """SIGTERM (a time limit around the bench): stop, and report what was measured."""


def _stop(_sig: int, _frame: object) -> None:
    raise Stopped()


def run_all(b: Bench, a: argparse.Namespace, t_start: float) -> list[Run]:
    runs: list[Run] = []
    try:
        _run_reps(b, a, t_start, runs)
    except (Stopped, subprocess.TimeoutExpired) as e:
        b.log(f"stopped ({type(e).__name__}) after {len(runs)} runs: reporting those")
        print(f"# stopped ({type(e).__name__}) after {len(runs)} runs", file=sys.stderr, flush=True)
    return runs


def _run_reps(b: Bench, a: argparse.Namespace, t_start: float, runs: list[Run]) -> None:
    for rep in range(a.reps):
        for w in a.workloads:
            # the parts in the last repetitions: a budget that runs out takes them, not the main figures
            modes = ["plain", "profile"] + (a.parts if rep >= a.reps - a.part_reps else [])
            modes = [m for m in modes if m not in SKIP_PARTS.get(w, ())]
            k = rep % len(modes)
            for mode in modes[k:] + modes[:k]:
                if time.monotonic() - t_start > a.budget_s or time.monotonic() > a.deadline:
                    b.log(f"budget of {a.budget_s} s (or the deadline) spent: stopping at rep {rep}")
                    return
                runs.append(b.run(w, mode, rep))
        print(f"# rep {rep + 1}/{a.reps} done, {time.monotonic() - t_start:.0f} s", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------- report
def _fmt(m: tuple[float, float, float] | None, f: str) -> str:
    return "-" if m is None else f"{m[0]:{f}} [{m[1]:{f}}, {m[2]:{f}}]"


def _paired(runs: list[Run], w: str, mode: str, key: Callable[[Run], float | None]) -> list[float]:
    """Each repetition's mode / plain ratio of ``key`` (repetitions where both have it)."""
    plain = {r.rep: key(r) for r in runs if r.workload == w and r.mode == "plain"}
    out = []
    for r in runs:
        if r.workload == w and r.mode == mode:
            v, p = key(r), plain.get(r.rep)
            if v is not None and p:
                out.append(v / p)
    return out


def _vals(runs: list[Run], w: str, mode: str, key: Callable[[Run], float | None]) -> list[float]:
    return [v for r in runs if r.workload == w and r.mode == mode and (v := key(r)) is not None]


def report(runs: list[Run], a: argparse.Namespace, progs: Programs, out: Callable[[str], None]) -> int:
    modes = ["plain", "profile"] + list(a.parts)
    mw = max(9, *map(len, modes))
    out(f"{'workload':<9} {'mode':<{mw}} {'n':>2} {'wall s':>22} {'x plain':>20} {'job figure':>28} {'x plain':>20} "
        f"{'rankmap CPU s':>14} {'% core, launch on':>17} {'ingest %':>8} {'sampler %':>9} {'exact':>5} "
        f"{'ctxt k/s':>8} {'intr k/s':>8}")
    summary: dict[tuple[str, str, str], tuple[float, float, float]] = {}
    for w in a.workloads:
        _jobs, figs = workload_jobs(w, progs, a.ranks, a.rounds)
        for mode in modes:
            rs = [r for r in runs if r.workload == w and r.mode == mode]
            if not rs:
                continue
            wall = median_ci([r.wall_s for r in rs])
            wx = _paired(runs, w, mode, lambda r: r.wall_s) if mode != "plain" else []
            summary[(w, mode, "wall")] = wall
            if wx:
                summary[(w, mode, "wall x")] = median_ci(wx)
            fig_rows = figs or [None]
            for i, f in enumerate(fig_rows):
                fv = _vals(runs, w, mode, lambda r: r.figures.get(f.name)) if f else []
                fx = _paired(runs, w, mode, lambda r: r.figures.get(f.name)) if f and mode != "plain" else []
                if f and fv:
                    summary[(w, mode, f.name)] = median_ci(fv)
                if f and fx:
                    summary[(w, mode, f.name + " x")] = median_ci(fx)
                share = [100 * r.job_cpu_s / r.job_s for r in rs if r.job_cpu_s is not None and r.job_s]
                ing = [100 * r.ingest_cpu_s / r.job_s for r in rs if r.ingest_cpu_s is not None and r.job_s]
                smp = [100 * r.sampler_cpu_s / r.job_s for r in rs if r.sampler_cpu_s is not None and r.job_s]
                if share:
                    summary[(w, mode, "share")] = median_ci(share)
                steady = [100 * ((r.ingest_cpu_s or 0) + (r.sampler_cpu_s or 0)) / r.job_s for r in rs
                          if r.ingest_cpu_s is not None and r.job_s]
                if steady:
                    summary[(w, mode, "steady")] = median_ci(steady)
                cpu = [r.cpu_s for r in rs if r.cpu_s is not None]
                exact = [r.exact for r in rs if r.exact is not None]
                ctxt = [r.kernel["ctxt"] / 1e3 for r in rs if "ctxt" in r.kernel]
                intr = [r.kernel["intr"] / 1e3 for r in rs if "intr" in r.kernel]
                first = i == 0
                out(f"{w if first else '':<9} {mode if first else '':<{mw}} {len(rs) if first else '':>2} "
                    f"{_fmt(wall, '.3f') if first else '':>22} {_fmt(median_ci(wx), '.3f') if first and wx else '':>20} "
                    f"{(f.name + ' ' + _fmt(median_ci(fv), '.3g') + ' ' + f.unit) if f and fv else '':>28} "
                    f"{_fmt(median_ci(fx), '.3f') if fx else '':>20} "
                    f"{f'{statistics.median(cpu):.2f}' if first and cpu else '':>14} "
                    f"{f'{statistics.median(share):.2f}' if first and share else '':>17} "
                    f"{f'{statistics.median(ing):.2f}' if first and ing else '':>8} "
                    f"{f'{statistics.median(smp):.2f}' if first and smp else '':>9} "
                    f"{('yes' if all(exact) else 'NO') if first and exact else '':>5} "
                    f"{f'{statistics.median(ctxt):.1f}' if first and ctxt else '':>8} "
                    f"{f'{statistics.median(intr):.1f}' if first and intr else '':>8}")
    for w in a.workloads:
        ls = [r.launch_s for r in runs if r.workload == w and r.mode == "profile" and r.launch_s is not None]
        es = [r.end_s for r in runs if r.workload == w and r.mode == "profile" and r.end_s is not None]
        if ls and es:
            out(f"# {w}, profile: rankmap's start to the job's launch {_fmt(median_ci(ls), '.3f')} s, the job's end "
                f"to its finish in the store {_fmt(median_ci(es), '.3f')} s (the rest of the fixed cost is in the job)")
    for w in a.workloads:
        kernel_lines(runs, w, modes, out)
    samplers = sorted({r.sampler for r in runs if r.mode == "profile" and r.sampler})
    out(f"# 2-rank figures from {progs.source}; link sampler at the defaults: "
        f"{', '.join(samplers) if samplers else 'none (no NVML GPU on this machine)'}")
    out("# medians over the repetitions [95 % interval]; x plain = median of each repetition's ratio to its own "
        "plain run; rankmap CPU s = the rankmap process's user+system time over its whole life (every thread); "
        "% core, launch on = its CPU time from the launch to the job's end (the store's imports and opening, done while "
        "the job starts, included) / the job's wall time; ingest, sampler: the shares of those two threads alone, "
        "the steady cost while a job runs; ctxt, intr: the whole machine's context switches and interrupts per "
        "second of the command (/proc/stat), the kernel's work beside the job")
    return targets(summary, a, out)


def kernel_lines(runs: list[Run], w: str, modes: list[str], out: Callable[[str], None], top: int = 6) -> None:
    """Per mode of workload ``w``: the interrupt sources busier than in the plain runs (medians per second)."""
    def med(mode: str) -> dict[str, float]:
        rs = [r.kernel for r in runs if r.workload == w and r.mode == mode and r.kernel]
        return {k: statistics.median(r.get(k, 0.0) for r in rs) for k in set().union(*rs)} if rs else {}
    plain = med("plain")
    for mode in modes[1:]:
        m = med(mode)
        more = sorted(((v - plain.get(k, 0.0), k) for k, v in m.items() if k not in ("ctxt", "intr")), reverse=True)
        shown = ", ".join(f"{k} +{d:.0f}" for d, k in more[:top] if d > 0)
        if m:
            out(f"# {w}, {mode}: interrupts/s beside the job against plain: {shown or 'none more'}")


def targets(s: dict, a: argparse.Namespace, out: Callable[[str], None]) -> int:
    """issue 27's targets, end to end at the defaults: one line each; returns how many are not met."""
    fails = 0

    def line(ok: bool | None, what: str, figure: str) -> None:
        nonlocal fails
        if ok is None:
            out(f"SKIP {what}: not measured")
            return
        fails += not ok
        out(f"{'PASS' if ok else 'FAIL'} {what}: {figure}")
    rate = s.get(("rate", "profile", "8 B message rate x"))
    line(None if rate is None else rate[0] >= 0.90, "8 B message rate >= 0.90 x plain", _fmt(rate, ".3f"))
    lat = s.get(("lat", "profile", "8 B latency x"))
    line(None if lat is None else lat[0] <= 1.10, "8 B latency <= +10 %", _fmt(lat, ".3f"))
    for name in ("64 KiB bandwidth", "1 MiB bandwidth"):
        bw = s.get(("bw", "profile", name + " x"))
        plain = s.get(("bw", "plain", name))
        noise = (plain[2] - plain[1]) / 2 / plain[0] if plain and plain[0] else 0.0
        line(None if bw is None else (bw[1] <= 1.0 <= bw[2] or abs(bw[0] - 1) <= noise),
             f"{name} within the run's noise", f"{_fmt(bw, '.3f')} (plain's own half-spread {100 * noise:.1f} %)")
    loop = s.get(("pairs", "profile", "loop x"))
    line(None if loop is None else loop[0] <= 1.03, f"{a.ranks}-rank job's loop <= 1.03 x", _fmt(loop, ".3f"))
    share = s.get(("pairs", "profile", "share"))
    steady = s.get(("pairs", "profile", "steady"))
    line(None if steady is None else steady[0] <= 2.0,
         f"rankmap's process <= 2 % of a core while a {a.ranks}-rank job runs (its ingest and link sampler threads)",
         _fmt(steady, ".2f") + f" %; from the launch on, its one-off start included: {_fmt(share, '.2f')} %")
    fp, fr = s.get(("fixed", "plain", "wall")), s.get(("fixed", "profile", "wall"))
    line(None if not (fp and fr) else fr[0] - fp[0] <= 0.5, "fixed cost <= 0.5 s wall",
         "-" if not (fp and fr) else f"{fr[0] - fp[0]:.3f} s (profile {fr[0]:.3f} s, plain {fp[0]:.3f} s)")
    return fails


# ---------------------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--osu-src", type=Path, help="the OSU micro-benchmarks' source tree (7.x)")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--mpirun-opts", default="", help="launcher options for every run (e.g. '--bind-to core')")
    ap.add_argument("--pairs-opts", default="", help="launcher options for the pairs job alone (e.g. --oversubscribe)")
    ap.add_argument("--mpicc", default="mpicc")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--part-reps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=6000)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--parts", default=",".join(PARTS), help=f"any of {', '.join(PARTS)} ('' for none), or shim:NAME=VALUE+NAME=VALUE (the shim alone, "
                         "with those environment settings)")
    ap.add_argument("--out", type=Path, help="folder for the table, the runs (JSON) and the logs")
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no run after this many seconds")
    ap.add_argument("--deadline-s", type=float, default=1e9,
                    help="start no run later than this many seconds after the bench started (set-up included)")
    ap.add_argument("--run-timeout-s", type=float, default=300)
    ap.add_argument("--quick", action="store_true", help="3 repetitions, 1 of the parts, 600 rounds")
    a = ap.parse_args()
    if a.quick:
        a.reps, a.part_reps, a.rounds = min(a.reps, 3), min(a.part_reps, 1), min(a.rounds, 600)
    a.workloads = [w for w in a.workloads.split(",") if w]
    a.parts = [p for p in a.parts.split(",") if p]
    a.mpirun_opts, a.pairs_opts = a.mpirun_opts.split(), a.pairs_opts.split()
    bad = [w for w in a.workloads if w not in WORKLOADS] + [p for p in a.parts if not _known_part(p)]
    if bad:
        ap.error(f"unknown workload or part: {', '.join(bad)}")
    if not shutil.which(a.mpirun) or not shutil.which(a.mpicc):
        ap.error(f"{a.mpirun} / {a.mpicc} not found")
    out_dir = a.out or Path(tempfile.mkdtemp(prefix="rankmap-profile-cost-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    logf = open(out_dir / "runs.log", "w")

    def log(text: str) -> None:
        logf.write(text.rstrip() + "\n")
        logf.flush()
    table = open(out_dir / "profile_cost.txt", "w")

    def out(text: str) -> None:
        print(text, flush=True)
        table.write(text + "\n")
    t0 = time.monotonic()
    a.deadline = t0 + a.deadline_s
    signal.signal(signal.SIGTERM, _stop)
    with tempfile.TemporaryDirectory(prefix="rankmap-profile-cost-") as tmp:
        work = Path(tmp)
        with open(out_dir / "build.log", "w") as bl:
            progs = build(a.mpicc, a.osu_src, work / "bin", lambda t: bl.write(t + "\n"))
        missing = [w for w, p in (("pairs", progs.pairs), ("fixed", progs.nothing)) if w in a.workloads and p is None]
        if missing or not (progs.osu or progs.pingpong):
            print(f"profile_cost: building the job programs failed ({', '.join(missing) or 'lat/rate/bw'}): "
                  f"see {out_dir / 'build.log'}", file=sys.stderr)
            return 100
        ver = subprocess.run([a.mpirun, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True).stdout.strip()
        if commit and changed:          # a working tree with changes: the commit alone would not say what ran
            commit += f" with {len(changed.splitlines())} files changed"
        out(f"# {platform.node()}: {os.cpu_count()} CPUs, {(ver or ['?'])[0]}, python {platform.python_version()}, "
            f"rankmap {commit or '?'}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at the "
            f"start {os.getloadavg()[0]:.2f}")
        out(f"# {a.reps} repetitions ({a.part_reps} with the parts {', '.join(a.parts) or '-'}), order rotated per "
            f"repetition; {a.ranks}-rank job: {PAIR_BYTES} B to every peer every 1 ms, {a.rounds} rounds")
        b = Bench(a, work, progs, log)
        warm = b.run("fixed", "profile", -1)      # builds the hooks into the cache: not counted
        out(f"# set-up (programs, hooks, a first profile) took {time.monotonic() - t0:.0f} s "
            f"(the first profile {warm.wall_s:.1f} s, exit {warm.rc})")
        runs = run_all(b, a, time.monotonic())
        fails = report(runs, a, progs, out)
        out(f"# load average at the end {os.getloadavg()[0]:.2f}; {time.monotonic() - t0:.0f} s in all")
        out("# runs in the order run (wall s / figures):")
        for r in runs:
            figs = " ".join(f"{v:.4g}" for v in r.figures.values() if v is not None)
            out(f"#   {r.workload:<6} {r.mode:<9} rep {r.rep}  {r.wall_s:.3f}  {figs}  rc={r.rc}"
                + (f"  cpu {r.cpu_s:.2f}/{r.job_cpu_s}" if r.cpu_s is not None else ""))
        (out_dir / "profile_cost.json").write_text(json.dumps([r.__dict__ for r in runs], indent=1))
        bad_rc = [r for r in runs if r.rc != 0]
        if bad_rc:
            out(f"FAIL {len(bad_rc)} runs exited non-zero (first: {bad_rc[0].workload} {bad_rc[0].mode}, "
                f"exit {bad_rc[0].rc}; see runs.log)")
            fails += 1
    return fails


if __name__ == "__main__":
    raise SystemExit(main())
