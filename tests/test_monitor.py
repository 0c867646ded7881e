"""``rankmap monitor``: a standalone sampling session into the store, against the fake NVML.

In-process through ``run_monitor`` for exact checks, and as the real command in a subprocess whose
``pynvml`` is the fake (``tests/fake_nvml`` first on ``PYTHONPATH``), stopped by ``--duration`` or
by Ctrl-C as a user would.
"""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import assert_one_line_error, rankmap
from rankmap.errors import RankmapError
from rankmap.pipeline.monitor import parse_interval, run_monitor
from rankmap.store import open_store
from test_sampler import GB, fake

FAKE_DIR = str(Path(__file__).with_name("fake_nvml"))
RATES = [[100 * GB, 50 * GB, 2 * GB, 1 * GB], [50 * GB, 100 * GB, 0, 0]]


def fake_env(**cfg) -> dict:
    cfg.setdefault("rates", RATES)
    cfg.setdefault("gpm", True)
    return {"PYTHONPATH": os.pathsep.join([FAKE_DIR, os.environ.get("PYTHONPATH", "")]),
            "RANKMAP_FAKE_NVML": json.dumps(cfg)}


@pytest.mark.parametrize("text,want", [("100ms", 0.1), ("0.5s", 0.5), ("2 s", 2.0), ("250ms", 0.25),
                                       ("10000us", 0.01), ("1min", 60.0), ("1h", 3600.0)])
def test_parse_interval(text, want):
    assert parse_interval(text) == pytest.approx(want)


@pytest.mark.parametrize("text,msg", [("100", "give a unit"), ("fast ms", "not a number"),
                                      ("1ms", "between 10ms and 1h"), ("2h", "between 10ms and 1h"),
                                      ("2d", "give a unit")])
def test_parse_interval_refuses(text, msg):
    with pytest.raises(RankmapError, match=msg):
        parse_interval(text)


def test_parse_interval_bounds_come_from_its_arguments():
    """The bound in the message is the ``longest`` passed, not a fixed "1h"."""
    with pytest.raises(RankmapError, match=r"--every '2min': must be between 10ms and 90s$"):
        parse_interval("2min", "--every", longest=90)
    with pytest.raises(RankmapError, match=r"between 10ms and 30min$"):
        parse_interval("31min", longest=1800)
    with pytest.raises(RankmapError, match=r"between 10ms and 90min$"):
        parse_interval("2h", longest=5400.0)
    with pytest.raises(RankmapError, match=r"between 10ms and 2h$"):
        parse_interval("3h", longest=7200.0)
    assert parse_interval("1.5s", longest=1.5) == 1.5


def test_a_monitor_session_may_last_longer_than_an_hour():
    """--duration is a span, not a sampling interval: 8 h was refused as "between 10ms and 1h"."""
    assert parse_interval("8h", "--duration", longest=None) == 8 * 3600
    assert parse_interval("90min", "--duration", longest=None) == 5400
    with pytest.raises(RankmapError, match="--duration '5ms': must be at least 10ms"):
        parse_interval("5ms", "--duration", longest=None)
    # the command takes it: it goes on to open the store (one that cannot be, so nothing is sampled)
    r = subprocess.run([sys.executable, "-m", "rankmap", "monitor", "--duration", "2h", "--db", "nosuchdb://x"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "nosuchdb" in r.stderr and "--duration" not in r.stderr, r.stderr


@pytest.mark.timing
def test_session_is_a_job_with_samples_meta_and_a_data_check(tmp_path):
    for attempt in range(3):
        store = open_store(f"sqlite:///{tmp_path / f'm{attempt}.db'}")
        nv = fake(nvlink_header=0.03)
        started = []
        res = run_monitor(store, interval_s=0.1, duration_s=1.6, nvml=nv,
                          on_start=lambda j, k, n: started.append((j, k, n)))
        # the DATA counters are read just before the first GPM snapshot and just after the last: a
        # machine busy with other work can hold the monitor between them for tens of ms (1 % of the
        # span) once in a while; a wrong integral is off in every session
        if all(abs(row[f"diff_data_{d}"]) < 0.01 for row in res.data_check for d in ("tx", "rx")):
            break
    assert started == [(res.job_id, "gpm", 2)] and res.source == "gpm"
    job = store.job(res.job_id)
    assert job["launcher"] == "monitor" and job["exit_status"] == 0 and job["hosts"] == [res.host]
    assert job["command"] == "rankmap monitor --interval 100ms"
    m = job["meta"]["monitor"]
    assert [g["uuid"] for g in m["gpus"]] == ["GPU-fake-0000", "GPU-fake-0001"]
    assert m["source"] == "gpm" and m["interval_ms"] == 100 and m["t0_unix_ns"] > 0
    assert m["cost"]["samples"] >= 10 and m["cost"]["reads"] == 2 * m["cost"]["samples"]
    assert m["cost"]["reader"] == "native"  # the C reader, driving the fake's GPM entry points
    # every sample of every GPU is stored, cumulative, ending at the totals
    rows = store.link_samples(res.job_id)
    assert len(rows) == m["cost"]["samples"] * 4  # nvlink + pcie of both GPUs (PCIe at 0 B/s is still read)
    last = {(r["device"], r["link"]): r for r in rows}
    assert last[(0, "nvlink")]["tx_bytes"] == res.totals[0].nvlink_tx
    assert last[(1, "nvlink")]["rx_bytes"] == res.totals[1].nvlink_rx
    # about 1.6 s at 100 GB/s on GPU0 TX
    assert res.totals[0].nvlink_tx == pytest.approx(100 * GB * res.elapsed_s, rel=0.1)
    # the GPM integral against the DATA counters read just before and after: within 1 %; GPM counts
    # payload as DATA does, so against RAW (payload and protocol overhead) it is that much lower
    check = {row["gpu"]: row for row in res.data_check}
    for g in (0, 1):
        for d in ("tx", "rx"):
            assert abs(check[g][f"diff_data_{d}"]) < 0.01, check[g]
            assert check[g][f"diff_raw_{d}"] == pytest.approx(1 / 1.03 - 1, abs=0.01), check[g]
            assert check[g][f"raw_{d}"] == pytest.approx(1.03 * check[g][f"data_{d}"], rel=1e-3)
    assert m["data_check"] == res.data_check
    assert nv.inits == 0


def test_gpm_faster_than_its_pcie_rates_allow_is_refused(tmp_path):
    """GPM's PCIe rates counted half the bytes between snapshots 50 ms apart (one H200, driver 580): a GPM
    session below 100 ms is a one-line error naming the option; field values may go faster."""
    p = rankmap("monitor", "--interval", "50ms", "--duration", "0.3s", "--db", f"sqlite:///{tmp_path / 'm.db'}",
                env=fake_env(), timeout=120)
    assert_one_line_error(p, "--interval 50ms", "at least 100 ms apart", "--source fields")
    p = rankmap("monitor", "--interval", "50ms", "--duration", "0.3s", "--source", "fields",
                "--db", f"sqlite:///{tmp_path / 'f.db'}", env=fake_env(), timeout=120)
    assert p.returncode == 0, p.stderr


def test_fields_session_has_no_data_check(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    res = run_monitor(store, interval_s=0.01, duration_s=0.1, nvml=fake(gpm=False))
    assert res.source == "fields" and res.data_check is None
    assert store.job(res.job_id)["meta"]["monitor"]["source"] == "fields"


@pytest.mark.timing
def test_stop_event_ends_the_session(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    stop = threading.Event()
    started = []

    def on_start(*_):   # the stop comes 0.2 s after sampling started (not after a start-up of unknown length)
        started.append(time.monotonic())
        threading.Timer(0.2, stop.set).start()
    res = run_monitor(store, interval_s=0.1, nvml=fake(), stop=stop, on_start=on_start)
    assert 0.15 < res.elapsed_s and time.monotonic() - started[0] < 2 and store.job(res.job_id)["exit_status"] == 0


@pytest.mark.timing
@pytest.mark.parametrize("reader", ["auto", "python"])
def test_monitor_command_with_duration_prints_json(tmp_path, reader):
    db = f"sqlite:///{tmp_path / 'm.db'}"
    p = rankmap("monitor", "--interval", "100ms", "--duration", "0.8s", "--db", db, "--json",
                env={**fake_env(), "RANKMAP_GPM_READER": reader}, timeout=120)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["cost"]["reader"] == ("native" if reader == "auto" else "python")
    assert "monitoring 2 GPUs (gpm) every 100ms as job 1" in p.stderr
    d = json.loads(p.stdout)
    assert d["source"] == "gpm" and d["job_id"] == 1 and len(d["gpus"]) == 2
    assert d["totals"]["0"]["nvlink_tx"] == pytest.approx(100 * GB * d["elapsed_s"], rel=0.15)
    assert d["cost"]["per_gpu_sample_ms"] > 0 and 0 <= d["process_cpu_share"] < 1
    assert len(open_store(db).link_samples(1)) == 4 * d["cost"]["samples"]


def test_monitor_command_table_checks_gpm_against_data(tmp_path):
    """The table's check line: GPM bytes against the DATA (payload) counters, RAW's overhead beside."""
    p = rankmap("monitor", "--interval", "100ms", "--duration", "0.5s", "--db", f"sqlite:///{tmp_path / 'm.db'}",
                env=fake_env(nvlink_header=0.21), timeout=120)
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())  # the console wraps long lines
    line = text[text.index("GPU0 NVLink, GPM integral vs NVML DATA counters: "):].split(" GPU1 ")[0]
    assert re.search(r"TX [\d.]+ GB vs DATA [\d.]+ GB \([+-]\d\.\d\d %\), RAW/DATA 1\.21", line), line


def test_monitor_command_stops_cleanly_on_ctrl_c(tmp_path):
    db = f"sqlite:///{tmp_path / 'm.db'}"
    env = dict(os.environ, **fake_env(gpm=False))
    p = subprocess.Popen([sys.executable, "-m", "rankmap", "monitor", "--interval", "50ms", "--db", db],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = p.stderr.readline()
        assert "monitoring 2 GPUs (fields) every 50ms" in line, line
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "Traceback" not in err and "NVLink TX" in out
    job = open_store(db).job(1)
    assert job["exit_status"] == 0 and job["meta"]["monitor"]["cost"]["samples"] >= 1


@pytest.mark.parametrize("args,cfg,needles", [
    (["--interval", "100"], {}, ["--interval '100'", "give a unit"]),
    (["--source", "gpm"], {"gpm": False}, ["GPM is not supported on GPU 0"]),
    ([], {"no_driver": True}, ["NVML is not available"]),
    (["--duration", "0s"], {}, ["--duration '0s'", "must be at least 10ms"]),
    ([], {"reader": "fastest"}, ["RANKMAP_GPM_READER='fastest'", "choose one of auto, native, python"]),
])
def test_monitor_command_errors_are_one_line(tmp_path, args, cfg, needles):
    reader = cfg.pop("reader", None)
    env = {**fake_env(**cfg), **({"RANKMAP_GPM_READER": reader} if reader else {})}
    p = rankmap("monitor", "--db", f"sqlite:///{tmp_path / 'm.db'}", *args, env=env, timeout=60)
    assert_one_line_error(p, *needles)


def test_summary_says_what_the_open_hold_did():
    """The session's summary: ticks held after other processes' opens (and capped), or why no watch ran."""
    import io

    from rich.console import Console

    from rankmap.counters.sampler import SamplerCost
    from rankmap.pipeline.monitor import MonitorResult
    from rankmap.report.monitor import print_monitor

    def text(**cost) -> str:
        c = SamplerCost(samples=10, reads=20, read_ns=20_000_000, read_cpu_ns=4_000_000, wall_ns=10**9, **cost)
        out = io.StringIO()
        print_monitor(MonitorResult(1, "h", "gpm", 0.1, [], {}, 1.0, c.as_dict(), 0.01), Console(file=out, width=400))
        return out.getvalue()

    t = text(held_open=7, open_capped=1, open_watch="2 device files")
    assert "7 ticks were skipped because another process had just opened or closed a GPU's device file" in t
    assert "1 read all the same after a long hold" in t and "device-file watch" not in t
    t = text(open_watch="off: no GPU device file to watch")
    assert "skipped" not in t and "device-file watch off: no GPU device file to watch" in t
    assert "skipped" not in text(open_watch=None) and "watch" not in text(open_watch=None)
