"""The demo's steps, kept out of the verb module: profile, place, judge, store.

Real MPI is the default. When it cannot run here (no Open MPI, no compiler, no examples, capture
missing), the demo says why in one line and continues with a synthetic 4-D halo matrix built to
match what the example sends; every output then carries the word *synthetic*.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import numpy as np

from rankmap.errors import RankmapError
from rankmap.mapping import basis as B
from rankmap.mapping import patterns, simgrid
from rankmap.mapping.cost import Traffic, default_mapping
from rankmap.mapping.inputs import load_topology
from rankmap.mapping.platform import Platform, node_model
from rankmap.mapping.report import print_text, to_json
from rankmap.mapping.solve import place


def halo_dims(n: int) -> list[int]:
    return patterns.dims_create(n, 4)


def synthetic_halo(n: int, face: int, iters: int) -> np.ndarray:
    """What examples/mpi/halo4d sends: per iteration and dimension d, face*(d+1) bytes to each neighbour."""
    return patterns.halo(n, 4, nbytes=face * iters, dims=halo_dims(n), weights=[1.0, 2.0, 3.0, 4.0])


def _mpi_tools() -> tuple[str, str]:
    for run, cc in (("mpirun.openmpi", "mpicc.openmpi"), ("mpirun", "mpicc")):
        r, c = shutil.which(run), shutil.which(cc)
        if r and c:
            return r, c
    raise RankmapError("Open MPI (mpirun, mpicc) not found")


def _build_halo4d(mpicc: str, cache: Path) -> Path:
    import subprocess

    d = simgrid.examples_dir()
    if d is None:
        raise RankmapError("the bundled MPI examples (examples/mpi) are not beside this installation")
    src = d / "halo4d.c"
    out = cache / "halo4d"
    if out.exists() and out.stat().st_mtime >= max(src.stat().st_mtime, (d / "halo.h").stat().st_mtime):
        return out
    cache.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([mpicc, "-O2", "-w", str(src), "-o", str(out)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RankmapError(f"{mpicc} could not build halo4d.c")
    return out


def profile_real(args, store, cache: Path, con, extra: list[str] | None = None) -> tuple[Traffic, int, list[str]]:
    """Run halo4d under mpirun with capture (``extra``: its further arguments); returns (traffic,
    job id, command)."""
    from rankmap.pipeline.profile import profile_command

    mpirun, mpicc = _mpi_tools()
    exe = _build_halo4d(mpicc, cache)
    dims = "x".join(str(x) for x in halo_dims(args.ranks))
    cmd = [mpirun]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if (os.cpu_count() or 1) < args.ranks:
        cmd.append("--oversubscribe")
    cmd += ["-np", str(args.ranks), str(exe), dims, str(args.face), str(args.iters), *(extra or [])]
    con.print(f"profiling: {shlex.join(cmd)}")
    res = profile_command(cmd, store=store, progress=False)
    if res.exit_status != 0:
        raise RankmapError(f"the halo4d run failed (exit status {res.exit_status})")
    from rankmap.mapping.traffic import job_traffic

    traffic = job_traffic(store, res.job_id)  # with its host-staged part: routed as it travels
    if traffic.total == 0:
        raise RankmapError("the profile recorded no traffic")
    return traffic, res.job_id, cmd


def store_synthetic(store, T: np.ndarray, args) -> int:
    """Keep the synthetic matrix as a job so that export and the dashboard can show it too."""
    from rankmap.store import RankTotals

    n = T.shape[0]
    cmd = ["rankmap-demo-synthetic-halo4d", f"-np={n}", f"face={args.face}", f"iters={args.iters}"]
    jid = store.create_job(cmd, launcher="plain", world_size=n, meta={"synthetic": True})
    store.ingest(jid, [RankTotals(r, [(int(q), "p2p", "MPI_Isend", "host", "send", int(T[r, q]), int(args.iters * 2))
                                      for q in np.nonzero(T[r])[0]], host="synthetic", pid=0) for r in range(n)])
    store.finish_job(jid, exit_status=0, world_size=n, meta={"synthetic": True})
    return jid


def pick_topology(spec: str | None, con):
    if spec:
        return load_topology(spec)
    try:
        t = load_topology("live")
        if t.gpus:
            return t
    except RankmapError:
        pass
    con.print("this machine has no GPU to place on: placing on the dgx1-v100 fixture (8 V100, hybrid cube-mesh)")
    return load_topology("dgx1-v100")


def bases_of(args) -> list[str]:
    """The blocks the demo shows: both by default, the recorded traffic first."""
    if args.as_recorded and args.as_gpu_resident:
        raise RankmapError("--as-recorded and --as-gpu-resident each show one of the demo's two blocks: "
                           "give one of them, or neither for both")
    if args.as_recorded:
        return [B.AS_RECORDED]
    if args.as_gpu_resident:
        return [B.GPU_RESIDENT]
    return [B.AS_RECORDED, B.GPU_RESIDENT]


#: the demo's words for each basis: block heading, summary label, routes the SimGrid judge takes
HEADINGS = {
    B.AS_RECORDED: ("AS RECORDED: host-staged (the MPI moved host memory)",
                    "as recorded, host-staged", "host-staged routes, as recorded"),
    B.GPU_RESIDENT: ("WHAT-IF: the same traffic GPU-resident (carried GPU to GPU, as a CUDA-aware MPI or NCCL "
                     "would)", "what-if, GPU-resident", "GPU-to-GPU routes, what-if"),
}


def judge_halo(args, traffic: Traffic, pf: Platform, pl, workdir: Path, cache: Path, con) -> dict | None:
    """SimGrid's simulated time of halo4d on the default placement and on ``pl``, its bytes routed as
    ``traffic`` says (host-staged pairs via the host, the rest GPU to GPU); None when it cannot run."""
    if args.no_simulate:
        return None
    if not simgrid.available():
        con.print("SimGrid judge skipped: smpirun/smpicc not installed (Debian: simgrid, libsimgrid-dev)")
        return None
    try:
        exe = simgrid.build_example("halo4d", cache / "smpi")
        dims = "x".join(str(x) for x in halo_dims(traffic.n))
        return simgrid.judge([str(exe), dims, str(args.face), str(args.iters)], pf,
                             default_mapping(traffic.n, pf), (pl.node_of, pl.gpu_of), workdir, traffic=traffic)
    except RankmapError as e:
        con.print(f"SimGrid judge skipped: {e}")
        return None


def _summary(doc: dict, label: str, width: int) -> str:
    d = doc["default"]
    line = (f"{label + ':':<{width + 1}} max link congestion {d['max_congestion'] * 1e3:.3f} ms -> {doc['max_congestion'] * 1e3:.3f} ms "
            f"({doc['improvement']['max'] or 1.0:.2f}x)")
    j = doc.get("simgrid")
    if j and j.get("speedup"):
        line += f"; SimGrid {j['default_s'] * 1e3:.3f} ms -> {j['tuned_s'] * 1e3:.3f} ms ({j['speedup']:.2f}x)"
    m = doc.get("measured")        # run on emulated nodes (pipeline/demo_nodes.py)
    if m:
        line += f"; measured {m['default_s'] * 1e3:.1f} ms -> {m['tuned_s'] * 1e3:.1f} ms ({m['speedup']:.2f}x)"
    return line


def place_block(args, basis: str, traffic: Traffic, topo, pf: Platform, source: dict, cache: Path, con) -> dict:
    """Place ``traffic`` on ``basis`` (the recorded traffic or its GPU-resident what-if), print the block
    and judge it; returns the mapping JSON."""
    heading, _, routes = HEADINGS[basis]
    tr, fields = B.apply(basis, traffic, f"job {source['job']}")
    con.print()
    con.rule(f"[bold]{heading}[/bold]", align="left")
    pl = place(pf, tr, time_budget=10.0)
    doc = to_json(pl, topology=topo.name, source=source, basis=fields)
    print_text(doc, console=con, max_links=16)
    if basis == B.AS_RECORDED and traffic.host_total > 0.5 * traffic.total and (doc["improvement"]["max"] or 1) < 1.01:
        con.print("halo4d keeps its halos in host memory (a plain MPI program, as programs must with an MPI that is "
                  "not CUDA-aware), so its bytes go GPU -> host memory -> GPU over PCIe and the CPU links, which every "
                  "GPU order loads alike: placement cannot shorten the busiest link")
    if basis == B.GPU_RESIDENT:
        con.print("rank -> GPU: default " + " ".join(str(g) for g in default_mapping(tr.n, pf)[1])
                  + "; rankmap " + " ".join(str(e["gpu"]) for e in doc["mapping"].values()))
    j = judge_halo(args, tr, pf, pl, cache / "smpi" / topo.name / basis, cache, con)
    if j is not None:
        doc["simgrid"] = {**j, "routes": routes}
        con.print(f"SimGrid (smpirun) simulated communication time of halo4d on {topo.name} ({routes}): "
                  f"default {j['default_s'] * 1e3:.3f} ms -> rankmap {j['tuned_s'] * 1e3:.3f} ms "
                  f"({j['speedup']:.2f}x)")
    return doc


def run_demo(args, con) -> bool:
    from rankmap.store import open_store, rankmap_home

    bases = bases_of(args)
    store = open_store(args.db)
    cache = rankmap_home() / "demo"
    synthetic = bool(args.synthetic)
    job_id = None
    from rankmap.pipeline import demo_nodes

    # the job of the block across nodes first: the demo's own job stays the store's latest
    col = (demo_nodes.profile_col(args, store, cache, con)
           if B.AS_RECORDED in bases and args.ranks % demo_nodes.NODES == 0 else None)
    if not synthetic:
        try:
            traffic, job_id, cmd = profile_real(args, store, cache, con)
            con.print(f"profiled with real MPI as job {job_id}")
        except RankmapError as e:
            con.print(f"cannot profile with real MPI here ({e}); using a built-in SYNTHETIC 4-D halo traffic matrix instead")
            synthetic = True
    if synthetic:
        T = synthetic_halo(args.ranks, args.face, args.iters)
        traffic = Traffic.from_dense(T, T)  # halo4d sends host memory, as the stored rows say
        job_id = store_synthetic(store, T, args)
        con.print(f"synthetic 4-D halo ({'x'.join(map(str, halo_dims(args.ranks)))}) stored as job {job_id}")
    if traffic.host is None and B.GPU_RESIDENT in bases:
        if bases == [B.GPU_RESIDENT]:
            B.gpu_resident(traffic, f"job {job_id}")  # says why there is nothing to show
        con.print(f"job {job_id} recorded no host-staged bytes: the what-if would repeat the recorded block")
        bases = [B.AS_RECORDED]
    topo = pick_topology(args.topology, con)
    nodes = max(1, -(-traffic.n // len(topo.gpus)))
    pf = Platform(node_model(topo), nodes)
    source = {"job": job_id, "synthetic": synthetic}
    docs = {b: place_block(args, b, traffic, topo, pf, source, cache, con) for b in bases}
    across = demo_nodes.nodes_block(args, store, cache, con, col) if col is not None else None
    con.print()
    con.print(f"[bold]summary[/bold] (default rank -> GPU order vs rankmap's, on {topo.name}"
              + (f"; across nodes: default rank -> node order vs rankmap's)" if across else "):"))
    width = max([len(HEADINGS[b][1]) for b in docs] + ([len(demo_nodes.LABEL)] if across else []))
    for b, doc in docs.items():
        con.print("  " + _summary(doc, HEADINGS[b][1], width))
    if across:
        con.print("  " + _summary(across, demo_nodes.LABEL, width))
    from rankmap.pipeline.map import store_mapping

    # the recorded basis is stored last: the newest mapping of the command is the one `rankmap run` and
    # the dashboard take, and it should be the one that holds for the MPI the job really ran with
    ids = {b: store_mapping(store, docs[b], job_id, meta={"demo": True, "synthetic": synthetic})
           for b in sorted(docs, key=lambda b: b == B.AS_RECORDED)}
    try:
        import importlib.util

        has_serve = importlib.util.find_spec("rankmap.commands.serve") is not None
    except ImportError:
        has_serve = False
    how = "rankmap serve (then open the job)" if has_serve else f"rankmap export {job_id}"
    which = " and ".join([f"mapping {ids[b]} ({HEADINGS[b][1]})" for b in bases]
                         + ([f"mapping {across['mapping_id']} ({demo_nodes.LABEL}, job {across['source']['job']})"]
                            if across else []))
    con.print(f"stored job {job_id} and {which} in {store.url}; look at it with: {how}")
    return True
