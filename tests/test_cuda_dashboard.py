"""The dashboard's GPU activity card in a real Chromium, over a store holding real CUDA record
files (the activity library fed by the stand-in CUPTI) beside an MPI rank's record."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_cuda_activity import parts, run_app  # noqa: F401  (module fixture)
from test_web_browser import _Server, browser_page, chromium  # noqa: F401  (fixtures)
from test_web_api import TOPOLOGY, record
from rankmap.formats import record as records
from rankmap.store import open_store
from rankmap.web.app import create_app

pytestmark = [pytest.mark.mpi, pytest.mark.browser]


def test_gpu_activity_card(parts, browser_page, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    for rank in (0, 1):
        r = run_app(parts, run, OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE="2")
        assert r.returncode == 0, r.stderr
    url = f"sqlite:///{tmp_path / 'rankmap.db'}"
    store = open_store(url)
    jid = store.create_job(["mpirun", "-np", "2", "./app"], launcher="openmpi", world_size=2,
                           meta={"cuda_activity": "on"})
    store.ingest(jid, records.read_dir(run) + [record(0, 2), record(1, 2)])
    store.finish_job(jid, exit_status=0, elapsed_ns=3_000_000_000)
    page, problems, outside = browser_page
    with _Server(create_app(open_store(url), TOPOLOGY)) as srv:
        api = srv.get(f"/api/jobs/{jid}/cuda")
        assert api["state"] == "CUDA activity: on for 2 ranks"
        page.goto(srv.url + "/")
        page.locator(f'#job-list li[data-job="{jid}"]').click()
        card = page.locator("#cuda-card")
        card.locator("table.cuda").first.wait_for(timeout=15_000)
        assert page.locator("#cuda-state").inner_text() == api["state"]
        rows = page.evaluate("""() => [...document.querySelectorAll('#cuda-body table.cuda')].map(t =>
            [...t.querySelectorAll('tr')].slice(1).map(tr => [...tr.children].map(td => td.textContent)))""")
        per_process, kinds, peers = rows
        ops = {(r[0], r[1]): r for r in per_process}
        assert ops[("MEMORY_OPER", "P2P")][5] == "4" and ops[("MEMORY_OPER", "H2D")][5] == "8"
        assert ops[("CUDA_KERNEL", "all kernels (3 names)")][5] == "8"
        assert ("collectives", "MPI_Allreduce") in ops and ("point-to-point", "MPI_Isend") in ops
        assert [k[0] for k in kinds] == ["D2D", "D2H", "H2D", "P2P", "memset"]
        assert peers[0][:3] == ["0000:18:00.0 Fake GPU 0", "0000:28:00.0 Fake GPU 1", "6"]
        assert "device parallel efficiency" in card.inner_text().lower()
        shot = tmp_path / "cuda-card.png"
        card.screenshot(path=str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        print(f"screenshot: {shot}")
    assert not problems, problems
    assert not outside, outside
