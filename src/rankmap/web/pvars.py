"""MPI_T performance variables (PVARs) of a job, as time series per rank for the dashboard's charts.

The MPI shim reads every performance variable the MPI library offers at each flush and at
finalize (``native/mpi/shim_mpit.c``); ingest keeps them in the store's ``pvars`` table, one row
per rank, variable and sample (``store/schema.py``; docs/mpi-capture.md). This module only reads
that table: ``value`` is the sample (a variable of several elements, e.g. one per peer: their
sum), ``t_ns`` the time since the rank's start.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from rankmap.store import Store
from rankmap.store import schema as S

MAX_RANKS = 64  # lines per chart: beyond that the chart shows the first 64 ranks and says so


def variables(store: Store, job_id: int) -> dict[str, Any]:
    """The job's variables: name, class, ranks that sampled it, samples."""
    t = S.pvars
    q = (sa.select(t.c["name"], t.c["class"], sa.func.count(sa.distinct(t.c.rank)), sa.func.count())
         .where(t.c.job == job_id).group_by(t.c["name"], t.c["class"]).order_by(t.c["name"]))
    with store.engine.connect() as c:
        out = [{"name": n, "class": k, "ranks": int(r), "samples": int(m)} for n, k, r, m in c.execute(q)]
    msg = None if out else ("no MPI_T performance variables were recorded for this job (MPI jobs only; the "
                            "MPI library must offer some, and RANKMAP_PVARS=0 turns them off)")
    return {"available": True, "variables": out, "message": msg}


def series(store: Store, job_id: int, var: str) -> dict[str, Any]:
    """One variable over time: per rank, seconds since the rank's start and the value (elements summed)."""
    t = S.pvars
    q = (sa.select(t.c.rank, t.c.t_ns, t.c.value).where(t.c.job == job_id, t.c["name"] == var)
         .order_by(t.c.rank, t.c.t_ns))
    by: dict[int, dict[str, list]] = {}
    with store.engine.connect() as c:
        for r, tn, v in c.execute(q):
            s = by.setdefault(int(r), {"t_s": [], "value": []})
            s["t_s"].append(int(tn) / 1e9)
            s["value"].append(None if v is None else float(v))
    ranks = sorted(by)
    return {"name": var, "ranks": len(ranks), "ranks_shown": min(len(ranks), MAX_RANKS),
            "series": [{"rank": r, **by[r]} for r in ranks[:MAX_RANKS]]}
