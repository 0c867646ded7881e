"""`rankmap doctor --collectives`: a library version no mirror names gets the mirror once it is checked.

The MPIs installed here are releases the mirrors follow, so the tests meet an unknown version the
way a user would meet a newer build: ``tests/native/fake_mpi_version.c``, preloaded, makes the real
library answer ``MPI_Get_library_version`` with another minor version (Open MPI 4.7, 5.9, MPICH
4.7) while every message is still the real library's. Before the check a profile of such a job
takes the model for its collectives; ``rankmap doctor --collectives`` runs the probe against the
library's own count of its messages (Open MPI's monitoring PML, MPICH's UCX tag sends) and records
the build; the next profile takes the mirror for the collectives found exact, and its pairs are
those of the same job under the real version string.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, cli, rankmap
from rankmap.errors import RankmapError
from rankmap.formats import conformance_json as fmt
from rankmap.pairs import conformance
from rankmap.pairs.call import Call
from rankmap.pairs.library import Library, probe_name

OPENMPI5 = ROOT / ".venv" / "openmpi5" / "bin"
#: name: (compiler wrapper, launch up to the rank count, the version as the library says it, as faked)
MPIS = {
    "openmpi": ("mpicc.openmpi", ["mpirun.openmpi", "--oversubscribe", "-np"], "v4.1.", "v4.7."),
    "openmpi5": (str(OPENMPI5 / "mpicc"), [str(OPENMPI5 / "mpirun"), "--oversubscribe", "-np"], "v5.0.", "v5.9."),
    "mpich": ("mpicc.mpich", ["mpiexec.mpich", "-n"], "Version:\t4.0.", "Version:\t4.7."),
}
OMPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def collective_rows(env: dict) -> dict[tuple[str, int, int], tuple[int, int, str]]:
    out = cli("export", "latest", "--pair-source", env=env)
    assert out.returncode == 0, out.stderr
    return {(r["operation"], int(r["src"]), int(r["dst"])): (int(r["bytes"]), int(r["messages"]), r["pair_source"])
            for r in csv.DictReader(io.StringIO(out.stdout)) if r["class"] == "collective"}


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("mpi", sorted(MPIS))
def test_unknown_version_gets_the_mirror_after_doctor(mpi, tmp_path):
    cc, launch, real, fake = MPIS[mpi]
    if not shutil.which(cc) or not shutil.which(launch[0]):
        pytest.skip(f"{cc} is not installed")
    subprocess.run([cc, "-shared", "-fPIC", f"-DFROM=\"{real}\"", f"-DTO=\"{fake}\"", "-o", str(tmp_path / "fake.so"),
                    str(ROOT / "tests" / "native" / "fake_mpi_version.c"), "-ldl"], check=True)
    subprocess.run([cc, "-O1", "-w", "-o", str(tmp_path / "coll"), str(ROOT / "examples" / "mpi" / "collectives.c")],
                   check=True)
    cmd = [*launch, "4", str(tmp_path / "coll")]
    env = {**OMPI_ENV, "RANKMAP_HOME": str(tmp_path / "home"), "RANKMAP_DB": f"sqlite:///{tmp_path / 'r.db'}"}
    faked = {**env, "LD_PRELOAD": str(tmp_path / "fake.so")}

    p = rankmap("profile", "--no-summary", "--", *cmd, env=env)          # the real version: a mirrored release
    assert p.returncode == 0, p.stderr
    truth = collective_rows(env)
    assert {v[2] for k, v in truth.items() if k[0] == "MPI_Allreduce"} == {"mirror"}

    p = rankmap("profile", "--", *cmd, env=faked)
    assert p.returncode == 0, p.stderr
    before = collective_rows(env)
    assert {v[2] for v in before.values()} == {"model"}, before
    version = fake.split("\t")[-1].lstrip("v")
    assert f"no mirror for {'MPICH' if mpi == 'mpich' else 'Open MPI'} {version}" in " ".join(p.stdout.split())
    assert "rankmap doctor --collectives" in " ".join(p.stdout.split())

    d = rankmap("doctor", "--collectives", "--mpicc", cc, "--ranks", "4", "--sizes", "8,1000,65536", env=faked)
    assert d.returncode == 0, d.stdout + d.stderr
    head = [line for line in d.stdout.splitlines() if line.startswith("OK      collectives")]
    assert head and f"{version}" in head[0] and "mirror reproduces" in head[0], d.stdout
    builds = fmt.read(tmp_path / "home" / "collectives.json")
    assert len(builds) == 1 and builds[0].version.startswith(version) and "allreduce" in builds[0].exact
    exact = {f"MPI_{c[0].upper()}{c[1:]}" for c in builds[0].exact}

    p = rankmap("profile", "--", *cmd, env=faked)
    assert p.returncode == 0, p.stderr
    after = collective_rows(env)
    for key, (b, m, label) in after.items():
        if key[0] in exact:                      # the ops doctor found exact: the mirror, as under the real version
            assert label == "mirror" and truth[key] == (b, m, "mirror"), key
        else:
            assert label == "model", key
    assert {k[0] for k in after} & exact >= {"MPI_Allreduce", "MPI_Bcast", "MPI_Alltoall"}
    text = " ".join(p.stdout.split())
    assert "found exact on" in text and "pairs" in text
    show = cli("show", "latest", env=env)
    summary = p.stdout[p.stdout.index("rankmap job"):p.stdout.index("heaviest pairs")]
    assert "found exact on" in " ".join(summary.split()) and show.stdout.startswith(summary)
    meta = json.loads(cli("export", "latest", "--format", "json", env=env).stdout)["job"]["meta"]
    assert meta["collective_sources"]["MPI_Allreduce"] == "mirror"
    assert meta["collective_sources"]["MPI_Scan"] == "model"
    assert "rankmap doctor --collectives found exact" in meta["collective_mirror"]


# ---- the record and its lookup, without a launch ----------------------------------------------------

def build(tmp_path: Path, version: str = "4.7.1", exact=("allreduce", "bcast"), release=(4, 1),
          inexact=None) -> tuple[fmt.Build, dict[str, str]]:
    lib = tmp_path / "libmpi.so.40"
    if not lib.exists():
        lib.write_bytes(b"\x7fELF a library build")
    b = fmt.Build("Open MPI", version, conformance.fingerprint(lib), f"Open MPI v{version}, package: x", str(lib),
                  release, "Open MPI's monitoring PML", "2025-01-02T03:04:05Z", (4,), (8,), tuple(exact),
                  dict(inexact or {"reduce": "byte L1 20 % (1 of 4 calls)"}))
    return b, {"mpi_library": b.library, "mpi_library_file": str(lib)}


def call(kind: str, form: str = "blocking") -> Call:
    return Call(kind, form, 4, 0, 0, 125, 8, 125, 8)


def test_library_takes_the_mirror_for_what_the_record_found_exact(tmp_path, monkeypatch):
    monkeypatch.setenv("RANKMAP_HOME", str(tmp_path / "home"))
    b, meta = build(tmp_path)
    lib = Library(meta)
    assert lib.mirror is None and "no mirror for Open MPI 4.7.1" in lib.note and "doctor --collectives" in lib.note
    conformance.save(b)
    lib = Library(meta)
    assert lib.mirror is not None and "found exact on Open MPI 4.7.1 (2025-01-02)" in lib.note
    assert lib.mirror.messages(call("allreduce")) is not None and lib.mirror.messages(call("bcast")) is not None
    assert lib.mirror.messages(call("reduce")) is None            # checked, not exact: the model
    assert lib.mirror.messages(call("alltoall")) is None          # not checked, unknown version: the model
    assert lib.mirror.messages(call("allreduce", "persistent")) is None
    # another build of the same version (its file changed) is not the one checked
    Path(meta["mpi_library_file"]).write_bytes(b"\x7fELF rebuilt")
    assert Library(meta).mirror is None
    assert Library(meta, "model").mirror is None


def test_known_release_keeps_its_mirror_and_a_record_narrows_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RANKMAP_HOME", str(tmp_path / "home"))
    b, meta = build(tmp_path, version="4.1.6")
    assert Library(meta).mirror.messages(call("reduce")) is not None      # no record: the release's mirror
    conformance.save(b)
    m = Library(meta).mirror
    assert m.messages(call("reduce")) is None                             # checked and found inexact
    assert m.messages(call("alltoall")) is not None                       # not checked: its release's mirror
    assert m.messages(call("allreduce", "nonblocking")) is not None       # iallreduce: not checked either
    (tmp_path / "home" / "collectives.json").write_text("{not json")
    lib = Library(meta)
    assert lib.mirror.messages(call("reduce")) is not None and "conformance file is unreadable" in lib.note


def test_record_file_is_validated_and_replaced_per_build(tmp_path):
    f = tmp_path / "c.json"
    b, _ = build(tmp_path)
    fmt.put(f, b)
    b2, _ = build(tmp_path, exact=("allreduce",))
    fmt.put(f, b2)
    other, _ = build(tmp_path, version="4.7.2")
    fmt.put(f, other)
    assert [x.exact for x in fmt.read(f)] == [("allreduce",), other.exact]
    doc = json.loads(f.read_text())
    doc["builds"][1]["release"] = [4]
    f.write_text(json.dumps(doc))
    with pytest.raises(RankmapError, match=r"builds\[1\]\.release"):
        fmt.read(f)
    with pytest.raises(RankmapError, match="nothing was recorded"):
        fmt.put(f, b)
    f.write_text(json.dumps({"format": fmt.FORMAT, "version": 9, "builds": []}))
    with pytest.raises(RankmapError, match="version 9"):
        fmt.read(f)


def test_probe_names_and_versions():
    assert [probe_name(call("allreduce")), probe_name(call("bcast", "nonblocking"))] == ["allreduce", "ibcast"]
    assert conformance.name_version("Open MPI v5.0.11, package: x") == ("Open MPI", "5.0.11")
    assert conformance.name_version("MPICH Version:\t4.2.1") == ("MPICH", "4.2.1")
    assert conformance.name_version("Intel(R) MPI Library 2021.9") is None
    assert conformance.release_of("4.1.6") == (4, 1) and conformance.release_of("5.0rc2") == (5, 0)


def test_doctor_collectives_bad_input_is_one_line(tmp_path):
    env = {"RANKMAP_HOME": str(tmp_path / "home")}
    assert_one_line_error(cli("doctor", "--collectives", "--sizes", "8,12", env=env), "--sizes '8,12'", "multiples of 8")
    assert_one_line_error(cli("doctor", "--collectives", "--ranks", "1", env=env), "--ranks '1'")
    assert_one_line_error(cli("doctor", "--collectives", "--mpicc", str(tmp_path / "no-mpicc"), env=env),
                          "no MPI compiler wrapper", "--mpicc")
    assert not (tmp_path / "home").exists()
