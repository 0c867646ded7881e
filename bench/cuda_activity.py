"""What rankmap's CUDA activity capture costs a copy-heavy and a kernel-heavy program.

Builds ``bench/cuda_load.cu`` (nvcc) and the CUDA activity library, then runs each load under five
configurations, interleaved, ``--trials`` times each, and prints the median time per copy or launch:

* ``off``       the load alone, no rankmap (the baseline);
* ``default``   the load under ``rankmap profile`` with its defaults (``--cuda-activity`` off, the link
                sampler on), which must cost nothing measurable;
* ``injected``  the library loaded by the driver but recording nothing (``RANKMAP_CUDA_KINDS=none``);
* ``copies``    CUPTI memcpy/memset activity (``--cuda-activity copies``);
* ``all``       copies and kernels (``--cuda-activity on``).

The loads time themselves (``ns_per_op`` of the timed loop only), so rankmap's start-up and the
store's work after the job are not in the figures.

    python bench/cuda_activity.py                       # both loads, 5 trials
    python bench/cuda_activity.py --copies 20000 --kernels 200000 --trials 3 --json out.json

Needs a GPU, nvcc and a CUPTI (found as ``rankmap profile`` finds it, or ``RANKMAP_CUPTI``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rankmap.capture.cuda_build import build_library, find_cupti  # noqa: E402

HERE = Path(__file__).resolve().parent
CONFIGS = ("off", "default", "injected", "copies", "all")
SRC = HERE.parent / "src"


def run_once(exe: Path, load: list[str], config: str, lib: Path, cupti: str | None, work: Path,
             timeout: float) -> tuple[float, str]:
    """One run: (ns per operation, the stderr line rankmap printed if any)."""
    env = dict(os.environ)
    env.pop("CUDA_INJECTION64_PATH", None)
    cmd = [str(exe), *load]
    if config == "default":   # a store of its own: the bench leaves the user's alone
        home = Path(tempfile.mkdtemp(dir=work))
        env.update(RANKMAP_HOME=str(home), RANKMAP_DB=f"sqlite:///{home / 'rankmap.db'}",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")])))
        cmd = [sys.executable, "-m", "rankmap", "profile", "--no-progress", "--no-summary", "--", *cmd]
    elif config != "off":
        run_dir = Path(tempfile.mkdtemp(dir=work))
        env.update(CUDA_INJECTION64_PATH=str(lib), RANKMAP_RUN_DIR=str(run_dir),
                   RANKMAP_CUDA_KINDS="none" if config == "injected" else config)
        if cupti:
            env["RANKMAP_CUPTI"] = cupti
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"cuda_activity: {exe.name} {' '.join(load)} ({config}) failed: "
                         f"{(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    ns = float(p.stdout.split("ns_per_op", 1)[1].split()[0])
    # the first thing rankmap says about the run (a first use also says it builds the hooks: not that)
    note = next((l for l in p.stderr.splitlines()
                 if l.startswith("rankmap:") and not l.startswith("rankmap: building ")), "")
    return ns, note


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=20000, help="(H2D, D2H) rounds of the copy-heavy load")
    ap.add_argument("--bytes", type=int, default=65536, help="bytes per copy")
    ap.add_argument("--kernels", type=int, default=200000, help="launches of the kernel-heavy load")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    ap.add_argument("--json", help="write the samples and medians here")
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rankmap-cuda-bench-"))
    exe = work / "cuda_load"
    b = subprocess.run([a.nvcc, "-O2", str(HERE / "cuda_load.cu"), "-o", str(exe)], capture_output=True, text=True)
    if b.returncode != 0:
        raise SystemExit(f"cuda_activity: building cuda_load failed: {b.stderr.strip().splitlines()[:1]}")
    lib, cupti = build_library(), find_cupti()
    loads = {"copy-heavy": ["copies", str(a.copies), str(a.bytes)], "kernel-heavy": ["kernels", str(a.kernels)]}
    samples: dict[str, dict[str, list[float]]] = {l: {c: [] for c in CONFIGS} for l in loads}
    notes: set[str] = set()
    for _ in range(a.trials):
        for name, load in loads.items():
            for config in CONFIGS:
                ns, note = run_once(exe, load, config, lib, cupti, work, a.timeout)
                samples[name][config].append(ns)
                if note:
                    notes.add(note)
    print(f"# CUDA activity capture overhead ({a.trials} trials each, medians; CUPTI: {cupti or 'default search'})")
    print(f"{'load':>13} {'config':>9} {'ns/op':>10} {'overhead':>9}")
    medians: dict[str, dict[str, float]] = {}
    for name in loads:
        base = statistics.median(samples[name]["off"])
        medians[name] = {}
        for config in CONFIGS:
            m = statistics.median(samples[name][config])
            medians[name][config] = m
            print(f"{name:>13} {config:>9} {m:>10.1f} {100 * (m / base - 1):>8.1f}%")
    for n in sorted(notes):
        print(n)
    if a.json:
        Path(a.json).write_text(json.dumps({"samples": samples, "medians": medians, "notes": sorted(notes),
                                            "copies": a.copies, "bytes": a.bytes, "kernels": a.kernels}, indent=1))


if __name__ == "__main__":
    main()
