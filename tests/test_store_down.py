"""`rankmap serve` over a database that is down: 503 with one clear line, and a page that says so."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the dashboard needs the web extra")

from pg import own_pg_cluster  # noqa: E402,F401  (fixture)
from rankmap.store import open_store  # noqa: E402
from rankmap.web.app import create_app  # noqa: E402
from test_web_api import local_client  # noqa: E402


@pytest.mark.postgres
def test_serve_answers_503_while_postgresql_is_down(own_pg_cluster):
    pg = own_pg_cluster
    url = pg.new_database()
    store = open_store(url)
    jid = store.create_job(["mpirun", "-np", "2", "./a"], world_size=2)
    client = local_client(create_app(open_store(url, lazy=True), "dgx1-v100"))
    assert client.get("/api/jobs").json()["jobs"][0]["id"] == jid
    pg.pause()
    for path in ("/api/jobs", f"/api/jobs/{jid}", f"/api/jobs/{jid}/matrix", f"/api/jobs/{jid}/timeline"):
        r = client.get(path)
        assert r.status_code == 503, (path, r.text)
        detail = r.json()["detail"]
        assert detail.startswith("the database is down: the store postgresql") and "\n" not in detail
    assert client.get("/api/info").status_code == 200          # the page itself still loads
    pg.resume()
    assert client.get("/api/jobs").json()["jobs"][0]["id"] == jid


@pytest.mark.postgres
def test_serve_starts_on_a_database_that_is_not_up_yet(own_pg_cluster, tmp_path):
    """Started while the server is down, the dashboard says so; once it is up, the jobs appear."""
    pg = own_pg_cluster
    url = pg.new_database()
    pg.pause()
    store = open_store(url, lazy=True)
    assert not store.ready
    client = local_client(create_app(store, "dgx1-v100"))
    r = client.get("/api/jobs")
    assert r.status_code == 503 and "the database is down" in r.json()["detail"]
    pg.resume()
    r = client.get("/api/jobs")
    assert r.status_code == 200 and r.json()["jobs"] == [] and store.ready


@pytest.mark.browser
def test_page_says_the_database_is_down(tmp_path):
    """In a real Chromium: the page of a server whose store cannot be reached shows the banner."""
    import test_web_browser as B

    store = open_store("postgresql://nobody@127.0.0.1:1/none", lazy=True)
    with B._Server(create_app(store, "dgx1-v100")) as srv, B.playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(B.CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page()
            page.goto(srv.url + "/")
            banner = page.locator("#store-down")
            banner.wait_for(state="visible", timeout=20000)
            text = banner.inner_text()
            assert text.startswith("the database is down: the store postgresql") and "tries again" in text
        finally:
            browser.close()


def test_the_guard_answers_before_the_store_is_asked():
    """A server with a token whose store is down: a request without the token is refused (401, with
    the security headers) without reaching the store; with the token it gets the 503, headers too."""
    from starlette.testclient import TestClient

    from rankmap.web.security import access_for

    store = open_store("postgresql://nobody@127.0.0.1:1/none", lazy=True)
    client = TestClient(create_app(store, "dgx1-v100", access_for("127.0.0.1", "sekrit")), base_url="http://127.0.0.1")
    r = client.get("/api/jobs")
    assert r.status_code == 401 and "token" in r.json()["detail"] and "content-security-policy" in r.headers
    r = client.get("/api/jobs", headers={"authorization": "Bearer sekrit"})
    assert r.status_code == 503 and r.json()["store_down"] is True and "content-security-policy" in r.headers
