"""Every text reader under hostile input (Hypothesis): the traffic CSV, the mapping JSON (and the
mapping checked against the node it launches on, as `rankmap run` and the exec wrapper read it),
the topology JSON, `nvidia-smi topo -m` text, NCCL's graph logs and `job.json`. Each either reads
the input or refuses it with one line naming the file and the place; never another exception, a
hang, or memory beyond the input's size."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from hypothesis import example, given, strategies as st

import fuzzing
from conftest import DATA
from rankmap.errors import RankmapError
from rankmap.formats import mapping_json, topology_json, traffic_csv
from rankmap.topology import fixtures

# ---------------------------------------------------------------------------------------------- values
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-3, 20),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["0-3", "0-99999999999", "5-2", "nic0", "", "\udcff", "٣", "²"]))
JSON = st.recursive(SCALARS, lambda c: st.one_of(st.lists(c, max_size=4),
                                                 st.dictionaries(st.text(max_size=6), c, max_size=4)),
                    max_leaves=12)


def paths(doc, prefix=()):
    """Every path to a value inside a JSON document (the places a mutation may replace)."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


@st.composite
def mutated(draw, doc, max_changes=3):
    """``doc`` with up to ``max_changes`` values (or whole subtrees) replaced, removed or added."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, max_changes))):
        where = draw(st.sampled_from(list(paths(doc))))
        if not where:
            return draw(JSON)
        parent = doc
        for k in where[:-1]:
            parent = parent[k]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "delete":
            del parent[where[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = draw(JSON)
        else:
            parent[where[-1]] = draw(JSON)
    return doc


@st.composite
def mangled_text(draw, text):
    """``text`` with lines dropped, doubled or swapped, tokens replaced by numbers or junk, or cut."""
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "swap", "token", "cut", "junk"]))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "token":
            toks = lines[i].split(" ")
            k = draw(st.integers(0, max(len(toks) - 1, 0)))
            toks[k] = draw(st.one_of(st.integers(-2**63, 2**64).map(str), st.text(max_size=5),
                                     st.sampled_from(["NV99", "SYS", "X", "0-999999999", "N/A", "-1", "ffffffffffff"])))
            lines[i] = " ".join(toks)
        elif op == "cut":
            lines[i] = lines[i][:draw(st.integers(0, len(lines[i])))]
        else:
            lines.insert(i, draw(st.text(max_size=40)))
    return "\n".join(lines)


def refused(e: RankmapError, *needles: str) -> None:
    fuzzing.one_line(e, *needles)


# ---------------------------------------------------------------------------------------------- traffic CSV
CSV_ROW = st.tuples(st.one_of(st.integers(-2, 2**64), st.text(max_size=4)), st.integers(-1, 2**25),
                    st.sampled_from(["p2p", "collective", "", "x,y"]), st.text(max_size=8),
                    st.one_of(st.integers(-1, 2**64), st.just("1e3"), st.just(" 7 ")), st.integers(-1, 2**64))


@given(rows=st.lists(CSV_ROW, max_size=6), header=st.sampled_from(traffic_csv.HEADERS + (["src", "dst"],)),
       tail=st.binary(max_size=20))
@example(rows=[(0, 1, "p2p", "MPI_Send", 2**63, 1)], header=traffic_csv.HEADER, tail=b"")
@example(rows=[(0, 1, "p2p", "MPI_Send", 1, 1)], header=traffic_csv.HEADER, tail=b"\xff\xfe\x00")
def test_traffic_csv(tmp_path, rows, header, tail):
    p = tmp_path / "traffic.csv"
    lines = [",".join(header)] + [",".join(map(str, r[:len(header)])) + ("," * (len(header) - len(r)))
                                  for r in rows]
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape") + tail
    p.write_bytes(data)
    try:
        with fuzzing.bounded_memory(len(data)):
            t = traffic_csv.read(p)
    except RankmapError as e:
        refused(e, str(p))
        return
    assert t.ranks <= traffic_csv.MAX_RANKS
    assert all(0 <= b <= traffic_csv.INT64_MAX for b in t.bytes.tolist())


# ---------------------------------------------------------------------------------------------- mapping JSON
def a_mapping() -> dict:
    return {"format": "rankmap-mapping", "version": 1, "world_size": 4, "topology": "dgx1-v100", "nodes": 1,
            "gpus_per_node": 8, "ranks_per_gpu": 1,
            "mapping": {str(r): {"node": 0, "gpu": r, "uuid": f"GPU-{r}", "cpus": "0-19", "numa": 0, "nic": None,
                                 "netdev": None} for r in range(4)}}


@given(doc=mutated(a_mapping()), rank=st.integers(-1, 5))
@example(doc={**a_mapping(), "world_size": 10**18}, rank=0)
@example(doc={**a_mapping(), "mapping": {**a_mapping()["mapping"], "0": {"node": 0, "gpu": 0, "cpus": "0-99999999"}}},
         rank=0)
@example(doc={**a_mapping(), "mapping": {**a_mapping()["mapping"], "0": {"node": 0, "gpu": 99}}}, rank=0)
def test_mapping_json_against_the_node(tmp_path, doc, rank):
    """A mapping as `rankmap run` reads it (the file, then the node it launches on: 8 GPUs) and as the
    exec wrapper reads it on a rank: a placement within the node, or one line naming the field."""
    from rankmap.mapping import execwrap

    p = tmp_path / "mapping.json"
    text = json.dumps(doc, ensure_ascii=False)
    p.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        with fuzzing.bounded_memory(len(text)), fuzzing.time_limit(10):
            m = mapping_json.load(str(p))
            mapping_json.check_node(m, 8, f"mapping {p}")
    except RankmapError as e:
        refused(e, str(p))
        return
    assert all(0 <= g < 8 for g in m.gpu_of)
    try:
        entry, env = execwrap.plan(m, {"OMPI_COMM_WORLD_RANK": str(rank)})
    except LookupError as e:            # the wrapper's own refusal: a rank the mapping lacks
        assert "rank" in str(e)
        return
    if entry.cpus:
        assert len(execwrap.parse_cpus(entry.cpus)) <= mapping_json.MAX_CPUS
    assert env["CUDA_VISIBLE_DEVICES"] in {str(g) for g in range(8)} | {str(entry.uuid)}


@given(data=st.binary(max_size=64))
@example(data=b"\x89PNG\r\n\x1a\n\x00\x00")
@example(data=b"[" * 100000)
def test_mapping_file_of_any_bytes(tmp_path, data):
    p = tmp_path / "mapping.json"
    p.write_bytes(data)
    try:
        mapping_json.load(str(p))
    except RankmapError as e:
        refused(e, str(p))


# ---------------------------------------------------------------------------------------------- topology JSON
TOPO = topology_json.to_dict(fixtures.get("dgx1-v100"))


@given(doc=mutated(TOPO))
@example(doc={**TOPO, "devices": TOPO["devices"] + [{"id": "gpu99", "kind": "gpu", "index": 10**30}]})
@example(doc={**TOPO, "\n": 1})                 # a key that is a line break: the error stays one line
def test_topology_json(tmp_path, doc):
    """A topology file as `--topology FILE` reads it, then walked as every consumer walks it: the
    routes between all GPU pairs."""
    from rankmap.topology import load

    p = tmp_path / "topo.json"
    text = json.dumps(doc, ensure_ascii=False)
    p.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        with fuzzing.bounded_memory(len(text)), fuzzing.time_limit(10):
            topo = load(str(p))
            gpus = topo.gpus
            for a in gpus[:4]:
                for b in gpus[:4]:
                    if a.id != b.id:
                        topo.route(a.id, b.id)
    except RankmapError as e:
        refused(e, str(p))


@given(data=st.binary(max_size=64))
@example(data=b"{" + b'"a":[' * 50000)
def test_topology_file_of_any_bytes(tmp_path, data):
    from rankmap.topology import load

    p = tmp_path / "topo.json"
    p.write_bytes(b"{" + data)
    try:
        load(str(p))
    except RankmapError as e:
        refused(e, str(p))


# ---------------------------------------------------------------------------------------------- nvidia-smi topo -m
NVSMI = sorted((DATA / "nvsmi").glob("*.txt")) + sorted((DATA / "live").glob("*nvidia-smi-topo-m.txt"))


@given(sample=st.sampled_from(NVSMI), data=st.data())
def test_nvidia_smi_topo_text(tmp_path, sample, data):
    from rankmap.topology import load

    text = data.draw(mangled_text(sample.read_text()))
    p = tmp_path / "topo.txt"
    p.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        with fuzzing.bounded_memory(len(text)), fuzzing.time_limit(10):
            topo = load(str(p))
            for a in topo.gpus[:3]:
                for b in topo.gpus[:3]:
                    if a.id != b.id:
                        topo.route(a.id, b.id)
    except RankmapError as e:
        refused(e, str(p))


# ---------------------------------------------------------------------------------------------- NCCL graph logs
NCCL_LOGS = sorted((DATA / "nccl").glob("*.log"))


@given(sample=st.sampled_from(NCCL_LOGS), data=st.data())
@example(sample=NCCL_LOGS[0], data=None)
def test_nccl_graph_logs(tmp_path, sample, data):
    """NCCL's INIT/GRAPH lines as the ingest reads them from a run directory: graphs whose rank
    counts are those of the lines, never one inflated to a billion ranks by one number."""
    from rankmap.pairs import nccl_graph

    text = sample.read_text() if data is None else data.draw(mangled_text(sample.read_text()))
    p = tmp_path / "nccl-debug.host.1.log"
    p.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        with fuzzing.bounded_memory(len(text)), fuzzing.time_limit(10):
            graphs = nccl_graph.parse_files([p])
    except RankmapError as e:
        refused(e, str(p))
        return
    for g in graphs.values():
        assert g.nranks <= nccl_graph.MAX_RANKS


# ---------------------------------------------------------------------------------------------- job.json
def a_job() -> dict:
    return {"version": 1, "run_uid": "abc", "command": ["mpirun", "-np", "2", "./a"], "launcher": "openmpi",
            "world_size": 2, "start": "2026-01-01T00:00:00.000000Z", "end": "2026-01-01T00:00:02.000000Z",
            "exit_status": 0, "elapsed_ns": 2 * 10**9, "env": {"RANKMAP_RUN_DIR": "/x"}, "bucket_ms": 100,
            "flush_ms": 1000}


@given(doc=mutated(a_job()))
@example(doc=[1, 2, 3])
@example(doc={**a_job(), "world_size": 930_000_001})
@example(doc={**a_job(), "command": ["tr\udcffue"]})
def test_job_json_through_ingest(tmp_path_factory, doc):
    """`rankmap ingest` of a run directory whose job.json is anything: the job stored, or one line
    naming job.json and the field."""
    from rankmap.pipeline.ingest import ingest_run
    from rankmap.store import open_store

    d = tmp_path_factory.mktemp("run")
    text = json.dumps(doc)
    (d / "job.json").write_text(text)
    store = open_store(f"sqlite:///{d / 'store.db'}")
    try:
        with fuzzing.time_limit(20):
            res = ingest_run(d, store)
    except RankmapError as e:
        refused(e, "job.json")
        return
    job = store.job(res.job_id)
    assert job["world_size"] is None or 1 <= job["world_size"] <= 2**24
