"""The demo's block across nodes: the recorded (host-staged) bytes where placement matters.

On one node no rank order shortens host-staged traffic: every order pushes the same bytes through
the same host links. Across nodes it does: which ranks share a node decides which bytes cross the
network. So the demo profiles halo4d once more with its ranks numbered column-major (``ORDER col``
of ``examples/mpi/halo.h``: a code that numbers its grid the other way round, so the ranks a
launcher puts on one node are not neighbours in its heaviest dimension) and places that recorded
traffic on two nodes of ``ranks / 2`` slots joined by a 1 Gbit/s network: the node of
:func:`rankmap.nodes.cluster.emulated_topology`, the same one the emulated nodes are shaped to.

The cost model and SimGrid predict; where emulated nodes can be made here (root, network
namespaces) the job is then run on two of them, default order vs ``rankmap run``, interleaved, and
the measured times are printed beside the predictions. Elsewhere the block says why not, in one line.
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from rankmap.errors import RankmapError

GBIT = 1.0
NODES = 2
REPS = 3
LABEL = f"as recorded, on {NODES} nodes"
HEADING = (f"AS RECORDED, ACROSS NODES: halo4d with its ranks numbered column-major, on {NODES} nodes joined by "
           f"a {GBIT:g} Gbit/s network")


def profile_col(args, store, cache: Path, con):
    """(traffic, job id, synthetic) of halo4d numbered column-major: profiled with real MPI on this
    machine (the bytes do not depend on where ranks run), else the synthetic matrix renumbered."""
    from rankmap.pipeline import demo as D

    if not args.synthetic:
        try:
            con.print("for the block across nodes, halo4d with its ranks numbered column-major:")
            traffic, jid, _ = D.profile_real(args, store, cache, con, extra=["col"])
            return traffic, jid, False
        except RankmapError as e:
            con.print(f"cannot profile with real MPI here ({e}); using the SYNTHETIC matrix renumbered column-major")
    import numpy as np

    from rankmap.mapping.cost import Traffic

    T = D.synthetic_halo(args.ranks, args.face, args.iters)
    perm = column_major(D.halo_dims(args.ranks))            # world rank -> row-major rank
    T = T[np.ix_(perm, perm)]
    return Traffic.from_dense(T, T), D.store_synthetic(store, T, args), True


def column_major(dims: list[int]) -> list[int]:
    """For every world rank numbered column-major, the row-major rank of the same grid point."""
    import itertools

    out = []
    for coords in itertools.product(*[range(d) for d in reversed(dims)]):
        c = list(reversed(coords))                    # dimension 0 varies fastest
        key = 0
        for d, x in zip(dims, c):
            key = key * d + x
        out.append(key)
    return out


def nodes_block(args, store, cache: Path, con, profiled: tuple) -> dict:
    """Place the traffic :func:`profile_col` ``profiled`` on two nodes, predict, measure where it
    can; the mapping JSON (with ``simgrid`` and ``measured`` where they ran)."""
    from rankmap.nodes import cluster as N
    from rankmap.mapping.platform import Platform, node_model
    from rankmap.mapping.report import print_text, to_json
    from rankmap.mapping.solve import place
    from rankmap.pipeline import demo as D

    con.print()
    con.rule(f"[bold]{HEADING}[/bold]", align="left")
    traffic, jid, synthetic = profiled
    # every slot on all of this machine's CPUs: emulated nodes share them, so no slot is pinned to one
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    topo = N.emulated_topology(args.ranks // NODES, GBIT, cpus=[cpus] * (args.ranks // NODES))
    pf = Platform(node_model(topo), NODES)
    pl = place(pf, traffic, time_budget=10.0)
    doc = to_json(pl, topology=topo.name, source={"job": jid, "synthetic": synthetic, "order": "col"})
    print_text(doc, console=con, max_links=8)
    dims = "x".join(str(x) for x in D.halo_dims(args.ranks))
    program = [dims, str(args.face), str(args.iters), "col"]
    if not args.no_simulate:
        j = _simulate(program, pf, pl, traffic, cache, con)
        if j is not None:
            doc["simgrid"] = j
            con.print(f"SimGrid (smpirun) simulated communication time of halo4d on {NODES} x {topo.name}: default "
                      f"{j['default_s'] * 1e3:.3f} ms -> rankmap {j['tuned_s'] * 1e3:.3f} ms ({j['speedup']:.2f}x)")
    if synthetic or getattr(args, "no_measure", False):
        con.print("measured: skipped (" + ("synthetic traffic: no program ran" if synthetic else "--no-measure") + ")")
    else:
        why = N.probe()
        if why:
            con.print(f"measured: not here ({why}); as root, the demo runs it on {NODES} emulated nodes")
        else:
            try:
                doc["measured"] = measure(args, doc, topo, program, cache, con)
            except (RankmapError, OSError, subprocess.SubprocessError) as e:
                con.print(f"measured: failed ({str(e).splitlines()[0]})")
    from rankmap.pipeline.map import store_mapping

    doc["mapping_id"] = store_mapping(store, doc, jid, meta={"demo": True, "synthetic": synthetic, "nodes": NODES})
    return doc


def _simulate(program, pf, pl, traffic, cache: Path, con) -> dict | None:
    from rankmap.mapping import simgrid
    from rankmap.mapping.cost import default_mapping

    if not simgrid.available():
        con.print("SimGrid judge skipped: smpirun/smpicc not installed (Debian: simgrid, libsimgrid-dev)")
        return None
    try:
        exe = simgrid.build_example("halo4d", cache / "smpi")
        return simgrid.judge([str(exe), *program], pf, default_mapping(traffic.n, pf), (pl.node_of, pl.gpu_of),
                             cache / "smpi" / "nodes", traffic=traffic)
    except RankmapError as e:
        con.print(f"SimGrid judge skipped: {e}")
        return None


def measure(args, doc: dict, topo, program: list[str], cache: Path, con) -> dict:
    """halo4d (column-major) on two emulated nodes: ``REPS`` runs in the default order (``mpirun``
    filling each node's slots in rank order) and as many under ``rankmap run`` with ``doc``,
    interleaved; the loop times (the program's TIME line) and their medians."""
    from rankmap.nodes import cluster as N
    from rankmap.formats import mapping_json, topology_json
    from rankmap.pipeline import demo as D

    mpirun, mpicc = D._mpi_tools()
    exe = D._build_halo4d(mpicc, cache)
    con.print(f"measuring on {NODES} emulated nodes (network namespaces, links shaped to {GBIT:g} Gbit/s; removed "
              f"afterwards): {REPS} runs of each placement, interleaved")
    with N.Cluster(NODES, gbit=GBIT, slots=args.ranks // NODES) as c:
        tf, mf = c.state / "demo-topology.json", c.state / "demo-mapping.json"
        tf.write_text(topology_json.dumps(topo))
        mf.write_text(mapping_json.dumps(doc))
        cmd = [mpirun, "-np", str(args.ranks), "--hostfile", str(c.hostfile), str(exe), *program]
        tuned = [sys.executable, "-m", "rankmap", "run", "--mapping", str(mf), "--topology", str(tf), "--hosts",
                 ",".join(c.host_names), "--run-dir", str(c.state / "run"), "--", *cmd]
        env = c.mpi_env()
        times: dict[str, list[float]] = {"default": [], "tuned": []}
        for rep in range(REPS):
            for how in (("default", "tuned") if rep % 2 == 0 else ("tuned", "default")):
                p = c.run(0, cmd if how == "default" else tuned, env=env, timeout=600)
                times[how].append(_time_of(p, f"{how} run {rep + 1}"))
    d, t = statistics.median(times["default"]), statistics.median(times["tuned"])
    con.print(f"measured on {NODES} emulated nodes (real Open MPI over TCP, median of {REPS}): default "
              f"{d * 1e3:.1f} ms -> rankmap run {t * 1e3:.1f} ms ({d / t:.2f}x)")
    con.print(f"  the command: {shlex.join(cmd)}")
    return {"default_s": d, "tuned_s": t, "speedup": d / t, "runs": times, "gbit": GBIT}


def _time_of(p: subprocess.CompletedProcess, what: str) -> float:
    for line in p.stdout.splitlines():
        if line.startswith("TIME "):
            return float(line.split()[1])
    tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]
    raise RankmapError(f"the {what} printed no time: {tail[0]}")
