"""``/metrics``: the link counters (dcgm-exporter's names) and pair bytes as Prometheus text
(:mod:`rankmap.web.metrics` renders them)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from rankmap.web.context import Dash

router = APIRouter(include_in_schema=False)


@router.get("/metrics")
def metrics(d: Dash) -> PlainTextResponse:
    return PlainTextResponse(d.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8",
                             headers={"Cache-Control": "no-store"})
