"""``rankmap export`` formats: the traffic as CSV, the whole profile as JSON."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

CSV_HEADER = ["src", "dst", "class", "operation", "bytes", "messages"]


def to_csv(store: Any, job_id: int) -> str:
    """One row per (src, dst, class, operation), summed over memory kinds and capture sources."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_HEADER)
    for r in store.traffic(job_id):
        w.writerow([r[k] for k in CSV_HEADER])
    return buf.getvalue()


def to_json(store: Any, job_id: int) -> str:
    return json.dumps(store.profile(job_id), indent=1, default=str) + "\n"
