"""A job's mapping panel (``/api/jobs/{job}/mapping``): the newest mapping or the one chosen by
``id=``, the job's other mappings, and the chosen one's link loads before and after."""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import JSONResponse

from rankmap.errors import RankmapError
from rankmap.formats.topology_json import to_dict
from rankmap.mapping import basis as B
from rankmap.mapping.traffic import job_traffic
from rankmap.store.schema import MAX_ROW_ID
from rankmap.topology import Topology
from rankmap.web import queries as Q
from rankmap.web import topoview as V
from rankmap.web.context import Dash, Dashboard

MAPPING_ID = re.compile(r"[1-9][0-9]{0,17}")  # a stored mapping's id as the API takes it (``id=``)

router = APIRouter()


def listed(row: dict) -> dict:
    """A mapping as the panel's selector names it: id, when stored, and its basis in words."""
    return {**{k: row[k] for k in ("id", "created", "topology", "matched")}, **B.stated(row["mapping"])}


def not_its_mapping(d: Dashboard, jid: int, chosen: str, pick: int, panel: dict) -> JSONResponse:
    """The 404 for a mapping id that is not one of the job's: the detail names the job's own and
    where the asked-for one is (its job, or nowhere), and ``owner_job`` says it to the dashboard,
    which offers that job's view of it: an id copied with the wrong job (or a link to a job whose
    command changed) is then one click from what was meant, not a dead end."""
    rows = panel["listed"]
    ids = ", ".join(str(r["id"]) for r in rows) or "none"
    if panel["total"] > len(rows):
        ids += f", and {panel['total'] - len(rows)} older"
    stored, owner = Q.mapping_owner(d.store, pick)
    where = (f"it belongs to job {owner} (GET /api/jobs/{owner}/mapping?id={chosen})" if owner is not None
             else "it belongs to no stored job" if stored else f"no mapping {chosen} is stored")
    return JSONResponse(status_code=404, content={
        "detail": f"mapping {chosen} is not one of job {jid}'s mappings (its mappings: {ids}): {where}",
        "job": jid, "mapping": int(chosen), "stored": stored, "owner_job": owner})


def drawn_on(d: Dashboard, row: dict, spec: str | None) -> tuple[Topology | None, list[str]]:
    """The node to draw a mapping on, and why the ones tried before it would not load.

    The node the mapping was made for comes first: drawing it on another node would show
    loads of a placement nobody chose. The asked-for one, then the server's, stand in."""
    errors = []
    for cand, trusted in ((row.get("topology"), True), (spec, False), (None, False)):
        if cand is None and trusted:
            continue
        try:
            return d.topologies.get(cand, trusted=trusted), errors
        except HTTPException as e:
            errors.append(str(e.detail))
    return None, errors


@router.get("/api/jobs/{job}/mapping")
def mapping(d: Dash, job: str, spec: str | None = None, chosen: str | None = Query(None, alias="id")) -> Any:
    """The job's mapping panel: the newest mapping or the one chosen by ``id=`` (any of the job's,
    listed or older), the newest ``MAPPINGS_LISTED`` of them, how many there are in all, and the
    chosen one's link loads before and after on its traffic basis.

    The drawing follows :func:`rankmap.mapping.basis.stated`, the one rule the page's labels
    follow too: as recorded, the job's traffic as recorded (host-staged bytes via the host); a
    what-if, its own basis (every byte GPU to GPU, as the solver placed them). A basis this version
    does not know is not drawn at all, only labelled with its name and its stored figures quoted,
    with a ``mapping_error`` saying why: drawing it on the recorded traffic (or on a what-if of
    this version's) would show loads its solver never computed, under its figures' name.
    """
    jid = d.job_id(job)
    j = d.store.job(jid)
    if chosen is not None and not MAPPING_ID.fullmatch(chosen):
        raise HTTPException(400, f"mapping id {chosen!r} is not a mapping id: give the id of one of "
                                 f"job {jid}'s mappings (listed under 'mappings')")
    # an id past the schema's 32-bit ids is no one's mapping (PostgreSQL refuses to compare with it): 0 stands in
    pick = None if chosen is None else int(chosen) if int(chosen) <= MAX_ROW_ID else 0
    panel = Q.mapping_panel(d.store, jid, j, pick)
    rows, row = panel["listed"], panel["row"]
    if chosen is not None and row is None:  # never a mapping of another job, whatever id is asked for
        return not_its_mapping(d, jid, chosen, pick, panel)
    counts = {"mappings_total": panel["total"], "mappings_truncated": panel["total"] > len(rows)}
    if row is None:
        return {"job": jid, "mapping": None, "mappings": [], **counts, "message": d.no_mapping(jid, spec)}
    st = B.stated(row["mapping"])
    stored = {f"{k}_{w}": row.get(f"{k}_congestion_{w}") for k in ("max", "avg") for w in ("before", "after")}
    out: dict[str, Any] = {
        "job": jid, "mapping": {**{k: row[k] for k in ("id", "job", "created", "topology", "world_size",
                                                       "optimal", "matched", "meta", "mapping")},
                                **st},  # as recorded or a what-if: the figures below are labelled with it
        "stored": stored,  # the solver's own figures, as saved with the mapping
        # newest first, at most MAPPINGS_LISTED; ``id=`` picks any of the job's, these or older
        "mappings": [listed(r) for r in rows], **counts,
    }
    if not st["known"]:
        out["mapping_error"] = (f"mapping {row['id']} was computed on traffic basis {st['traffic_basis']!r}, "
                                f"which this version of rankmap does not know: only its stored figures are "
                                f"shown, since drawing it on the recorded traffic would show loads its solver "
                                f"did not compute (a rankmap that knows the basis draws it)")
        return out
    topo, errors = drawn_on(d, row, spec)
    if topo is None:
        out["topology_error"] = "; ".join(dict.fromkeys(errors))
        return out
    # drawn on the mapping's own basis, as its stored figures: a known what-if every byte GPU to GPU
    tr = B.routed(st["traffic_basis"], job_traffic(d.store, jid))
    n = tr.n
    out["topology"] = topo.name
    out["drawing"] = {"topology": to_dict(topo), "layout": V.layout(topo)}
    before_map = row["mapping"].get("before") if isinstance(row["mapping"], dict) else None
    try:  # a mapping made for another node or size is shown with its stored figures only
        before = V.placement_for(topo, n, before_map, "mapping.before")
        after = V.parse_placement(row["mapping"], n, f"mapping {row['id']}")
        views = d.view(topo, tr, before), d.view(topo, tr, after)
    except RankmapError as e:
        out["mapping_error"] = str(e)
        return out
    out["before"], out["after"] = views
    out["routed"] = V.congestion_summary(*views)
    return out
