"""The machine page in a real Chromium (same server and browser set-up as test_web_browser)."""

from __future__ import annotations

import pytest

from test_web_browser import _Server, browser_page, chromium  # noqa: F401  (fixtures; skips this module without Chromium)
from test_web_machine import fill

from rankmap.store import open_store
from rankmap.web.app import create_app

pytestmark = pytest.mark.browser


@pytest.mark.browser
def test_machine_page_in_a_browser(tmp_path, browser_page):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    fill(url)
    page, problems, outside = browser_page
    with _Server(create_app(open_store(url), "h200x2-nvswitch")) as srv:
        page.goto(srv.url + "/")
        page.click("#machine-link")
        page.wait_for_selector("#p2p-matrix svg.main-svg")
        assert page.locator("#machine-title").inner_text() == "Machine gpu-node"
        cells = page.locator("#p2p-table td").all_inner_texts()
        assert "CE, source pushes" in cells and "396.20 GB/s" in cells and "55.40 GB/s" in cells
        assert "389.00 GB/s (total 778.7)" in cells
        assert "GPU0->GPU2: no peer access" in page.locator("#p2p-note").inner_text()
        assert page.locator("#mpi-latency .scatterlayer .trace").count() == 3
        assert page.locator("#mpi-bw .scatterlayer .trace").count() == 2
        assert page.locator("#nccl-busbw .scatterlayer .trace").count() == 2
        # log axes a person reads: sizes by name at the measured sizes, values written out whole and
        # increasing (Plotly's own labels read "10, 2, 5, 100, 2, 5")
        for box in ("#mpi-latency", "#mpi-bw"):
            xs = page.locator(f"{box} .xtick text").all_text_contents()
            assert xs == ["8 B", "64 B", "512 B"], (box, xs)
            ys = [float(t) for t in page.locator(f"{box} .ytick text").all_text_contents()]
            assert len(ys) >= 3 and ys == sorted(ys) and len(set(ys)) == len(ys), (box, ys)
        assert page.locator("#nccl-busbw .xtick text").all_text_contents() == ["1 MiB", "4 MiB"]
        assert "run #" in page.locator("#nccl-note").inner_text() and not page.locator("#nccl-note").inner_text().endswith("·")
        page.select_option("#nccl-op", "sendrecv")
        assert page.locator("#bench-runs li").count() == 3
        page.screenshot(path=str(tmp_path / "machine.png"), full_page=True)
        page.select_option("#machine-host", "other-node")
        # (the page's Content-Security-Policy forbids evaluated strings: wait through locators)
        page.locator("#machine-title", has_text="Machine other-node").wait_for(timeout=15_000)
        # a kind never run there: its cards are left out, one line says what to run; no card stands empty
        page.locator("#machine-missing", has_text="`rankmap bench mpi -- mpirun -np 2`").wait_for(timeout=15_000)
        assert "`rankmap bench nccl -- mpirun -np 2`" in page.locator("#machine-missing").inner_text()
        assert page.locator("#mpi-latency").is_hidden() and page.locator("#nccl-busbw").is_hidden()
        assert page.locator("#p2p-note").inner_text() == "run #1"
        empty = page.evaluate("""() => [...document.querySelectorAll('#machine-cards .card')].filter(c => c.offsetParent)
            .filter(c => !c.querySelector('svg.main-svg, td, li, p')).map(c => c.querySelector('h3').textContent)""")
        assert empty == [], empty
        # the page is reachable by its address, and a job picked in the list leaves it
        page.goto(srv.url + "/#/machine")
        page.wait_for_selector("#machine:not([hidden])")
        assert page.locator("#job").is_hidden()
    assert not problems, problems
    assert not outside, outside
