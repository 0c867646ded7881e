"""Shared pieces of the benchmark tests: the stand-in CUDA runtime and NCCL (tests/native/fake_*.c),
built once per session, a private build cache, and the Open MPI launcher as CI runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NATIVE_TESTS = ROOT / "tests" / "native"
MPIRUN = shutil.which("mpirun.openmpi") or shutil.which("mpirun")
OMPI = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2"] if MPIRUN else []


def _cc(tmp: Path, src: str, out: str, *extra: str) -> Path:
    lib = tmp / out
    subprocess.run(["cc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o", str(lib),
                    str(NATIVE_TESTS / src), *extra], check=True)
    return lib


@pytest.fixture(scope="session")
def fake_cudart(tmp_path_factory) -> Path:
    return _cc(tmp_path_factory.mktemp("fakecuda"), "fake_cudart.c", "libcudart.so.13")


@pytest.fixture(scope="session")
def fake_nccl(tmp_path_factory) -> Path:
    return _cc(tmp_path_factory.mktemp("fakenccl"), "fake_nccl.c", "libnccl.so.2")


@pytest.fixture(scope="session")
def bench_cache(tmp_path_factory) -> Path:
    """One build cache for every benchmark test of the session (the programs build once)."""
    return tmp_path_factory.mktemp("bench-cache")


@pytest.fixture
def bench_env(bench_cache, tmp_path) -> dict[str, str]:
    """Environment for `rankmap bench`: private store and cache, no real CUDA runtime or NCCL."""
    return {"RANKMAP_CACHE": str(bench_cache), "RANKMAP_HOME": str(tmp_path / "home"),
            "RANKMAP_CUDART": "none", "RANKMAP_NCCL_LIB": str(tmp_path / "no-libnccl.so")}


def need_openmpi() -> None:
    if not MPIRUN:
        pytest.skip("Open MPI's mpirun is not installed")
