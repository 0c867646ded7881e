"""Compile a native hook once and keep it in rankmap's cache: the one build path of the MPI shim
and the NCCL profiler plugin.

Both hooks are a handful of C files turned into one shared library whose cache folder is named
by a hash of what went into it (sources, compiler, MPI identity). Builds write beside the target
and rename it into place, so concurrent ranks or jobs that build at once never see a
half-written library; a failed build leaves nothing behind and is reported by the compiler's
first error line.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from rankmap.errors import RankmapError

def cache_root() -> Path:
    """``$RANKMAP_CACHE`` or ``~/.cache/rankmap``."""
    env = os.environ.get("RANKMAP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rankmap"


def first_error(text: str) -> str:
    """The compiler's first line that says ``error`` (else its first line)."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower():
            return l
    return lines[0] if lines else "(no compiler output)"


def compile_cached(out_dir: Path, lib_name: str, commands: Callable[[str], list[list[str]]], what: str,
                   *, force: bool = False, notes: dict[str, str] | None = None) -> Path:
    """Return ``out_dir/lib_name``, building it first unless it is there (or ``force``).

    ``commands(tmp)`` gives the compile commands to try in turn, each writing to ``tmp``; the first
    that succeeds wins (a later one may drop optional flags). ``what`` names the hook and the
    compiler in errors: ``building the <what> failed: <first error line>``. ``notes`` are small
    text files written beside the library (e.g. what went into the cache key).
    """
    lib = out_dir / lib_name
    if lib.is_file() and not force:
        return lib
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RankmapError(f"cannot create the build cache {out_dir}: {e.strerror}") from None
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        p = None
        for cmd in commands(tmp):
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
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
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib
