"""The dashboard's HTTP API and its one static page, assembled from the routers of :mod:`.routes`.

Every view of the page is one JSON endpoint, so what the page shows can be fetched, tested and
scripted without a browser. The app only reads the store; it never writes.

Endpoints (all GET), by router:

``routes/page``      ``/`` the page, ``/static/plotly.min.js`` (from the plotly package), ``/static/*``
``routes/jobs``      ``/api/info`` store, default topology, fixtures offered;
                     ``/api/jobs`` the most recent jobs with their totals;
                     ``/api/jobs/{job}`` one job (id or ``latest``): ranks and summary
``routes/job_data``  ``/api/jobs/{job}/matrix`` rank x rank bytes (``class=``, ``what=bytes|messages``);
                     ``.../ops`` bytes, messages, calls, time per operation; ``.../timeline`` bytes per
                     time bucket and class; ``.../cuda`` the CUDA activity report; ``.../links`` link
                     counter samples as rates; ``.../pvars`` MPI_T performance variables (``name=``:
                     one over time, per rank)
``routes/links``     ``/api/topology`` topology + drawing + GPU pair routes (+ loads with ``job=``);
                     ``/api/jobs/{job}/utilisation`` each drawn link's use of its bandwidth per time
                     frame, in bands; ``.../ledger`` per link: measured bytes, bytes the recorded pairs
                     explain (top three pairs), the unexplained remainder; ``.../cluster`` nodes, NICs
                     and the traffic between nodes of a multi-node job
``routes/mapping``   ``/api/jobs/{job}/mapping`` stored mapping (newest, or ``id=``), its traffic basis,
                     link loads before and after, and the job's other mappings
``routes/machine``   ``/api/machine`` the newest ``rankmap bench`` run of each kind for a host, recent
                     runs; ``/api/bench/{run}`` one benchmark run with its rows
``routes/metrics``   ``/metrics`` link counters (dcgm-exporter names) and pair bytes, Prometheus text

Here, in one place, what holds for every endpoint: every request passes
:class:`rankmap.web.security.Guard` first (Host check, token, headers), and a store that does not
answer is a 503 "the database is down" (``store_down: true``, which the page shows in a banner
and polls through), whichever router was asked.
"""

from __future__ import annotations

import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from rankmap import __version__
from rankmap.errors import RankmapError
from rankmap.store import Store, StoreUnavailable
from rankmap.web.context import Dashboard
from rankmap.web.routes import job_data, jobs, links, machine, mapping, metrics, page
from rankmap.web.security import Access, Guard, access_for

ROUTERS = (page, jobs, job_data, links, mapping, machine, metrics)


def _down(why: str) -> JSONResponse:
    return JSONResponse({"detail": f"the database is down: {why}", "store_down": True}, status_code=503)


def _outages(app: FastAPI, store: Store) -> None:
    """What the app answers when the store does not, or a request is bad, for every router alike."""

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
    def bad_input(_request, exc: RankmapError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)


def create_app(store: Store, topology_spec: str | None = None, access: Access | None = None) -> FastAPI:
    """The dashboard over ``store``; ``topology_spec`` (``rankmap topo`` spec) is the node drawn by default.

    ``access`` says which Host names and which token the server accepts; the default is a
    loopback server's (no token, loopback names only). There is no interactive ``/api/docs``:
    Swagger UI would come from a CDN, which a compute node cannot reach and the page must not
    load; ``/api/openapi.json`` describes the API for any OpenAPI viewer.
    """
    app = FastAPI(title="rankmap dashboard", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json")
    app.state.dashboard = Dashboard(store, topology_spec)
    _outages(app, store)
    # added last, so outermost: a request the guard refuses never reaches the store, and every
    # answer, a 503 too, carries its headers
    app.add_middleware(Guard, access=access or access_for("127.0.0.1", None))
    for r in ROUTERS:
        app.include_router(r.router)
    app.mount("/static", page.static_files(), name="static")   # after /static/plotly.min.js
    return app
