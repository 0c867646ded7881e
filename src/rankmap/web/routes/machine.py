"""The machine page: the newest ``rankmap bench`` run of each kind for a host (``/api/machine``)
and one run with its rows (``/api/bench/{run}``)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from rankmap.errors import RankmapError
from rankmap.store.schema import MAX_ROW_ID
from rankmap.web.context import Dash

router = APIRouter()


@router.get("/api/machine")
def machine(d: Dash, host: str | None = None) -> dict:
    runs = d.store.bench_runs(limit=200)
    hosts = list(dict.fromkeys(r["host"] for r in runs if r["host"]))
    chosen = host if host is not None else (runs[0]["host"] if runs else None)
    if host is not None and host not in hosts:
        raise HTTPException(404, f"no benchmark runs from host {host!r}; hosts: {', '.join(hosts) or 'none'}")
    latest = {kind: d.store.latest_bench_run(kind, chosen) for kind in ("p2p", "mpi", "nccl")}
    history = [{k: r[k] for k in ("id", "kind", "created", "host", "ran", "not_run")} for r in runs
               if chosen is None or r["host"] == chosen][:30]
    return {"hosts": hosts, "host": chosen, "runs": latest, "history": history}


@router.get("/api/bench/{run_id}")
def bench_run(d: Dash, run_id: int) -> dict:
    if not 0 < run_id <= MAX_ROW_ID:  # past the schema's ids: no run (SQLite cannot even compare with it)
        raise HTTPException(404, f"no benchmark run {run_id} in {d.store.url}")
    try:
        return d.store.bench_run(run_id)
    except RankmapError as e:
        raise HTTPException(404, str(e)) from None
