"""Build the PMPI shim (``librankmap_mpi.so``) with the MPI compiler wrapper in use, cached.

The shim must be compiled against the very MPI the application runs with (the ABI of
``MPI_Comm`` & co. differs between Open MPI and MPICH). Its entry points are generated from
``native/mpi/calls.spec`` (:mod:`rankmap.capture.shim_gen`) for the routines that MPI's ``mpi.h``
declares, read from one preprocessor run of the wrapper, which also gives the version macros. The
cache key hashes the MPI identity (the wrapper's real path, its ``-showme``/``-show`` command line,
the version macros of its ``mpi.h``, the underlying compiler's version), the compiler flags, the
hand-written sources and the generated ones, so switching MPI with ``module load`` or editing the
spec, the sources or the flags gives a fresh build while repeated runs reuse one.

Cache layout: ``${RANKMAP_CACHE:-${XDG_CACHE_HOME:-~/.cache}/rankmap}/shim/<key>/librankmap_mpi.so`` plus
``identity.txt`` (what went into the key) and ``src/`` (the generated sources it was built from).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rankmap.capture import shim_gen
from rankmap.capture.native_build import Build, cache_root, compile_cached, env_key, memo_get, memo_put, split_build
from rankmap.errors import RankmapError
from rankmap.native_sources import native_dir

LIB_NAME = "librankmap_mpi.so"
# Optional flags: dropped if the wrapper's compiler rejects them.
_OPT_FLAGS = ["-fno-semantic-interposition", "-Wno-stringop-overflow"]
# a routine used without its declaration would be an undefined symbol found only when a rank first
# calls it: a build error instead
_FLAGS = ["-std=gnu11", "-O2", "-fPIC", "-shared", "-Werror=implicit-function-declaration"]
_LIBS = ["-ldl", "-lpthread"]


def shim_sources() -> list[Path]:
    """The C files compiled into the shim (MPI wrappers and the shared record writer)."""
    nd = native_dir()
    srcs = sorted((nd / "mpi").glob("*.c")) + [nd / "common" / "rmrec.c"]
    missing = [str(p) for p in srcs if not p.is_file()]
    if missing or not (nd / "mpi").is_dir():
        raise RankmapError(f"shim sources not found under {nd} (is this a complete rankmap checkout?)")
    return srcs


def _run(cmd: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def _resolve_wrapper(mpicc: str) -> Path:
    path = shutil.which(mpicc)
    if path is None:
        where = "" if mpicc == "mpicc" else f" ({mpicc!r} is not an executable on PATH)"
        raise RankmapError(f"mpicc not found{where}: install Open MPI or MPICH, or pass --mpicc PATH")
    # Invoke the wrapper by its own name: Open MPI's opal_wrapper reads argv[0] to know what it is.
    return Path(os.path.abspath(path))


@dataclass
class MpiHeader:
    """What one preprocessor run of ``mpi.h`` tells: version macros, declared ``PMPI_`` routines,
    and the file ``mpi.h`` was found in."""
    version_macros: list[str]
    declared: set[str]
    path: str | None = None


def probe_header(mpicc: str = "mpicc") -> MpiHeader:
    """Preprocess ``#include <mpi.h>`` with the wrapper, keeping macro definitions (``-dD``)."""
    wrapper = _resolve_wrapper(mpicc)
    with tempfile.TemporaryDirectory(prefix="rankmap-probe-") as td:
        probe = Path(td) / "probe.c"
        probe.write_text("#include <mpi.h>\nint main(void) { return 0; }\n")
        try:
            p = _run([str(wrapper), "-E", "-dD", str(probe)], timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return MpiHeader([], set())
    if p.returncode != 0:
        return MpiHeader([], set())
    macros = sorted({l.strip() for l in p.stdout.splitlines()
                     if l.startswith("#define ") and len(l.split()) > 2
                     and l.split()[1].endswith("VERSION") and "CONVERSION" not in l.split()[1]
                     and any(k in l for k in ("MPI", "OMPI", "MPICH", "MVAPICH", "I_MPI"))})
    code = "\n".join(l for l in p.stdout.splitlines() if not l.startswith("#"))
    found = re.search(r'^# \d+ "([^"]*/mpi\.h)"', p.stdout, re.M)
    return MpiHeader(macros, set(re.findall(r"\b(PMPI_[A-Za-z0-9_]+)\s*\(", code)), found.group(1) if found else None)


def mpi_identity(mpicc: str = "mpicc", header: MpiHeader | None = None) -> str:
    """Text that identifies the MPI behind ``mpicc``: wrapper path, command line, mpi.h versions."""
    wrapper = _resolve_wrapper(mpicc)
    parts = [f"wrapper: {wrapper} -> {wrapper.resolve()}"]
    for flag in ("-showme", "-show"):       # Open MPI, then MPICH/MVAPICH/Intel
        try:
            p = _run([str(wrapper), flag], timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if p.returncode == 0 and p.stdout.strip():
            parts.append(f"show: {p.stdout.strip()}")
            break
    parts.extend((header or probe_header(mpicc)).version_macros)
    try:
        p = _run([str(wrapper), "--version"], timeout=30)
        first = (p.stdout or p.stderr).strip().splitlines()
        if first:
            parts.append(f"compiler: {first[0]}")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "\n".join(parts)


def _sources_hash(srcs: list[Path], generated: dict[str, str]) -> str:
    h = hashlib.sha256()
    nd = native_dir()
    files = srcs + sorted((nd / "mpi").glob("*.h")) + sorted((nd / "common").glob("*.h"))
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    for name in sorted(generated):
        h.update(name.encode())
        h.update(generated[name].encode())
    return h.hexdigest()


def _write_generated(gen_dir: Path, generated: dict[str, str]) -> None:
    """Write the generated sources (each through a temporary file and a rename: concurrent builds
    of one key write the same text)."""
    try:
        gen_dir.mkdir(parents=True, exist_ok=True)
        for name, text in generated.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=gen_dir)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, gen_dir / name)
    except OSError as e:
        raise RankmapError(f"cannot write the generated shim sources to {gen_dir}: {e.strerror}") from None


def build_shim(mpicc: str = "mpicc", force: bool = False, progress: Callable[[str], None] | None = None) -> Path:
    """Return the path of ``librankmap_mpi.so`` built with ``mpicc``, building it if not cached.

    Raises :class:`RankmapError` when the wrapper is missing or the build fails (naming the
    wrapper and the first compiler error line).
    """
    wrapper = _resolve_wrapper(mpicc)
    srcs = shim_sources()
    memo = _memo_key(wrapper, srcs)
    got = None if force else memo_get("shim", memo)
    if got and Path(str(got.get("lib"))).is_file():
        return Path(got["lib"])
    header = probe_header(mpicc)
    identity = mpi_identity(mpicc, header)
    generated = shim_gen.generate(shim_gen.load(), header.declared or None)
    flags = " ".join(_FLAGS + _OPT_FLAGS + _LIBS)     # a changed flag builds anew, as a changed source does
    key = hashlib.sha256((identity + "\n" + flags + "\n" + _sources_hash(srcs, generated)).encode()).hexdigest()[:20]
    out_dir = cache_root() / "shim" / key
    gen_dir = out_dir / "src"
    base = [str(wrapper), *_FLAGS, "-I", str(native_dir() / "common"), "-I", str(native_dir() / "mpi"),
            "-I", str(gen_dir)]
    if force or not (out_dir / LIB_NAME).is_file():
        _write_generated(gen_dir, generated)

    def commands(tmp: str) -> list[Build]:
        sources = [str(s) for s in srcs] + [str(gen_dir / n) for n in sorted(generated) if n.endswith(".c")]
        # the C files side by side, one per core; the second way in case an optional flag was the problem
        return [split_build(base + _OPT_FLAGS, sources, tmp, _LIBS), split_build(base, sources, tmp, _LIBS)]

    lib = compile_cached(out_dir, LIB_NAME, commands, f"MPI shim with {wrapper}",
                         force=force, notes={"identity.txt": identity + "\n"}, progress=progress)
    # what the identity was read from: while none of it changes, the next profile skips the probes
    show = re.search(r"^show: (\S+)", identity, re.M)
    compiler = shutil.which(show.group(1)) if show else None
    if header.path and compiler:
        memo_put("shim", memo, {"lib": str(lib)}, [wrapper.resolve(), header.path, os.path.realpath(compiler), lib])
    return lib


def _memo_key(wrapper: Path, srcs: list[Path]) -> str:
    """What the shim's memo is kept under: the wrapper, the environment that steers MPI compiler
    wrappers and compilers, the flags, and every source the generated entry points come from."""
    h = hashlib.sha256()
    nd = native_dir()
    for f in srcs + sorted((nd / "mpi").glob("*.h")) + sorted((nd / "common").glob("*.h")) + \
            [nd / "mpi" / "calls.spec", Path(shim_gen.__file__)]:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return env_key(str(wrapper), str(wrapper.resolve()), " ".join(_FLAGS + _OPT_FLAGS + _LIBS), h.hexdigest(),
                   prefixes=("OMPI_", "OPAL_", "MPICH", "MPICC", "I_MPI", "CC", "CFLAGS", "CPPFLAGS", "LDFLAGS",
                             "CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH"))
