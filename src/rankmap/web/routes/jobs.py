"""The server and its jobs: ``/api/info``, ``/api/jobs`` (the list with totals), ``/api/jobs/{job}``."""

from __future__ import annotations

from fastapi import APIRouter, Query

from rankmap import __version__
from rankmap.web import queries as Q
from rankmap.web.context import Dash

router = APIRouter()


@router.get("/api/info")
def info(d: Dash) -> dict:
    return {"version": __version__, "store": d.store.url, "topology": d.topologies.default,
            "topologies": d.topologies.allowed()}


@router.get("/api/jobs")
def jobs(d: Dash, limit: int = Query(100, ge=1, le=10000)) -> dict:
    rows = d.store.jobs(limit)
    totals = Q.job_totals(d.store, [j["id"] for j in rows])
    for j in rows:
        j.update(totals.get(j["id"], {}))
        j["running"] = j["state"] == "running"
    return {"jobs": rows}


@router.get("/api/jobs/{job}")
def job(d: Dash, job: str) -> dict:
    """One job: its record, its ranks, the node its link views are drawn on by default, and the
    summary the page's header shows (POP metrics of one source)."""
    from rankmap.report.pop import pop_metrics

    store = d.store
    jid = d.job_id(job)
    j = store.job(jid)
    ranks = store.ranks(jid)
    sources = sorted({r["source"] for r in ranks})
    pop_src = "mpi" if "mpi" in sources else (sources[0] if sources else None)
    pop = pop_metrics([r for r in ranks if r["source"] == pop_src])
    withheld = pop.withheld() if pop else None      # metrics from an impossible time inside MPI (report/pop.py)
    pop_shown = pop is not None and not withheld
    by_class = Q.bytes_by_class(store, jid)
    return {
        # the store's state, not a missing exit status: a job whose rankmap died (incomplete) has
        # none either, and read as running it was polled forever with its unflushed ranks unsaid
        "job": j, "running": j["state"] == "running", "ranks": ranks,
        # the node its link views are drawn on unless the page picks one (None: none loads here)
        "topology": d.job_topology(jid, j),
        "summary": {
            "world_size": store.world_size(jid),
            "ranks_reporting": len({r["world_rank"] for r in ranks}),
            "sources": sources,
            "total_bytes": sum(v["bytes"] for v in by_class.values()),
            "total_messages": sum(v["messages"] for v in by_class.values()),
            "bytes_by_class": by_class,
            "bytes_by_mem": store.bytes_by_mem(jid),
            "comm_ns": sum(int(r["comm_ns"] or 0) for r in ranks if r["source"] == pop_src),
            "pop": pop.as_dict() if pop_shown else None, "pop_source": pop_src if pop_shown else None,
            "pop_withheld": withheld,
            "unfinished_ranks": sorted({r["world_rank"] for r in ranks if not r["finalized"]}),
            "problems": [p for r in ranks for p in (r.get("problems") or [])],
        },
    }
