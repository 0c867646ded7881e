"""The CUDA activity report end to end: `rankmap profile` of a real Open MPI job whose GPU side is
played by the stand-in CUPTI and libcuda (tests/native/staged_app.c), then the summary, `rankmap
show`, the JSON export and the dashboard's API, with exact figures; and a job without CUDA, which
must be unaffected but for one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, cli, rankmap, seed_shim_cache

NATIVE = ROOT / "tests" / "native"
MPICC, MPIRUN = "mpicc.openmpi", "mpirun.openmpi"
N, ITERS = 1_000_000, 5
US = 1000


@pytest.fixture(scope="module")
def bins(tmp_path_factory) -> dict[str, Path]:
    if not shutil.which(MPICC):
        pytest.skip("Open MPI is not installed")
    d = tmp_path_factory.mktemp("cudarep")
    lib = d / "lib"
    lib.mkdir()
    cc = ["cc", "-std=gnu11", "-O1", "-Wall", "-Werror", "-shared", "-fPIC"]
    subprocess.run([*cc, "-Wl,-soname,libcupti.so.13", "-o", str(lib / "libcupti.so.13"),
                    str(NATIVE / "fake_cupti.c"), "-lpthread"], check=True)
    subprocess.run([*cc, "-Wl,-soname,libcuda.so.1", "-o", str(lib / "libcuda.so.1"), str(NATIVE / "fake_cuda.c")],
                   check=True)
    subprocess.run([MPICC, "-O1", "-o", str(d / "staged_app"), str(NATIVE / "staged_app.c"), "-ldl"], check=True)
    # the tests' cache is their own (what rankmap remembers of the stand-in CUDA driver stays in it);
    # the MPI shim in it is the one the other tests built, copied, not compiled once more
    cache = tmp_path_factory.mktemp("cudarep-cache")
    seed_shim_cache(MPICC, cache)
    return {"lib": lib, "app": d / "staged_app", "cache": cache}


@pytest.fixture
def env(tmp_path, bins) -> dict:
    return {"RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": f"sqlite:///{tmp_path / 'rankmap.db'}",
            "RANKMAP_CUPTI": str(bins["lib"] / "libcupti.so.13"), "LD_LIBRARY_PATH": str(bins["lib"]),
            "RANKMAP_CACHE": str(bins["cache"])}


def launch(bins: dict[str, Path], mode: str) -> list[str]:
    return [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-x", "LD_LIBRARY_PATH", "-np", "2", str(bins["app"]),
            mode, str(N), str(ITERS)]


def profile(env: dict, *cmd: str, cuda: str | None = "on") -> tuple[subprocess.CompletedProcess, dict]:
    """``cuda`` None: no --cuda-activity flag (the default)."""
    flag = ["--cuda-activity", cuda] if cuda else []
    p = rankmap("profile", "--no-progress", *flag, "--", *cmd, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    e = cli("export", "latest", "--format", "json", env=env)
    assert e.returncode == 0, e.stderr
    return p, json.loads(e.stdout)


def rows(report: dict, category: str) -> dict[str, dict]:
    return {r["operation"]: r for r in report["table"] if r["category"] == category}


@pytest.mark.mpi
@pytest.mark.slow
def test_staged_exchange(bins, env):
    p, data = profile(env, *launch(bins, "staged"))
    rep = data["cuda_report"]
    assert rep["state"] == "CUDA activity: on for 2 ranks" and rep["ranks"] == [0, 1]
    kinds = {k["kind"]: k for k in rep["copy_kinds"]}
    assert set(kinds) == {"D2H", "H2D"}
    assert (kinds["D2H"]["count"], kinds["D2H"]["bytes"]) == (2 * (ITERS + 1), 2 * (ITERS + 1) * N)
    assert (kinds["H2D"]["count"], kinds["H2D"]["bytes"]) == (2 * ITERS, 2 * ITERS * N)
    assert kinds["H2D"]["pageable_bytes"] == kinds["H2D"]["bytes"] and kinds["H2D"]["ns"] == 2 * ITERS * 100 * US
    mem = rows(rep, "MEMORY_OPER")
    assert mem["D2H"]["instances"] == ITERS + 1 and mem["D2H"]["bytes"] == (ITERS + 1) * N
    assert mem["D2H"]["avg_ns"] == mem["D2H"]["min_ns"] == mem["D2H"]["max_ns"] == (ITERS + 1) * 100 * US
    assert mem["H2D"]["instances"] == ITERS
    kern = rows(rep, "CUDA_KERNEL")
    assert kern["all kernels (3 names)"]["instances"] == 1 + 2 * ITERS
    assert kern["step"]["instances"] == ITERS and kern["fill"]["avg_ns"] == 50 * US
    assert rows(rep, "point-to-point")["MPI_Sendrecv"]["instances"] == ITERS
    assert rep["staged_share"] == 1.0 and rep["staged_bytes"] == 2 * 2 * ITERS * N
    assert rep["verdicts"][0] == ("100 % of MPI bytes were staged through host memory: 20 MB of D2H+H2D copies "
                                  "that a CUDA-aware MPI would avoid")
    pop = rep["pop"]
    assert pop["ranks"] == 2 and pop["load_balance"] == 1.0
    assert pop["avg_kernel_ns"] == (1 + 2 * ITERS) * 50 * US
    assert pop["avg_copy_ns"] == (2 * ITERS + 1) * 100 * US
    # the stored rows and the timeline
    act = data["cuda_activity"]
    assert {r["rank"]: r["activity"].split(" ")[0] for r in act["ranks"]} == {0: "on:", 1: "on:"}
    assert act["ranks"][0]["devices"] == {"0": "0000:18:00.0 Fake GPU 0"}
    assert sum(t["bytes"] for t in act["timeline"] if t["what"] == "D2H") == 2 * (ITERS + 1) * N
    assert sum(t["count"] for t in act["timeline"] if t["what"] == "kernel") == 2 * (1 + 2 * ITERS)
    # the summary says it in words
    assert "verdict: 100 % of MPI bytes were staged through host memory" in p.stdout
    assert "CUDA_KERNEL" in p.stdout and "MEMORY_OPER" in p.stdout and "MPI_Sendrecv" in p.stdout
    # rankmap show: the same report, as text and as data
    s = cli("show", "latest", env=env)
    assert s.returncode == 0 and "bytes by copy kind" in s.stdout and "verdict: 100 %" in s.stdout
    j = cli("show", "latest", "--format", "json", env=env)
    assert json.loads(j.stdout) == rep


@pytest.mark.mpi
def test_default_is_off_and_names_the_switch(bins, env):
    """The default injects nothing into CUDA (its cost is none at all), and the summary's one CUDA
    line names --cuda-activity on and what it was measured to cost."""
    p, data = profile(dict(env, COLUMNS="200"), *launch(bins, "staged"), cuda=None)
    from rankmap.pipeline.profile import CUDA_ON_COST
    lines = [l for l in p.stdout.splitlines() if "CUDA" in l or "CUPTI" in l]
    assert lines == [f"CUDA activity: off (default; --cuda-activity on records copies+kernels: {CUDA_ON_COST})"]
    assert CUDA_ON_COST.startswith("+17-29 %")
    injected = data["job"]["meta"]["injected"]
    assert "CUDA_INJECTION64_PATH" not in injected and "RANKMAP_CUDA_KINDS" not in injected
    assert data["cuda_activity"] == {"copies": [], "kernels": [], "timeline": [], "ranks": []}
    assert not list(Path(data["job"]["run_dir"]).glob("rank-*.cuda.rmrec"))
    assert {o["operation"] for o in data["op_stats"]} >= {"MPI_Sendrecv"}   # the MPI capture ran as usual


@pytest.mark.mpi
def test_copies_only(bins, env):
    """--cuda-activity copies: the same copy rows as `on`, no kernels, and nothing concluded from the
    kernels' absence (no device POP, no copy-bound verdict); the staging verdict stands."""
    p, data = profile(env, *launch(bins, "staged"), cuda="copies")
    rep = data["cuda_report"]
    assert data["job"]["meta"]["injected"]["RANKMAP_CUDA_KINDS"] == "copies"
    assert rep["state"] == "CUDA activity: copies only (kernels not recorded) for 2 ranks"
    kinds = {k["kind"]: (k["count"], k["bytes"]) for k in rep["copy_kinds"]}
    assert kinds == {"D2H": (2 * (ITERS + 1), 2 * (ITERS + 1) * N), "H2D": (2 * ITERS, 2 * ITERS * N)}
    assert data["cuda_activity"]["kernels"] == [] and rep["kernels_total"] == 0
    assert not rows(rep, "CUDA_KERNEL") and rep["pop"] is None
    assert rep["verdicts"][0].startswith("100 % of MPI bytes were staged through host memory")
    assert not any("longer copying" in v for v in rep["verdicts"])
    assert rep["state"] in p.stdout


@pytest.mark.mpi
def test_gpu_aware_exchange(bins, env):
    _, data = profile(env, *launch(bins, "aware"))
    rep = data["cuda_report"]
    kinds = {k["kind"]: k for k in rep["copy_kinds"]}
    assert set(kinds) == {"D2H"} and kinds["D2H"]["count"] == 2
    assert rep["staged_bytes"] == 0
    assert rep["verdicts"] == ["GPU-aware: 100 % of the bytes exchanged between ranks left device memory directly; "
                               "host copies moved 2 MB in all"]
    assert {t["mem"] for t in data["traffic"]} == {"device"}


@pytest.mark.mpi
def test_job_without_cuda_is_unaffected(bins, env, tmp_path):
    """No CUDA in the job: the records and the summary are the same with and without CUDA capture,
    but for one line saying so."""
    ring = tmp_path / "ring"
    subprocess.run([MPICC, "-O1", "-Wno-stringop-overflow", "-o", str(ring), str(ROOT / "examples" / "mpi" / "ring.c")],
                   check=True)
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", str(ring), "1000", "3"]
    plain = dict(env, COLUMNS="300")     # one line is one line: the "off: why" of auto can be long
    del plain["RANKMAP_CUPTI"], plain["LD_LIBRARY_PATH"]
    p_off, off = profile(plain, *cmd, cuda="off")
    p_auto, auto = profile(plain, *cmd, cuda="auto")
    assert off["traffic"] == auto["traffic"]
    strip = lambda ops: [{k: v for k, v in o.items() if k != "ns"} for o in ops]  # noqa: E731
    assert strip(off["op_stats"]) == strip(auto["op_stats"])
    assert auto["cuda_activity"] == {"copies": [], "kernels": [], "timeline": [], "ranks": []}
    cuda_lines = lambda out: [l for l in out.splitlines() if "CUDA" in l or "CUPTI" in l]  # noqa: E731
    assert cuda_lines(p_off.stdout) == ["CUDA activity: off (--cuda-activity off)"]
    assert len(cuda_lines(p_auto.stdout)) == 1 and cuda_lines(p_auto.stdout)[0].startswith("CUDA activity: ")
    injected = auto["job"]["meta"]["injected"]
    if auto["job"]["meta"]["cuda_activity"].startswith("off"):
        assert "CUDA_INJECTION64_PATH" not in injected


@pytest.mark.mpi
def test_cuda_activity_on_without_cupti(bins, env, tmp_path):
    e = dict(env, RANKMAP_CUPTI=str(tmp_path / "nowhere" / "libcupti.so.13"))
    assert_one_line_error(rankmap("profile", "--cuda-activity", "on", "--", *launch(bins, "staged"), env=e),
                          "--cuda-activity on: no CUPTI library found")
    # the refused profile stored nothing: not even an empty store was left behind
    assert_one_line_error(cli("show", "7", env=env), "nothing was stored there")


@pytest.mark.mpi
def test_injection_already_set_elsewhere(bins, env):
    e = dict(env, CUDA_INJECTION64_PATH="/opt/other/tool.so")
    assert_one_line_error(rankmap("profile", "--cuda-activity", "on", "--", *launch(bins, "staged"), env=e),
                          "CUDA_INJECTION64_PATH is already set")


def test_report_rules_on_rows():
    """The verdicts' thresholds and the P2P naming, on rows as the store returns them."""
    from rankmap.report.cuda import CudaInputs, category, cuda_report, short_kernel_name
    dev = {"0": "0000:1B:00.0 NVIDIA H200", "1": "0000:2C:00.0 NVIDIA H200"}
    copies = [dict(rank=0, kind="P2P", src_mem="device", dst_mem="device", src_dev=0, dst_dev=1, count=10,
                   bytes=10 << 24, ns=3_000_000),
              dict(rank=0, kind="H2D", src_mem="pageable", dst_mem="device", src_dev=-1, dst_dev=0, count=4,
                   bytes=400_000_000, ns=400_000_000)]
    kernels = [dict(rank=0, device=0, name="void gemm<float, 128>(float*, int)", count=5, ns=100_000_000)]
    rep = cuda_report(CudaInputs(copies=copies, kernels=kernels, cuda_ranks=[dict(rank=0, activity="on: all",
                                                                                   devices=dev)],
                                 elapsed={0: 1_000_000_000}, capture="on"))
    assert [(p.src, p.dst, p.count) for p in rep.peer_pairs] == [(dev["0"], dev["1"], 10)]
    assert rep.verdicts == [
        "the GPUs spent longer copying (0.403 s per GPU) than computing (0.1 s)",
        "100 % of the host<->device bytes used pageable host memory (pinned buffers copy faster and can overlap)"]
    assert rep.pop.compute_share == pytest.approx(0.1) and rep.pop.communication_efficiency == pytest.approx(0.1 / 0.503)
    assert [r.operation for r in rep.table if r.category == "CUDA_KERNEL"] == ["all kernels (1 name)", "gemm<float, 128>"]
    assert short_kernel_name("void a::b<c<d>, (e)3>(int, float)") == "a::b<c<d>, (e)3>"
    # CUPTI's names are mangled: on an H200 a PyTorch job's kernels all read "_ZN2at6native29vectoriz…"
    assert short_kernel_name("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
                             width=200) == "at::native::vectorized_elementwise_kernel<4, FillFunctor<float>, array<char*, 1ul> >"
    assert short_kernel_name("_Z10accumulatePfi") == "accumulate" and short_kernel_name("_Zbogus") == "_Zbogus"
    assert short_kernel_name("void at::native::(anonymous namespace)::k<float, at::native::(anonymous namespace)::"
                             "f(double)::{lambda(float)#1}>(int)") == "at::native::k<float, f(double)::{lambda(float)#1}>"
    assert (category("MPI_Ialltoallv"), category("MPI_Isend"), category("MPI_Rget"), category("ncclSend"),
            category("MPI_Allreduce_init"), category("MPI_Init")) == (
        "collectives", "point-to-point", "one-sided", "point-to-point", "collectives", "other")
    # no capture at all, and a capture that was off in a rank
    assert cuda_report(CudaInputs(capture="off: no CUDA driver (libcuda) on this machine")).state == \
        "CUDA activity: off: no CUDA driver (libcuda) on this machine"
    off = cuda_report(CudaInputs(cuda_ranks=[dict(rank=3, activity="off: cannot load libcupti")], capture="on"))
    assert off.state == "CUDA activity: off: cannot load libcupti (rank 3)" and off.table == []


def test_table_keeps_its_names_in_80_columns():
    """What an H200 run of `rankmap show --gpu > file` printed: at 80 columns (a terminal's, and rich's
    for a file) the operation column was the one dropped, leaving three "CUDA_KERN…" rows and cut
    figures. Every operation name and every figure must be there whole."""
    import io

    from rich.console import Console, Group

    from rankmap.report.cuda import CudaInputs, cuda_report, renderables
    # as CUPTI gives them: mangled C++ (g++'s symbols for these declarations), or plain C
    names = ["_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
             "ncclDevKernel_SendRecv", "_Z10accumulatePfi"]
    kernels = [dict(rank=r, device=r, name=n, count=20 * (i + 1), ns=1_000_000 * (3 - i) + r)
               for r in (0, 1) for i, n in enumerate(names)]
    copies = [dict(rank=r, kind="D2H", src_mem="device", dst_mem="pageable", src_dev=r, dst_dev=-1, count=21,
                   bytes=176_000_000, ns=20_700_000) for r in (0, 1)]
    ops = [dict(rank=r, source="mpi", operation="MPI_Sendrecv", calls=20, ns=5_000_000) for r in (0, 1)]
    rep = cuda_report(CudaInputs(copies=copies, kernels=kernels, op_stats=ops, elapsed={0: 10**9, 1: 10**9},
                                 cuda_ranks=[dict(rank=r, activity="on: all", devices={}) for r in (0, 1)],
                                 capture="on"))
    buf = io.StringIO()
    Console(file=buf, width=80, force_terminal=False).print(Group(*renderables(rep)))
    text = buf.getvalue()
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    for op in ("all kernels (3 names)", "ncclDevKernel_SendRecv", "accumulate", "D2H", "MPI_Sendrecv"):
        assert any(op in ln for ln in lines), (op, text)
    # the one ellipsis: the long template name cut at 80 characters (short_kernel_name), folded, not dropped
    assert "CUDA_KERNEL" in text and "MEMORY_OPER" in text and text.count("…") == 1
    assert "at::native::" in text and "_ZN" not in text
    row = next(ln for ln in lines if "ncclDevKernel_SendRecv" in ln)
    assert row.split()[1:] == ["2", "ms", "2", "ms", "2", "ms", "40"], row    # avg, min, max, instances


def _operation_cells(text: str) -> list[str]:
    """The operation column of the per-process table, each cell's folded lines joined (spaces dropped:
    rich wraps a cell at its spaces)."""
    lines = text.splitlines()
    h = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("operation "))
    end = lines[h].index("avg time") - 1
    cells: list[str] = []
    for ln in lines[h + 2:]:
        if not ln.strip():
            break
        op = ln[:end]
        if op.startswith("   "):                      # a row: two spaces into the cell
            cells.append("".join(op.split()))
        elif ln[end:].strip() == "" and cells and op.strip() not in ("CUDA_KERNEL", "MEMORY_OPER"):
            cells[-1] += "".join(op.split())           # its name, folded
    return cells


def test_kernels_alike_past_the_cut_read_apart():
    """On an H200 two cuBLAS kernels both read
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma…": their names
    differ past the 80 characters the report keeps. Names that would read the same are shown to the
    word where they part; overloads (alike without their parameter lists) with their parameters.
    The table stays within 80 columns, and no two rows read the same."""
    import io

    from rich.console import Console, Group

    from rankmap.report.cuda import CudaInputs, cuda_report, renderables
    gemm = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_"
    names = [gemm + "kernel__5x_cublas", gemm + "segment_k_off_kernel__5x_cublas",
             gemm.replace("aligna4_alignc4", "aligna1_alignc1") + "kernel__5x_cublas",
             # g++'s symbols: a PyTorch-like kernel with two array sizes, and an overloaded function
             "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13BinaryFunctorIfffNS0_15binary_internal10Mul"
             "FunctorIfEEEESt5arrayIPcLm2EEEEviT0_T1_",
             "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13BinaryFunctorIfffNS0_15binary_internal10Mul"
             "FunctorIfEEEESt5arrayIPcLm3EEEEviT0_T1_",
             "_Z1kPi", "_Z1kPf", "ncclDevKernel_SendRecv"]
    vec = "at::native::vectorized_elementwise_kernel<4, BinaryFunctor<float, float, float, MulFunctor<float> >, "
    want = [names[0], gemm + "segment…", gemm[:gemm.index("aligna4")] + "aligna1…",
            vec + "array<char*, 2ul> >", vec + "array<char*, 3ul> >", "k(int*)", "k(float*)", "ncclDevKernel_SendRecv"]
    kernels = [dict(rank=r, device=r, name=n, count=10, ns=1_000_000 * (len(names) - i) + r)
               for r in (0, 1) for i, n in enumerate(names)]
    rep = cuda_report(CudaInputs(kernels=kernels, elapsed={0: 10**9, 1: 10**9},
                                 cuda_ranks=[dict(rank=r, activity="on: all", devices={}) for r in (0, 1)],
                                 capture="on"))
    assert [r.operation for r in rep.table][1:] == want          # the JSON export's and the dashboard's too
    buf = io.StringIO()
    Console(file=buf, width=80, force_terminal=False).print(Group(*renderables(rep)))
    text = buf.getvalue()
    assert max(map(len, text.splitlines())) <= 80, text
    cells = _operation_cells(text)
    assert cells == ["allkernels(8names)", *("".join(w.split()) for w in want)], text
    from rankmap.report.cuda import kernel_labels
    assert list(kernel_labels(names).values()) == want
    # each alone, or with names that part within the cut, keeps its short name
    assert kernel_labels(names[:1] + names[3:4] + names[5:6]) == {
        names[0]: gemm[:79] + "…", names[3]: (vec + "array<char*, 2ul> >")[:79] + "…", names[5]: "k"}
