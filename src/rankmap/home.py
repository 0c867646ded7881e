"""Where rankmap keeps its files: ``RANKMAP_HOME``, the default store URL, the spellings of store URLs
accepted, and the check a profile makes of a URL before its job starts.

Kept apart from the store itself (:mod:`rankmap.store`, whose package imports SQLAlchemy and NumPy:
a good part of a second): ``rankmap profile`` refuses a mistyped URL before the launch with these
functions alone, and opens the store while the job already runs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote, unquote

from rankmap.errors import RankmapError

EXAMPLE = "e.g. sqlite:///path.db or postgresql+psycopg://host/db"


def rankmap_home() -> Path:
    """Where rankmap keeps its database and run directories unless told otherwise."""
    return Path(os.environ.get("RANKMAP_HOME") or Path.home() / ".rankmap")


def default_url() -> str:
    """``$RANKMAP_DB``, else the SQLite file in :func:`rankmap_home`.

    The file's path is quoted as a URL's database (as SQLAlchemy writes one: ``%``, ``?``, ``#`` and
    non-ASCII letters as ``%XX``), since the URL's reader unquotes it: a home such as
    ``/home/x/p%41c`` written raw put the store in ``/home/x/pAc``, away from its run directories."""
    return os.environ.get("RANKMAP_DB") or sqlite_url(rankmap_home() / "rankmap.db")


def sqlite_url(path: str | os.PathLike) -> str:
    """The URL of the SQLite file ``path``, whatever its name holds."""
    return "sqlite:///" + quote(str(path), safe=" +/")


def normalise_url(url: str) -> str:
    """Accept the spellings people type for PostgreSQL and use the driver rankmap ships (psycopg 3)."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def shown(url: str | None) -> str:
    """``url`` (default: the default store) with its password hidden."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", normalise_url(url or default_url()))


def check_url(url: str | None) -> None:
    """Refuse, in one line, a URL that no store could be opened at: not a URL, not SQLite or
    PostgreSQL, or a SQLite file whose folder cannot be made. What only a connection can tell (a
    server that is down, a wrong password) is left to the opening."""
    u = normalise_url(url or default_url())
    m = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", u, re.S)
    if not m:
        raise RankmapError(f"not a database URL: {u!r} ({EXAMPLE})")
    backend = m.group(1).split("+")[0].lower()
    if backend not in ("sqlite", "postgresql"):
        raise RankmapError(f"unsupported database {shown(u)}: rankmap stores into SQLite or PostgreSQL")
    if backend == "sqlite":
        rest = m.group(2)
        path = unquote(rest[1:].split("?", 1)[0]) if rest.startswith("/") else ""     # as the store reads it
        if path and path != ":memory:":
            db = Path(path).expanduser()
            try:
                db.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise RankmapError(f"cannot create the database directory {db.parent}: {e.strerror}") from None
