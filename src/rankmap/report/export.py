"""``rankmap export`` formats: the traffic as CSV, the whole profile as JSON."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

CSV_HEADER = ["src", "dst", "class", "operation", "bytes", "messages"]
#: with ``by_mem``: one more column, where the send buffer lived (device, host, managed, unknown)
CSV_HEADER_MEM = CSV_HEADER + ["mem"]


def to_csv(store: Any, job_id: int, *, by_mem: bool = False) -> str:
    """One row per (src, dst, class, operation), summed over memory kinds and capture sources.

    ``by_mem`` keeps the memory kinds apart (one row per kind, a ``mem`` column last), which is what
    ``rankmap map --traffic`` needs to route host-staged bytes via the host; the six-column form stays
    the default so that the documented header does not change."""
    header = CSV_HEADER_MEM if by_mem else CSV_HEADER
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in store.traffic(job_id, by_mem=by_mem):
        w.writerow([r[k] for k in header])
    return buf.getvalue()


def to_json(store: Any, job_id: int) -> str:
    return json.dumps(store.profile(job_id), indent=1, default=str) + "\n"
