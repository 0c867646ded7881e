"""The shared-memory files MPI jobs leave in /dev/shm, and their removal once no job uses them.

A rank that ends without ``MPI_Finalize`` (killed by a test on purpose, or crashing on purpose)
leaves its shared-memory segment behind: Open MPI 4's ``vader_segment.<host>.<uid>.<job>.<rank>``
(4 MiB each), Open MPI 5's ``sm_segment.*``, MPICH's ``mpich_shar_tmp*``, UCX's ``ucx_shm_posix_*``.
Nothing removes them until the machine reboots. The test session removes those that appeared while
it ran, belong to its user, and that no process maps or holds open: a job still running (this
session's or anyone else's) keeps its segments mapped, so they are left alone.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SHM = Path("/dev/shm")
PREFIXES = ("vader_segment.", "sm_segment.", "mpich_shar_tmp", "ucx_shm_posix_")
SETTLE_S = 2.0      # a segment younger than this may be between its creation and its mmap


def segments(shm: Path = SHM) -> set[str]:
    """The names of the MPI shared-memory files in ``shm``."""
    try:
        return {n for n in os.listdir(shm) if n.startswith(PREFIXES)}
    except OSError:
        return set()


def in_use(paths: set[str], proc: Path = Path("/proc")) -> set[str] | None:
    """Those of ``paths`` that a process maps or holds open; None where that cannot be told (no
    /proc to read: then nothing may be removed)."""
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
        (proc / "self" / "maps").read_bytes()
    except OSError:
        return None
    used: set[str] = set()
    for pid in pids:
        try:
            with open(proc / pid / "maps", errors="replace") as f:
                for line in f:
                    path = line.rstrip("\n").split(None, 5)[5:]
                    if path:
                        name = path[0].removesuffix(" (deleted)")
                        if name in paths:
                            used.add(name)
        except OSError:             # gone meanwhile, or another user's process
            pass
        try:
            fds = os.listdir(proc / pid / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(proc / pid / "fd" / fd)
            except OSError:
                continue
            if target in paths:
                used.add(target)
    return used


def remove_orphans(before: set[str], shm: Path = SHM) -> list[str]:
    """Remove the segments of ``shm`` that are not in ``before``, are this user's, and that no
    process uses; returns the names removed."""
    uid = os.getuid()
    new: dict[str, os.stat_result] = {}
    for name in segments(shm) - before:
        try:
            st = os.lstat(shm / name)
        except OSError:
            continue
        if st.st_uid == uid and os.path.isfile(shm / name) and not os.path.islink(shm / name):
            new[name] = st
    if not new:
        return []
    youngest = max(st.st_mtime for st in new.values())
    wait = SETTLE_S - (time.time() - youngest)
    if wait > 0:
        time.sleep(min(wait, SETTLE_S))
    paths = {str(shm / n) for n in new}
    used = in_use(paths)
    if used is None:
        return []
    removed = []
    for name in sorted(new):
        if str(shm / name) not in used:
            try:
                os.unlink(shm / name)
                removed.append(name)
            except OSError:
                pass
    return removed
