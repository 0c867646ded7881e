"""The one page and its files. They carry no data, so the guard lets them load without a token.

plotly.js is served from the installed ``plotly`` package, never from a CDN, because the
dashboard often runs on a compute node with no way out.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from rankmap.errors import RankmapError

STATIC = Path(__file__).resolve().parents[1] / "static"

router = APIRouter(include_in_schema=False)


def plotly_js() -> Path:
    """plotly.min.js as shipped inside the plotly Python package."""
    import plotly

    p = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not p.is_file():
        raise RankmapError(f"the installed plotly package lacks {p}: reinstall it (pip install --force-reinstall plotly)")
    return p


def static_files() -> StaticFiles:
    """``web/static`` (the page's ES modules and style), mounted at ``/static`` after this router."""
    return StaticFiles(directory=STATIC)


@router.get("/")
def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


@router.get("/static/plotly.min.js")
def plotly_file() -> FileResponse:
    return FileResponse(plotly_js(), media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"})
