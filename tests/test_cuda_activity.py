"""The CUDA activity library without a GPU: a C program plays the CUDA driver (it calls
InitializeInjection as cuInit does) and the application, a stand-in CUPTI hands over activity
buffers laid out as CUPTI 13 lays them out, and the record file is read back with the one reader.

Scenario and expected figures: tests/native/cuda_app.c.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rankmap.formats import record as records
from rankmap.capture.cuda_build import build_library

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "tests" / "native"
MiB = 1 << 20
US = 1000


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cuda")
    old = os.environ.get("RANKMAP_CACHE")
    os.environ["RANKMAP_CACHE"] = str(d / "cache")
    try:
        lib = build_library()
    finally:
        if old is None:
            del os.environ["RANKMAP_CACHE"]
        else:
            os.environ["RANKMAP_CACHE"] = old
    out = {"lib": lib, "cupti": d / "libcupti.so.13", "cuda": d / "libcuda.so.1", "app": d / "cuda_app"}
    cc = ["cc", "-std=gnu11", "-O1", "-Wall", "-Werror"]
    subprocess.run([*cc, "-shared", "-fPIC", "-Wl,-soname,libcupti.so.13", "-o", str(out["cupti"]),
                    str(NATIVE / "fake_cupti.c"), "-lpthread"], check=True)
    subprocess.run([*cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out["cuda"]),
                    str(NATIVE / "fake_cuda.c")], check=True)
    subprocess.run([*cc, "-o", str(out["app"]), str(NATIVE / "cuda_app.c"), "-ldl"], check=True)
    return out


def _env(parts: dict[str, Path], run_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANKMAP_", "FAKE_", "OMPI_", "PMI", "SLURM_"))
           and k not in ("RANK", "WORLD_SIZE")}
    env.update(RANKMAP_RUN_DIR=str(run_dir), RANKMAP_FLUSH_MS="100", FAKE_CUDA=str(parts["cuda"]),
               FAKE_CUPTI=str(parts["cupti"]), RANKMAP_CUPTI=str(parts["cupti"]))
    env.update(extra)
    return env


def run_app(parts: dict[str, Path], run_dir: Path, mode: str = "scenario", **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(parts["app"]), str(parts["lib"]), mode], env=_env(parts, run_dir, **extra),
                          input="go\n", capture_output=True, text=True, timeout=60)


def copies(rec: records.RankRecord) -> dict[tuple, tuple[int, int, int]]:
    """(kind, src_mem, dst_mem, src_dev, dst_dev) -> (count, bytes, ns)"""
    return {tuple(r[:5]): tuple(r[5:]) for r in rec.cuda_copies}


FULL = {
    ("H2D", "pageable", "device", -1, 0): (5, 5 * MiB, 5 * 100 * US),
    ("H2D", "pinned", "device", -1, 0): (3, 3000, 9 * US),
    ("D2H", "device", "pageable", 0, -1): (5, 5 * MiB, 5 * 120 * US),
    ("D2D", "device", "device", 0, 0): (2, 8192, 2 * 2 * US),
    ("P2P", "device", "device", 0, 1): (3, 6 * MiB, 3 * 10 * US),
    ("P2P", "device", "device", 1, 0): (1, 2 * MiB, 11 * US),
    ("memset", "unknown", "device", -1, 0): (2, 512, 2 * US),
}
KERNELS = [(0, "(unnamed)", 1, 7 * US), (0, "_Z6step_kPfi", 5, 4 * 50 * US), (1, "ncclDevKernel_SendRecv", 2, 600 * US)]


def check_full(rec: records.RankRecord) -> None:
    assert rec.source == "cuda" and rec.finalized and not rec.problems
    assert copies(rec) == FULL
    assert rec.cuda_kernels == KERNELS
    assert rec.meta["cuda.records"] == ("copies=13 peer_copies=4 memsets=2 kernels=8 other=1 bad_buffers=0 "
                                        "dropped=0")
    assert rec.meta["cuda.device.0"] == "0000:18:00.0 Fake GPU 0"
    assert rec.meta["cuda.device.1"] == "0000:28:00.0 Fake GPU 1"
    # the timeline holds every copy and every timed kernel (one kernel came without timestamps)
    tl: dict[str, list[int]] = {}
    for _b, what, c, by, ns in rec.cuda_timeline:
        a = tl.setdefault(what, [0, 0, 0])
        a[0] += c
        a[1] += by
        a[2] += ns
    assert tl["kernel"] == [7, 0, 7 * US + 4 * 50 * US + 600 * US]
    assert tl["H2D"] == [8, 5 * MiB + 3000, 509 * US]
    assert tl["P2P"] == [4, 8 * MiB, 41 * US]
    assert all(b >= 0 for b, *_ in rec.cuda_timeline)


def test_scenario_through_rankmap_cupti(parts, tmp_path):
    """CUPTI found through RANKMAP_CUPTI; phase 1 is in the file while the program still runs."""
    env = _env(parts, tmp_path)
    p = subprocess.Popen([str(parts["app"]), str(parts["lib"]), "scenario"], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "phase1"
    path = tmp_path / "rank-0.cuda.rmrec"
    live = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:       # the library asks CUPTI for buffers every flush interval
        if path.exists():
            live = records.read(path, live=True)
            if any(r[0] == "H2D" for r in live.cuda_copies) and live.cuda_kernels:
                break
        time.sleep(0.05)
    assert live is not None
    assert copies(live) == {k: v for k, v in FULL.items() if k[0] in ("H2D", "D2H")}
    assert live.cuda_kernels == [(0, "_Z6step_kPfi", 4, 200 * US)]
    assert not live.finalized
    out, err = p.communicate("go\n", timeout=30)
    assert p.returncode == 0, err
    assert err == ""
    rec = records.read(path)
    check_full(rec)
    assert rec.meta["cuda.activity"] == f"on: all (CUPTI API 130001, {parts['cupti']})"
    assert rec.world_rank == 0 and rec.world_size == 1


def test_scenario_with_the_applications_own_cupti(parts, tmp_path):
    """A process that loaded CUPTI itself (as PyTorch does) has it used, not a second copy."""
    r = run_app(parts, tmp_path, FAKE_CUPTI_PRELOAD="1", RANKMAP_CUPTI="/nonexistent/libcupti.so.13")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    rec = records.read(tmp_path / "rank-0.cuda.rmrec")
    check_full(rec)
    assert str(parts["cupti"]) in rec.meta["cuda.activity"]


def test_small_buffers_and_dropped_records(parts, tmp_path):
    """Records spread over many buffers sum the same; records CUPTI dropped are counted."""
    r = run_app(parts, tmp_path, FAKE_CUPTI_BUFFER_RECORDS="2", FAKE_CUPTI_DROPPED="7")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    rec = records.read(tmp_path / "rank-0.cuda.rmrec")
    assert copies(rec) == FULL and rec.cuda_kernels == KERNELS
    assert rec.meta["cuda.records"].endswith("dropped=7")


def test_cupti_12_records_read_without_copy_count(parts, tmp_path):
    """CUPTI 12.x has no copyCount: a batched record counts as one copy."""
    r = run_app(parts, tmp_path, FAKE_CUPTI_VERSION="28")
    assert r.returncode == 0 and r.stderr == ""
    got = copies(records.read(tmp_path / "rank-0.cuda.rmrec"))
    assert got[("H2D", "pinned", "device", -1, 0)] == (1, 3000, 9 * US)


@pytest.mark.parametrize("extra, why", [
    ({"RANKMAP_CUPTI": "/nonexistent/libcupti.so.13", "FAKE_CUPTI": ""}, "cannot load libcupti"),
    ({"FAKE_CUPTI_VERSION": "140000"}, "CUPTI API version 140000"),
    ({"FAKE_CUPTI_VERSION": "18"}, "CUPTI API version 18"),
    ({"FAKE_CUPTI_FAIL": "cuptiGetVersion"}, "cuptiGetVersion: CUPTI_ERROR_NOT_SUPPORTED (27)"),
    ({"FAKE_CUPTI_FAIL": "cuptiGetTimestamp"}, "cuptiGetTimestamp: CUPTI_ERROR_NOT_SUPPORTED"),
    ({"FAKE_CUPTI_FAIL": "cuptiActivityRegisterCallbacks"}, "cuptiActivityRegisterCallbacks: CUPTI_ERROR_NOT"),
    ({"FAKE_CUPTI_FAIL": "cuptiActivityEnable(10)"}, "cuptiActivityEnable(kind 10): CUPTI_ERROR_NOT_SUPPORTED"),
])
def test_start_failures_turn_off_with_one_line(parts, tmp_path, extra, why):
    r = run_app(parts, tmp_path, "init", **extra)
    assert r.returncode == 0
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rankmap: CUDA activity capture disabled: ") and why in lines[0]
    assert r.stdout.strip() in ("enabled 0", "enabled -1")      # nothing left enabled in CUPTI
    rec = records.read(tmp_path / "rank-0.cuda.rmrec")
    assert rec.finalized and rec.meta["cuda.activity"].startswith("off: ") and why in rec.meta["cuda.activity"]


def test_flush_failure_stops_with_one_line(parts, tmp_path):
    r = run_app(parts, tmp_path, FAKE_CUPTI_FAIL="cuptiActivityFlushAll")
    assert r.returncode == 0
    lines = r.stderr.splitlines()
    # the periodic flush or the final one at exit, whichever comes first, fails: one line either way
    assert len(lines) == 1 and lines[0].startswith("rankmap: CUDA activity capture disabled: ")
    assert lines[0].endswith("cuptiActivityFlushAll: CUPTI_ERROR_NOT_SUPPORTED (27)")
    rec = records.read(tmp_path / "rank-0.cuda.rmrec")
    assert rec.finalized and rec.meta["cuda.activity"].startswith("stopped: ")
    assert rec.cuda_copies == []


def test_rank_from_launcher_and_launcher_processes_left_out(parts, tmp_path):
    r = run_app(parts, tmp_path / "a", OMPI_COMM_WORLD_RANK="3", OMPI_COMM_WORLD_SIZE="4", RANKMAP_CUDA_NEED_RANK="1")
    assert r.returncode == 0 and r.stderr == ""
    rec = records.read(tmp_path / "a" / "rank-3.cuda.rmrec")
    assert (rec.world_rank, rec.world_size) == (3, 4)
    check_full(rec)
    # a launcher process (no rank variable) that initialises CUDA records nothing and says nothing
    r = run_app(parts, tmp_path / "b", RANKMAP_CUDA_NEED_RANK="1")
    assert r.returncode == 0 and r.stderr == "" and not (tmp_path / "b").exists()


def test_rank_from_hydras_pmi_port(parts, tmp_path):
    """``mpiexec.mpich -pmi-port`` sets PMI_ID, no PMI_RANK or PMI_SIZE: every rank of such a job used
    to be taken for the launcher, and recorded nothing."""
    r = run_app(parts, tmp_path, PMI_ID="2", PMI_PORT="host:4000", MPI_LOCALRANKID="0", RANKMAP_CUDA_NEED_RANK="1")
    assert r.returncode == 0 and r.stderr == ""
    rec = records.read(tmp_path / "rank-2.cuda.rmrec")
    assert (rec.world_rank, rec.world_size) == (2, 3)      # no size variable: rank + 1 at least
    check_full(rec)


def test_second_process_of_a_rank_keeps_out(parts, tmp_path):
    assert run_app(parts, tmp_path).returncode == 0
    before = (tmp_path / "rank-0.cuda.rmrec").read_bytes()
    r = run_app(parts, tmp_path)
    assert r.returncode == 0
    assert len(r.stderr.splitlines()) == 1 and "already written by another process of rank 0" in r.stderr
    assert (tmp_path / "rank-0.cuda.rmrec").read_bytes() == before


def test_forked_child_leaves_the_file_alone(parts, tmp_path):
    r = run_app(parts, tmp_path, "fork")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    check_full(records.read(tmp_path / "rank-0.cuda.rmrec"))


def test_off_without_run_dir_and_kinds(parts, tmp_path):
    env = _env(parts, tmp_path)
    del env["RANKMAP_RUN_DIR"]
    r = subprocess.run([str(parts["app"]), str(parts["lib"]), "init"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "" and r.stdout.strip() == "enabled -1"
    r = run_app(parts, tmp_path / "n", "init", RANKMAP_CUDA_KINDS="none")
    assert r.returncode == 0 and r.stderr == "" and r.stdout.strip() == "enabled -1"
    assert records.read(tmp_path / "n" / "rank-0.cuda.rmrec").meta["cuda.activity"] == "off: RANKMAP_CUDA_KINDS=none"
    r = run_app(parts, tmp_path / "c", RANKMAP_CUDA_KINDS="copies")
    rec = records.read(tmp_path / "c" / "rank-0.cuda.rmrec")
    assert copies(rec) == FULL and rec.cuda_kernels == []
    r = run_app(parts, tmp_path / "x", "init", RANKMAP_CUDA_KINDS="bogus")
    assert r.stderr.startswith("rankmap: CUDA activity capture disabled: RANKMAP_CUDA_KINDS=bogus")


def test_no_build_dependency_on_cuda(parts):
    """The library needs nothing of CUDA or CUPTI to load; it exports only the injection entry point."""
    needed = subprocess.run(["readelf", "-d", str(parts["lib"])], capture_output=True, text=True, check=True).stdout
    libs = [l.split("[", 1)[1].rstrip("]") for l in needed.splitlines() if "(NEEDED)" in l]
    assert libs and not [l for l in libs if "cuda" in l or "cupti" in l], libs
    out = subprocess.run(["nm", "-D", "--defined-only", str(parts["lib"])], capture_output=True, text=True,
                         check=True).stdout
    assert [l.split()[-1] for l in out.splitlines() if l.split()[1:2] == ["T"]] == ["InitializeInjection"]


def test_real_cupti_without_a_gpu_turns_off(parts, tmp_path):
    """The toolkit's own libcupti, on a machine with no GPU driver: one line, no crash (where installed)."""
    from rankmap.capture.cuda_build import find_cupti
    real = find_cupti()
    if real is None:
        pytest.skip("no CUPTI library on this machine")
    env = _env(parts, tmp_path, RANKMAP_CUPTI=real)
    del env["FAKE_CUDA"], env["FAKE_CUPTI"]
    r = subprocess.run([str(parts["app"]), str(parts["lib"]), "init"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0
    lines = r.stderr.splitlines()
    rec = records.read(tmp_path / "rank-0.cuda.rmrec")
    if rec.meta["cuda.activity"].startswith("on"):
        pytest.skip("this machine's CUPTI started (a GPU is present)")
    assert len(lines) == 1 and lines[0].startswith("rankmap: CUDA activity capture disabled: "), r.stderr
    assert rec.finalized and rec.meta["cuda.activity"].startswith("off: ")


def _cupti_headers() -> Path | None:
    cands = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", *sorted(map(str, Path("/usr/local").glob("cuda-*")))]
    for c in cands:
        for inc in (Path(c) / "include", Path(c) / "extras" / "CUPTI" / "include"):
            if c and (inc / "cupti_activity.h").is_file():
                return inc
    return None


def test_layout_agrees_with_cupti_headers(tmp_path):
    """native/cuda/cupti_abi.h against the toolkit's cupti_activity.h (where a toolkit is installed)."""
    inc = _cupti_headers()
    if inc is None or not shutil.which("cc"):
        pytest.skip("no CUDA toolkit with CUPTI headers here")
    r = subprocess.run(["cc", "-std=gnu11", "-Wall", "-Werror", f"-I{inc}", "-fsyntax-only",
                        str(NATIVE / "cupti_layout_check.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_launchers_inject_the_library(tmp_path):
    """CUDA_INJECTION64_PATH goes to the ranks; a launcher that gets the environment itself (torchrun)
    also gets RANKMAP_CUDA_NEED_RANK so that it records nothing of its own."""
    from rankmap.capture import launchers as L
    plain = L.prepare(L.Launcher("plain", ["./a"], "./a"), run_dir=tmp_path, cuda_lib="/x/librankmap_cuda.so",
                      cupti="/y/libcupti.so.13", base_env={})
    assert plain.injected["CUDA_INJECTION64_PATH"] == "/x/librankmap_cuda.so"
    assert plain.injected["RANKMAP_CUPTI"] == "/y/libcupti.so.13" and "RANKMAP_CUDA_NEED_RANK" not in plain.injected
    assert plain.injected["RANKMAP_CUDA_KINDS"] == "all"
    copies = L.prepare(L.Launcher("plain", ["./a"], "./a"), run_dir=tmp_path, cuda_lib="/x/librankmap_cuda.so",
                       cuda_kinds="copies", base_env={})
    assert copies.injected["RANKMAP_CUDA_KINDS"] == "copies"
    tr = L.prepare(L.Launcher("torchrun", ["torchrun", "t.py"], "torchrun"), run_dir=tmp_path,
                   cuda_lib="/x/librankmap_cuda.so", base_env={})
    assert tr.env["RANKMAP_CUDA_NEED_RANK"] == "1" and tr.env["CUDA_INJECTION64_PATH"] == "/x/librankmap_cuda.so"
    om = L.prepare(L.Launcher("openmpi", ["mpirun", "-np", "2", "./a"], "mpirun"), run_dir=tmp_path,
                   cuda_lib="/x/librankmap_cuda.so", base_env={})
    assert "CUDA_INJECTION64_PATH=/x/librankmap_cuda.so" in om.argv and "CUDA_INJECTION64_PATH" not in om.env
    none = L.prepare(L.Launcher("plain", ["./a"], "./a"), run_dir=tmp_path, base_env={})
    assert "CUDA_INJECTION64_PATH" not in none.injected and "RANKMAP_CUDA_KINDS" not in none.injected


def test_cuda_examples_and_load_compile(tmp_path):
    """examples/cuda and bench/cuda_load.cu build with nvcc (where a CUDA toolkit is installed)."""
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if nvcc is None or not shutil.which("mpicxx"):
        pytest.skip("no nvcc or mpicxx here")
    r = subprocess.run(["make", "-s", "-j2", "-C", str(ROOT / "examples" / "cuda"), f"OUT={tmp_path}", f"NVCC={nvcc}"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert all((tmp_path / n).is_file() for n in ("exchange_staged", "exchange_nccl", "peer_copy"))
    r = subprocess.run([nvcc, "-O2", str(ROOT / "bench" / "cuda_load.cu"), "-o", str(tmp_path / "cuda_load")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
