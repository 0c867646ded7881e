"""gpu/monitor.sh in its DRY mode (fake NVML, a sleep for the NCCL job): the GPU run's flow and
checks work here, so the one batched GPU run does not fail on the script itself."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("uvicorn", reason="the dashboard needs the web extra (uvicorn)")


def test_monitor_script_dry_run(tmp_path):
    work = tmp_path / "tmp"
    work.mkdir()
    env = dict(os.environ, DRY="1", PYTHON=sys.executable, OUT=str(tmp_path / "out"), TMPDIR=str(work))
    p = subprocess.run(["bash", str(ROOT / "gpu" / "monitor.sh")], capture_output=True, text=True, env=env,
                       timeout=300, cwd=ROOT)
    log = (tmp_path / "out" / "monitor.txt").read_text()
    assert p.returncode == 0, p.stdout + p.stderr
    assert "FAIL" not in log and "Traceback" not in log, log
    for want in ("PASS gpm: ", "PASS rankmap monitor started", "PASS /metrics DCGM_FI_PROF_NVLINK_TX_BYTES",
                 "PASS link gpu0<->nvswitch0 coloured from its measured counters", "PASS rankmap monitor ended cleanly",
                 "SKIP monitor NVLink bytes"):
        assert want in log, (want, log)
    assert sorted(f.name for f in (tmp_path / "out").iterdir()) == ["metrics.txt", "monitor.txt"]
    # nothing left behind: no monitor or server of the run still alive, its work folder gone
    left = []
    for proc in os.listdir("/proc"):
        try:
            with open(f"/proc/{proc}/cmdline", "rb") as f:
                if str(work).encode() in f.read():
                    left.append(proc)
        except OSError:
            continue
    assert left == [] and list(work.iterdir()) == []
