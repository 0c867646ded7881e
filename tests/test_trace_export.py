"""``rankmap export JOB --format trace``: a real profiled job as a Chrome/Perfetto trace.

A real ``mpirun`` ring is profiled; its trace must say exactly what the store holds (each rank's
bytes per class, its operations' calls), and open in a real Chromium's trace viewer offline with one
track group per rank (tests/trace_viewer.py says which viewer, and why that one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import assert_one_line_error, cli, rankmap
from rankmap.formats import chrome_trace
from rankmap.store import open_store
from test_profile import example, examples  # noqa: F401  (session fixture)
import trace_viewer

N = 4


@pytest.fixture(scope="module")
def profiled(examples, tmp_path_factory) -> tuple[str, dict]:  # noqa: F811
    """A 4-rank Open MPI ring, profiled into its own store, with link samples added."""
    d = tmp_path_factory.mktemp("trace")
    env = {"RANKMAP_HOME": str(d / "home"), "RANKMAP_DB": f"sqlite:///{d / 'rankmap.db'}"}
    p = rankmap("profile", "--no-summary", "--bucket-ms", "20", "--",
                *example("openmpi", examples, N, "ring", "65536", "40"), env=env)
    assert p.returncode == 0, p.stderr
    store = open_store(env["RANKMAP_DB"])
    jid = store.resolve_job("latest")
    store.add_link_samples(jid, [{"t_ns": k * 100_000_000, "device": 0, "link": "nvlink",
                                  "tx_bytes": k * 10**9, "rx_bytes": k * 2 * 10**9} for k in range(4)])
    return env["RANKMAP_DB"], env


def export(env: dict, *args: str) -> chrome_trace.Trace:
    p = cli("export", "latest", "--format", "trace", *args, env=env)
    assert p.returncode == 0, p.stderr
    return chrome_trace.loads(p.stdout, "export")


@pytest.mark.mpi
def test_trace_says_what_the_store_holds(profiled) -> None:
    url, env = profiled
    store = open_store(url)
    jid = store.resolve_job("latest")
    tr = export(env)
    assert tr.meta["format"] == "rankmap-trace" and tr.meta["job"]["id"] == jid
    names = tr.process_names()
    assert [names[r] for r in range(N)] == [f"rank {r} ({store.ranks(jid)[r]['host']})" for r in range(N)]
    assert names[N] == "GPU 0 links (sampled)"
    # the bytes of every rank's p2p slices are the p2p bytes it sent (ring: 40 x 65536 to its successor)
    sent = {r: 0 for r in range(N)}
    for e in tr.events:
        if e["ph"] == "X" and e.get("cat") == "p2p":
            sent[e["pid"]] += e["args"]["bytes"]
    by_rank = {r: 0 for r in range(N)}
    for row in store.traffic(jid, ["p2p"]):
        by_rank[row["src"]] += row["bytes"]
    assert sent == by_rank and all(v > 0 for v in sent.values())
    # every stored operation is a track of its rank with its calls
    calls = {(e["pid"], e["name"]): e["args"]["calls"] for e in tr.events if e["ph"] == "X" and "calls" in e.get("args", {})}
    assert calls == {(o["rank"], o["operation"]): o["calls"] for o in store.op_stats(jid)}
    # link counters: rates between consecutive samples (1e9 B per 0.1 s = 1e10 B/s TX)
    rates = [e["args"] for e in tr.events if e["ph"] == "C" and e["pid"] == N]
    assert rates == [{"tx": 1e10, "rx": 2e10}] * 3


@pytest.mark.mpi
def test_trace_to_a_file_and_an_unwritable_one(profiled, tmp_path) -> None:
    _url, env = profiled
    out = tmp_path / "job.json"
    assert cli("export", "latest", "--format", "trace", "-o", str(out), env=env).returncode == 0
    assert chrome_trace.loads(out.read_text(), str(out)).process_names()[0].startswith("rank 0")
    p = cli("export", "latest", "--format", "trace", "-o", str(tmp_path / "no" / "such" / "x.json"), env=env)
    assert_one_line_error(p, "cannot write")


def test_reader_names_the_bad_event(tmp_path) -> None:
    bad = {"traceEvents": [{"ph": "X", "pid": 0, "name": "a", "ts": 1}]}
    with pytest.raises(Exception, match=r"traceEvents\[0\] \(a\) is a complete event without a duration"):
        chrome_trace.loads(json.dumps(bad), "t.json")
    with pytest.raises(Exception, match="newer than"):
        chrome_trace.loads(json.dumps({"traceEvents": [], "otherData": {"format": "rankmap-trace", "version": 99}}))


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.mpi
@pytest.mark.browser
def test_trace_opens_in_chromiums_trace_viewer(profiled, tmp_path) -> None:
    why = trace_viewer.missing() or (None if CHROMIUM.exists() else f"{CHROMIUM} is absent")
    if why:
        pytest.skip(why)
    sync = pytest.importorskip("playwright.sync_api")
    _url, env = profiled
    text = cli("export", "latest", "--format", "trace", env=env).stdout
    outside: list[str] = []
    with trace_viewer.ViewerServer(tmp_path / "viewer") as srv, sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("request", lambda r: None if r.url.startswith("http://127.0.0.1") else outside.append(r.url))
        page.goto(srv.url)
        page.wait_for_function("() => window.tr && tr.importer && window.Polymer")
        seen = page.evaluate(trace_viewer.LOAD, text)
        page.screenshot(path=str(Path(tmp_path) / "trace.png"))
        browser.close()
    assert not outside, outside                      # offline: nothing but the local server
    assert not seen["errors"], seen["errors"]
    groups = {p["pid"]: p for p in seen["processes"]}
    assert sorted(groups) == list(range(N + 1))      # one group per rank, one for the GPU's links
    for r in range(N):
        assert groups[r]["name"].startswith(f"rank {r}")
        assert "p2p bytes sent" in groups[r]["threads"] and groups[r]["slices"] > 0
        assert "p2p send rate (B/s)" in groups[r]["counters"]
        assert f"rank {r}" in seen["drawn"]          # drawn, not only parsed
    assert groups[N]["counters"] == ["nvlink (B/s)"]
