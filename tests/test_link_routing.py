"""One routing rule for every figure of a link's bytes: the cost model's.

A job's bytes reach links in many places: the dashboard's topology view, its link utilisation over
time, the link ledger (the API's and ``rankmap show --links``), the mapping panel before and after,
the multi-node view and ``rankmap map``'s per-link table. Each must put the same bytes on the same
directed links as :func:`rankmap.mapping.cost.route_loads` does for the job's traffic, split into
host-staged and peer-to-peer parts by :func:`rankmap.mapping.basis.host_staged`: host-staged bytes
GPU -> host -> GPU over PCIe and the CPU links, never over NVLink. Checked on a job whose every
byte is host-staged, one whose every byte is GPU-resident, and one of both.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the dashboard needs the web extra (fastapi)")

from conftest import rankmap  # noqa: E402
from test_web_api import WebRecord, local_client  # noqa: E402

from rankmap.mapping import basis as B  # noqa: E402
from rankmap.mapping.cost import route_loads  # noqa: E402
from rankmap.mapping.platform import Platform, node_model  # noqa: E402
from rankmap.mapping.traffic import job_traffic  # noqa: E402
from rankmap.pipeline.map import place, store_mapping  # noqa: E402
from rankmap.store import open_store  # noqa: E402
from rankmap.topology import fixtures  # noqa: E402
from rankmap.web.app import create_app  # noqa: E402

TOPOLOGY = "dgx1-v100"
N = 8
RING, FAR = 3_000_000, 1_000_000
T0 = 1_700_000_000 * 10**9   # the ranks' start, wall-clock ns
JOBS = {"host-staged": ("host", "host"), "gpu-resident": ("device", "device"), "mixed": ("device", "host")}


def make_job(store, ring_mem: str, far_mem: str, hosts: tuple[str, ...] = ("node0",)) -> int:
    """8 ranks: a ring to r+1 (``ring_mem``) and a share to r+4 (``far_mem``), each in its own
    timeline buckets; rank r on ``hosts[r % len(hosts)]``."""
    jid = store.create_job(["mpirun", "-np", str(N), f"./routes-{ring_mem}-{far_mem}-{len(hosts)}"],
                           launcher="openmpi", world_size=N, meta={"bucket_ms": 100})
    recs = []
    for r in range(N):
        nxt, far = (r + 1) % N, (r + 4) % N
        recs.append(WebRecord(
            world_rank=r, host=hosts[r % len(hosts)], pid=100 + r, start_ns=T0, elapsed_ns=1_000_000_000,
            traffic=[(nxt, "p2p", "MPI_Isend", ring_mem, "send", RING, 3, "call"),
                     (far, "p2p", "MPI_Isend", far_mem, "send", FAR, 1, "call")],
            op_time={"MPI_Isend": (4, 1_000_000)},
            timeline=[(0, nxt, "p2p", RING // 3), (3, nxt, "p2p", 2 * RING // 3), (5, far, "p2p", FAR)]))
    store.ingest(jid, recs)
    store.finish_job(jid, exit_status=0, elapsed_ns=1_000_000_000)
    return jid


def expected(topo, store, jid: int, gpu: list[int], basis: str = B.AS_RECORDED) -> np.ndarray:
    """``(links, 2)``: the cost model's bytes per drawn link and direction for rank r on GPU ``gpu[r]``."""
    m = node_model(topo)
    pos = {g.index: i for i, g in enumerate(m.gpus)}
    per = route_loads(Platform(m), B.routed(basis, job_traffic(store, jid)), np.zeros(N, dtype=np.int64),
                      np.array([pos[g] for g in gpu]))
    out = np.zeros((len(topo.links), 2))
    for d, (link, direction) in enumerate(m.dlinks):
        out[link, direction] = per[d]
    return out


def pairs_of(rows: list[dict], ab: str, ba: str) -> np.ndarray:
    return np.array([[float(l[ab] or 0), float(l[ba] or 0)] for l in sorted(rows, key=lambda l: l["link"])])


def by_kind(topo, loads: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    for i, l in enumerate(topo.links):
        out[l.kind.value] = out.get(l.kind.value, 0.0) + float(loads[i].sum())
    return out


@pytest.mark.parametrize("name", list(JOBS))
def test_every_consumer_routes_by_the_cost_model(name, tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = open_store(url)
    jid = make_job(store, *JOBS[name])
    topo = fixtures.get(TOPOLOGY)
    default = list(range(N))
    want = expected(topo, store, jid, default)
    kinds = by_kind(topo, want)
    # the rule itself, per kind of job: host-staged bytes never on NVLink; GPU-resident ones on it
    # where the GPUs have one (the DGX-1's GPU 3 -> 4 has none: that pair's route crosses the sockets)
    if name == "host-staged":
        assert kinds["nvlink"] == 0 and kinds["cpu_interconnect"] > 0
    else:
        assert kinds["nvlink"] > 0 and kinds["pcie"] > 0

    c = local_client(create_app(store, TOPOLOGY))
    got = {}
    load = c.get(f"/api/topology?job={jid}&spec={TOPOLOGY}").json()["load"]
    assert load["placement"]["source"] == "default"
    got["topology view"] = pairs_of(load["links"], "load_ab", "load_ba")
    util = c.get(f"/api/jobs/{jid}/utilisation?spec={TOPOLOGY}").json()
    assert util["frames"] > 1 and util["measured"] is None
    got["utilisation over time"] = pairs_of(util["links"], "bytes_ab", "bytes_ba")
    first = np.array([[r.get("util_ab", [0])[0], r.get("util_ba", [0])[0]] for r in util["links"]])
    bw = np.array([l.bandwidth for l in topo.links])[:, None] * 1e9 * util["frame_s"] / 100
    # every rank sent a third of its ring in the first frame: its traffic's routes, scaled (the API
    # gives percentages to 4 decimals)
    assert np.all(np.abs(first * bw - want * (RING / 3) / (RING + FAR)) <= 6e-5 * bw), first
    led = c.get(f"/api/jobs/{jid}/ledger?spec={TOPOLOGY}").json()
    got["ledger"] = pairs_of(led["links"], "explained_ab", "explained_ba")
    shown = rankmap("show", str(jid), "--links", "--topology", TOPOLOGY, "--format", "json", "--db", url)
    assert shown.returncode == 0, shown.stderr
    got["rankmap show --links"] = pairs_of(json.loads(shown.stdout)["links"], "explained_ab", "explained_ba")
    for what, loads in got.items():
        assert np.allclose(loads, want, rtol=0, atol=1), (what, by_kind(topo, loads), kinds)

    # rankmap map's per-link table and the mapping panel, before (the default) and after
    mp = rankmap("map", "--job", str(jid), "--topology", TOPOLOGY, "--min-gain", "0", "--format", "json",
                 "--db", url)
    assert mp.returncode == 0, mp.stderr
    doc = json.loads(mp.stdout)
    after = [int(doc["mapping"][str(r)]["gpu"]) for r in range(N)]
    mapped = expected(topo, store, jid, after)
    for key, ref in (("before_bytes", want), ("after_bytes", mapped)):
        table = {row["link"]: row[key] for row in doc["links"]}
        for i, l in enumerate(topo.links):
            for d, (a, b) in enumerate(((l.a, l.b), (l.b, l.a))):
                assert table.get(f"{a}->{b}", 0.0) == pytest.approx(ref[i, d], abs=1), (key, a, b)
    store_mapping(store, place(job_traffic(store, jid), topology=TOPOLOGY, min_gain=0.0, source={"job": jid}), jid)
    panel = c.get(f"/api/jobs/{jid}/mapping").json()
    assert panel["mapping"]["traffic_basis"] == B.AS_RECORDED
    panel_after = [panel["after"]["placement"]["gpu"][r] for r in range(N)]
    assert np.allclose(pairs_of(panel["before"]["links"], "load_ab", "load_ba"), want, atol=1)
    assert np.allclose(pairs_of(panel["after"]["links"], "load_ab", "load_ba"),
                       expected(topo, store, jid, panel_after), atol=1)


def test_a_what_if_mapping_is_drawn_gpu_to_gpu_and_the_recorded_job_is_not(tmp_path):
    """The mapping panel of a GPU-resident what-if routes every byte GPU to GPU (its basis); the
    job's own link views, on the same page, keep the host-staged route (what the job did)."""
    store = open_store(f"sqlite:///{tmp_path / 'w.db'}")
    jid = make_job(store, "host", "host")
    topo = fixtures.get(TOPOLOGY)
    store_mapping(store, place(job_traffic(store, jid), topology=TOPOLOGY, as_gpu_resident=True,
                               source={"job": jid}), jid)
    c = local_client(create_app(store, TOPOLOGY))
    panel = c.get(f"/api/jobs/{jid}/mapping").json()
    assert panel["mapping"]["what_if"]
    before = pairs_of(panel["before"]["links"], "load_ab", "load_ba")
    assert np.allclose(before, expected(topo, store, jid, list(range(N)), B.GPU_RESIDENT), atol=1)
    assert by_kind(topo, before)["nvlink"] > 0
    util = c.get(f"/api/jobs/{jid}/utilisation").json()
    drawn = pairs_of(util["links"], "bytes_ab", "bytes_ba")
    assert np.allclose(drawn, expected(topo, store, jid, list(range(N))), atol=1)
    assert by_kind(topo, drawn)["nvlink"] == 0


def test_the_multi_node_view_routes_each_node_by_the_cost_model(tmp_path):
    """Ranks alternating between two hosts: the cluster view's in-node bytes of each node and its
    NIC loads are the cost model's on two such nodes."""
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    jid = make_job(store, "device", "host", hosts=("nodeA", "nodeB"))
    topo = fixtures.get(TOPOLOGY)
    view = local_client(create_app(store, TOPOLOGY)).get(f"/api/jobs/{jid}/cluster").json()
    assert view["multi_node"] and view["hosts"] == ["nodeA", "nodeB"]
    m = node_model(topo)
    pf = Platform(m, 2)
    node = np.arange(N) % 2
    gpu = np.arange(N) // 2  # the k-th rank of a host on GPU k, as launchers place them
    loads = route_loads(pf, job_traffic(store, jid), node, gpu)
    for u in range(2):
        assert view["nodes"][u]["local_bytes"] == int(loads[u * m.D:(u + 1) * m.D].sum())
        nic = view["nodes"][u]["nics"]
        assert sum(x["up_bytes"] for x in nic) == int(sum(loads[pf.net_index(u, k, False)] for k in range(len(nic))))
