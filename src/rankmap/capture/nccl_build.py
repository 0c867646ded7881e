"""Build (once, then cached) the NCCL profiler plugin ``librankmap_nccl.so``.

The plugin is plain C with no build dependency on NCCL or CUDA: ``native/nccl/*.c`` plus the shared
record writer ``native/common/rmrec.c``, compiled with ``cc`` into one shared library, cached under
``${RANKMAP_CACHE:-${XDG_CACHE_HOME:-~/.cache}/rankmap}/nccl/<hash>/`` (:func:`rankmap.capture.native_build.build_c_hook`).

Use: ``NCCL_PROFILER_PLUGIN=<build_plugin()> RANKMAP_RUN_DIR=<dir> torchrun ...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from rankmap.capture.native_build import build_c_hook

LIBNAME = "librankmap_nccl.so"


def build_plugin(cc: str = "cc", progress: Callable[[str], None] | None = None) -> Path:
    """Compile the plugin if needed and return the path of the cached ``librankmap_nccl.so``.

    Raises :class:`RankmapError` naming the compiler and the first error line when the build fails.
    """
    return build_c_hook("nccl", LIBNAME, "NCCL profiler plugin", cc, progress=progress)
