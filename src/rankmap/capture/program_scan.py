"""What a job's programs call, read from their files before the job starts.

Open MPI's coll/monitoring -- loaded with the monitoring PML that the ``library`` source of
collective pairs needs -- cannot run neighbourhood collectives: its ``neighbor_allgather`` and
``neighbor_alltoall`` read every communicator's topology as a Cartesian one, and a rank that calls
them on a graph or distributed-graph communicator dies with SIGFPE or SIGSEGV (Open MPI 4.1.4 and
5.0.x; `examples/mpi/neighbors.c graph`, OSU's ``osu_neighbor_*``). It cannot be left out on its own
either: ``--mca coll ^monitoring`` beside the monitoring PML kills every job. So a profile that asks
for the library source first looks for neighbourhood collectives in the program, its own shared
libraries and, for a Python program, its script (mpi4py's ``Neighbor_allgather``), and refuses them
(:func:`neighbourhood_user`): the default source (the mirror) records them exactly at no such risk.

The look is a byte search for the routines' names (``MPI_Neighbor_allgather``, ``mpi_ineighbor_alltoall_``,
``Neighbor_alltoallv``, ...), which an executable that calls them holds in its dynamic symbol table;
the MPI library's own files, which define them all, are not searched.
"""

from __future__ import annotations

import mmap
import os
import re
import subprocess
from pathlib import Path
from typing import Sequence

#: every spelling of the neighbourhood collectives' names contains one of these (C, Fortran, mpi4py)
NEEDLES = (b"eighbor_all", b"EIGHBOR_ALL")
#: shared libraries that belong to the MPI library or the C/Fortran runtime: never searched
_OWN = re.compile(r"^(libmpi|libopen-|libmca_|libpmix|libprrte|libprte|libhwloc|libevent|libucp|libucs|libuct|"
                  r"libfabric|libpsm|libibverbs|librdmacm|libc\.|libm\.|libdl\.|librt\.|libpthread|libgcc_s|"
                  r"libstdc\+\+|libgfortran|libquadmath|ld-linux|libz\.|libudev|libnl-|libcuda|libcudart|libnccl)")
_MAX_BYTES = 1 << 30        # what one look reads at most (a program's own libraries; the rest is not read)


def _mentions(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return False
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return any(m.find(n) >= 0 for n in NEEDLES)
    except (OSError, ValueError):
        return False


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _own_libraries(exe: Path) -> list[Path]:
    """The shared libraries ``exe`` loads that are neither the MPI library nor a runtime (``ldd``)."""
    try:
        out = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    libs = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(/\S+)", line)
        if m and not _OWN.match(m.group(1)):
            libs.append(Path(m.group(2)))
    return libs


def files_of(argv: Sequence[str]) -> list[Path]:
    """The files of one program's command line worth searching: the executable, its own shared
    libraries, and the script of an interpreter (``python3 app.py``)."""
    if not argv:
        return []
    exe = argv[0]
    if os.sep not in exe:
        from shutil import which
        exe = which(exe) or exe
    path = Path(exe)
    out = [path]
    if _is_elf(path):
        out += _own_libraries(path)
        if re.fullmatch(r"python[\d.]*", path.name):
            out += [Path(a) for a in argv[1:2] if not a.startswith("-")]
    return out


def neighbourhood_user(programs: Sequence[Sequence[str]]) -> Path | None:
    """The first file of ``programs`` (command lines) that names a neighbourhood collective, or None."""
    read = 0
    for argv in programs:
        for f in files_of(argv):
            try:
                size = f.stat().st_size
            except OSError:
                continue
            if read + size > _MAX_BYTES:
                return None
            read += size
            if _mentions(f):
                return f
    return None
