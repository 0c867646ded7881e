"""The demo's steps, kept out of the verb module: profile, place, judge, store.

Real MPI is the default. When it cannot run here (no Open MPI, no compiler, no examples, capture
missing), the demo says why in one line and continues with a synthetic 4-D halo matrix built to
match what the example sends; every output then carries the word *synthetic*.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from rankmap.errors import RankmapError
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
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    cache.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([mpicc, "-O2", "-w", str(src), "-o", str(out)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RankmapError(f"{mpicc} could not build halo4d.c")
    return out


def profile_real(args, store, cache: Path, con) -> tuple[Traffic, int, list[str]]:
    """Run halo4d under mpirun with capture; returns (traffic, job id, command)."""
    from rankmap.pipeline.profile import profile_command

    mpirun, mpicc = _mpi_tools()
    exe = _build_halo4d(mpicc, cache)
    dims = "x".join(str(x) for x in halo_dims(args.ranks))
    cmd = [mpirun]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if (os.cpu_count() or 1) < args.ranks:
        cmd.append("--oversubscribe")
    cmd += ["-np", str(args.ranks), str(exe), dims, str(args.face), str(args.iters)]
    con.print(f"profiling: {' '.join(cmd)}")
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
    n = T.shape[0]
    cmd = ["rankmap-demo-synthetic-halo4d", f"-np={n}", f"face={args.face}", f"iters={args.iters}"]
    jid = store.create_job(cmd, launcher="plain", world_size=n, meta={"synthetic": True})
    recs = []
    for r in range(n):
        rows = [dict(peer=int(q), klass="p2p", operation="MPI_Isend", mem="host", direction="send",
                     bytes=int(T[r, q]), messages=int(args.iters * 2)) for q in np.nonzero(T[r])[0]]
        recs.append(SimpleNamespace(world_rank=r, source="mpi", traffic=rows, host="synthetic", pid=0))
    store.ingest(jid, recs)
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


def run_demo(args, con) -> bool:
    from rankmap.store import open_store, rankmap_home

    store = open_store(args.db)
    cache = rankmap_home() / "demo"
    synthetic = bool(args.synthetic)
    job_id = None
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
    topo = pick_topology(args.topology, con)
    nodes = max(1, -(-traffic.n // len(topo.gpus)))
    pf = Platform(node_model(topo), nodes)
    pl = place(pf, traffic, time_budget=10.0)
    doc = to_json(pl, topology=topo.name, source={"job": job_id, "synthetic": synthetic})
    print_text(doc, console=con, max_links=16)
    if not args.no_simulate:
        if simgrid.available():
            try:
                exe = simgrid.build_example("halo4d", cache / "smpi")
                dims = "x".join(str(x) for x in halo_dims(traffic.n))
                j = simgrid.judge([str(exe), dims, str(args.face), str(args.iters)], pf,
                                  default_mapping(traffic.n, pf), (pl.node_of, pl.gpu_of), cache / "smpi" / topo.name,
                                  traffic=traffic)
                doc["simgrid"] = j
                con.print(f"SimGrid (smpirun) simulated communication time of halo4d on {topo.name}: "
                          f"default {j['default_s'] * 1e3:.3f} ms -> rankmap {j['tuned_s'] * 1e3:.3f} ms "
                          f"({j['speedup']:.2f}x)")
            except RankmapError as e:
                con.print(f"SimGrid judge skipped: {e}")
        else:
            con.print("SimGrid judge skipped: smpirun/smpicc not installed (Debian: simgrid, libsimgrid-dev)")
    from rankmap.pipeline.tune import store_mapping

    mid = store_mapping(store, doc, job_id, meta={"demo": True, "synthetic": synthetic})
    try:
        import importlib.util

        has_serve = importlib.util.find_spec("rankmap.commands.serve") is not None
    except ImportError:
        has_serve = False
    how = "rankmap serve (then open the job)" if has_serve else f"rankmap export {job_id}"
    con.print(f"stored job {job_id} and mapping {mid} in {store.url}; look at it with: {how}")
    return True
