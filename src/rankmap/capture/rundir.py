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
        """(Re)write ``job.json`` atomically, merged with what it already holds."""
        data: dict[str, Any] = {}
        if self.job_file.exists():
            try:
                data = json.loads(self.job_file.read_text())
            except (OSError, ValueError):
                data = {}
        data.update(info)
        data.setdefault("version", 1)
        tmp = self.job_file.with_suffix(".json.tmp")
        try:
            tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, self.job_file)
        except OSError as e:
            raise RankmapError(f"cannot write {self.job_file}: {e.strerror}") from None

    def remove_if_empty(self) -> None:
        """Undo :func:`make_run_dir` when the launch is abandoned before anything was written."""
        try:
            self.path.rmdir()
        except OSError:
            pass

    def read_job(self) -> dict[str, Any]:
        try:
            return json.loads(self.job_file.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as e:
            raise RankmapError(f"{self.job_file}: not valid JSON ({e})") from None


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
