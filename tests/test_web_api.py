"""The dashboard's JSON API against a SQLite store filled through the Store API, exact values."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the dashboard needs the web extra (fastapi)")
from fastapi.testclient import TestClient  # noqa: E402

from conftest import assert_one_line_error, cli, rankmap  # noqa: E402
from pg import BACKENDS, pg_cluster  # noqa: E402,F401  (session fixture)

from rankmap.errors import RankmapError  # noqa: E402
from rankmap.mapping import basis as B  # noqa: E402
from rankmap.mapping.traffic import job_traffic  # noqa: E402
from rankmap.pipeline.map import place, store_mapping  # noqa: E402
from rankmap.store import RankTotals, open_store  # noqa: E402
from rankmap.store import schema as S  # noqa: E402
from rankmap.topology import load  # noqa: E402
from rankmap.web.app import create_app  # noqa: E402
from rankmap.web.topoview import layout, parse_placement  # noqa: E402

N = 8
RING_BYTES = 1_000_000
RING_MSGS = 10
ALLRED_BYTES = 500_000
ALLRED_MSGS = 5
TOPOLOGY = "dgx1-v100"
MAPPED = [0, 1, 5, 7, 3, 2, 6, 4]  # the best placement of this traffic on a DGX-1 (exhaustive search)


@dataclass
class WebRecord(RankTotals):
    """A rank's totals as a record file of node0 would hold them (what Store.ingest reads)."""

    host: str | None = "node0"
    pid: int | None = 0
    start_ns: int | None = 0


def record(r: int, n: int = N) -> WebRecord:
    """Rank r: a device-memory ring to r+1 (MPI_Isend), a host-memory collective share to r+n/2."""
    nxt, far = (r + 1) % n, (r + n // 2) % n
    return WebRecord(
        world_rank=r, pid=1000 + r, elapsed_ns=2_000_000_000 + r * 100_000_000,
        traffic=[
            # (peer, class, operation, mem, direction, bytes, messages, where the pairs come from)
            (nxt, "p2p", "MPI_Isend", "device", "send", RING_BYTES, RING_MSGS, "call"),
            ((r - 1) % n, "p2p", "MPI_Irecv", "device", "recv", RING_BYTES, RING_MSGS, "call"),  # not counted twice
            (far, "collective", "MPI_Allreduce", "host", "send", ALLRED_BYTES, ALLRED_MSGS, "model" if r == 0 else "mirror"),
        ],
        op_time={"MPI_Isend": (RING_MSGS, 2_000_000), "MPI_Allreduce": (1, 3_000_000),
                 "MPI_Wait": (20, 500_000_000)},
        histogram={"MPI_Isend": [0] * 19 + [RING_MSGS]},
        payload={"MPI_Allreduce": 4 * ALLRED_BYTES},
        # (bucket, peer, class, bytes): the ring in buckets 0 and 2, the collective in bucket 1
        timeline=[(0, nxt, "p2p", RING_BYTES // 2), (2, nxt, "p2p", RING_BYTES // 2),
                  (1, far, "collective", ALLRED_BYTES)],
    )


def fill_store(url: str) -> dict[str, int]:
    """A finished 8-rank job with link samples and a mapping, and a running 4-rank job."""
    store = open_store(url)
    done = store.create_job(["mpirun", "-np", str(N), "./ring"], launcher="openmpi", world_size=N,
                            meta={"bucket_ms": 50})
    store.ingest(done, [record(r) for r in range(N)])
    store.add_link_samples(done, [
        {"t_ns": 5_000_000_000 + k * 500_000_000, "device": 0, "link": "nvlink",
         "tx_bytes": k * 1_000_000_000, "rx_bytes": k * 500_000_000} for k in range(3)])
    store.finish_job(done, exit_status=0, elapsed_ns=2_800_000_000)
    store.save_mapping({"ranks": [{"rank": r, "gpu": g, "node": "node0"} for r, g in enumerate(MAPPED)]},
                       job_id=done, topology=TOPOLOGY, max_before=2.0e-4, avg_before=1.0e-4,
                       max_after=1.0e-4, avg_after=0.5e-4, optimal=True)
    running = store.create_job(["torchrun", "--nproc-per-node", "4", "train.py"], launcher="torchrun",
                               world_size=4)
    store.ingest(running, [record(r, 4) for r in range(2)])  # two of four ranks flushed so far
    return {"done": done, "running": running}


def basis_jobs(url: str) -> dict[str, tuple[int, dict]]:
    """Two finished jobs of record()'s traffic (its collective share is host-staged), each with one
    mapping placed and stored by ``rankmap map --save``'s own steps: ``what-if`` on the GPU-resident
    basis, ``recorded`` as recorded. Name -> (job id, mapping document)."""
    store = open_store(url)
    out = {}
    for name, what_if in (("what-if", True), ("recorded", False)):
        jid = store.create_job(["mpirun", "-np", str(N), f"./ring-{name}"], world_size=N)
        store.ingest(jid, [record(r) for r in range(N)])
        store.finish_job(jid, exit_status=0, elapsed_ns=2_800_000_000)
        doc = place(job_traffic(store, jid), topology=TOPOLOGY, as_gpu_resident=what_if, source={"job": jid})
        store_mapping(store, doc, jid)
        out[name] = (jid, doc)
    return out


def two_mapping_job(url: str) -> tuple[int, dict[str, tuple[int, dict]]]:
    """One finished job of record()'s traffic with two mappings, stored as ``rankmap demo`` does: the
    GPU-resident what-if first, then the as-recorded one (the newest). Job id, name -> (mapping id, doc)."""
    store = open_store(url)
    jid = store.create_job(["mpirun", "-np", str(N), "./ring-two-maps"], world_size=N)
    store.ingest(jid, [record(r) for r in range(N)])
    store.finish_job(jid, exit_status=0, elapsed_ns=2_800_000_000)
    out = {}
    for name, what_if in (("what-if", True), ("recorded", False)):
        doc = place(job_traffic(store, jid), topology=TOPOLOGY, as_gpu_resident=what_if, source={"job": jid})
        out[name] = (store_mapping(store, doc, jid), doc)
    return jid, out


def unknown_basis_job(url: str, basis: str = "nccl-only") -> tuple[int, int, dict]:
    """One finished job of record()'s traffic with one mapping whose ``traffic_basis`` this version
    does not know (as a later rankmap might store): placed as recorded, then relabelled. Job id,
    mapping id, document."""
    store = open_store(url)
    jid = store.create_job(["mpirun", "-np", str(N), "./ring-unknown-basis"], world_size=N)
    store.ingest(jid, [record(r) for r in range(N)])
    store.finish_job(jid, exit_status=0, elapsed_ns=2_800_000_000)
    doc = {**place(job_traffic(store, jid), topology=TOPOLOGY, source={"job": jid}),
           "traffic_basis": basis, "assumption": f"only the bytes of {basis}"}
    return jid, store_mapping(store, doc, jid), doc


def many_mapping_job(url: str, count: int) -> tuple[int, list[int], dict]:
    """One finished job of record()'s traffic with ``count`` stored mappings (one placement stored
    again and again, as a command tuned many times keeps them). Job id, mapping ids oldest first, doc."""
    store = open_store(url)
    jid = store.create_job(["mpirun", "-np", str(N), "./ring-many-maps"], world_size=N)
    store.ingest(jid, [record(r) for r in range(N)])
    store.finish_job(jid, exit_status=0, elapsed_ns=2_800_000_000)
    doc = place(job_traffic(store, jid), topology=TOPOLOGY, source={"job": jid})
    return jid, [store_mapping(store, doc, jid) for _ in range(count)], doc


def local_client(app) -> TestClient:
    """A test client that talks to the app as a browser on this machine would (Host: 127.0.0.1)."""
    return TestClient(app, base_url="http://127.0.0.1:8000")


@pytest.fixture
def web(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'rankmap.db'}"
    ids = fill_store(url)
    client = local_client(create_app(open_store(url), TOPOLOGY))
    return client, ids


def expected_matrix(n: int = N) -> np.ndarray:
    m = np.zeros((n, n), dtype=np.int64)
    for r in range(n):
        m[r, (r + 1) % n] += RING_BYTES
        m[r, (r + n // 2) % n] += ALLRED_BYTES
    return m


def test_jobs_lists_newest_first_with_totals(web):
    client, ids = web
    r = client.get("/api/jobs")
    assert r.status_code == 200
    jobs = r.json()["jobs"]
    assert [j["id"] for j in jobs] == [ids["running"], ids["done"]]
    done = jobs[1]
    assert done["bytes"] == N * (RING_BYTES + ALLRED_BYTES)
    assert done["messages"] == N * (RING_MSGS + ALLRED_MSGS)
    assert done["ranks_reporting"] == N and done["exit_status"] == 0 and done["running"] is False
    assert jobs[0]["running"] is True and jobs[0]["exit_status"] is None and jobs[0]["ranks_reporting"] == 2


def test_job_summary(web):
    client, ids = web
    d = client.get(f"/api/jobs/{ids['done']}").json()
    assert d["job"]["command"] == "mpirun -np 8 ./ring"
    assert d["running"] is False
    assert [r["world_rank"] for r in d["ranks"]] == list(range(N))
    s = d["summary"]
    assert s["world_size"] == N and s["ranks_reporting"] == N
    assert s["total_bytes"] == N * (RING_BYTES + ALLRED_BYTES)
    assert s["bytes_by_class"] == {"collective": {"bytes": N * ALLRED_BYTES, "messages": N * ALLRED_MSGS},
                                   "p2p": {"bytes": N * RING_BYTES, "messages": N * RING_MSGS}}
    assert s["bytes_by_mem"] == {"device": N * RING_BYTES, "host": N * ALLRED_BYTES}
    comm = 2_000_000 + 3_000_000 + 500_000_000
    assert s["comm_ns"] == N * comm
    # POP: useful_r = elapsed_r - comm; runtime = max elapsed
    elapsed = [2_000_000_000 + r * 100_000_000 for r in range(N)]
    useful = [e - comm for e in elapsed]
    assert s["pop"]["runtime_ns"] == max(elapsed)
    assert s["pop"]["load_balance"] == pytest.approx(sum(useful) / N / max(useful))
    assert s["pop"]["parallel_efficiency"] == pytest.approx(sum(useful) / N / max(elapsed))
    assert client.get("/api/jobs/latest").json()["job"]["id"] == ids["running"]
    assert client.get(f"/api/jobs/{ids['running']}").json()["running"] is True


def test_matrix_exact_and_by_class(web):
    client, ids = web
    d = client.get(f"/api/jobs/{ids['done']}/matrix").json()
    assert d["world_size"] == N
    assert np.array_equal(np.array(d["matrix"]), expected_matrix())
    assert d["total"] == N * (RING_BYTES + ALLRED_BYTES)
    assert d["available_classes"] == ["collective", "p2p"]
    p2p = np.array(client.get(f"/api/jobs/{ids['done']}/matrix?class=p2p").json()["matrix"])
    want = np.zeros((N, N), dtype=np.int64)
    for r in range(N):
        want[r, (r + 1) % N] = RING_BYTES
    assert np.array_equal(p2p, want)
    msgs = np.array(client.get(f"/api/jobs/{ids['done']}/matrix?class=collective&what=messages").json()["matrix"])
    assert msgs.sum() == N * ALLRED_MSGS and msgs[0, N // 2] == ALLRED_MSGS
    both = client.get(f"/api/jobs/{ids['done']}/matrix?class=p2p,collective").json()
    assert np.array_equal(np.array(both["matrix"]), expected_matrix())
    assert client.get(f"/api/jobs/{ids['done']}/matrix?what=seconds").status_code == 422
    # a class the job has none of is an empty matrix; a name that is no class at all is refused by
    # name (a typo such as P2P used to answer an all-zero matrix, read as "no traffic")
    rma = client.get(f"/api/jobs/{ids['done']}/matrix?class=rma").json()
    assert rma["total"] == 0 and rma["classes"] == ["rma"]
    for path in (f"/api/jobs/{ids['done']}/matrix?class=P2P", f"/api/jobs/{ids['done']}/matrix?class=p2p,colective",
                 f"/api/topology?job={ids['done']}&class=P2P"):
        r = client.get(path)
        assert r.status_code == 400, (path, r.text)
        assert r.json()["detail"].endswith("is not a traffic class; choose p2p, collective, rma, nccl or all")


def test_ops_exact(web):
    client, ids = web
    ops = {o["operation"]: o for o in client.get(f"/api/jobs/{ids['done']}/ops").json()["operations"]}
    assert set(ops) == {"MPI_Isend", "MPI_Allreduce", "MPI_Wait"}
    assert ops["MPI_Isend"] == {"operation": "MPI_Isend", "class": "p2p", "bytes": N * RING_BYTES,
                                "messages": N * RING_MSGS, "calls": N * RING_MSGS, "time_ns": N * 2_000_000,
                                "payload": 0, "ranks": N, "pair_sources": {"call": N * RING_BYTES}}
    assert ops["MPI_Allreduce"]["bytes"] == N * ALLRED_BYTES
    # rank 0's pairs of the collective came from a model, the others' from the mirror
    assert ops["MPI_Allreduce"]["pair_sources"] == {"mirror": (N - 1) * ALLRED_BYTES, "model": ALLRED_BYTES}
    assert ops["MPI_Wait"]["pair_sources"] == {}
    assert ops["MPI_Allreduce"]["class"] == "collective"
    assert ops["MPI_Allreduce"]["payload"] == N * 4 * ALLRED_BYTES
    assert ops["MPI_Wait"]["bytes"] == 0 and ops["MPI_Wait"]["calls"] == N * 20
    assert ops["MPI_Wait"]["time_ns"] == N * 500_000_000 and ops["MPI_Wait"]["class"] is None
    # biggest movers first
    order = [o["operation"] for o in client.get(f"/api/jobs/{ids['done']}/ops").json()["operations"]]
    assert order == ["MPI_Isend", "MPI_Allreduce", "MPI_Wait"]


def test_timeline_per_class(web):
    client, ids = web
    d = client.get(f"/api/jobs/{ids['done']}/timeline").json()
    assert d["bucket_ms"] == 50 and d["bucket_ms_assumed"] is False
    assert d["t_s"] == [0.0, 0.05, 0.1]
    assert d["series"] == {"collective": [0, N * ALLRED_BYTES, 0],
                           "p2p": [N * RING_BYTES // 2, 0, N * RING_BYTES // 2]}
    # a job whose meta lacks the bucket width says the width is assumed
    r = client.get(f"/api/jobs/{ids['running']}/timeline").json()
    assert r["bucket_ms_assumed"] is True and r["bucket_ms"] == 100


def test_links_rates(web):
    client, ids = web
    series = client.get(f"/api/jobs/{ids['done']}/links").json()["series"]
    assert len(series) == 1
    s = series[0]
    assert (s["device"], s["link"]) == (0, "nvlink")
    assert s["t_s"] == [0.0, 0.5, 1.0]
    assert s["tx_gbps"] == [None, 2.0, 2.0] and s["rx_gbps"] == [None, 1.0, 1.0]
    assert client.get(f"/api/jobs/{ids['running']}/links").json()["series"] == []


def host_route(topo, a: str, b: str) -> list:
    """Hops of a host-staged byte from GPU a to GPU b: up to a's CPU, across to b's, down to b."""
    ca, cb = topo.local_cpu(a).id, topo.local_cpu(b).id
    across = topo.route(ca, cb).hops if ca != cb else []
    return list(topo.route(a, ca).hops) + list(across) + list(topo.route(cb, b).hops)


def routed_loads(placement: list[int]) -> np.ndarray:
    """Directed link loads computed here from the topology's routes, independently of the app: the
    ring (device memory) GPU to GPU, the collective share (host memory) via the host."""
    topo = load(TOPOLOGY)
    loads = np.zeros((len(topo.links), 2), dtype=np.int64)
    for s in range(N):
        for d, nbytes, via_host in (((s + 1) % N, RING_BYTES, False), ((s + N // 2) % N, ALLRED_BYTES, True)):
            a, b = f"gpu{placement[s]}", f"gpu{placement[d]}"
            hops = host_route(topo, a, b) if via_host else (topo.route(a, b).hops if a != b else [])
            for h in hops:
                loads[h.link, 0 if topo.links[h.link].a == h.src else 1] += nbytes
    return loads


def test_topology_with_job_load(web):
    client, ids = web
    d = client.get(f"/api/topology?job={ids['done']}").json()
    topo = load(TOPOLOGY)
    assert d["spec"] == TOPOLOGY and d["topology"]["name"] == TOPOLOGY
    assert len(d["topology"]["links"]) == len(topo.links)
    assert set(d["layout"]["positions"]) == set(topo.devices)
    assert d["pairs"]["labels"][0][3] == "NV2" and d["pairs"]["labels"][0][5] == "SYS"
    assert len(d["pairs"]["routes"]) == 8 * 7
    ld = d["load"]
    assert ld["placement"] == {"gpu": list(range(N)), "node": None, "source": "default"}
    got = np.array([[l["load_ab"], l["load_ba"]] for l in ld["links"]])
    want = routed_loads(list(range(N)))
    assert np.array_equal(got, want)
    bw = np.array([l.bandwidth for l in topo.links]) * 1e9
    cong = want / bw[:, None]
    assert ld["max_congestion"] == pytest.approx(cong.max())
    assert ld["avg_congestion"] == pytest.approx(cong[want > 0].mean())
    assert ld["routed_bytes"] == expected_matrix().sum() and ld["same_gpu_bytes"] == 0
    assert ld["ranks_on_gpu"] == {str(g): [g] for g in range(N)}
    # the mapped placement moves the loads
    mapped = client.get(f"/api/topology?job={ids['done']}&placement=mapped").json()["load"]
    assert mapped["placement"]["gpu"] == MAPPED
    assert np.array_equal(np.array([[l["load_ab"], l["load_ba"]] for l in mapped["links"]]), routed_loads(MAPPED))
    # without a job: no load
    assert "load" not in client.get("/api/topology").json()


def test_topology_more_ranks_than_gpus_share_gpus(tmp_path):
    url = f"sqlite:///{tmp_path / 'rankmap.db'}"
    store = open_store(url)
    jid = store.create_job(["mpirun", "-np", "16", "./ring"], world_size=16)
    store.ingest(jid, [record(r, 16) for r in range(16)])
    client = local_client(create_app(store, "summit"))
    ld = client.get(f"/api/topology?job={jid}").json()["load"]
    assert ld["placement"]["gpu"] == [r % 6 for r in range(16)]
    assert ld["ranks_on_gpu"]["0"] == [0, 6, 12]
    # rank r -> r+8 with 6 GPUs: GPU r%6 -> (r+8)%6, never the same GPU; the ring r -> r+1 neither
    assert ld["same_gpu_bytes"] == 0 and ld["routed_bytes"] == expected_matrix(16).sum()


def test_mapping_before_after(web):
    client, ids = web
    d = client.get(f"/api/jobs/{ids['done']}/mapping").json()
    assert d["mapping"]["matched"] == "job" and d["mapping"]["optimal"] is True
    assert d["stored"] == {"max_before": 2.0e-4, "avg_before": 1.0e-4, "max_after": 1.0e-4, "avg_after": 0.5e-4}
    assert d["topology"] == TOPOLOGY
    assert d["before"]["placement"]["gpu"] == list(range(N))
    assert d["after"]["placement"]["gpu"] == MAPPED
    assert d["after"]["placement"]["node"] == ["node0"] * N
    assert np.array_equal(np.array([[l["load_ab"], l["load_ba"]] for l in d["after"]["links"]]), routed_loads(MAPPED))
    mb, ma = d["before"]["max_congestion"], d["after"]["max_congestion"]
    assert d["routed"]["max_before"] == mb and d["routed"]["max_after"] == ma
    assert d["routed"]["max_reduction"] == pytest.approx(1 - ma / mb)
    bw = np.array([l.bandwidth for l in load(TOPOLOGY).links]) * 1e9
    assert mb == pytest.approx((routed_loads(list(range(N))) / bw[:, None]).max())
    assert ma == pytest.approx((routed_loads(MAPPED) / bw[:, None]).max())
    # the collective share is sent from host memory: it goes up to the CPUs, never over NVLink
    assert d["after"]["host_staged_bytes"] == N * ALLRED_BYTES
    # the running job has no mapping of its own nor of its command: a message, not an error
    r = client.get(f"/api/jobs/{ids['running']}/mapping")
    assert r.status_code == 200 and r.json()["mapping"] is None and "rankmap map" in r.json()["message"]


def test_mapping_states_its_basis_and_is_drawn_on_it(web, tmp_path):
    client, ids = web
    # stored without a basis (before mapping documents carried one): as recorded
    d = client.get(f"/api/jobs/{ids['done']}/mapping").json()["mapping"]
    assert (d["traffic_basis"], d["assumption"], d["label"], d["what_if"]) == (B.AS_RECORDED, None, "as recorded", False)
    url = f"sqlite:///{tmp_path / 'basis.db'}"
    jobs = basis_jobs(url)
    client = local_client(create_app(open_store(url), TOPOLOGY))
    got = {name: client.get(f"/api/jobs/{jid}/mapping").json() for name, (jid, _) in jobs.items()}
    w, r = got["what-if"]["mapping"], got["recorded"]["mapping"]
    assert (w["traffic_basis"], w["label"], w["what_if"]) == (B.GPU_RESIDENT, "what-if: GPU-resident", True)
    assert w["assumption"] == jobs["what-if"][1]["assumption"]
    assert w["assumption"].startswith(f"what-if: the {N * ALLRED_BYTES / 1e6:.3f} MB recorded as host-staged")
    assert (r["traffic_basis"], r["assumption"], r["label"], r["what_if"]) == (B.AS_RECORDED, None, "as recorded", False)
    # each is drawn on its own basis, so the drawn figures are the solver's: the what-if routes the
    # host-staged share GPU to GPU, the recorded mapping up to the CPUs and back
    for name, (_, doc) in jobs.items():
        d = got[name]
        assert d["before"]["max_congestion"] == pytest.approx(doc["default"]["max_congestion"]), name
        assert d["after"]["max_congestion"] == pytest.approx(doc["max_congestion"]), name
    assert got["what-if"]["after"]["host_staged_bytes"] == 0
    assert got["recorded"]["after"]["host_staged_bytes"] == N * ALLRED_BYTES
    assert jobs["what-if"][1]["max_congestion"] != pytest.approx(jobs["recorded"][1]["max_congestion"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_mapping_of_a_job_is_listed_and_each_can_be_chosen(backend, request, tmp_path):
    """The id asked for reaches SQL as a bound parameter, so both back ends are asked, huge ids too."""
    url = (f"sqlite:///{tmp_path / 'maps.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_cluster").new_database())
    ids = fill_store(url)
    jid, maps = two_mapping_job(url)
    client = local_client(create_app(open_store(url), TOPOLOGY))
    (wid, wdoc), (rid, rdoc) = maps["what-if"], maps["recorded"]
    assert rid > wid
    d = client.get(f"/api/jobs/{jid}/mapping").json()
    # the list: newest first, each with its time and basis in words
    listed = [(m["id"], m["traffic_basis"], m["label"], m["what_if"], m["matched"]) for m in d["mappings"]]
    assert listed == [(rid, B.AS_RECORDED, "as recorded", False, "job"),
                      (wid, B.GPU_RESIDENT, "what-if: GPU-resident", True, "job")]
    assert all(m["created"].endswith("Z") for m in d["mappings"])
    # the default is the newest, drawn on its basis
    assert d["mapping"]["id"] == rid and d["mapping"]["what_if"] is False
    assert d["after"]["max_congestion"] == pytest.approx(rdoc["max_congestion"])
    # the older what-if, chosen by id: its own document, basis, stored and drawn figures
    c = client.get(f"/api/jobs/{jid}/mapping?id={wid}").json()
    assert c["mapping"]["id"] == wid and c["mapping"]["mapping"] == wdoc
    assert (c["mapping"]["label"], c["mapping"]["what_if"], c["mapping"]["assumption"]) == \
        ("what-if: GPU-resident", True, wdoc["assumption"])
    assert c["stored"]["max_after"] == pytest.approx(wdoc["max_congestion"])
    assert c["after"]["max_congestion"] == pytest.approx(wdoc["max_congestion"])
    assert c["after"]["host_staged_bytes"] == 0 and d["after"]["host_staged_bytes"] == N * ALLRED_BYTES
    assert c["mappings"] == d["mappings"]
    assert client.get(f"/api/jobs/{jid}/mapping?id={rid}").json()["mapping"]["id"] == rid
    # a job with one mapping lists just that one
    one = client.get(f"/api/jobs/{ids['done']}/mapping").json()
    assert [m["id"] for m in one["mappings"]] == [one["mapping"]["id"]]
    # another job's mapping is refused by name, whatever id is asked for
    other = one["mapping"]["id"]
    r = client.get(f"/api/jobs/{jid}/mapping?id={other}")
    assert r.status_code == 404  # and says whose it is, to the reader and to the dashboard
    assert r.json() == {
        "detail": f"mapping {other} is not one of job {jid}'s mappings (its mappings: {rid}, {wid}): it belongs "
                  f"to job {ids['done']} (GET /api/jobs/{ids['done']}/mapping?id={other})",
        "job": jid, "mapping": other, "stored": True, "owner_job": ids["done"]}
    r = client.get(f"/api/jobs/{ids['done']}/mapping?id={wid}")
    assert r.status_code == 404 and f"mapping {wid} is not one of job {ids['done']}'s" in r.json()["detail"]
    assert r.json()["detail"].endswith(f": it belongs to job {jid} (GET /api/jobs/{jid}/mapping?id={wid})")
    assert r.json()["owner_job"] == jid
    for missing in ("99999", "9" * 18):
        r = client.get(f"/api/jobs/{jid}/mapping?id={missing}")
        assert r.status_code == 404 and f"mapping {missing} is not one of" in r.json()["detail"], missing
        assert r.json()["detail"].endswith(f": no mapping {missing} is stored"), missing
        assert (r.json()["stored"], r.json()["owner_job"]) == (False, None)
    # one whose job was deleted is stored, but no job's
    with open_store(url).engine.begin() as c:
        c.execute(S.mappings.update().where(S.mappings.c.id == other).values(job=None))
    r = client.get(f"/api/jobs/{jid}/mapping?id={other}").json()
    assert r["detail"].endswith(": it belongs to no stored job") and (r["stored"], r["owner_job"]) == (True, None)
    for bad in ("abc", "0", "-1", "1.5", "1%20OR%201=1", "", "%201", "1_0", "9" * 40):
        r = client.get(f"/api/jobs/{jid}/mapping?id={bad}")
        assert r.status_code == 400, bad
        assert r.json()["detail"].startswith("mapping id ") and "is not a mapping id" in r.json()["detail"], bad


def test_unknown_basis_is_labelled_and_not_drawn_as_recorded(tmp_path):
    """A basis this version does not know is labelled a what-if under its own name and is not drawn:
    its stored figures are quoted and a one-line mapping_error names the basis. Drawing it on the
    recorded traffic (host-staged bytes via the host) would give loads its solver never computed."""
    url = f"sqlite:///{tmp_path / 'unknown.db'}"
    jid, mid, doc = unknown_basis_job(url)
    client = local_client(create_app(open_store(url), TOPOLOGY))
    d = client.get(f"/api/jobs/{jid}/mapping").json()
    m = d["mapping"]
    assert (m["id"], m["traffic_basis"], m["label"], m["what_if"], m["known"], m["assumption"]) == \
        (mid, "nccl-only", "basis: nccl-only", True, False, "only the bytes of nccl-only")
    assert [(x["id"], x["label"], x["what_if"], x["known"]) for x in d["mappings"]] == \
        [(mid, "basis: nccl-only", True, False)]
    assert "before" not in d and "after" not in d and "routed" not in d
    err = d["mapping_error"]
    assert "\n" not in err and f"mapping {mid} " in err and "'nccl-only'" in err and "does not know" in err
    assert d["stored"]["max_after"] == pytest.approx(doc["max_congestion"])
    assert d["stored"]["max_before"] == pytest.approx(doc["default"]["max_congestion"])
    # chosen by id, the same answer; a known basis beside it is still drawn
    assert client.get(f"/api/jobs/{jid}/mapping?id={mid}").json() == d
    rid = store_mapping(open_store(url), {**doc, **B.fields(B.AS_RECORDED)}, jid)
    r = client.get(f"/api/jobs/{jid}/mapping").json()
    assert r["mapping"]["id"] == rid and r["mapping"]["known"] is True and "mapping_error" not in r
    assert r["after"]["host_staged_bytes"] == N * ALLRED_BYTES


def _mapping_selects(store) -> list[str]:
    """Collects the statements that read the mappings table while it is in use."""
    import sqlalchemy as sa

    seen: list[str] = []

    def note(conn, cursor, statement, *args):
        if "mappings" in statement and statement.lstrip().upper().startswith("SELECT"):
            seen.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", note)
    return seen


def test_mapping_by_id_reads_the_panel_once(tmp_path):
    """``id=`` of a listed mapping costs no more queries than the newest: the job's scope is found
    once and the chosen one is taken from the list; only one older than the list costs one more."""
    url = f"sqlite:///{tmp_path / 'once.db'}"
    jid, maps = two_mapping_job(url)
    store = open_store(url)
    client = local_client(create_app(store, TOPOLOGY))
    seen = _mapping_selects(store)
    newest = client.get(f"/api/jobs/{jid}/mapping").json()
    plain = len(seen)
    assert plain == 2, seen  # the scope (made from this job?) and the list with its count
    seen.clear()
    wid = maps["what-if"][0]
    chosen = client.get(f"/api/jobs/{jid}/mapping?id={wid}").json()
    assert len(seen) == plain, seen
    assert chosen["mapping"]["id"] == wid and chosen["mappings"] == newest["mappings"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_more_mappings_than_listed_are_counted_and_reachable(backend, request, tmp_path):
    """A job with more mappings than the panel lists: the API says how many there are and that the
    list is cut; one older than those listed is still shown when chosen by id (the list stays the
    newest), and another job's id is still refused."""
    from rankmap.web.queries import MAPPINGS_LISTED

    url = (f"sqlite:///{tmp_path / 'many.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_cluster").new_database())
    ids = fill_store(url)
    count = MAPPINGS_LISTED + 3
    jid, mids, doc = many_mapping_job(url, count)
    store = open_store(url)
    client = local_client(create_app(store, TOPOLOGY))
    d = client.get(f"/api/jobs/{jid}/mapping").json()
    assert (d["mappings_total"], d["mappings_truncated"]) == (count, True)
    assert [m["id"] for m in d["mappings"]] == mids[::-1][:MAPPINGS_LISTED]
    assert d["mapping"]["id"] == mids[-1]
    seen = _mapping_selects(store)
    for old in mids[:3]:  # older than every listed one
        c = client.get(f"/api/jobs/{jid}/mapping?id={old}").json()
        assert c["mapping"]["id"] == old and c["mapping"]["mapping"] == doc
        assert c["mappings"] == d["mappings"] and (c["mappings_total"], c["mappings_truncated"]) == (count, True)
        assert c["after"]["max_congestion"] == pytest.approx(doc["max_congestion"])
    assert len(seen) == 3 * 3, seen  # scope, list, and the older one
    other = client.get(f"/api/jobs/{ids['done']}/mapping").json()
    assert (other["mappings_total"], other["mappings_truncated"]) == (1, False)
    r = client.get(f"/api/jobs/{jid}/mapping?id={other['mapping']['id']}")
    assert r.status_code == 404
    assert f", {mids[-MAPPINGS_LISTED]}, and 3 older): it belongs to job {ids['done']} " in r.json()["detail"]
    r = client.get(f"/api/jobs/{ids['done']}/mapping?id={mids[0]}")
    assert r.status_code == 404 and f"mapping {mids[0]} is not one of job {ids['done']}'s" in r.json()["detail"]
    none = client.get(f"/api/jobs/{ids['running']}/mapping").json()
    assert (none["mapping"], none["mappings"], none["mappings_total"], none["mappings_truncated"]) == (None, [], 0, False)


@pytest.mark.parametrize("doc, want", [
    ({"ranks": []}, (B.AS_RECORDED, None, "as recorded", False, True)),
    (MAPPED, (B.AS_RECORDED, None, "as recorded", False, True)),
    ({"traffic_basis": B.AS_RECORDED, "assumption": None}, (B.AS_RECORDED, None, "as recorded", False, True)),
    ({"traffic_basis": B.GPU_RESIDENT, "assumption": "what-if: ..."},
     (B.GPU_RESIDENT, "what-if: ...", "what-if: GPU-resident", True, True)),
    ({"traffic_basis": "nccl-only", "assumption": "only the NCCL bytes"},
     ("nccl-only", "only the NCCL bytes", "basis: nccl-only", True, False)),
])
def test_stated_basis_of_stored_documents(doc, want):
    """A basis the reader does not know is never shown as the recorded run, nor taken as one it knows."""
    s = B.stated(doc)
    assert (s["traffic_basis"], s["assumption"], s["label"], s["what_if"], s["known"]) == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_job_ids_out_of_range_are_unknown_jobs(backend, request, tmp_path):
    """A job id past the schema's 32-bit ids (PostgreSQL refuses to compare with it) or below 1 is an
    unknown job, a 404 with the message, not a server error."""
    url = (f"sqlite:///{tmp_path / 'big.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_cluster").new_database())
    fill_store(url)
    client = local_client(create_app(open_store(url), TOPOLOGY))
    for jid in ("99999999999", str(2**31), "0", "-3"):
        for path in (f"/api/jobs/{jid}", f"/api/jobs/{jid}/mapping", f"/api/jobs/{jid}/matrix"):
            r = client.get(path)
            assert r.status_code == 404 and f"unknown job '{jid}'" in r.json()["detail"], (path, r.text)
    for run in ("99999999999999999999", str(2**31), str(2**63), "0", "-3"):  # SQLite cannot hold 2**63: was a 500
        r = client.get(f"/api/bench/{run}")
        assert r.status_code == 404 and r.json()["detail"].startswith(f"no benchmark run {run} in "), (run, r.text)
    assert client.get("/api/bench/run7").status_code == 422


def test_test_client_imports_without_deprecation():
    """The dashboard's tests drive it through starlette's TestClient; imported fresh, it warns of
    nothing (from starlette 1.10 on it wants httpx2, which the test extra installs, and says so with a
    StarletteDeprecationWarning, a UserWarning, when it finds only httpx)."""
    r = subprocess.run([sys.executable, "-W", "error", "-c", "import fastapi.testclient"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr.strip().splitlines()[-1:]


def test_bad_job_is_404_with_a_message(web):
    client, _ = web
    for path in ("/api/jobs/999", "/api/jobs/999/matrix", "/api/jobs/999/ops", "/api/jobs/999/timeline",
                 "/api/jobs/999/links", "/api/jobs/999/mapping", "/api/topology?job=999"):
        r = client.get(path)
        assert r.status_code == 404, path
        assert "unknown job '999'" in r.json()["detail"], path
    r = client.get("/api/jobs/nope")
    assert r.status_code == 404 and "give a job id or 'latest'" in r.json()["detail"]


def test_topology_specs_are_limited_to_those_offered(web):
    client, _ = web
    r = client.get("/api/topology?spec=/etc/passwd")
    assert r.status_code == 400 and "not offered" in r.json()["detail"]
    assert client.get("/api/topology?spec=hgx-h100").json()["topology"]["name"] == "hgx-h100"
    info = client.get("/api/info").json()
    assert info["topology"] == TOPOLOGY and "hgx-h100" in info["topologies"]


def test_live_topology_unavailable_is_a_clear_404(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'rankmap.db'}")
    client = local_client(create_app(store, str(tmp_path / "missing.json")))
    r = client.get("/api/topology")
    assert r.status_code == 404 and "is not available" in r.json()["detail"]


def test_no_mapping_hint_names_a_command_that_runs_here(tmp_path):
    """The panel's hint for a job without a mapping is a command to copy: with the server on
    ``live`` where there is no NVIDIA driver it said ``--topology live``, which fails the same way.
    It names a node that loads here, with the nodes and ranks per GPU the job needs, and each
    command given runs as given (the real CLI) and stores the mapping the panel then shows."""
    import re
    import shlex

    from rankmap.cli import build_parser

    try:
        load("live")
        live = True
    except RankmapError:
        live = False
    url = f"sqlite:///{tmp_path / 'rankmap.db'}"
    store = open_store(url)
    jobs = {}
    for name, n, hosts in (("one node", N, 1), ("two nodes", 4, 2), ("crowded", 12, 1)):
        jid = store.create_job(["mpirun", "-np", str(n), f"./{name[:3]}"], world_size=n)
        store.ingest(jid, [WebRecord(world_rank=r, host=f"node{r * hosts // n}",
                                     traffic=[((r + 1) % n, "p2p", "MPI_Send", "device", "send", 10**6, 1)])
                           for r in range(n)])
        store.finish_job(jid, exit_status=0, elapsed_ns=10**9)
        jobs[name] = jid
    client = local_client(create_app(store, None))            # the default: live
    hints = {name: client.get(f"/api/jobs/{jid}/mapping").json()["message"] for name, jid in jobs.items()}
    missing = local_client(create_app(store, str(tmp_path / "missing.json")))
    hints["missing file"] = missing.get(f"/api/jobs/{jobs['one node']}/mapping?spec=live").json()["message"]
    other = tmp_path / "other.json"
    two_missing = missing.get(f"/api/jobs/{jobs['one node']}/mapping?spec={other}").json()["message"]
    if not live:
        for name, hint in hints.items():
            assert "--topology live" not in hint and "NVIDIA driver" in hint and "nvidia-smi topo -m" in hint, hint
    assert "missing.json' does not load here" in hints["missing file"]
    assert f"{str(other)!r}, {str(tmp_path / 'missing.json')!r} do not load here" in two_missing
    assert "--nodes 2" in hints["two nodes"] and "--ranks-per-gpu" in hints["crowded"]
    for name, jid in jobs.items():
        cmd = shlex.split(re.search(r"`(rankmap map [^`]*)`", hints[name]).group(1))
        assert cmd[:4] == ["rankmap", "map", "--job", str(jid)] and cmd[-1] == "--save", cmd
        p = cli(*cmd[1:], env={"RANKMAP_HOME": str(tmp_path)})      # the real CLI, in this process
        assert p.returncode == 0, (hints[name], p.stderr)
        got = client.get(f"/api/jobs/{jid}/mapping").json()
        assert got["mapping"] is not None and got["mapping"]["job"] == jid, got
        # the tune command would profile again (not here): the CLI's own parser takes it as given
        tune = shlex.split(re.search(r"`(rankmap tune [^`]*)`", hints[name]).group(1).replace("<its command>", "./x"))
        args = build_parser().parse_args(tune[1:])
        assert args.topology == ("live" if live else "dgx1-v100") and args.db == url, vars(args)


def test_page_and_plotly_are_served_locally(web):
    client, _ = web
    page = client.get("/")
    assert page.status_code == 200 and '<script src="/static/plotly.min.js">' in page.text
    assert "cdn" not in page.text.lower()
    js = client.get("/static/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000 and b"plotly" in js.content[:2000].lower()
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/style.css").status_code == 200


def test_serve_rejects_a_busy_port_in_one_line(tmp_path):
    open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")    # a store that exists: the port is what is wrong
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = rankmap("serve", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}", "--port", str(port),
                    "--topology", TOPOLOGY, timeout=60)
    assert_one_line_error(p, f"127.0.0.1:{port}", "--port")


def test_serve_names_a_missing_dependency_of_a_web_package_in_one_line(tmp_path):
    """Packages installed with --no-deps can lack their own dependencies (fastapi 0.165 needs
    opentelemetry-api): serve says which package needs which module, in one line, exit non-zero."""
    shadow = tmp_path / "shadow" / "uvicorn"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("import rankmap_no_such_dependency\n")
    env = {"PYTHONPATH": os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")]),
           "RANKMAP_HOME": str(tmp_path)}
    p = rankmap("serve", "--db", f"sqlite:///{tmp_path / 's.db'}", "--port", "1", env=env, timeout=120)
    assert_one_line_error(p, "uvicorn needs the module 'rankmap_no_such_dependency'", "not installed",
                          "rankmap[web]")


def test_serve_rejects_an_unknown_topology_in_one_line(tmp_path):
    open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")    # a store that exists: the topology is what is wrong
    p = rankmap("serve", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}", "--topology", "no-such-box", timeout=60)
    assert_one_line_error(p, "no-such-box")


def test_mapping_is_drawn_on_its_own_topology(tmp_path):
    url = f"sqlite:///{tmp_path / 'rankmap.db'}"
    ids = fill_store(url)
    # the server's own topology cannot be loaded here; the mapping names dgx1-v100 and is drawn on it
    client = local_client(create_app(open_store(url), str(tmp_path / "missing.json")))
    d = client.get(f"/api/jobs/{ids['done']}/mapping").json()
    assert d["topology"] == TOPOLOGY and "topology_error" not in d
    assert d["drawing"]["topology"]["name"] == TOPOLOGY
    assert set(d["drawing"]["layout"]["positions"]) == set(load(TOPOLOGY).devices)
    assert d["after"]["placement"]["gpu"] == MAPPED


def test_mapping_that_does_not_fit_the_node_keeps_its_stored_figures(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'rankmap.db'}")
    jid = store.create_job(["mpirun", "-np", "8", "./ring"], world_size=N)
    store.ingest(jid, [record(r) for r in range(N)])
    store.save_mapping({"gpu_of": [r + 8 for r in range(N)]}, job_id=jid, topology="summit", max_after=1e-3)
    d = local_client(create_app(store, TOPOLOGY)).get(f"/api/jobs/{jid}/mapping").json()
    assert d["stored"]["max_after"] == 1e-3
    assert "rank 0 is on GPU 8" in d["mapping_error"] and "before" not in d


@pytest.mark.parametrize("mapping", [
    {"ranks": [{"rank": r, "gpu": g} for r, g in enumerate(MAPPED)]},
    {"ranks": [{"world_rank": r, "gpu": g} for r, g in reversed(list(enumerate(MAPPED)))]},
    {"gpu_of": MAPPED, "node_of": [0] * N},
    {str(r): {"gpu": g} for r, g in enumerate(MAPPED)},
    MAPPED,
    {"mapping": {"ranks": [{"rank": r, "gpu": g} for r, g in enumerate(MAPPED)]}},
])
def test_placement_shapes(mapping):
    assert parse_placement(mapping, N).gpu == MAPPED


def test_placement_missing_rank_is_named():
    with pytest.raises(RankmapError, match="rank 7 has no GPU"):
        parse_placement({"gpu_of": MAPPED[:7]}, N)
    with pytest.raises(RankmapError, match="no rank -> GPU placement"):
        parse_placement({"something": 1}, N)


@pytest.mark.parametrize("spec", ["dgx1-v100", "hgx-h100", "dgx-a100", "summit", "pcie-8gpu-2socket"])
def test_layout_puts_devices_in_layers(spec):
    topo = load(spec)
    pos = layout(topo)["positions"]
    assert set(pos) == set(topo.devices)
    row = {k: p["row"] for k, p in pos.items()}
    gpu_rows = {row[g.id] for g in topo.gpus}
    assert len(gpu_rows) == 1  # every GPU on one line, in index order
    xs = [pos[g.id]["x"] for g in topo.gpus]
    assert xs == sorted(xs)
    assert all(row[c.id] < min(gpu_rows) for c in topo.cpus)
    for d in topo.devices.values():
        if d.kind.value == "nvswitch":
            assert row[d.id] > min(gpu_rows)
    assert len({(p["x"], p["y"]) for p in pos.values()}) == len(pos)  # no two devices on one spot


def test_serve_command_serves_the_store(tmp_path):
    """`rankmap serve` as a user runs it: prints its URL, answers on it, stops on SIGTERM."""
    url = f"sqlite:///{tmp_path / 'rankmap.db'}"
    ids = fill_store(url)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "rankmap", "serve", "--db", url, "--port", str(port),
                          "--topology", TOPOLOGY], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ))
    try:
        line = p.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in line, line + p.stderr.read()
        body = None
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/jobs", timeout=5) as r:
                    body = r.read()
                break
            except OSError:
                time.sleep(0.1)
        assert body is not None
        assert [j["id"] for j in json.loads(body)["jobs"]] == [ids["running"], ids["done"]]
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=20)


def test_link_loads_count_same_gpu_and_other_node_pairs_apart():
    """Two ranks on one GPU cross no link; a pair split across nodes leaves the drawing; pairs
    that share any node are drawn on it, each byte on every hop of its route."""
    from rankmap.mapping.cost import Traffic
    from rankmap.topology import fixtures
    from rankmap.web.topoview import Placement, link_loads

    topo = fixtures.get("dgx1-v100")
    T = np.zeros((5, 5), dtype=np.int64)
    T[0, 1] = 1000      # GPU 0 -> GPU 0: same GPU
    T[1, 2] = 3000      # GPU 0 -> GPU 5 (SYS route), node 0
    T[2, 3] = 7         # node 0 -> node 1: off the drawing
    T[3, 4] = 50        # GPU 2 -> GPU 6 on node 1: drawn like a node-0 pair
    T[4, 4] = 99        # to itself: ignored
    d = link_loads(topo, Traffic.from_dense(T), Placement([0, 0, 5, 2, 6], [0, 0, 0, 1, 1], "test"))
    assert (d["same_gpu_bytes"], d["routed_bytes"], d["off_node_bytes"]) == (1000, 3050, 7)
    want = np.zeros((len(topo.links), 2), dtype=np.int64)
    for a, b, nbytes in (("gpu0", "gpu5", 3000), ("gpu2", "gpu6", 50)):
        for h in topo.route(a, b).hops:
            want[h.link, 0 if h.src == topo.links[h.link].a else 1] += nbytes
    got = np.array([[l["load_ab"], l["load_ba"]] for l in d["links"]])
    assert np.array_equal(got, want)
    bw = np.array([l.bandwidth for l in topo.links]) * 1e9
    assert d["max_congestion"] == pytest.approx((want / bw[:, None]).max())


def test_link_loads_route_host_staged_bytes_via_the_host():
    """Host-staged bytes go up to the host and down again, as the placement cost model routes them:
    between two ranks on one GPU too, and never over NVLink."""
    from rankmap.mapping.cost import Traffic, evaluate
    from rankmap.mapping.platform import Platform, node_model
    from rankmap.topology import fixtures
    from rankmap.web.topoview import Placement, link_loads

    topo = fixtures.get("dgx1-v100")
    T = np.zeros((4, 4))
    H = np.zeros((4, 4))
    T[0, 1] = H[0, 1] = 1000   # same GPU, host memory: up to cpu0 and back down
    T[1, 2] = 3000             # GPU 0 -> GPU 1, device memory: the NVLink
    T[2, 3] = H[2, 3] = 500    # GPU 1 -> GPU 5, host memory: across the CPU interconnect
    pl = Placement([0, 0, 1, 5], None, "test")
    d = link_loads(topo, Traffic.from_dense(T, H), pl)
    assert (d["same_gpu_bytes"], d["routed_bytes"], d["host_staged_bytes"]) == (0, 4500, 1500)
    m = node_model(topo)
    want = evaluate(Platform(m), Traffic.from_dense(T, H), np.zeros(4, dtype=np.int64), np.array([0, 0, 1, 5]))
    got = {(l["link"], 0): l["load_ab"] for l in d["links"]} | {(l["link"], 1): l["load_ba"] for l in d["links"]}
    for dl, (link, direction) in enumerate(m.dlinks):
        assert got[link, direction] == want.loads[dl]
    kinds = {}
    for l in d["links"]:
        k = topo.links[l["link"]].kind.value
        kinds[k] = kinds.get(k, 0) + l["load_ab"] + l["load_ba"]
    assert kinds["nvlink"] == 3000  # only the device-memory pair is on NVLink
    assert kinds["cpu_interconnect"] == 500
    # the same matrix read as all peer-to-peer bytes: nothing crosses the CPU interconnect
    peer = link_loads(topo, Traffic.from_dense(T), pl)
    assert peer["same_gpu_bytes"] == 1000 and peer["host_staged_bytes"] == 0


def test_cluster_view_routes_host_staged_bytes_via_the_host(tmp_path):
    """The multi-node view routes a host-memory pair inside a node up to the CPU and down again."""
    from rankmap.topology import fixtures

    store = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    views = {}
    for mem in ("device", "host"):
        jid = store.create_job(["srun", "-n", "4", "./a"], world_size=4)
        recs = [WebRecord(world_rank=0, host="nodeA", traffic=[(1, "p2p", "MPI_Send", mem, "send", 10**9, 1),
                                                              (2, "p2p", "MPI_Send", "device", "send", 10**9, 1)]),
                WebRecord(world_rank=1, host="nodeA", traffic=[]), WebRecord(world_rank=2, host="nodeB", traffic=[]),
                WebRecord(world_rank=3, host="nodeB", traffic=[])]
        store.ingest(jid, recs)
        store.finish_job(jid, exit_status=0, elapsed_ns=10**9)
        views[mem] = local_client(create_app(store, "dgx1-v100")).get(f"/api/jobs/{jid}/cluster").json()
    topo = fixtures.get("dgx1-v100")
    up = len(topo.route("gpu0", topo.local_cpu("gpu0").id).hops)
    down = len(topo.route(topo.local_cpu("gpu1").id, "gpu1").hops)
    nv = len(topo.route("gpu0", "gpu1").hops)
    # node A's links carry the off-node bytes to the NIC either way; the pair adds its route
    extra = views["host"]["nodes"][0]["local_bytes"] - views["device"]["nodes"][0]["local_bytes"]
    assert extra == (up + down - nv) * 10**9
    assert views["host"]["off_node_bytes"] == views["device"]["off_node_bytes"] == 10**9
