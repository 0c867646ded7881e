"""The dashboard in a real Chromium: served by uvicorn, driven by Playwright, checked and photographed.

Every test runs twice, over a SQLite and over a PostgreSQL store (``tests/pg.py``), and every page
load is watched: a console error, a page error or a request to anything but the server on
127.0.0.1 fails the test (the dashboard must work with no way out of the machine).

Skipped only when the browser (Debian package ``chromium``) or the ``playwright`` Python package
is absent. The browser is the system one; Playwright's own browser download is never used.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
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

from conftest import ROOT  # noqa: E402
from pg import BACKENDS, pg_cluster  # noqa: E402,F401  (session fixture)
from rankmap.store import open_store  # noqa: E402
from rankmap.store import schema as S  # noqa: E402
from rankmap.web.app import create_app  # noqa: E402
from rankmap.web.security import access_for  # noqa: E402
from test_monitor import fake_env  # noqa: E402
from rankmap.pipeline.map import store_mapping  # noqa: E402
from test_web_api import (MAPPED, N, TOPOLOGY, WebRecord, basis_jobs, fill_store, many_mapping_job,  # noqa: E402
                          record, two_mapping_job, unknown_basis_job)
from test_web_live import H200, USE, sampled_job  # noqa: E402

IDLE_LINK = "#c3cbd5"
HOTTEST = "#b91c1c"
BAND_COLOURS = ["#c3cbd5", "#86efac", "#16a34a", "#f97316", "#dc2626"]

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """uvicorn in a thread of the test process, on 127.0.0.1 and a free port."""

    def __init__(self, app, page=None) -> None:
        self.page = page  # a page that used this server leaves it first: a poll to a stopped server is an error
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
        if self.page is not None:
            self.page.goto("about:blank")
        self.server.should_exit = True
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, token: str | None = None) -> dict:
        req = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path) -> str:
    """A fresh, empty store of each back end."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'rankmap.db'}"
    return request.getfixturevalue("pg_cluster").new_database()


@pytest.fixture
def dashboard(store_url):
    ids = fill_store(store_url)
    with _Server(create_app(open_store(store_url), TOPOLOGY)) as srv:
        yield srv, ids, store_url


@pytest.fixture(scope="module")
def chromium():
    """One Chromium for a module's tests: starting Playwright, the browser and its first page takes
    ~5 s here, a fresh context and page 0.2 s. Each test gets a context of its own (no cookie,
    storage or cache of another test), so sharing the browser shares nothing a test sees."""
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def browser_page(chromium):
    """A page in a context of its own; after the test, no console error, no page error and no request
    off the machine."""
    context = chromium.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
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
        context.close()
    # every test: no console error, no page error, no request off the machine
    assert not problems, problems
    assert not outside, outside


def wait_js(page, body: str, timeout: int = 15_000) -> None:
    """Wait until a JS expression is true (polled from here: the page's CSP forbids eval)."""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(f"() => Boolean({body})"):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {body}")
        page.wait_for_timeout(100)


def drawn_links(page, box: str = "#topo-view") -> list[dict]:
    return page.evaluate(f"""() => [...document.querySelectorAll('{box} path.link')].map(p => ({{
        i: +p.dataset.link, band: p.dataset.band, util: p.dataset.util, source: p.dataset.source,
        load: p.dataset.load, use: p.dataset.use, stroke: p.getAttribute('stroke'), d: p.getAttribute('d'),
        width: +p.getAttribute('stroke-width')}}))""")


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
    heat_z = page.evaluate("document.getElementById('heatmap').data[0].z")
    want = srv.get(f"/api/jobs/{ids['done']}/matrix")["matrix"]
    assert heat_z == want
    ops_x = page.evaluate("document.getElementById('ops').data[0].x")
    assert ops_x == ["MPI_Isend", "MPI_Allreduce", "MPI_Wait"]
    # where the collective's pairs come from: 7 of 8 ranks' rows from the mirror, rank 0's a model
    assert page.locator("#ops-note").inner_text() == "collective pairs from MPI_Allreduce: mirror 88%, model 13%"
    hover = page.evaluate("document.getElementById('ops').data[0].hovertext")
    assert "pairs from: call" in hover[0] and "pairs from: mirror 88%, model 13%" in hover[1]
    assert page.locator("#kpis").inner_text().count("8 / 8") == 1
    assert page.locator("#job-problems").is_hidden()

    # the SVG topology: one element per GPU and per link, each link in the band of its utilisation
    topo = srv.get(f"/api/topology?job={ids['done']}")
    util = srv.get(f"/api/jobs/{ids['done']}/utilisation")
    svg = page.locator("#topo-view svg")
    svg.wait_for()
    assert svg.locator('[data-kind="gpu"]').count() == N
    assert svg.locator("g.device").count() == len(topo["topology"]["devices"])
    drawn = drawn_links(page)
    assert len(drawn) == len(topo["topology"]["links"])
    for d in drawn:  # a finished job opens on its whole-job average
        row = util["links"][d["i"]]
        assert d["source"] == row["source"] and int(d["band"]) == row["avg_band"]
        assert d["stroke"] == BAND_COLOURS[row["avg_band"]]
    assert svg.locator('[data-device="gpu3"] text.ranks').text_content() == "r3"
    assert "12.0 MB" in page.locator("#topo-stats").inner_text()

    # mapping before / after, coloured by congestion relative to the busiest link of the two
    page.locator("#after-view svg").wait_for()
    assert page.locator("#before-view svg [data-kind='gpu']").count() == N
    after_ranks = page.locator("#after-view svg [data-device='gpu7'] text.ranks").text_content()
    assert after_ranks == f"r{MAPPED.index(7)}"
    before = drawn_links(page, "#before-view") + drawn_links(page, "#after-view")
    hottest = max(before, key=lambda d: float(d["use"]))
    assert float(hottest["use"]) == pytest.approx(1.0) and hottest["stroke"] == HOTTEST
    assert all(d["stroke"] == IDLE_LINK for d in before if d["load"] == "0")
    assert "max congestion" in page.locator("#after-stats").inner_text()
    assert "optimal" in page.locator("#mapping-note").inner_text()
    # MPI_T performance variables: this job recorded none, and the card says so
    wait_js(page, "document.getElementById('pvar-empty').innerText.includes('MPI_T performance variables')")
    assert page.locator("#pvar").is_hidden()

    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000


def test_link_colours_bands_slider_and_series_against_known_data(store_url, browser_page, tmp_path):
    """GPU0's NVLink used USE[k] % of its bandwidth in frame k: the slider replays those bands."""
    store = open_store(store_url)
    jid = sampled_job(store)
    store.finish_job(jid, exit_status=0, elapsed_ns=600_000_000)
    page, problems, outside = browser_page
    with _Server(create_app(store, H200), page) as srv:
        util = srv.get(f"/api/jobs/{jid}/utilisation")
        g0 = next(l for l in util["links"] if (l["a"], l["b"]) == ("gpu0", "nvswitch0"))
        pcie_up = next(l for l in util["links"] if (l["a"], l["b"]) == ("hb0", "cpu0"))
        page.goto(f"{srv.url}/#/job/{jid}")
        page.locator("#topo-view svg").wait_for(timeout=15_000)
        link = page.locator(f'#topo-view path.link[data-link="{g0["link"]}"]')

        def look() -> tuple[str, float, str]:
            return link.get_attribute("stroke"), float(link.get_attribute("data-util")), link.get_attribute("data-band")

        # the whole job: the average use, in its band; the source is said, per link and above the drawing
        assert look()[0] == BAND_COLOURS[g0["avg_band"]] and look()[1] == pytest.approx(sum(USE) / len(USE), abs=1e-3)
        assert link.get_attribute("data-source") == "measured"
        assert page.locator(f'#topo-view path.link[data-link="{pcie_up["link"]}"]').get_attribute("data-source") == "model"
        assert "measured by the job's link sampler (NVML GPM)" in page.locator("#util-source").inner_text()
        assert "from the traffic model" in page.locator("#util-source").inner_text()

        # over time: each frame in INAM's band of its utilisation (idle, light green, dark green, orange, red)
        page.locator('#util-mode button[data-mode="time"]').click()
        want_bands = [0, 1, 2, 3, 4, 1]
        for k, use in enumerate(USE):
            page.eval_on_selector("#util-slider", "(s, k) => { s.value = k; s.dispatchEvent(new Event('input')); }", k)
            stroke, u, band = look()
            assert (stroke, band) == (BAND_COLOURS[want_bands[k]], str(want_bands[k])), k
            assert u == pytest.approx(use, abs=1e-3)
            assert f"frame {k + 1}/{len(USE)}" in page.locator("#util-time").inner_text()

        # play replays the frames in order, ending on the last one
        page.eval_on_selector("#util-slider", "s => { s.value = 0; s.dispatchEvent(new Event('input')); }")
        page.locator("#util-play").click()
        seen = []
        deadline = time.monotonic() + 15
        # the frame and the link's colour read in one evaluation: a play step sets both in one task, and
        # two reads (the slider, then the link) straddled a step on a loaded machine
        both = ("sel => [Number(document.querySelector('#util-slider').value), "
                "document.querySelector(sel).getAttribute('stroke')]")
        while time.monotonic() < deadline:
            f, stroke = page.evaluate(both, f'#topo-view path.link[data-link="{g0["link"]}"]')
            if not seen or seen[-1][0] != f:
                seen.append((f, stroke))
            if f == len(USE) - 1 and page.locator("#util-play").inner_text().startswith("▶"):
                break
            page.wait_for_timeout(40)
        frames = [f for f, _ in seen]
        assert frames == sorted(frames) and frames[-1] == len(USE) - 1 and len(set(frames)) >= 4, seen
        assert all(stroke == BAND_COLOURS[want_bands[f]] for f, stroke in seen), seen

        # settable edges: 5 / 20 / 40 / 80 % put the last frame's 22 % in the dark green band
        page.locator("#band-box summary").click()
        inputs = page.locator("#band-edges input")
        for i, v in enumerate(["5", "20", "40", "80"]):
            inputs.nth(i).fill(v)
        inputs.nth(3).dispatch_event("change")
        wait_js(page, f"document.querySelector('#topo-view path.link[data-link=\"{g0['link']}\"]').getAttribute('stroke') === '{BAND_COLOURS[2]}'")
        assert "≤ 20 %" in page.locator("#topo-legend").inner_text()
        page.locator("#band-reset").click()
        wait_js(page, f"document.querySelector('#topo-view path.link[data-link=\"{g0['link']}\"]').getAttribute('stroke') === '{BAND_COLOURS[1]}'")

        # clicking a link shows its TX and RX over time, in GB/s, against its bandwidth
        link.click()
        page.locator("#link-series .main-svg").first.wait_for()
        assert "measured" in page.locator("#link-series-title").inner_text()
        series = page.evaluate("document.getElementById('link-series').data.map(t => ({name: t.name, y: t.y}))")
        assert series[0]["name"] == "gpu0 → nvswitch0"
        assert series[0]["y"] == pytest.approx([u / 100 * 478.116 for u in USE], abs=1e-3)
        assert series[1]["y"] == pytest.approx([0.0] * len(USE))
        page.screenshot(path=str(tmp_path / "bands.png"), full_page=True)


@pytest.mark.mpi
def test_live_job_updates_without_false_banners(store_url, browser_page, tmp_path):
    """A real `rankmap profile` of an MPI ring that waits before finalising until the page has shown
    both its ranks and its link frames grow (at most 40 s), with NVML faked: the page follows it live (ranks, link
    frames) with no problem banner, and ends on exit 0. (A fixed 6 s sleep was once used up on a
    loaded machine before the page saw a second frame.)"""
    mpirun, mpicc = shutil.which("mpirun.openmpi"), shutil.which("mpicc.openmpi")
    if not (mpirun and mpicc):
        pytest.skip("Open MPI (mpirun.openmpi, mpicc.openmpi) is not installed")
    exe, go = tmp_path / "ring", tmp_path / "go"
    subprocess.run([mpicc, "-O1", "-o", str(exe), str(ROOT / "tests" / "native" / "ring_until_app.c")], check=True)
    store = open_store(store_url)
    env = dict(os.environ, RANKMAP_HOME=str(tmp_path / "home"),
               **fake_env(rates=[[10 * 10**9, 0, 10**8, 0], [0, 10 * 10**9, 0, 10**8]]))
    page, problems, outside = browser_page
    with _Server(create_app(store, H200), page) as srv:
        page.goto(srv.url + "/")
        prof = subprocess.Popen([sys.executable, "-m", "rankmap", "profile", "--db", store_url, "--nccl", "off",
                                 "--flush-ms", "200", "--no-summary", "--", mpirun, "--allow-run-as-root",
                                 "--oversubscribe", "-np", "2", str(exe), "4096", "20", str(go), "40"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 60
            while not store.jobs(1) and time.monotonic() < deadline:
                time.sleep(0.1)
            jid = store.jobs(1)[0]["id"]
            # the job appears in the list by itself (it polls), and opens from the address bar
            page.locator(f'#job-list li[data-job="{jid}"]').wait_for(timeout=15_000)
            page.evaluate(f"location.hash = '#/job/{jid}'")
            page.locator("#job-status .pill.run").wait_for(timeout=15_000)
            banners, frames, live_ranks = [], [], False
            while prof.poll() is None and time.monotonic() < deadline:
                state = page.evaluate("""() => ({problems: !document.getElementById('job-problems').hidden,
                    text: document.getElementById('job-problems').innerText,
                    error: !document.getElementById('job-error').hidden,
                    ranks: document.getElementById('kpis').innerText,
                    frames: +document.getElementById('util-slider').max + 1,
                    running: !!document.querySelector('#job-status .pill.run')})""")
                if state["running"]:
                    if state["problems"] or state["error"]:
                        banners.append(state)
                    frames.append(state["frames"])
                    live_ranks = live_ranks or "2 / 2" in state["ranks"]
                    if live_ranks and max(frames) > min(frames) >= 1 and not go.exists():
                        go.touch()                      # both ranks and a growing link view seen: it may end now
                page.wait_for_timeout(250)
            out, err = prof.communicate(timeout=60)
        finally:
            if prof.poll() is None:
                prof.kill()
        assert prof.returncode == 0, err
        assert not banners, banners                     # no "no finalize marker" while ranks still run
        assert live_ranks                               # both ranks reported while the job ran
        assert max(frames) > min(frames) >= 1, frames   # the link view grew while the job ran
        page.locator("#job-status .pill.ok").wait_for(timeout=15_000)
        assert "2 / 2" in page.locator("#kpis").inner_text()
        assert page.locator("#job-problems").is_hidden() and page.locator("#job-error").is_hidden()
        job = store.job(jid)
        assert job["meta"]["link_sampler"]["source"] == "gpm" and store.link_samples(jid)
        # the profile's own sampler measured the GPU links (drawn once the finished job's view is redrawn)
        wait_js(page, """document.querySelectorAll('#topo-view path.link[data-source="measured"]').length >= 2""")
        page.screenshot(path=str(tmp_path / "live.png"), full_page=True)


def test_token_required_off_loopback(store_url, browser_page):
    store = open_store(store_url)
    ids = fill_store(store_url)
    token = "tok-" + "x" * 20
    page, problems, outside = browser_page
    with _Server(create_app(store, TOPOLOGY, access_for("0.0.0.0", token)), page) as srv:
        # without the token: the page asks for it and shows nothing of the store
        fails = []
        page.on("response", lambda r: fails.append(r.status) if "/api/" in r.url else None)
        page.goto(srv.url + "/")
        page.locator("#auth").wait_for()
        assert "needs the token" in page.locator("#auth-note").inner_text()
        assert page.locator("#job-list li").count() == 0 and 401 in fails
        assert "mpirun" not in page.content()
        # a wrong token is refused, the right one opens the dashboard
        page.fill("#auth-token", "wrong")
        page.locator("#auth-form button").click()
        page.locator("#auth").wait_for()
        wait_js(page, "document.getElementById('auth-note').innerText.includes('not accepted')")
        page.fill("#auth-token", token)
        page.locator("#auth-form button").click()
        page.locator(f'#job-list li[data-job="{ids["done"]}"]').wait_for(timeout=15_000)
        # the printed URL form: #token= is read, kept for the tab, and dropped from the address bar
        page.evaluate("sessionStorage.clear()")
        page.goto("about:blank")
        page.goto(f"{srv.url}/#token={token}")
        page.locator(f'#job-list li[data-job="{ids["done"]}"]').wait_for(timeout=15_000)
        assert "token" not in page.evaluate("location.href")
        page.locator(f'#job-list li[data-job="{ids["done"]}"]').click()
        page.locator("#heatmap .main-svg").first.wait_for(timeout=15_000)
        assert page.locator("#auth").is_hidden()
    # the refused requests are the only resources that failed to load
    assert all("401" in p for p in problems), problems
    problems.clear()


def test_new_user_findings(store_url, browser_page, tmp_path):
    """What a new user ran into: the address bar, a short job, an empty matrix, a long command, a
    small node drawn huge, overlapping NVLink arcs, and a hint naming a command that does not exist."""
    store = open_store(store_url)
    ids = fill_store(store_url)
    long_cmd = ["mpirun", "-np", "2", "./app"] + [f"--option-{i}=value" for i in range(60)]
    quiet = store.create_job(long_cmd, world_size=2, meta={"bucket_ms": 100})
    store.ingest(quiet, [WebRecord(world_rank=r, traffic=[(1 - r, "p2p", "MPI_Send", "device", "send", 0, 0)])
                         for r in range(2)])
    short = store.create_job(["mpirun", "-np", "2", "./short"], world_size=2, meta={"bucket_ms": 100})
    store.ingest(short, [WebRecord(world_rank=r, traffic=[(1 - r, "p2p", "MPI_Send", "device", "send", 1000, 1)],
                                   timeline=[(0, 1 - r, "p2p", 1000)]) for r in range(2)])
    store.finish_job(short, exit_status=0, elapsed_ns=30_000_000)
    page, problems, outside = browser_page
    with _Server(create_app(store, H200), page) as srv:
        page.goto(srv.url + "/")
        page.locator("#job-list li").first.wait_for()
        # 1. #/job/N typed into the address bar opens the job without a reload
        marker = page.evaluate("window.__not_reloaded = 1")
        page.evaluate(f"location.hash = '#/job/{short}'")
        page.locator("#timeline .main-svg").first.wait_for(timeout=15_000)
        assert page.evaluate("window.__not_reloaded") == 1 and marker == 1
        assert page.locator("#job-title").inner_text() == f"Job #{short}"
        # 2. a job shorter than one bucket: one step from 0 to 0.1 s, not an empty plot from -1 to 1
        rng = page.evaluate("document.getElementById('timeline').layout.xaxis.range")
        assert rng == pytest.approx([0.0, 0.1])
        x = page.evaluate("document.getElementById('timeline').data[0].x")
        assert x == pytest.approx([0.0, 0.1])
        # 3. the mapping hint names commands that exist
        hint = page.locator("#mapping-empty").inner_text()
        assert "rankmap tune" in hint and f"rankmap map --job {short} " in hint and "--save" in hint
        # 4. an all-zero matrix is blank (white), not one solid blue
        page.evaluate(f"location.hash = '#/job/{quiet}'")
        wait_js(page, f"document.getElementById('job-title').innerText === 'Job #{quiet}'")
        page.locator("#heatmap .main-svg").first.wait_for(timeout=15_000)
        wait_js(page, "document.getElementById('heatmap-note').innerText.includes('no bytes')")
        pixel = page.evaluate("""async () => {
            const im = document.querySelector('#heatmap image');
            const img = new Image(); img.src = im.getAttribute('href') || im.getAttribute('xlink:href');
            await img.decode();
            const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
            const g = c.getContext('2d'); g.drawImage(img, 0, 0);
            return [...g.getImageData(Math.floor(img.width / 2), Math.floor(img.height / 2), 1, 1).data];
        }""")
        assert pixel[:3] == [255, 255, 255], pixel
        # 5. a long command line scrolls in its box; the page is no wider than the window
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        box = page.locator("#job-command").bounding_box()
        assert box["x"] + box["width"] <= 1440
        # 6. a 2-GPU node is drawn at about its own size, not stretched over the whole card
        svg_box = page.locator("#topo-view svg").bounding_box()
        lay = srv.get("/api/topology")["layout"]
        assert svg_box["width"] <= 1.41 * lay["width"] + 1
        # 7. a running job without problems shows no banner (its ranks have not finalised yet)
        page.evaluate(f"location.hash = '#/job/{ids['running']}'")
        page.locator("#job-status .pill.run").wait_for(timeout=15_000)
        assert page.locator("#job-problems").is_hidden()
        page.screenshot(path=str(tmp_path / "findings.png"), full_page=True)

    # 8. the DGX-1's NVLink arcs: two arcs whose spans overlap never run at the same depth
    with _Server(create_app(store, "dgx1-v100"), page) as srv:
        page.goto(f"{srv.url}/#/job/{ids['done']}")
        page.locator("#topo-view svg").wait_for(timeout=15_000)
        arcs = []
        for d in drawn_links(page):
            if " C" in d["d"]:
                nums = [float(v) for v in d["d"].replace("M", "").replace("C", " ").replace(",", " ").split()]
                x0, y0, _, depth_y, _, _, x1, _ = nums
                arcs.append((min(x0, x1), max(x0, x1), round(depth_y - y0, 3), y0))
        assert len(arcs) >= 16
        for i, a in enumerate(arcs):
            for b in arcs[i + 1:]:
                if a[3] == b[3] and a[0] < b[1] and b[0] < a[1]:
                    assert a[2] != b[2], (a, b)


def test_mapping_basis_is_labelled(store_url, browser_page):
    """A what-if mapping's before/after carries a badge and its assumption in words, never read as
    the recorded run; an as-recorded one says so, quietly; one on a basis this version does not know
    carries the badge under its name and is not drawn, its stored figures quoted and the reason
    given. The assumption is text, never markup."""
    store = open_store(store_url)
    jobs = basis_jobs(store_url)
    ujob, umid, udoc = unknown_basis_job(store_url)
    page, problems, outside = browser_page
    with _Server(create_app(store, TOPOLOGY), page) as srv:
        jid, doc = jobs["what-if"]
        page.goto(f"{srv.url}/#/job/{jid}")
        page.locator("#after-view svg").wait_for(timeout=15_000)
        assert page.locator("#mapping-basis .pill.what-if").inner_text() == "what-if: GPU-resident"
        said = page.locator("#mapping-assumption")
        assert said.is_visible() and said.inner_text() == doc["assumption"]
        assert page.locator("#after-title .pill.what-if").inner_text() == "what-if"

        rid, _ = jobs["recorded"]
        page.evaluate(f"location.hash = '#/job/{rid}'")
        wait_js(page, "document.getElementById('mapping-basis').innerText === 'as recorded'")
        assert page.locator("#mapping-basis .muted.small").inner_text() == "as recorded"
        assert said.is_hidden() and page.locator("#mapping-card .pill").count() == 0
        assert page.locator("#after-view svg").is_visible()

        page.evaluate(f"location.hash = '#/job/{ujob}'")
        wait_js(page, "document.getElementById('mapping-basis').innerText === 'basis: nccl-only'")
        assert page.locator("#mapping-basis .pill.what-if").inner_text() == "basis: nccl-only"
        assert said.is_visible() and said.inner_text() == udoc["assumption"]
        assert page.locator("#mapping-views").is_hidden()
        empty = page.locator("#mapping-empty").inner_text()
        assert empty.startswith(f"mapping {umid} was computed on traffic basis 'nccl-only'") and "does not know" in empty
        note = page.locator("#mapping-note").inner_text()  # the stored figures, quoted
        assert note.startswith(f"mapping #{umid} (made from this job)") and " · solver: max " in note

        # a stored assumption with markup in it is shown as the text it is
        hostile = '<img src="x" onerror="window.__basis_xss = 1">what-if <b>bold</b>'
        store_mapping(store, {**doc, "assumption": hostile}, jid)
        page.evaluate(f"location.hash = '#/job/{jid}'")
        wait_js(page, "document.getElementById('mapping-assumption').innerText.includes('<img')")
        assert said.inner_text() == hostile
        assert page.locator("#mapping-assumption *, #mapping-basis img, #mapping-basis b").count() == 0
        assert page.evaluate("window.__basis_xss") is None


def test_older_mapping_is_chosen_in_the_panel(store_url, browser_page):
    """A job with a what-if and an as-recorded mapping (as `rankmap demo` stores them) offers both in a
    selector, newest first; choosing the older what-if redraws the panel with its badge. A job with one
    mapping has no selector. Option labels are text, never markup."""
    store = open_store(store_url)
    jid, maps = two_mapping_job(store_url)
    (wid, wdoc), (rid, _) = maps["what-if"], maps["recorded"]
    one, _ = basis_jobs(store_url)["recorded"]
    page, problems, outside = browser_page
    with _Server(create_app(store, TOPOLOGY), page) as srv:
        page.goto(f"{srv.url}/#/job/{jid}")
        page.locator("#after-view svg").wait_for(timeout=15_000)
        pick = page.locator("#mapping-pick")
        assert pick.is_visible() and pick.input_value() == str(rid)
        texts = pick.locator("option").all_inner_texts()
        assert len(texts) == 2
        assert texts[0].startswith(f"#{rid} · ") and texts[0].endswith(" UTC · as recorded"), texts
        assert texts[1].startswith(f"#{wid} · ") and texts[1].endswith(" UTC · what-if: GPU-resident"), texts
        assert page.locator("#mapping-basis").inner_text() == "as recorded"
        assert page.locator("#mapping-card .pill").count() == 0

        pick.select_option(str(wid))
        wait_js(page, "document.querySelector('#mapping-basis .pill.what-if') !== null")
        assert page.locator("#mapping-basis .pill.what-if").inner_text() == "what-if: GPU-resident"
        assert page.locator("#mapping-assumption").inner_text() == wdoc["assumption"]
        assert page.locator("#after-title").inner_text().startswith(f"After — mapping #{wid}")
        assert page.locator("#after-title .pill.what-if").inner_text() == "what-if"
        assert pick.input_value() == str(wid) and page.locator("#after-view svg").is_visible()
        # and back to the newest
        pick.select_option(str(rid))
        wait_js(page, "document.getElementById('mapping-basis').innerText === 'as recorded'")
        assert page.locator("#after-title").inner_text().split(" · ")[0] == f"After — mapping #{rid}"
        assert page.locator("#mapping-card .pill").count() == 0

        # one mapping: nothing to choose
        page.evaluate(f"location.hash = '#/job/{one}'")
        wait_js(page, "document.getElementById('mapping-pick').hidden")
        assert page.locator("#after-view svg").is_visible()
        assert page.locator("#after-title").inner_text().split(" · ")[0] != f"After — mapping #{rid}"

        # a basis this version does not know is named as stored: text, never markup
        hostile = '<img src="x" onerror="window.__pick_xss = 1"><b>odd</b>'
        store_mapping(store, {**wdoc, "traffic_basis": hostile}, jid)
        page.evaluate(f"location.hash = '#/job/{jid}'")
        wait_js(page, "document.querySelectorAll('#mapping-pick option').length === 3")
        assert pick.locator("option").first.inner_text().endswith(f" UTC · basis: {hostile}")
        assert page.locator("#mapping-pick img, #mapping-pick b, #mapping-basis img").count() == 0
        assert page.evaluate("window.__pick_xss") is None


def test_mappings_past_the_list_are_counted_and_opened_by_id(store_url, browser_page):
    """A job with more mappings than the API lists: the panel says how many more there are and how
    to open one by id; #/job/J/mapping/M opens one older than those listed, shown as the one chosen
    in the selector after the listed ones, and choosing a listed one puts it in the address bar."""
    from rankmap.web.queries import MAPPINGS_LISTED

    store = open_store(store_url)
    jid, mids, _ = many_mapping_job(store_url, MAPPINGS_LISTED + 2)
    page, problems, outside = browser_page
    with _Server(create_app(store, TOPOLOGY), page) as srv:
        page.goto(f"{srv.url}/#/job/{jid}")
        page.locator("#after-view svg").wait_for(timeout=15_000)
        older, pick = page.locator("#mapping-older"), page.locator("#mapping-pick")
        assert older.is_visible()
        assert older.inner_text() == (
            f"{MAPPINGS_LISTED + 2} mappings stored; the newest {MAPPINGS_LISTED} are listed. Open an older one by "
            f"its id (rankmap map --save and rankmap tune print it) with #/job/{jid}/mapping/ID in the address bar, "
            f"or GET /api/jobs/{jid}/mapping?id=ID.")
        assert pick.input_value() == str(mids[-1])
        texts = pick.locator("option").all_inner_texts()
        assert len(texts) == MAPPINGS_LISTED + 1 and texts[-1] == "… 2 older not listed"

        page.evaluate(f"location.hash = '#/job/{jid}/mapping/{mids[0]}'")
        wait_js(page, f"document.getElementById('after-title').innerText.startsWith('After — mapping #{mids[0]}')")
        assert pick.input_value() == str(mids[0])
        texts = pick.locator("option").all_inner_texts()
        assert len(texts) == MAPPINGS_LISTED + 2 and texts[-1].startswith(f"#{mids[0]} · ")
        assert older.is_visible() and page.locator("#after-view svg").is_visible()
        # the page reloaded keeps it
        page.reload()
        wait_js(page, f"document.getElementById('after-title').innerText.startsWith('After — mapping #{mids[0]}')")
        assert pick.input_value() == str(mids[0])

        pick.select_option(str(mids[-2]))
        wait_js(page, f"document.getElementById('after-title').innerText.startsWith('After — mapping #{mids[-2]}')")
        assert page.evaluate("location.hash") == f"#/job/{jid}/mapping/{mids[-2]}"
        assert len(pick.locator("option").all_inner_texts()) == MAPPINGS_LISTED + 1


def test_a_mapping_of_another_job_opened_by_url_names_its_job(store_url, browser_page):
    """#/job/J/mapping/M where M is another job's mapping: J's page stays (the address names J), and
    its mapping panel says whose mapping M is, with a link to it there and one back to J's own; each
    link, and the address bar's back button, then opens what it names. An id no mapping has is said
    to be stored nowhere, with the way back to J's own."""
    store = open_store(store_url)
    jid, maps = two_mapping_job(store_url)
    rid = maps["recorded"][0]
    other, (omid,), _ = many_mapping_job(store_url, 1)
    page, problems, outside = browser_page
    empty, title = page.locator("#mapping-empty"), page.locator("#after-title")
    with _Server(create_app(store, TOPOLOGY), page) as srv:
        page.goto(f"{srv.url}/#/job/{jid}/mapping/{omid}")
        wait_js(page, f"document.getElementById('mapping-empty').innerText.includes('belongs to job #{other}')")
        assert empty.inner_text() == (f"Mapping #{omid} belongs to job #{other}, not to job #{jid}. "
                                      f"Open it with job #{other} · Show job #{jid}'s own mappings")
        assert page.locator("#job-title").inner_text() == f"Job #{jid}"
        assert page.locator("#mapping-views").is_hidden() and page.locator("#mapping-pick").is_hidden()
        assert page.evaluate("location.hash") == f"#/job/{jid}/mapping/{omid}"  # a reload asks the same

        # back to J's own mappings, by the panel's link: the newest is drawn, with its selector
        page.locator("#mapping-empty a", has_text="own mappings").click()
        wait_js(page, f"document.getElementById('after-title').innerText.startsWith('After — mapping #{rid}')")
        assert page.evaluate("location.hash") == f"#/job/{jid}"
        assert empty.inner_text() == "" and page.locator("#mapping-pick").input_value() == str(rid)
        # the back button asks for M again: said again
        page.go_back()
        wait_js(page, f"document.getElementById('mapping-empty').innerText.includes('belongs to job #{other}')")
        assert page.locator("#mapping-views").is_hidden()

        # on to M where it belongs, by the other link
        page.locator("#mapping-empty a", has_text=f"Open it with job #{other}").click()
        wait_js(page, f"document.getElementById('after-title').innerText.startsWith('After — mapping #{omid}')")
        assert page.evaluate("location.hash") == f"#/job/{other}/mapping/{omid}"
        assert page.locator("#job-title").inner_text() == f"Job #{other}" and empty.inner_text() == ""
        assert page.locator("#after-view svg").is_visible()

        # an id no mapping has
        missing = omid + 1000
        page.evaluate(f"location.hash = '#/job/{jid}/mapping/{missing}'")
        wait_js(page, f"document.getElementById('mapping-empty').innerText.startsWith('Mapping #{missing} ')")
        assert empty.inner_text() == (f"Mapping #{missing} is not stored. Show job #{jid}'s own mappings")
        assert page.locator("#job-title").inner_text() == f"Job #{jid}"
        page.locator("#mapping-empty a", has_text="own mappings").click()
        wait_js(page, f"document.getElementById('after-title').innerText.startsWith('After — mapping #{rid}')")
        assert title.is_visible()
    # the refused mapping requests are the only resources that failed to load
    assert problems and all("404" in p for p in problems), problems
    problems.clear()


def test_monitor_session_page(store_url, browser_page):
    """A `rankmap monitor` session: its GPUs' links in bands, no rank charts, and its cost."""
    store = open_store(store_url)
    jid = sampled_job(store, launcher="monitor", ranks=0)
    with store.engine.begin() as c:
        c.execute(S.jobs.update().where(S.jobs.c.id == jid).values(
            command="rankmap monitor --interval 100ms", exit_status=0, elapsed_ns=600_000_000,
            meta={"monitor": {"host": "nodeA", "source": "gpm", "interval_ms": 100, "t0_unix_ns": time.time_ns(),
                              "gpus": [{"index": 0, "uuid": "GPU-0", "name": "NVIDIA H200"}],
                              "cost": {"per_gpu_sample_ms": 0.05}, "process_cpu_share": 0.004}}))
    page, problems, outside = browser_page
    with _Server(create_app(store, H200), page) as srv:
        page.goto(f"{srv.url}/#/job/{jid}")
        page.locator("#topo-view svg").wait_for(timeout=15_000)
        assert page.locator("#job-title").inner_text() == f"Monitor session #{jid}"
        assert page.locator("#heatmap").is_hidden() and page.locator("#mapping-views").is_hidden()
        assert "50 µs" in page.locator("#kpis").inner_text() and "0.40 % of a core" in page.locator("#kpis").inner_text()
        assert page.locator('#topo-view path.link[data-source="measured"]').count() == 3
        page.locator("#links .main-svg").first.wait_for()


def test_more_new_user_findings(store_url, browser_page, tmp_path):
    """What a new user still ran into: an empty job's "No operations recorded." left under the next
    job's bars; heatmap axes running past the ranks (a rank -1 and a rank 8 of 8); 64 ranks on 8 GPUs
    with their rank labels run together; a multi-node view of unnamed boxes; a job whose rankmap died
    polled as running with its unflushed ranks unsaid; a phone's page twice the window's width."""
    from rankmap.store import process_id

    store = open_store(store_url)
    ids = fill_store(store_url)
    empty = store.create_job(["mpirun", "-np", "4", "./idle"], world_size=4)
    store.ingest(empty, [WebRecord(world_rank=r, traffic=[]) for r in range(4)])
    store.finish_job(empty, exit_status=0, elapsed_ns=10**9)
    big = store.create_job(["mpirun", "-np", "64", "./ring"], world_size=64)
    store.ingest(big, [WebRecord(world_rank=r, traffic=[((r + 1) % 64, "p2p", "MPI_Send", "device", "send", 10**6, 1)])
                       for r in range(64)])
    store.finish_job(big, exit_status=0, elapsed_ns=10**9)
    multi = store.create_job(["srun", "-n", "4", "./a"], world_size=4)
    store.ingest(multi, [WebRecord(world_rank=r, host="nodeA" if r < 2 else "nodeB",
                                   traffic=[((r + 2) % 4, "p2p", "MPI_Send", "device", "send", 10**9, 1)]) for r in range(4)])
    store.finish_job(multi, exit_status=0, elapsed_ns=2 * 10**9)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = process_id(gone.pid)
    gone.wait()
    died = store.create_job(["mpirun", "-np", "2", "./ring"], world_size=2, profiler=dead)
    store.ingest(died, [WebRecord(world_rank=r, finalized=r == 0, traffic=[(1 - r, "p2p", "MPI_Send", "device", "send", 10, 1)])
                        for r in range(2)])
    page, problems, outside = browser_page
    with _Server(create_app(store, TOPOLOGY), page) as srv:
        def open_job(jid: int) -> None:
            page.evaluate(f"location.hash = '#/job/{jid}'")
            wait_js(page, f"document.getElementById('job-title').innerText === 'Job #{jid}'")

        page.goto(f"{srv.url}/#/job/{empty}")
        wait_js(page, "document.getElementById('ops').innerText === 'No operations recorded.'")
        assert page.locator("#timeline").inner_text() == "No timeline recorded."
        # 1. the next job's charts stand alone: no message of the empty job is left under them
        open_job(ids["done"])
        for plot in ("ops", "timeline", "mem", "heatmap"):
            page.locator(f"#{plot} .main-svg").first.wait_for(timeout=15_000)
            assert page.locator(f"#{plot} > p").count() == 0, plot
            assert page.locator(f"#{plot}").inner_text().count("recorded") == 0, plot
        # 2. the heatmap's axes span the ranks, 0 to 7, each cell square, no rank -1 or 8
        wait_js(page, f"document.getElementById('heatmap').data[0].z.length === {N}")
        ranges = page.evaluate("[document.getElementById('heatmap')._fullLayout.xaxis.range,"
                               " document.getElementById('heatmap')._fullLayout.yaxis.range]")
        assert ranges == [[-0.5, N - 0.5], [N - 0.5, -0.5]]
        ticks = page.evaluate("[...document.querySelectorAll('#heatmap .ytick text')].map(t => t.textContent)")
        assert sorted(ticks, key=int) == [str(r) for r in range(N)], ticks

        # 3. 64 ranks on a DGX-1's 8 GPUs: the rank labels of the GPU row do not run into each other
        open_job(big)
        wait_js(page, "[...document.querySelectorAll('#topo-view text.ranks')].some(t => t.textContent.includes('+'))")
        boxes = page.evaluate("""[...document.querySelectorAll('#topo-view text.ranks')].map(t => {
            const b = t.getBoundingClientRect(); return {x0: b.left, x1: b.right, y: Math.round(b.top), text: t.textContent}; })""")
        assert len(boxes) == 8 and all("+" in b["text"] for b in boxes), boxes
        for a, b in zip(sorted(boxes, key=lambda b: b["x0"]), sorted(boxes, key=lambda b: b["x0"])[1:]):
            assert a["y"] != b["y"] or a["x1"] <= b["x0"], (a, b)
        tip = page.locator('#topo-view [data-device="gpu0"] > title').text_content()
        assert tip.endswith("ranks: " + ", ".join(str(r) for r in range(0, 64, 8))), tip

        # 4. the multi-node view names its GPUs and NICs
        open_job(multi)
        page.locator("#cluster-view svg").wait_for(timeout=15_000)
        gpus = page.locator("#cluster-view .node-gpu text").all_text_contents()
        assert gpus and gpus == [f"GPU{i}" for i in range(len(gpus) // 2)] * 2, gpus
        nics = page.locator("#cluster-view .node-nic text").all_text_contents()
        assert nics and all(nics), nics

        # 5. a job whose rankmap died: incomplete, not polled, its unflushed rank said
        asked = []
        page.on("request", lambda r: asked.append(r.url) if r.url.endswith(f"/api/jobs/{died}") else None)
        open_job(died)
        wait_js(page, "document.querySelector('#job-status .pill.bad') !== null")
        assert page.locator("#job-status").inner_text() == "incomplete"
        assert page.locator("#job-problems").inner_text() == "ranks without a final flush: 1"
        assert "running" not in page.locator("#kpis").inner_text()
        page.wait_for_timeout(5000)                     # two poll periods of a running job
        assert len(asked) == 1, asked

        # 6. a phone: one column, nothing wider than the window, the grid still readable; the window
        # shrinks while the link counters' chart is hidden (this job has none), which kept its old width
        assert page.locator("#links").is_hidden()
        page.set_viewport_size({"width": 390, "height": 844})
        open_job(ids["done"])
        wait_js(page, "document.getElementById('links').offsetWidth > 0 && document.querySelector('#links .main-svg') !== null")
        try:
            wait_js(page, "document.documentElement.scrollWidth <= 390", timeout=10_000)
        except AssertionError:
            wide = page.evaluate("""[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 391)
                .slice(0, 3).map(e => `${e.closest('[id]').id} ${Math.round(e.getBoundingClientRect().right)}`)""")
            raise AssertionError(f"wider than the window: {wide}") from None
        assert page.locator("#heatmap").bounding_box()["width"] >= 300
        assert page.locator("#job-list").bounding_box()["y"] < page.locator("#job-title").bounding_box()["y"]
        page.screenshot(path=str(tmp_path / "phone.png"), full_page=True)


def test_counts_of_one_are_singular(store_url, browser_page):
    """"1 ranks" in the job list (and "1 messages", "nodeA: 1 ranks" in the multi-node view): a
    count of one takes the singular, any other count the plural."""
    store = open_store(store_url)
    one = store.create_job(["./solo"], world_size=1)
    store.ingest(one, [WebRecord(world_rank=0, traffic=[(0, "p2p", "MPI_Send", "device", "send", 10, 1)],
                                 op_time={"MPI_Send": (1, 1000)})])
    store.finish_job(one, exit_status=0, elapsed_ns=10**9)
    pair = store.create_job(["srun", "-n", "2", "./a"], world_size=2)
    store.ingest(pair, [WebRecord(world_rank=r, host=f"node{'AB'[r]}",
                                  traffic=[(1 - r, "p2p", "MPI_Send", "device", "send", 10**9, 2)]) for r in range(2)])
    store.finish_job(pair, exit_status=0, elapsed_ns=10**9)
    page, problems, outside = browser_page
    with _Server(create_app(store, TOPOLOGY), page) as srv:
        page.goto(f"{srv.url}/#/job/{one}")
        wait_js(page, f"document.getElementById('job-title').innerText === 'Job #{one}'")
        meta = {j: page.locator(f'#job-list li[data-job="{j}"] .job-meta').inner_text() for j in (one, pair)}
        assert meta[one].startswith("1 rank · ") and meta[pair].startswith("2 ranks · "), meta
        assert "1 message" in page.locator("#kpis").inner_text().splitlines()
        wait_js(page, "document.getElementById('ops').data !== undefined")
        hover = page.evaluate("document.getElementById('ops').data[0].hovertext[0]")
        assert "in 1 message<br>1 call, " in hover and "summed over 1 rank<br>" in hover, hover
        page.evaluate(f"location.hash = '#/job/{pair}'")
        page.locator("#cluster-view svg").wait_for(timeout=15_000)
        tips = page.locator("#cluster-view title").all_text_contents()
        assert any(t.startswith("nodeA: 1 rank; ") for t in tips), tips
        assert "nodeA GPU0: rank 0" in tips, tips


@pytest.fixture
def failed_launch(tmp_path):
    """A dashboard over one job whose launch failed before any rank started (no records, exit 132);
    a fixture, so that the server outlives the page (which polls it) until the browser is closed."""
    store = open_store(f"sqlite:///{tmp_path / 'failed.db'}")
    jid = store.create_job(["mpirun", "-np", "2", "/nonexistent"], launcher="openmpi", world_size=2)
    store.finish_job(jid, exit_status=132, elapsed_ns=10**8)
    with _Server(create_app(store, TOPOLOGY)) as srv:
        yield srv, jid


def test_a_job_that_started_no_rank_shows_as_failed(failed_launch, browser_page):
    """The list and the job's heading say "failed: exit 132", and the page of a job with no rank
    draws without an error."""
    srv, jid = failed_launch
    page, problems, outside = browser_page
    page.goto(srv.url + "/")
    item = page.locator(f'#job-list li[data-job="{jid}"]')
    item.wait_for()
    assert item.locator(".pill.bad").inner_text() == "failed: exit 132"
    item.click()
    page.locator("#job-status .pill.bad").wait_for(timeout=15_000)
    assert page.locator("#job-status").inner_text() == "failed: exit 132"


# ---------------------------------------------------------------------- a person's findings, third round
def font_px(page, box: str) -> list[float]:
    """The rendered size (CSS px) of every text of the SVG drawing in ``box``: its font size in the
    drawing's units times the scale the drawing is shown at."""
    return page.evaluate(f"""() => [...document.querySelectorAll('{box} svg')].flatMap(s => {{
        const scale = s.getBoundingClientRect().width / s.viewBox.baseVal.width;
        return [...s.querySelectorAll('text')].filter(t => t.textContent)
            .map(t => parseFloat(getComputedStyle(t).fontSize) * scale); }})""")


def test_a_job_page_asks_only_what_the_server_can_answer(store_url, browser_page):
    """On a machine whose own node does not load (``live`` without an NVIDIA driver; here a server
    topology that is not there) a job with a mapping is drawn on its mapping's node, and a job
    without one asks for no link view at all: not one request of the page fails. Its host-staged
    bytes are drawn over PCIe and the host, in the link view as in the mapping panel, never on NVLink."""
    store = open_store(store_url)
    ids = fill_store(store_url)
    staged = store.create_job(["mpirun", "-np", str(N), "./staged"], world_size=N, meta={"bucket_ms": 100})
    store.ingest(staged, [WebRecord(world_rank=r, start_ns=10**18, traffic=[((r + 1) % N, "p2p", "MPI_Send", "host", "send", 10**8, 1)],
                                    timeline=[(0, (r + 1) % N, "p2p", 10**8)]) for r in range(N)])
    store.finish_job(staged, exit_status=0, elapsed_ns=10**9)
    from rankmap.mapping.traffic import job_traffic
    from rankmap.pipeline.map import place
    store_mapping(store, place(job_traffic(store, staged), topology=TOPOLOGY, source={"job": staged}), staged)
    page, problems, outside = browser_page
    failed, asked = [], []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.on("request", lambda r: asked.append(r.url))
    with _Server(create_app(store, "/nonexistent/node.json"), page) as srv:
        page.goto(f"{srv.url}/#/job/{staged}")
        page.locator("#topo-view svg").wait_for(timeout=15_000)
        assert "dgx1-v100 (the node of its mapping #" in page.locator("#topo-placement").inner_text()
        page.locator("#after-view svg").wait_for(timeout=15_000)
        kinds = page.evaluate("""() => [...document.querySelectorAll('#topo-view path.link')].map(p =>
            [p.dataset.kind, +p.dataset.load])""")
        assert all(load == 0 for kind, load in kinds if kind == "nvlink"), kinds
        assert sum(load for kind, load in kinds if kind == "pcie") > 0 and any(k == "cpu_interconnect" and v for k, v in kinds)
        for view in ("#before-view", "#after-view"):
            drawn = page.evaluate(f"""() => [...document.querySelectorAll('{view} path.link')].map(p =>
                [p.dataset.kind, +p.dataset.load])""")
            assert all(load == 0 for kind, load in drawn if kind == "nvlink"), (view, drawn)
        # the running job has no mapping: no node to draw it on here, said once, nothing asked that fails
        asked.clear()
        page.evaluate(f"location.hash = '#/job/{ids['running']}'")
        wait_js(page, "document.getElementById('topo-view').innerText.includes('no node to draw')")
        page.wait_for_timeout(2500)  # a poll of the running job
        assert not [u for u in asked if "/utilisation" in u or "/cluster" in u or "/api/topology" in u], asked
        # a node picked in the header draws it
        page.select_option("#topo-spec", TOPOLOGY)
        page.locator("#topo-view svg").wait_for(timeout=15_000)
        page.select_option("#topo-spec", "")   # each job's own again, for the next page
    assert failed == [], failed


def test_job_list_rows_say_what_differs(store_url, browser_page):
    """Two jobs whose commands share a long launcher prefix: each row shows what its job runs, the
    words that differ in bold and on screen, the options both pass folded into one "…"."""
    store = open_store(store_url)
    base = ["/usr/bin/mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np", "8",
            "/home/user/.rankmap/demo/halo4d", "2x2x2x1", "1048576", "5"]
    a = store.create_job(base, world_size=8)
    b = store.create_job(base + ["col"], world_size=8)
    page, problems, outside = browser_page
    with _Server(create_app(store, TOPOLOGY), page) as srv:
        page.goto(srv.url + "/")
        page.locator(f'#job-list li[data-job="{b}"]').wait_for()
        rows = {j: page.locator(f'#job-list li[data-job="{j}"] .job-cmd') for j in (a, b)}
        text = {j: r.inner_text().replace("\n", " ") for j, r in rows.items()}
        assert text[a] != text[b], text
        assert text[b] == "mpirun.openmpi … -np 8 halo4d 2x2x2x1 1048576 5 col", text
        assert rows[b].locator("b").all_inner_texts() == ["col"]
        assert rows[a].get_attribute("title") == store.job(a)["command"]
        word, row = rows[b].locator("b").bounding_box(), rows[b].bounding_box()
        assert row["x"] <= word["x"] and word["x"] + word["width"] <= row["x"] + row["width"] + 0.5
        assert row["y"] <= word["y"] and word["y"] + word["height"] <= row["y"] + row["height"] + 0.5


def test_labels_of_the_drawings_are_readable(dashboard, browser_page, tmp_path):
    """The mapping's before and after drawings of a DGX-1 side by side in half a card each were
    drawn at half scale, their labels 6 px tall: every label of every drawing is 11 px or more."""
    srv, ids, _ = dashboard
    page, problems, outside = browser_page
    page.goto(f"{srv.url}/#/job/{ids['done']}")
    page.locator("#after-view svg").wait_for(timeout=15_000)
    page.locator("#topo-view svg").wait_for(timeout=15_000)
    for box in ("#before-view", "#after-view", "#topo-view"):
        sizes = font_px(page, box)
        assert sizes and min(sizes) >= 11, (box, min(sizes))
    page.locator("#mapping-card").screenshot(path=str(tmp_path / "mapping.png"))


def test_an_unknown_job_shows_only_its_error(dashboard, browser_page):
    """#/job/999 after a job: the error, and nothing of the job shown before it under it."""
    srv, ids, _ = dashboard
    page, problems, outside = browser_page
    page.goto(f"{srv.url}/#/job/{ids['done']}")
    page.locator("#heatmap .main-svg").first.wait_for(timeout=15_000)
    page.evaluate("location.hash = '#/job/999'")
    page.locator("#job-error").wait_for(timeout=15_000)
    assert "unknown job" in page.locator("#job-error").inner_text()
    assert page.locator("#job-title").inner_text() == "Job #999"
    assert page.locator("#job .grid").is_hidden() and page.locator("#kpis").is_hidden()
    assert page.locator("#job-command").inner_text() == "" and page.locator("#job-status").inner_text() == ""
    assert page.locator("#job-list li.selected").count() == 0
    # and a known job afterwards is whole again
    page.evaluate(f"location.hash = '#/job/{ids['done']}'")
    page.locator("#job .grid").wait_for(timeout=15_000)
    wait_js(page, "document.getElementById('job-error').hidden")
    assert "8 / 8" in page.locator("#kpis").inner_text()
    # the one failed request is the page asking for the job that is not there
    assert problems and all("404" in p for p in problems), problems
    problems.clear()


def test_a_token_url_pasted_into_an_open_tab_is_used(store_url, browser_page):
    """A tab left open on the token form (or with a wrong token) takes the printed #token= URL
    pasted into its address bar: the jobs load, the form goes, the token leaves the address bar."""
    store = open_store(store_url)
    ids = fill_store(store_url)
    token = "tok-" + "y" * 24
    page, problems, outside = browser_page
    with _Server(create_app(store, TOPOLOGY, access_for("0.0.0.0", token)), page) as srv:
        page.goto(srv.url + "/")
        page.locator("#auth").wait_for()
        # pasting the URL into the address bar of this tab: a same-document navigation to its #token=
        page.evaluate(f"location.hash = '#token={token}'")
        page.locator(f'#job-list li[data-job="{ids["done"]}"]').wait_for(timeout=15_000)
        assert page.locator("#auth").is_hidden() and "token" not in page.evaluate("location.href")
        # a wrong token in the tab, then the right one with a job: that job opens
        page.evaluate("sessionStorage.setItem('rankmap.token', 'wrong')")
        page.evaluate(f"location.hash = '#/job/{ids['done']}&token={token}'")
        page.locator("#heatmap .main-svg").first.wait_for(timeout=15_000)
        assert page.locator("#job-title").inner_text() == f"Job #{ids['done']}"
        assert page.evaluate("location.hash") == f"#/job/{ids['done']}"
    assert all("401" in p for p in problems), problems
    problems.clear()
