"""The dashboard's machine page data from the stored `rankmap bench` runs: one PASS/FAIL line.

    PYTHONPATH=src python3 gpu/machine_page_check.py [STORE_URL]     # default: rankmap's default store

Asks the real app for ``/api/machine`` through starlette's TestClient (no server, no port). From
starlette 1.10 on that client wants the ``httpx2`` package and, given only ``httpx``, uses it with a
deprecation warning. The test suite installs httpx2; the GPU machine offers httpx. So httpx2 is used
when present (starlette picks it itself, without a word); with httpx alone, that one warning is
expected here and silenced, as nothing else is; with neither, the check fails with one line.
"""

from __future__ import annotations

import sys
import warnings


def test_client_class() -> type:
    """starlette's TestClient on httpx2, else on httpx without its deprecation warning."""
    try:
        import httpx2  # noqa: F401  (only asked whether it is there)
    except ImportError:
        warnings.filterwarnings("ignore", message=r"Using `httpx` with `starlette\.testclient` is deprecated")
    from fastapi.testclient import TestClient
    return TestClient


def main(argv: list[str]) -> int:
    from rankmap.store import open_store
    from rankmap.web.app import create_app

    try:
        client_class = test_client_class()
    except (ImportError, RuntimeError) as e:   # starlette says RuntimeError when neither client is there
        print(f"FAIL dashboard machine page data: no HTTP client for starlette's TestClient "
              f"({str(e).splitlines()[0]}); install httpx2 or httpx")
        return 1
    app = create_app(open_store(argv[0] if argv else None), "live")
    m = client_class(app, base_url="http://127.0.0.1:8000").get("/api/machine").json()
    kinds = {k: len(v["rows"]) for k, v in m["runs"].items() if v}
    print(("PASS" if kinds else "FAIL") + f" dashboard machine page data: rows per benchmark kind {kinds}")
    return 0 if kinds else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
