"""`rankmap bench nccl` through a stand-in CUDA runtime and NCCL (host memory): the program's grouping,
buffer arithmetic and result checks run for real; the figures follow nccl-tests' definitions."""

from __future__ import annotations

import json
import os
import re

import pytest

from bench_fixtures import OMPI, bench_cache, bench_env, fake_cudart, fake_nccl, need_openmpi  # noqa: F401
from conftest import assert_one_line_error, rankmap
from rankmap.linkbench.nccl import BUS_FACTOR, OPS

pytestmark = pytest.mark.mpi


def nccl_env(bench_env, fake_cudart, fake_nccl, gpus=2):
    return dict(bench_env, RANKMAP_CUDART=str(fake_cudart), RANKMAP_NCCL_LIB=str(fake_nccl), FAKE_CUDA_DEVICES=str(gpus))


QUICK = ("--iters", "3", "--trials", "2", "--warmup", "1")


@pytest.mark.parametrize("gpus", [2, 4])
def test_one_process_every_gpu(bench_env, fake_cudart, fake_nccl, gpus):
    env = nccl_env(bench_env, fake_cudart, fake_nccl, gpus)
    p = rankmap("bench", "nccl", "--format", "json", "--sizes", "1K:64K", *QUICK, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    rows = doc["rows"]
    assert {r["benchmark"] for r in rows} == set(OPS)
    assert {(r["library"], r["buffer"]) for r in rows} == {("nccl", "device")}
    for r in rows:
        assert r["ranks"] == gpus
        t_s = r["latency_us"] * 1e-6
        assert r["algbw_GBps"] == pytest.approx(r["size"] / t_s / 1e9, rel=1e-9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * BUS_FACTOR[r["benchmark"]](gpus), rel=1e-12)
    # nccl-tests' sizes: all-reduce counts every float, all-gather reports the gathered total
    assert [r["size"] for r in rows if r["benchmark"] == "all_reduce"] == [1024 << k for k in range(7)]
    per = (1024 // 4 // gpus) & ~3
    assert min(r["size"] for r in rows if r["benchmark"] == "all_gather") == per * 4 * gpus
    assert doc["machine"]["mode"] == "single-process" and doc["machine"]["nccl_version"] == "2.28.9"
    line = p.stderr.strip()
    assert line.startswith(f"bench nccl: measured NCCL all_reduce, all_gather") and f"{gpus} ranks" in line
    assert "not measured: MPI collectives: run with a launcher" in line


def test_factors_are_nccl_tests_ones():
    assert [BUS_FACTOR[o](8) for o in OPS] == [1.75, 0.875, 0.875, 1.0, 1.0, 0.875, 1.0]


def test_one_gpu_says_no_link_is_crossed(bench_env, fake_cudart, fake_nccl):
    env = nccl_env(bench_env, fake_cudart, fake_nccl, 1)
    p = rankmap("bench", "nccl", "--format", "json", "--ops", "all_reduce", "--sizes", "1K:1K", *QUICK, env=env)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["notes"] == ["one rank: collectives move no data between GPUs"]
    assert doc["rows"][0]["busbw_GBps"] == 0


def test_mpi_collectives_on_the_same_gpus(bench_env, fake_cudart):
    """With a launcher and no NCCL the MPI side still runs, staged (the MPI is not CUDA-aware), and is checked."""
    need_openmpi()
    env = dict(bench_env, RANKMAP_CUDART=str(fake_cudart), RANKMAP_NCCL_LIB="none")
    p = rankmap("bench", "nccl", "--format", "json", "--sizes", "1K:16K", *QUICK, "--", *OMPI, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert {(r["library"], r["buffer"]) for r in doc["rows"]} == {("mpi", "device-staged")}
    assert {r["benchmark"] for r in doc["rows"]} == set(OPS)
    assert doc["machine"]["mode"] == "mpi" and doc["machine"]["cuda_aware"] == 0
    assert "not measured: nccl:" in p.stderr


def test_nccl_failure_under_a_launcher_is_one_line(bench_env, fake_cudart, fake_nccl, tmp_path):
    """The job aborts (MPI_Abort: no rank runs its exit handlers), and its stand-in device memory goes
    with it, as real device memory would: nothing named after its ranks is left in /dev/shm."""
    need_openmpi()
    log = tmp_path / "cuda.log"
    env = dict(nccl_env(bench_env, fake_cudart, fake_nccl), FAKE_CUDA_LOG=str(log))   # no ncclCommInitRank
    p = rankmap("bench", "nccl", "--sizes", "1K:1K", *QUICK, "--", *OMPI, env=env, timeout=300)
    assert_one_line_error(p, "N.CommInitRank", "invalid usage (fake NCCL)")
    handles = [line.split()[1] for line in log.read_text().splitlines() if line.startswith("alloc ")]
    pids = {h.split("/")[2] for h in handles}
    assert len(pids) == 2 and len(handles) >= 4, handles       # both ranks had allocated their buffers
    left = [e for e in os.listdir("/dev/shm") if set(re.split(r"[-_.]", e)) & pids] if os.path.isdir("/dev/shm") else []
    assert left == [], left


def test_missing_pieces_are_one_line(bench_env, fake_cudart, fake_nccl):
    assert_one_line_error(rankmap("bench", "nccl", env=bench_env), "no CUDA runtime library")
    env = dict(bench_env, RANKMAP_CUDART=str(fake_cudart), RANKMAP_NCCL_LIB="none")
    assert_one_line_error(rankmap("bench", "nccl", env=env), "NCCL (libnccl.so.2) not found")
    env["RANKMAP_NCCL_LIB"] = "/no/libnccl.so.2"
    assert_one_line_error(rankmap("bench", "nccl", env=env), "bench nccl: measured nothing; not measured: nccl: "
                                                             "cannot load /no/libnccl.so.2")
    env = nccl_env(bench_env, fake_cudart, fake_nccl, 0)
    assert_one_line_error(rankmap("bench", "nccl", env=env), "no usable CUDA GPU here", "nothing measured")
    env = nccl_env(bench_env, fake_cudart, fake_nccl)
    assert_one_line_error(rankmap("bench", "nccl", "--ops", "allreduce", env=env), "unknown operation 'allreduce'")


def test_nccl_home_comes_first(tmp_path, monkeypatch):
    """nccl-tests builds against $NCCL_HOME: with it set, both tools measure that same library."""
    from rankmap.linkbench import tools

    monkeypatch.delenv("RANKMAP_NCCL_LIB", raising=False)
    monkeypatch.setenv("NCCL_HOME", str(tmp_path))
    assert tools.nccl_candidates()[0] == str(tmp_path / "lib" / "libnccl.so.2")
    monkeypatch.delenv("NCCL_HOME")
    assert all(not c.startswith(str(tmp_path)) for c in tools.nccl_candidates())
