"""Benchmark results the store could not take, kept in a file until it can.

A benchmark measures for minutes (half an hour for a full ``bench mpi``); a store locked by another
program or a server gone by the end must not lose that. :func:`store_or_keep` writes the run's JSON
to ``${RANKMAP_HOME:-~/.rankmap}/bench/`` *before* it asks the store, so even a process killed in
SQLite's busy wait leaves it behind; once stored, the file goes. When the store cannot take it,
:class:`NotStored` says in one line where the file is and the command that stores it later,
``rankmap bench store FILE --db URL`` (:func:`store_file`). Storing a file twice keeps the run once
(the store knows a run by its kind, host and the time it was measured).
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path
from typing import Any, cast

from rankmap.linkbench.rows import read_run
from rankmap.errors import RankmapError
from rankmap.store import BenchRunDoc, Store, StoreUnavailable, rankmap_home


class NotStored(RankmapError):
    """The store did not take a run: where it is kept instead, and how to store it later."""

    exit_code = StoreUnavailable.exit_code


def kept_dir() -> Path:
    return rankmap_home() / "bench"


def store_command(path: Path, url: str) -> str:
    return f"rankmap bench store {shlex.quote(str(path))} --db {shlex.quote(url)}"


def keep(doc: dict[str, Any]) -> Path | None:
    """Write ``doc`` to a new file of :func:`kept_dir` (else of the temporary directory); its path,
    None when neither can be written."""
    stamp = str(doc.get("created") or "").replace(":", "").replace("-", "").split(".")[0] or "now"
    text = json.dumps(doc, indent=1) + "\n"
    for folder in (kept_dir(), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{doc['kind']}-", suffix=".json", dir=folder)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            path = folder / f"{doc['kind']}-{stamp}-{os.getpid()}.json"
            os.replace(tmp, path)      # whole or not at all: a reader never sees half a run
            return path
        except OSError:
            continue
    return None


def store_or_keep(doc: dict[str, Any], store: Store) -> int:
    """Store the run ``doc`` (``BenchRun.to_json()``); its run id. Raises :class:`NotStored` when
    the store does not answer, the run kept in a file."""
    path = keep(doc)
    try:
        rid = store.save_bench_run(cast(BenchRunDoc, doc))
    except StoreUnavailable as e:
        what = f"bench {doc['kind']} results not stored: {e}"
        if path is None:
            raise NotStored(f"{what}; no file could be written to keep them: they are only in the output above") from None
        raise NotStored(f"{what}; kept in {path}: store them with: {store_command(path, store.url)}") from None
    if path is not None:
        path.unlink(missing_ok=True)
    return rid


def store_file(path: str | Path, store: Store) -> tuple[dict[str, Any], int, bool]:
    """Store the run of a file (:func:`keep`'s, or ``--format json`` output): (run, its id, whether
    the file was removed: one of :func:`kept_dir`'s, it is not needed once stored)."""
    path = Path(path)
    doc = read_run(path)
    doc.pop("run_id", None)
    rid = store.save_bench_run(cast(BenchRunDoc, doc))
    removed = path.resolve().parent == kept_dir().resolve()
    if removed:
        path.unlink(missing_ok=True)
    return doc, rid, removed
