"""The dashboard in a real Chromium: served by uvicorn, driven by Playwright, checked and photographed.

Skipped only when the browser (Debian package ``chromium``) or the ``playwright`` Python package
is absent. The browser is the system one; Playwright's own browser download is never used.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)", allow_module_level=True)
playwright_sync = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
uvicorn = pytest.importorskip("uvicorn", reason="the dashboard needs the web extra (uvicorn)")

from rankmap.store import open_store  # noqa: E402
from rankmap.web.app import create_app  # noqa: E402
from test_web_api import MAPPED, N, TOPOLOGY, fill_store, record  # noqa: E402

IDLE_LINK = "#c3cbd5"
HOTTEST = "#b91c1c"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """uvicorn in a thread of the test process, on 127.0.0.1 and a free port."""

    def __init__(self, app) -> None:
        self.port = _free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "_Server":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.load(r)


@pytest.fixture
def dashboard(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'rankmap.db'}"
    ids = fill_store(url)
    with _Server(create_app(open_store(url), TOPOLOGY)) as srv:
        yield srv, ids, url


@pytest.fixture
def browser_page():
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        problems: list[str] = []
        outside: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

        def only_local(route):  # the dashboard must work offline: nothing but 127.0.0.1
            if route.request.url.startswith("http://127.0.0.1:"):
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        page.route("**/*", only_local)
        try:
            yield page, problems, outside
        finally:
            browser.close()


def test_dashboard_renders_job_heatmap_and_topology(dashboard, browser_page, tmp_path):
    srv, ids, _ = dashboard
    page, problems, outside = browser_page
    page.goto(srv.url + "/")
    item = page.locator(f'#job-list li[data-job="{ids["done"]}"]')
    item.wait_for()
    assert page.locator("#job-list li").count() == 2
    assert "exit 0" in item.inner_text()
    item.click()

    # plotly charts: the heatmap with its cells, the per-operation bars, time, memory, link counters
    for plot in ("heatmap", "ops", "timeline", "mem", "links"):
        page.locator(f"#{plot} .main-svg").first.wait_for(timeout=15_000)
    assert page.locator("#heatmap .hm, #heatmap image, #heatmap .heatmaplayer").count() >= 1
    heat_z = page.evaluate("document.getElementById('heatmap').data[0].z")
    want = srv.get(f"/api/jobs/{ids['done']}/matrix")["matrix"]
    assert heat_z == want
    ops_x = page.evaluate("document.getElementById('ops').data[0].x")
    assert ops_x == ["MPI_Isend", "MPI_Allreduce", "MPI_Wait"]
    assert page.locator("#kpis").inner_text().count("8 / 8") == 1

    # the SVG topology: one element per GPU, one per link, coloured by its load
    topo = srv.get(f"/api/topology?job={ids['done']}")
    svg = page.locator("#topo-view svg")
    svg.wait_for()
    assert svg.locator('[data-kind="gpu"]').count() == N
    assert svg.locator("g.device").count() == len(topo["topology"]["devices"])
    links = svg.locator("path.link")
    assert links.count() == len(topo["topology"]["links"])
    drawn = page.evaluate("""() => [...document.querySelectorAll('#topo-view path.link')].map(p => ({
        i: +p.dataset.link, load: +p.dataset.load, use: +p.dataset.use, stroke: p.getAttribute('stroke'),
        width: +p.getAttribute('stroke-width')}))""")
    api_loads = {l["link"]: l["load_ab"] + l["load_ba"] for l in topo["load"]["links"]}
    assert {d["i"]: d["load"] for d in drawn} == api_loads
    used = [d for d in drawn if d["load"] > 0]
    assert used and len(used) < len(drawn)
    for d in drawn:
        if d["load"] > 0:
            assert d["stroke"] != IDLE_LINK and d["width"] > 2
        else:
            assert d["stroke"] == IDLE_LINK
    hottest = max(drawn, key=lambda d: d["use"])
    assert hottest["use"] == pytest.approx(1.0) and hottest["stroke"] == HOTTEST
    assert hottest["width"] == max(d["width"] for d in drawn)
    # GPU boxes say which ranks they hold
    assert svg.locator('[data-device="gpu3"] text.ranks').text_content() == "r3"

    # mapping before / after, drawn side by side with their congestion figures
    page.locator("#after-view svg").wait_for()
    assert page.locator("#before-view svg [data-kind='gpu']").count() == N
    after_ranks = page.locator("#after-view svg [data-device='gpu7'] text.ranks").text_content()
    assert after_ranks == f"r{MAPPED.index(7)}"
    assert "max congestion" in page.locator("#after-stats").inner_text()
    assert "optimal" in page.locator("#mapping-note").inner_text()

    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    print(f"screenshot: {shot}")
    assert not problems, problems
    assert not outside, outside


def test_running_job_refreshes_by_itself(dashboard, browser_page, tmp_path):
    srv, ids, url = dashboard
    page, problems, outside = browser_page
    page.goto(f"{srv.url}/#/job/{ids['running']}")
    page.locator("#job-status .pill.run").wait_for()
    page.locator("#heatmap .main-svg").first.wait_for(timeout=15_000)
    assert "2 / 4" in page.locator("#kpis").inner_text()
    # the other two ranks flush, then the job ends: the page must follow without a reload
    store = open_store(url)
    store.ingest(ids["running"], [record(r, 4) for r in range(2, 4)])
    page.wait_for_function("document.getElementById('kpis').innerText.includes('4 / 4')", timeout=10_000)
    store.finish_job(ids["running"], exit_status=3, elapsed_ns=1_000_000_000)
    page.locator("#job-status .pill.bad").wait_for(timeout=10_000)
    z = page.evaluate("document.getElementById('heatmap').data[0].z")
    assert sum(map(sum, z)) == srv.get(f"/api/jobs/{ids['running']}/matrix")["total"]
    # the job ended: polling stops (no request for it within three poll periods)
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if f"/api/jobs/{ids['running']}" in r.url else None)
    page.wait_for_timeout(6_500)
    assert seen == []
    page.screenshot(path=str(tmp_path / "running.png"), full_page=True)
    assert not problems, problems
    assert not outside, outside


def test_job_without_mapping_or_samples_says_so(tmp_path, browser_page):
    url = f"sqlite:///{tmp_path / 'rankmap.db'}"
    store = open_store(url)
    jid = store.create_job(["mpirun", "-np", "8", "./ring"], world_size=8, meta={"bucket_ms": 100})
    store.ingest(jid, [record(r) for r in range(N)])
    store.finish_job(jid, exit_status=0, elapsed_ns=1)
    page, problems, outside = browser_page
    with _Server(create_app(store, "hgx-h100")) as srv:
        page.goto(f"{srv.url}/#/job/{jid}")
        page.locator("#topo-view svg").wait_for(timeout=15_000)
        assert page.locator("#topo-view svg [data-kind='gpu']").count() == 8
        assert page.locator("#topo-view svg [data-kind='nvswitch']").count() == 1
        page.wait_for_function("document.getElementById('mapping-empty').innerText.includes('rankmap map')")
        assert page.locator("#mapping-views").is_hidden()
        assert page.locator("#links-empty").is_visible()
        # a topology picked in the page redraws the same job on another node
        page.select_option("#topo-spec", "dgx1-v100")
        page.wait_for_function("document.querySelectorAll('#topo-view path.link').length === 33")
        page.screenshot(path=str(tmp_path / "no-mapping.png"), full_page=True)
    assert not problems, problems
    assert not outside, outside
