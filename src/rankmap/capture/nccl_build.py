"""Build (once, then cached) the NCCL profiler plugin ``librankmap_nccl.so``.

The plugin is plain C with no build dependency on NCCL or CUDA: ``native/nccl/*.c`` plus the shared
record writer ``native/common/rmrec.c``, compiled with ``cc`` into one shared library. The result is
cached under ``${RANKMAP_CACHE:-~/.cache/rankmap}/nccl/<hash>/``, the hash covering every source
and header, the compiler's path and its ``--version`` line, and the flags, so editing a source or
switching compilers rebuilds and nothing else does.

Use: ``NCCL_PROFILER_PLUGIN=<build_plugin()> RANKMAP_RUN_DIR=<dir> torchrun ...``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from rankmap.capture import native_build
from rankmap.capture.native_build import compile_cached
from rankmap.errors import RankmapError
from rankmap.native_sources import native_dir
LIBNAME = "librankmap_nccl.so"
CFLAGS = ["-std=gnu11", "-O2", "-g", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra",
          "-Wno-unused-parameter"]
LIBS = ["-lpthread", "-ldl"]


def cache_root() -> Path:
    """Where built plugins are kept: ``$RANKMAP_CACHE/nccl`` (default ``~/.cache/rankmap/nccl``)."""
    return native_build.cache_root() / "nccl"


def sources(native: Path | None = None) -> list[Path]:
    """The C files compiled into the plugin (headers are hashed too, see :func:`source_hash`)."""
    native = native or native_dir()
    c_files = sorted((native / "nccl").glob("*.c")) + [native / "common" / "rmrec.c"]
    missing = [str(p) for p in c_files if not p.is_file()]
    if missing or not (native / "nccl").is_dir():
        raise RankmapError(f"NCCL plugin sources missing: {', '.join(missing) or native / 'nccl'}")
    return c_files


def _compiler_identity(cc: str) -> tuple[str, str]:
    path = shutil.which(cc)
    if path is None:
        raise RankmapError(f"cannot build the NCCL profiler plugin: compiler {cc!r} not found on PATH")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        first = (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else ""
    except (OSError, subprocess.SubprocessError) as e:
        raise RankmapError(f"cannot build the NCCL profiler plugin: {cc} --version failed: {e}") from e
    return path, first


def source_hash(cc_path: str, cc_version: str, native: Path | None = None) -> str:
    """Hash of every source and header of the plugin, the compiler and the flags (16 hex digits)."""
    native = native or native_dir()
    h = hashlib.sha256()
    files = sorted((native / "nccl").glob("*.[ch]")) + sorted((native / "common").glob("*.[ch]"))
    for p in files:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update("\0".join([cc_path, cc_version, *CFLAGS, *LIBS]).encode())
    return h.hexdigest()[:16]


def build_plugin(cc: str = "cc") -> Path:
    """Compile the plugin if needed and return the path of the cached ``librankmap_nccl.so``.

    Raises :class:`RankmapError` naming the compiler and the first error line when the build fails.
    """
    srcs = sources()
    cc_path, cc_version = _compiler_identity(cc)
    out_dir = cache_root() / source_hash(cc_path, cc_version)
    return compile_cached(
        out_dir, LIBNAME,
        lambda tmp: [[cc_path, *CFLAGS, "-I", str(native_dir() / "common"), "-o", tmp, *map(str, srcs), *LIBS]],
        f"NCCL profiler plugin with {cc} ({cc_path})")
