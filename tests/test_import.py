"""`rankmap ingest --from kineto|otf2`: jobs from the traces other tools wrote, against rankmap's own profile.

What each comparison proves, and what it does not:

* Kineto: the NCCL harness (tests/nccl_harness/harness.c) drives rankmap's plugin through the
  scenario as NCCL would and the run directory is ingested -- rankmap's profile of that "run";
  tests/kineto_gen.py writes the traces torch.profiler would write for the torch.distributed calls
  that make NCCL run the same scenario. Equal matrices prove that the import reads PyTorch's
  schema as written here (field names and value forms taken from PyTorch's source) and feeds the
  one NCCL model the same operation tables the plugin records. They do not prove that a real
  torch run writes exactly this: the traces recorded on a GPU machine (tests/data/kineto/, made
  by gpu/kineto_record.sh) are that check.
* OTF2: a real Open MPI job under `rankmap profile`, and an archive written with OTF2's bindings
  from the same program's known pattern with Score-P's byte rules (tests/otf2_gen.py), since
  Score-P is not installed here. Equal matrices prove the reading of OTF2's MPI records and the
  recovery of each collective's block from Score-P's counts, through the same mirror; not that
  Score-P's records of this run would be these (its rules are followed from its source).
"""

from __future__ import annotations

import csv
import os
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, ROOT, assert_one_line_error, cli, rankmap
import kineto_gen
import otf2_gen
from test_nccl_plugin import harness, plugin, run_ranks  # noqa: F401  (fixtures)

MPIRUN = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np"]


def pairs(db: str, job: str) -> dict[tuple[int, int, str], int]:
    """(src, dst, operation) -> bytes of a stored job, through `rankmap export` (CSV)."""
    p = cli("export", job, "--db", db)
    assert p.returncode == 0, p.stderr
    out: dict[tuple[int, int, str], int] = {}
    for r in csv.DictReader(io.StringIO(p.stdout)):
        k = (int(r["src"]), int(r["dst"]), r["operation"])
        out[k] = out.get(k, 0) + int(r["bytes"])
    return out


def l1(a: dict, b: dict) -> float:
    """Per-pair L1 distance of two matrices over the first's total."""
    return sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b)) / max(sum(a.values()), 1)


def jobs(db: str) -> list[dict]:
    return json.loads(cli("jobs", "--format", "json", "--db", db).stdout)


def job_doc(db: str, job: str) -> dict:
    """The stored job itself (launcher, metadata), as `rankmap export --format json` gives it."""
    return json.loads(cli("export", job, "--format", "json", "--db", db).stdout)["job"]


# ------------------------------------------------------------------------------------------ Kineto

def test_kineto_import_equals_rankmaps_profile_of_the_same_scenario(plugin, harness, tmp_path):  # noqa: F811
    n = 4
    run = tmp_path / "run"
    run.mkdir()
    for p in run_ranks(harness, plugin, 7, run, n=n):
        assert p.returncode == 0, p.stderr
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert cli("ingest", str(run), "--db", db).returncode == 0
    traces = kineto_gen.write(tmp_path / "traces", *kineto_gen.harness_scenario(n))
    got = cli("ingest", "--from", "kineto", *map(str, traces), "--db", db)
    assert got.returncode == 0, got.stderr
    assert f"from {n} kineto traces: {n} ranks" in got.stdout
    profiled, imported = pairs(db, "1"), pairs(db, "2")
    assert imported == profiled                              # p2p and collectives alike, to the byte
    assert {op for _s, _d, op in imported} >= {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
                                              "ncclBroadcast", "ncclReduce", "ncclSend"}
    job = job_doc(db, "2")
    assert job["launcher"] == "kineto" and job["state"] == "finished" and job["meta"]["source"] == "kineto", job
    shown = cli("show", "2", "--db", db)
    assert shown.returncode == 0 and "launcher kineto" in shown.stdout, shown.stderr
    placed = cli("map", "--job", "2", "--topology", "dgx-a100", "--db", db, "--format", "json")
    assert placed.returncode == 0, placed.stderr
    assert len(json.loads(placed.stdout)["mapping"]) == n


def test_kineto_import_follows_the_rings_of_a_nccl_log(tmp_path):
    """With NCCL's INFO log of the run, a group's collectives follow its rings (label mirror);
    without, rank order (model), and the job says which."""
    n, count = 4, 1 << 20
    g = kineto_gen.Group("0", "default_pg", tuple(range(n)))
    calls = {r: [kineto_gen.Call("allreduce", g, count, count, "Float", r,
                                 kineto_gen.kernel("AllReduce", "Float", "RING", "SIMPLE"))] for r in range(n)}
    traces = kineto_gen.write(tmp_path / "t", [g], calls)
    log = DATA / "nccl" / "nvlink-mesh-4xv100.log"          # rings 0 -> 2 -> 1 -> 3 -> 0, ...
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert cli("ingest", "--from", "kineto", *map(str, traces), "--nccl-log", str(log), "--db", db).returncode == 0
    assert cli("ingest", "--from", "kineto", *map(str, traces), "--db", db).returncode == 0
    with_log, without = jobs(db)[1], jobs(db)[0]
    meta = job_doc(db, str(with_log["id"]))["meta"]
    assert "rings and trees of 1 process group" in meta["nccl_graph"], meta
    assert "none" in job_doc(db, str(without["id"]))["meta"]["nccl_graph"]
    p = cli("export", str(with_log["id"]), "--pair-source", "--db", db)
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert {r["pair_source"] for r in rows} == {"mirror"}
    ring = {(0, 2), (2, 1), (1, 3), (3, 0)}
    assert ring <= {(int(r["src"]), int(r["dst"])) for r in rows}
    total = sum(int(r["bytes"]) for r in rows)
    assert total == n * (2 * (n - 1) * count * 4 // n)       # the ring volume of every rank, all of it sent
    plain = {(int(r["src"]), int(r["dst"])) for r in csv.DictReader(io.StringIO(
        cli("export", str(without["id"]), "--pair-source", "--db", db).stdout))}
    assert plain == {(r, (r + 1) % n) for r in range(n)}     # rank order without the log


def test_kineto_bad_input_is_one_line_naming_the_file(tmp_path):
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    good = kineto_gen.write(tmp_path / "ok", *kineto_gen.harness_scenario(2))
    doc = json.loads(good[0].read_text())
    cases = {}
    cases["garbage"] = b"{not json"
    cases["chrome"] = json.dumps({"traceEvents": "no list"}).encode()
    missing = json.loads(json.dumps(doc))
    for e in missing["traceEvents"]:
        if e.get("name") == "record_param_comms":
            e["args"].pop("In msg nelems")
    cases["missing-field"] = json.dumps(missing).encode()
    nodist = dict(doc)
    nodist.pop("distributedInfo")
    cases["no-rank"] = json.dumps(nodist).encode()
    quiet = dict(doc, traceEvents=[e for e in doc["traceEvents"] if e.get("name") != "record_param_comms"])
    cases["no-comms"] = json.dumps(quiet).encode()
    needles = {"garbage": "not a PyTorch profiler trace", "chrome": "no traceEvents list",
               "missing-field": "lacks 'In msg nelems'", "no-rank": "no distributedInfo.rank",
               "no-comms": "no record_param_comms events"}
    for name, body in cases.items():
        f = tmp_path / f"{name}.json"
        f.write_bytes(body)
        assert_one_line_error(cli("ingest", "--from", "kineto", str(f), "--db", db), str(f), needles[name])
    assert_one_line_error(cli("ingest", "--from", "kineto", str(good[0]), str(good[0]), "--db", db),
                          str(good[0]), "rank 0 again")
    assert_one_line_error(cli("ingest", "--from", "kineto", str(tmp_path / "absent.json"), "--db", db), "absent.json")
    assert jobs(db) == []                                    # nothing stored by any of them


def test_kineto_trace_recorded_by_torch(tmp_path):
    """The traces gpu/kineto_record.sh recorded with torch on a GPU machine: their import equals the
    profile rankmap took of the same run (profile.csv beside them), to the byte for p2p and within
    1 % per pair for the collectives."""
    runs = sorted(p.parent for p in (DATA / "kineto").glob("*/profile.csv"))
    if not runs:
        pytest.skip("no torch recordings in tests/data/kineto (gpu/kineto_record.sh makes them)")
    for run in runs:
        db = f"sqlite:///{tmp_path / (run.name + '.sqlite')}"
        traces = sorted(run.glob("rank*.json*"))
        got = cli("ingest", "--from", "kineto", *map(str, traces), "--db", db)
        assert got.returncode == 0, got.stderr
        imported = pairs(db, "latest")
        profiled: dict = {}
        for r in csv.DictReader(io.StringIO((run / "profile.csv").read_text())):
            k = (int(r["src"]), int(r["dst"]), r["operation"])
            profiled[k] = profiled.get(k, 0) + int(r["bytes"])
        p2p = {"ncclSend", "ncclRecv"}
        assert {k: v for k, v in imported.items() if k[2] in p2p} == {k: v for k, v in profiled.items() if k[2] in p2p}
        assert l1({k: v for k, v in profiled.items() if k[2] not in p2p},
                  {k: v for k, v in imported.items() if k[2] not in p2p}) <= 0.01, run


# ------------------------------------------------------------------------------------------ OTF2

@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    if not shutil.which("mpicc.openmpi"):
        pytest.skip("Open MPI (mpicc.openmpi) is not installed")
    pytest.importorskip("otf2")
    out = tmp_path_factory.mktemp("progs")
    for name in ("ring", "coll_mix"):
        subprocess.run(["mpicc.openmpi", "-O2", "-o", str(out / name), str(ROOT / "examples" / "mpi" / f"{name}.c")],
                       check=True)
    return {p.name: p for p in out.iterdir()}


@pytest.mark.mpi
@pytest.mark.slow
def test_otf2_import_equals_rankmaps_profile_of_the_same_program(programs, tmp_path):
    n, nbytes, iters, sizes = 4, 3000, 7, [4096, 65536]
    env = {"RANKMAP_HOME": str(tmp_path / "home")}
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    for name, args, events in (("ring", [nbytes, iters], otf2_gen.ring_events(n, nbytes, iters)),
                               ("coll_mix", sizes, otf2_gen.coll_mix_events(n, sizes))):
        p = rankmap("profile", "--no-summary", "--db", db, "--", *MPIRUN, str(n), str(programs[name]),
                    *map(str, args), env=env, timeout=300)
        assert p.returncode == 0, p.stderr
        job = jobs(db)[0]
        from rankmap.formats import record
        library = record.read_dir(job["run_dir"], source="mpi")[0].meta["mpi_library"]
        archive = otf2_gen.write(tmp_path / f"{name}-otf2", n, events)
        got = cli("ingest", "--from", "otf2", str(archive), "--mpi-library", library, "--db", db)
        assert got.returncode == 0, got.stderr
        profiled, imported = pairs(db, str(job["id"])), pairs(db, "latest")
        assert job_doc(db, "latest")["launcher"] == "otf2"
        if name == "ring":                                   # p2p: exact, and what ring.c sends
            assert imported == profiled
            assert imported == {(r, (r + 1) % n, "MPI_Isend"): nbytes * iters for r in range(n)}
        else:                                                # collectives through the same mirror
            assert l1(profiled, imported) <= 0.01, (profiled, imported)
            assert {op for *_x, op in imported} == {"MPI_Allreduce", "MPI_Allgather", "MPI_Bcast", "MPI_Reduce",
                                                    "MPI_Reduce_scatter_block", "MPI_Alltoall", "MPI_Gather",
                                                    "MPI_Scatter"}


def test_otf2_collectives_without_a_library_follow_the_model(tmp_path):
    pytest.importorskip("otf2")
    n = 4
    archive = otf2_gen.write(tmp_path / "a", n, otf2_gen.coll_mix_events(n, [4096]))
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    got = cli("ingest", "--from", "otf2", str(archive / "traces.otf2"), "--db", db)
    assert got.returncode == 0, got.stderr
    rows = list(csv.DictReader(io.StringIO(cli("export", "latest", "--pair-source", "--db", db).stdout)))
    assert rows and {r["pair_source"] for r in rows} == {"model"}
    meta = job_doc(db, "latest")["meta"]
    assert meta["source"] == "otf2" and "model" in meta["collectives"], meta


def test_otf2_bad_input_is_one_line(tmp_path, monkeypatch):
    pytest.importorskip("otf2")
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "traces.otf2").write_bytes(b"this is no OTF2 anchor file\n" * 4)
    assert_one_line_error(cli("ingest", "--from", "otf2", str(bad), "--db", db), str(bad / "traces.otf2"),
                          "not a readable OTF2 archive")
    assert_one_line_error(cli("ingest", "--from", "otf2", str(tmp_path / "none"), "--db", db), "none",
                          "no OTF2 anchor file")
    good = otf2_gen.write(tmp_path / "g", 2, otf2_gen.ring_events(2, 8, 1))
    assert_one_line_error(cli("ingest", "--from", "otf2", str(good), str(good), "--db", db), "one archive")
    monkeypatch.setitem(sys.modules, "otf2", None)           # the bindings not installed
    assert_one_line_error(cli("ingest", "--from", "otf2", str(good), "--db", db), "rankmap[otf2]")
    assert jobs(db) == []


@pytest.mark.gpu_dry
@pytest.mark.slow
def test_gpu_kineto_record_dry_path(tmp_path):
    """gpu/kineto_record.sh's dry path: its worker compiles, and its checks pass on a generated trace
    against the NCCL harness's profile of the same scenario (the comparison the GPU run makes)."""
    p = subprocess.run(["bash", str(ROOT / "gpu" / "kineto_record.sh")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DRY": "1", "OUT": str(tmp_path), "PYTHON": sys.executable})
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert sum(l.startswith("PASS ") for l in lines) == 4 and not any(l.startswith("FAIL") for l in lines), p.stdout
