"""The benchmark programs build with warnings as errors against every MPI installed, and are cached."""

from __future__ import annotations

import shutil

import pytest

from bench_fixtures import bench_cache  # noqa: F401
from rankmap.linkbench.build import build_mpi_bench, build_nccl_bench

WRAPPERS = [w for w in ("mpicc.openmpi", "mpicc.mpich") if shutil.which(w)]


@pytest.mark.parametrize("mpicc", WRAPPERS or [pytest.param("mpicc", marks=pytest.mark.skip("no MPI installed"))])
def test_mpi_programs_build_strict_and_are_cached(bench_cache, monkeypatch, mpicc):
    monkeypatch.setenv("RANKMAP_CACHE", str(bench_cache))
    exe = build_mpi_bench(mpicc, strict=True)
    nccl = build_nccl_bench(mpicc=mpicc, strict=True)
    assert exe.is_file() and nccl.is_file() and exe.parent != nccl.parent
    mtime = exe.stat().st_mtime_ns
    assert build_mpi_bench(mpicc, strict=True) == exe and exe.stat().st_mtime_ns == mtime   # from the cache
    assert (exe.parent / "identity.txt").read_text().startswith("wrapper: ")


def test_one_process_nccl_program_builds_strict(bench_cache, monkeypatch):
    monkeypatch.setenv("RANKMAP_CACHE", str(bench_cache))
    exe = build_nccl_bench(strict=True)
    assert exe.name == "rankmap-nccl-bench" and exe.is_file()
