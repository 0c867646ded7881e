"""What one job recorded, one view per endpoint: the rank x rank matrix, the operations, the
timeline, the CUDA activity, the link counter samples and the MPI_T performance variables."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query

from rankmap.web import pvars as P
from rankmap.web import queries as Q
from rankmap.web.context import Dash

router = APIRouter(prefix="/api/jobs/{job}")


@router.get("/matrix")
def matrix(d: Dash, job: str, klass: list[str] | None = Query(None, alias="class"),
           what: str = Query("bytes", pattern="^(bytes|messages)$")) -> dict:
    jid = d.job_id(job)
    classes = d.split_classes(klass)
    m = d.store.traffic_matrix(jid, classes or None, what=what)
    return {"job": jid, "what": what, "classes": classes or "all",
            "available_classes": sorted(Q.bytes_by_class(d.store, jid)),
            "world_size": int(m.shape[0]), "matrix": m.tolist(), "total": int(m.sum())}


@router.get("/ops")
def ops(d: Dash, job: str) -> dict:
    jid = d.job_id(job)
    return {"job": jid, "operations": Q.operations(d.store, jid)}


@router.get("/timeline")
def timeline(d: Dash, job: str) -> dict:
    jid = d.job_id(job)
    bucket_ms = (d.store.job(jid).get("meta") or {}).get("bucket_ms")
    out = Q.timeline(d.store, jid, float(bucket_ms or Q.DEFAULT_BUCKET_MS))
    out["bucket_ms_assumed"] = bucket_ms is None
    return {"job": jid, **out}


@router.get("/cuda")
def cuda(d: Dash, job: str) -> dict:
    """The CUDA activity report (docs/cuda-activity.md): table, copy kinds, peer copies, POP, verdicts."""
    from rankmap.report.cuda import report_for_job

    jid = d.job_id(job)
    return {"job": jid, **report_for_job(d.store, jid, gpu_only=True).as_dict()}


@router.get("/links")
def links(d: Dash, job: str) -> dict:
    jid = d.job_id(job)
    return {"job": jid, "series": Q.link_series(d.store.link_samples(jid))}


@router.get("/pvars")
def pvars(d: Dash, job: str, name: str | None = None) -> dict:
    jid = d.job_id(job)
    out = P.variables(d.store, jid)
    if name is not None:
        if name not in {v["name"] for v in out["variables"]}:
            raise HTTPException(404, f"job {jid} recorded no MPI_T performance variable {name!r}")
        out.update(P.series(d.store, jid, name))
    return {"job": jid, **out}
