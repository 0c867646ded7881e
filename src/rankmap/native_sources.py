"""Where the C sources of rankmap's native code are, in a checkout and in an installed wheel.

The top-level ``native/`` folder of the repository is the one source of truth. A wheel carries
it as package data under ``rankmap/native`` (``pyproject.toml`` maps the folder into the
package), so the hooks can be built on first use wherever rankmap is installed, and the record
reader finds the layout declaration it shares with the writer (``common/rmrec_layout.h``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from rankmap.errors import RankmapError

_PACKAGE = Path(__file__).resolve().parent


def candidates() -> list[Path]:
    """Where to look, in order: inside the installed package, then beside the ``src/`` of a checkout."""
    return [_PACKAGE / "native", _PACKAGE.parents[1] / "native"]


@lru_cache(maxsize=None)
def native_dir() -> Path:
    """The folder holding ``common/``, ``mpi/`` and ``nccl/`` (C sources of the record writer and hooks)."""
    for d in candidates():
        if (d / "common" / "rmrec.c").is_file():
            return d
    raise RankmapError(f"rankmap's C sources are missing (looked in {', '.join(map(str, candidates()))}): "
                       f"reinstall rankmap")
