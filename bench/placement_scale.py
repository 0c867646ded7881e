"""Placement at scale beside KaHIP and Scotch: the same instances, every result scored by rankmap.

    python bench/placement_scale.py                      # the quality table (see --help for subsets)
    python bench/placement_scale.py --sizes 64,512 --patterns halo3d,random --budget 10
    python bench/placement_scale.py --section published  # KaHIP's published setting (1024 ranks, 4:16:16)
    python bench/placement_scale.py --section command    # the whole `rankmap map` command vs --time-budget

Instances: halo 3-D and 4-D (periodic, uneven dimension weights), random sparse (4 partners a rank,
uneven bytes), an uneven all-to-all inside groups of 256 ranks (MoE-like: expert popularity and
tokens per rank drawn from a Zipf law), a ring in a shuffled order; 64, 512, 4096 and 16384 ranks; on
nodes of 8 GPUs (the ``dgx1-v100`` fixture) and on nodes of 64 GPUs in 16 groups of 4
(``synth:hier:4x16xN:1,10,100``: distances 1, 10, 100, so the route cost of a byte is its distance).
The published setting is KaHIP's: a 3-D grid and a random geometric graph, 1024 parts, hierarchy
4:16:16, distances 1:10:100, ids shuffled.

Every placement, whoever computed it, is scored by rankmap's cost model (:func:`rankmap.mapping.cost.evaluate`):
maximum link congestion (ms) and hop-bytes (GB x directed links crossed). Columns:

* ``default``: ranks in order (what a launcher does);
* ``rankmap``: ``place()`` at ``--budget`` seconds with ``--kahip off`` (the default path, no KaHIP),
  once for ``--objective max`` (its congestion is shown) and once for ``--objective hop-bytes`` (its
  hop-bytes is shown); ``+KaHIP`` the same with KaHIP's mapping as one more seed (``--kahip on``);
* ``KaHIP fast/eco/strong``: KaHIP's ``process_mapping()`` (the wheel's ``libkahip.so``) onto the
  machine's hierarchy (:func:`rankmap.mapping.kahipmap.hierarchy`: the node's switch tree or the node as
  one level, then the nodes; distances = route costs), two ranks on one element moved apart within
  their group; its time is the C call's;
* ``Scotch``: ``scotch_gmap -b0 -cb`` onto a ``tleaf`` target of the same hierarchy; its time is the
  process's (reading and writing files included);
* ``at KaHIP fast's time``: rankmap (no KaHIP) with ``--time-budget`` = KaHIP fast's wall time, each
  objective's figure relative to rankmap's own at ``--budget``.

Wall and CPU seconds are given for each tool; the machine is shared, so the load average is printed
with every row. Results in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform as _pf
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the solvers run here as the `rankmap` command runs them (rankmap.cli): OpenBLAS with one thread.
# With one thread a core on a shared 2-core machine, a second BLAS thread waits for a core: one
# evaluation of 1024 ranks on 16 nodes of 64 GPUs took 1 ms or 190 ms by the other processes' load
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mapping_quality import _read_map, write_grf_sparse  # noqa: E402

from rankmap.mapping import kahipmap, patterns, synth  # noqa: E402
from rankmap.mapping.cost import Traffic, default_mapping, evaluate  # noqa: E402
from rankmap.mapping.platform import Platform, node_model  # noqa: E402
from rankmap.mapping.solve import place  # noqa: E402
from rankmap.topology import fixtures  # noqa: E402

GMAP = shutil.which("scotch_gmap") or shutil.which("gmap")
SCOTCH_TIMEOUT = 120
PATTERNS = ("halo3d", "halo4d", "random", "moe", "ring")
SIZES = (64, 512, 4096, 16384)


# --- instances (sparse builders: 16384 ranks do not fit a dense matrix) ---------------------------
def halo(n: int, nd: int, periodic: bool = True, weights=(1.0, 2.0, 3.0, 4.0)) -> Traffic:
    dims = patterns.dims_create(n, nd)
    coords = np.stack(np.unravel_index(np.arange(n), dims), axis=1)
    src, dst, b = [], [], []
    for k in range(nd):
        for step in (-1, 1):
            c = coords.copy()
            c[:, k] += step
            ok = np.ones(n, dtype=bool) if periodic else (c[:, k] >= 0) & (c[:, k] < dims[k])
            c[:, k] %= dims[k]
            j = np.ravel_multi_index(c.T, dims)
            src.append(np.arange(n)[ok])
            dst.append(j[ok])
            b.append(np.full(int(ok.sum()), 1e8 * weights[k]))
    return Traffic.from_triples(n, np.concatenate(src), np.concatenate(dst), np.concatenate(b))


def random_sparse(n: int, degree: int = 4, seed: int = 3) -> Traffic:
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(n), degree)
    dst = rng.integers(0, n, n * degree)
    b = rng.uniform(0.2, 1.8, n * degree) * 1e8
    return Traffic.from_triples(n, np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([b, b]))


def moe(n: int, group: int = 256, seed: int = 5) -> Traffic:
    """Uneven all-to-all inside each group of ``group`` ranks (expert-parallel groups): rank i sends
    tokens[i] x popularity[j] to rank j, both Zipf-like."""
    rng = np.random.default_rng(seed)
    g = min(group, n)
    src, dst, b = [], [], []
    for lo in range(0, n, g):
        r = np.arange(lo, min(lo + g, n))
        pop = rng.permutation(1.0 / np.arange(1, len(r) + 1) ** 0.8)
        tok = rng.permutation(1.0 / np.arange(1, len(r) + 1) ** 0.5)
        B = np.outer(tok, pop)
        B *= 1e8 * len(r) / B.sum() * len(r) / 8
        np.fill_diagonal(B, 0)
        s, d = np.nonzero(B)
        src.append(r[s])
        dst.append(r[d])
        b.append(B[s, d])
    return Traffic.from_triples(n, np.concatenate(src), np.concatenate(dst), np.concatenate(b))


def ring_shuffled(n: int, seed: int = 7) -> Traffic:
    perm = np.random.default_rng(seed).permutation(n)
    a, c = perm, np.roll(perm, -1)
    return Traffic.from_triples(n, np.concatenate([a, c]), np.concatenate([c, a]), np.full(2 * n, 1e8))


def rgg(n: int, seed: int = 11) -> Traffic:
    """Random geometric graph in the unit square, radius 0.55 sqrt(ln n / n) (KaHIP's rgg graphs)."""
    rng = np.random.default_rng(seed)
    p = rng.random((n, 2))
    r = 0.55 * np.sqrt(np.log(n) / n)
    d2 = ((p[:, None, :] - p[None, :, :]) ** 2).sum(axis=2)
    s, d = np.nonzero((d2 < r * r) & ~np.eye(n, dtype=bool))
    return Traffic.from_triples(n, s, d, np.full(len(s), 1e8))


def shuffled(tr: Traffic, seed: int = 13) -> Traffic:
    perm = np.random.default_rng(seed).permutation(tr.n)
    return Traffic.from_triples(tr.n, perm[tr.src], perm[tr.dst], tr.bytes)


def instance(pattern: str, n: int) -> Traffic:
    return {"halo3d": lambda: halo(n, 3), "halo4d": lambda: halo(n, 4), "random": lambda: random_sparse(n),
            "moe": lambda: moe(n), "ring": lambda: ring_shuffled(n)}[pattern]()


def machine(kind: str, n: int) -> tuple[str, Platform]:
    if kind == "dgx1":
        return f"{n // 8} x dgx1-v100", Platform(node_model(fixtures.get("dgx1-v100")), max(1, n // 8))
    nodes = max(1, n // 64)
    spec = f"hier:4x16x{nodes}:1,10,100"
    return spec, Platform(node_model(synth.builtin(spec)), nodes)


# --- the tools ------------------------------------------------------------------------------------
class Clock:
    """Wall and CPU seconds of this process and of its children."""

    def __enter__(self):
        self.w, self.c, self.k = time.perf_counter(), time.process_time(), _child_cpu()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w
        self.cpu = time.process_time() - self.c + _child_cpu() - self.k


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_rankmap(pf: Platform, tr: Traffic, objective: str, budget: float, kahip: str) -> tuple[object, Clock]:
    with Clock() as c:
        pl = place(pf, tr, time_budget=budget, objective=objective, kahip=kahip, min_gain=0.0)
    return pl, c


def run_kahip(pf: Platform, tr: Traffic, mode: str) -> tuple[np.ndarray, np.ndarray, Clock] | None:
    if not kahipmap.available() or tr.n != pf.nodes * pf.G:
        return None
    arities, dists = kahipmap.hierarchy(pf, "max")
    with Clock() as c:
        pe = kahipmap.process_mapping(tr, arities, dists, mode=mode)
    slot = kahipmap._slot_of_element(pf, arities, 1)[pe]
    return slot // pf.G, slot % pf.G, c


def run_scotch(pf: Platform, tr: Traffic) -> tuple[np.ndarray, np.ndarray, Clock] | str | None:
    """Scotch's mapping, None when it is not installed, or the words of its failure."""
    if not GMAP or tr.n != pf.nodes * pf.G:
        return None
    arities, dists = kahipmap.hierarchy(pf, "max")
    # tleaf levels from the root down: count and the cost of the link above each level
    levels = list(zip(arities[::-1], dists[::-1]))
    tgt = f"tleaf {len(levels)} " + " ".join(f"{a} {d}" for a, d in levels)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        write_grf_sparse(d / "src.grf", tr)
        (d / "t.tgt").write_text(tgt + "\n")
        try:
            with Clock() as c:
                r = subprocess.run([GMAP, str(d / "src.grf"), str(d / "t.tgt"), str(d / "o.map"), "-b0", "-cb"],
                                   capture_output=True, timeout=SCOTCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            # Debian's Scotch 7 (threaded) sometimes sleeps forever in scotch_gmap at 0 % CPU
            return f"hung (killed after {SCOTCH_TIMEOUT} s)"
        if r.returncode != 0:
            return f"failed ({'signal ' + str(-r.returncode) if r.returncode < 0 else 'exit ' + str(r.returncode)})"
        slot = _read_map(d / "o.map", tr.n, pf.nodes * pf.G)
    slot = kahipmap._slot_of_element(pf, arities, 1)[slot]
    return slot // pf.G, slot % pf.G, c


# --- tables ---------------------------------------------------------------------------------------
def ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def gb(x: float) -> str:
    return f"{x / 1e9:,.1f}"


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def quality(kinds: list[str], sizes: list[int], pats: list[str], budget: float, with_kahip_seed: bool,
            label_of=None, cases=None) -> list[dict]:
    kh = kahipmap.available()
    print(f"\n### Placement at scale: max congestion (ms) / hop-bytes (GB), rankmap --time-budget {budget:g}\n")
    print("rankmap max = its `--objective max` run, rankmap hb = its `--objective hop-bytes` run; "
          "time = wall s (CPU s)\n")
    head = ["machine", "pattern", "ranks", "default", "rankmap max", "rankmap hb", "rankmap time"]
    if with_kahip_seed:
        head += ["+KaHIP max", "+KaHIP hb", "+KaHIP time"]
    head += ["KaHIP fast", "eco", "strong", "KaHIP time f/e/s", "Scotch", "Scotch time",
             "at KaHIP fast's time (max, hb)", "load"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    rows = []
    todo = cases or [(k, n, p) for k in kinds for n in sizes for p in pats]
    for kind, n, pat in todo:
        if isinstance(pat, tuple):
            pat, tr = pat
        else:
            tr = instance(pat, n)
        name, pf = label_of(kind, n) if label_of else machine(kind, n)
        d_node, d_gpu = default_mapping(n, pf)
        dflt = evaluate(pf, tr, d_node, d_gpu)
        row = {"machine": name, "pattern": pat, "n": n, "default": (dflt.max_congestion, dflt.hop_bytes)}
        # interleaved: rankmap, KaHIP, Scotch, rankmap again at KaHIP's time
        a, ca = run_rankmap(pf, tr, "max", budget, "off")
        b, cb = run_rankmap(pf, tr, "hop-bytes", budget, "off")
        row["rankmap"] = (a.score.max_congestion, b.score.hop_bytes, ca.wall + cb.wall, ca.cpu + cb.cpu)
        # each objective's own run: both figures of each run, for the "never worse" check
        row["rankmap_runs"] = ((a.score.max_congestion, a.score.hop_bytes), (b.score.max_congestion, b.score.hop_bytes))
        cells = [name, pat, str(n), f"{ms(dflt.max_congestion)} / {gb(dflt.hop_bytes)}",
                 ms(a.score.max_congestion), gb(b.score.hop_bytes), f"{ca.wall:.1f}+{cb.wall:.1f} ({ca.cpu:.1f}+{cb.cpu:.1f})"]
        if with_kahip_seed:
            if kh:
                a2, ca2 = run_rankmap(pf, tr, "max", budget, "on")
                b2, cb2 = run_rankmap(pf, tr, "hop-bytes", budget, "on")
                row["rankmap+kahip"] = (a2.score.max_congestion, b2.score.hop_bytes)
                cells += [ms(a2.score.max_congestion), gb(b2.score.hop_bytes),
                          f"{ca2.wall:.1f}+{cb2.wall:.1f} ({ca2.cpu:.1f}+{cb2.cpu:.1f})"]
            else:
                cells += ["n/a"] * 3
        kcells, ktimes = [], []
        fast_wall = None
        for mode in ("fast", "eco", "strong"):
            r = run_kahip(pf, tr, mode)
            if r is None:
                kcells.append("n/a")
                continue
            s = evaluate(pf, tr, r[0], r[1])
            row[f"kahip_{mode}"] = (s.max_congestion, s.hop_bytes, r[2].wall)
            kcells.append(f"{ms(s.max_congestion)} / {gb(s.hop_bytes)}")
            ktimes.append(f"{r[2].wall:.2f}")
            fast_wall = r[2].wall if mode == "fast" else fast_wall
        cells += kcells + ["/".join(ktimes) or "n/a"]
        r = run_scotch(pf, tr)
        if r is None or isinstance(r, str):
            cells += [r or "n/a", ""]
        else:
            s = evaluate(pf, tr, r[0], r[1])
            row["scotch"] = (s.max_congestion, s.hop_bytes, r[2].wall)
            cells += [f"{ms(s.max_congestion)} / {gb(s.hop_bytes)}", f"{r[2].wall:.2f} ({r[2].cpu:.2f})"]
        if fast_wall is not None:
            a3, _ = run_rankmap(pf, tr, "max", max(fast_wall, 1e-3), "off")
            b3, _ = run_rankmap(pf, tr, "hop-bytes", max(fast_wall, 1e-3), "off")
            rm, rh = a3.score.max_congestion / a.score.max_congestion, b3.score.hop_bytes / b.score.hop_bytes
            row["at_fast"] = (rm, rh, fast_wall)
            cells.append(f"{100 * (rm - 1):+.1f} %, {100 * (rh - 1):+.1f} % ({fast_wall:.2f} s)")
        else:
            cells.append("n/a")
        cells.append(load())
        print("| " + " | ".join(cells) + " |", flush=True)
        rows.append(row)
    return rows


def published(budget: float, with_kahip_seed: bool) -> list[dict]:
    """KaHIP's published setting: 3-D grid and random geometric graph, 1024 parts, 4:16:16, 1:10:100,
    ids shuffled."""
    spec = "hier:4x16x16:1,10,100"
    pf = Platform(node_model(synth.builtin(spec)), 16)
    cases = [("pub", 1024, ("grid3d", shuffled(halo(1024, 3, periodic=False, weights=(1, 1, 1))))),
             ("pub", 1024, ("rgg", shuffled(rgg(1024))))]
    return quality([], [], [], budget, with_kahip_seed, label_of=lambda k, n: (spec, pf), cases=cases)


def verdict(rows: list[dict]) -> None:
    """The targets, measured."""
    hb = [r for r in rows if "kahip_strong" in r]
    lose = [r for r in hb if r["rankmap"][1] > r["kahip_strong"][1] * (1 + 1e-9)]
    print(f"\nhop-bytes, rankmap (no KaHIP) <= KaHIP strong: {len(hb) - len(lose)} of {len(hb)} instances")
    for r in lose:
        print(f"  {r['machine']} {r['pattern']} {r['n']}: {r['rankmap'][1] / r['kahip_strong'][1] - 1:+.1%}")
    seeded = [r for r in hb if "rankmap+kahip" in r]
    if seeded:
        lose2 = [r for r in seeded if r["rankmap+kahip"][1] > r["kahip_strong"][1] * (1 + 1e-9)]
        print(f"hop-bytes, rankmap + KaHIP seed <= KaHIP strong: {len(seeded) - len(lose2)} of {len(seeded)}")
        for r in lose2:
            print(f"  {r['machine']} {r['pattern']} {r['n']}: {r['rankmap+kahip'][1] / r['kahip_strong'][1] - 1:+.1%}")
    others = [r for r in rows if "scotch" in r or "kahip_fast" in r]
    behind = []
    for r in others:
        best = min(r[k][0] for k in ("kahip_fast", "kahip_eco", "kahip_strong", "scotch") if k in r)
        if r["rankmap"][0] > best * (1 + 1e-9):
            behind.append((r, best))
    print(f"max congestion, rankmap (no KaHIP) ahead of KaHIP and Scotch: {len(others) - len(behind)} of {len(others)}")
    for r, best in behind:
        print(f"  {r['machine']} {r['pattern']} {r['n']}: {r['rankmap'][0] / best - 1:+.1%}")
    fast = [r for r in rows if "at_fast" in r]
    off = [r for r in fast if max(r["at_fast"][:2]) > 1.05]
    print(f"at KaHIP fast's time within 5 % of rankmap's own result: {len(fast) - len(off)} of {len(fast)}")
    for r in off:
        print(f"  {r['machine']} {r['pattern']} {r['n']}: max {r['at_fast'][0] - 1:+.1%}, hop-bytes "
              f"{r['at_fast'][1] - 1:+.1%} at {r['at_fast'][2]:.3f} s")
    worse = [r for r in rows if any(x[0] > r["default"][0] * (1 + 1e-9) for x in r["rankmap_runs"][:1])
             or r["rankmap_runs"][1][1] > r["default"][1] * (1 + 1e-9)]
    print(f"worse than the default on its own objective: {len(worse)} of {len(rows)}")


def command(sizes: list[float], n: int = 4096, repeat: int = 2) -> None:
    """The whole `rankmap map` command (start-up, reading the CSV, placing, writing the JSON) against
    its --time-budget, 4096 ranks on 512 x dgx1-v100."""
    import json

    from rankmap.formats import traffic_csv

    print(f"\n### The whole command at {n} ranks: wall / --time-budget (worst of {repeat})\n")
    print("| pattern | budget | wall | wall / budget | CPU | placement's own seconds | load |")
    print("|---|---|---|---|---|---|---|")
    exe = Path(sys.executable).with_name("rankmap")
    worst = 0.0
    with tempfile.TemporaryDirectory() as d:
        for pat in ("halo4d", "random"):
            tr = instance(pat, n)
            f = Path(d) / f"{pat}.csv"
            rows = [{"src": int(s), "dst": int(t), "class": "p2p", "operation": "synthetic", "bytes": int(b),
                     "messages": 1} for s, t, b in zip(tr.src, tr.dst, tr.bytes)]
            f.write_text(traffic_csv.dumps(rows))
            for budget in sizes:
                walls, own, cpus = [], [], []
                for _ in range(repeat):
                    t0, c0 = time.perf_counter(), _child_cpu()
                    r = subprocess.run([str(exe), "map", "--traffic", str(f), "--topology", "dgx1-v100", "--nodes",
                                        str(n // 8), "--time-budget", str(budget), "--format", "json",
                                        "-o", str(Path(d) / "m.json")], capture_output=True, text=True)
                    walls.append(time.perf_counter() - t0)
                    cpus.append(_child_cpu() - c0)
                    if r.returncode != 0:
                        raise RuntimeError(r.stderr)
                    own.append(json.loads(r.stdout)["seconds"])
                w = max(walls)
                worst = max(worst, w / budget)
                print(f"| {pat} | {budget:g} s | {w:.2f} s | {w / budget:.2f} | {max(cpus):.2f} s | {max(own):.2f} s "
                      f"| {load()} |", flush=True)
    print(f"\nlargest wall / budget: {worst:.2f} (target <= 1.10)")


def main() -> None:
    ap = argparse.ArgumentParser(description="placement at scale beside KaHIP and Scotch (markdown tables)")
    ap.add_argument("--section", choices=("quality", "published", "command", "all"), default="quality")
    ap.add_argument("--machines", default="dgx1,hier64", help="dgx1 (8-GPU nodes), hier64 (64-GPU nodes, 4:16:N)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--budget", type=float, default=10.0, help="rankmap's --time-budget (default 10)")
    ap.add_argument("--no-seeded", action="store_true", help="leave out rankmap with KaHIP's seed")
    ap.add_argument("--budgets", default="0.5,1,2,5,10", help="--time-budget values of the command section")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()}-core {_pf.machine()}, Python {_pf.python_version()}, numpy {np.__version__}; "
          f"KaHIP {'installed' if kahipmap.available() else 'not installed'}; Scotch {GMAP or 'not installed'}; "
          f"load average {load()} at start; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    t0 = time.perf_counter()
    rows: list[dict] = []
    if args.section in ("published", "all"):
        rows += published(args.budget, not args.no_seeded)
    if args.section in ("quality", "all"):
        kinds = [{"hier64": "hier"}.get(k, k) for k in args.machines.split(",")]
        rows += quality(kinds, [int(x) for x in args.sizes.split(",")], args.patterns.split(","), args.budget,
                        not args.no_seeded)
    if rows:
        verdict(rows)
    if args.section in ("command", "all"):
        command([float(x) for x in args.budgets.split(",")])
    print(f"\nbenchmark wall time: {time.perf_counter() - t0:.0f} s; load average {load()} at the end")


if __name__ == "__main__":
    main()
