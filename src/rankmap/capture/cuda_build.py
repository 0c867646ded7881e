"""Build (once, then cached) the CUDA activity library ``librankmap_cuda.so`` and find a CUPTI.

The library is plain C with no build dependency on CUDA or CUPTI (``native/cuda``: it declares the
few CUPTI types it reads and opens libcupti at run time). The CUDA driver loads it into every
process of the job that initialises CUDA, through ``CUDA_INJECTION64_PATH``
(``docs/cuda-activity.md``).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

from rankmap.capture.native_build import build_c_hook

LIBNAME = "librankmap_cuda.so"
CUPTI_NAMES = ("libcupti.so.13", "libcupti.so.12", "libcupti.so")


def build_library(cc: str = "cc", progress: Callable[[str], None] | None = None) -> Path:
    """Compile the library if needed and return the path of the cached ``librankmap_cuda.so``."""
    return build_c_hook("cuda", LIBNAME, "CUDA activity library", cc, progress=progress)


def _toolkit_dirs() -> list[str]:
    dirs: list[str] = []
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if os.environ.get(var):
            dirs.append(os.environ[var])
    dirs += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    libs: list[str] = []
    for d in dirs:
        libs += [f"{d}/extras/CUPTI/lib64", f"{d}/lib64", f"{d}/lib"] + sorted(glob.glob(f"{d}/targets/*/lib"))
    return libs


def _wheel_dirs() -> list[str]:
    """``nvidia/*/lib`` of the Python packages beside this interpreter (PyTorch's CUDA wheels)."""
    out: list[str] = []
    for p in sys.path:
        out += sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib")), reverse=True)
    return out


def find_cupti() -> str | None:
    """A libcupti for the ranks to open when they have none loaded: ``$RANKMAP_CUPTI``, the CUDA
    toolkit's, a CUDA wheel's, then the dynamic linker's cache. None when there is none."""
    env = os.environ.get("RANKMAP_CUPTI")
    if env:
        return env if os.path.isfile(env) else None
    for d in _toolkit_dirs() + _wheel_dirs():
        for name in CUPTI_NAMES:
            p = os.path.join(d, name)
            if os.path.isfile(p):
                return p
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for name in CUPTI_NAMES:
        for line in out.splitlines():
            if line.strip().startswith(name + " ") and "=>" in line:
                return line.split("=>", 1)[1].strip()
    return None
