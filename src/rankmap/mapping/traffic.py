"""Where a traffic matrix comes from: the traffic CSV, or a stored job.

The CSV (``rankmap.formats.traffic_csv``, what ``rankmap export --format csv`` writes) has one row
per (src, dst, class, operation); placement sums the bytes over classes and operations. Rows
whose send buffer was in host memory (the optional ``mem`` column) are the host-staged part and
are routed GPU -> host -> GPU by the cost model; without the column every byte is routed
peer-to-peer. A stored job always has the memory kind, so ``--job`` splits the same way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rankmap.errors import RankmapError
from rankmap.formats import traffic_csv
from rankmap.mapping.basis import host_staged
from rankmap.mapping.cost import Traffic


def read_csv(path: str | Path, world_size: int | None = None) -> Traffic:
    t = traffic_csv.read(path)
    n = t.ranks
    if world_size is not None:
        if n > world_size:
            raise RankmapError(f"{path}: names rank {n - 1} but the job has {world_size} ranks")
        n = world_size
    if n == 0:
        raise RankmapError(f"{path}: no traffic rows")
    host = [b if host_staged(m) else 0 for b, m in zip(t.bytes.tolist(), t.mem)] if t.mem is not None else None
    return Traffic.from_triples(n, t.src.tolist(), t.dst.tolist(), t.bytes.tolist(), host)


def write_csv(path: str | Path, T: np.ndarray, klass: str = "p2p", operation: str = "synthetic",
              host: np.ndarray | None = None) -> None:
    """Write a dense matrix as a traffic CSV (tests, benchmarks, the demo's fallback); with ``host``
    (the host-staged part of ``T``) the ``mem`` column too."""
    text = traffic_csv.dumps(traffic_csv.matrix_rows(T, klass, operation, host), by_mem=host is not None)
    Path(path).write_text(text)


def job_matrices(store, jid: int, classes=None) -> tuple[np.ndarray, np.ndarray | None]:
    """A stored job's bytes as (all, host-staged part or None): the bytes whose send buffer was in
    host memory are the host part (:func:`rankmap.mapping.basis.host_staged`: device, managed and
    unknown buffers are routed peer-to-peer). ``classes`` keeps only those traffic classes."""
    n = store.world_size(jid)
    T = np.zeros((n, n))
    H = np.zeros((n, n))
    for r in store.traffic(jid, classes or None, by_mem=True):
        T[r["src"], r["dst"]] += r["bytes"]
        if host_staged(r["mem"]):
            H[r["src"], r["dst"]] += r["bytes"]
    return T, (H if H.any() else None)


def job_traffic(store, jid: int, classes=None) -> Traffic:
    """A stored job's traffic with its host-staged part (:func:`job_matrices`), as the cost model
    routes it; ``classes`` keeps only those traffic classes."""
    return Traffic.from_dense(*job_matrices(store, jid, classes))


def from_job(store, spec: str) -> tuple[Traffic, dict]:
    """The stored traffic of job ``spec`` ('latest' or an id) and its job row; a job without traffic
    is an error that says how the job ended when it failed."""
    from rankmap.store.schema import state_words

    jid = store.resolve_job(spec)
    job = store.job(jid)
    tr = job_traffic(store, jid)
    if tr.total == 0:
        how = f" {state_words('failed', job['exit_status'])} and" if job["state"] == "failed" else ""
        raise RankmapError(f"job {jid}{how} recorded no traffic between ranks: nothing to place")
    return tr, job
