"""A job on the machine's links: the node drawn with the job's link loads (``/api/topology``), each
link's use of its bandwidth over time (``utilisation``), the link ledger, and the nodes and NICs
of a multi-node job (``cluster``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from rankmap.mapping.traffic import job_traffic
from rankmap.web import cluster as C
from rankmap.web import topoview as V
from rankmap.web import utilisation as U
from rankmap.web.context import PLACEMENTS, Dash

router = APIRouter()


@router.get("/api/topology")
def topology(d: Dash, spec: str | None = None, job: str | None = None,
             placement: str = Query("auto", pattern=PLACEMENTS),
             klass: list[str] | None = Query(None, alias="class")) -> dict:
    """The node (``spec``; else with ``job=`` the job's own, else the server's), its drawing and GPU
    pair routes; with ``job=``, that job's link loads on it."""
    if job is None:
        topo = d.topologies.get(spec)
        return {"spec": spec or d.topologies.default, **V.topology_json(topo)}
    jid = d.job_id(job)
    j = d.store.job(jid)
    topo = d.topology(spec, jid, j)
    out: dict[str, Any] = {"spec": spec or d.job_topology(jid, j)["spec"], **V.topology_json(topo)}
    tr = job_traffic(d.store, jid, d.split_classes(klass))
    p = d.placement_of(jid, j, topo, tr.n, placement)
    out["job"] = jid
    out["load"] = d.view(topo, tr, p)
    return out


@router.get("/api/jobs/{job}/utilisation")
def utilisation(d: Dash, job: str, spec: str | None = None, bands: str | None = None,
                placement: str = Query("auto", pattern=PLACEMENTS)) -> dict:
    jid = d.job_id(job)
    j = d.store.job(jid)
    topo = d.topology(spec, jid, j)
    n = d.store.world_size(jid)
    p = d.placement_of(jid, j, topo, n, placement) if n else V.Placement([], None, "none (no ranks)")
    return U.utilisation(d.store, j, topo, p, n, d.thresholds(bands))


@router.get("/api/jobs/{job}/ledger")
def link_ledger(d: Dash, job: str, spec: str | None = None,
                placement: str = Query("auto", pattern=PLACEMENTS)) -> dict:
    from rankmap.web.ledger import ledger

    jid = d.job_id(job)
    j = d.store.job(jid)
    topo = d.topology(spec, jid, j)
    tr = job_traffic(d.store, jid)
    return ledger(d.store, j, topo, d.placement_of(jid, j, topo, tr.n, placement), tr)


@router.get("/api/jobs/{job}/cluster")
def cluster(d: Dash, job: str, spec: str | None = None, bands: str | None = None) -> dict:
    jid = d.job_id(job)
    j = d.store.job(jid)
    topo = d.topology(spec, jid, j)
    tr = job_traffic(d.store, jid)
    p = d.placement_of(jid, j, topo, tr.n, "auto")
    span = U.job_span_s(d.store, j, U.job_zero_ns(d.store, j))
    secs = 1.0 if span is None else max(span, 1e-3)
    return {"job": jid, "topology": topo.name, **C.cluster_view(topo, tr, p, secs, d.thresholds(bands))}
