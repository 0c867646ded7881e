"""Mappings made from a job's profile, kept so that ``rankmap run`` finds them again by command and size."""

from __future__ import annotations

import sqlalchemy as sa

from rankmap.store import jobs
from rankmap.store import schema as S
from rankmap.store.engine import Database, iso, now


def save_mapping(db: Database, mapping: dict, *, job_id: int | None = None, key: str | None = None,
                 world_size: int | None = None, topology: str | None = None,
                 max_before: float | None = None, avg_before: float | None = None,
                 max_after: float | None = None, avg_after: float | None = None,
                 optimal: bool | None = None, meta: dict | None = None) -> int:
    """Keep a mapping (the mapping JSON as the mapping layer writes it); returns its id.

    ``key`` and ``world_size`` default to the job's, so a mapping made from a profile is
    found again by :func:`latest_mapping` for the same command.
    """
    if job_id is not None and (key is None or world_size is None):
        j = jobs.job(db, job_id)
        key = key if key is not None else j["command_key"]
        world_size = world_size if world_size is not None else j["world_size"]
    with db.engine.begin() as c:
        r = c.execute(S.mappings.insert().values(
            job=job_id, created=now(), command_key=key, world_size=world_size, topology=topology,
            mapping=mapping, max_congestion_before=max_before, avg_congestion_before=avg_before,
            max_congestion_after=max_after, avg_congestion_after=avg_after, optimal=optimal,
            meta=meta or {}))
        return int(r.inserted_primary_key[0])


def latest_mapping(db: Database, key: str, world_size: int | None, topology: str | None = None) -> dict | None:
    """The newest mapping saved for this command and size (and topology, when given)."""
    m = S.mappings
    q = sa.select(m).where(m.c.command_key == key).order_by(m.c.id.desc()).limit(1)
    q = q.where(m.c.world_size.is_(None) if world_size is None else m.c.world_size == world_size)
    if topology is not None:
        q = q.where(m.c.topology == topology)
    with db.engine.connect() as c:
        row = c.execute(q).mappings().first()
    if row is None:
        return None
    d = dict(row)
    d["created"] = iso(d["created"])
    return d
