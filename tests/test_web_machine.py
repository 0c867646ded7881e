"""The dashboard's machine page: the stored `rankmap bench` runs of a host, by API and in a real Chromium."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the dashboard needs the web extra")
from fastapi.testclient import TestClient  # noqa: E402

from rankmap.linkbench.rows import BenchRun, Row  # noqa: E402
from rankmap.store import open_store  # noqa: E402
from rankmap.web.app import create_app  # noqa: E402


def fill(url: str) -> dict[str, int]:
    store = open_store(url)
    ids = {}
    p2p = [Row("ce_write", 1 << 29, "device", "cuda", bandwidth_GBps=396.2, src=0, dst=1),
           Row("ce_write", 1 << 29, "device", "cuda", bandwidth_GBps=395.0, src=1, dst=0),
           Row("ce_read", 1 << 29, "device", "cuda", bandwidth_GBps=393.7, src=0, dst=1),
           Row("ce_bidir_read", 1 << 29, "device", "cuda", bandwidth_GBps=389.0, total_GBps=778.7, src=0, dst=1),
           Row("latency_ce", 8, "device", "cuda", latency_us=2.1, src=0, dst=1),
           Row("h2d_pinned", 1 << 29, "pinned", "cuda", bandwidth_GBps=55.4, src=-1, dst=0)]
    ids["old"] = store.save_bench_run(BenchRun("p2p", p2p[:1], {}, ["old"], [], host="other-node").to_json())
    ids["p2p"] = store.save_bench_run(BenchRun("p2p", p2p, {"gpus": [{"index": 0}, {"index": 1}]}, ["2 GPU pair directions"],
                                               ["GPU0->GPU2: no peer access"], host="gpu-node").to_json())
    mpi = [Row("latency", s, b, "mpi", latency_us=v * (1 + s / 1e6)) for s in (8, 64, 512) for b, v in
           (("host", 0.5), ("device-staged", 12.0), ("device-ipc", 6.0))]
    mpi += [Row("bw", s, b, "mpi", bandwidth_GBps=v * s / 512) for s in (8, 64, 512) for b, v in
            (("device-staged", 4.0), ("device-ipc", 40.0))]
    ids["mpi"] = store.save_bench_run(BenchRun("mpi", mpi, {"mpi": "Open MPI v4.1.6, package", "cuda_aware": False},
                                               ["host buffers"], ["device: the MPI is not CUDA-aware"],
                                               host="gpu-node").to_json())
    nccl = [Row(op, s, buf, lib, latency_us=20.0, algbw_GBps=s / 2e4, busbw_GBps=s / 2e4) for op in ("all_reduce", "sendrecv")
            for s in (1 << 20, 1 << 22) for lib, buf in (("nccl", "device"), ("mpi", "device-staged"))]
    ids["nccl"] = store.save_bench_run(BenchRun("nccl", nccl, {"nccl_version": "2.28.9", "ranks": 2}, ["NCCL"], [],
                                                host="gpu-node").to_json())
    return ids


def test_machine_api(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    ids = fill(url)
    c = TestClient(create_app(open_store(url), "h200x2-nvswitch"), base_url="http://127.0.0.1:8000")
    m = c.get("/api/machine").json()
    assert m["host"] == "gpu-node" and m["hosts"] == ["gpu-node", "other-node"]
    assert {k: v["id"] for k, v in m["runs"].items()} == {"p2p": ids["p2p"], "mpi": ids["mpi"], "nccl": ids["nccl"]}
    assert m["runs"]["p2p"]["rows"][3]["total_GBps"] == 778.7
    assert [h["id"] for h in m["history"]] == [ids["nccl"], ids["mpi"], ids["p2p"]]
    other = c.get("/api/machine?host=other-node").json()
    assert other["runs"]["p2p"]["id"] == ids["old"] and other["runs"]["mpi"] is None
    r = c.get("/api/machine?host=nowhere")
    assert r.status_code == 404 and "no benchmark runs from host 'nowhere'" in r.json()["detail"]
    assert c.get(f"/api/bench/{ids['mpi']}").json()["kind"] == "mpi"
    assert c.get("/api/bench/999").status_code == 404
    empty = TestClient(create_app(open_store(f"sqlite:///{tmp_path / 'e.db'}"), "h200x2-nvswitch"),
                       base_url="http://127.0.0.1:8000").get("/api/machine")
    assert empty.json() == {"hosts": [], "host": None, "runs": {"p2p": None, "mpi": None, "nccl": None}, "history": []}


@pytest.mark.gpu_dry
@pytest.mark.parametrize("clients", ["httpx2", "httpx only", "neither"])
def test_gpu_scripts_machine_page_check_on_either_http_client(tmp_path, clients):
    """gpu/machine_page_check.py (gpu/bench.sh's dashboard step) run as the GPU machine runs it: with
    httpx2 it passes and warns of nothing, with httpx alone (what the GPU machine offers) it passes
    and warns of nothing either, every warning being an error here; with neither it fails in one line."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    pytest.importorskip({"httpx2": "httpx2", "httpx only": "httpx"}.get(clients, "fastapi"))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    fill(url)
    hidden = {"httpx2": [], "httpx only": ["httpx2"], "neither": ["httpx2", "httpx"]}[clients]
    code = (f"import runpy, sys; sys.modules.update(dict.fromkeys({hidden!r})); "
            f"sys.argv = ['machine_page_check.py', {url!r}]; "
            f"runpy.run_path({str(ROOT / 'gpu' / 'machine_page_check.py')!r}, run_name='__main__')")
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), cwd=tmp_path)
    if clients == "neither":
        assert (r.returncode, r.stderr) == (1, ""), r.stderr
        assert r.stdout.startswith("FAIL dashboard machine page data: no HTTP client for starlette's TestClient (")
        assert r.stdout.endswith("); install httpx2 or httpx\n") and r.stdout.count("\n") == 1, r.stdout
        return
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert r.stdout == "PASS dashboard machine page data: rows per benchmark kind {'p2p': 6, 'mpi': 15, 'nccl': 8}\n"
