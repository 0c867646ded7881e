"""Upgrading a store made by an older rankmap, in place, in the transaction that opens it.

Version 1 -> 2: the traffic rows get ``pair_source`` (NULL for rows stored before).

Version 2 -> 3: jobs get their state (``finished`` when an exit status was stored, else
``incomplete``: a version-1 job without one was never finished), the run id, profiler and heartbeat
columns; the counters get their unique keys (version 1 already kept one row per key); the timeline
goes from rank pairs to sending ranks (summed over peers, width 1); ``ingest_files`` is new (jobs of
version 1 have none: ``rankmap ingest`` of their run directory re-reads it whole).

Version 3 -> 4: a job that ended with a non-zero exit status is ``failed`` (it was ``finished``).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from rankmap.store import schema as S


def before_create(c: Any, version: int) -> None:
    """What must change before ``create_all`` makes the tables that are missing.

    ``create_all`` adds new tables but never new columns of existing ones: those are added here,
    each only if missing (a concurrent opener on SQLite may have added it; its "duplicate column"
    makes the caller try again)."""
    if version < 2 and "pair_source" not in {col["name"] for col in sa.inspect(c).get_columns("traffic")}:
        c.execute(sa.text("ALTER TABLE traffic ADD COLUMN pair_source VARCHAR(8)"))
    if version < 3:
        for col in ("state", "run_uid", "profiler", "heartbeat"):
            column = S.jobs.c[col]
            ddl = f"ALTER TABLE jobs ADD COLUMN {col} {column.type.compile(dialect=c.dialect)}"
            if col == "state":
                ddl += " NOT NULL DEFAULT 'finished'"
            c.execute(sa.text(ddl))
        c.execute(sa.text("UPDATE jobs SET state = CASE WHEN exit_status IS NULL THEN 'incomplete' "
                          "ELSE 'finished' END"))
        for index in ("ix_traffic_job", "ix_op_stats_job", "ix_timeline_job"):
            c.execute(sa.text(f"DROP INDEX IF EXISTS {index}"))
        c.execute(sa.text("ALTER TABLE timeline RENAME TO timeline_v1"))
    if version < 4:
        c.execute(sa.text("UPDATE jobs SET state = 'failed' WHERE state = 'finished' AND exit_status <> 0"))


def after_create(c: Any, version: int) -> None:
    """Data into the new tables, and the indexes ``create_all`` skips on tables that existed."""
    if version < 3:
        c.execute(sa.text("INSERT INTO timeline (job, source, src, class, width, bucket, bytes) "
                          "SELECT job, source, src, class, 1, bucket, SUM(bytes) FROM timeline_v1 "
                          "GROUP BY job, source, src, class, bucket"))
        c.execute(sa.text("DROP TABLE timeline_v1"))
        for table in (S.jobs, S.traffic, S.op_stats):
            for index in table.indexes:
                index.create(c, checkfirst=True)
