"""Which collectives a mirror reproduces for one MPI library build: checked, recorded, looked up.

The mirrors follow named releases (``ompi.RELEASES``, ``mpich.RELEASES``); any other version of the
library may select its algorithms the same way or not. :func:`verify` finds out on the machine: the
conformance probe (:mod:`.probe`) built with the library's own compiler wrapper, run against its own
accounting of messages (Open MPI's monitoring PML; MPICH's UCX tag sends), compared call by call
with the mirror of each release of that library, bytes and message counts per pair. The release
that reproduces the most collectives exactly is recorded (``rankmap doctor --collectives``) in the
conformance file of rankmap's home (:mod:`rankmap.formats.conformance_json`), keyed by the
library's name, version and a fingerprint of its file; :func:`find` looks a job's build up from its
record's META (``mpi_library``, ``mpi_library_file``) and :class:`~.library.Library` applies the
mirror to the collectives found exact.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from rankmap.errors import RankmapError
from rankmap.formats import conformance_json as fmt
from rankmap.home import rankmap_home
from rankmap.pairs.call import Call
from rankmap.pairs.mirror import Mirrored

#: the collectives the probe runs (an ``i`` in front: the nonblocking form, started and waited for
#: at once); declared here, where a profile's lookup needs them without :mod:`.probe`'s NumPy
BLOCKING = ("allreduce", "bcast", "reduce", "allgather", "alltoall", "gather", "scatter",
            "reduce_scatter_block", "reduce_scatter", "allgatherv", "alltoallv")
NONBLOCKING = ("iallreduce", "ibcast", "ireduce", "iallgather", "ialltoall", "igather", "iscatter")
COLLECTIVES = BLOCKING + NONBLOCKING
#: the probe's defaults: the communicator sizes and message sizes of tests/test_collectives.py
RANKS = (3, 4, 5, 8)
SIZES = (8, 24, 1000, 4096, 65536, 100000, 1048576, 16777216)
#: where a library's version is in its MPI_Get_library_version text
_FAMILIES = (("Open MPI", re.compile(r"Open MPI v(\d+\.\d+[\w.]*)")),
             ("MPICH", re.compile(r"MPICH Version:\s*(\d+\.\d+[\w.]*)")))


def home_file() -> Path:
    return rankmap_home() / "collectives.json"


def name_version(library: str) -> tuple[str, str] | None:
    """('Open MPI', '4.1.4') from MPI_Get_library_version's text; None for a library no mirror follows."""
    for name, pattern in _FAMILIES:
        m = pattern.search(library)
        if m:
            return name, m.group(1)
    return None


def release_of(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(re.match(r"\d+", minor).group(0))  # type: ignore[union-attr]


def fingerprint(path: str | os.PathLike) -> str:
    """``sha256:<hex>`` of a library file's content (whatever link names it)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    return _digest(real, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=32)
def _digest(path: str, size: int, mtime_ns: int) -> str:     # size and time: a changed file is read again
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def key_of(meta: dict[str, str]) -> tuple[str, str, str] | None:
    """(name, version, fingerprint) of the library a record's META names; None where it names no
    file (a record from before the shim recorded it) or the file is gone."""
    nv = name_version(meta.get("mpi_library", ""))
    path = meta.get("mpi_library_file")
    if nv is None or not path:
        return None
    try:
        return (*nv, fingerprint(path))
    except OSError:
        return None


def find(meta: dict[str, str], path: Path | None = None) -> fmt.Build | None:
    """The recorded conformance of the build a record's META names, if any; a damaged conformance
    file raises :class:`RankmapError` naming it."""
    f = path or home_file()
    try:
        st = f.stat()
    except OSError:
        return None            # nothing checked on this machine: no file of the library is read
    key = key_of(meta)
    if key is None:
        return None
    return next((b for b in _builds(str(f), st.st_mtime_ns, st.st_size) if b.key == key), None)


@lru_cache(maxsize=8)
def _builds(path: str, mtime_ns: int, size: int) -> tuple[fmt.Build, ...]:
    return tuple(fmt.read(path))


# ------------------------------------------------------------------------------ the check
@dataclass
class Target:
    """One installed MPI to check: its compiler wrapper, its launcher, and how its messages are seen."""

    name: str                 # 'Open MPI' or 'MPICH'
    mpicc: str
    launcher: str
    #: why its messages cannot be counted here (no monitoring PML, no UCX); None: they can
    unverifiable: str | None = None

    @property
    def truth(self) -> str:
        return "Open MPI's monitoring PML" if self.name == "Open MPI" else "MPICH's UCX tag sends"


def target(mpicc: str, launcher: str, name: str) -> Target:
    """The check of an MPI of family ``name`` (``Open MPI``/``MPICH``), with what it lacks."""
    t = Target(name, mpicc, launcher)
    if name == "Open MPI":
        info = Path(launcher).with_name("ompi_info")
        out = _output([str(info) if info.exists() else "ompi_info", "--parsable", "--all"])
        if out is not None and "mca:pml:monitoring" not in out:
            t.unverifiable = f"this Open MPI has no monitoring PML ({info}): nothing here counts its messages"
    elif name == "MPICH":
        ver = _output([str(Path(launcher).with_name("mpichversion"))]) or _output(["mpichversion"]) or ""
        if "ch4:ucx" not in ver:
            t.unverifiable = "this MPICH does not send through UCX (device ch4:ucx), whose tag sends the probe counts"
        elif not Path("/usr/include/ucp/api/ucp.h").is_file() and not _ucx_header(mpicc):
            t.unverifiable = "UCX's headers (libucx-dev) are needed to build the probe that counts MPICH's messages"
    else:
        t.unverifiable = f"no mirror follows {name}"
    return t


def _ucx_header(mpicc: str) -> bool:
    out = _output([mpicc, "-E", "-x", "c", "-"], stdin="#include <ucp/api/ucp.h>\n")
    return out is not None and "ucp_tag_send_nbx" in out


def _output(cmd: list[str], stdin: str | None = None) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, input=stdin)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def _mirrors(name: str) -> dict[tuple[int, int], Callable[[Call], Mirrored | None]]:
    from rankmap.pairs import mpich, ompi

    if name == "Open MPI":
        return {rel: ompi.OpenMpiMirror(ompi.Params(release=rel)).messages for rel in ompi.RELEASES}
    return {rel: mpich.MpichMirror(mpich.Params()).messages for rel in mpich.RELEASES}


def _env(t: Target) -> dict[str, str]:
    if t.name != "Open MPI":
        return {}
    # the probe's own job, which may run as root (a container's): Open MPI refuses that unless told
    return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def verify(t: Target, out_dir: Path, ranks: tuple[int, ...] = RANKS, sizes: tuple[int, ...] = SIZES,
           colls: tuple[str, ...] = COLLECTIVES, say: Callable[[str], None] = lambda s: None) -> fmt.Build:
    """Run the probe of ``t`` on ``ranks`` x ``sizes`` and compare every call with each release's
    mirror; the build's record (not yet saved: :func:`save`)."""
    from rankmap.pairs import probe

    if t.unverifiable:
        raise RankmapError(f"the mirror cannot be verified on {t.mpicc}: {t.unverifiable}")
    exe = probe.build(t.mpicc, out_dir, ucx=t.name == "MPICH")
    mirrors = _mirrors(t.name)
    # per release and collective: [|mirror - library| bytes, library bytes, calls whose bytes differ,
    # calls whose message counts differ, calls not mirrored, calls]
    diff = {rel: {c: [0, 0, 0, 0, 0, 0] for c in colls} for rel in mirrors}
    library = file = ""
    for p in ranks:
        say(f"probe: {p} ranks, {len(colls)} collectives, {len(sizes)} sizes")
        cmd = probe.ompi_command(t.launcher, exe, p, list(colls), list(sizes)) if t.name == "Open MPI" else \
            probe.mpich_command(t.launcher, exe, p, list(colls), list(sizes))
        text = probe.run_text(cmd, _env(t))
        library, file = probe.identity(text)
        got_b, got_m = probe.parse(text, p), probe.parse(text, p, messages=True)
        for rel, mirror in mirrors.items():
            for (coll, size, root), ref in got_b.items():
                d = diff[rel][coll]
                mb = probe.mirrored(mirror, coll, p, size, root)
                mm = probe.mirrored(mirror, coll, p, size, root, messages=True)
                d[1] += int(ref.sum())
                d[5] += 1
                if mb is None or mm is None:
                    d[4] += 1
                    continue
                off = int(abs(mb - ref).sum())
                d[0] += off
                d[2] += off > 0
                d[3] += int((mm != got_m[(coll, size, root)]).any())
    nv = name_version(library)
    if nv is None or nv[0] != t.name:
        raise RankmapError(f"the probe built with {t.mpicc} names its library {library!r}, not {t.name}")
    if not file:
        raise RankmapError(f"the probe built with {t.mpicc} could not tell which file its MPI library is")
    version = release_of(nv[1])

    def exact(rel: tuple[int, int]) -> list[str]:
        return [c for c in colls if not any(diff[rel][c][k] for k in (0, 3, 4))]

    best = max(mirrors, key=lambda rel: (len(exact(rel)), -abs(rel[0] * 100 + rel[1] - version[0] * 100 - version[1])))
    ex = exact(best)
    return fmt.Build(name=t.name, version=nv[1], fingerprint=fingerprint(file), library=library, file=file,
                     release=best, truth=t.truth, checked=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     ranks=tuple(ranks), sizes=tuple(sizes), exact=tuple(ex),
                     inexact={c: _why(*diff[best][c]) for c in colls if c not in ex})


def _why(off: int, total: int, off_calls: int, count_calls: int, unmirrored: int, calls: int) -> str:
    """Why a collective is not exact, in words."""
    if unmirrored:
        return f"not mirrored in {unmirrored} of {calls} calls"
    if off_calls:
        return f"byte L1 {100 * off / max(1, total):.3g} % ({off_calls} of {calls} calls)"
    return f"bytes exact, message counts differ in {count_calls} of {calls} calls"


def save(build: fmt.Build, path: Path | None = None) -> Path:
    f = path or home_file()
    fmt.put(f, build)
    return f
