"""MPI_T performance variables (PVARs) of a job, as time series per rank for the dashboard's charts.

The MPI shim reads every performance variable the MPI library offers at each flush and at
finalize (``native/mpi/shim_mpit.c``); ingest keeps them in the store's ``pvars`` table, one row
per rank, variable and sample. This module only reads that table. It finds its columns by name
(``rank`` or ``world_rank``; ``name``; ``class``/``cls``; ``t_ns``; ``value`` or ``values``, a list
for variables with several elements, which are summed) so that a store without the table, or an
older one, gives "no variables" instead of an error.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from rankmap.store import Store
from rankmap.store import schema as S

MAX_RANKS = 64  # lines per chart: beyond that the chart shows the first 64 ranks and says so


def _table() -> sa.Table | None:
    return S.metadata.tables.get("pvars")


def _col(t: sa.Table, *names: str) -> sa.Column | None:
    return next((t.c[n] for n in names if n in t.c), None)


def _value(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        vals = [float(x) for x in v if x is not None]
        return sum(vals) if vals else None
    return float(v)


def variables(store: Store, job_id: int) -> dict[str, Any]:
    """The job's variables: name, class, ranks that sampled it, samples, its last value summed over ranks."""
    t = _table()
    cols = t is not None and all(_col(t, *n) is not None for n in (("rank", "world_rank"), ("name",), ("t_ns",)))
    if not cols:
        return {"available": False, "variables": [],
                "message": "this store keeps no MPI_T performance variables (its rankmap predates them)"}
    rank, name, cls = _col(t, "rank", "world_rank"), t.c["name"], _col(t, "class", "cls")
    q = (sa.select(name, *( [cls] if cls is not None else []), sa.func.count(sa.distinct(rank)), sa.func.count())
         .where(t.c.job == job_id).group_by(name, *([cls] if cls is not None else [])).order_by(name))
    with store.engine.connect() as c:
        rows = c.execute(q).all()
    out = []
    for r in rows:
        d = {"name": r[0], "class": r[1] if cls is not None else None, "ranks": int(r[-2]), "samples": int(r[-1])}
        out.append(d)
    msg = None if out else ("no MPI_T performance variables were recorded for this job (MPI jobs only; the "
                            "MPI library must offer some, and RANKMAP_PVARS=0 turns them off)")
    return {"available": True, "variables": out, "message": msg}


def series(store: Store, job_id: int, var: str) -> dict[str, Any]:
    """One variable over time: per rank, seconds since the rank's start and the value (elements summed)."""
    t = _table()
    if t is None:
        return {"name": var, "series": [], "ranks_shown": 0, "ranks": 0}
    rank, val = _col(t, "rank", "world_rank"), _col(t, "values", "value")
    q = (sa.select(rank, t.c.t_ns, val).where(t.c.job == job_id, t.c["name"] == var)
         .order_by(rank, t.c.t_ns))
    by: dict[int, dict[str, list]] = {}
    with store.engine.connect() as c:
        for r, tn, v in c.execute(q):
            s = by.setdefault(int(r), {"t_s": [], "value": []})
            s["t_s"].append(int(tn) / 1e9)
            s["value"].append(_value(v))
    ranks = sorted(by)
    return {"name": var, "ranks": len(ranks), "ranks_shown": min(len(ranks), MAX_RANKS),
            "series": [{"rank": r, **by[r]} for r in ranks[:MAX_RANKS]]}
