"""`rankmap bench p2p`: the CUDA code compiles (nvcc, warnings as errors, for sm_90 and for nvcc's default
arch), says plainly that there is no GPU here, and its records become the right rows and matrices.

The records below are written in this test (not recorded on a GPU): they pin the arithmetic from raw
nanoseconds to GB/s, medians and bidirectional totals."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from bench_fixtures import bench_cache, bench_env  # noqa: F401
from conftest import assert_one_line_error, rankmap
from rankmap.linkbench import native_out, p2p, tools
from rankmap.linkbench.report import print_run

NVCC = tools.find_nvcc()
need_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")


def rec(**kw) -> str:
    return json.dumps({"rec": "result", **kw})


LINES = [
    json.dumps({"rec": "info", "program": "p2p", "format": 1, "cuda_runtime": 13000, "cuda_driver": 13000, "devices": 2}),
    json.dumps({"rec": "device", "index": 0, "name": "GPU A", "pci": "0000:00:06.0", "sms": 132}),
    json.dumps({"rec": "device", "index": 1, "name": "GPU A", "pci": "0000:00:07.0", "sms": 132}),
    json.dumps({"rec": "peer", "src": 0, "dst": 1, "access": 1}),
    # 1 GB in 2.5 ms = 400 GB/s; samples 400, 380, 390 -> median 390
    rec(test="ce_write", src=0, dst=1, engine=0, bytes=62_500_000, loops=16, ns=[2_500_000, 2_631_579, 2_564_103]),
    rec(test="ce_bidir_read", src=0, dst=1, engine=1, bytes=100_000_000, loops=10, ns=[2_500_000] * 3,
        ns_reverse=[2_000_000, 2_000_000, 4_000_000]),
    rec(test="latency_ce", src=0, dst=1, engine=0, bytes=8, loops=1000, ns=[2_000_000, 2_100_000, 1_900_000]),
    rec(test="latency_sm", src=1, dst=0, engine=1, bytes=8, loops=100_000, ns=[80_000_000] * 3),
    rec(test="h2d_pinned", src=-1, dst=0, engine=0, bytes=50_000_000, loops=10, ns=[10_000_000] * 3),
    rec(test="d2h_pageable", src=1, dst=-1, engine=1, bytes=50_000_000, loops=4, ns=[20_000_000] * 3),
    json.dumps({"rec": "skip", "what": "GPU0->GPU2", "why": "no peer access between these GPUs"}),
    "some library's own chatter",
    json.dumps({"rec": "info", "done": "p2p"}),
]


def test_rows_from_raw_nanoseconds():
    out = native_out.parse_lines(LINES)
    assert out.other == ["some library's own chatter"] and out.finished
    rows = {r.benchmark: r for r in p2p.rows_from(out)}
    assert rows["ce_write"].bandwidth_GBps == pytest.approx(390.0, rel=1e-6)
    assert rows["ce_write"].extra["samples_GBps"] == [400.0, 380.0, 390.0]
    bid = rows["ce_bidir_read"]
    assert bid.bandwidth_GBps == pytest.approx(400.0) and bid.extra["reverse_GBps"] == pytest.approx(500.0)
    assert bid.total_GBps == pytest.approx(900.0)            # nvbandwidth's total: the two medians added
    assert rows["latency_ce"].latency_us == pytest.approx(2.0)
    assert rows["latency_sm"].latency_us == pytest.approx(0.8)
    assert (rows["h2d_pinned"].buffer, rows["h2d_pinned"].src, rows["h2d_pinned"].bandwidth_GBps) == ("pinned", -1, 50.0)
    assert rows["d2h_pageable"].bandwidth_GBps == pytest.approx(10.0)
    for r in rows.values():
        j = r.to_json()
        assert ("latency_us" in j) != ("bandwidth_GBps" in j) and j["library"] == "cuda"
    ran, not_run = p2p.describe(list(rows.values()), out)
    assert ran == ["2 GPU pair directions (copy engine, latency)", "host<->GPU 0, 1 (pageable, pinned)"]
    assert not_run == ["GPU0->GPU2: no peer access between these GPUs"]
    assert p2p.machine_from(out)["gpus"][1]["pci"] == "0000:00:07.0"


def test_matrices_print_like_nvbandwidth(capsys):
    out = native_out.parse_lines(LINES)
    from rankmap.linkbench.rows import BenchRun

    run = BenchRun("p2p", p2p.rows_from(out), p2p.machine_from(out), [], []).to_json()
    print_run(run)
    text = capsys.readouterr().out
    assert "memcpy CE, source pushes" in text and "390.00" in text
    assert "total of both" in text and "900.00" in text
    assert "host->GPU pinned" in text and "50.00" in text and "GPU->host pageable" in text


def test_unknown_output_format_is_refused():
    with pytest.raises(Exception, match="newer than this rankmap reads"):
        native_out.parse_lines([json.dumps({"rec": "info", "format": 99})], "bench p2p")


LAUNCHER = """\
import signal, subprocess, sys, time
def clean_up(*_):
    open(sys.argv[1], "w").write("cleaned")
    sys.exit(143)
signal.signal(signal.SIGTERM, clean_up)
rank = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                         "print('ready', flush=True); time.sleep(120)"], stdout=subprocess.PIPE, text=True)
rank.stdout.readline()
open(sys.argv[2], "w").write(str(rank.pid))
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_a_program_past_its_time_is_let_clean_up(tmp_path, monkeypatch):
    """Past its time limit the program's process group got SIGKILL at once: an MPI launcher had no
    chance to remove its job's shared memory (Open MPI's /dev/shm/vader_segment.* files stayed). It
    gets SIGTERM first now, and what is left (here a rank that ignores SIGTERM) SIGKILL after
    STOP_GRACE_S."""
    import sys
    import time

    from rankmap.errors import RankmapError

    monkeypatch.setattr(native_out, "STOP_GRACE_S", 1.0, raising=False)
    cleaned, rank = tmp_path / "cleaned", tmp_path / "rank"
    t0 = time.monotonic()
    with pytest.raises(RankmapError, match="ran longer than 2 s and was stopped"):
        native_out.run([sys.executable, "-c", LAUNCHER, str(cleaned), str(rank)], what="x", timeout=2)
    assert time.monotonic() - t0 < 60
    assert cleaned.read_text() == "cleaned"
    pid = int(rank.read_text())
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid)


@need_nvcc
@pytest.mark.parametrize("archs", [["90"], []], ids=["sm_90", "default-arch"])
def test_cuda_code_compiles_without_warnings(bench_cache, monkeypatch, archs):
    from rankmap.linkbench.build import build_p2p

    monkeypatch.setenv("RANKMAP_CACHE", str(bench_cache))
    exe = build_p2p(archs=archs, strict=True)
    assert exe.is_file() and os.access(exe, os.X_OK)
    cuobjdump = os.path.join(os.path.dirname(NVCC), "cuobjdump")
    if archs and os.access(cuobjdump, os.X_OK):                 # only this machine's arch is in the binary
        sass = subprocess.run([cuobjdump, "--list-elf", str(exe)], capture_output=True, text=True, check=True)
        assert "sm_90" in sass.stdout and "sm_80" not in sass.stdout
    # a bad argument is said as such, never a crash
    p = subprocess.run([str(exe), "--tests", "nope"], capture_output=True, text=True, timeout=60)
    out = native_out.parse_lines(p.stdout.splitlines())
    assert p.returncode == native_out.EXIT_USAGE
    assert native_out.failure(out, "bench p2p") == ("bench p2p refused its arguments: unknown test nope "
                                                    "(a rankmap bug: please report it)")


@need_nvcc
def test_no_gpu_here_is_one_line(bench_env):
    p = rankmap("bench", "p2p", env=dict(bench_env, RANKMAP_CUDA_ARCH="90"), timeout=600)
    assert_one_line_error(p, "bench p2p: no usable CUDA GPU here (", "nothing measured")
    from rankmap.capture.cuda_build import probe_driver
    driver = probe_driver().error           # no driver, or only the toolkit's stub: said as such, not only
    if driver:                              # as the runtime's "CUDA driver version is insufficient"
        assert f"; {driver}); nothing measured" in p.stderr, p.stderr


def test_no_nvcc_is_one_line(bench_env, tmp_path):
    p = rankmap("bench", "p2p", env=dict(bench_env, RANKMAP_NVCC=str(tmp_path / "nvcc")))
    assert_one_line_error(p, "nvcc not found", "RANKMAP_NVCC")
    p = rankmap("bench", "p2p", "--size", "100", env=bench_env)
    assert_one_line_error(p, "--size must be a positive multiple of 16 bytes")
    p = rankmap("bench", "p2p", "--tests", "ce_copy", env=bench_env)
    assert_one_line_error(p, "unknown p2p test 'ce_copy'")
