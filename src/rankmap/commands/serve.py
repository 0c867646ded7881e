"""``rankmap serve [--db URL] [--host H] [--port P] [--topology SPEC] [--token T] [--allow-host NAME]``:
the web dashboard."""

from __future__ import annotations

import argparse
import errno
import os
import socket
import traceback
from types import TracebackType

from rankmap.errors import RankmapError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="web dashboard over the stored jobs (topology, traffic, mappings)",
                       description="Serve the dashboard: jobs, the rank x rank traffic grid, per-operation "
                                   "and over-time charts, link counters, and the topology coloured by "
                                   "link use, with mappings before/after. Read-only over the store.")
    p.add_argument("--db", metavar="URL", help="store URL (default $RANKMAP_DB or the SQLite file in ~/.rankmap)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other address requires a token)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--topology", metavar="SPEC",
                   help="node to draw: 'live' (default), a fixture name, or a topology JSON / nvidia-smi topo -m file")
    p.add_argument("--token", metavar="T", help="bearer token required on /api and /metrics, at least 16 characters "
                   "(default: none on loopback, a new random one otherwise; $RANKMAP_TOKEN also sets it)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="another Host name the server answers to (a reverse proxy's, a tunnel's); repeatable")
    p.set_defaults(func=run)


def _check_port(host: str, port: int) -> None:
    """Fail with one line before uvicorn starts, instead of uvicorn's log lines and exit 1."""
    if not 0 < port < 65536:
        raise RankmapError(f"--port {port}: must be between 1 and 65535")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise RankmapError(f"--host {host!r}: {e.strerror}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            hint = " (choose another --port)" if e.errno == errno.EADDRINUSE else ""
            raise RankmapError(f"cannot listen on {host}:{port}: {e.strerror}{hint}") from None


def _importer(tb: TracebackType | None) -> str | None:
    """The installed package whose import failed (the deepest frame outside rankmap), e.g. 'fastapi'."""
    name = None
    for frame, _ in traceback.walk_tb(tb):
        mod = frame.f_globals.get("__name__", "")
        if mod and not mod.startswith(("rankmap", "importlib")) and mod != "__main__":
            name = mod.split(".")[0]
    return name


def _import_error(e: ImportError) -> RankmapError:
    """A missing or mismatched web dependency as one line naming it and who needs it.

    A dependency's own dependency can be missing too (fastapi needs opentelemetry-api, plotly needs
    narwhals) when packages were installed with ``--no-deps``: say which package asked for it.
    """
    who = _importer(e.__traceback__)
    what = f"the module {e.name!r}" if isinstance(e, ModuleNotFoundError) and e.name else str(e).splitlines()[0]
    missing = isinstance(e, ModuleNotFoundError)
    by = f"{who} needs {what}" if who and who != (e.name or "").split(".")[0] else f"it needs {what}"
    return RankmapError(f"the dashboard cannot start: {by}{', which is not installed' if missing else ''} "
                        f"(pip install 'rankmap[web]' installs the web extra with its dependencies)")


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from rankmap.web.app import create_app
        from rankmap.web.routes.page import plotly_js

        plotly_js()
    except ImportError as e:
        raise _import_error(e) from None
    from rankmap.store import open_store
    from rankmap.web.security import access_for, check_token, is_loopback, new_token

    # a token given by hand is checked first: one that is too short stops serve before anything starts
    token = (check_token(args.token, "--token") if args.token else
             check_token(os.environ["RANKMAP_TOKEN"], "$RANKMAP_TOKEN") if os.environ.get("RANKMAP_TOKEN") else None)
    store = open_store(args.db, lazy=True)      # a database that is down gets a page that says so
    if args.topology and args.topology != "live":
        from rankmap.topology import load

        load(args.topology)  # a mistyped spec fails now, in one line, not later in the page
    _check_port(args.host, args.port)
    generated = False
    if not is_loopback(args.host) and not token:
        token, generated = new_token(), True
    access = access_for(args.host, token, args.allow_host)
    app = create_app(store, args.topology, access)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    if args.host in ("0.0.0.0", "::"):
        shown = socket.gethostname()
    url = f"http://{shown}:{args.port}/"
    down = "" if store.ready else "; the database does not answer yet, the page says so until it does"
    print(f"rankmap: dashboard at {url}  (store {store.url}{down}; Ctrl-C to stop)", flush=True)
    if generated:
        print(f"rankmap: this server needs a token; open {url}#token={token}  "
              f"(scripts and Prometheus: Authorization: Bearer {token})", flush=True)
    elif token:
        print(f"rankmap: this server needs the token given: open {url}#token=<token>", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
