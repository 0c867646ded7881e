"""The live dashboard's API: link utilisation in bands, /metrics, the multi-node view, and what
makes the server safe to expose (token, Host check, headers). Exact values against known data."""

from __future__ import annotations

import os
import json
import math
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
import sqlalchemy as sa

pytest.importorskip("fastapi", reason="the dashboard needs the web extra (fastapi)")
from fastapi.testclient import TestClient  # noqa: E402

from rankmap.errors import RankmapError  # noqa: E402
from rankmap.store import open_store  # noqa: E402
from rankmap.store import schema as S  # noqa: E402
from rankmap.topology import load  # noqa: E402
from rankmap.web.app import create_app  # noqa: E402
from rankmap.web.security import access_for  # noqa: E402
from rankmap.web.utilisation import bands_of, measured_links, parse_thresholds  # noqa: E402
from pg import BACKENDS, pg_cluster  # noqa: E402,F401  (session fixture)
from test_web_api import WebRecord, local_client  # noqa: E402

H200 = "h200x2-nvswitch"
NV_BW = 478.116e9            # bytes/s per direction of a GPU's NVLink bundle in that fixture
FRAME = 0.1
# GPU0's NVLink TX use per 100 ms frame, in percent: one per band (idle, low, medium, high, saturated)
USE = [0.0, 10.0, 30.0, 60.0, 90.0, 22.0]


def cumulative(use: list[float], bw: float, frame: float) -> list[int]:
    out, tot = [0], 0.0
    for u in use:
        tot += u / 100 * bw * frame
        out.append(int(round(tot)))
    return out


def sampled_job(store, *, launcher="torchrun", t0=None, ranks=2, host="nodeA") -> int:
    """A 2-rank job whose sampler saw GPU0 send USE of its NVLink to GPU1, frame by frame (by
    default it started a second ago, so /metrics still takes its sampler for a running one)."""
    t0 = time.time_ns() - 10**9 if t0 is None else t0
    jid = store.create_job(["torchrun", "--nproc-per-node", str(ranks), "train.py"], launcher=launcher,
                           world_size=ranks, hosts=[host],
                           meta={"bucket_ms": 100, "link_sampler": {
                               "source": "gpm", "interval_ms": 100, "t0_unix_ns": t0, "host": host,
                               "gpus": [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA H200", "pci_bus_id": ""}
                                        for i in range(2)]}})
    tx = cumulative(USE, NV_BW, FRAME)
    rows = []
    for k, v in enumerate(tx):
        t = k * 100_000_000
        rows.append(dict(t_ns=t, device=0, link="nvlink", tx_bytes=v, rx_bytes=0))
        rows.append(dict(t_ns=t, device=1, link="nvlink", tx_bytes=0, rx_bytes=v))
        rows.append(dict(t_ns=t, device=0, link="pcie", tx_bytes=k * 63_000_000, rx_bytes=0))  # 1 % of 63 GB/s
    store.add_link_samples(jid, rows)
    # the ranks' own view: 1 GB from rank 0 to 1 in bucket 2 (the model draws the links nothing measures)
    store.ingest(jid, [WebRecord(world_rank=r, start_ns=t0, host=host, source="nccl",
                                 traffic=[(1 - r, "nccl", "ncclSend", "device", "send", 10**9 if r == 0 else 0, 1)],
                                 timeline=[(2, 1 - r, "nccl", 10**9)] if r == 0 else []) for r in range(ranks)])
    return jid


@pytest.fixture
def store(tmp_path):
    return open_store(f"sqlite:///{tmp_path / 'live.db'}")


@pytest.fixture(params=BACKENDS)
def both_stores(request, tmp_path):
    """A fresh store of each back end, for what depends on the database's own queries."""
    if request.param == "sqlite":
        return open_store(f"sqlite:///{tmp_path / 'live.db'}")
    return open_store(request.getfixturevalue("pg_cluster").new_database())


def link(d: dict, a: str, b: str) -> dict:
    return next(l for l in d["links"] if {l["a"], l["b"]} == {a, b})


# ----------------------------------------------------------------------------- utilisation
def test_bands_and_thresholds():
    assert bands_of(np.array([0, 0.05, 0.1, 25, 25.01, 50, 75, 75.5, 140]), (0.1, 25, 50, 75)).tolist() == \
        [0, 0, 1, 1, 2, 2, 3, 4, 4]
    assert parse_thresholds(None) == (0.1, 25.0, 50.0, 75.0)
    assert parse_thresholds("1,10,20,90") == (1.0, 10.0, 20.0, 90.0)
    for bad in ("25,50,75", "1,50,25,75", "a,b,c,d", "-1,2,3,4"):
        with pytest.raises(RankmapError, match="bands"):
            parse_thresholds(bad)


def test_only_links_one_counter_covers_are_measured():
    h = load(H200)
    m = measured_links(h)
    got = {(h.links[i].a, h.links[i].b): v for i, v in m.items()}
    assert got == {("gpu0", "nvswitch0"): (0, "nvlink", True), ("gpu1", "nvswitch0"): (1, "nvlink", True),
                   ("gpu0", "hb0"): (0, "pcie", True), ("gpu1", "hb0"): (1, "pcie", True)}
    dgx1 = load("dgx1-v100")  # four NVLink bundles per GPU: no single one is measured; PCIe is
    kinds = {v[1] for v in measured_links(dgx1).values()}
    assert kinds == {"pcie"}


def test_measured_links_coloured_by_percent_of_bandwidth(store):
    jid = sampled_job(store)
    c = local_client(create_app(store, H200))
    d = c.get(f"/api/jobs/{jid}/utilisation").json()
    assert d["frame_s"] == pytest.approx(FRAME) and d["frames"] == len(USE)
    assert d["t_s"] == pytest.approx([k * FRAME for k in range(len(USE))])
    assert d["measured"]["source"] == "the job's link sampler" and d["measured"]["kind"] == "gpm"
    g0 = link(d, "gpu0", "nvswitch0")
    assert g0["source"] == "measured" and g0["measured_as"] == "GPU0 nvlink TX/RX counters"
    assert g0["util_ab"] == pytest.approx(USE, abs=1e-3)       # GPU0 -> switch: its TX
    assert g0["util_ba"] == [0.0] * len(USE)
    assert g0["band"] == [0, 1, 2, 3, 4, 1]
    assert g0["peak_util"] == pytest.approx(90.0, abs=1e-3) and g0["peak_band"] == 4
    assert g0["avg_util"] == pytest.approx(sum(USE) / len(USE), abs=1e-3) and g0["avg_band"] == 2
    g1 = link(d, "gpu1", "nvswitch0")                           # GPU1's RX: switch -> GPU1
    assert g1["util_ba"] == pytest.approx(USE, abs=1e-3) and g1["band"] == [0, 1, 2, 3, 4, 1]
    pcie0 = link(d, "gpu0", "hb0")
    assert pcie0["source"] == "measured" and pcie0["util_ab"] == pytest.approx([1.0] * len(USE), abs=1e-6)
    # links no counter covers come from the model: the 1 GB of bucket 2 crosses no PCIe link here
    up = link(d, "hb0", "cpu0")
    assert up["source"] == "model" and up["band"] == [0] * len(USE)
    # GPU1 has no PCIe samples: its PCIe link is drawn from the model too
    assert link(d, "gpu1", "hb0")["source"] == "model"
    assert d["model"]["links"] == 2 and d["measured"]["links"] == 3
    # other thresholds, other bands
    d2 = c.get(f"/api/jobs/{jid}/utilisation?bands=5,20,40,80").json()
    assert link(d2, "gpu0", "nvswitch0")["band"] == [0, 1, 2, 3, 4, 2]
    assert c.get(f"/api/jobs/{jid}/utilisation?bands=50,25").status_code == 400


def test_model_only_job_is_drawn_from_its_timeline(store):
    jid = sampled_job(store)
    with store.engine.begin() as conn:
        conn.execute(S.link_samples.delete().where(S.link_samples.c.job == jid))
    d = local_client(create_app(store, H200)).get(f"/api/jobs/{jid}/utilisation").json()
    assert d["measured"] is None and "no link counters" in d["notes"][0]
    g0 = link(d, "gpu0", "nvswitch0")
    assert g0["source"] == "model"
    want = [0.0] * d["frames"]
    want[2] = 10**9 / (NV_BW * FRAME) * 100      # 1 GB in the 100 ms of bucket 2
    assert g0["util_ab"] == pytest.approx(want, abs=1e-3)
    assert link(d, "gpu1", "nvswitch0")["util_ba"] == pytest.approx(want, abs=1e-3)


def test_a_monitor_session_on_the_host_measures_a_job_without_sampler(store):
    t0 = time.time_ns() - 60 * 10**9
    mon = sampled_job(store, launcher="monitor", t0=t0, ranks=0)
    with store.engine.begin() as conn:  # a session that started 60 s ago on nodeA
        conn.execute(S.jobs.update().where(S.jobs.c.id == mon).values(
            meta={"monitor": {"host": "nodeA", "source": "fields", "interval_ms": 100, "t0_unix_ns": t0,
                              "gpus": []}}))
    start = datetime.fromtimestamp(t0 / 1e9, timezone.utc)
    job = store.create_job(["mpirun", "-np", "2", "./a"], world_size=2, hosts=["nodeA"])
    with store.engine.begin() as conn:  # the job ran in the session's first 0.6 s
        conn.execute(S.jobs.update().where(S.jobs.c.id == job).values(
            created=start, ended=start + timedelta(seconds=0.6), exit_status=0, elapsed_ns=600_000_000))
    d = local_client(create_app(store, H200)).get(f"/api/jobs/{job}/utilisation").json()
    assert d["measured"]["source"] == f"monitor session {mon} on nodeA"
    g0 = link(d, "gpu0", "nvswitch0")
    assert g0["source"] == "measured" and g0["util_ab"][:len(USE)] == pytest.approx(USE, abs=1e-3)
    other = store.create_job(["mpirun", "-np", "2", "./a"], world_size=2, hosts=["nodeB"])
    assert local_client(create_app(store, H200)).get(f"/api/jobs/{other}/utilisation").json()["measured"] is None


def test_a_monitor_session_after_an_incomplete_job_is_not_its_counters(store):
    """A job whose rankmap died has no end time; it ended, for what it measured, at its ranks' last
    stored flush: a monitor session started on its host after that is not its counters (it used to
    count as overlapping the job for ever)."""
    from rankmap.store import process_id

    t0 = time.time_ns() - 60 * 10**9
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = process_id(gone.pid)
    gone.wait()
    job = store.create_job(["mpirun", "-np", "2", "./a"], world_size=2, hosts=["nodeA"], profiler=dead)
    with store.engine.begin() as conn:
        conn.execute(S.jobs.update().where(S.jobs.c.id == job).values(
            created=datetime.fromtimestamp(t0 / 1e9, timezone.utc)))
    store.ingest(job, [WebRecord(world_rank=r, host="nodeA", start_ns=t0, elapsed_ns=600_000_000, finalized=False,
                                 traffic=[]) for r in range(2)])
    mon = sampled_job(store, launcher="monitor", t0=t0 + 10 * 10**9, ranks=0)   # 10 s after its last flush
    with store.engine.begin() as conn:
        conn.execute(S.jobs.update().where(S.jobs.c.id == mon).values(
            meta={"monitor": {"host": "nodeA", "source": "fields", "interval_ms": 100,
                              "t0_unix_ns": t0 + 10 * 10**9, "gpus": []}}))
    client = local_client(create_app(store, H200))
    assert client.get(f"/api/jobs/{job}").json()["job"]["state"] == "incomplete"
    assert client.get(f"/api/jobs/{job}/utilisation").json()["measured"] is None


# ----------------------------------------------------------------------------- /metrics
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\} (-?[0-9.e+]+)$')


def parse_metrics(text: str) -> tuple[dict[str, str], list[tuple[str, dict, float]]]:
    """A strict reader of the exposition format, as promtool checks it: every family has one HELP
    and then one TYPE line, its samples follow them together (no family resumed after another), a
    sample line parses, no series (name and label set) appears twice, counters end in ``_total``."""
    types: dict[str, str] = {}
    helped: set[str] = set()
    samples = []
    seen: set[tuple] = set()
    family = None
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in helped and name not in types, line
            assert len(line.split(" ", 3)) == 4 and line.split(" ", 3)[3].strip(), line
            helped.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types and name in helped, line
            assert kind in ("counter", "gauge") and (kind != "counter" or name.endswith("_total")), line
            types[name] = kind
            family = name
        else:
            m = LINE.match(line)
            assert m, line
            assert m.group(1) == family, line   # a family's samples come together, under its TYPE
            labels = dict(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(2)))
            key = (m.group(1), tuple(sorted(labels.items())))
            assert key not in seen, line
            seen.add(key)
            samples.append((m.group(1), labels, float(m.group(3))))
    return types, samples


def test_metrics_speak_dcgm_exporter(store):
    jid = sampled_job(store, t0=time.time_ns() - 600_000_000)        # still running, newest sample fresh
    stale = sampled_job(store, t0=time.time_ns() - 3600 * 10**9, host="nodeB")  # a sampler that died
    r = local_client(create_app(store, H200)).get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    types, samples = parse_metrics(r.text)
    for name in ("DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES",
                 "DCGM_FI_PROF_PCIE_RX_BYTES"):
        assert types[name] == "gauge"
    assert types["rankmap_pair_bytes_total"] == "counter" and types["rankmap_link_bytes_total"] == "counter"
    nv = {(s[1]["gpu"], s[0]): s for s in samples if s[0].startswith("DCGM_FI_PROF_NVLINK")}
    tx0 = nv[("0", "DCGM_FI_PROF_NVLINK_TX_BYTES")]
    assert tx0[1] == {"gpu": "0", "UUID": "GPU-0", "device": "nvidia0", "modelName": "NVIDIA H200",
                      "Hostname": "nodeA", "rankmap_job": str(jid)}
    assert tx0[2] == pytest.approx(USE[-1] / 100 * NV_BW, rel=1e-6)  # bytes/s over the last interval
    assert nv[("1", "DCGM_FI_PROF_NVLINK_RX_BYTES")][2] == pytest.approx(USE[-1] / 100 * NV_BW, rel=1e-6)
    assert all(s[1]["Hostname"] != "nodeB" for s in samples if s[0].startswith("DCGM"))
    total = [s for s in samples if s[0] == "rankmap_link_bytes_total" and s[1]["gpu"] == "0"
             and s[1]["link"] == "nvlink" and s[1]["direction"] == "tx"]
    assert len(total) == 1 and total[0][2] == cumulative(USE, NV_BW, FRAME)[-1] and total[0][1]["job"] == str(jid)
    pairs = {(s[1]["job"], s[1]["src"], s[1]["dst"], s[1]["class"]): s[2] for s in samples
             if s[0] == "rankmap_pair_bytes_total"}
    assert pairs[(str(jid), "0", "1", "nccl")] == 10**9
    assert {k[0] for k in pairs} == {str(jid), str(stale)}  # both running


def test_metrics_keep_recent_jobs_only(store):
    old = sampled_job(store)
    recent = sampled_job(store)
    store.finish_job(old, exit_status=0)
    store.finish_job(recent, exit_status=0)
    with store.engine.begin() as conn:
        conn.execute(S.jobs.update().where(S.jobs.c.id == old).values(
            ended=datetime.now(timezone.utc) - timedelta(hours=1)))
    text = local_client(create_app(store, H200)).get("/metrics").text
    assert f'job="{recent}"' in text and f'job="{old}"' not in text
    assert "DCGM_FI_PROF" not in text   # no sampler is running


def test_metrics_counters_never_go_down_between_scrapes(both_stores):
    """Two scrapes of a running job, its sampler and its ranks a flush further on the second: every
    counter series of the first is in the second and none went down (Prometheus reads a drop as a
    counter reset), the ones of the flush grew; both scrapes pass the strict reader."""
    store = both_stores
    t0 = time.time_ns() - 600_000_000
    jid = sampled_job(store, t0=t0)
    client = local_client(create_app(store, H200))
    types, first = parse_metrics(client.get("/metrics").text)
    counters = {(n, tuple(sorted(lab.items()))): v for n, lab, v in first if types[n] == "counter"}
    assert {n for n, _ in counters} == {"rankmap_link_bytes_total", "rankmap_pair_bytes_total"}
    # the next flush: 0.1 s more of GPU0 at 50 % of its NVLink, rank 0 sent 0.5 GB more (its new totals)
    tx = cumulative(USE, NV_BW, FRAME)
    k = len(USE) + 1
    store.add_link_samples(jid, [dict(t_ns=k * 100_000_000, device=0, link="nvlink", tx_bytes=tx[-1] + int(0.05 * NV_BW), rx_bytes=0),
                                 dict(t_ns=k * 100_000_000, device=1, link="nvlink", tx_bytes=0, rx_bytes=tx[-1] + int(0.05 * NV_BW)),
                                 dict(t_ns=k * 100_000_000, device=0, link="pcie", tx_bytes=k * 63_000_000, rx_bytes=0)])
    store.ingest(jid, [WebRecord(world_rank=0, start_ns=t0, host="nodeA", source="nccl",
                                 traffic=[(1, "nccl", "ncclSend", "device", "send", 15 * 10**8, 2)])])
    types2, second = parse_metrics(client.get("/metrics").text)
    later = {(n, tuple(sorted(lab.items()))): v for n, lab, v in second if types2[n] == "counter"}
    assert set(counters) <= set(later)
    assert all(later[key] >= v for key, v in counters.items()), [(k, v, later[k]) for k, v in counters.items() if later[k] < v]
    grew = {dict(key[1]).get("link", "pair") for key, v in counters.items() if later[key] > v}
    assert grew == {"nvlink", "pcie", "pair"}
    rate = {(lab["gpu"], n): v for n, lab, v in second if n == "DCGM_FI_PROF_NVLINK_TX_BYTES"}
    assert rate[("0", "DCGM_FI_PROF_NVLINK_TX_BYTES")] == pytest.approx(0.5 * NV_BW, rel=1e-6)  # over the last 0.2 s


def test_a_job_whose_rankmap_died_is_not_running(both_stores):
    """A job whose profiling rankmap was killed has no exit status, and is ``incomplete``: the API
    says it is not running (the page stopped polling it, and says which ranks never flushed), and
    /metrics leaves it out, though its sampler's last samples are fresh."""
    store = both_stores
    from rankmap.store import process_id

    jid = sampled_job(store)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    ident = process_id(gone.pid)
    gone.wait()
    with store.engine.begin() as c:
        c.execute(S.jobs.update().where(S.jobs.c.id == jid).values(profiler=ident))
    client = local_client(create_app(store, H200))
    d = client.get(f"/api/jobs/{jid}").json()
    assert d["job"]["state"] == "incomplete" and d["job"]["exit_status"] is None and d["running"] is False
    listed = next(j for j in client.get("/api/jobs").json()["jobs"] if j["id"] == jid)
    assert listed["running"] is False and listed["state"] == "incomplete"
    text = client.get("/metrics").text
    assert f'job="{jid}"' not in text and "DCGM_FI_PROF" not in text
    live = sampled_job(store)                              # a running one is still there
    assert f'job="{live}"' in client.get("/metrics").text and client.get(f"/api/jobs/{live}").json()["running"]


def test_metrics_escape_label_values(store):
    sampled_job(store, host='we"ird\\host\n')
    _, samples = parse_metrics(local_client(create_app(store, H200)).get("/metrics").text)
    assert any(s[1].get("Hostname") == 'we\\"ird\\\\host\\n' for s in samples)


# ----------------------------------------------------------------------------- cluster
def test_cluster_view_routes_off_node_bytes_through_the_nics(store):
    n = 4
    jid = store.create_job(["srun", "-n", "4", "./a"], world_size=n)
    # ranks 0,1 on nodeA, 2,3 on nodeB; 0 -> 2 crosses the network, 0 -> 1 stays on nodeA
    recs = [WebRecord(world_rank=0, host="nodeA", traffic=[(2, "p2p", "MPI_Send", "device", "send", 5 * 10**9, 1),
                                                          (1, "p2p", "MPI_Send", "device", "send", 10**9, 1)]),
            WebRecord(world_rank=1, host="nodeA", traffic=[]),
            WebRecord(world_rank=2, host="nodeB", traffic=[]),
            WebRecord(world_rank=3, host="nodeB", traffic=[])]
    store.ingest(jid, recs)
    store.finish_job(jid, exit_status=0, elapsed_ns=2 * 10**9)
    d = local_client(create_app(store, "dgx-a100")).get(f"/api/jobs/{jid}/cluster").json()
    assert d["multi_node"] is True and d["hosts"] == ["nodeA", "nodeB"] and d["source"] == "model"
    assert d["node_bytes"] == [[0, 5 * 10**9], [0, 0]] and d["off_node_bytes"] == 5 * 10**9
    a, b = d["nodes"]
    assert a["ranks"] == [0, 1] and a["gpus"]["0"] == [0] and a["gpus"]["1"] == [1]
    up = [x for x in a["nics"] if x["up_bytes"]]
    down = [x for x in b["nics"] if x["down_bytes"]]
    assert len(up) == 1 and up[0]["up_bytes"] == 5 * 10**9 and len(down) == 1 and down[0]["down_bytes"] == 5 * 10**9
    bw = up[0]["bandwidth"]
    assert up[0]["up_util"] == pytest.approx(5e9 / (bw * 1e9 * 2) * 100, abs=1e-3)
    assert a["local_bytes"] > 0 and b["local_bytes"] > 0
    one = store.create_job(["mpirun", "-np", "2", "./a"], world_size=2)
    store.ingest(one, [WebRecord(world_rank=r, host="nodeA", traffic=[]) for r in range(2)])
    assert local_client(create_app(store, "dgx-a100")).get(f"/api/jobs/{one}/cluster").json()["multi_node"] is False


def test_cluster_view_of_an_incomplete_job_ends_at_its_last_flush(both_stores, monkeypatch):
    """A job whose rankmap died has no elapsed time: its NIC use is its bytes over the time up to
    its ranks' last stored flush, the same an hour later (it used to be over "now minus start", so
    it shrank as the clock went on); a running job's still runs to now."""
    from rankmap.store import process_id

    store = both_stores
    t0 = time.time_ns() - 60 * 10**9
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = process_id(gone.pid)
    gone.wait()
    ids = {}
    for name, profiler in (("incomplete", dead), ("running", process_id(os.getpid()))):
        jid = store.create_job(["srun", "-n", "2", "./a"], world_size=2, profiler=profiler)
        # rank 0 on nodeA sends 5 GB to rank 1 on nodeB; their last flushes 4 s and 5 s after the start
        store.ingest(jid, [WebRecord(world_rank=0, host="nodeA", start_ns=t0, elapsed_ns=4 * 10**9, finalized=False,
                                     traffic=[(1, "p2p", "MPI_Send", "device", "send", 5 * 10**9, 1)]),
                           WebRecord(world_rank=1, host="nodeB", start_ns=t0 + 10**9, elapsed_ns=4 * 10**9,
                                     finalized=False, traffic=[])])
        ids[name] = jid
    client = local_client(create_app(store, "dgx-a100"))
    assert client.get(f"/api/jobs/{ids['incomplete']}").json()["job"]["state"] == "incomplete"

    def up_nic(jid: int) -> dict:
        d = client.get(f"/api/jobs/{jid}/cluster").json()
        return next(x for x in d["nodes"][0]["nics"] if x["up_bytes"]) | {"duration_s": d["duration_s"]}

    first = {name: up_nic(jid) for name, jid in ids.items()}
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + 3600 * 10**9)    # an hour later
    later = {name: up_nic(jid) for name, jid in ids.items()}
    assert later["incomplete"] == first["incomplete"]
    assert first["incomplete"]["duration_s"] == pytest.approx(5.0)
    bw = first["incomplete"]["bandwidth"]
    assert first["incomplete"]["up_util"] == pytest.approx(5e9 / (bw * 1e9 * 5) * 100, abs=1e-3)
    assert first["running"]["duration_s"] == pytest.approx(60, abs=30)
    assert later["running"]["duration_s"] == pytest.approx(3660, abs=30)
    assert later["running"]["up_util"] < first["running"]["up_util"]


# ----------------------------------------------------------------------------- safe to expose
def test_loopback_server_checks_host_and_sets_headers(store):
    sampled_job(store)
    c = local_client(create_app(store, H200))
    for path in ("/", "/api/jobs", "/static/app.js", "/metrics"):
        r = c.get(path)
        assert r.status_code == 200, path
        assert "default-src 'none'" in r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
        assert c.get("/api/jobs", headers={"host": host}).status_code == 200, host
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example", "8.8.8.8"):
        r = c.get("/api/jobs", headers={"host": host})
        assert r.status_code == 400 and "Host" in r.json()["detail"], host
    assert c.get("/api/docs").status_code == 404          # no Swagger UI from a CDN
    assert c.get("/api/openapi.json").json()["info"]["title"] == "rankmap dashboard"


def test_non_loopback_server_requires_its_token(store):
    sampled_job(store)
    with pytest.raises(RankmapError, match="needs a token"):
        access_for("0.0.0.0", None)
    app = create_app(store, H200, access_for("0.0.0.0", "s3cret-token"))
    c = TestClient(app, base_url=f"http://{socket.gethostname()}:8000")
    assert c.get("/").status_code == 200 and c.get("/static/app.js").status_code == 200  # no data in them
    for path in ("/api/jobs", "/api/info", "/metrics", "/api/openapi.json"):
        r = c.get(path)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), path
        assert c.get(path, headers={"authorization": "Bearer wrong"}).status_code == 401
        assert c.get(path, headers={"authorization": "Bearer s3cret-token"}).status_code == 200, path
    assert c.get("/api/jobs", headers={"authorization": "Bearer s3cret-token", "host": "evil.example"}).status_code == 400
    assert c.get("/api/jobs", headers={"authorization": "Bearer s3cret-token", "host": "127.0.0.1:8000"}).status_code == 200


def test_a_short_token_is_refused_in_one_line(tmp_path):
    from conftest import assert_one_line_error, rankmap
    from rankmap.web.security import MIN_TOKEN, check_token

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    p = rankmap("serve", "--db", url, "--host", "0.0.0.0", "--port", str(_free_port()), "--token", "abc")
    assert_one_line_error(p, "--token", "3 characters", f"at least {MIN_TOKEN}")
    p = rankmap("serve", "--db", url, "--port", str(_free_port()), env={"RANKMAP_TOKEN": "x" * (MIN_TOKEN - 1)})
    assert_one_line_error(p, "$RANKMAP_TOKEN", f"{MIN_TOKEN - 1} characters")
    assert check_token("x" * MIN_TOKEN, "--token") == "x" * MIN_TOKEN


def test_wrong_tokens_slow_their_sender_down(store):
    """After FREE_FAILURES wrong tokens an address waits 1 s, then 2 s, 4 s ... before its next try
    is looked at (429 with Retry-After meanwhile, the right token too); the right token after the
    wait clears the count; another address is not slowed down; a request without a token is no guess."""
    from rankmap.web.security import FREE_FAILURES, Backoff

    clock = [1000.0]
    access = access_for("0.0.0.0", "the-right-token-of-24ch")
    access.backoff = Backoff(clock=lambda: clock[0])
    app = create_app(store, H200, access)
    base = f"http://{socket.gethostname()}:8000"
    guesser, other = TestClient(app, base_url=base, client=("10.0.0.7", 5000)), \
        TestClient(app, base_url=base, client=("10.0.0.8", 5000))
    wrong, right = {"authorization": "Bearer guess"}, {"authorization": "Bearer the-right-token-of-24ch"}
    for _ in range(3):
        assert guesser.get("/api/jobs").status_code == 401   # no token: the page's first request
    for _ in range(FREE_FAILURES):
        assert guesser.get("/api/jobs", headers=wrong).status_code == 401
    for headers in (wrong, right):                            # the next try comes too early
        r = guesser.get("/api/jobs", headers=headers)
        assert r.status_code == 429 and r.headers["retry-after"] == "1" and "try again in 1 s" in r.json()["detail"]
    assert other.get("/api/jobs", headers=right).status_code == 200
    clock[0] += 1.0
    assert guesser.get("/metrics", headers=wrong).status_code == 401      # looked at, and wrong again
    r = guesser.get("/metrics", headers=wrong)
    assert r.status_code == 429 and r.headers["retry-after"] == "2"      # twice as long
    clock[0] += 2.0
    assert guesser.get("/api/jobs", headers=right).status_code == 200     # the right one clears the count
    for _ in range(FREE_FAILURES):
        assert guesser.get("/api/jobs", headers=wrong).status_code == 401
    clock[0] += 601
    assert guesser.get("/api/jobs", headers=wrong).status_code == 401     # forgotten after ten quiet minutes


def test_guesses_per_second_are_a_handful(store):
    """Guesses sent as fast as a client can (a thousand a second were answered): the tokens actually
    checked are the free ones and one after each doubling wait that has passed meanwhile, however
    long the machine takes to answer them; the rest get 429."""
    from rankmap.web.security import FREE_FAILURES

    app = create_app(store, H200, access_for("0.0.0.0", "the-right-token-of-24ch"))
    c = TestClient(app, base_url=f"http://{socket.gethostname()}:8000", client=("10.0.0.9", 5000))
    seen: dict[int, int] = {}
    start = time.monotonic()
    for k in range(300):
        code = c.get("/api/jobs", headers={"authorization": f"Bearer guess-{k}"}).status_code
        seen[code] = seen.get(code, 0) + 1
    waited = time.monotonic() - start          # waits of 1, 2, 4 ... s: log2(waited + 1) of them passed
    assert set(seen) <= {401, 429}, seen
    assert FREE_FAILURES <= seen[401] <= FREE_FAILURES + 1 + math.log2(waited + 1), (seen, waited)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_off_loopback_prints_a_new_token(tmp_path):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    open_store(url)
    port = _free_port()
    p = subprocess.Popen([sys.executable, "-m", "rankmap", "serve", "--db", url, "--host", "0.0.0.0", "--port",
                          str(port), "--topology", H200], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=dict(os.environ))
    try:
        first, second = p.stdout.readline(), p.stdout.readline()
        assert f":{port}/" in first, first + p.stderr.read()
        m = re.search(r"#token=(\S+)", second)
        assert m and "Authorization: Bearer " + m.group(1) in second, second
        token = m.group(1)
        base = f"http://127.0.0.1:{port}"

        def get(path, **headers):
            req = urllib.request.Request(base + path, headers=headers)
            for _ in range(100):
                try:
                    with urllib.request.urlopen(req, timeout=5) as r:
                        return r.status
                except urllib.error.HTTPError as e:
                    return e.code
                except OSError:
                    time.sleep(0.1)
            raise AssertionError("server did not answer")

        assert get("/api/jobs") == 401
        assert get("/api/jobs", Authorization=f"Bearer {token}") == 200
        assert get("/api/jobs", Authorization=f"Bearer {token}", Host="evil.example") == 400
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=20)


def test_mapping_hint_names_commands_that_exist(store):
    jid = sampled_job(store)
    msg = local_client(create_app(store, H200)).get(f"/api/jobs/{jid}/mapping").json()["message"]
    import re
    import shlex

    from rankmap.cli import build_parser
    hinted = re.findall(r"`rankmap ([^`]*)`", msg)
    assert len(hinted) == 2 and hinted[0].startswith(f"map --job {jid} ") and "--save" in hinted[0]
    assert hinted[1].startswith("tune") and hinted[1].endswith("-- <its command>")
    build_parser().parse_args(shlex.split(hinted[0]))  # the hinted commands parse
    build_parser().parse_args(shlex.split(hinted[1].replace("<its command>", "torchrun x.py")))


# ----------------------------------------------------------------------------- MPI_T pvars
def test_pvars_of_a_job_without_any_say_so(store):
    jid = sampled_job(store)
    c = local_client(create_app(store, H200))
    d = c.get(f"/api/jobs/{jid}/pvars").json()
    assert d["variables"] == [] and "MPI_T performance variables" in d["message"]
    r = c.get(f"/api/jobs/{jid}/pvars?name=unexpected_recvs")
    assert r.status_code == 404 and "unexpected_recvs" in r.json()["detail"]


def test_pvar_series_from_ingested_records(store):
    from types import SimpleNamespace

    jid = store.create_job(["mpirun", "-np", "2", "./a"], world_size=2)
    var = SimpleNamespace(id=3, name="unexpected_recvq_length", cls="level", vtype="u64", bound=True, count=2)
    recs = []
    for r in range(2):
        rec = WebRecord(world_rank=r, traffic=[])
        rec.pvar_defs = {3: var}
        rec.pvar_samples = [(3, 1_000_000_000, (r, 1)), (3, 2_000_000_000, (r + 4, 1))]
        recs.append(rec)
    store.ingest(jid, recs)
    c = local_client(create_app(store, H200))
    d = c.get(f"/api/jobs/{jid}/pvars").json()
    assert d["available"] and [v["name"] for v in d["variables"]] == ["unexpected_recvq_length"]
    s = c.get(f"/api/jobs/{jid}/pvars?name=unexpected_recvq_length").json()
    assert [x["rank"] for x in s["series"]] == [0, 1]
    assert s["series"][1]["t_s"] == [1.0, 2.0] and s["series"][1]["value"] == [2.0, 6.0]  # elements summed


def test_metrics_per_link_nvlink_and_slurm_labels(store, monkeypatch):
    """Per-link samples (``nvlink<k>``) become dcgm-exporter's per-link gauges, and every series of a
    job launched in a Slurm step carries its ids (as ``rankmap profile`` stores them)."""
    from rankmap.pipeline.profile import slurm_ids

    jid = sampled_job(store, t0=time.time_ns() - 600_000_000)
    assert slurm_ids({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3", "X": "1"}) == \
        {"slurm": {"job_id": "4242", "step_id": "3"}}
    assert slurm_ids({}) == {}
    store.update_job_meta(jid, slurm_ids({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3"}))
    k = len(USE)
    store.add_link_samples(jid, [dict(t_ns=t * 100_000_000, device=0, link=f"nvlink{l}", tx_bytes=t * (l + 1) * 10**8,
                                      rx_bytes=t * 10**8) for t in range(k) for l in (0, 17)])
    _, samples = parse_metrics(local_client(create_app(store, H200)).get("/metrics").text)
    per = {(s[0], s[1]["gpu"]): s for s in samples if "_NVLINK_L" in s[0]}
    assert sorted(per) == [(f"DCGM_FI_PROF_NVLINK_L{l}_{d}_BYTES", "0") for l in (0, 17) for d in ("RX", "TX")]
    assert per[("DCGM_FI_PROF_NVLINK_L17_TX_BYTES", "0")][2] == pytest.approx(18 * 10**9)   # 18e8 B per 0.1 s
    assert per[("DCGM_FI_PROF_NVLINK_L0_RX_BYTES", "0")][2] == pytest.approx(10**9)
    want = {"rankmap_job": str(jid), "slurm_job_id": "4242", "slurm_step_id": "3"}
    for name, labels, _v in samples:
        assert want.items() <= labels.items(), (name, labels)   # every series of the job


def test_metrics_expose_the_heaviest_pairs_of_a_large_job(store, monkeypatch):
    from rankmap.web import metrics as M

    monkeypatch.setattr(M, "MAX_PAIR_SERIES", 5)
    jid = sampled_job(store, ranks=4)
    store.ingest(jid, [WebRecord(world_rank=r, source="mpi", traffic=[
        (d, "p2p", "MPI_Send", "host", "send", 1000 * (r + 1) + d, 1) for d in range(4) if d != r]) for r in range(4)])
    _, samples = parse_metrics(local_client(create_app(store, H200)).get("/metrics").text)
    pairs = {(s[1]["src"], s[1]["dst"], s[1]["class"]): s[2] for s in samples if s[0] == "rankmap_pair_bytes_total"}
    # 12 p2p series and 4 nccl ones (sampled_job's, three of them 0 B): the five heaviest are exposed,
    # the other 11 counted
    assert pairs == {("0", "1", "nccl"): 10**9, ("3", "2", "p2p"): 4002, ("3", "1", "p2p"): 4001,
                     ("3", "0", "p2p"): 4000, ("2", "3", "p2p"): 3003}
    assert [s[2] for s in samples if s[0] == "rankmap_pair_series_omitted"] == [11]


def ended_job(store, ranks: int, tag: str) -> int:
    """A job that ended a minute ago: every rank sent every other rank 1000 x (src + 1) + dst bytes."""
    jid = store.create_job(["mpirun", "-np", str(ranks), f"./{tag}"], world_size=ranks)
    store.ingest(jid, [WebRecord(world_rank=r, traffic=[(d, "p2p", "MPI_Send", "device", "send", 1000 * (r + 1) + d, 1)
                                                       for d in range(ranks) if d != r]) for r in range(ranks)])
    store.finish_job(jid, exit_status=0, elapsed_ns=10**9, ended=datetime.now(timezone.utc) - timedelta(seconds=60))
    return jid


def test_metrics_stay_bounded_with_many_jobs(store, monkeypatch):
    """Many recent jobs share the scrape's pair series: each gets its share of
    MAX_PAIR_SERIES_TOTAL (the heaviest of its pairs), the rest counted per job."""
    from rankmap.web import metrics as M

    monkeypatch.setattr(M, "MAX_PAIR_SERIES_TOTAL", 100)
    jobs = [ended_job(store, 6, f"j{k}") for k in range(10)]   # 30 pair series each, 300 in all
    _, samples = parse_metrics(local_client(create_app(store, H200)).get("/metrics").text)
    pairs = [s for s in samples if s[0] == "rankmap_pair_bytes_total"]
    assert len(pairs) == 100
    for jid in jobs:
        mine = {(int(s[1]["src"]), int(s[1]["dst"])) for s in pairs if s[1]["job"] == str(jid)}
        assert mine == {(5, d) for d in range(5)} | {(4, d) for d in (5, 3, 2, 1, 0)}, mine  # the ten heaviest
    assert sorted((s[1]["job"], s[2]) for s in samples if s[0] == "rankmap_pair_series_omitted") == \
        sorted((str(j), 20.0) for j in jobs)


def test_metrics_read_the_store_once_per_scrape_and_ended_jobs_once(store, monkeypatch):
    """A scrape's statements do not grow with the jobs (one query each for the running jobs, their
    newest samples and the heaviest pairs of all jobs); the pairs of ended jobs are read by the
    first scrape only, and read again once the job changes. What is kept is what a fresh read gives."""
    from rankmap.web import metrics as M

    def statements(client, n: int = 1) -> int:
        count = [0]

        def seen(*_a):
            count[0] += 1
        sa.event.listen(store.engine, "before_cursor_execute", seen)
        try:
            for _ in range(n):
                assert client.get("/metrics").status_code == 200
        finally:
            sa.event.remove(store.engine, "before_cursor_execute", seen)
        return count[0]

    read: list[list[int]] = []
    real = M._heaviest_pairs
    monkeypatch.setattr(M, "_heaviest_pairs", lambda st, ids, limit: (read.append(sorted(ids)), real(st, ids, limit))[1])
    counts = {}
    for jobs in (2, 8):
        fresh = open_store(str(store.engine.url).replace("live.db", f"live{jobs}.db"))
        for k in range(jobs):
            sampled_job(fresh, host=f"node{k}")
            ended_job(fresh, 4, f"e{k}")
        client = local_client(create_app(fresh, H200))
        read.clear()
        counts[jobs] = statements(client)
        assert len(read) == 1 and len(read[0]) == 2 * jobs          # every job, in one query
        counts[jobs, "again"] = statements(client)
        assert len(read) == 2 and len(read[1]) == jobs              # the running ones only
        assert client.get("/metrics").text == M.render(fresh)        # kept = read afresh
        last = fresh
    assert counts[2] == counts[8] and counts[2, "again"] == counts[8, "again"], counts
    # an ended job written to again (rankmap ingest completing it) is read again
    done = max(j for j in range(1, 17) if last.job(j)["state"] == "finished")
    last.finish_job(done, exit_status=0, elapsed_ns=2 * 10**9, ended=datetime.now(timezone.utc) - timedelta(seconds=30))
    read.clear()
    client.get("/metrics")
    assert done in read[0]


def test_link_ledger_measured_explained_and_top_pairs(store):
    """GPU0's NVSwitch bundle: the counters measured cumulative(USE) bytes out of GPU0, the recorded
    pair (rank 0 -> 1, 1 GB on GPU0 -> GPU1 by default placement) explains 1 GB of it."""
    jid = sampled_job(store)
    d = local_client(create_app(store, H200)).get(f"/api/jobs/{jid}/ledger").json()
    topo = load(H200)
    by = {(l["a"], l["b"]): l for l in d["links"]}
    out0 = next(l for (a, b), l in by.items() if "gpu0" in (a, b) and topo.links[l["link"]].kind.value == "nvlink")
    up = "ab" if out0["a"] == "gpu0" else "ba"
    down = "ba" if up == "ab" else "ab"
    sent = cumulative(USE, NV_BW, FRAME)[-1]
    assert out0[f"measured_{up}"] == sent and out0[f"explained_{up}"] == 10**9
    assert out0[f"unexplained_{up}"] == sent - 10**9
    assert out0[f"measured_{down}"] == 0 and out0[f"explained_{down}"] == 0
    assert out0["top_pairs"] == [{"src": 0, "dst": 1, "bytes": 10**9, "direction": up}]
    assert out0["measured_as"].startswith("GPU0 nvlink")


def test_show_links_prints_the_ledger(store, tmp_path):
    from conftest import rankmap
    jid = sampled_job(store)
    url = str(store.engine.url)
    p = rankmap("show", str(jid), "--links", "--topology", H200, "--format", "json", "--db", url)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert any(l["top_pairs"] == [{"src": 0, "dst": 1, "bytes": 10**9, "direction": l["top_pairs"][0]["direction"]}]
               for l in d["links"] if l["top_pairs"])
    text = rankmap("show", str(jid), "--links", "--topology", H200, "--db", url)
    assert text.returncode == 0 and "link ledger" in text.stdout and "0->1 1 GB" in text.stdout, text.stdout
