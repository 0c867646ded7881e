"""Placement quality and speed: rankmap vs Scotch, scipy's QAP, and the default; SimGrid judge.

Every mapping, whoever computed it, is scored by rankmap's cost model (max congestion over directed
links, ms). Prints markdown tables (the ones in docs/benchmarks.md).

    python bench/mapping_quality.py            # everything
    python bench/mapping_quality.py node       # node-level table only
    python bench/mapping_quality.py cluster    # 4096 ranks on 512 nodes
    python bench/mapping_quality.py simgrid    # simulated time, default vs rankmap

Scotch (Debian's ``scotch_gmap``): the source graph is the symmetrised traffic, the target for a
node is built by ``amk_grf`` from the complete GPU graph weighted by route cost (sum over the route of
1/bandwidth); for the 512-node cluster a ``tleaf`` target (network level, GPU level), since an
``amk_grf`` target of 4096 vertices holds a 4096^2 distance matrix. ``-b0 -cb`` asks for exact balance.
"""

from __future__ import annotations

import os
import platform as _pf
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rankmap.mapping import patterns, simgrid, synth
from rankmap.mapping.cost import Traffic, default_mapping, evaluate
from rankmap.mapping.platform import Platform, node_model
from rankmap.mapping.solve import place
from rankmap.topology import fixtures

GMAP = shutil.which("scotch_gmap") or shutil.which("gmap")
AMK = shutil.which("amk_grf")


def topo(name):
    return synth.builtin(name) or fixtures.get(name)


def write_grf(path: Path, W: np.ndarray) -> None:
    """Scotch source graph (symmetric integer edge weights, base 0)."""
    n = W.shape[0]
    S = W + W.T
    np.fill_diagonal(S, 0)
    nz = S > 0
    scale = 1_000_000 / S.max() if S.max() > 0 else 1.0
    lines = ["0", f"{n} {int(nz.sum())}", "0 010"]
    for i in range(n):
        js = np.nonzero(nz[i])[0]
        parts = [str(len(js))]
        for j in js:
            parts += [str(max(1, int(round(S[i, j] * scale)))), str(int(j))]
        lines.append(" ".join(parts))
    path.write_text("\n".join(lines) + "\n")


def write_grf_sparse(path: Path, tr: Traffic) -> None:
    n = tr.n
    s = np.concatenate([tr.src, tr.dst])
    d = np.concatenate([tr.dst, tr.src])
    b = np.concatenate([tr.bytes, tr.bytes])
    key = s * n + d
    u, inv = np.unique(key, return_inverse=True)
    w = np.bincount(inv, weights=b)
    us, ud = u // n, u % n
    wi = np.maximum(1, np.round(w / w.max() * 1_000_000)).astype(np.int64)
    lines = ["0", f"{n} {len(u)}", "0 010"]
    starts = np.searchsorted(us, np.arange(n + 1))
    for i in range(n):
        a, e = starts[i], starts[i + 1]
        parts = [str(e - a)]
        for j, ww in zip(ud[a:e], wi[a:e]):
            parts += [str(int(ww)), str(int(j))]
        lines.append(" ".join(parts))
    path.write_text("\n".join(lines) + "\n")


def route_cost(m) -> np.ndarray:
    """Seconds per GB along each GPU pair's route, symmetrised (a distance for QAP and Scotch)."""
    c = m.cpb.sum(axis=2) * 1e9
    return 0.5 * (c + c.T)


def scotch_node(T: np.ndarray, m, tmp: Path) -> tuple[np.ndarray, float]:
    G = m.G
    C = route_cost(m)
    w = np.maximum(1, np.round(C / C[C > 0].min() * 10)).astype(int)
    lines = ["0", f"{G} {G * (G - 1)}", "0 010"]
    for g in range(G):
        parts = [str(G - 1)]
        for h in range(G):
            if h != g:
                parts += [str(w[g, h]), str(h)]
        lines.append(" ".join(parts))
    (tmp / "target.grf").write_text("\n".join(lines) + "\n")
    subprocess.run([AMK, str(tmp / "target.grf"), str(tmp / "target.tgt")], check=True, capture_output=True)
    write_grf(tmp / "src.grf", T)
    t0 = time.perf_counter()
    subprocess.run([GMAP, str(tmp / "src.grf"), str(tmp / "target.tgt"), str(tmp / "out.map"), "-b0", "-cb"],
                   check=True, capture_output=True)
    dt = time.perf_counter() - t0
    return _read_map(tmp / "out.map", T.shape[0], G), dt


def _read_map(path: Path, n: int, slots: int) -> np.ndarray:
    """Scotch's mapping, repaired into a one-rank-per-slot assignment if it overloaded a slot."""
    rows = path.read_text().split("\n")[1:]
    tgt = np.zeros(n, dtype=np.int64)
    for r in rows:
        if r.strip():
            a, b = r.split()
            tgt[int(a)] = int(b)
    seen: set[int] = set()
    free = [s for s in range(slots) if s not in set(tgt.tolist())]
    for i in range(n):
        if tgt[i] in seen:
            tgt[i] = free.pop(0)
        seen.add(int(tgt[i]))
    return tgt


def qap(T: np.ndarray, m, seed: int = 0, restarts: int = 10) -> tuple[np.ndarray, float]:
    from scipy.optimize import quadratic_assignment

    A = T + T.T
    B = route_cost(m)
    best = None
    t0 = time.perf_counter()
    for k in range(restarts):
        r = quadratic_assignment(A, B, method="faq", options={"rng": seed + k, "P0": "randomized"})
        if best is None or r.fun < best.fun:
            best = r
    return np.asarray(best.col_ind), time.perf_counter() - t0


def ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def node_table() -> None:
    print("\n### Node level: max congestion (ms), lower is better; time to solve\n")
    print("| topology | pattern | default | rankmap | proven | rankmap time | Scotch | Scotch time | scipy QAP | QAP time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in ["dgx1-v100", "pcie-8gpu-2socket", "summit", "dgx-a100", "pcie-12", "pcie-16", "pcie-16-nvbridge"]:
        m = node_model(topo(name))
        pf = Platform(m)
        G = m.G
        for pat, T in patterns.suite(G, seed=1).items():
            T = T * 10  # ~1 GB per neighbour: congestion in ms
            pl = place(pf, T, time_budget=30)
            zeros = np.zeros(G, dtype=np.int64)
            row = [name, pat, ms(pl.default.max_congestion), ms(pl.score.max_congestion),
                   "yes" if pl.optimal else "no", f"{pl.seconds * 1e3:.0f} ms"]
            if GMAP and AMK:
                with tempfile.TemporaryDirectory() as d:
                    g, dt = scotch_node(T, m, Path(d))
                row += [ms(evaluate(pf, T, zeros, g).max_congestion), f"{dt * 1e3:.0f} ms"]
            else:
                row += ["n/a", ""]
            g, dt = qap(T, m)
            row += [ms(evaluate(pf, T, zeros, g).max_congestion), f"{dt * 1e3:.0f} ms"]
            print("| " + " | ".join(row) + " |", flush=True)


def cluster_table() -> None:
    print("\n### 4096 ranks on 512 x dgx1-v100: max congestion (ms) and time\n")
    print("| pattern | default | rankmap | rankmap time | Scotch (tleaf) | Scotch time |")
    print("|---|---|---|---|---|---|")
    m = node_model(fixtures.get("dgx1-v100"))
    pf = Platform(m, 512)
    n = 4096
    cases = {"halo4d": patterns.halo(n, 4, nbytes=1e8), "halo3d": patterns.halo(n, 3, nbytes=1e8),
             "random": patterns.random_sparse(n, 4, seed=3)}
    for pat, T in cases.items():
        tr = Traffic.from_dense(T)
        pl = place(pf, tr, time_budget=20)
        row = [pat, ms(pl.default.max_congestion), ms(pl.score.max_congestion), f"{pl.seconds:.1f} s"]
        if GMAP:
            with tempfile.TemporaryDirectory() as d:
                d = Path(d)
                write_grf_sparse(d / "src.grf", tr)
                (d / "t.tgt").write_text("tleaf 2 512 10 8 1\n")
                t0 = time.perf_counter()
                subprocess.run([GMAP, str(d / "src.grf"), str(d / "t.tgt"), str(d / "o.map"), "-b0", "-cb"],
                               check=True, capture_output=True)
                dt = time.perf_counter() - t0
                slot = _read_map(d / "o.map", n, n)
            # Scotch places ranks on nodes; inside a node it knows no topology, so its GPU order is taken as is
            s = evaluate(pf, tr, slot // 8, slot % 8)
            row += [ms(s.max_congestion), f"{dt:.1f} s"]
        print("| " + " | ".join(row) + " |", flush=True)


def simgrid_table() -> None:
    if not simgrid.available():
        print("\nSimGrid not installed: skipped")
        return
    print("\n### SimGrid (smpirun) simulated communication time, default vs rankmap\n")
    print("| platform | program | ranks | default (ms) | rankmap (ms) | speedup | cost-model ratio |")
    print("|---|---|---|---|---|---|---|")
    cache = Path(tempfile.gettempdir()) / "rankmap-bench-smpi"
    face = 1 << 20
    iters = 3
    runs = [("dgx1-v100", 1, 8), ("pcie-8gpu-2socket", 1, 8), ("dgx1-v100", 16, 128)]
    for name, nodes, n in runs:
        m = node_model(fixtures.get(name))
        pf = Platform(m, nodes)
        for prog in ("ring", "halo3d", "halo4d"):
            exe = simgrid.build_example(prog, cache)
            if prog == "ring":
                T = patterns.ring(n, nbytes=face * iters, bidirectional=False)
                args = [str(face), str(iters)]
            else:
                nd = 3 if prog == "halo3d" else 4
                dims = patterns.dims_create(n, nd)
                T = patterns.halo(n, nd, nbytes=face * iters, dims=dims, weights=[1.0, 2.0, 3.0, 4.0][:nd])
                args = ["x".join(map(str, dims)), str(face), str(iters)]
            pl = place(pf, T, time_budget=20)
            j = simgrid.judge([str(exe), *args], pf, default_mapping(n, pf), (pl.node_of, pl.gpu_of),
                              cache / f"{name}-{nodes}")
            label = name if nodes == 1 else f"{nodes} x {name}"
            print(f"| {label} | {prog} | {n} | {j['default_s'] * 1e3:.3f} | {j['tuned_s'] * 1e3:.3f} | "
                  f"{j['speedup']:.2f}x | {pl.default.max_congestion / pl.score.max_congestion:.2f}x |", flush=True)


def main() -> None:
    what = sys.argv[1:] or ["node", "cluster", "simgrid"]
    print(f"machine: {os.cpu_count()}-core {_pf.machine()}, Python {_pf.python_version()}, numpy {np.__version__}")
    if "node" in what:
        node_table()
    if "cluster" in what:
        cluster_table()
    if "simgrid" in what:
        simgrid_table()


if __name__ == "__main__":
    main()
