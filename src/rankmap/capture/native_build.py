"""Compile a native hook once and keep it in rankmap's cache: the one build path of the MPI shim
and the NCCL profiler plugin.

Both hooks are a handful of C files turned into one shared library whose cache folder is named
by a hash of what went into it (sources, compiler, MPI identity). Builds write beside the target
and rename it into place, so concurrent ranks or jobs never see a half-written library, and
one build of a folder runs at a time (the others wait for it and use its library); a failed
build leaves nothing behind and is reported by the compiler's first error line.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence, Union

from rankmap.errors import RankmapError
from rankmap.native_sources import native_dir

def cache_root() -> Path:
    """``$RANKMAP_CACHE``, else ``$XDG_CACHE_HOME/rankmap``, else ``~/.cache/rankmap``.

    ``XDG_CACHE_HOME`` counts only when absolute, as the XDG Base Directory specification says (a
    relative one would put the cache wherever the command happens to run)."""
    env = os.environ.get("RANKMAP_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "rankmap" if xdg and os.path.isabs(xdg) else Path.home() / ".cache" / "rankmap"


def _stamp(path: str | Path) -> list[int] | None:
    """What tells a file changed: its inode, size and modification time (None: it is gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def memo_get(kind: str, key: str) -> dict | None:
    """What :func:`memo_put` kept under ``key``, while every file it names is unchanged; else None.

    A memo spares a profile the subprocesses that identify a compiler or an MPI (``cc --version``,
    ``mpicc -E``, ``-showme``: a tenth of a second or more before every job) when nothing they
    read has changed since the last run: the files behind the answer are stamped (inode, size,
    mtime) and a change to any of them -- an upgraded compiler, an MPI installed over the old one --
    sends the caller the long way again."""
    f = cache_root() / "memo" / kind / f"{key}.json"
    try:
        got = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    files = got.get("files") if isinstance(got, dict) else None
    if not isinstance(files, dict) or any(_stamp(p) != v for p, v in files.items()):
        return None
    return got.get("value")


def memo_put(kind: str, key: str, value: dict, files: Sequence[str | Path]) -> None:
    """Keep ``value`` under ``key`` for :func:`memo_get`, valid while ``files`` are unchanged."""
    d = cache_root() / "memo" / kind
    stamps = {str(p): _stamp(p) for p in files}
    if any(v is None for v in stamps.values()):
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".memo-", dir=d)
        with os.fdopen(fd, "w") as f:
            json.dump({"value": value, "files": stamps}, f)
        os.replace(tmp, d / f"{key}.json")
    except OSError:
        pass                                   # a memo is only a shortcut


def env_key(*parts: str, prefixes: Sequence[str] = ()) -> str:
    """A memo key: ``parts`` and the environment variables that start with ``prefixes`` (and PATH)."""
    env = sorted((k, v) for k, v in os.environ.items() if k == "PATH" or k.startswith(tuple(prefixes)))
    return hashlib.sha256(json.dumps([list(parts), env]).encode()).hexdigest()[:24]


def first_error(text: str) -> str:
    """The compiler's first line that says ``error`` (else its first line)."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower():
            return l
    return lines[0] if lines else "(no compiler output)"


@dataclass
class Split:
    """A build in two steps: ``compiles`` (each source to its object, ``objects``) side by side, one
    per core, then ``link``. The MPI shim is nine C files, two of them generated and large (its
    Fortran and C entry points: 8 and 5 of its 21 s of compile on one core): one compiler call
    compiles them one after the other, while a first profile on a node of 16 cores waits."""

    compiles: list[list[str]]
    objects: list[str]
    link: list[str]


#: one way to build: a single compiler call, or a :class:`Split`
Build = Union[list[str], Split]


def split_build(compiler: list[str], sources: Sequence[str | Path], out: str,
                link_flags: Sequence[str] = ()) -> Split:
    """``compiler`` (the wrapper and its flags) on each of ``sources`` to an object beside ``out``,
    then linked into ``out`` with ``link_flags`` after the objects (libraries)."""
    objects = [f"{out}.{i}.o" for i in range(len(sources))]
    return Split([[*compiler, "-c", str(src), "-o", obj] for src, obj in zip(sources, objects)], objects,
                 [*compiler, *objects, "-o", out, *link_flags])


def _run_build(b: Build, timeout: float) -> subprocess.CompletedProcess:
    """Run one way to build; the first failed compiler call's result, else the last one's."""
    if not isinstance(b, Split):
        return subprocess.run(b, capture_output=True, text=True, timeout=timeout)
    with ThreadPoolExecutor(max_workers=max(1, min(len(b.compiles), os.cpu_count() or 1))) as pool:
        runs = list(pool.map(lambda c: subprocess.run(c, capture_output=True, text=True, timeout=timeout),
                             b.compiles))
    failed = [r for r in runs if r.returncode != 0]
    return failed[0] if failed else subprocess.run(b.link, capture_output=True, text=True, timeout=timeout)


def compile_cached(out_dir: Path, lib_name: str, commands: Callable[[str], list[Build]], what: str,
                   *, force: bool = False, notes: dict[str, str] | None = None, timeout: float = 300,
                   progress: Callable[[str], None] | None = None) -> Path:
    """Return ``out_dir/lib_name``, building it first unless it is there (or ``force``).

    ``commands(tmp)`` gives the ways to build to try in turn (a compiler call, or a :class:`Split`),
    each writing to ``tmp``; the first that succeeds wins (a later one may drop optional flags).
    ``what`` names the hook and the compiler in errors: ``building the <what> failed: <first error line>``. ``notes`` are small
    text files written beside the library (e.g. what went into the cache key). The same path
    builds executables (the benchmark programs): ``lib_name`` is then the program's name.
    ``progress`` hears one line before a build starts (a first build takes seconds: the user
    should know why).
    """
    lib = out_dir / lib_name
    if lib.is_file() and not force:
        return lib
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RankmapError(f"cannot create the build cache {out_dir}: {e.strerror}") from None
    if progress:
        progress(f"building the {what} (first use; kept in {out_dir} for the next runs)")
    with _build_lock(out_dir):
        if lib.is_file() and not force:       # built by another process while this one waited
            return lib
        return _build(out_dir, lib, commands, what, notes, timeout)


@contextlib.contextmanager
def _build_lock(out_dir: Path) -> Iterator[None]:
    """One build of a cache folder at a time: processes that start on a cold cache together (the
    ranks' hosts of a job array, the workers of a test run) wait for the first build instead of
    each compiling the same library (20-30 s of CPU for the MPI shim). A file system without locks
    builds unlocked, as before."""
    try:
        fd = os.open(out_dir / ".build.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)                      # closing releases the lock


def _build(out_dir: Path, lib: Path, commands: Callable[[str], list[Build]], what: str,
           notes: dict[str, str] | None, timeout: float) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=lib.suffix, dir=out_dir)
    os.close(fd)
    builds: list[Build] = []
    try:
        builds = commands(tmp)
        p = None
        for b in builds:
            p = _run_build(b, timeout)
            if p.returncode == 0:
                break
        if p is None or p.returncode != 0:
            out = (p.stderr + p.stdout) if p else ""
            raise RankmapError(f"building the {what} failed: {first_error(out)}")
        os.replace(tmp, lib)
        for name, text in (notes or {}).items():
            (out_dir / name).write_text(text)
    except subprocess.TimeoutExpired:
        raise RankmapError(f"building the {what} timed out") from None
    except OSError as e:
        raise RankmapError(f"cannot build the {what}: {e}") from None
    finally:
        for f in [tmp] + [o for b in builds if isinstance(b, Split) for o in b.objects]:
            if os.path.exists(f):
                os.unlink(f)
    return lib


#: Flags of the hooks that are plain C with no build dependency (the NCCL plugin, the CUDA library).
C_HOOK_FLAGS = ["-std=gnu11", "-O2", "-g", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra",
                "-Wno-unused-parameter"]
C_HOOK_LIBS = ["-lpthread", "-ldl"]


def compiler_identity(cc: str, what: str) -> tuple[str, str]:
    """The compiler's resolved path and the first line of its ``--version`` (part of a cache key;
    remembered while the compiler's file is unchanged: :func:`memo_get`)."""
    path = shutil.which(cc)
    if path is None:
        raise RankmapError(f"cannot build the {what}: compiler {cc!r} not found on PATH")
    key = env_key(path)
    got = memo_get("compiler", key)
    if got and isinstance(got.get("version"), str):
        return path, got["version"]
    path, first = _compiler_version(path, cc, what)
    memo_put("compiler", key, {"version": first}, [path, os.path.realpath(path)])
    return path, first


def _compiler_version(path: str, cc: str, what: str) -> tuple[str, str]:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        first = (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else ""
    except (OSError, subprocess.SubprocessError) as e:
        raise RankmapError(f"cannot build the {what}: {cc} --version failed: {e}") from e
    return path, first


def c_hook_sources(folder: str, native: Path | None = None,
                   record_writer: bool = True) -> tuple[list[Path], list[Path]]:
    """The C files of ``native/<folder>`` (plus the record writer), and every file hashed for the cache."""
    native = native or native_dir()
    common = [native / "common" / "rmrec.c"] if record_writer else []
    c_files = sorted((native / folder).glob("*.c")) + common
    missing = [str(p) for p in c_files if not p.is_file()]
    if missing or not (native / folder).is_dir() or not c_files:
        raise RankmapError(f"{folder} hook sources missing: {', '.join(missing) or native / folder}")
    hashed = sorted((native / folder).glob("*.[ch]"))
    if record_writer:
        hashed += sorted((native / "common").glob("*.[ch]"))
    return c_files, hashed


def build_c_hook(folder: str, lib_name: str, what: str, cc: str = "cc",
                 progress: Callable[[str], None] | None = None, *, record_writer: bool = True,
                 extra: Sequence[str] = ()) -> Path:
    """Compile ``native/<folder>/*.c`` (+ the record writer) into ``lib_name`` (cached) and return its path.

    The cache folder ``<cache>/<folder>/<hash>`` is named by every source and header, the compiler's
    path and ``--version`` line and the flags: editing a source or switching compilers rebuilds.
    ``extra`` flags and libraries go at the end of the command line (and into the hash).
    """
    srcs, hashed = c_hook_sources(folder, record_writer=record_writer)
    cc_path, cc_version = compiler_identity(cc, what)
    h = hashlib.sha256()
    for p in hashed:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update("\0".join([cc_path, cc_version, *C_HOOK_FLAGS, *C_HOOK_LIBS, *extra]).encode())
    out_dir = cache_root() / folder / h.hexdigest()[:16]
    return compile_cached(
        out_dir, lib_name,
        lambda tmp: [[cc_path, *C_HOOK_FLAGS, "-I", str(native_dir() / "common"), "-o", tmp, *map(str, srcs),
                      *C_HOOK_LIBS, *extra]],
        f"{what} with {cc} ({cc_path})", notes={"identity.txt": f"{cc_path}: {cc_version}\n"}, progress=progress)


def built() -> list[tuple[str, Path, str]]:
    """What the cache holds: (hook, library path, what it was built with), newest first."""
    root = cache_root()
    out = []
    for hook, pattern in (("MPI shim", "shim/*/librankmap_mpi.so"), ("NCCL plugin", "nccl/*/librankmap_nccl.so"),
                          ("CUDA activity library", "cuda/*/librankmap_cuda.so"),
                          ("GPM reader", "monitor/*/librankmap_gpm.so")):
        for lib in root.glob(pattern):
            ident = lib.parent / "identity.txt"
            try:
                first = ident.read_text().splitlines()[0] if ident.exists() else ""
            except (OSError, IndexError):
                first = ""
            out.append((lib.stat().st_mtime, hook, lib, first))
    return [(h, lib, first) for _t, h, lib, first in sorted(out, key=lambda x: -x[0])]
