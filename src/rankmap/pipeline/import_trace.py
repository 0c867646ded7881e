"""``rankmap ingest --from kineto|otf2``: a job from the traces other tools wrote, stored like a profiled one.

Read the files (:mod:`rankmap.formats.kineto`, :mod:`rankmap.formats.otf2_trace`), make the pairs
(:mod:`rankmap.pairs.imported`), store the records as totals (``Store.ingest``) under a new job
whose launcher names the source (``kineto``, ``otf2``) and whose metadata says how its pairs were
made. Everything is read and checked before the job is created, so bad input stores nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rankmap.errors import RankmapError
from rankmap.formats import kineto, otf2_trace
from rankmap.pairs import imported, nccl_graph
from rankmap.store import Store

SOURCES = ("kineto", "otf2")


@dataclass
class ImportResult:
    job_id: int
    source: str
    world_size: int
    pair_bytes: int
    files: int
    problems: list[str] = field(default_factory=list)


def _logs(paths: list[Path], given: list[str]) -> list[Path]:
    """NCCL INFO logs: those given, else the ``nccl-debug*.log`` files beside the traces."""
    if given:
        out = [Path(p) for p in given]
        for p in out:
            if not p.is_file():
                raise RankmapError(f"NCCL log {p} does not exist")
        return out
    from rankmap.pairs.nccl_model import DEBUG_LOG_GLOB

    return sorted({log for p in paths for log in p.parent.glob(DEBUG_LOG_GLOB)})


def import_traces(source: str, paths: list[str], store: Store, *, nccl_logs: list[str] | None = None,
                  mpi_library: str = "") -> ImportResult:
    """Store the job of ``paths`` (Kineto: one trace per rank; OTF2: one archive)."""
    files = [Path(p).expanduser().absolute() for p in paths]
    if source == "kineto":
        logs = _logs(files, nccl_logs or [])
        got = imported.kineto_records([kineto.read(p) for p in files], nccl_graph.parse_files(logs) if logs else None)
        if logs:
            got.meta["nccl_logs"] = [str(p) for p in logs]
    elif source == "otf2":
        if len(files) != 1:
            raise RankmapError(f"--from otf2 takes one archive (its traces.otf2 or its directory), not {len(files)}")
        got = imported.otf2_records(otf2_trace.read(files[0]), mpi_library)
    else:
        raise RankmapError(f"unknown trace source {source!r} (one of {', '.join(SOURCES)})")
    command = ["rankmap", "ingest", "--from", source, *map(str, files)]
    jid = store.create_job(command, launcher=source, world_size=got.world_size, meta=got.meta)
    store.ingest(jid, got.records)
    store.finish_job(jid, exit_status=0, world_size=got.world_size,
                     elapsed_ns=max((int(r.elapsed_ns) for r in got.records), default=0),
                     meta={"problems": len(got.problems), "notes": got.problems})
    sent = sum(int(t[5]) for r in got.records for t in r.traffic if t[4] == "send")
    return ImportResult(jid, source, got.world_size, sent, len(files), got.problems)
