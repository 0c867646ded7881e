"""Run directories: where the ranks of one profiled job write their record files.

``${RANKMAP_HOME:-~/.rankmap}/runs/<UTC timestamp>-<short id>/`` by default, one per job, so a
job's raw records stay next to a ``job.json`` that says what produced them even when the store
is elsewhere (or lost). The directory is created and probed for writing *before* the launch:
finding out from the ranks' stderr that nothing could be recorded would waste the run.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rankmap.errors import RankmapError


def runs_root() -> Path:
    return Path(os.environ.get("RANKMAP_HOME") or Path.home() / ".rankmap") / "runs"


@dataclass
class RunDir:
    path: Path

    @property
    def job_file(self) -> Path:
        return self.path / "job.json"

    def record_files(self) -> list[Path]:
        """The per-rank record files written so far, in rank order."""
        def rank_of(p: Path) -> tuple[int, str]:
            stem = p.name.split(".")[0]           # rank-<world>
            try:
                return int(stem.split("-", 1)[1]), p.name
            except (IndexError, ValueError):
                return 1 << 30, p.name
        return sorted(self.path.glob("rank-*.rmrec"), key=rank_of)

    def write_job(self, info: dict[str, Any]) -> None:
        """(Re)write ``job.json`` atomically, merged with what it already holds.

        The file keeps :data:`JOB_RESERVE` bytes of trailing blanks, so that when the disk fills up
        while the job runs, the end of the job (its exit status, its duration) still fits: the
        rename that needs a new block fails, and the text is written over the old one in place,
        within the blocks it already has (:func:`_write_in_place`)."""
        data: dict[str, Any] = {}
        if self.job_file.exists():
            try:
                old = json.loads(self.job_file.read_text())
                data = old if isinstance(old, dict) else {}
            except (OSError, ValueError):
                data = {}
        data.update(info)
        data.setdefault("version", 1)
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        tmp = self.job_file.with_suffix(".json.tmp")
        try:
            tmp.write_text(text + " " * JOB_RESERVE + "\n")
            os.replace(tmp, self.job_file)
        except OSError as e:
            try:
                tmp.unlink()
            except OSError:
                pass
            if not _write_in_place(self.job_file, text):
                raise RankmapError(f"cannot write {self.job_file}: {e.strerror}") from None

    def remove_if_empty(self) -> None:
        """Undo :func:`make_run_dir` when the launch is abandoned before anything was written."""
        try:
            self.path.rmdir()
        except OSError:
            pass

    def read_job(self) -> dict[str, Any]:
        """``job.json`` checked field by field (:func:`check_job`); ``{}`` where there is none."""
        try:
            raw = self.job_file.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise RankmapError(f"cannot read {self.job_file}: {e.strerror or e}") from None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise RankmapError(f"{self.job_file}: not UTF-8 text (byte {e.start})") from None
        except ValueError as e:
            raise RankmapError(f"{self.job_file}: not valid JSON ({e})") from None
        except RecursionError:
            raise RankmapError(f"{self.job_file}: not valid JSON (nested too deep)") from None
        return check_job(doc, str(self.job_file))


#: blank bytes kept at the end of ``job.json``: room for what the job's end adds, written in place
#: when the disk is full (:meth:`RunDir.write_job`)
JOB_RESERVE = 1024

#: the fields of ``job.json`` rankmap reads, and what each must be (anything else is kept as it is)
_JOB_TYPES: dict[str, tuple[type, ...]] = {
    "version": (int,), "job_id": (int,), "run_uid": (str,), "store": (str,), "launcher": (str,),
    "start": (str,), "end": (str,), "exit_status": (int, type(None)), "elapsed_ns": (int, type(None)),
    "world_size": (int, type(None)), "ranks_reporting": (int,), "mpicc": (str, type(None)), "env": (dict,),
    "bucket_ms": (int,), "flush_ms": (int,), "command": (list,), "launched": (list,)}


def check_job(doc: Any, source: str) -> dict[str, Any]:
    """``job.json`` as read: an object whose known fields have their types, ``command`` a non-empty
    list of strings, ``world_size`` within what a record file may name; every fault names the field."""
    from rankmap.errors import shown
    from rankmap.formats.record import MAX_WORLD_SIZE

    if not isinstance(doc, dict):
        raise RankmapError(f"{source}: expected a JSON object (what rankmap profile writes), got {shown(doc)}")
    for k, types in _JOB_TYPES.items():
        if k not in doc:
            continue
        v = doc[k]
        if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
            want = " or ".join("null" if t is type(None) else {int: "an integer", str: "a string", dict: "an object",
                                                                 list: "a list"}[t] for t in types)
            raise RankmapError(f"{source}: {k}: expected {want}, got {shown(v)}")
    for k in ("command", "launched"):
        if k in doc and (not doc[k] or not all(isinstance(a, str) for a in doc[k])):
            raise RankmapError(f"{source}: {k}: expected a non-empty list of strings, got {shown(doc[k])}")
    ws = doc.get("world_size")
    if ws is not None and not 1 <= ws <= MAX_WORLD_SIZE:
        raise RankmapError(f"{source}: world_size: expected 1 to {MAX_WORLD_SIZE}, got {ws}")
    for k in ("exit_status", "elapsed_ns"):
        v = doc.get(k)
        if v is not None and not -2**63 <= v < 2**63:
            raise RankmapError(f"{source}: {k}: out of range, got {v}")
    return doc


def _write_in_place(path: Path, text: str) -> bool:
    """``text`` written over ``path``'s own bytes, padded with blanks to its size (JSON ignores them):
    no new block is needed, so it works on a full disk. False when the text does not fit or the file
    cannot be written."""
    data = text.encode()
    try:
        size = path.stat().st_size
        if len(data) + 1 > size:
            return False
        with open(path, "r+b") as f:
            f.write(data + b" " * (size - len(data) - 1) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        return False


_STAMP = "%Y-%m-%dT%H:%M:%S.%fZ"     # the one format of a job.json time, written and read here


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime(_STAMP)


def parse_utc(stamp: str | None) -> datetime | None:
    """A ``job.json`` time (``2024-05-01T12:00:00.000000Z``), None if absent or unreadable.

    A live profile and a later ingest both date a job from this, so the two agree to the microsecond."""
    try:
        return datetime.strptime(stamp, _STAMP).replace(tzinfo=timezone.utc) if stamp else None
    except (ValueError, TypeError):
        return None


def make_run_dir(path: str | os.PathLike | None = None) -> RunDir:
    """Create (and check writable) the run directory ``path``, or a fresh one under the runs root.

    A given directory may exist but must not already hold record files: the ranks append to
    ``rank-<n>.<source>.rmrec`` and mixing two runs would add their traffic together.
    """
    if path is None:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        p = runs_root() / f"{stamp}-{secrets.token_hex(3)}"
    else:
        p = Path(path).expanduser().absolute()
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".rankmap-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise RankmapError(f"run directory {p} cannot be written ({why}): choose another with --run-dir") from None
    rd = RunDir(p)
    if rd.record_files():
        raise RankmapError(f"run directory {p} already holds record files of another run: give an empty one")
    return rd
