"""gpu/monitor.sh in its DRY mode (fake NVML, a sleep for the NCCL job): the GPU run's flow and
checks work here, so the one batched GPU run does not fail on the script itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytest.importorskip("uvicorn", reason="the dashboard needs the web extra (uvicorn)")

pytestmark = pytest.mark.gpu_dry


def run_script(tmp_path, **env_extra) -> tuple[subprocess.CompletedProcess, str, Path]:
    work = tmp_path / "tmp"
    work.mkdir()
    env = dict(os.environ, DRY="1", PYTHON=sys.executable, OUT=str(tmp_path / "out"), TMPDIR=str(work), **env_extra)
    p = subprocess.run(["bash", str(ROOT / "gpu" / "monitor.sh")], capture_output=True, text=True, env=env,
                       timeout=300, cwd=ROOT)
    return p, (tmp_path / "out" / "monitor.txt").read_text(), work


TARGET = r"[(;] ?target [<>=]+ [0-9.]+ ?(ms|%)"


def failed(log: str) -> list[str]:
    """The log's FAIL lines but those of speed targets (``target <= 0.3 ms``) and the totals of a step where
    only those failed. Here the targets time a fake NVML on a machine shared with whatever else runs
    (the test suite's other workers): a figure of that load, not of rankmap. They are the figures of
    bench/monitor_cost.py on the GPU run; this test checks that every step runs and says its figure."""
    out, targets = [], 0
    for line in log.splitlines():
        if re.match(r"== \d", line):       # a step of the script (bench/monitor_cost.py's own "==" are inside one)
            targets = 0
        if not line.startswith("FAIL "):
            continue
        if re.search(TARGET, line):
            targets += 1
            continue
        total = re.search(r": every (?:target met|check passed) \(exit (\d+)\)$", line)
        if not (total and int(total.group(1)) == targets):
            out.append(line)
    return out


@pytest.mark.slow
def test_monitor_script_dry_run(tmp_path):
    p, log, work = run_script(tmp_path, COST_S="1")
    assert p.returncode == sum(l.startswith("FAIL ") for l in log.splitlines()), p.stdout + p.stderr
    assert failed(log) == [] and "Traceback" not in log, log
    for target in ("gpm (native reader): ", "idle: rankmap's own part of a GPM read, native reader",
                   "load: rankmap's own part of a GPM read, native reader", "monitor: ", "monitor at 10 Hz: "):
        assert re.search(rf"^(PASS|FAIL) {re.escape(target)}.*{TARGET}", log, re.M), (target, log)
    assert re.search(r"^(PASS|FAIL) load: .*; the python reader \d+\.\d{4} ms$", log, re.M), log
    for want in ("PASS rankmap monitor started", "PASS /metrics DCGM_FI_PROF_NVLINK_TX_BYTES",
                 "PASS link gpu0<->nvswitch0 coloured from its measured counters", "PASS rankmap monitor ended cleanly",
                 "SKIP profile sampler NVLink bytes", "CPU per GPU per sample over its session",
                 "== 3b. a second NCCL job", "stalled in the driver (> 2 ms CPU)",
                 "rankmap: dashboard at http://127.0.0.1:"):
        assert want in log, (want, log)
    # the monitor against the DATA (payload) counters of its own span; the fake's 3 % protocol overhead
    # shows in RAW, printed beside
    for line in ("PASS monitor GPU0 NVLink tx: ", "PASS monitor GPU1 NVLink rx: "):
        got = next(l for l in log.splitlines() if l.startswith(line))
        assert "vs NVML DATA (payload)" in got and "over the monitor's own span" in got and "RAW/DATA 1.0300" in got, got
    # the bare GPM calls, idle and while the load (a sleep here) ran, and the monitor's cost line citing them
    assert "load running: loading: a sleep (DRY)" in log and "load still ran when the calls ended" in log, log
    rows = [" ".join(l.split()[:-5]) for l in log.splitlines()
            if l.startswith(("nvmlGpmSampleGet ", "nvmlGpmMetricsGet ", "GpmSource.read "))]
    assert rows == [f"{c} {s}" for c in ("nvmlGpmSampleGet", "nvmlGpmMetricsGet", "GpmSource.read (python)",
                                         "GpmSource.read (native)") for s in ("idle", "load")], rows
    # the sampler reads with the C reader (calling back into the fake), the Python one measured beside it
    assert "GPM reader: native (one C call per read" in log
    assert "FLOOR" not in log  # the fake's calls cost microseconds
    assert "step 1 under NVLink load: the bare nvmlGpmSampleGet + nvmlGpmMetricsGet" in log and "driver fake" in log
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


@pytest.mark.slow
def test_monitor_script_logs_why_serve_did_not_start(tmp_path):
    """A web stack installed without one of its dependencies: serve's own one-line error is in the
    log, and every check that needs the server fails in one line, without a traceback."""
    shadow = tmp_path / "shadow" / "uvicorn"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("import rankmap_no_such_dependency\n")
    p, log, work = run_script(tmp_path, COST_S="0",
                              PYTHONPATH=os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")]))
    assert p.returncode > 0 and "Traceback" not in log and "   SKIP step 1 (COST_S=0)" in log, log
    assert "FAIL rankmap serve answers on http://127.0.0.1:" in log and "(exited with status 2" in log, log
    assert "   | rankmap: error: the dashboard cannot start: uvicorn needs the module 'rankmap_no_such_dependency'" in log
    assert "FAIL GET /api/jobs/2/utilisation: " in log and "PASS rankmap monitor ended cleanly" in log
    assert list(work.iterdir()) == []
