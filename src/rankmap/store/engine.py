"""Where the store is and whether it answers: URLs, opening a database, its schema, the guard.

The default store is a SQLite file under ``${RANKMAP_HOME:-~/.rankmap}``; ``RANKMAP_DB`` or an
explicit URL points elsewhere (``postgresql+psycopg://user@host/db``, so a team shares one
database). :func:`connect` makes the engine and checks (creates, upgrades) the schema;
:class:`Database` is what every concern of the store works on: the engine, the URL as shown, and
:meth:`Database.guard`, the one place where "the database does not answer now" (a server down, a
file locked past its busy wait) becomes :class:`StoreUnavailable`, which callers that must go on (a
running job, a benchmark that measured for half an hour) catch.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from rankmap.errors import RankmapError
from rankmap.home import default_url, normalise_url, rankmap_home  # noqa: F401  (re-exported)
from rankmap.store import migrate
from rankmap.store import schema as S

#: how long a write waits for a SQLite file another process holds locked before the store counts as
#: unavailable (a profile then keeps the batch and retries; see pipeline/profile.py). A URL's own
#: ``?timeout=SECONDS`` takes its place.
SQLITE_BUSY_S = 30.0
#: a wait on such a lock longer than this is said, once per process (:meth:`Database._retry_locked`)
SQLITE_NOTE_S = 1.0

#: Any fixed 64-bit number: the advisory lock that serialises schema creation on PostgreSQL.
_SCHEMA_LOCK_KEY = 0x72616E6B6D6170  # "rankmap"


class StoreUnavailable(RankmapError):
    """The database cannot be reached, or stays locked: the data is not lost, only not stored yet."""

    exit_code = 3


def _first_line(e: BaseException) -> str:
    msg = str(getattr(e, "orig", None) or e).strip().splitlines()
    return msg[0] if msg else type(e).__name__


def shown_url(url: str | None = None) -> str:
    """``url`` (default: the default store) as :attr:`Database.url` shows it, to tell stores apart."""
    return make_url(normalise_url(url or default_url())).render_as_string(hide_password=True)


def iso(t: datetime | None) -> str | None:
    """A stored time as the store's answers give it: UTC, ISO 8601 with microseconds and ``Z``."""
    if t is None:
        return None
    if t.tzinfo is None:  # SQLite hands back naive datetimes; rankmap writes UTC
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now() -> datetime:
    return datetime.now(timezone.utc)


class Database:
    """One store's engine, its URL as shown (no password), and the guard its every use runs in."""

    def __init__(self, engine: Engine, ready: bool = True, read_only: bool = False):
        self.engine = engine
        self.url = engine.url.render_as_string(hide_password=True)
        self.ready = ready          # the schema was checked (see connect(lazy=True))
        self.read_only = read_only  # a SQLite file in a folder that cannot be written (see connect)
        # SQLite waits SQLITE_NOTE_S on a lock per try, and the guarded methods try again up to this
        # long in all (a URL's own ?timeout= is the whole wait, with no note)
        self.busy_s = SQLITE_BUSY_S if engine.dialect.name == "sqlite" and "timeout" not in engine.url.query else 0.0
        self.on_lock: Callable[[str], None] = _say_lock
        self._stmts: dict[tuple, Any] = {}   # statements built once (see statement)

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Database errors that mean "not reachable now" (a server down, a file locked) become
        :class:`StoreUnavailable`; anything else is a bug and propagates as it is."""
        try:
            yield
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as e:
            raise StoreUnavailable(f"the store {self.url} is unreachable: {_first_line(e)}") from None
        except sa.exc.DBAPIError as e:
            if e.connection_invalidated:
                raise StoreUnavailable(f"the store {self.url} is unreachable: {_first_line(e)}") from None
            raise

    def _retry_locked(self, call: Callable[[], Any]) -> Any:
        """``call()`` (one guarded store method: one transaction, so trying again repeats nothing),
        tried again while a SQLite file stays locked by another process, up to :attr:`busy_s` in all.
        Past :data:`SQLITE_NOTE_S` of waiting, :attr:`on_lock` hears it once per process: a verb
        that waits 30 s on a lock must not look hung."""
        waited = 0.0
        while True:
            t0 = time.monotonic()
            try:
                return call()
            except StoreUnavailable as e:
                waited += time.monotonic() - t0
                if not self.busy_s or "locked" not in str(e) or waited >= self.busy_s:
                    raise
                global _LOCK_SAID
                if not _LOCK_SAID:
                    _LOCK_SAID = True
                    self.on_lock(f"the store {self.url} is locked by another process; waiting up to "
                                 f"{self.busy_s:.0f} s for it")

    def statement(self, key: tuple, build: Callable[[], Any]) -> Any:
        """The statement ``key`` names, built by ``build`` the first time only.

        A streaming ingest writes every second with the same few statements; building each anew
        (its clauses, an upsert's ``excluded`` columns) and having SQLAlchemy derive its cache key
        from scratch cost more CPU than the database's work for a small job."""
        st = self._stmts.get(key)
        if st is None:
            st = self._stmts[key] = build()
        return st


_LOCK_SAID = False


def _say_lock(line: str) -> None:
    import sys

    print(f"rankmap: {line}", file=sys.stderr, flush=True)


def ensure_schema(db: Database) -> None:
    """For a store opened while it was away: check (and create) the schema once it answers."""
    if not db.ready:
        _check_version(_create_schema(db.engine), db.url)
        db.ready = True


def _check_version(version: int, shown: str) -> None:
    if version > S.SCHEMA_VERSION:
        raise RankmapError(f"the store {shown} has schema version {version}, newer than this "
                           f"rankmap's ({S.SCHEMA_VERSION}): upgrade rankmap")


def connect(url: str | None = None, *, lazy: bool = False,
            existing: bool = False) -> tuple[Engine, bool] | tuple[Engine, bool, bool]:
    """The engine of the store at ``url``, ``$RANKMAP_DB`` or the default SQLite file (made on
    first use), its schema checked; and whether it was (False only with ``lazy``: a store that
    cannot be reached now, for a dashboard that must say the database is down).

    ``existing``: for the verbs that only read: a SQLite file that ``url`` or ``$RANKMAP_DB`` names
    and that is not there is an error, not a new empty store (a mistyped path listed no jobs, and
    left an empty database, and its folders, behind); the default store is still made on first use.
    Such a verb reads a SQLite file in a folder it cannot write (a read-only mount, another user's
    store) read-only (:func:`_read_only_sqlite`), and a third value, True, says so.
    """
    named = bool(url or os.environ.get("RANKMAP_DB"))
    url = normalise_url(url or default_url())
    try:
        u = make_url(url)
    except Exception:
        raise RankmapError(f"not a database URL: {url!r} (e.g. sqlite:///path.db or postgresql+psycopg://host/db)") from None
    shown = u.render_as_string(hide_password=True)
    backend = u.get_backend_name()
    if backend == "sqlite" and u.database and u.database != ":memory:":
        db = Path(u.database).expanduser()
        if existing and named and not db.exists():
            raise RankmapError(f"no rankmap store at {db}: nothing was stored there (check --db or RANKMAP_DB)")
        if db.exists() and not _writable(db):
            if not existing:
                raise RankmapError(f"the store {shown} is read-only (its file or folder cannot be written): "
                                   f"this verb stores; give it a store it can write with --db")
            return _read_only_sqlite(u, db, shown)
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RankmapError(f"cannot create the database directory {db.parent}: {e.strerror}") from None
    elif backend not in ("sqlite", "postgresql"):
        raise RankmapError(f"unsupported database {shown}: rankmap stores into SQLite or PostgreSQL")
    try:
        kw: dict[str, Any] = {}
        if backend == "sqlite":
            if "timeout" not in u.query:        # connect_args would override the URL's own
                kw["connect_args"] = {"timeout": SQLITE_NOTE_S}     # then tried again: _retry_locked
        else:                       # a server restarted under a long job: reconnect, do not fail
            kw["pool_pre_ping"] = True
        engine = sa.create_engine(u, **kw)
        if backend == "sqlite":
            sa.event.listen(engine, "connect", _sqlite_pragmas)
        _check_version(_schema_when_unlocked(engine, shown, backend == "sqlite" and "timeout" not in u.query), shown)
    except ImportError as e:
        raise RankmapError(f"the driver for {shown} is not installed ({e.name}): pip install 'rankmap[postgres]'") from None
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as e:
        if lazy:
            return engine, False
        raise RankmapError(f"cannot open the store {shown}: {_first_line(e)}") from None
    except sa.exc.SQLAlchemyError as e:
        raise RankmapError(f"cannot open the store {shown}: {_first_line(e)}") from None
    return engine, True


def _schema_when_unlocked(engine: Engine, shown: str, retry: bool) -> int:
    """:func:`_create_schema`, tried again while the SQLite file is locked (as the guarded methods
    are: :meth:`Database._retry_locked`), with the same one note."""
    db = Database.__new__(Database)
    db.url, db.busy_s, db.on_lock = shown, SQLITE_BUSY_S if retry else 0.0, _say_lock

    def call() -> int:
        try:
            return _create_schema(engine)
        except sa.exc.OperationalError as e:
            if "locked" in str(e):
                raise StoreUnavailable(f"the store {shown} is unreachable: {_first_line(e)}") from e
            raise
    try:
        return db._retry_locked(call)
    except StoreUnavailable as e:
        if isinstance(e.__cause__, sa.exc.OperationalError):
            raise e.__cause__ from None
        raise


def _writable(db: Path) -> bool:
    """SQLite writes the file and, beside it, its journal (``-wal``, ``-shm``): both must be writable."""
    return os.access(db, os.W_OK) and os.access(db.parent, os.W_OK)


def _read_only_sqlite(u: Any, db: Path, shown: str) -> tuple[Engine, bool, bool]:
    """A SQLite store opened for reading where nothing may be written beside it. With no ``-wal``
    file left beside it (a store every writer closed), the file alone holds everything, so it is
    opened ``immutable`` (SQLite then needs no ``-shm`` to create); otherwise ``mode=ro``, which
    reads the journal the writers left."""
    import sqlite3
    from urllib.parse import quote

    wal = db.with_name(db.name + "-wal")
    mode = "mode=ro" if wal.exists() and wal.stat().st_size else "immutable=1"
    uri = f"file:{quote(str(db.resolve()))}?{mode}"
    engine = sa.create_engine(u, creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False))
    try:
        with engine.connect() as c:
            version = c.execute(sa.select(sa.func.max(S.meta_info.c.version))).scalar() or 0
    except sa.exc.SQLAlchemyError as e:
        raise RankmapError(f"cannot read the store {shown} (read-only): {_first_line(e)}") from None
    _check_version(version, shown)
    if version < S.SCHEMA_VERSION:
        raise RankmapError(f"the store {shown} is read-only and of an older schema ({version}, this rankmap's is "
                           f"{S.SCHEMA_VERSION}): open it once where it can be written, to upgrade it")
    return engine, True, True


def _create_schema(engine: Engine, attempts: int = 5) -> int:
    """Create the tables if missing and return the store's schema version.

    Several processes may open a new store at the same moment (a job's ``rankmap profile`` and a
    ``rankmap serve`` started beside it): the check-then-create of ``create_all`` would let two of
    them create the same table. On PostgreSQL a transaction-scoped advisory lock serialises them;
    on SQLite the loser of the race gets "already exists" (or a duplicate version row) and simply
    tries again, and then finds the tables made.
    """
    for attempt in range(attempts):
        try:
            with engine.begin() as c:
                if engine.dialect.name == "postgresql":
                    c.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK_KEY})
                old = None
                if sa.inspect(c).has_table(S.meta_info.name):
                    old = c.execute(sa.select(sa.func.max(S.meta_info.c.version))).scalar()
                if old is not None and old < S.SCHEMA_VERSION:
                    migrate.before_create(c, old)
                S.metadata.create_all(c)
                if old is not None and old < S.SCHEMA_VERSION:
                    migrate.after_create(c, old)
                if old is None or old < S.SCHEMA_VERSION:
                    c.execute(S.meta_info.insert().values(version=S.SCHEMA_VERSION))
                    return S.SCHEMA_VERSION
                return int(old)
        except (sa.exc.OperationalError, sa.exc.IntegrityError, sa.exc.ProgrammingError) as e:
            text = str(getattr(e, "orig", e)).lower()
            if attempt + 1 == attempts or not ("already exists" in text or "unique" in text
                                               or "duplicate" in text):
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


#: ``PRAGMA synchronous`` levels $RANKMAP_SQLITE_SYNCHRONOUS may name
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


def sqlite_synchronous() -> str:
    """The ``synchronous`` level of a WAL store: NORMAL unless ``$RANKMAP_SQLITE_SYNCHRONOUS`` says.

    NORMAL is what SQLite advises for WAL: a commit no longer waits for an fsync of the log (only a
    checkpoint does), and the file stays consistent whatever happens; a power cut, not a crash, may
    lose the last commits. A profile commits about once a second beside its job, and each fsync was
    journal work of the file system while the ranks wrote their own records (FULL: set it for the
    durability of every commit against power loss)."""
    v = (os.environ.get("RANKMAP_SQLITE_SYNCHRONOUS") or "NORMAL").strip().upper()
    if v not in SYNCHRONOUS:
        raise RankmapError(f"RANKMAP_SQLITE_SYNCHRONOUS={v}: give one of {', '.join(SYNCHRONOUS)}")
    return v


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    """WAL lets `rankmap serve` read while a profile streams in; foreign keys make deletes cascade;
    :func:`sqlite_synchronous` in WAL (the default journal keeps SQLite's FULL)."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    try:
        wal = str(cur.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower() == "wal"
    except Exception:  # a read-only or network file system: the default journal still works
        wal = False
    if wal:
        cur.execute(f"PRAGMA synchronous={sqlite_synchronous()}")
    cur.close()
