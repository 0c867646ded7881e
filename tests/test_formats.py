"""The traffic CSV and the mapping JSON: one reader each, strict, naming the culprit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankmap.errors import RankmapError
from rankmap.formats import mapping_json, traffic_csv


def doc(n: int = 4, nodes: int = 1) -> dict:
    return {"format": "rankmap-mapping", "version": 1, "world_size": n, "topology": "dgx1-v100", "nodes": nodes,
            "gpus_per_node": 8, "ranks_per_gpu": 1, "max_congestion": 1.0,
            "mapping": {str(r): {"node": r % nodes, "gpu": 7 - r, "uuid": None, "cpus": "0-3", "numa": 0,
                                 "nic": None, "netdev": None} for r in range(n)}}


def test_mapping_json_reads_what_the_solver_writes():
    from rankmap.mapping.cost import Traffic
    from rankmap.pipeline.map import place

    T = np.zeros((4, 4))
    T[0, 1] = T[1, 0] = 1e9
    T[2, 3] = T[3, 2] = 5e8
    d = place(Traffic.from_dense(T), topology="dgx1-v100", time_budget=5)
    m = mapping_json.loads(json.dumps(d), "m.json")
    assert (m.world_size, m.topology, m.nodes, m.gpus_per_node) == (4, "dgx1-v100", 1, 8)
    assert [p.gpu for p in m.ranks] == [d["mapping"][str(r)]["gpu"] for r in range(4)]
    assert m.ranks[2].to_dict() == d["mapping"]["2"] and m.doc is not None
    assert mapping_json.placement(d, 4, "m") == (m.gpu_of, m.node_of)


@pytest.mark.parametrize("change,message", [
    (lambda d: d.update(format="other"), "m.json: format: expected 'rankmap-mapping'"),
    (lambda d: d.update(version=9), "m.json: version: version 9 is newer"),
    (lambda d: d["mapping"].pop("2"), "m.json: mapping: places 3 ranks but world_size is 4 (rank 2 missing)"),
    (lambda d: d["mapping"]["1"].update(gpu=-1), "m.json: mapping['1'].gpu: expected an integer >= 0, got -1"),
    (lambda d: d["mapping"]["3"].update(node=1), "m.json: mapping['3'].node: node 1 but the mapping spans 1 node"),
    (lambda d: d["mapping"].update(x={}), "m.json: mapping['x']: expected a world rank"),
])
def test_mapping_json_names_the_fault(change, message):
    d = doc()
    change(d)
    with pytest.raises(RankmapError) as e:
        mapping_json.from_dict(d, "m.json")
    assert str(e.value).startswith(message), str(e.value)


def test_mapping_json_file_errors(tmp_path):
    with pytest.raises(RankmapError, match="cannot read mapping .*nope.json"):
        mapping_json.load(str(tmp_path / "nope.json"))
    p = tmp_path / "bad.json"
    p.write_text("{")
    with pytest.raises(RankmapError, match="bad.json: not valid JSON"):
        mapping_json.load(str(p))


def test_traffic_csv_round_trip_and_faults(tmp_path):
    T = np.array([[0, 5, 0], [7, 0, 2], [0, 0, 0]])
    H = np.array([[0, 5, 0], [3, 0, 0], [0, 0, 0]])
    p = tmp_path / "t.csv"
    p.write_text(traffic_csv.dumps(traffic_csv.matrix_rows(T, host=H), by_mem=True))
    t = traffic_csv.read(p)
    dense = np.zeros((3, 3), dtype=np.int64)
    np.add.at(dense, (t.src, t.dst), t.bytes)
    host = np.zeros((3, 3), dtype=np.int64)
    np.add.at(host, (t.src, t.dst), t.host_bytes())
    assert dense.tolist() == T.tolist() and host.tolist() == H.tolist() and t.ranks == 3
    p.write_text("src,dst,class,operation,bytes,messages\n0,1,p2p,x,5,1\n1,0,p2p,x,-5,1\n")
    with pytest.raises(RankmapError, match=r"t\.csv:3: negative value"):
        traffic_csv.read(p)
    p.write_text("a,b\n")
    with pytest.raises(RankmapError, match=r"t\.csv:1: bad header"):
        traffic_csv.read(p)
    # the pair_source column: after mem or alone, checked, empty for rows that have none
    p.write_text("src,dst,class,operation,bytes,messages,pair_source\n0,1,collective,MPI_Bcast,5,1,mirror\n"
                 "1,0,p2p,MPI_Send,2,1,\n")
    t = traffic_csv.read(p)
    assert t.pair_source == ["mirror", ""] and t.mem is None and t.bytes.tolist() == [5, 2]
    p.write_text("src,dst,class,operation,bytes,messages,mem,pair_source\n0,1,collective,MPI_Bcast,5,1,host,guess\n")
    with pytest.raises(RankmapError, match=r"t\.csv:2: pair_source must be one of call, library, mirror, model"):
        traffic_csv.read(p)
    p.write_text("src,dst,class,operation,bytes,messages,pair_source,mem\n")
    with pytest.raises(RankmapError, match=r"t\.csv:1: bad header"):
        traffic_csv.read(p)
