"""The machine page in a real Chromium (same server and browser set-up as test_web_browser)."""

from __future__ import annotations

import pytest

from test_web_browser import _Server, browser_page  # noqa: F401  (skips this module without Chromium)
from test_web_machine import fill

from rankmap.store import open_store
from rankmap.web.app import create_app

pytestmark = pytest.mark.browser


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
        page.select_option("#nccl-op", "sendrecv")
        assert page.locator("#bench-runs li").count() == 3
        page.screenshot(path=str(tmp_path / "machine.png"), full_page=True)
        page.select_option("#machine-host", "other-node")
        # (the page's Content-Security-Policy forbids evaluated strings: wait through locators)
        page.locator("#machine-title", has_text="Machine other-node").wait_for(timeout=15_000)
        page.locator("#mpi-latency", has_text="bench mpi").wait_for(timeout=15_000)
        # the page is reachable by its address, and a job picked in the list leaves it
        page.goto(srv.url + "/#/machine")
        page.wait_for_selector("#machine:not([hidden])")
        assert page.locator("#job").is_hidden()
    assert not problems, problems
    assert not outside, outside
