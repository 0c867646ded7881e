"""The dashboard's HTTP API and its one static page.

Every view of the page is one JSON endpoint here, so what the page shows can be fetched,
tested and scripted without a browser. The app only reads the store; it never writes.
plotly.js is served from the installed ``plotly`` package, never from a CDN, because the
dashboard often runs on a compute node with no way out.

Endpoints (all GET):

``/api/info``                          store, default topology, fixtures offered
``/api/jobs``                          the most recent jobs with their totals
``/api/jobs/{job}``                    one job (id or ``latest``): ranks and summary
``/api/jobs/{job}/matrix``             rank x rank bytes (``class=``, ``what=bytes|messages``)
``/api/jobs/{job}/ops``                bytes, messages, calls, time per operation
``/api/jobs/{job}/timeline``           bytes per time bucket and class
``/api/jobs/{job}/links``              link counter samples as rates
``/api/jobs/{job}/mapping``            stored mapping (newest, or ``id=``), its traffic basis, link loads
                                       before and after, and the job's other mappings
``/api/jobs/{job}/utilisation``        each drawn link's use of its bandwidth per time frame, in bands
``/api/jobs/{job}/ledger``             per link: measured bytes, bytes the recorded pairs explain (top three
                                       pairs), the unexplained remainder
``/api/jobs/{job}/cluster``            nodes, NICs and the traffic between nodes of a multi-node job
``/api/jobs/{job}/pvars``              MPI_T performance variables (``name=``: one over time, per rank)
``/api/topology``                      topology + drawing + GPU pair routes (+ loads with ``job=``)
``/metrics``                           link counters (dcgm-exporter names) and pair bytes, Prometheus text
``/api/machine``                       the newest ``rankmap bench`` run of each kind for a host, recent runs
``/api/bench/{run}``                   one benchmark run with its rows

Every request passes :class:`rankmap.web.security.Guard` (Host check, token, headers).
"""

from __future__ import annotations

import re
import shlex
import threading
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles

from rankmap import __version__
from rankmap.errors import RankmapError, verb
from rankmap.mapping import basis as B
from rankmap.mapping.traffic import job_matrices
from rankmap.store import Store, StoreUnavailable
from rankmap.store.schema import MAX_ROW_ID
from rankmap.topology import Topology
from rankmap.formats.record import CLASSES
from rankmap.formats.topology_json import to_dict
from rankmap.web import cluster as C
from rankmap.web import metrics as M
from rankmap.web import pvars as P
from rankmap.web import queries as Q
from rankmap.web import topoview as V
from rankmap.web import utilisation as U
from rankmap.web.security import Access, Guard, access_for

STATIC = Path(__file__).with_name("static")
MAPPING_ID = re.compile(r"[1-9][0-9]{0,17}")  # a stored mapping's id as the API takes it (``id=``)


def plotly_js() -> Path:
    """plotly.min.js as shipped inside the plotly Python package."""
    import plotly

    p = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not p.is_file():
        raise RankmapError(f"the installed plotly package lacks {p}: reinstall it (pip install --force-reinstall plotly)")
    return p


class _Topologies:
    """Topologies by spec, loaded once: live discovery costs an NVML walk, fixtures a JSON parse.

    A spec that fails is remembered with its message, so a page polling every two seconds does
    not retry a discovery that cannot succeed on this machine.
    """

    def __init__(self, default: str | None) -> None:
        self.default = default or "live"
        self._cache: dict[str, Topology | RankmapError] = {}
        self._lock = threading.Lock()

    def allowed(self) -> list[str]:
        from rankmap.topology import fixtures

        return list(dict.fromkeys([self.default, "live", *fixtures.NAMES]))

    def get(self, spec: str | None, *, trusted: bool = False) -> Topology:
        """``trusted`` specs come from the store (a mapping's topology); others must be offered.

        Specs from a request are limited to the server's own, ``live`` and the fixtures, so the
        API cannot be used to read arbitrary files of the machine it runs on.
        """
        spec = spec or self.default
        if not trusted and spec not in self.allowed():
            raise HTTPException(400, f"topology {spec!r} is not offered here; choose one of "
                                     f"{', '.join(self.allowed())} or start rankmap serve with --topology")
        with self._lock:
            if spec not in self._cache:
                from rankmap.topology import load

                try:
                    self._cache[spec] = load(spec)
                except RankmapError as e:
                    self._cache[spec] = e
            t = self._cache[spec]
        if isinstance(t, RankmapError):
            hint = " (pick another topology in the page, or start rankmap serve with --topology SPEC)"
            raise HTTPException(404, f"topology {spec!r} is not available: {t}{hint}")
        return t


def _down(why: str) -> JSONResponse:
    return JSONResponse({"detail": f"the database is down: {why}", "store_down": True}, status_code=503)


def _ints(x: Any) -> Any:
    """numpy scalars and arrays as plain JSON numbers."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    return x


def create_app(store: Store, topology_spec: str | None = None, access: Access | None = None) -> FastAPI:
    """The dashboard over ``store``; ``topology_spec`` (``rankmap topo`` spec) is the node drawn by default.

    ``access`` says which Host names and which token the server accepts; the default is a
    loopback server's (no token, loopback names only). There is no interactive ``/api/docs``:
    Swagger UI would come from a CDN, which a compute node cannot reach and the page must not
    load; ``/api/openapi.json`` describes the API for any OpenAPI viewer.
    """
    app = FastAPI(title="rankmap dashboard", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json")
    app.add_middleware(Guard, access=access or access_for("127.0.0.1", None))
    topologies = _Topologies(topology_spec)
    app.state.store = store
    app.state.topologies = topologies

    @app.middleware("http")
    async def schema_first(request, call_next):
        """A store that was down when the server started gets its schema checked once it answers."""
        if request.url.path.startswith("/api/") and request.url.path != "/api/info" and not store.ready:
            try:
                store.ensure_schema()
            except StoreUnavailable as e:
                return _down(str(e))
        return await call_next(request)

    @app.exception_handler(StoreUnavailable)
    def unavailable(_request, e: StoreUnavailable) -> JSONResponse:
        return _down(str(e))

    @app.exception_handler(sa.exc.OperationalError)
    @app.exception_handler(sa.exc.InterfaceError)
    def unreachable(_request, e: Exception) -> JSONResponse:   # the dashboard's own queries
        msg = str(getattr(e, "orig", None) or e).strip().splitlines()
        return _down(f"the store {store.url} is unreachable: {msg[0] if msg else type(e).__name__}")

    @app.exception_handler(RankmapError)
    def _rankmap_error(_request, exc: RankmapError) -> JSONResponse:  # noqa: ANN001
        return JSONResponse({"detail": str(exc)}, status_code=422)

    def job_id(spec: str) -> int:
        try:
            return store.resolve_job(spec)
        except StoreUnavailable:
            raise
        except RankmapError as e:
            raise HTTPException(404, str(e)) from None

    def job_matrix(jid: int, classes: list[str] | None = None, what: str = "bytes") -> np.ndarray:
        return store.traffic_matrix(jid, classes or None, what=what)

    def split_classes(values: list[str] | None) -> list[str]:
        """``class=`` values; a name that is no traffic class is refused (a typo would read as no traffic)."""
        out = [c for v in values or [] for c in v.split(",") if c and c != "all"]
        bad = [c for c in out if c not in CLASSES]
        if bad:
            raise HTTPException(400, f"class {bad[0]!r} is not a traffic class; choose {', '.join(CLASSES)} or all")
        return out

    # ------------------------------------------------------------------ page
    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/static/plotly.min.js", include_in_schema=False)
    def plotly_file() -> FileResponse:
        return FileResponse(plotly_js(), media_type="text/javascript",
                            headers={"Cache-Control": "public, max-age=86400"})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    # ------------------------------------------------------------------- api
    @app.get("/api/info")
    def info() -> dict:
        return {"version": __version__, "store": store.url, "topology": topologies.default,
                "topologies": topologies.allowed()}

    @app.get("/api/jobs")
    def jobs(limit: int = Query(100, ge=1, le=10000)) -> dict:
        rows = store.jobs(limit)
        totals = Q.job_totals(store, [j["id"] for j in rows])
        for j in rows:
            j.update(totals.get(j["id"], {}))
            j["running"] = j["state"] == "running"
        return {"jobs": rows}

    @app.get("/api/jobs/{job}")
    def job(job: str) -> dict:
        jid = job_id(job)
        from rankmap.report.pop import pop_metrics

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

    @app.get("/api/jobs/{job}/matrix")
    def matrix(job: str, klass: list[str] | None = Query(None, alias="class"),
               what: str = Query("bytes", pattern="^(bytes|messages)$")) -> dict:
        jid = job_id(job)
        classes = split_classes(klass)
        m = job_matrix(jid, classes, what)
        return {"job": jid, "what": what, "classes": classes or "all",
                "available_classes": sorted(Q.bytes_by_class(store, jid)),
                "world_size": int(m.shape[0]), "matrix": m.tolist(), "total": int(m.sum())}

    @app.get("/api/jobs/{job}/ops")
    def ops(job: str) -> dict:
        jid = job_id(job)
        return {"job": jid, "operations": Q.operations(store, jid)}

    @app.get("/api/jobs/{job}/timeline")
    def timeline(job: str) -> dict:
        jid = job_id(job)
        meta = store.job(jid).get("meta") or {}
        bucket_ms = meta.get("bucket_ms")
        out = Q.timeline(store, jid, float(bucket_ms or Q.DEFAULT_BUCKET_MS))
        out["bucket_ms_assumed"] = bucket_ms is None
        return {"job": jid, **out}

    @app.get("/api/jobs/{job}/cuda")
    def cuda(job: str) -> dict:
        """The CUDA activity report (docs/cuda-activity.md): table, copy kinds, peer copies, POP, verdicts."""
        from rankmap.report.cuda import report_for_job
        jid = job_id(job)
        return {"job": jid, **report_for_job(store, jid, gpu_only=True).as_dict()}

    @app.get("/api/jobs/{job}/links")
    def links(job: str) -> dict:
        jid = job_id(job)
        return {"job": jid, "series": Q.link_series(store.link_samples(jid))}

    def no_mapping(jid: int, spec: str | None) -> str:
        """What to run for a job without a mapping: commands that work against this very store.

        On a node that loads here (the asked-for one, the server's, else a fixture), with as many
        nodes as the job had hosts and the ranks per GPU it needs, so the command runs as given:
        ``live`` without an NVIDIA driver (a laptop, a login node) would only fail again."""
        from rankmap.store import shown_url
        from rankmap.topology import fixtures

        db = "" if store.url == shown_url() else f" --db {shlex.quote(store.url)}"
        failed = []
        for cand in dict.fromkeys([spec or topologies.default, topologies.default, *fixtures.NAMES]):
            try:
                topo = topologies.get(cand)
                break
            except HTTPException:
                failed.append(cand)
        nodes = max(1, len(store.job(jid).get("hosts") or []))
        per_gpu = -(-store.world_size(jid) // max(1, len(topo.gpus) * nodes))
        flags = f"--topology {shlex.quote(cand)}" + (f" --nodes {nodes}" if nodes > 1 else "") + \
            (f" --ranks-per-gpu {per_gpu}" if per_gpu > 1 else "")
        why = ""
        if failed:
            others = [f"{c!r}" for c in failed if c != "live"]
            why = " (" + "; ".join(
                ([f"{', '.join(others)} {verb(len(others), 'does', 'do')} not load here"] if others else []) +
                (["live does not load here: it discovers the node it runs on through its NVIDIA driver (on the "
                  "job's node it works); anywhere, `--topology nvidia-smi-topo.txt` reads the output of "
                  "`nvidia-smi topo -m` saved on that node"] if "live" in failed else []) +
                [f"{cand} is a built-in node: `rankmap topo --list` names them all"]) + ")"
        tune = "" if cand == "live" else f" --topology {shlex.quote(cand)}"
        return (f"no mapping for job {jid}: `rankmap map --job {jid} {flags}{db} --save` places its stored profile "
                f"and stores the mapping{why}; `rankmap tune{tune}{db} -- <its command>` profiles it again and "
                f"stores one")

    def view(topo: Topology, m: np.ndarray, placement: V.Placement, host: np.ndarray | None) -> dict:
        v = V.link_loads(topo, m, placement, host)
        v["ranks_on_gpu"] = {str(g): rs for g, rs in V.ranks_on_gpus(placement, m.shape[0]).items()}
        return v

    def listed(row: dict) -> dict:
        """A mapping as the panel's selector names it: id, when stored, and its basis in words."""
        return {**{k: row[k] for k in ("id", "created", "topology", "matched")}, **B.stated(row["mapping"])}

    def not_its_mapping(jid: int, chosen: str, pick: int, panel: dict) -> JSONResponse:
        """The 404 for a mapping id that is not one of the job's: the detail names the job's own and
        where the asked-for one is (its job, or nowhere), and ``owner_job`` says it to the dashboard,
        which offers that job's view of it: an id copied with the wrong job (or a link to a job whose
        command changed) is then one click from what was meant, not a dead end."""
        rows = panel["listed"]
        ids = ", ".join(str(r["id"]) for r in rows) or "none"
        if panel["total"] > len(rows):
            ids += f", and {panel['total'] - len(rows)} older"
        stored, owner = Q.mapping_owner(store, pick)
        where = (f"it belongs to job {owner} (GET /api/jobs/{owner}/mapping?id={chosen})" if owner is not None
                 else "it belongs to no stored job" if stored else f"no mapping {chosen} is stored")
        return JSONResponse(status_code=404, content={
            "detail": f"mapping {chosen} is not one of job {jid}'s mappings (its mappings: {ids}): {where}",
            "job": jid, "mapping": int(chosen), "stored": stored, "owner_job": owner})

    @app.get("/api/jobs/{job}/mapping")
    def mapping(job: str, spec: str | None = None, chosen: str | None = Query(None, alias="id")) -> Any:
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
        jid = job_id(job)
        j = store.job(jid)
        if chosen is not None and not MAPPING_ID.fullmatch(chosen):
            raise HTTPException(400, f"mapping id {chosen!r} is not a mapping id: give the id of one of "
                                     f"job {jid}'s mappings (listed under 'mappings')")
        # an id past the schema's 32-bit ids is no one's mapping (PostgreSQL refuses to compare with it): 0 stands in
        pick = None if chosen is None else int(chosen) if int(chosen) <= MAX_ROW_ID else 0
        panel = Q.mapping_panel(store, jid, j, pick)
        rows, row = panel["listed"], panel["row"]
        if chosen is not None and row is None:  # never a mapping of another job, whatever id is asked for
            return not_its_mapping(jid, chosen, pick, panel)
        counts = {"mappings_total": panel["total"], "mappings_truncated": panel["total"] > len(rows)}
        if row is None:
            return {"job": jid, "mapping": None, "mappings": [], **counts, "message": no_mapping(jid, spec)}
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
        # The node the mapping was made for comes first: drawing it on another node would show
        # loads of a placement nobody chose. The asked-for one, then the server's, stand in.
        topo = None
        errors = []
        for cand, trusted in ((row.get("topology"), True), (spec, False), (None, False)):
            if topo is not None or (cand is None and trusted):
                continue
            try:
                topo = topologies.get(cand, trusted=trusted)
            except HTTPException as e:
                errors.append(str(e.detail))
        if topo is None:
            out["topology_error"] = "; ".join(dict.fromkeys(errors))
            return out
        m, host = job_matrices(store, jid)
        if st["what_if"]:  # a known what-if (see above)
            host = None  # drawn on the mapping's own basis, as its stored figures: every byte GPU to GPU
        n = m.shape[0]
        out["topology"] = topo.name
        out["drawing"] = {"topology": to_dict(topo), "layout": V.layout(topo)}
        before_map = row["mapping"].get("before") if isinstance(row["mapping"], dict) else None
        try:  # a mapping made for another node or size is shown with its stored figures only
            before = V.placement_for(topo, n, before_map, "mapping.before")
            after = V.parse_placement(row["mapping"], n, f"mapping {row['id']}")
            views = view(topo, m, before, host), view(topo, m, after, host)
        except RankmapError as e:
            out["mapping_error"] = str(e)
            return out
        out["before"], out["after"] = views
        out["routed"] = V.congestion_summary(*views)
        return out

    def placement_of(jid: int, j: dict, topo: Topology, n: int, placement: str) -> V.Placement:
        """Where the job's ranks ran on ``topo``: 'mapped' (its mapping), 'default' (r mod G), or
        'auto' (the placement its record names, else the default)."""
        mapping_used: Any = None
        where = "default"
        if placement == "mapped":
            row = Q.mapping_panel(store, jid, j, limit=1)["row"]
            if row is None:
                raise HTTPException(404, no_mapping(jid, None))
            mapping_used, where = row["mapping"], f"mapping {row['id']}"
        elif placement == "auto" and (j.get("meta") or {}).get("mapping") is not None:
            mapping_used, where = j["meta"]["mapping"], f"job {jid} meta.mapping"
        hosts = C.rank_hosts(store.ranks(jid), n) if mapping_used is None else None
        return V.placement_for(topo, n, mapping_used, where, hosts)

    def thresholds(bands: str | None) -> tuple[float, ...]:
        try:
            return U.parse_thresholds(bands)
        except RankmapError as e:
            raise HTTPException(400, str(e)) from None

    @app.get("/api/jobs/{job}/utilisation")
    def utilisation(job: str, spec: str | None = None, bands: str | None = None,
                    placement: str = Query("auto", pattern="^(auto|default|mapped)$")) -> dict:
        jid = job_id(job)
        topo = topologies.get(spec)
        j = store.job(jid)
        n = store.world_size(jid)
        p = placement_of(jid, j, topo, n, placement) if n else V.Placement([], None, "none (no ranks)")
        return U.utilisation(store, j, topo, p, n, thresholds(bands))

    @app.get("/api/jobs/{job}/ledger")
    def link_ledger(job: str, spec: str | None = None,
                    placement: str = Query("auto", pattern="^(auto|default|mapped)$")) -> dict:
        return ledger_view(job_id(job), spec, placement)

    def ledger_view(jid: int, spec: str | None, placement: str) -> dict:
        from rankmap.web.ledger import ledger

        topo = topologies.get(spec)
        j = store.job(jid)
        m, host = job_matrices(store, jid)
        return ledger(store, j, topo, placement_of(jid, j, topo, m.shape[0], placement), m, host)

    @app.get("/api/jobs/{job}/cluster")
    def cluster(job: str, spec: str | None = None, bands: str | None = None) -> dict:
        jid = job_id(job)
        topo = topologies.get(spec)
        j = store.job(jid)
        m, host = job_matrices(store, jid)
        p = placement_of(jid, j, topo, m.shape[0], "auto")
        span = U.job_span_s(store, j, U.job_zero_ns(store, j))
        secs = 1.0 if span is None else max(span, 1e-3)
        return {"job": jid, "topology": topo.name, **C.cluster_view(topo, m, p, secs, thresholds(bands), host)}

    @app.get("/api/jobs/{job}/pvars")
    def pvars(job: str, name: str | None = None) -> dict:
        jid = job_id(job)
        out = P.variables(store, jid)
        if name is not None:
            if name not in {v["name"] for v in out["variables"]}:
                raise HTTPException(404, f"job {jid} recorded no MPI_T performance variable {name!r}")
            out.update(P.series(store, jid, name))
        return {"job": jid, **out}

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(M.render(store), media_type="text/plain; version=0.0.4; charset=utf-8",
                                 headers={"Cache-Control": "no-store"})

    @app.get("/api/machine")
    def machine(host: str | None = None) -> dict:
        runs = store.bench_runs(limit=200)
        hosts = list(dict.fromkeys(r["host"] for r in runs if r["host"]))
        chosen = host if host is not None else (runs[0]["host"] if runs else None)
        if host is not None and host not in hosts:
            raise HTTPException(404, f"no benchmark runs from host {host!r}; hosts: {', '.join(hosts) or 'none'}")
        latest = {kind: store.latest_bench_run(kind, chosen) for kind in ("p2p", "mpi", "nccl")}
        history = [{k: r[k] for k in ("id", "kind", "created", "host", "ran", "not_run")} for r in runs
                   if chosen is None or r["host"] == chosen][:30]
        return {"hosts": hosts, "host": chosen, "runs": latest, "history": history}

    @app.get("/api/bench/{run_id}")
    def bench_run(run_id: int) -> dict:
        if not 0 < run_id <= MAX_ROW_ID:  # past the schema's ids: no run (SQLite cannot even compare with it)
            raise HTTPException(404, f"no benchmark run {run_id} in {store.url}")
        try:
            return store.bench_run(run_id)
        except RankmapError as e:
            raise HTTPException(404, str(e)) from None

    @app.get("/api/topology")
    def topology(spec: str | None = None, job: str | None = None,
                 placement: str = Query("auto", pattern="^(auto|default|mapped)$"),
                 klass: list[str] | None = Query(None, alias="class")) -> dict:
        topo = topologies.get(spec)
        out: dict[str, Any] = {"spec": spec or topologies.default, **V.topology_json(topo)}
        if job is None:
            return out
        jid = job_id(job)
        m, host = job_matrices(store, jid, split_classes(klass))
        p = placement_of(jid, store.job(jid), topo, m.shape[0], placement)
        out["job"] = jid
        out["load"] = view(topo, m, p, host)
        return out

    return app
