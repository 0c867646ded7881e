"""The test session's removal of the shared-memory segments MPI jobs leave behind (tests/mpi_shm.py):
the suite used to leave about 160 of Open MPI's 4 MiB vader_segment files in /dev/shm."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import mpi_shm

HOLDER = """\
import mmap, sys
mapped = open(sys.argv[1], "r+b")
m = mmap.mmap(mapped.fileno(), 0)
mapped.close()                       # mapped, no descriptor left
held = open(sys.argv[2], "rb")       # open, not mapped
print("ready", flush=True)
sys.stdin.read()
"""


def test_only_new_unused_segments_are_removed(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    names = {"orphan": "vader_segment.h.0.1a2b0001.0", "mapped": "vader_segment.h.0.1a2b0001.1",
             "open": "sm_segment.h.0.1a2b0001.2", "before": "vader_segment.h.0.77770001.0",
             "mpich": "mpich_shar_tmpAbC123", "other": "PostgreSQL.1234"}
    old = time.time() - 60
    for n in names.values():
        (shm / n).write_bytes(b"\0" * 4096)
        os.utime(shm / n, (old, old))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(shm / names["mapped"]), str(shm / names["open"])],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        assert mpi_shm.segments(shm) == set(names.values()) - {names["other"]}
        removed = mpi_shm.remove_orphans({names["before"]}, shm)
        assert removed == sorted([names["orphan"], names["mpich"]])
        assert sorted(os.listdir(shm)) == sorted(set(names.values()) - set(removed))
    finally:
        holder.communicate("", timeout=30)
    # the job that held them is gone: now they go too
    assert mpi_shm.remove_orphans({names["before"]}, shm) == sorted([names["mapped"], names["open"]])
    assert sorted(os.listdir(shm)) == sorted([names["before"], names["other"]])


def test_a_young_segment_is_given_time_to_be_mapped(tmp_path, monkeypatch):
    """A segment just created may not be mapped yet by the rank that created it: the removal waits
    until the youngest is SETTLE_S old before it looks at who maps them."""
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "vader_segment.h.0.1.0").write_bytes(b"\0")
    monkeypatch.setattr(mpi_shm, "SETTLE_S", 0.5)
    t0 = time.monotonic()
    assert mpi_shm.remove_orphans(set(), shm) == ["vader_segment.h.0.1.0"]
    assert time.monotonic() - t0 >= 0.3


def test_nothing_is_removed_without_proc(tmp_path, monkeypatch):
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "vader_segment.h.0.1.0").write_bytes(b"\0")
    os.utime(shm / "vader_segment.h.0.1.0", (time.time() - 60,) * 2)
    assert mpi_shm.in_use({str(shm / "vader_segment.h.0.1.0")}, proc=tmp_path / "noproc") is None
    monkeypatch.setattr(mpi_shm, "in_use", lambda paths: None)
    assert mpi_shm.remove_orphans(set(), shm) == [] and os.listdir(shm) == ["vader_segment.h.0.1.0"]
