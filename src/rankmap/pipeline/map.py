"""``rankmap map``'s steps: the traffic (a stored job's or a CSV's), the best placement of it on
the nodes asked for, and, on request, the mapping stored for the job.

:func:`place` and :func:`store_mapping` are the steps ``rankmap tune`` and the demo share; the verb
module only parses options and prints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from rankmap.errors import RankmapError

#: seconds per rank that writing the mapping (the JSON document, its text, the report) costs on a
#: loaded 2-core machine, kept out of the solvers' share of the budget (with room to spare)
OUTPUT_SECONDS_PER_RANK = 2.5e-4


def solver_budget(time_budget: float, started: float | None, n: int) -> float:
    """The solvers' share of a command's ``--time-budget``: what start-up and reading the traffic have
    not used, less what writing the answer will take (at least a tenth of the budget)."""
    if started is None:
        return time_budget
    left = time_budget - (time.perf_counter() - started) - OUTPUT_SECONDS_PER_RANK * n
    return max(left, 0.1 * time_budget)


def place(traffic: Any, *, topology: str, nodes: int | None = None, ranks_per_gpu: int = 1, seed: int = 0,
          time_budget: float = 10.0, objective: str = "max", min_gain: float | None = None,
          min_gain_on: str | None = None, kahip: str = "auto", started: float | None = None,
          source: dict | None = None,
          measured: str | None = None, db: str | None = None, as_gpu_resident: bool = False,
          what: str = "the traffic") -> dict:
    """The mapping JSON of the best placement of ``traffic`` on ``nodes`` x ``topology`` (``nodes``
    None: 1, or the count a ``synth:hier:`` topology names); with
    ``measured`` (a stored ``rankmap bench p2p`` run id or ``latest``, in the store at ``db``) the
    topology's links carry the measured GPU-pair bandwidths. ``as_gpu_resident``: place the what-if
    in which the host-staged bytes went GPU to GPU (:mod:`rankmap.mapping.basis`; ``what`` names the
    traffic in the error when none of it is host-staged), and say so in the document. ``min_gain``
    (a fraction; default :data:`rankmap.mapping.solve.MIN_GAIN`): the least gain worth moving ranks
    for, on the figure ``min_gain_on`` names; ``kahip``: whether KaHIP's process mapping seeds the
    search (``auto``: where it is installed). ``started`` (a ``time.perf_counter()`` value): when the
    command began, so that ``time_budget`` covers the whole command (:func:`solver_budget`); None:
    the budget is the solvers' alone."""
    from rankmap.mapping import basis as B
    from rankmap.mapping.inputs import load_topology, node_count
    from rankmap.mapping.platform import Platform, node_model
    from rankmap.mapping.report import to_json
    from rankmap.mapping.solve import MIN_GAIN, place as solve

    nodes = node_count(topology, nodes)
    if time_budget <= 0:
        raise RankmapError(f"--time-budget must be positive, got {time_budget}")
    min_gain = MIN_GAIN if min_gain is None else min_gain
    if not 0 <= min_gain < 1:
        raise RankmapError(f"--min-gain must be at least 0 and under 100 (percent), got {100 * min_gain:g}")
    traffic, fields = B.apply(B.GPU_RESIDENT if as_gpu_resident else B.AS_RECORDED, traffic, what)
    topo = load_topology(topology)
    if measured:
        from rankmap.linkbench.measured import measured_topology
        from rankmap.store import open_store

        topo = measured_topology(topo, open_store(db, existing=True), measured)
    platform = Platform(node_model(topo), nodes)
    pl = solve(platform, traffic, ranks_per_gpu=ranks_per_gpu, seed=seed,
               time_budget=solver_budget(time_budget, started, getattr(traffic, "n", None) or len(traffic)),
               objective=objective, min_gain=min_gain, min_gain_on=min_gain_on, kahip=kahip)
    return to_json(pl, topology=topo.name, ranks_per_gpu=ranks_per_gpu, source=source, basis=fields)


def store_mapping(store: Any, doc: dict, job_id: int | None, *, key: str | None = None,
                  world_size: int | None = None, meta: dict | None = None) -> int:
    """Keep a mapping JSON with its figures, found again by ``rankmap run`` for the job's command
    (``key``/``world_size`` default to the job's) and shown by the dashboard for the job."""
    from rankmap.mapping.basis import AS_RECORDED

    return store.save_mapping(doc, job_id=job_id, key=key, world_size=world_size, topology=doc["topology"],
                              max_before=doc["default"]["max_congestion"], avg_before=doc["default"]["avg_congestion"],
                              max_after=doc["max_congestion"], avg_after=doc["avg_congestion"], optimal=doc["optimal"],
                              meta={"solver": doc["solver"], "nodes": doc["nodes"],
                                    "traffic_basis": doc.get("traffic_basis", AS_RECORDED), **(meta or {})})


@dataclass
class MapResult:
    doc: dict                         # the mapping JSON (with ``mapping_id`` once stored)
    job: dict | None = None           # the stored job placed, if a job was
    mapping_id: int | None = None     # with ``save``: the stored mapping's id


def map_traffic(*, job: str | None = None, traffic_csv: str | None = None, db: str | None = None,
                save: bool = False, as_gpu_resident: bool = False, log: Callable[[str], None] = print,
                **solver: Any) -> MapResult:
    """Place a stored job's traffic (``job``: id or ``latest``) or a traffic CSV's with the ``solver``
    options of :func:`place`; with ``save``, store the mapping for the job (``rankmap run`` and the
    dashboard find it there). ``log`` gets what the reader should know before the solver runs."""
    from rankmap.mapping import traffic as tr

    if save and not job:
        raise RankmapError("--save stores the mapping of a stored job: use it with --job JOB")
    store = row = None
    if traffic_csv:
        traffic = tr.read_csv(traffic_csv)
        source: dict = {"traffic": traffic_csv}
        what = f"{traffic_csv} (host-staged rows need the mem column, which `rankmap export --by-mem` writes)"
    else:
        from rankmap.store import open_store

        store = open_store(db, existing=True)
        traffic, row = tr.from_job(store, job)
        source = {"job": row["id"], "command": row.get("command")}
        what = f"job {row['id']}"
        if row["state"] == "failed":
            from rankmap.store.schema import state_words

            # what a failed run recorded may be only part of its traffic: say so before placing it
            source.update(state=row["state"], exit_status=row["exit_status"])
            log(f"note: job {row['id']} {state_words(row['state'], row['exit_status'])}: placing the traffic it "
                f"recorded before it ended, which may be only part of what the job exchanges")
    doc = place(traffic, source=source, as_gpu_resident=as_gpu_resident, what=what, db=db, **solver)
    res = MapResult(doc, row)
    if save:
        res.mapping_id = doc["mapping_id"] = store_mapping(store, doc, row["id"])
    return res
