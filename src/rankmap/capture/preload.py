"""How the MPI shim's path reaches the dynamic loader of every rank, whatever the path holds.

``LD_PRELOAD`` has no quoting: glibc splits it on spaces, tabs and colons, so a shim cached under a
home directory such as ``/home/Ana María/`` or ``/Users/x/My Files`` is read as two or more names,
none of which loads; the job runs without capture and reports nothing. A name without a slash in
``LD_PRELOAD`` is looked up like a needed library instead, through ``LD_LIBRARY_PATH``, which glibc
splits only on ``:`` and ``;``, so spaces, quotes and non-ASCII letters pass. So:

* a path without blanks or colons goes into ``LD_PRELOAD`` as it is (nothing else changes);
* otherwise ``LD_PRELOAD`` gets the shim's file name alone and its folder is put first on
  ``LD_LIBRARY_PATH`` (that folder holds only the shim and its build notes, so nothing else the job
  loads can resolve there);
* a folder with ``:`` or ``;`` in its path fits neither variable: that is one line before the job
  starts, naming the folder and the way out (``RANKMAP_CACHE``).

A symlink in a private folder without blanks (``/tmp/rankmap-<uid>``) was the other way considered
and left: it lives on the launching node's own ``/tmp``, so ranks on the other nodes of a job would
not find it, while the cache folder named through ``LD_LIBRARY_PATH`` is the one the shim was built
in, shared with the other nodes wherever the home directory is.
"""

from __future__ import annotations

import os

from rankmap.errors import RankmapError

_PRELOAD_SPLITS = " \t\n:"
_LIBRARY_PATH_SPLITS = ":;"


def preload_env(shim: str | os.PathLike, base_env: dict[str, str] | os._Environ) -> dict[str, str]:
    """``LD_PRELOAD`` (and, where the shim's path needs it, ``LD_LIBRARY_PATH``) that load ``shim``
    in the ranks; ``base_env`` is the environment the ranks would otherwise get."""
    path = str(shim)
    if not any(c in path for c in _PRELOAD_SPLITS):
        return {"LD_PRELOAD": path}
    folder, name = os.path.split(path)
    if any(c in name for c in _PRELOAD_SPLITS):
        raise RankmapError(f"the MPI shim's file name {name!r} has a blank or a colon, which LD_PRELOAD cannot carry")
    check_folder(folder)
    old = base_env.get("LD_LIBRARY_PATH")
    return {"LD_PRELOAD": name, "LD_LIBRARY_PATH": folder + (f":{old}" if old else "")}


def check_folder(folder: str | os.PathLike) -> None:
    """Refuse, in one line, a folder for the shim that neither variable can carry (a ':' or ';' in
    its path). Called with the cache folder before a build too: the build would take seconds to
    make a library that cannot be loaded."""
    if any(c in str(folder) for c in _LIBRARY_PATH_SPLITS):
        raise RankmapError(f"the MPI shim is in {folder}, whose path has a ':' or ';' that neither LD_PRELOAD nor "
                           f"LD_LIBRARY_PATH can carry: set RANKMAP_CACHE to a folder without them")
