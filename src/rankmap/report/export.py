"""``rankmap export`` formats: the traffic as CSV, the whole profile as JSON."""

from __future__ import annotations

import json
from typing import Any

from rankmap.formats import traffic_csv


def to_csv(store: Any, job_id: int, *, by_mem: bool = False, pair_source: bool = False) -> str:
    """One row per (src, dst, class, operation), summed over memory kinds and capture sources.

    ``by_mem`` keeps the memory kinds apart (one row per kind, a ``mem`` column), which is what
    ``rankmap map --traffic`` needs to route host-staged bytes via the host; ``pair_source`` keeps
    apart where the pairs come from (``call``, ``library``, ``mirror``, ``model``: a last column).
    The six-column form stays the default so that the documented header does not change."""
    rows = store.traffic(job_id, by_mem=by_mem, by_pair_source=pair_source)
    return traffic_csv.dumps(rows, by_mem=by_mem, pair_source=pair_source)


def to_json(store: Any, job_id: int) -> str:
    """The stored profile, plus the CUDA activity report (``cuda_report``: docs/cuda-activity.md)."""
    from rankmap.report.cuda import report_for_job
    data = store.profile(job_id)
    data["cuda_report"] = report_for_job(store, job_id).as_dict()
    return json.dumps(data, indent=1, default=str) + "\n"
