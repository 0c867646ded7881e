"""`rankmap bench mpi` under real Open MPI and MPICH: host buffers for real, device buffers through a
stand-in CUDA runtime (host memory, IPC through shared memory), and an OSU-style reference to agree with."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bench_fixtures import MPIRUN, NATIVE_TESTS, OMPI, bench_cache, bench_env, fake_cudart, need_openmpi  # noqa: F401
from conftest import assert_one_line_error, rankmap
from rankmap.linkbench.rows import BUFFERS

pytestmark = pytest.mark.mpi


def bench(env, *args, launcher=None):
    """One `rankmap bench mpi`; a launch the MPI itself botched (no word from the benchmark program: this
    machine is shared and loaded) is tried once more, a failure of the program never."""
    cmd = ("bench", "mpi", "--format", "json", *args, "--", *(launcher or OMPI))
    p = rankmap(*cmd, env=env, timeout=900)
    if p.returncode != 0 and "exited with status" in p.stderr:
        print("launch failed, trying once more:", p.stderr)
        p = rankmap(*cmd, env=env, timeout=900)
    return p, (json.loads(p.stdout) if p.returncode == 0 else None)


def test_host_buffers_under_open_mpi(bench_env):
    need_openmpi()
    p, doc = bench(bench_env, "--sizes", "8:4K", "--coll-max-size", "1K", "--trials", "1", "--max-iters", "100")
    assert p.returncode == 0, p.stderr
    rows = doc["rows"]
    assert {r["buffer"] for r in rows} == {"host"}
    for r in rows:
        assert r["buffer"] in BUFFERS and isinstance(r["size"], int)
        assert ("latency_us" in r) != ("bandwidth_GBps" in r), r      # one figure per row
        assert (r.get("latency_us") or r.get("bandwidth_GBps")) > 0
    for test in ("latency", "bw", "bibw"):
        assert [r["size"] for r in rows if r["benchmark"] == test] == [8 << k for k in range(10)]
    for test in ("allreduce", "bcast", "reduce", "allgather", "alltoall", "reduce_scatter"):
        assert [r["size"] for r in rows if r["benchmark"] == test] == [8 << k for k in range(8)]
    assert [r["size"] for r in rows if r["benchmark"] == "barrier"] == [0]
    bibw = [r for r in rows if r["benchmark"] == "bibw"]
    assert all(r["total_GBps"] == pytest.approx(2 * r["bandwidth_GBps"]) for r in bibw)
    assert doc["machine"]["cuda_aware"] is False and "Open MPI" in doc["machine"]["mpi"]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench mpi: measured host buffers (latency, bw, bibw")
    assert "not measured: device buffers:" in lines[0] and "stored as bench run 1" in lines[0]
    # stored: `bench show` gives the same rows back
    s = rankmap("bench", "show", "latest", "--format", "json", env=bench_env)
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout)["rows"] == rows


@pytest.mark.timing
def test_bandwidth_agrees_with_an_osu_style_reference(bench_env, tmp_path):
    """Our bw against tests/native/osu_style_bw.c with the same window and iterations, interleaved,
    five times each; the second best of each agree within a factor of 1.6.

    The fast end of several runs, not their median: on a shared machine other processes mostly take
    bandwidth away (two ranks that poll need both cores), in bursts that a median of three can land
    on for one side and not the other. But not only: on a loaded 2-core CI machine one reference run
    of eleven read 13.1 GB/s beside a best of ours of 6.6 and the reference's next best 8.8 (the two
    ranks' copies met in a shared cache). So the second best of each is compared: one lucky run on
    either side moves nothing. On a quiet machine they agree within 15 % (10-12 GB/s each); on a
    loaded CI machine ours was once 0.65 of the reference in all five runs (4.6-5.1 against
    7.0-7.8 GB/s). A factor of 1.6 still catches an error in what is counted (a window, a direction,
    an iteration: each at least a factor of 2)."""
    need_openmpi()
    # each rank on a core of its own, the same two for both programs: left to the scheduler of a loaded
    # machine, two ranks on one core copy 1 MiB within its cache (a reference run read 15.6 GB/s,
    # above the quiet machine's 10-12, beside ours at 9.2)
    BOUND = [*OMPI, "--bind-to", "core", "--map-by", "core"]
    ref_exe = tmp_path / "osu_style_bw"
    subprocess.run([shutil.which("mpicc.openmpi") or "mpicc", "-O2", "-Wall", "-Werror", "-o", str(ref_exe),
                    str(NATIVE_TESTS / "osu_style_bw.c")], check=True)
    ours: list[float] = []
    ref: list[float] = []
    shape: dict = {}

    def run_ours() -> None:
        p, doc = bench(bench_env, "--no-store", "--tests", "bw", "--buffers", "host", "--sizes", "1M:1M", "--trials", "1",
                       launcher=BOUND)
        assert p.returncode == 0, p.stderr
        (row,) = doc["rows"]
        assert shape.setdefault("window_iters", (row["window"], row["iters"])) == (row["window"], row["iters"])
        ours.append(row["bandwidth_GBps"])

    def run_ref() -> None:
        window, iters = shape["window_iters"]
        # a session of its own, as `rankmap bench` starts its launcher: where the kernel groups
        # processes by session for the scheduler (autogroup), the two then get the same share of a
        # loaded machine (in the test's session the reference shared one group with all the load
        # beside it: its best of 11 runs 3.7 GB/s against ours 7.6, two CPU burners beside the suite)
        q = subprocess.run([*BOUND, str(ref_exe), "1048576", str(window), str(iters), "6"],
                           capture_output=True, text=True, timeout=300, start_new_session=True)
        assert q.returncode == 0, q.stderr
        size, w, i, ns = map(int, q.stdout.split())
        assert (size, w, i) == (1048576, window, iters)
        ref.append(size * w * i / ns)

    # ABBA order, so a slow drift of the machine's load favours neither; ours first fixes the shape both use
    for run in [run_ours, run_ref, run_ref, run_ours] * 2 + [run_ours, run_ref]:
        run()
    assert len(ours) == len(ref) == 5
    # a busy machine (the suite's other workers beside it) can disturb all five runs of one side: then
    # more runs, up to 11 of each, find its undisturbed fast end too; a count that is wrong is off in every run
    def agree() -> bool:
        return 1 / 1.6 <= second_best(ours) / second_best(ref) <= 1.6

    while not agree() and len(ours) < 11:
        for run in (run_ref, run_ours, run_ours, run_ref):
            run()
    assert agree(), (ours, ref)


def second_best(runs: list[float]) -> float:
    """The fast end of a set of bandwidth runs that one outlier above the rest does not decide."""
    return sorted(runs)[-2]


def test_device_buffers_staged_and_ipc_through_a_stand_in_runtime(bench_env, fake_cudart, tmp_path):
    """Every device path runs its real MPI and copy sequence on host memory: the program checks the bytes
    that arrive, and the copy log shows staging makes two copies per message and IPC one."""
    need_openmpi()
    log = tmp_path / "copies.log"
    env = dict(bench_env, RANKMAP_CUDART=str(fake_cudart), FAKE_CUDA_LOG=str(log))
    p, doc = bench(env, "--tests", "latency", "--buffers", "device-staged", "--sizes", "8:8", "--trials", "1")
    assert p.returncode == 0, p.stderr
    (row,) = doc["rows"]
    copies = log.read_text().split("\n").count("copy 8")
    assert copies == 2 * 2 * (row["iters"] + row["iters"] // 10)      # 2 ranks x (D2H + H2D) x (iters + skip)
    log.unlink()
    p, doc = bench(env, "--tests", "latency", "--buffers", "device-ipc", "--sizes", "8:8", "--trials", "1")
    assert p.returncode == 0, p.stderr
    (row,) = doc["rows"]
    assert row["buffer"] == "device-ipc"
    assert log.read_text().split("\n").count("copy 8") == 2 * (row["iters"] + row["iters"] // 10)
    # all of them, every test
    del env["FAKE_CUDA_LOG"]
    p, doc = bench(env, "--sizes", "8:64K", "--coll-max-size", "4K", "--trials", "1", "--max-iters", "40")
    assert p.returncode == 0, p.stderr
    have = {(r["benchmark"], r["buffer"]) for r in doc["rows"]}
    for t in ("latency", "bw", "bibw"):
        assert {(t, b) for b in ("host", "device-staged", "device-ipc")} <= have
    assert ("allreduce", "device-staged") in have and ("allreduce", "device-ipc") not in have
    assert doc["machine"]["cuda"] is True and [g["gpu"] for g in doc["machine"]["rank_gpus"]] == [0, 1]
    line = p.stderr.strip()
    assert "device-staged buffers" in line and "device-ipc buffers (latency, bw, bibw)" in line
    assert "not measured: device: the MPI is not CUDA-aware (Open MPI cuda extension" in line


def test_cuda_aware_told_and_ipc_failure_said(bench_env, fake_cudart):
    need_openmpi()
    env = dict(bench_env, RANKMAP_CUDART=str(fake_cudart))
    p, doc = bench(env, "--cuda-aware", "yes", "--tests", "latency,allreduce", "--sizes", "8:64", "--coll-max-size", "64",
                   "--trials", "1")
    assert p.returncode == 0, p.stderr
    assert {("latency", "device"), ("allreduce", "device")} <= {(r["benchmark"], r["buffer"]) for r in doc["rows"]}
    assert doc["machine"]["cuda_aware"] is True and doc["machine"]["cuda_aware_detected"] is False
    env["FAKE_CUDA_FAIL_IPC"] = "1"
    p, doc = bench(env, "--tests", "latency", "--sizes", "8:8", "--trials", "1")
    assert p.returncode == 0, p.stderr
    assert "device-ipc" not in {r["buffer"] for r in doc["rows"]}
    assert "device-ipc: rank 0: cudaIpcOpenMemHandle: fake CUDA error 201" in p.stderr


def test_real_cuda_runtime_without_a_gpu_says_so(bench_env):
    need_openmpi()
    from rankmap.linkbench import tools

    real = tools._first_loadable(tools.cudart_candidates())
    if real is None:
        pytest.skip("no CUDA runtime library on this machine")
    env = dict(bench_env, RANKMAP_CUDART=real)
    p, doc = bench(env, "--tests", "latency", "--sizes", "8:8", "--trials", "1")
    assert p.returncode == 0, p.stderr
    assert "not measured: device buffers: no CUDA device" in p.stderr


def test_mpich_host_buffers(bench_env):
    hydra = shutil.which("mpiexec.mpich") or shutil.which("mpiexec.hydra")
    if not hydra:
        pytest.skip("MPICH is not installed")
    p, doc = bench(bench_env, "--tests", "latency,allreduce", "--sizes", "8:64", "--coll-max-size", "64", "--trials", "1",
                   launcher=[hydra, "-n", "2"])
    assert p.returncode == 0, p.stderr
    assert {r["benchmark"] for r in doc["rows"]} == {"latency", "allreduce"}
    assert "MPICH" in doc["machine"]["mpi"] and "MPIX_GPU_query_support(CUDA) = 0" in doc["machine"]["cuda_aware_how"]


def test_bad_launchers_and_options_are_one_line(bench_env, tmp_path):
    need_openmpi()
    assert_one_line_error(rankmap("bench", "mpi", env=bench_env), "give the MPI launcher after --")
    assert_one_line_error(rankmap("bench", "mpi", "--", "/bin/true", env=bench_env), "needs an MPI launcher")
    assert_one_line_error(rankmap("bench", "mpi", "--", *OMPI, "/bin/true", env=bench_env), "not a program: '/bin/true'")
    assert_one_line_error(rankmap("bench", "mpi", "--", MPIRUN, "-np", "1", env=bench_env), "at least 2 ranks")
    assert_one_line_error(rankmap("bench", "mpi", "--tests", "lat", "--", *OMPI, env=bench_env), "unknown test 'lat'")
    assert_one_line_error(rankmap("bench", "mpi", "--buffers", "gpu", "--", *OMPI, env=bench_env), "unknown buffer 'gpu'")


def test_counts_below_what_the_programs_take_are_one_line(bench_env):
    """Named as the user's option before anything is built or run (the programs' own check would be
    reported as a rankmap bug)."""
    for args, needle in ((["p2p", "--loops", "0"], "--loops must be at least 1, got 0"),
                         (["p2p", "--samples", "-2"], "--samples must be at least 1"),
                         (["mpi", "--window", "0", "--", *OMPI], "--window must be at least 1"),
                         (["mpi", "--max-iters", "0", "--", *OMPI], "--max-iters must be at least 1"),
                         (["nccl", "--iters", "0"], "--iters must be at least 1"),
                         (["nccl", "--warmup", "-1"], "--warmup must be at least 0"),
                         (["nccl", "--step-factor", "1"], "--step-factor must be at least 1.01, got 1")):
        p = rankmap("bench", *args, env=bench_env)
        assert_one_line_error(p, needle)
        assert "rankmap bug" not in p.stderr


def test_a_benchmark_past_its_time_limit_is_stopped(bench_env):
    need_openmpi()
    p = rankmap("bench", "mpi", "--timeout", "1", "--sizes", "8:64M", "--", *OMPI, env=bench_env, timeout=300)
    assert_one_line_error(p, "ran longer than 1 s and was stopped")
    assert_one_line_error(rankmap("bench", "show", env=bench_env), "no benchmark runs")   # nothing half-stored


def test_show_without_runs_is_one_line(bench_env):
    assert_one_line_error(rankmap("bench", "show", env=bench_env), "no benchmark runs")
    assert_one_line_error(rankmap("bench", "show", "x", env=bench_env), "not a run id")


def test_sizes_bound_the_collectives_too(bench_env):
    """``--sizes 8:64`` asked for messages up to 64 B, and the collectives still ran up to 16 MiB
    (their own cap, --coll-max-size); the smaller of the two bounds them now."""
    need_openmpi()
    p, doc = bench(bench_env, "--sizes", "8:64", "--tests", "latency,allreduce", "--trials", "1", "--max-iters", "20")
    assert p.returncode == 0, p.stderr
    for test in ("latency", "allreduce"):
        assert [r["size"] for r in doc["rows"] if r["benchmark"] == test] == [8, 16, 32, 64], doc["rows"]
